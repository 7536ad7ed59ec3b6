package analysis_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/demo"
)

// A metrics-only fleet's history: 30 minutes of baseline, then a
// 10-minute window with the incident, 20 calls a minute.
const (
	baselineMinutes = 30
	windowMinutes   = 10
	callsPerMinute  = 20
)

// fleetCall is one call as the app sees it.
type fleetCall struct {
	ttft, decode time.Duration
	inputTokens  int
}

// fleetMinute is what one simulated minute of a metrics-only vLLM and
// its caller produce.
type fleetMinute struct {
	at    time.Time
	calls []fleetCall
	dcgm  [2]float64 // DRAM and tensor-pipe activity (0 = no DCGM exporter)
}

// fleetIncident plants one incident in a vLLM with tracing off: how the
// window's requests differ, and what the diagnosis must then read from
// the server's metrics alone.
type fleetIncident struct {
	name    string
	verdict string
	// request shapes one request: vLLM's phases, the wait the app sees
	// before the server (a gateway, a hold), and the prompt's tokens.
	request func(r *rand.Rand, minute int, bad bool) (demo.RequestPhases, time.Duration, int)
	// minute moves the scheduler gauges and counters after each minute.
	minute func(v *demo.VLLMMetrics, bad bool)
	dcgm   bool // export DCGM's DRAM and tensor activity beside vLLM's
	// scaleUp posts a 0 → 1 scale event of the server in the window.
	scaleUp bool
	// figures are evidence figures the diagnosis must quote; check adds
	// the incident's own bounds.
	figures []string
	check   func(t *testing.T, figs map[string]float64)
}

// healthyRequest is the baseline: a short queue, 150–250 ms of prefill,
// 2 s of decode for 100 tokens (ITL ~20 ms).
func healthyRequest(r *rand.Rand) demo.RequestPhases {
	return demo.RequestPhases{Queue: time.Duration(r.ExpFloat64() * float64(20*time.Millisecond)),
		Prefill: 150*time.Millisecond + time.Duration(r.Float64()*float64(100*time.Millisecond)), Decode: 2 * time.Second, OutputTokens: 100}
}

func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Float64()*float64(hi-lo))
}

// quietMinute keeps the scheduler relaxed and the prefix cache warm.
func quietMinute(v *demo.VLLMMetrics) {
	v.SetScheduler(0, 12, 0.35)
	v.AddPrefixCache(600, 1000)
}

