package assembler

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestAssemblerPassSaysMore: a pass bounded by MaxSpans says more traces
// wait (Run starts the next pass at once instead of on the next tick); the
// pass that takes the rest says none do.
func TestAssemblerPassSaysMore(t *testing.T) {
	a := openAssembler(t)
	a.MaxSpans = 4 // two of the inserts below
	now := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Minute)
	for _, trace := range []string{"m1", "m2", "m3"} { // three inserts, three inserted_at
		a.mustInsert(t, agentSpan(trace, "root", "", now, false), agentSpan(trace, "c1", "root", now.Add(time.Millisecond), true))
	}
	ctx := context.Background()
	for i, want := range []struct {
		n    int
		more bool
	}{{2, true}, {1, false}, {0, false}} {
		n, more, err := a.step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n != want.n || more != want.more {
			t.Errorf("pass %d: %d traces, more %v; want %d, %v", i+1, n, more, want.n, want.more)
		}
	}
}

// TestAssemblerRestsBetweenChainedPasses: Run rests after a pass that left
// more for the next, as long as the pass took, and not after one that
// caught up.
func TestAssemblerRestsBetweenChainedPasses(t *testing.T) {
	a := openAssembler(t)
	a.MaxSpans = 4 // two of the three inserts below
	a.Interval = 20 * time.Millisecond
	var mu sync.Mutex
	var rests []time.Duration
	a.rest = func(_ context.Context, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		rests = append(rests, d)
	}
	runUntilAssembled(t, a, []string{"r1", "r2", "r3"}, 10*a.Interval) // then passes that find nothing: no rest
	mu.Lock()
	defer mu.Unlock()
	if len(rests) != 1 || rests[0] <= 0 || rests[0] > 10*time.Second {
		t.Errorf("rests %v, want one after the first pass, as long as it took", rests)
	}
}

// TestNextRestRatio: the rest after a chained pass doubles while more than
// 1 % of the acknowledgements during it were slow, up to 4× the pass's
// time, and halves back to 1× once they are not. Once hardly any exports
// arrive (a burst is over) it drops to a quarter.
func TestNextRestRatio(t *testing.T) {
	for _, c := range []struct {
		ratio     float64
		all, slow uint64
		want      float64
	}{
		{0, 0, 0, 0.25},     // the first pass, no exports
		{1, 1000, 5, 1},     // 0.5 % slow
		{1, 1000, 11, 2},    // 1.1 % slow
		{2, 1000, 200, 4},   // 20 % slow
		{4, 1000, 1000, 4},  // at most 4
		{4, 1000, 0, 2},     // receivers fast again
		{1, 1000, 0, 1},     // at least 1 while exports arrive
		{0.25, 1000, 0, 1},  // exports again after an idle stretch
		{0.25, 1000, 20, 2}, // slow ones at once: twice 1
		{4, 10, 10, 0.25},   // too few to protect: catch up
		{9, 1000, 1000, 4},  // never above 4
	} {
		if got := nextRestRatio(c.ratio, c.all, c.slow); got != c.want {
			t.Errorf("nextRestRatio(%v, %d, %d) = %v, want %v", c.ratio, c.all, c.slow, got, c.want)
		}
	}
}

// While the receivers' acknowledgements are slow, Run rests longer after
// each chained pass: twice the pass's time, then four times.
func TestAssemblerRestsLongerWhileAcksAreSlow(t *testing.T) {
	a := openAssembler(t)
	a.MaxSpans = 2 // one insert a pass
	a.Interval = 20 * time.Millisecond
	var acks, slow uint64
	a.Acks = func() (uint64, uint64) {
		acks, slow = acks+100, slow+50 // half of every pass's exports slow
		return acks, slow
	}
	var ratios []float64
	a.rest = func(context.Context, time.Duration) { ratios = append(ratios, a.restRatio) }
	runUntilAssembled(t, a, []string{"s1", "s2", "s3", "s4"}, 0)
	if want := []float64{2, 4, 4}; !slices.Equal(ratios, want) {
		t.Errorf("rest ratios %v, want %v (one rest after each pass that left more)", ratios, want)
	}
}

// With no exports arriving, Run rests only a quarter of each chained
// pass's time: nothing competes with it but the pages.
func TestAssemblerCatchesUpWhileIdle(t *testing.T) {
	a := openAssembler(t)
	a.MaxSpans = 2 // one insert a pass
	a.Interval = 20 * time.Millisecond
	a.Acks = func() (uint64, uint64) { return 1000, 500 } // none since the start
	var ratios []float64
	a.rest = func(context.Context, time.Duration) { ratios = append(ratios, a.restRatio) }
	runUntilAssembled(t, a, []string{"s1", "s2", "s3"}, 0)
	if want := []float64{restWhenIdle, restWhenIdle}; !slices.Equal(ratios, want) {
		t.Errorf("rest ratios %v, want %v (one rest after each pass that left more)", ratios, want)
	}
}

// runUntilAssembled inserts an agent trace of each id, one insert each,
// runs the assembler until the last is assembled and settle more, and
// stops it.
func runUntilAssembled(t *testing.T, a *Assembler, traces []string, settle time.Duration) {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Minute)
	for _, trace := range traces {
		a.mustInsert(t, agentSpan(trace, "root", "", now, false), agentSpan(trace, "c1", "root", now.Add(time.Millisecond), true))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		a.Run(ctx)
		close(done)
	}()
	last := traces[len(traces)-1]
	for deadline := time.Now().Add(30 * time.Second); len(liveRows(t, a, last)) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("%s not assembled within 30 s", last)
		}
	}
	time.Sleep(settle)
	cancel()
	<-done
}
