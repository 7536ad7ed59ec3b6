package analysis

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/analysis/stats"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// serverHistogramNames are the histograms a metrics-only diagnosis reads
// as stored (TGI's forward passes are told apart by their label method
// as they are read: forwardName).
var serverHistogramNames = func() []string {
	out := make([]string, 0, len(diagnose.ServerHistogramNames)+1)
	for n := range diagnose.ServerHistogramNames {
		out = append(out, n)
	}
	out = append(out, diagnose.HistForward)
	slices.Sort(out)
	return out
}()

// forwardName reads TGI's forward_seconds{method=prefill|decode} as
// forward_prefill_seconds and forward_decode_seconds (huggingface/
// text-generation-inference backends/v3/src/backend.rs records
// tgi_batch_forward_duration with "method" => "prefill" or "decode").
const forwardName = "if(name = '" + diagnose.HistForward + "', concat('forward_', labels['method'], '_seconds'), name)"

// serverCounterNames are the counters (and the ratio gauges: SGLang's hit
// rate, DCGM's GPU activity) that corroborate a metrics-only verdict.
var serverCounterNames = []string{diagnose.MetricPreemptions, diagnose.MetricPrefixCacheHits,
	diagnose.MetricPrefixCacheQueries, diagnose.MetricPrefixCacheHitRate,
	diagnose.MetricGPUDRAMActive, diagnose.MetricGPUTensorActive, diagnose.MetricGPUSMActive}

// serverRatioGauges are read as their mean over a range, not as growth.
var serverRatioGauges = []string{diagnose.MetricPrefixCacheHitRate,
	diagnose.MetricGPUDRAMActive, diagnose.MetricGPUTensorActive, diagnose.MetricGPUSMActive}

// endpointSpans bounds the client spans read for their server.address:
// the endpoints a service calls are few and show up in any few thousand.
const endpointSpans = 5000

// serverMetricsFor loads the inference servers' own metrics for a
// diagnosis whose calls carry no server split (nil otherwise, and when
// there are none): the service itself when it exports histograms (a
// server known by its metrics), else the servers its calls reached, tied
// by the client spans' server.address:server.port to the metrics'
// instance (service.instance.id as the Collector's Prometheus receiver
// sets it, or the scrape target's host:port). The verdict rules read them
// from diagnose.Input.ServerMetrics.
func (q *Queries) serverMetricsFor(ctx context.Context, d DiagnoseRequest, in diagnose.Input) (*diagnose.ServerMetrics, error) {
	for i := range in.Requests {
		if r := &in.Requests[i]; r.Queue != nil || r.Prefill != nil || r.ServerService != "" {
			return nil, nil // server spans give the split
		}
	}
	if d.Service == "" {
		return nil, nil
	}
	baseline := in.Baseline
	if baseline.IsZero() {
		baseline = diagnose.DefaultBaseline(d.Window)
	}
	span := diagnose.Range{From: telemetry.MinTime(d.Window.From, baseline.From), To: telemetry.MaxTime(d.Window.To, baseline.To)}
	sm, err := q.ServerMetrics(ctx, d.Project, d.Service, d.Window, baseline, span)
	if err != nil || len(sm.Histograms) == 0 {
		return nil, err
	}
	return &sm, nil
}

// ServerMetrics loads the figures of the inference servers behind service
// (itself, or those its calls in window reached) over window and baseline.
func (q *Queries) ServerMetrics(ctx context.Context, project uint32, service string, window, baseline, span diagnose.Range) (diagnose.ServerMetrics, error) {
	var sm diagnose.ServerMetrics
	series, err := q.histogramSeries(ctx, project, span)
	if err != nil {
		return sm, err
	}
	if _, own := series[service]; own {
		sm.Servers = []string{service}
	} else if len(series) > 0 {
		endpoints, err := q.serverEndpoints(ctx, project, service, window)
		if err != nil {
			return sm, err
		}
		for srv, instances := range series {
			for _, e := range endpoints {
				if matchEndpoint(e, instanceNames(instances)) && !slices.Contains(sm.Servers, srv) {
					sm.Servers = append(sm.Servers, srv)
					sm.Endpoints = append(sm.Endpoints, e)
				}
			}
		}
		if len(sm.Servers) == 0 && q.Mappings != nil && len(endpoints) > 0 {
			// No address matched: a gateway in between, mapped in Settings.
			mappings, err := q.Mappings.ServerMappings(ctx, project)
			if err != nil {
				return sm, fmt.Errorf("read server mappings: %w", err)
			}
			for srv, e := range mappedServers(mappings, endpoints, series) {
				sm.Servers = append(sm.Servers, srv)
				sm.Endpoints = append(sm.Endpoints, e)
			}
		}
		slices.Sort(sm.Servers)
		slices.Sort(sm.Endpoints)
		sm.Endpoints = slices.Compact(sm.Endpoints)
	}
	if len(sm.Servers) == 0 {
		return sm, nil
	}
	sm.NewInstances = newInstances(series, sm.Servers, window)
	width := diagnose.Buckets(window)
	if sm.Histograms, err = q.serverHistograms(ctx, project, sm.Servers, width, span); err != nil {
		return sm, err
	}
	events, err := q.CH.Query(ctx, "SELECT "+clickhouse.EventColumns+" FROM events FINAL WHERE project_id = ? AND service IN ? AND time >= ? AND time < ? ORDER BY time",
		project, sm.Servers, span.From, span.To)
	if err != nil {
		return sm, fmt.Errorf("load server events: %w", err)
	}
	sm.Events = clickhouse.ScanEvents(events)
	gauges, err := q.metrics(ctx, project, sm.Servers, width, window, baseline)
	if err != nil {
		return sm, err
	}
	for _, g := range gauges {
		sm.Gauges = append(sm.Gauges, g...)
	}
	sm.Window, sm.Baseline, err = q.serverCounters(ctx, project, sm.Servers, window, baseline)
	return sm, err
}