var fleetIncidents = []fleetIncident{
	{
		name: "queueing", verdict: "queueing",
		request: func(r *rand.Rand, _ int, bad bool) (demo.RequestPhases, time.Duration, int) {
			p := healthyRequest(r)
			if bad {
				p.Queue = between(r, 1500*time.Millisecond, 3*time.Second)
			}
			return p, 0, 900
		},
		minute: func(v *demo.VLLMMetrics, bad bool) {
			quietMinute(v)
			if bad {
				v.SetScheduler(32, 48, 0.97)
			}
		},
		figures: []string{"requests_waiting_peak", "kv_cache_peak", "resolution_ms"},
		check: func(t *testing.T, figs map[string]float64) {
			// Waits of 1.5–3 s: vLLM's buckets put the p95 in (2.5, 5] s,
			// the baseline's within the first bucket (0, 300 ms].
			if p95, base := figs["p95"], figs["baseline_p95"]; p95 <= 2500 || p95 > 5000 || base <= 0 || base > 300 ||
				figs["requests_waiting_peak"] != 32 || figs["kv_cache_peak"] != 0.97 {
				t.Errorf("figures %v; want queue p95 in (2.5, 5] s from a baseline in (0, 300] ms, 32 waiting, KV 0.97", figs)
			}
		},
	},
	{
		// Prompts grew and stopped hitting the prefix cache.
		name: "prefill", verdict: "prefill",
		request: func(r *rand.Rand, _ int, bad bool) (demo.RequestPhases, time.Duration, int) {
			p := healthyRequest(r)
			if bad {
				p.Prefill = between(r, 1500*time.Millisecond, 3*time.Second)
				return p, 0, 2400
			}
			return p, 0, 900
		},
		minute: func(v *demo.VLLMMetrics, bad bool) {
			v.SetScheduler(0, 12, 0.4)
			if bad {
				v.AddPrefixCache(150, 1000)
			} else {
				v.AddPrefixCache(600, 1000)
			}
		},
		figures: []string{"prefix_cache_hit_rate", "input_tokens_p50"},
		check: func(t *testing.T, figs map[string]float64) {
			// The window's first interval is the baseline's last (stamped
			// at its end): 15 % nine minutes of ten.
			if figs["prefix_cache_hit_rate"] > 0.25 || figs["baseline_prefix_cache_hit_rate"] < 0.55 || figs["p95"] <= 2500 {
				t.Errorf("figures %v; want the hit rate 60 %% → about 20 %% and a prefill p95 above 2.5 s", figs)
			}
		},
	},
	{
		// Tokens come three times slower under preemptions, memory-bound.
		name: "decode", verdict: "decode", dcgm: true,
		request: func(r *rand.Rand, _ int, bad bool) (demo.RequestPhases, time.Duration, int) {
			p := healthyRequest(r)
			if bad {
				p.Decode = between(r, 5*time.Second, 7*time.Second)
			}
			return p, 0, 900
		},
		minute: func(v *demo.VLLMMetrics, bad bool) {
			quietMinute(v)
			if bad {
				v.SetScheduler(2, 64, 0.96)
				v.AddPreemptions(30)
			}
		},
		figures: []string{"preemptions", "gpu_dram_active", "gpu_compute_active", "kv_cache_peak"},
		check: func(t *testing.T, figs map[string]float64) {
			// ITL 50–70 ms against 20 ms: vLLM's ITL buckets (…, 0.05, 0.075, …).
			if figs["preemptions"] < 200 || figs["baseline_preemptions"] != 0 || figs["p95"] <= 50 || figs["p95"] > 75 ||
				figs["gpu_dram_active"] < 0.8 || figs["gpu_compute_active"] > 0.3 {
				t.Errorf("figures %v; want ~300 preemptions against none, ITL p95 in (50, 75] ms, DRAM active ~0.88 vs tensor ~0.25", figs)
			}
		},
	},
	{
		// The server scaled from zero: calls were held before it, not in it.
		name: "cold start", verdict: "cold_start", scaleUp: true,
		request: func(r *rand.Rand, minute int, bad bool) (demo.RequestPhases, time.Duration, int) {
			p := healthyRequest(r)
			if bad && minute < baselineMinutes+4 {
				return p, between(r, 8*time.Second, 15*time.Second), 900
			}
			return p, 0, 900
		},
		minute:  func(v *demo.VLLMMetrics, _ bool) { quietMinute(v) },
		figures: []string{"scale_events", "server_ttft_growth_ms"},
		check: func(t *testing.T, figs map[string]float64) {
			if figs["client_ttft_p95"] < 8000 || figs["server_ttft_growth_ms"] > 100 {
				t.Errorf("figures %v; want a client TTFT p95 of 8 s or more with the server's flat", figs)
			}
		},
	},
	{
		// A gateway between app and server adds 1.5–2.5 s.
		name: "network", verdict: "network",
		request: func(r *rand.Rand, _ int, bad bool) (demo.RequestPhases, time.Duration, int) {
			if bad {
				return healthyRequest(r), between(r, 1500*time.Millisecond, 2500*time.Millisecond), 900
			}
			return healthyRequest(r), 0, 900
		},
		minute:  func(v *demo.VLLMMetrics, _ bool) { quietMinute(v) },
		figures: []string{"server_ttft_growth_ms", "client_ttft_p95"},
		check: func(t *testing.T, figs map[string]float64) {
			if figs["client_ttft_p95"] < 1500 || figs["server_ttft_growth_ms"] > 100 {
				t.Errorf("figures %v; want the client TTFT p95 above 1.5 s with the server's flat", figs)
			}
		},
	},
}

