package normalize

import (
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tokenpath/tokenpath/telemetry"
)

// maxExpositionSamples bounds one scrape: a /metrics page of an inference
// server holds hundreds of samples; this only stops a misconfigured target
// from exhausting memory.
const maxExpositionSamples = 200_000

// Prometheus parses a Prometheus text exposition (format 0.0.4, as served
// by vLLM, SGLang and TGI on /metrics) with prometheus/common/expfmt and
// returns one point per gauge, counter and untyped sample; histograms and
// summaries give their _sum and _count series (buckets and quantiles are
// skipped). Names are folded with MetricName, labels are kept, and
// service/instance come from the scrape target. Samples without a timestamp
// get scrapeTime; NaN/Inf samples and samples whose own timestamp is
// implausible are dropped. A malformed exposition fails the whole scrape,
// as it does in Prometheus.
//
// The protobuf exposition is not supported: the scraper sends
// Accept: text/plain.
func Prometheus(projectID uint32, body io.Reader, contentType string, scrapeTime time.Time, service, instance string) ([]telemetry.MetricPoint, error) {
	e, err := PrometheusExposition(projectID, body, contentType, scrapeTime, service, instance)
	return e.Points, err
}

// Exposition is what one scrape yields.
type Exposition struct {
	Points []telemetry.MetricPoint
	// Histograms are the classic histograms' buckets, cumulative, their
	// Start from the series' _created sample when it has one.
	Histograms []telemetry.HistogramPoint
}

