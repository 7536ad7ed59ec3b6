package diagnose

import (
	"fmt"
	"math"
)

// waitingAtEnd is how many requests waited on the servers in the window's
// last bucket (each instance's peak in it, summed); NaN without the gauge
// there.
func (a *analysis) waitingAtEnd() float64 {
	last := a.in.Window.To.Add(-a.width)
	peaks := map[string]float64{}
	for _, m := range a.metricsWin {
		if m.Name != MetricRequestsWaiting || m.Time.Before(last) || math.IsNaN(m.Value) {
			continue
		}
		key := m.Service + "\x00" + m.Instance
		if v, ok := peaks[key]; !ok || m.Value > v {
			peaks[key] = m.Value
		}
	}
	if len(peaks) == 0 {
		return math.NaN()
	}
	sum := 0.0
	for _, v := range peaks {
		sum += v
	}
	return sum
}

// waitingAtEndEvidence says when requests were still waiting at the
// window's end, above the baseline's peak: a queued request is counted
// when it finishes, so the newest buckets of a queue read fast or empty
// (TestWaitingAtWindowEnd).
func (a *analysis) waitingAtEndEvidence() {
	w := a.waitingAtEnd()
	if !(w >= 1) {
		return
	}
	figs := figures("waiting_at_end", w)
	if b := gaugeMax(a.metricsBase, MetricRequestsWaiting); !math.IsNaN(b) {
		if w <= b {
			return
		}
		figs["baseline_waiting_max"] = b
	}
	a.add(fmt.Sprintf("%s still waiting on the servers at %s, the window's end: they are not among the window's requests until they finish, so its newest minutes under-report the queue.",
		gaugeNoun(w, "request"), a.in.Window.To.UTC().Format("15:04")), figs)
}