// simulate drives a fake vLLM minute by minute; after each minute snap
// receives the server's state.
func (inc fleetIncident) simulate(t0 time.Time, vllm *demo.VLLMMetrics, snap func(m fleetMinute, end time.Time)) []fleetMinute {
	r := rand.New(rand.NewPCG(41, 7))
	var out []fleetMinute
	for m := range baselineMinutes + windowMinutes {
		bad := m >= baselineMinutes
		fm := fleetMinute{at: t0.Add(time.Duration(m) * time.Minute)}
		for range callsPerMinute {
			p, before, tokens := inc.request(r, m, bad)
			vllm.ObserveRequest(p)
			fm.calls = append(fm.calls, fleetCall{ttft: before + p.Queue + p.Prefill + 30*time.Millisecond, decode: p.Decode, inputTokens: tokens})
		}
		inc.minute(vllm, bad)
		if inc.dcgm {
			fm.dcgm = [2]float64{0.3, 0.35}
			if bad {
				fm.dcgm = [2]float64{0.88, 0.25}
			}
		}
		out = append(out, fm)
		snap(fm, fm.at.Add(time.Minute))
	}
	return out
}

// sendCalls exports the app's client spans (no server spans: vLLM's
// tracing is off) naming the endpoint they called.
func sendCalls(t *testing.T, srv *apptest.Server, service, host string, port int, minutes []fleetMinute) {
	t.Helper()
	ctx := context.Background()
	exp := srv.TraceExporter(t)
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))))
	tr := tp.Tracer("app")
	for _, m := range minutes {
		for i, c := range m.calls {
			start := m.at.Add(time.Duration(i) * time.Minute / callsPerMinute)
			_, s := tr.Start(ctx, "chat llama", trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindClient),
				trace.WithAttributes(attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.provider.name", "vllm"),
					attribute.String("gen_ai.request.model", "llama"), attribute.Int("gen_ai.usage.input_tokens", c.inputTokens),
					attribute.Int("gen_ai.usage.output_tokens", 100), attribute.Float64("gen_ai.response.time_to_first_chunk", c.ttft.Seconds()),
					attribute.String("server.address", host), attribute.Int("server.port", port)))
			s.End(trace.WithTimestamp(start.Add(c.ttft + c.decode)))
		}
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// collectorShaped renames vLLM's metrics as the OTel Collector relays
// them: ':' → '_', counters without "_total".
func collectorShaped(ms []metricdata.Metrics) []metricdata.Metrics {
	for i := range ms {
		ms[i].Name = strings.TrimSuffix(strings.ReplaceAll(ms[i].Name, ":", "_"), "_total")
	}
	return ms
}

// dcgmMetricdata is the DCGM exporter's profiling ratios as relayed.
func dcgmMetricdata(m fleetMinute, at time.Time) []metricdata.Metrics {
	attrs := attribute.NewSet(attribute.String("gpu", "0"), attribute.String("UUID", "GPU-0"))
	var out []metricdata.Metrics
	for i, name := range []string{"DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"} {
		out = append(out, metricdata.Metrics{Name: name, Data: metricdata.Gauge[float64]{
			DataPoints: []metricdata.DataPoint[float64]{{Attributes: attrs, Time: at, Value: m.dcgm[i]}}}})
	}
	return out
}

// dcgmExposition is the same as the exporter's text page, stamped at.
func dcgmExposition(m fleetMinute, at time.Time) []byte {
	var b bytes.Buffer
	for i, name := range []string{"DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"} {
		fmt.Fprintf(&b, "# TYPE %s gauge\n%s{gpu=\"0\",UUID=\"GPU-0\"} %g %d\n", name, name, m.dcgm[i], at.UnixMilli())
	}
	return b.Bytes()
}

// postScaleUp sends the server's 0 → 1 scale event at the window's start.
func postScaleUp(t *testing.T, srv *apptest.Server, service string, at time.Time) {
	t.Helper()
	body := fmt.Sprintf(`{"time":%q,"kind":"scale","service":%q,"from_replicas":0,"to_replicas":1,"reason":"scale from zero","source":"keda"}`,
		at.Format(time.RFC3339), service)
	req, _ := http.NewRequest(http.MethodPost, "http://"+srv.HTTPAddr+"/api/v1/events", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apptest.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("post scale event: %s", resp.Status)
	}
}

