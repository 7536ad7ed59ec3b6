package analysis

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis/analysistest"
	"github.com/tokenpath/tokenpath/analysis/assembler"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/postgres"
)

// The detector runs a pass as soon as it starts, and another as soon as
// the assembler's watermark crosses a minute, not a tick later: an
// episode whose healthy minutes arrived (late, as after a restart) is
// closed once the assembler has them, with the tick an hour away.
func TestEpisodeDetectorRunsAsAssemblyAdvances(t *testing.T) {
	start := time.Now().UTC().Truncate(time.Minute).Add(-5 * time.Hour)
	at := func(m int) time.Time { return start.Add(time.Duration(m) * time.Minute) }
	a, bg := detectorStores(t, analysistest.ChatRequests(1, start, 300, analysistest.QueueIncident{From: 282, To: 400}))
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	var mu sync.Mutex
	now, assembled := at(300), time.Now().UTC()
	clock := func(t *time.Time) func() time.Time {
		return func() time.Time { mu.Lock(); defer mu.Unlock(); return *t }
	}
	asm := &assembler.Assembler{CH: a.CH, PG: a.PG, Now: clock(&assembled)}
	if _, err := asm.Step(ctx); err != nil {
		t.Fatal(err)
	}
	d := &EpisodeDetector{Queries: &Queries{CH: a.CH}, PG: a.PG, Now: clock(&now), Progress: asm,
		Interval: time.Hour, Poll: 20 * time.Millisecond}
	go d.Run(ctx)
	vllm := func(want func(postgres.Episode) bool, within time.Duration) (postgres.Episode, bool) {
		t.Helper()
		var last postgres.Episode
		for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			eps, err := a.PG.Episodes(ctx, 1, "vllm", start, at(400))
			if err != nil {
				t.Fatal(err)
			}
			if len(eps) == 1 {
				last = eps[0]
				if want(last) {
					return last, true
				}
			}
		}
		return last, false
	}
	ongoing := func(e postgres.Episode) bool { return e.End == nil && e.Start.Equal(at(282)) }
	if e, ok := vllm(ongoing, 10*time.Second); !ok {
		t.Fatalf("no pass at start: vllm's episode %+v, want ongoing since %v", e, at(282))
	}

	// The incident ended at 310 and 20 healthy minutes followed; their
	// requests are stored, but until the assembler says so no pass reads
	// them.
	if err := a.CH.Insert(ctx, clickhouse.RequestsBatch(analysistest.ChatRequests(2, at(300), 30, analysistest.QueueIncident{From: 0, To: 10}), nil, 1)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = at(330)
	mu.Unlock()
	ended := func(e postgres.Episode) bool { return e.End != nil && e.End.Equal(at(310)) }
	if e, ok := vllm(ended, 300*time.Millisecond); ok {
		t.Fatalf("a pass ran with neither the tick nor the assembler advancing: %+v", e)
	}
	mu.Lock()
	assembled = assembled.Add(2 * time.Minute)
	mu.Unlock()
	if _, err := asm.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if e, ok := vllm(ended, 10*time.Second); !ok {
		t.Errorf("the assembler advanced a minute and no pass closed the episode: %+v, want ended at %v", e, at(310))
	}
}
