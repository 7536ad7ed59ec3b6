package ingest

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are Tokenpath's own ingest figures, served at /metrics.
type Metrics struct {
	Registry *prometheus.Registry
	Received *prometheus.CounterVec // items received, by signal and transport
	Accepted *prometheus.CounterVec
	Rejected *prometheus.CounterVec // items refused per item (partial_success)
	Requests *prometheus.CounterVec // export requests by signal, transport and outcome
	// ExportLatency is the server's share of what exporters wait: from the
	// handler's start to the acknowledgement, by signal and transport.
	ExportLatency *prometheus.HistogramVec
	Overloaded    prometheus.Counter
	QueueDepth    prometheus.Gauge // rows acknowledged, not yet in ClickHouse
	Written       prometheus.Counter
	WriteLatency  prometheus.Histogram
	WALSync       prometheus.Histogram // one group commit: write + fsync
	ScrapeUp      *prometheus.GaugeVec // 1 when the last scrape of a /metrics target succeeded

	// acks and slowAcks count acknowledged exports, and those the server
	// took longer than SlowAck over (Acks).
	acks, slowAcks atomic.Uint64
}

// SlowAck is an acknowledgement slow enough that background work should
// yield to the receivers: well within the 250 ms exporters are promised
// at half load, and several times a quiet node's 10–20 ms.
const SlowAck = 100 * time.Millisecond

// observeAck records an acknowledged export that took d.
func (m *Metrics) observeAck(signal, transport string, d time.Duration) {
	m.ExportLatency.WithLabelValues(signal, transport).Observe(d.Seconds())
	m.acks.Add(1)
	if d > SlowAck {
		m.slowAcks.Add(1)
	}
}

// Acks returns how many exports were acknowledged so far, and how many of
// them took longer than SlowAck: the assembler rests longer between its
// passes while receivers are slow (assembler.Assembler.Acks).
func (m *Metrics) Acks() (all, slow uint64) { return m.acks.Load(), m.slowAcks.Load() }

// NewMetrics registers the ingest metrics in a fresh registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Received: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokenpath_ingest_received_items_total",
			Help: "Spans, metric points and log records received."}, []string{"signal", "transport"}),
		Accepted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokenpath_ingest_accepted_items_total",
			Help: "Items acknowledged (durable in the write-ahead log)."}, []string{"signal", "transport"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokenpath_ingest_rejected_items_total",
			Help: "Items refused as invalid (reported in partial_success)."}, []string{"signal", "transport"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokenpath_ingest_requests_total",
			Help: "Export requests by outcome."}, []string{"signal", "transport", "outcome"}),
		ExportLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tokenpath_ingest_export_seconds",
			Help:    "Time from receiving an export to acknowledging it (decode, normalize, write-ahead log).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"signal", "transport"}),
		Overloaded: prometheus.NewCounter(prometheus.CounterOpts{Name: "tokenpath_ingest_overloaded_total",
			Help: "Exports refused because the write path was saturated (429 / RESOURCE_EXHAUSTED)."}),
		QueueDepth: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tokenpath_ingest_queue_rows",
			Help: "Rows acknowledged but not yet written to ClickHouse."}),
		Written: prometheus.NewCounter(prometheus.CounterOpts{Name: "tokenpath_ingest_written_rows_total",
			Help: "Rows written to ClickHouse."}),
		WriteLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tokenpath_ingest_write_seconds",
			Help: "Time to write one sealed segment to ClickHouse.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		WALSync: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tokenpath_ingest_wal_sync_seconds",
			Help: "Time to write and fsync one group of exports to the write-ahead log (their acknowledgement waits for it).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		ScrapeUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tokenpath_scrape_up",
			Help: "1 if the last scrape of the Prometheus target succeeded, 0 if it failed; target is the scrape_targets row id or static-N, never the URL."}, []string{"project", "service", "target"}),
	}
	m.Registry.MustRegister(m.Received, m.Accepted, m.Rejected, m.Requests, m.ExportLatency, m.Overloaded, m.QueueDepth, m.Written, m.WriteLatency, m.WALSync, m.ScrapeUp,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
