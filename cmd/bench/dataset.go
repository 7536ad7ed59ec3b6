package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// dataset is the query bench's synthetic history: llm_requests over the 7
// days before end, with spans behind a sample of them, inference gauges
// every 15 s and scaling events.
type dataset struct {
	project uint32
	end     time.Time
	start   time.Time
	rows    int // llm_requests rows loaded so far
	// cdf is the cumulative diurnal traffic weight per minute of the span,
	// so rows land where the load curve puts them.
	cdf []float64
	// incident: llama70 queues (KV cache full) in [incidentFrom, incidentTo).
	incidentFrom, incidentTo time.Time
	scrapeInterval           time.Duration
}

const (
	// defaultDataSpan is how far back a dataset's requests reach (bench
	// query --span).
	defaultDataSpan = 7 * 24 * time.Hour
	loadBatchRows   = 250_000
	spanSampleRate  = 0.005 // share of requests with their spans stored
)

func newDataset(project uint32, end time.Time, span time.Duration) *dataset {
	if span <= 0 {
		span = defaultDataSpan
	}
	d := &dataset{project: project, end: end.Truncate(time.Minute), incidentFrom: end.Add(-50 * time.Minute), incidentTo: end.Add(-10 * time.Minute),
		scrapeInterval: 15 * time.Second}
	d.start = d.end.Add(-span)
	minutes := int(span / time.Minute)
	d.cdf = make([]float64, minutes)
	sum := 0.0
	for i := range d.cdf {
		sum += diurnalLoad(d.start.Add(time.Duration(i) * time.Minute))
		d.cdf[i] = sum
	}
	for i := range d.cdf {
		d.cdf[i] /= sum
	}
	return d
}

// timeAt maps a quantile of the traffic (0..1) to a time.
func (d *dataset) timeAt(q float64) time.Time {
	i := sort.SearchFloat64s(d.cdf, q)
	if i >= len(d.cdf) {
		i = len(d.cdf) - 1
	}
	lo := 0.0
	if i > 0 {
		lo = d.cdf[i-1]
	}
	frac := 0.0
	if w := d.cdf[i] - lo; w > 0 {
		frac = (q - lo) / w
	}
	return d.start.Add(time.Duration(i)*time.Minute + time.Duration(frac*float64(time.Minute)))
}

// loadStats is how long adding rows took.
type loadStats struct {
	Rows, Spans, Points int
	Took                time.Duration // llm_requests + spans inserts
	Generate            time.Duration // building the rows in Go
}

// addRequests inserts n more llm_requests rows spread over the whole span
// (stratified by the load curve, in time order), with spans for a sample.
func (d *dataset) addRequests(ctx context.Context, ch *clickhouse.Store, n int, seed uint64, progress func(string, ...any)) (loadStats, error) {
	var st loadStats
	w := newWorld(seed, d.incidentFrom, d.incidentTo)
	idRng := rand.New(rand.NewPCG(seed+7, seed+11))
	version := uint64(time.Now().UnixNano())
	for done := 0; done < n; {
		g0 := time.Now()
		size := min(loadBatchRows, n-done)
		reqs := make([]telemetry.LLMRequest, size)
		// One arena for the row's optional figures: 10 pointers a row
		// would otherwise be 10 allocations.
		arena := make([]float64, 0, size*9)
		ints := make([]int64, 0, size*2)
		fp := func(v float64) *float64 { arena = append(arena, v); return &arena[len(arena)-1] }
		ip := func(v int64) *int64 { ints = append(ints, v); return &ints[len(ints)-1] }
		var spans []telemetry.Span
		for i := range reqs {
			q := (float64(done+i) + w.rng.Float64()) / float64(n)
			s := w.draw(d.timeAt(q), false)
			traceID, clientSpan := randomHex(idRng, 16), randomHex(idRng, 8)
			r := &reqs[i]
			*r = telemetry.LLMRequest{ProjectID: d.project, TraceID: traceID, SpanID: clientSpan, Service: s.app.service,
				ServerService: s.backend.service, Model: s.backend.model, Provider: s.backend.provider, Instance: s.instance,
				Start: s.start.Add(msDuration(s.preMs)), TTFT: fp(s.ttftMs), PreInference: fp(s.preMs), Decode: fp(s.decodeMs),
				E2E: fp(s.e2eMs), ITL: fp(s.itlMs), InputTokens: ip(s.inTokens), OutputTokens: ip(s.outTokens),
				ColdStart: s.coldStart, Error: s.failed, Route: s.app.route, Tenant: s.tenant}
			if !s.backend.managed {
				r.Queue, r.Prefill, r.Network = fp(s.queueMs), fp(s.prefillMs), fp(s.networkMs)
			}
			if s.coldStart {
				r.ColdStartWait = fp(s.coldWaitMs)
			}
			if w.rng.Float64() < spanSampleRate {
				spans = append(spans, spansOf(d.project, s, traceID, clientSpan, idRng)...)
			}
		}
		st.Generate += time.Since(g0)
		t0 := time.Now()
		if err := ch.Insert(ctx, clickhouse.RequestsBatch(reqs, nil, version)); err != nil {
			return st, err
		}
		if err := ch.Insert(ctx, clickhouse.SpansBatch(spans)); err != nil {
			return st, err
		}
		st.Took += time.Since(t0)
		st.Rows += size
		st.Spans += len(spans)
		done += size
		d.rows += size
		if progress != nil && (done/loadBatchRows)%8 == 0 {
			progress("loaded %d/%d rows (%.0f rows/s into llm_requests)", done, n, float64(st.Rows)/st.Took.Seconds())
		}
	}
	return st, ctx.Err()
}

