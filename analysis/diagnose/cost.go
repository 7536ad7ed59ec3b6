package diagnose

import (
	"slices"

	"github.com/tokenpath/tokenpath/analysis/stats"
	"github.com/tokenpath/tokenpath/telemetry"
)

// TaskCost is the cost of a task, a whole trace with every LLM call it made
// (agent loops and retries included), not of a token.
type TaskCost struct {
	Tasks int `json:"tasks"` // tasks with a known cost
	// UnpricedTasks had a call whose model has no price or whose token
	// counts are unknown; their cost is not guessed.
	UnpricedTasks  int      `json:"unpriced_tasks"`
	MeanUSD        float64  `json:"mean_usd"`
	P95USD         float64  `json:"p95_usd"`
	TotalUSD       float64  `json:"total_usd"`  // over priced tasks
	MeanCalls      float64  `json:"mean_calls"` // LLM calls per task, over all tasks
	MaxCalls       int      `json:"max_calls"`
	UnpricedModels []string `json:"unpriced_models,omitempty"`
}

// CostPerTask groups requests by trace (a request without a trace id is its
// own task) and prices each task's tokens per model. It returns nil when no
// task can be priced.
func CostPerTask(reqs []telemetry.LLMRequest, prices map[string]Price) *TaskCost {
	type task struct {
		usd    float64
		calls  int
		priced bool
	}
	tasks := map[string]*task{}
	var order []string
	unpricedModels := map[string]bool{}
	for i := range reqs {
		r := &reqs[i]
		key := r.TraceID
		if key == "" {
			key = "span:" + r.SpanID
		}
		t := tasks[key]
		if t == nil {
			t = &task{priced: true}
			tasks[key] = t
			order = append(order, key)
		}
		t.calls++
		p, ok := prices[r.Model]
		if !ok {
			unpricedModels[r.Model] = true
		}
		if !ok || r.InputTokens == nil || r.OutputTokens == nil {
			t.priced = false
			continue
		}
		t.usd += (float64(*r.InputTokens)*p.InputPerMTok + float64(*r.OutputTokens)*p.OutputPerMTok) / 1e6
	}
	if len(tasks) == 0 {
		return nil
	}
	out := &TaskCost{}
	var costs []float64
	calls := 0
	for _, key := range order {
		t := tasks[key]
		calls += t.calls
		out.MaxCalls = max(out.MaxCalls, t.calls)
		if !t.priced {
			out.UnpricedTasks++
			continue
		}
		costs = append(costs, t.usd)
		out.TotalUSD += t.usd
	}
	if len(costs) == 0 {
		return nil
	}
	out.Tasks = len(costs)
	out.MeanUSD = stats.Mean(costs)
	out.P95USD = stats.Quantile(costs, 0.95)
	out.MeanCalls = float64(calls) / float64(len(tasks))
	for m := range unpricedModels {
		out.UnpricedModels = append(out.UnpricedModels, m)
	}
	slices.Sort(out.UnpricedModels)
	return out
}

// taskValues returns per-task cost (NaN when unpriced) and call counts, for
// Compare.
func taskValues(reqs []telemetry.LLMRequest, prices map[string]Price) (cost, calls []float64) {
	idx := make(map[string]int, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		key := r.TraceID
		if key == "" {
			key = "span:" + r.SpanID
		}
		j, ok := idx[key]
		if !ok {
			j = len(cost)
			idx[key] = j
			cost = append(cost, 0)
			calls = append(calls, 0)
		}
		calls[j]++
		p, priced := prices[r.Model]
		if !priced || r.InputTokens == nil || r.OutputTokens == nil {
			cost[j] = nan
			continue
		}
		cost[j] += (float64(*r.InputTokens)*p.InputPerMTok + float64(*r.OutputTokens)*p.OutputPerMTok) / 1e6
	}
	return cost, calls
}
