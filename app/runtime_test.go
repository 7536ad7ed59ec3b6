package app

import (
	"math"
	"runtime/debug"
	"testing"
)

// TuneRuntime sets the collector defaults, and leaves alone what the
// environment sets.
func TestTuneRuntime(t *testing.T) {
	gc, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(gc); debug.SetMemoryLimit(limit) })

	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	TuneRuntime()
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Errorf("GOGC unset: GC percent %d, want %d", got, gcPercent)
	}
	if got := debug.SetMemoryLimit(math.MaxInt64); got != memoryLimit {
		t.Errorf("GOMEMLIMIT unset: memory limit %d, want %d", got, memoryLimit)
	}

	t.Setenv("GOGC", "150")
	t.Setenv("GOMEMLIMIT", "1GiB")
	TuneRuntime()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC set: GC percent changed to %d", got)
	}
	if got := debug.SetMemoryLimit(math.MaxInt64); got != math.MaxInt64 {
		t.Errorf("GOMEMLIMIT set: memory limit changed to %d", got)
	}
}
