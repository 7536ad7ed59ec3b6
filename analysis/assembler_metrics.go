package analysis

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var assemblerLagDesc = prometheus.NewDesc("tokenpath_assembler_lag_seconds",
	"How far assembled LLM requests trail the spans received: now minus the assembler's watermark (2–3 s when it keeps up). Pages show a notice above a minute.",
	nil, nil)

// Collector reports the assembler's lag at each scrape, read from the
// watermark in PostgreSQL so that every node reports the one that
// assembles. A scrape that cannot read it within 2 s leaves it out.
func (a *Assembler) Collector() prometheus.Collector { return assemblerCollector{a} }

type assemblerCollector struct{ a *Assembler }

func (c assemblerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- assemblerLagDesc }

func (c assemblerCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	wm, ok, err := c.a.Watermark(ctx)
	if err != nil || !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(assemblerLagDesc, prometheus.GaugeValue, time.Since(wm).Seconds())
}