// PrometheusExposition parses like Prometheus and also keeps each classic
// histogram's buckets.
func PrometheusExposition(projectID uint32, body io.Reader, contentType string, scrapeTime time.Time, service, instance string) (Exposition, error) {
	if contentType != "" {
		mt, _, err := mime.ParseMediaType(contentType)
		if err != nil {
			return Exposition{}, fmt.Errorf("prometheus exposition: content type %q: %w", contentType, err)
		}
		if mt == "application/vnd.google.protobuf" {
			return Exposition{}, errors.New("prometheus exposition: protobuf format is not supported, scrape with Accept: text/plain")
		}
	}
	// OpenMetrics ends with "# EOF", which the 0.0.4 parser reads as a
	// comment; everything else vLLM/SGLang/TGI print is common to both.
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(body)
	if err != nil {
		return Exposition{}, fmt.Errorf("prometheus exposition: %w", err)
	}
	lim := Limits{}.withDefaults()
	service, instance = cleanString(service, maxNameBytes), cleanString(instance, maxNameBytes)
	var (
		out   []telemetry.MetricPoint
		hists []telemetry.HistogramPoint
	)
	add := func(name string, m *dto.Metric, v float64) {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
		t := scrapeTime
		if m.TimestampMs != nil {
			ts := time.UnixMilli(m.GetTimestampMs()).UTC()
			if checkTime("timestamp", ts, scrapeTime) != "" {
				return
			}
			t = ts
		}
		out = append(out, telemetry.MetricPoint{ProjectID: projectID, Time: t, Service: service, Instance: instance,
			Name: MetricName(cleanString(name, maxNameBytes)), Labels: clampLabels(m.GetLabel(), lim), Value: v})
	}
	samples := 0
	for name, fam := range families {
		if isCreatedSeries(name, families) {
			continue
		}
		for _, m := range fam.GetMetric() {
			if samples++; samples > maxExpositionSamples {
				return Exposition{}, fmt.Errorf("prometheus exposition: more than %d samples", maxExpositionSamples)
			}
			switch fam.GetType() {
			case dto.MetricType_COUNTER:
				add(name, m, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(name, m, m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				add(name, m, m.GetUntyped().GetValue())
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				add(name+"_sum", m, m.GetHistogram().GetSampleSum())
				add(name+"_count", m, float64(m.GetHistogram().GetSampleCount()))
				if fam.GetType() == dto.MetricType_HISTOGRAM {
					if h, ok := classicHistogram(name, m, families, scrapeTime); ok {
						h.ProjectID, h.Service, h.Instance = projectID, service, instance
						h.Labels = clampLabels(m.GetLabel(), lim)
						hists = append(hists, h)
					}
				}
			case dto.MetricType_SUMMARY:
				add(name+"_sum", m, m.GetSummary().GetSampleSum())
				add(name+"_count", m, float64(m.GetSummary().GetSampleCount()))
			}
		}
	}
	return Exposition{Points: out, Histograms: hists}, nil
}

// classicHistogram reads one classic histogram series' buckets. The text
// parser gives cumulative bucket counts, the +Inf bucket among them.
func classicHistogram(name string, m *dto.Metric, families map[string]*dto.MetricFamily, scrapeTime time.Time) (telemetry.HistogramPoint, bool) {
	h := m.GetHistogram()
	buckets := h.GetBucket()
	if len(buckets) == 0 || len(buckets) > maxHistogramBuckets {
		return telemetry.HistogramPoint{}, false
	}
	p := telemetry.HistogramPoint{Time: scrapeTime, Name: HistogramName(cleanString(name, maxNameBytes)),
		Count: h.GetSampleCount(), Sum: h.GetSampleSum(), Cumulative: true}
	if m.TimestampMs != nil {
		ts := time.UnixMilli(m.GetTimestampMs()).UTC()
		if checkTime("timestamp", ts, scrapeTime) != "" {
			return p, false
		}
		p.Time = ts
	}
	if math.IsNaN(p.Sum) || math.IsInf(p.Sum, 0) {
		p.Sum = 0
	}
	var below uint64
	for _, b := range buckets {
		ub, c := b.GetUpperBound(), b.GetCumulativeCount()
		if math.IsNaN(ub) || c < below || len(p.Bounds) > 0 && ub <= p.Bounds[len(p.Bounds)-1] {
			return p, false // not a well-formed histogram: _sum/_count still hold
		}
		if math.IsInf(ub, 1) {
			break
		}
		p.Bounds = append(p.Bounds, ub)
		p.Counts = append(p.Counts, c-below)
		below = c
	}
	if p.Count < below {
		return p, false
	}
	p.Counts = append(p.Counts, p.Count-below)
	p.Start = createdTime(name, m, families, h)
	return p, true
}

// createdTime is when a series' counts began: the histogram's own created
// timestamp (OpenMetrics, protobuf), else the matching sample of Python
// prometheus_client's "<name>_created" gauge (vLLM, SGLang); zero if none.
func createdTime(name string, m *dto.Metric, families map[string]*dto.MetricFamily, h *dto.Histogram) time.Time {
	if ct := h.GetCreatedTimestamp(); ct != nil && ct.IsValid() {
		return ct.AsTime().UTC()
	}
	fam := families[name+"_created"]
	if fam == nil {
		return time.Time{}
	}
	want := labelSignature(m.GetLabel())
	for _, c := range fam.GetMetric() {
		if labelSignature(c.GetLabel()) != want {
			continue
		}
		v := c.GetGauge().GetValue()
		if c.Untyped != nil {
			v = c.GetUntyped().GetValue()
		}
		if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return time.Time{}
		}
		return time.Unix(0, int64(v*1e9)).UTC()
	}
	return time.Time{}
}

// labelSignature identifies a label set regardless of order.
func labelSignature(labels []*dto.LabelPair) string {
	parts := make([]string, 0, len(labels))
	for _, l := range labels {
		parts = append(parts, l.GetName()+"\x00"+l.GetValue())
	}
	slices.Sort(parts)
	return strings.Join(parts, "\x01")
}

// isCreatedSeries drops Python prometheus_client's (vLLM, SGLang) separate
// "<family>_created" gauges: creation timestamps, not measurements.
func isCreatedSeries(name string, families map[string]*dto.MetricFamily) bool {
	base, ok := strings.CutSuffix(name, "_created")
	if !ok {
		return false
	}
	if f, ok := families[base]; ok && f.GetType() != dto.MetricType_GAUGE {
		return true
	}
	if f, ok := families[base+"_total"]; ok && f.GetType() == dto.MetricType_COUNTER {
		return true
	}
	_, counter := families[base]
	return counter
}

func clampLabels(in []*dto.LabelPair, lim Limits) map[string]string {
	out := make(map[string]string, min(len(in), lim.MaxAttributes))
	for _, l := range in {
		if len(out) >= lim.MaxAttributes {
			break
		}
		out[cleanString(l.GetName(), lim.MaxKeyBytes)] = cleanString(l.GetValue(), lim.MaxValueBytes)
	}
	return out
}
