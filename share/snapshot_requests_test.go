package share

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// storedTraceSnapshot is a version 1 trace snapshot as share_links holds
// it: its requests in telemetry.LLMRequest's Go field names.
const storedTraceSnapshot = `{"version":1,"kind":"trace","path":"/traces/5aba5e71e356dd3fd001c92b7912f396","taken_at":"2026-12-05T10:00:00Z",
"trace":{"trace_id":"5aba5e71e356dd3fd001c92b7912f396","spans":[],"requests":[
{"ProjectID":7,"TraceID":"5aba5e71e356dd3fd001c92b7912f396","SpanID":"750af7c30eaf939d","Service":"rag-chat","ServerService":"vllm-llama","Model":"llama","Provider":"vllm","Instance":"pod-1","Start":"2026-12-05T09:17:36.77952Z","TTFT":48782.124,"PreInference":73.58,"Queue":48624.366,"Prefill":131.96,"Network":25.798,"Decode":35370.08,"E2E":84152.204,"ITL":41.858,"ColdStartWait":null,"InputTokens":1462,"OutputTokens":846,"ColdStart":false,"Error":true,"ErrorType":"429","CallIndex":1,"Route":"/chat","Tenant":"acme","Join":"id","ServerTraceID":"0123456789abcdef0123456789abcdef","ServerSpanID":"fedcba9876543210","TTFTSource":"gen_ai.response.time_to_first_chunk","TokenSource":"mixed","Preemptions":2}]}}`

// TestStoredSnapshotRequests: a stored snapshot's requests still decode
// field for field, and a snapshot taken today writes them in the same
// layout, so links shared earlier keep opening as they were.
func TestStoredSnapshotRequests(t *testing.T) {
	want := telemetry.LLMRequest{ProjectID: 7, TraceID: "5aba5e71e356dd3fd001c92b7912f396", SpanID: "750af7c30eaf939d",
		Service: "rag-chat", ServerService: "vllm-llama", Model: "llama", Provider: "vllm", Instance: "pod-1",
		Start: time.Date(2026, 12, 5, 9, 17, 36, 779520000, time.UTC), TTFT: telemetry.Ptr(48782.124),
		PreInference: telemetry.Ptr(73.58), Queue: telemetry.Ptr(48624.366), Prefill: telemetry.Ptr(131.96),
		Network: telemetry.Ptr(25.798), Decode: telemetry.Ptr(35370.08), E2E: telemetry.Ptr(84152.204),
		ITL: telemetry.Ptr(41.858), InputTokens: telemetry.Ptr(int64(1462)), OutputTokens: telemetry.Ptr(int64(846)),
		Error: true, ErrorType: "429", CallIndex: 1, Route: "/chat", Tenant: "acme", Join: telemetry.JoinID,
		ServerTraceID: "0123456789abcdef0123456789abcdef", ServerSpanID: "fedcba9876543210",
		TTFTSource: "gen_ai.response.time_to_first_chunk", TokenSource: telemetry.TokensMixed, Preemptions: telemetry.Ptr(int64(2))}
	var snap Snapshot
	if err := json.Unmarshal([]byte(storedTraceSnapshot), &snap); err != nil {
		t.Fatal(err)
	}
	if snap.Trace == nil || len(snap.Trace.Requests) != 1 {
		t.Fatalf("stored trace snapshot decoded as %+v", snap.Trace)
	}
	if got := snap.Trace.Requests[0]; !got.Equal(&want) {
		t.Errorf("stored request decoded as\n%+v\nwant\n%+v", got, want)
	}
	written, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	start := bytes.Index([]byte(storedTraceSnapshot), []byte(`{"ProjectID"`))
	stored := []byte(storedTraceSnapshot)[start : len(storedTraceSnapshot)-3]
	if !bytes.Equal(written, stored) {
		t.Errorf("a request is stored today as\n%s\nlinks shared earlier hold\n%s", written, stored)
	}
}