// spansOf is the stored trace behind one request: root, retrieval, LLM
// client, and the vLLM server span for self-hosted backends.
func spansOf(project uint32, s sample, traceID, clientSpan string, rng *rand.Rand) []telemetry.Span {
	root, retrieval := randomHex(rng, 8), randomHex(rng, 8)
	tLLM := s.start.Add(msDuration(s.preMs))
	tEnd := tLLM.Add(msDuration(s.e2eMs))
	res := map[string]string{"service.name": s.app.service, "deployment.environment.name": "production", "k8s.namespace.name": "apps"}
	status := "unset"
	if s.failed {
		status = "error"
	}
	out := []telemetry.Span{
		{ProjectID: project, TraceID: traceID, SpanID: root, Service: s.app.service, Name: "POST " + s.app.route, Kind: "server",
			Start: s.start, End: tEnd.Add(12 * time.Millisecond), StatusCode: status, Resource: res,
			Attributes: map[string]string{"http.route": s.app.route, "http.request.method": "POST", "app.tenant_id": s.tenant}},
		{ProjectID: project, TraceID: traceID, SpanID: retrieval, ParentSpanID: root, Service: s.app.service, Name: "qdrant.search",
			Kind: "client", Start: s.start.Add(2 * time.Millisecond), End: tLLM.Add(-time.Millisecond), StatusCode: "unset", Resource: res,
			Attributes: map[string]string{"db.system.name": "qdrant", "db.collection.name": "docs_" + s.tenant}},
		{ProjectID: project, TraceID: traceID, SpanID: clientSpan, ParentSpanID: root, Service: s.app.service, Name: "chat " + s.backend.model,
			Kind: "client", Start: tLLM, End: tEnd, StatusCode: status, Resource: res,
			LLM: telemetry.LLMCall{Role: telemetry.LLMClient, Provider: s.backend.provider, Model: s.backend.model, Operation: "chat",
				InputTokens: telemetry.Ptr(s.inTokens), OutputTokens: telemetry.Ptr(s.outTokens), ClientTTFT: telemetry.Ptr(msDuration(s.ttftMs))},
			Attributes: map[string]string{"gen_ai.operation.name": "chat", "gen_ai.provider.name": s.backend.provider, "gen_ai.request.model": s.backend.model}},
	}
	if !s.backend.managed {
		sStart := tLLM.Add(msDuration(s.networkMs/2 + s.coldWaitMs))
		out = append(out, telemetry.Span{ProjectID: project, TraceID: traceID, SpanID: randomHex(rng, 8), ParentSpanID: clientSpan,
			Service: s.backend.service, Instance: s.instance, Name: "llm_request", Kind: "server", Start: sStart,
			End: sStart.Add(msDuration(s.queueMs + s.prefillMs + s.decodeMs)), StatusCode: "unset",
			Resource: map[string]string{"service.name": s.backend.service, "service.instance.id": s.instance},
			LLM: telemetry.LLMCall{Role: telemetry.LLMServer, Provider: "vllm", Model: s.backend.model,
				InputTokens: telemetry.Ptr(s.inTokens), OutputTokens: telemetry.Ptr(s.outTokens),
				QueueTime: telemetry.Ptr(msDuration(s.queueMs)), PrefillTime: telemetry.Ptr(msDuration(s.prefillMs)),
				ServerTTFT: telemetry.Ptr(msDuration(s.queueMs + s.prefillMs)), DecodeTime: telemetry.Ptr(msDuration(s.decodeMs))},
			Attributes: map[string]string{"gen_ai.latency.time_in_queue": fmt.Sprint(s.queueMs / 1000)}})
	}
	return out
}