// relay exports inc's history over OTLP as the Collector's Prometheus
// receiver does (job → service.name, the scraped host:port →
// service.instance.id, server.address/port) and the app's calls to
// callHost:callPort.
func relay(t *testing.T, srv *apptest.Server, inc fleetIncident, t0 time.Time, server, app, instance, callHost string, callPort int) {
	t.Helper()
	ctx := context.Background()
	exp := srv.MetricExporter(t)
	host, port, _ := net.SplitHostPort(instance)
	res := resource.NewSchemaless(attribute.String("service.name", server), attribute.String("service.instance.id", instance),
		attribute.String("server.address", host), attribute.String("server.port", port))
	vllm, start := demo.NewVLLMMetrics("llama"), t0.Add(-10*time.Second)
	minutes := inc.simulate(t0, vllm, func(m fleetMinute, end time.Time) {
		ms := collectorShaped(vllm.Metricdata(start, end))
		if inc.dcgm {
			ms = append(ms, dcgmMetricdata(m, end)...)
		}
		rm := &metricdata.ResourceMetrics{Resource: res, ScopeMetrics: []metricdata.ScopeMetrics{{
			Scope: instrumentation.Scope{Name: "otelcol/prometheusreceiver"}, Metrics: ms}}}
		if err := exp.Export(ctx, rm); err != nil {
			t.Fatal(err)
		}
	})
	sendCalls(t, srv, app, callHost, callPort, minutes)
}

// scrapeHistory serves inc's history as a real /metrics page on
// 127.0.0.1, one simulated minute per scrape (stamped with its time, so
// 40 minutes take 40 one-second scrapes), registers it as a scrape target
// of service server, and sends the app's calls to its host:port. The
// returned channel closes once the last page was read.
func scrapeHistory(t *testing.T, srv *apptest.Server, inc fleetIncident, t0 time.Time, server, app string) (<-chan struct{}, string) {
	t.Helper()
	vllm := demo.NewVLLMMetrics("llama")
	var (
		mu    sync.Mutex
		pages [][]byte
		next  int
	)
	minutes := inc.simulate(t0, vllm, func(m fleetMinute, end time.Time) {
		page, err := vllm.Exposition(end)
		if err != nil {
			t.Fatal(err)
		}
		if inc.dcgm {
			page = append(page, dcgmExposition(m, end)...)
		}
		pages = append(pages, page)
	})
	done := make(chan struct{})
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if next >= len(pages) {
			http.Error(w, "no more history", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(pages[next])
		if next++; next == len(pages) {
			close(done)
		}
	}))
	t.Cleanup(fake.Close)
	u, _ := url.Parse(fake.URL)
	host, portS, _ := net.SplitHostPort(u.Host)
	port, _ := strconv.Atoi(portS)
	if _, err := srv.PG.Pool.Exec(context.Background(), `INSERT INTO scrape_targets (project_id, url, interval_s, timeout_s, service)
		SELECT id, $1, 1, 1, $2 FROM projects WHERE name = 'default'`, fake.URL+"/metrics", server); err != nil {
		t.Fatal(err)
	}
	sendCalls(t, srv, app, host, port, minutes)
	return done, u.Host
}

type diagnosisJSON struct {
	Verdict  string `json:"verdict"`
	Summary  string `json:"summary"`
	Requests int    `json:"requests"`
	Evidence []struct {
		N       int                `json:"n"`
		Text    string             `json:"text"`
		Figures map[string]float64 `json:"figures"`
	} `json:"evidence"`
	ServerMetrics *struct {
		Servers   []string `json:"servers"`
		Endpoints []string `json:"endpoints"`
	} `json:"server_metrics"`
	Answers struct {
		Decode *struct {
			Kind   string `json:"kind"`
			Source string `json:"source"`
		} `json:"decode"`
	} `json:"answers"`
}

