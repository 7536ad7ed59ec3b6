package assembler

import (
	"context"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/ingest"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// slowCommit is the real store behind an insert of spans that is slow to
// commit, as the engine's are under load: the rows take their inserted_at
// when the insert begins (the engine's now64 default does the same) and
// become visible only when release is closed.
type slowCommit struct {
	ch      *clickhouse.Store
	began   chan struct{}
	release chan struct{}
}

func (s *slowCommit) Insert(ctx context.Context, b *clickhouse.Batch) error {
	if b.Table == "spans" {
		at := make([]time.Time, b.Rows())
		for i := range at {
			at[i] = time.Now()
		}
		b.Columns = append(b.Columns, clickhouse.BatchColumn{Name: "inserted_at", Type: "DateTime64(9, 'UTC')", Data: at})
		close(s.began)
		<-s.release
	}
	return s.ch.Insert(ctx, b)
}

// A pass while the pipeline's insert is still committing stays behind the
// insert's start: rows stored since (visible at once) wait, and the slow
// insert's rows, older by inserted_at than those, are not skipped. With
// only the 2 s Lag, a pass over the fast rows moved the watermark past the
// slow rows before they were visible, and their requests were never
// assembled (bench ingest lost 2.6 % of its requests on a slow machine).
func TestAssemblerStaysBehindRunningInserts(t *testing.T) {
	a := openAssembler(t)
	ctx := context.Background()
	slow := &slowCommit{ch: a.CH, began: make(chan struct{}), release: make(chan struct{})}
	p, err := ingest.NewPipeline(t.TempDir(), slow, ingest.PipelineConfig{}, a.Log)
	if err != nil {
		t.Fatal(err)
	}
	a.Writing = p.WritingSince
	if _, ok := p.WritingSince(); ok {
		t.Fatal("WritingSince reports an insert before any began")
	}
	t0 := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Minute)
	if err := p.Submit(ctx, ingest.Record{Kind: ingest.KindTraces, ProjectID: 1},
		ingest.Rows{Spans: []telemetry.Span{agentSpan("slow", "c1", "", t0, true)}}); err != nil {
		t.Fatal(err)
	}
	flushed := make(chan error, 1)
	before := time.Now()
	go func() { flushed <- p.Flush(ctx) }()
	<-slow.began
	if since, ok := p.WritingSince(); !ok || since.Before(before) || since.After(time.Now()) {
		t.Fatalf("WritingSince = %v, %v during the insert, want a time after %v", since, ok, before)
	}
	a.mustInsert(t, agentSpan("fast", "c1", "", t0, true))
	a.mustStep(t)
	close(slow.release)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if _, ok := p.WritingSince(); ok {
		t.Error("WritingSince still reports an insert after the flush")
	}
	a.mustStep(t)
	for _, trace := range []string{"slow", "fast"} {
		if rows := liveRows(t, a, trace); len(rows) != 1 {
			t.Errorf("trace %s: %d rows assembled, want 1", trace, len(rows))
		}
	}
}
