package assemble

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

func TestTracesGroupsAndSorts(t *testing.T) {
	var spans []telemetry.Span
	add := func(project uint32, trace string, shift int, src []telemetry.Span) {
		for _, s := range src {
			s.ProjectID, s.TraceID = project, trace
			s.Start, s.End = s.Start.Add(time.Duration(shift)*time.Millisecond), s.End.Add(time.Duration(shift)*time.Millisecond)
			spans = append(spans, s)
		}
	}
	add(1, "trace-a", 0, vllmTrace())   // call at 120
	add(1, "trace-b", 50, scaleTrace()) // call at 50
	add(2, "trace-a", 0, vllmTrace())   // same ids, other project: call at 120
	add(1, "trace-c", 0, []telemetry.Span{
		client("x2", "", 130, 500, telemetry.LLMCall{}),
		client("x1", "", 130, 600, telemetry.LLMCall{}),
	})

	got := Traces(spans, nil, Options{})
	type key struct {
		project uint32
		trace   string
		span    string
		index   int
	}
	var keys []key
	for _, r := range got {
		keys = append(keys, key{r.ProjectID, r.TraceID, r.SpanID, r.CallIndex})
	}
	want := []key{
		{1, "trace-b", "c1", 0},
		{1, "trace-a", "c1", 0},
		{2, "trace-a", "c1", 0},
		{1, "trace-c", "x1", 0},
		{1, "trace-c", "x2", 1},
	}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("order:\n got %v\nwant %v", keys, want)
	}
	if *got[1].Network != 70 || *got[2].Network != 70 {
		t.Errorf("same span ids in two projects mixed up: network %v, %v", *got[1].Network, *got[2].Network)
	}
}

// TestOrderIndependence: spans in any order, duplicated by retried exports,
// give the same rows.
func TestOrderIndependence(t *testing.T) {
	var spans []telemetry.Span
	for i, src := range [][]telemetry.Span{vllmTrace(), coldTrace(), scaleTrace()} {
		for _, s := range src {
			s.TraceID = fmt.Sprintf("trace-%d", i)
			spans = append(spans, s)
		}
	}
	hist := &InstanceHistory{
		FirstSeen: map[string]time.Time{InstanceKey("vllm", "vllm-7"): at(-10_000)},
		Events:    []telemetry.Event{scale(1, "vllm", -30_000, 0, 1)},
	}
	want := Traces(spans, hist, Options{})
	if len(want) != 3 || !want[0].ColdStart || !want[1].ColdStart || want[2].ColdStart {
		t.Fatalf("want three rows, two cold starts: %+v", want)
	}

	before := slices.Clone(spans)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		shuffled := slices.Clone(spans)
		// Retried exports: some spans arrive twice.
		for i := range shuffled {
			if rng.IntN(3) == 0 {
				shuffled = append(shuffled, shuffled[i])
			}
		}
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := Traces(shuffled, hist, Options{}); !reflect.DeepEqual(got, want) {
			t.Fatalf("shuffled input changed the output")
		}
	}
	if !reflect.DeepEqual(spans, before) {
		t.Errorf("Traces modified its input")
	}
}

// TestPartialArrival: a trace assembled from the spans that have arrived so
// far gives plausible rows, and the full set gives the full answer.
func TestPartialArrival(t *testing.T) {
	all := vllmTrace()
	inference := []telemetry.Span{all[3], all[4]} // gateway and vLLM export first
	application := []telemetry.Span{all[0], all[1], all[2]}

	early := Traces(inference, nil, Options{})
	assertRequests(t, early, []telemetry.LLMRequest{{
		ProjectID: 1, TraceID: "trace-1", SpanID: "s1", Service: "vllm", ServerService: "vllm",
		Model: "meta-llama/Meta-Llama-3-8B", Provider: "vllm", Instance: "vllm-0", Start: at(150),
		TTFT: f(380), Queue: f(50), Prefill: f(300), Decode: f(1500), E2E: f(1950), ITL: f(15),
		InputTokens: n(1200), OutputTokens: n(101), TTFTSource: telemetry.TTFTFromServer, TokenSource: telemetry.TokensFromServer,
	}})
	late := Traces(application, nil, Options{})
	assertRequests(t, late, []telemetry.LLMRequest{{
		ProjectID: 1, TraceID: "trace-1", SpanID: "c1", Service: "app", Model: "llama-3-8b", Provider: "openai",
		Start: at(120), TTFT: f(450), PreInference: f(120), Decode: f(1550), E2E: f(2000), ITL: f(15.5),
		InputTokens: n(1200), OutputTokens: n(101), Route: "/chat", Tenant: "acme", TokenSource: telemetry.TokensFromClient,
	}})

	for name, spans := range map[string][]telemetry.Span{
		"inference then app":  append(slices.Clone(inference), application...),
		"app then inference":  append(slices.Clone(application), inference...),
		"interleaved batches": {all[4], all[0], all[3], all[2], all[1]},
		"with a resent batch": append(append(slices.Clone(inference), application...), inference...),
	} {
		t.Run(name, func(t *testing.T) {
			assertRequests(t, Traces(spans, nil, Options{}), []telemetry.LLMRequest{vllmWant()})
		})
	}
}

func TestCycleDoesNotHang(t *testing.T) {
	spans := []telemetry.Span{
		client("a", "b", 0, 1000, telemetry.LLMCall{ClientTTFT: d(100)}),
		client("b", "a", 10, 900, telemetry.LLMCall{ClientTTFT: d(100)}),
		server("s", "a", "vllm-0", 20, 800, telemetry.LLMCall{ServerTTFT: d(50)}),
	}
	got := Traces(spans, nil, Options{})
	if len(got) != 3 {
		t.Fatalf("got %d rows, want 3 (each span on a loop stands alone)", len(got))
	}
	for _, r := range got {
		if r.PreInference != nil {
			t.Errorf("%s: pre-inference %v on a looping chain, want nil", r.SpanID, *r.PreInference)
		}
	}
}

// BenchmarkTraces assembles 10k traces of 4 spans (app root, LLM client,
// gateway, vLLM server) per iteration.
func BenchmarkTraces(b *testing.B) {
	const traces = 10_000
	spans := make([]telemetry.Span, 0, 4*traces)
	for i := range traces {
		parent := ""
		for _, s := range vllmTrace() {
			if s.SpanID == "rt" {
				continue // keep root, client, gateway, server: a chain of 4
			}
			s.TraceID = fmt.Sprintf("%032x", i)
			s.SpanID = fmt.Sprintf("%016x", 4*i+len(spans)%4)
			s.ParentSpanID = parent
			parent = s.SpanID
			spans = append(spans, s)
		}
	}
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(spans), func(i, j int) { spans[i], spans[j] = spans[j], spans[i] })
	hist := firstSeen("vllm-0", -3_600_000)

	if got := Traces(spans, hist, Options{}); len(got) != traces || got[0].Network == nil {
		b.Fatalf("benchmark data does not assemble: %d rows", len(got))
	}
	b.ReportAllocs()
	for b.Loop() {
		Traces(spans, hist, Options{})
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*traces), "ns/trace")
}