// diagnoseWindow waits until service's window diagnosis has its requests
// (when it calls the server) and server metrics, and the verdict want;
// it returns the last diagnosis read.
func diagnoseWindow(t *testing.T, srv *apptest.Server, service, want string, window [2]time.Time, calls bool) diagnosisJSON {
	t.Helper()
	path := fmt.Sprintf("/api/v1/diagnose?service=%s&from=%s&to=%s", service, window[0].Format(time.RFC3339), window[1].Format(time.RFC3339))
	var d diagnosisJSON
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		d = diagnosisJSON{}
		srv.GetJSON(t, path, &d)
		ready := d.ServerMetrics != nil && (!calls || d.Requests == callsPerMinute*windowMinutes)
		if ready && d.Verdict == want || time.Now().After(deadline) {
			return d
		}
	}
}

// checkIncident asserts inc's verdict read from server's metrics, with
// numbered evidence carrying the incident's figures.
func checkIncident(t *testing.T, srv *apptest.Server, inc fleetIncident, service, server string, window [2]time.Time, calls bool) {
	t.Helper()
	d := diagnoseWindow(t, srv, service, inc.verdict, window, calls)
	if d.Verdict != inc.verdict || d.ServerMetrics == nil || len(d.ServerMetrics.Servers) != 1 || d.ServerMetrics.Servers[0] != server {
		t.Fatalf("%s: verdict %q (%s), server metrics %+v; want %s from %s; evidence %+v", service, d.Verdict, d.Summary, d.ServerMetrics, inc.verdict, server, d.Evidence)
	}
	figs := map[string]float64{}
	for i, e := range d.Evidence {
		if e.N != i+1 {
			t.Errorf("evidence %d numbered %d", i+1, e.N)
		}
		for k, v := range e.Figures {
			figs[k] = v
		}
	}
	for _, f := range inc.figures {
		if _, ok := figs[f]; !ok {
			t.Errorf("%s: no evidence quotes %s: %+v", service, f, d.Evidence)
		}
	}
	inc.check(t, figs)
	if inc.dcgm && (d.Answers.Decode == nil || d.Answers.Decode.Source != "dcgm" || d.Answers.Decode.Kind != "memory-bound") {
		t.Errorf("%s: decode answer %+v, want memory-bound from DCGM", service, d.Answers.Decode)
	}
}