// serverInstance is one instance of a server with histograms and its
// first interval in the range read.
type serverInstance struct {
	name  string
	first time.Time
}

// histogramSeries lists the services with server histograms over r and
// their instances.
func (q *Queries) histogramSeries(ctx context.Context, project uint32, r diagnose.Range) (map[string][]serverInstance, error) {
	res, err := q.CH.Query(ctx, `SELECT service, instance, min(time) AS first FROM histogram_points
		WHERE project_id = ? AND time >= ? AND time < ? AND name IN ? GROUP BY service, instance ORDER BY service, instance LIMIT 1000 BY service`,
		project, r.From, r.To, serverHistogramNames)
	if err != nil {
		return nil, fmt.Errorf("server histograms: %w", err)
	}
	out := map[string][]serverInstance{}
	for i := range res.Len() {
		row := res.Row(i)
		s := row.String("service")
		out[s] = append(out[s], serverInstance{name: row.String("instance"), first: row.Time("first")})
	}
	return out, nil
}

func instanceNames(xs []serverInstance) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.name
	}
	return out
}

// newInstances are the servers' instances whose histograms begin in the
// window while others of them reported before it: a replica that came
// up (a scale-up, a restart under a new address).
func newInstances(series map[string][]serverInstance, servers []string, window diagnose.Range) []string {
	var fresh []string
	older := false
	for _, s := range servers {
		for _, inst := range series[s] {
			switch {
			case inst.first.Before(window.From):
				older = true
			case window.Contains(inst.first):
				fresh = append(fresh, inst.name)
			}
		}
	}
	if !older {
		return nil
	}
	slices.Sort(fresh)
	return fresh
}

// serverEndpoints are the server.address:server.port (or the address
// alone) of service's LLM client calls in r, most called first.
func (q *Queries) serverEndpoints(ctx context.Context, project uint32, service string, r diagnose.Range) ([]string, error) {
	res, err := q.CH.Query(ctx, fmt.Sprintf(`SELECT a, p, count() AS n FROM (
		SELECT attributes['server.address'] AS a, attributes['server.port'] AS p FROM spans
		WHERE project_id = ? AND service = ? AND start >= ? AND start < ? AND llm_role = 'client' LIMIT %d)
		WHERE a != '' GROUP BY a, p ORDER BY n DESC, a, p LIMIT 50`, endpointSpans), project, service, r.From, r.To)
	if err != nil {
		return nil, fmt.Errorf("called endpoints: %w", err)
	}
	out := make([]string, 0, res.Len())
	for i := range res.Len() {
		row := res.Row(i)
		if p := row.String("p"); p != "" {
			out = append(out, net.JoinHostPort(row.String("a"), p))
		} else {
			out = append(out, row.String("a"))
		}
	}
	return out, nil
}

// matchEndpoint reports whether a called endpoint (host:port, or a host)
// is one of a server's metric instances (host:port).
func matchEndpoint(endpoint string, instances []string) bool {
	for _, inst := range instances {
		if inst == endpoint {
			return true
		}
		if host, _, err := net.SplitHostPort(inst); err == nil && host == endpoint {
			return true
		}
	}
	return false
}

// serverHistograms sums the servers' histogram intervals per chart bucket
// and name (and bucket layout) over r. FINAL folds a replayed log's
// duplicates within each day's partition only (a duplicate has its
// original's time, so its day): a day the engine has merged into one part
// is then read without folding (BenchmarkHistogramRows, read_24h_merged*).
func (q *Queries) serverHistograms(ctx context.Context, project uint32, servers []string, width time.Duration, r diagnose.Range) ([]diagnose.HistogramBucket, error) {
	res, err := q.CH.Query(ctx, `SELECT toStartOfInterval(time, toIntervalSecond(?)) AS b, `+forwardName+` AS histogram, bounds,
		arrayMap(x -> toFloat64(x), sumForEach(counts)) AS c
		FROM histogram_points FINAL WHERE project_id = ? AND service IN ? AND name IN ? AND time >= ? AND time < ?
		GROUP BY b, histogram, bounds ORDER BY b, histogram
		SETTINGS do_not_merge_across_partitions_select_final = 1`,
		max(int64(width/time.Second), 1), project, servers, serverHistogramNames, r.From, r.To)
	if err != nil {
		return nil, fmt.Errorf("load server histograms: %w", err)
	}
	out := make([]diagnose.HistogramBucket, 0, res.Len())
	for i := range res.Len() {
		row := res.Row(i)
		out = append(out, diagnose.HistogramBucket{Start: row.Time("b"), Name: row.String("histogram"),
			Buckets: stats.Buckets{Bounds: row.Floats("bounds"), Counts: row.Floats("c")}})
	}
	return out, nil
}

