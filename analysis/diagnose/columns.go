package diagnose

import (
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
// the same columns many times, and sorting dominates a large window.
type columns struct {
	reqs   []telemetry.LLMRequest
	raw    map[string][]float64
	sorted map[string]stats.Sorted
}

func newColumns(reqs []telemetry.LLMRequest) *columns {
	return &columns{reqs: reqs, raw: map[string][]float64{}, sorted: map[string]stats.Sorted{}}
}

// column returns one figure per request, NaN where unknown.
func (c *columns) column(name string) []float64 {
	if v, ok := c.raw[name]; ok {
		return v
	}
	var v []float64
	switch name {
	case columnTPOT:
		v = tpot(c.reqs)
	case columnInputTokens:
		v = tokens(c.reqs, true)
	case columnOutputTokens:
		v = tokens(c.reqs, false)
	case columnColdWaitAll:
		v = parts(c.reqs, ComponentColdStartWait, true)
	default:
		v = values(c.reqs, name)
	}
	c.raw[name] = v
	return v
}

// part returns a headline part per request (see part), cached.
func (c *columns) part(comp string, ttftKnown bool) []float64 {
	key := "part:" + comp
	if ttftKnown {
		key += ":ttft"
	}
	if v, ok := c.raw[key]; ok {
		return v
	}
	v := parts(c.reqs, comp, ttftKnown)
	c.raw[key] = v
	return v
}

// sortedOf returns a column sorted, NaN dropped.
func (c *columns) sortedOf(name string) stats.Sorted {
	if s, ok := c.sorted[name]; ok {
		return s
	}
	s := stats.Sort(c.column(name))
	c.sorted[name] = s
	return s
}
