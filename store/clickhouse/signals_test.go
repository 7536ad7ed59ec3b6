package clickhouse

import (
	"context"
	"runtime"
	"testing"
)

type probe struct{ n int }

// A nil dereference in any goroutine must stay a Go panic once the engine
// runs. Under the engine's own SIGSEGV handler this test does not fail: the
// whole test binary hangs for five minutes and dies of "signal:
// segmentation fault".
func TestGoPanicsSurviveTheEngine(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	if _, err := s.Query(context.Background(), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		var p *probe
		t.Log(p.n)
	}()
	if err, ok := recovered.(runtime.Error); !ok {
		t.Fatalf("a nil dereference recovered %v, want a runtime error", recovered)
	} else {
		t.Log("recovered:", err)
	}
	// The engine still answers after the panic.
	if _, err := s.Query(context.Background(), "SELECT count() FROM numbers(1000)"); err != nil {
		t.Fatal(err)
	}
}
