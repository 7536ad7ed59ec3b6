package analysis_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/storetest"
)

// A diagnosis reads its window and baseline in one statement when both
// plans read the same table and the ranges do not overlap, and gets
// exactly what reading them apart gets: the same rows on each side, the
// same sizes, estimated alike.
func TestLoadPairMatchesSeparateReads(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	insertEvenly(t, srv, now, 40_000, 500*time.Millisecond, 900) // 5.5 h
	window := diagnose.Range{From: now.Add(-time.Hour), To: now.Add(time.Second)}
	baseline := diagnose.DefaultBaseline(window)
	f := analysis.RequestFilter{Project: 1, Service: "chat"}
	q := &analysis.Queries{CH: srv.CH}
	for _, c := range []struct {
		name           string
		b              diagnose.Range
		limitA, limitB int
		statements     int
	}{
		{"both whole", baseline, 40_000, 40_000, 1},
		{"window whole, baseline sampled from llm_requests", baseline, 20_000, 10_000, 1},
		{"both from the stored sample", baseline, 300, 1_000, 1},
		{"stored sample, baseline from its first level", baseline, 300, 60, 1},
		{"different tables", baseline, 20_000, 800, 2},
		{"overlapping", diagnose.Range{From: window.From.Add(-2 * time.Hour), To: window.From.Add(30 * time.Minute)}, 20_000, 10_000, 2},
	} {
		roughA, roughB := countRows(t, srv, window), countRows(t, srv, c.b)
		if pa, pb := analysis.PlanSample(roughA, c.limitA), analysis.PlanSample(roughB, c.limitB); (pa.Table == pb.Table) != (c.statements == 1) && c.name != "overlapping" {
			t.Fatalf("%s: plans read %s and %s", c.name, pa.Table, pb.Table)
		}
		wantA, err := q.Load(ctx, f, window, roughA, c.limitA)
		if err != nil {
			t.Fatal(err)
		}
		wantB, err := q.Load(ctx, f, c.b, roughB, c.limitB)
		if err != nil {
			t.Fatal(err)
		}
		rec := &clickhouse.Recorder{}
		gotA, gotB, err := q.LoadPair(clickhouse.WithRecorder(ctx, rec), f, window, c.b, roughA, roughB, c.limitA, c.limitB)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(gotA, wantA) || !reflect.DeepEqual(gotB, wantB) {
			t.Errorf("%s: window %d rows (of %d, estimated %v), baseline %d (of %d, %v); read apart %d (%d, %v), %d (%d, %v)", c.name,
				len(gotA.Reqs), gotA.SampledFrom, gotA.Estimated, len(gotB.Reqs), gotB.SampledFrom, gotB.Estimated,
				len(wantA.Reqs), wantA.SampledFrom, wantA.Estimated, len(wantB.Reqs), wantB.SampledFrom, wantB.Estimated)
		}
		if len(gotA.Reqs) == 0 || len(gotB.Reqs) == 0 {
			t.Errorf("%s: nothing read", c.name)
		}
		reads := 0
		for _, st := range rec.Statements() {
			if strings.HasPrefix(st.SQL, "SELECT project_id, trace_id") {
				reads++
			}
		}
		if reads != c.statements {
			t.Errorf("%s: %d reads, want %d", c.name, reads, c.statements)
		}
	}
}

func countRows(t *testing.T, srv storetest.Stores, r diagnose.Range) int {
	t.Helper()
	res, err := srv.CH.Query(context.Background(), "SELECT count() AS n FROM llm_requests WHERE project_id = 1 AND start >= ? AND start < ?", r.From, r.To)
	if err != nil {
		t.Fatal(err)
	}
	return int(res.Row(0).Int("n"))
}
