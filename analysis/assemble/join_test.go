package assemble

import (
	"slices"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

func TestRequestIDForms(t *testing.T) {
	for _, tt := range []struct {
		server string
		client string
		want   bool
	}{
		{"chatcmpl-abc", "chatcmpl-abc", true},
		{"chatcmpl-abc-1a2b3c4d", "chatcmpl-abc", true}, // engine-internal suffix
		{"cmpl-abc-0", "cmpl-abc", true},                // one prompt of several
		{"chatcmpl-abc_1", "chatcmpl-abc", true},
		{"0_chatcmpl-abc-1a2b3c4d", "chatcmpl-abc", true}, // a parallel sample
		{"chatcmpl-abc", "chatcmpl-abd", false},
		{"chatcmpl-abc", "chatcmpl-ab", false},
		{"", "", false},
	} {
		if got := slices.Contains(RequestIDForms(tt.server), tt.client); got != tt.want {
			t.Errorf("RequestIDForms(%q) holds %q = %v, want %v (forms %q)", tt.server, tt.client, got, tt.want, RequestIDForms(tt.server))
		}
	}
}

func TestAddressFits(t *testing.T) {
	for _, tt := range []struct {
		address, service, instance string
		want                       bool
	}{
		{"", "vllm", "", true},
		{"vllm.inference.svc.cluster.local", "vllm", "", true},
		{"vllm-llama.inference.svc", "vllm", "vllm-llama-7d9f-x2", true},
		{"10.0.0.5", "vllm", "", true},
		{"api.openai.com", "vllm", "vllm-0", false},
	} {
		if got := addressFits(tt.address, tt.service, tt.instance); got != tt.want {
			t.Errorf("addressFits(%q, %q, %q) = %v, want %v", tt.address, tt.service, tt.instance, got, tt.want)
		}
	}
}

func TestPair(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	tok := func(n int64) *int64 { return &n }
	client := func(trace, id string, from, to int, tokens int64) Half {
		return Half{Key: CallKey{1, trace, "c"}, Start: ms(from), End: ms(to), ID: id, Model: "llama", InputTokens: tok(tokens)}
	}
	server := func(trace, id string, from, to int, tokens int64) Half {
		s := &telemetry.Span{ProjectID: 1, TraceID: trace, SpanID: "s", Service: "vllm", Start: ms(from), End: ms(to)}
		return Half{Key: CallKey{1, trace, "s"}, Server: true, Start: ms(from), End: ms(to), ID: id, InputTokens: tok(tokens), Service: "vllm", Span: s}
	}
	all := func(CallKey) bool { return true }
	type want map[string]string // client trace → method
	for _, tt := range []struct {
		name   string
		halves []Half
		fresh  func(CallKey) bool
		claims []Claim
		want   want
		taken  int
	}{
		{name: "by id", halves: []Half{client("A", "chatcmpl-1", 0, 1000, 5), server("B", "chatcmpl-1-0a0b0c0d", 10, 900, 7)},
			fresh: all, want: want{"A": telemetry.JoinID}, taken: 1},
		{name: "ids that differ never match", halves: []Half{client("A", "chatcmpl-1", 0, 1000, 5), server("B", "chatcmpl-2", 10, 900, 5)},
			fresh: all, want: want{}},
		{name: "a unique match", halves: []Half{client("A", "", 0, 1000, 5), server("B", "", 10, 900, 5)},
			fresh: all, want: want{"A": telemetry.JoinMatch}, taken: 1},
		{name: "tokens differ", halves: []Half{client("A", "", 0, 1000, 5), server("B", "", 10, 900, 6)}, fresh: all, want: want{}},
		{name: "server outside the client span", halves: []Half{client("A", "", 0, 1000, 5), server("B", "", 10, 2500, 5)}, fresh: all, want: want{}},
		{name: "two candidate clients: none", halves: []Half{client("A", "", 0, 1000, 5), client("C", "", 0, 1100, 5), server("B", "", 10, 900, 5)},
			fresh: all, want: want{}},
		{name: "two candidate servers: none", halves: []Half{client("A", "", 0, 1000, 5), server("B", "", 10, 900, 5), server("D", "", 20, 800, 5)},
			fresh: all, want: want{}},
		{name: "no fresh half: no new match", halves: []Half{client("A", "", 0, 1000, 5), server("B", "", 10, 900, 5)},
			fresh: func(CallKey) bool { return false }, want: want{}},
		{name: "a stored claim stands against a later candidate",
			halves: []Half{client("A", "", 0, 1000, 5), client("C", "", 0, 1100, 5), server("B", "", 10, 900, 5)},
			fresh:  func(k CallKey) bool { return k.Trace == "C" },
			claims: []Claim{{Client: CallKey{1, "A", "c"}, Server: CallKey{1, "B", "s"}}},
			want:   want{"A": telemetry.JoinMatch}, taken: 1},
		{name: "id beats a match", halves: []Half{client("A", "", 0, 1000, 5), client("C", "chatcmpl-9", 0, 1000, 5), server("B", "chatcmpl-9", 10, 900, 5)},
			fresh: all, want: want{"C": telemetry.JoinID}, taken: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			j := Pair(tt.halves, tt.fresh, tt.claims)
			got := want{}
			for k, p := range j.Servers {
				got[k.Trace] = p.Method
			}
			if len(got) != len(tt.want) {
				t.Fatalf("pairs %v, want %v", got, tt.want)
			}
			for k, m := range tt.want {
				if got[k] != m {
					t.Errorf("client %s joined %q, want %q", k, got[k], m)
				}
			}
			if len(j.Taken) != tt.taken {
				t.Errorf("%d server spans taken, want %d", len(j.Taken), tt.taken)
			}
		})
	}
}

// A client call and its server span in another trace assemble as one
// request with the full split once joined; alone they are two.
func TestTracesJoinedAcrossTraces(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	d := func(n int) *time.Duration { v := time.Duration(n) * time.Millisecond; return &v }
	spans := []telemetry.Span{
		{ProjectID: 1, TraceID: "A", SpanID: "c1", Service: "app", Start: ms(100), End: ms(1600),
			LLM: telemetry.LLMCall{Role: telemetry.LLMClient, Model: "llama", ResponseID: "chatcmpl-1", ClientTTFT: d(500)}},
		{ProjectID: 1, TraceID: "B", SpanID: "s1", Service: "vllm", Instance: "vllm-0", Start: ms(110), End: ms(1560),
			LLM: telemetry.LLMCall{Role: telemetry.LLMServer, ResponseID: "chatcmpl-1", QueueTime: d(200), PrefillTime: d(250), ServerTTFT: d(450)}},
	}
	alone, halves := TracesJoined(spans, nil, Options{}, nil)
	if len(alone) != 2 || len(halves) != 2 {
		t.Fatalf("unjoined: %d requests, %d halves; want 2 and 2", len(alone), len(halves))
	}
	j := Pair(halves, func(CallKey) bool { return true }, nil)
	reqs, rest := TracesJoined(spans, nil, Options{}, j)
	if len(reqs) != 1 || len(rest) != 0 {
		t.Fatalf("joined: %d requests, %d halves left; want 1 and 0", len(reqs), len(rest))
	}
	r := reqs[0]
	if r.TraceID != "A" || r.Join != telemetry.JoinID || r.ServerTraceID != "B" || r.ServerSpanID != "s1" || r.Model != "llama" ||
		r.Network == nil || *r.Network != 50 || r.Queue == nil || *r.Queue != 200 || r.Instance != "vllm-0" {
		t.Errorf("joined request %+v", r)
	}
}
