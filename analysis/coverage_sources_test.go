package analysis

import (
	"context"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/storetest"
	"github.com/tokenpath/tokenpath/telemetry"
)

// Coverage counts a client TTFT by where the request's TTFT came from:
// a client key counts even where network stayed unknown (the server
// retried), the server's TTFT never does; a row without a recorded source
// is judged by its network figure.
func TestCoverageCountsClientTTFTBySource(t *testing.T) {
	a := storetest.Open(t)
	ctx := context.Background()
	t0 := time.Now().UTC().Add(-10 * time.Minute).Truncate(time.Millisecond)
	row := func(span string, ttftSource string, network *float64) telemetry.LLMRequest {
		return telemetry.LLMRequest{ProjectID: 1, TraceID: span + "0000000000000000000000000000000"[:32-len(span)], SpanID: span,
			Service: "chat", ServerService: "vllm", Join: telemetry.JoinTrace, Start: t0, TTFT: telemetry.Ptr(300.0),
			Queue: telemetry.Ptr(10.0), Network: network, E2E: telemetry.Ptr(900.0), TTFTSource: ttftSource}
	}
	reqs := []telemetry.LLMRequest{
		row("a1", "gen_ai.response.time_to_first_chunk", nil), // retried server: network unknown, TTFT the client's
		row("a2", "event:gen_ai.content.completion.chunk", telemetry.Ptr(20.0)),
		row("a3", telemetry.TTFTFromServer, nil),                   // the client sent no TTFT
		row("a4", telemetry.SourceUnrecorded, telemetry.Ptr(15.0)), // stored before sources: by its network figure
		row("a5", telemetry.SourceUnrecorded, nil),
	}
	if err := a.CH.Insert(ctx, clickhouse.RequestsBatch(reqs, nil, 1)); err != nil {
		t.Fatal(err)
	}
	q := &Queries{CH: a.CH}
	cov, err := q.Coverage(ctx, 1, t0.Add(-time.Minute), t0.Add(time.Minute), "chat")
	if err != nil {
		t.Fatal(err)
	}
	if len(cov) != 1 || cov[0].Requests != 5 || cov[0].ClientTTFT != 3 {
		t.Fatalf("coverage %+v, want 5 requests, 3 with a client TTFT (a1, a2, a4)", cov)
	}
}
