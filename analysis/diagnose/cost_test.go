package diagnose

import (
	"math"
	"testing"

	"github.com/tokenpath/tokenpath/telemetry"
)

func TestCostPerTask(t *testing.T) {
	call := func(trace, model string, in, out int64) telemetry.LLMRequest {
		return telemetry.LLMRequest{TraceID: trace, SpanID: trace + model, Model: model,
			InputTokens: telemetry.Ptr(in), OutputTokens: telemetry.Ptr(out)}
	}
	prices := map[string]Price{
		"gpt-4o":      {InputPerMTok: 2.5, OutputPerMTok: 10},
		"gpt-4o-mini": {InputPerMTok: 0.15, OutputPerMTok: 0.6},
	}
	reqs := []telemetry.LLMRequest{
		// Task A: plan, tool call, answer (an agent loop of 3 calls).
		call("a", "gpt-4o", 1000, 100),      // 0.0025 + 0.001  = 0.0035
		call("a", "gpt-4o-mini", 2000, 500), // 0.0003 + 0.0003 = 0.0006
		call("a", "gpt-4o", 3000, 200),      // 0.0075 + 0.002  = 0.0095
		// Task B: a call and two retries.
		call("b", "gpt-4o", 500, 0),
		call("b", "gpt-4o", 500, 0),
		call("b", "gpt-4o", 500, 300), // 3 × 0.00125 + 0.003 = 0.00675
		// Task C: one call to a model without a price.
		call("c", "llama-local", 100, 100),
	}
	c := CostPerTask(reqs, prices)
	if c == nil {
		t.Fatal("nil cost")
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
	if c.Tasks != 2 || c.UnpricedTasks != 1 {
		t.Errorf("tasks %d unpriced %d", c.Tasks, c.UnpricedTasks)
	}
	if !near(c.TotalUSD, 0.0136+0.00675) || !near(c.MeanUSD, (0.0136+0.00675)/2) {
		t.Errorf("total %v mean %v", c.TotalUSD, c.MeanUSD)
	}
	// p95 of two tasks interpolates 95 % of the way to the dearer one.
	if want := 0.00675 + 0.95*(0.0136-0.00675); !near(c.P95USD, want) {
		t.Errorf("p95 %v, want %v", c.P95USD, want)
	}
	if c.MeanCalls != 7.0/3 || c.MaxCalls != 3 {
		t.Errorf("calls mean %v max %d", c.MeanCalls, c.MaxCalls)
	}
	if len(c.UnpricedModels) != 1 || c.UnpricedModels[0] != "llama-local" {
		t.Errorf("unpriced %v", c.UnpricedModels)
	}

	if CostPerTask(reqs, nil) != nil {
		t.Error("no prices: cost must be unknown (nil)")
	}
	unknownTokens := []telemetry.LLMRequest{{TraceID: "x", Model: "gpt-4o"}}
	if CostPerTask(unknownTokens, prices) != nil {
		t.Error("unknown tokens must not be priced as zero")
	}
}

func TestCostInDiagnosis(t *testing.T) {
	w := newWorld(51)
	in := w.input()
	// Three calls per trace: the generator gives every request its own trace.
	for i := range in.Requests {
		in.Requests[i].TraceID = in.Requests[(i/3)*3].TraceID
	}
	in.Prices = map[string]Price{"llama-3.1-8b": {InputPerMTok: 0.2, OutputPerMTok: 0.2}}
	d := Diagnose(in)
	c := d.Answers.Cost
	if c == nil {
		t.Fatal("no cost answer")
	}
	if c.MeanCalls < 2.9 || c.MaxCalls != 3 {
		t.Errorf("mean calls %v max %d", c.MeanCalls, c.MaxCalls)
	}
	// ~1000 tokens a call at $0.2/M: ~$0.0006 a task.
	if c.MeanUSD < 0.0004 || c.MeanUSD > 0.0009 {
		t.Errorf("mean cost %v", c.MeanUSD)
	}
}