// A fleet whose vLLM has tracing off gets the verdict of each planted
// incident from the server's histograms, gauges and counters, relayed
// over OTLP as the Collector's Prometheus receiver does and scraped by
// the built-in scraper; the servers are listed as services, and a server
// diagnosed by itself reads the same.
func TestMetricsOnlyFleet(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	t0 := time.Now().Add(-time.Duration(baselineMinutes+windowMinutes+2) * time.Minute).Truncate(time.Minute)
	window := [2]time.Time{t0.Add(baselineMinutes * time.Minute), t0.Add((baselineMinutes + windowMinutes) * time.Minute)}
	slug := func(inc fleetIncident) string { return strings.ReplaceAll(inc.name, " ", "-") }

	// Every history is sent first, the scrapes running side by side.
	var scraped []<-chan struct{}
	hosts := map[string]string{}
	for i, inc := range fleetIncidents {
		instance := fmt.Sprintf("10.0.0.%d:8000", 10+i)
		host, _, _ := net.SplitHostPort(instance)
		relay(t, srv, inc, t0, "vllm-"+slug(inc)+"-relayed", "chat-"+slug(inc)+"-relayed", instance, host, 8000)
		done, h := scrapeHistory(t, srv, inc, t0, "vllm-"+slug(inc)+"-scraped", "chat-"+slug(inc)+"-scraped")
		scraped, hosts[inc.name] = append(scraped, done), h
		if inc.scaleUp {
			postScaleUp(t, srv, "vllm-"+slug(inc)+"-relayed", window[0].Add(30*time.Second))
			postScaleUp(t, srv, "vllm-"+slug(inc)+"-scraped", window[0].Add(30*time.Second))
		}
	}
	relayTGI(t, srv, t0, "tgi-llama", "chat-tgi", "10.0.0.40", 80)
	// A queueing server behind a gateway: the calls name the gateway.
	relay(t, srv, fleetIncidents[0], t0, "vllm-behind-gateway", "chat-via-gateway", "10.0.0.30:8000", "llm-gateway.internal", 443)
	srv.Scraper.Reload()
	for i, done := range scraped {
		select {
		case <-done:
		case <-time.After(3 * time.Minute):
			t.Fatalf("the scraper did not read %s's history", fleetIncidents[i].name)
		}
	}

	for _, inc := range fleetIncidents {
		t.Run(inc.name, func(t *testing.T) {
			for _, path := range []string{"relayed", "scraped"} {
				checkIncident(t, srv, inc, "chat-"+slug(inc)+"-"+path, "vllm-"+slug(inc)+"-"+path, window, true)
			}
		})
	}
	t.Run("behind a gateway", func(t *testing.T) {
		// Unmapped, no address ties the calls to the server.
		var d diagnosisJSON
		apiPath := fmt.Sprintf("/api/v1/diagnose?service=chat-via-gateway&from=%s&to=%s", window[0].Format(time.RFC3339), window[1].Format(time.RFC3339))
		for deadline := time.Now().Add(60 * time.Second); d.Requests != callsPerMinute*windowMinutes && time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
			d = diagnosisJSON{}
			srv.GetJSON(t, apiPath, &d)
		}
		if d.Requests != callsPerMinute*windowMinutes || d.ServerMetrics != nil {
			t.Fatalf("unmapped gateway: %d requests, server metrics %+v; want all calls and none", d.Requests, d.ServerMetrics)
		}
		req, _ := http.NewRequest(http.MethodPut, "http://"+srv.HTTPAddr+"/api/v1/settings/server-mappings",
			strings.NewReader(`{"mappings":[{"endpoint":"llm-gateway.internal:443","server":"vllm-behind-gateway"}]}`))
		req.Header.Set("Authorization", "Bearer "+apptest.Key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT mappings: %s", resp.Status)
		}
		checkIncident(t, srv, fleetIncidents[0], "chat-via-gateway", "vllm-behind-gateway", window, true)
		if d := diagnoseWindow(t, srv, "chat-via-gateway", "queueing", window, true); d.ServerMetrics == nil ||
			strings.Join(d.ServerMetrics.Endpoints, ",") != "llm-gateway.internal:443" {
			t.Errorf("server metrics %+v; want them tied through llm-gateway.internal:443", d.ServerMetrics)
		}
	})
	t.Run("TGI prefill from its forward passes", func(t *testing.T) {
		d := diagnoseWindow(t, srv, "chat-tgi", "prefill", window, true)
		perBatch := false
		for _, e := range d.Evidence {
			perBatch = perBatch || strings.Contains(e.Text, "forward_prefill_seconds histogram (TGI's forward passes, per batch")
		}
		if d.Verdict != "prefill" || d.ServerMetrics == nil || !perBatch {
			t.Fatalf("verdict %q (%s); want prefill read from TGI's forward passes; evidence %+v", d.Verdict, d.Summary, d.Evidence)
		}
	})
	t.Run("server alone", func(t *testing.T) {
		// Known only by its metrics, the queueing server reads the same.
		checkIncident(t, srv, fleetIncidents[0], "vllm-queueing-scraped", "vllm-queueing-scraped", window, false)
	})
	t.Run("listed as services", func(t *testing.T) {
		var services struct {
			Services []struct {
				Service   string   `json:"service"`
				Instances []string `json:"instances"`
			} `json:"services"`
		}
		srv.GetJSON(t, "/api/v1/services", &services)
		listed := map[string]string{}
		for _, s := range services.Services {
			listed[s.Service] = strings.Join(s.Instances, ",")
		}
		if listed["vllm-queueing-scraped"] != hosts["queueing"] || listed["vllm-queueing-relayed"] != "10.0.0.10:8000" {
			t.Errorf("services %v; want the metrics-only servers with their host:port", listed)
		}
	})
}
