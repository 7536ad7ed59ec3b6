package clickhouse

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// jemallocConfEnv is where the jemalloc linked into libchdb reads its
// options (its symbols carry the je_ prefix, hence the name).
const jemallocConfEnv = "JE_MALLOC_CONF"

// jemallocChildEnv makes TestJemallocConf's child process report the
// engine's allocator options instead of starting children of its own.
const jemallocChildEnv = "TOKENPATH_TEST_JEMALLOC_CHILD"

var jemallocDecayOpt = regexp.MustCompile(`(?m)^\s*opt\.dirty_decay_ms: (-?\d+)`)

// The engine's allocator takes its options from JE_MALLOC_CONF, the knob
// docs/operations.md gives operators, and keeps the engine's own decay
// (5000 ms) without it. jemalloc reads its options once, when libchdb
// loads, so each case runs in a child process of this test binary.
func TestJemallocConf(t *testing.T) {
	if os.Getenv(jemallocChildEnv) != "" {
		s := openTemp(t, t.TempDir())
		defer s.Close()
		r, err := s.Query(context.Background(), "SELECT stats FROM system.jemalloc_stats")
		if err != nil {
			t.Fatal(err)
		}
		m := jemallocDecayOpt.FindStringSubmatch(r.Row(0).String("stats"))
		if m == nil {
			t.Fatal("no opt.dirty_decay_ms in system.jemalloc_stats")
		}
		fmt.Printf("dirty_decay_ms=%s\n", m[1])
		return
	}
	// The operator's variable, if any, stays out of the children.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, jemallocConfEnv+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, jemallocChildEnv+"=1")
	for _, c := range []struct {
		name, conf, want string
	}{
		{"engine's own", "", "5000"},
		{"operator's setting", "dirty_decay_ms:2500", "2500"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestJemallocConf$", "-test.count=1")
			cmd.Env = env
			if c.conf != "" {
				cmd.Env = append(cmd.Env, jemallocConfEnv+"="+c.conf)
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			if got := regexp.MustCompile(`dirty_decay_ms=(-?\d+)`).FindSubmatch(out); got == nil || string(got[1]) != c.want {
				t.Errorf("engine's dirty_decay_ms: child said %q, want %s", out, c.want)
			}
		})
	}
}
