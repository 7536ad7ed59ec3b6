package web

import (
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// A server that counts its queue wait in prefill (SGLang: a server TTFT, no
// queue time) shows queue and prefill bundled with their sum, never a
// figure labelled prefill; a vLLM call keeps its split.
func TestCallViewBundlesSGLangQueuePrefill(t *testing.T) {
	f := telemetry.Ptr[float64]
	sglang := telemetry.LLMRequest{SpanID: "a", Service: "app", ServerService: "sglang", Start: time.Now(),
		TTFT: f(700), Network: f(80), Decode: f(1100), E2E: f(1800)}
	vllm := telemetry.LLMRequest{SpanID: "b", Service: "app", ServerService: "vllm", Start: time.Now(),
		TTFT: f(900), Queue: f(300), Prefill: f(550), Network: f(50), Decode: f(1100), E2E: f(2000)}
	get := func(r *telemetry.LLMRequest, name string) (string, string) {
		for _, c := range callView(r, 0, beforeCall{}, time.Now()).Components {
			if c.Name == name {
				return c.Value, c.Note
			}
		}
		t.Fatalf("no %s component", name)
		return "", ""
	}
	for _, name := range []string{"Queue", "Prefill"} {
		if v, note := get(&sglang, name); v != "bundled" || !strings.Contains(note, "queue+prefill 620") {
			t.Errorf("SGLang %s = %q (%s), want bundled with queue+prefill 620 ms", name, v, note)
		}
	}
	if v, _ := get(&sglang, "Network"); !strings.HasPrefix(v, "80") {
		t.Errorf("SGLang network = %q, want 80 ms", v)
	}
	if v, _ := get(&vllm, "Prefill"); !strings.HasPrefix(v, "550") {
		t.Errorf("vLLM prefill = %q, want 550 ms", v)
	}
}
