package assembler

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var assemblerLagDesc = prometheus.NewDesc("tokenpath_assembler_lag_seconds",
	"How far assembled LLM requests trail the spans received: now minus the assembler's watermark (2–3 s when it keeps up). Pages show a notice above a minute.",
	nil, nil)

// passStages are the parts of a pass timed in
// tokenpath_assembler_seconds_total{stage}.
var passStages = []string{
	"find",      // counting the new inserts
	"traces",    // reading the pass's trace ids
	"bounds",    // the traces' starts, from trace_bounds
	"spans",     // reading the traces' spans
	"events",    // scaling events near the inference spans
	"existing",  // the rows earlier passes wrote
	"derive",    // building the requests and comparing them (Go)
	"join",      // pairing calls across traces (assembler_join.go)
	"write",     // inserting new rows, retractions and tombstones
	"watermark", // saving progress in PostgreSQL
}

// passTimes accumulates the time passes spend per stage, so an operator
// (and bench ingest) sees where assembly's time goes when it falls behind.
type passTimes struct {
	once sync.Once
	vec  *prometheus.CounterVec
}

func (p *passTimes) counters() *prometheus.CounterVec {
	p.once.Do(func() {
		p.vec = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokenpath_assembler_seconds_total",
			Help: "Time assembler passes spent, by stage (find, traces, bounds, spans, events, existing, derive, join, write, watermark)."}, []string{"stage"})
		for _, s := range passStages {
			p.vec.WithLabelValues(s)
		}
	})
	return p.vec
}

// since adds the time since t0 to stage and returns now, the next stage's start.
func (p *passTimes) since(stage string, t0 time.Time) time.Time {
	now := time.Now()
	p.counters().WithLabelValues(stage).Add(now.Sub(t0).Seconds())
	return now
}

// Collector reports the assembler's lag at each scrape, read from the
// watermark in PostgreSQL so that every node reports the one that
// assembles (a scrape that cannot read it within 2 s leaves it out), and
// this node's time per pass stage.
func (a *Assembler) Collector() prometheus.Collector { return assemblerCollector{a} }

type assemblerCollector struct{ a *Assembler }

func (c assemblerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- assemblerLagDesc
	c.a.times.counters().Describe(ch)
}

func (c assemblerCollector) Collect(ch chan<- prometheus.Metric) {
	c.a.times.counters().Collect(ch)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	wm, ok, err := c.a.Watermark(ctx)
	if err != nil || !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(assemblerLagDesc, prometheus.GaugeValue, time.Since(wm).Seconds())
}
