package telemetry

import "time"

// HistogramPoint is a histogram series over one interval: how many
// observations fell in each bucket between Start and Time. Exporters send
// it cumulative (counts since Start); ingest stores the interval's delta.
type HistogramPoint struct {
	ProjectID uint32
	// Start is where the counts begin; zero when the exporter does not say
	// (a Prometheus series without _created).
	Start    time.Time
	Time     time.Time
	Service  string
	Instance string
	Name     string
	Labels   map[string]string
	// Bounds are the finite upper bounds, ascending: bucket i holds
	// (Bounds[i-1], Bounds[i]], the last bucket (Bounds[n-1], +Inf).
	Bounds []float64
	// Counts holds len(Bounds)+1 per-bucket (not cumulative) counts.
	Counts []uint64
	Count  uint64
	Sum    float64
	// Cumulative: the counts run from Start, as exported; false once
	// they are the interval's own (OTLP delta temporality, or converted).
	Cumulative bool `json:",omitempty"`
}