// addGauges inserts the vLLM gauges of every instance every scrape interval over the
// whole span, and the scaling events: the inputs diagnose correlates with.
func (d *dataset) addGauges(ctx context.Context, ch *clickhouse.Store) (int, error) {
	rng := rand.New(rand.NewPCG(42, 43))
	var points []telemetry.MetricPoint
	total := 0
	flush := func() error {
		if len(points) == 0 {
			return nil
		}
		if err := ch.Insert(ctx, clickhouse.MetricsBatch(points)); err != nil {
			return err
		}
		total += len(points)
		points = points[:0]
		return nil
	}
	labels := map[string]map[string]string{}
	for _, b := range selfHosted {
		labels[b.service] = map[string]string{"model_name": b.model}
	}
	for t := d.start; t.Before(d.end); t = t.Add(d.scrapeInterval) {
		busy := max(diurnalLoad(t)-1, 0)
		for _, b := range selfHosted {
			incident := b.incident && !t.Before(d.incidentFrom) && t.Before(d.incidentTo)
			for _, inst := range b.instances {
				kv := min(0.35+0.4*busy+0.1*rng.NormFloat64(), 0.95)
				waiting := float64(rng.IntN(2 + int(4*busy)))
				if incident {
					kv, waiting = 0.97+0.02*rng.Float64(), 20+float64(rng.IntN(20))
				}
				running := float64(8 + rng.IntN(16))
				points = append(points,
					telemetry.MetricPoint{ProjectID: d.project, Time: t, Service: b.service, Instance: inst, Name: "kv_cache_usage", Labels: labels[b.service], Value: max(kv, 0)},
					telemetry.MetricPoint{ProjectID: d.project, Time: t, Service: b.service, Instance: inst, Name: "requests_waiting", Labels: labels[b.service], Value: waiting},
					telemetry.MetricPoint{ProjectID: d.project, Time: t, Service: b.service, Instance: inst, Name: "requests_running", Labels: labels[b.service], Value: running})
			}
		}
		if len(points) >= 500_000 {
			if err := flush(); err != nil {
				return total, err
			}
		}
	}
	if err := flush(); err != nil {
		return total, err
	}
	var events []telemetry.Event
	for _, b := range selfHosted {
		for _, inst := range b.instances {
			events = append(events, telemetry.Event{ProjectID: d.project, Time: d.start, Kind: telemetry.EventInstanceStarted,
				Service: b.service, Instance: inst, Reason: "first seen", Source: "tokenpath"})
		}
	}
	// Daily scale-up in the morning and scale-down at night.
	for day := d.start.Truncate(24 * time.Hour); day.Before(d.end); day = day.Add(24 * time.Hour) {
		for _, b := range selfHosted {
			n := int32(len(b.instances))
			up, down := day.Add(7*time.Hour+30*time.Minute), day.Add(22*time.Hour)
			if up.After(d.start) && up.Before(d.end) {
				events = append(events, telemetry.Event{ProjectID: d.project, Time: up, Kind: telemetry.EventScale, Service: b.service,
					FromReplicas: telemetry.Ptr(n - 1), ToReplicas: telemetry.Ptr(n), Reason: "HPA: requests_waiting above target", Source: "webhook"})
			}
			if down.After(d.start) && down.Before(d.end) {
				events = append(events, telemetry.Event{ProjectID: d.project, Time: down, Kind: telemetry.EventScale, Service: b.service,
					FromReplicas: telemetry.Ptr(n), ToReplicas: telemetry.Ptr(n - 1), Reason: "HPA: scale down", Source: "webhook"})
			}
		}
	}
	if err := ch.Insert(ctx, clickhouse.EventsBatch(events)); err != nil {
		return total, err
	}
	return total, nil
}
