// Package chtest reads what tests check of the embedded engine from the
// operating system: the nice values of this process's threads, which the
// engine lowers for the assembler's reads and for its merges.
package chtest

import (
	"os"
	"strconv"
	"strings"
)

// Thread is one of this process's threads.
type Thread struct {
	TID  int
	Comm string // its name, e.g. MergeMutate
	Nice int
}

// Threads lists this process's threads from /proc (Linux); threads that end
// while it reads are left out.
func Threads() []Thread {
	tasks, _ := os.ReadDir("/proc/self/task")
	out := make([]Thread, 0, len(tasks))
	for _, task := range tasks {
		stat, err := os.ReadFile("/proc/self/task/" + task.Name() + "/stat")
		if err != nil {
			continue // the thread ended
		}
		// "tid (comm) state …": the comm may hold spaces and parentheses,
		// so fields are counted after its last ')'; state is the first of
		// them and nice the 17th.
		s := string(stat)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 17 {
			continue
		}
		tid, _ := strconv.Atoi(task.Name())
		nice, _ := strconv.Atoi(f[16])
		out = append(out, Thread{TID: tid, Comm: s[open+1 : end], Nice: nice})
	}
	return out
}

// CanNice reports whether this process holds CAP_SYS_NICE (bit 23 of its
// effective capabilities): the engine sets nice values only then.
func CanNice() bool {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(status), "\n") {
		if hex, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			return err == nil && caps&(1<<23) != 0
		}
	}
	return false
}
