package analysis_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/storetest"
	"github.com/tokenpath/tokenpath/telemetry"
)

// An app calling only one inference server that serves only it is one set
// of requests seen from both sides: the overview pairs the two rows and
// names one service for their verdict. Apps sharing a server, or calling
// a managed API as well, are linked but not paired. Both reads (requests
// and rollups) agree, and so does PairedApps, the pairing the episode
// detector reads.
func TestOverviewPairsAppAndServer(t *testing.T) {
	a := storetest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Minute)
	var rows []telemetry.LLMRequest
	add := func(service, server string, n int) {
		for i := range n {
			k := len(rows) + 1
			rows = append(rows, telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("%032x", k), SpanID: fmt.Sprintf("%016x", k),
				Service: service, ServerService: server, Model: "llama", Start: now.Add(-time.Duration(i+1) * 20 * time.Second),
				TTFT: telemetry.Ptr(300.0), InputTokens: telemetry.Ptr(int64(100)), OutputTokens: telemetry.Ptr(int64(10))})
		}
	}
	add("chat", "vllm", 40)
	add("rag", "vllm-shared", 30)
	add("batch", "vllm-shared", 20)
	add("mobile", "vllm-mobile", 15)
	add("mobile", "", 5) // a managed API call too
	if err := a.CH.Insert(ctx, clickhouse.RequestsBatch(rows, nil, 1)); err != nil {
		t.Fatal(err)
	}
	q := &analysis.Queries{CH: a.CH}
	for _, window := range []time.Duration{time.Hour, 24 * time.Hour} {
		ov, err := q.Overview(ctx, analysis.OverviewRequest{Project: 1, Window: diagnose.Range{From: now.Add(-window), To: now.Add(time.Minute)}})
		if err != nil {
			t.Fatal(err)
		}
		if ov.FromRollups != (window > time.Hour) {
			t.Fatalf("%s window read from rollups: %v; the test means to cover both reads", window, ov.FromRollups)
		}
		got := map[string]analysis.ServiceOverview{}
		for _, s := range ov.Services {
			got[s.Service] = s
		}
		for _, c := range []struct {
			service, same, verdictOf string
			partners                 []string
		}{
			{"chat", "vllm", "chat", []string{"vllm"}},
			{"vllm", "chat", "chat", []string{"chat"}},
			{"rag", "", "rag", []string{"vllm-shared"}},
			{"vllm-shared", "", "vllm-shared", []string{"batch", "rag"}},
			{"mobile", "", "mobile", []string{"vllm-mobile"}},
			{"vllm-mobile", "", "vllm-mobile", []string{"mobile"}},
		} {
			s := got[c.service]
			if s.SameRequestsAs != c.same || s.VerdictService() != c.verdictOf || !slices.Equal(s.Partners, c.partners) {
				t.Errorf("%s window, %s: same requests as %q, verdict of %q, partners %v; want %q, %q, %v (rollups: %v)", window, c.service,
					s.SameRequestsAs, s.VerdictService(), s.Partners, c.same, c.verdictOf, c.partners, ov.FromRollups)
			}
		}
		if !got["mobile"].Unpaired || got["chat"].Unpaired {
			t.Errorf("%s window: mobile unpaired %v (it calls a managed API too), chat %v", window, got["mobile"].Unpaired, got["chat"].Unpaired)
		}
		apps, err := q.PairedApps(ctx, 1, diagnose.Range{From: now.Add(-window), To: now.Add(time.Minute)})
		if err != nil || !maps.Equal(apps, map[string]string{"vllm": "chat"}) {
			t.Errorf("%s window: PairedApps %v (%v), want vllm paired with chat", window, apps, err)
		}
	}
}
