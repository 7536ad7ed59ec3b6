package analysis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/storetest"
	"github.com/tokenpath/tokenpath/telemetry"
)

// A diagnosis of 12 hours or more sizes its window and baseline from the
// hourly name counts (no count of llm_requests): a quiet service is still
// read whole, a busy one sampled, both with their exact size, and the
// quiet one's inference service's gauges are found. A 1-hour diagnosis counts
// llm_requests (whole hours would overcount it).
func TestDiagnosisSizedFromNames(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	insertBusyAndQuiet(t, srv, now, "vllm-batch")
	gauge := telemetry.MetricPoint{ProjectID: 1, Time: now.Add(-2 * time.Hour), Service: "vllm-batch", Instance: "pod-0",
		Name: diagnose.MetricKVCacheUsage, Value: 0.97}
	if err := srv.CH.Insert(ctx, clickhouse.MetricsBatch([]telemetry.MetricPoint{gauge})); err != nil {
		t.Fatal(err)
	}
	rec := &clickhouse.Recorder{}
	ctx = clickhouse.WithRecorder(ctx, rec)
	counted := func() (out []string) {
		for _, st := range rec.Statements() {
			if strings.HasPrefix(st.SQL, "SELECT countIf(") || strings.HasPrefix(st.SQL, "SELECT count() AS n FROM llm_requests WHERE") {
				out = append(out, st.SQL)
			}
		}
		return out
	}
	q := &analysis.Queries{CH: srv.CH, MaxRows: 5_000}
	day := diagnose.Range{From: now.Add(-24 * time.Hour), To: now.Add(time.Second)}
	for _, c := range []struct {
		service string
		n       int
		sampled bool
	}{{"batch", 2000, false}, {"chat", 20_000, true}} {
		d, err := q.Diagnose(ctx, analysis.DiagnoseRequest{Project: 1, Window: day, Service: c.service})
		if err != nil {
			t.Fatal(err)
		}
		// The busy window's size comes from its series (the rollups count
		// every request).
		if sampled := d.AnalyzedRequests < d.Requests; sampled != c.sampled || d.Requests != c.n || d.RequestsEstimated {
			t.Errorf("%s: %d requests (%d analyzed, estimated %v), want %d (sampled %v)", c.service, d.Requests, d.AnalyzedRequests,
				d.RequestsEstimated, c.n, c.sampled)
		}
		if c.service == "batch" && (len(d.Series) == 0 || !hasGauge(d.Series, 0.97)) {
			t.Errorf("batch: the inference service's KV-cache gauge is not on the chart")
		}
	}
	if c := counted(); len(c) > 0 {
		t.Errorf("a 24-hour diagnosis counted llm_requests to size itself: %s", c[0])
	}
	if _, err := q.Diagnose(ctx, analysis.DiagnoseRequest{Project: 1, Window: diagnose.Range{From: now.Add(-time.Hour), To: now.Add(time.Second)}, Service: "chat"}); err != nil {
		t.Fatal(err)
	}
	if len(counted()) == 0 {
		t.Error("a 1-hour diagnosis was sized from the hourly counts")
	}
}

func hasGauge(series []diagnose.Bucket, v float64) bool {
	for _, b := range series {
		if b.KVCacheUsage != nil && *b.KVCacheUsage == v {
			return true
		}
	}
	return false
}
