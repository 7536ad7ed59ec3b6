// Package enginetest helps tests look at the embedded engine from outside:
// its threads share the test's process.
package enginetest

import (
	"os"
	"strconv"
	"strings"
)

// Thread is one thread of this process: its name (comm, as the engine
// names its pools: "MergeMutate", "QueryPipelineEx", …) and nice value.
type Thread struct {
	Comm string
	Nice int
}

// Threads lists this process's threads from /proc/self/task; threads that
// end while it reads are left out.
func Threads() ([]Thread, error) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	out := make([]Thread, 0, len(tasks))
	for _, tk := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + tk.Name() + "/stat")
		if err != nil {
			continue // the thread ended
		}
		st := string(b)
		open, end := strings.IndexByte(st, '('), strings.LastIndexByte(st, ')')
		if open < 0 || end < open {
			continue
		}
		// Fields after "(comm) ": state is the first, nice the 17th.
		f := strings.Fields(st[end+1:])
		if len(f) < 17 {
			continue
		}
		nice, err := strconv.Atoi(f[16])
		if err != nil {
			continue
		}
		out = append(out, Thread{Comm: st[open+1 : end], Nice: nice})
	}
	return out, nil
}