// serverCounters reads how much the servers' counters grew in each range
// (a fall is a restart: the new value is all growth) and the ratio
// gauges' means. A series is its sorted labels: a label map's stored
// order varies from insert to insert.
func (q *Queries) serverCounters(ctx context.Context, project uint32, servers []string, window, baseline diagnose.Range) (w, b diagnose.CounterFigures, err error) {
	from, to := telemetry.MinTime(window.From, baseline.From), telemetry.MaxTime(window.To, baseline.To)
	res, err := q.CH.Query(ctx, `SELECT name, service, instance, toString(cityHash64(arraySort(arrayZip(mapKeys(labels), mapValues(labels))))) AS series, time, value FROM metric_points
		WHERE project_id = ? AND service IN ? AND name IN ? AND time >= ? AND time < ? AND isFinite(value) ORDER BY name, service, instance, series, time`,
		project, servers, serverCounterNames, from, to)
	if err != nil {
		return w, b, fmt.Errorf("load server counters: %w", err)
	}
	type acc struct{ sum, n float64 }
	grew := map[[2]string]*acc{} // (name, range) → increase or gauge sum
	var prevKey string
	var prev float64
	for i := range res.Len() {
		row := res.Row(i)
		name, t, v := row.String("name"), row.Time("time"), row.Float("value")
		side := ""
		switch {
		case window.Contains(t):
			side = "w"
		case baseline.Contains(t):
			side = "b"
		}
		key := name + "\x00" + row.String("service") + "\x00" + row.String("instance") + "\x00" + row.String("series")
		a := grew[[2]string{name, side}]
		if a == nil {
			a = &acc{}
			grew[[2]string{name, side}] = a
		}
		if slices.Contains(serverRatioGauges, name) {
			if side != "" {
				a.sum, a.n = a.sum+v, a.n+1
			}
		} else if key == prevKey && side != "" {
			if v >= prev {
				a.sum += v - prev
			} else {
				a.sum += v // reset
			}
			a.n++
		}
		prevKey, prev = key, v
	}
	figures := func(side string) diagnose.CounterFigures {
		var c diagnose.CounterFigures
		get := func(name string) *float64 {
			if a := grew[[2]string{name, side}]; a != nil && a.n > 0 {
				v := a.sum
				if slices.Contains(serverRatioGauges, name) {
					v /= a.n
				}
				return &v
			}
			return nil
		}
		c.Preemptions, c.PrefixHits, c.PrefixQueries, c.HitRateMean = get(diagnose.MetricPreemptions),
			get(diagnose.MetricPrefixCacheHits), get(diagnose.MetricPrefixCacheQueries), get(diagnose.MetricPrefixCacheHitRate)
		c.DRAMActive, c.TensorActive, c.SMActive = get(diagnose.MetricGPUDRAMActive), get(diagnose.MetricGPUTensorActive), get(diagnose.MetricGPUSMActive)
		return c
	}
	return figures("w"), figures("b"), nil
}

// addMetricsServers lists, beside the services seen in requests, the
// inference servers known only by their metrics (scraped or relayed):
// their gauges' 5-minute peaks and their histograms.
func (q *Queries) addMetricsServers(ctx context.Context, project uint32, since time.Time, by map[string]*ServiceInfo) error {
	gauges := []string{diagnose.MetricKVCacheUsage, diagnose.MetricRequestsWaiting, diagnose.MetricRequestsRunning}
	r, err := q.CH.Query(ctx, `
		SELECT service, [] AS models, groupUniqArray(100)(instance) AS instances, CAST(max(last_time) AS DateTime64(9, 'UTC')) AS last_seen
		FROM metric_peaks_5m WHERE project_id = ? AND bucket >= toStartOfFiveMinutes(?) AND name IN ? GROUP BY service
		UNION ALL
		SELECT service, [] AS models, groupUniqArray(100)(instance) AS instances, max(time) AS last_seen
		FROM histogram_points WHERE project_id = ? AND time >= ? AND name IN ? GROUP BY service`,
		project, since, gauges, project, since, serverHistogramNames)
	if err != nil {
		return fmt.Errorf("list metrics servers: %w", err)
	}
	for i := range r.Len() {
		w := r.Row(i)
		name := w.String("service")
		s := by[name]
		if s == nil {
			s = &ServiceInfo{Service: name, Role: "server"}
			by[name] = s
		} else if s.Role == "client" {
			s.Role = "both"
		}
		s.Models = mergeSorted(s.Models, w.Strings("models"))
		s.Instances = mergeSorted(s.Instances, w.Strings("instances"))
		if t := w.Time("last_seen"); t.After(s.LastSeen) {
			s.LastSeen = t
		}
	}
	return nil
}
