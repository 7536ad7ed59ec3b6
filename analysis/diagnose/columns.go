package diagnose

import (
	"sync"

	"github.com/tokenpath/tokenpath/analysis/stats"
	"github.com/tokenpath/tokenpath/telemetry"
)

// Column names beyond the Component* names.
const (
	columnTPOT         = "tpot"
	columnInputTokens  = "input_tokens"
	columnOutputTokens = "output_tokens"
	// columnColdWaitAll is the cold-start wait over every request, 0 where
	// none was recorded: comparisons read it per request, not per hold.
	columnColdWaitAll = "cold_start_wait_all"
)

// columns holds one side's per-request figures, each extracted and sorted
// once: component stats, the comparison, the headlines and the series read
// the same columns many times, and sorting dominates a large window. Safe
// for concurrent use (Diagnose computes independent parts at once).
type columns struct {
	reqs   []telemetry.LLMRequest
	mu     sync.Mutex
	raw    map[string]*once[[]float64]
	sorted map[string]*once[stats.Sorted]
}

// once is a value computed by the first caller that asks for it.
type once[T any] struct {
	do sync.Once
	v  T
}

// cached returns m's value for key, computing it on the first call
// (concurrent callers of the same key wait for that one computation).
func cached[T any](mu *sync.Mutex, m map[string]*once[T], key string, compute func() T) T {
	mu.Lock()
	e := m[key]
	if e == nil {
		e = &once[T]{}
		m[key] = e
	}
	mu.Unlock()
	e.do.Do(func() { e.v = compute() })
	return e.v
}

func newColumns(reqs []telemetry.LLMRequest) *columns {
	return &columns{reqs: reqs, raw: map[string]*once[[]float64]{}, sorted: map[string]*once[stats.Sorted]{}}
}

// column returns one figure per request, NaN where unknown.
func (c *columns) column(name string) []float64 {
	return cached(&c.mu, c.raw, name, func() []float64 {
		switch name {
		case columnTPOT:
			return tpot(c.reqs)
		case columnInputTokens:
			return tokens(c.reqs, true)
		case columnOutputTokens:
			return tokens(c.reqs, false)
		case columnColdWaitAll:
			return parts(c.reqs, ComponentColdStartWait, true)
		}
		return values(c.reqs, name)
	})
}

// part returns a headline part per request (see part), cached.
func (c *columns) part(comp string, ttftKnown bool) []float64 {
	key := "part:" + comp
	if ttftKnown {
		key += ":ttft"
	}
	return cached(&c.mu, c.raw, key, func() []float64 { return parts(c.reqs, comp, ttftKnown) })
}

// sortedOf returns a column sorted, NaN dropped.
func (c *columns) sortedOf(name string) stats.Sorted {
	return cached(&c.mu, c.sorted, name, func() stats.Sorted { return stats.Sort(c.column(name)) })
}
