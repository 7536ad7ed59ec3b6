package analysis_test

import (
	"context"
	"encoding/json"
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
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/demo"
)

// metricsOnlyMinutes: 30 minutes of baseline, then a 10-minute window in
// which the server queues (waits of 1.5–3 s, 32 waiting, KV cache 97 %).
const (
	baselineMinutes = 30
	windowMinutes   = 10
)

// fleetMinute is what one simulated minute of a metrics-only vLLM and
// its caller produce.
type fleetMinute struct {
	at    time.Time
	calls []time.Duration // client TTFTs, one call every 3 s
}

// simulateFleet drives a fake vLLM minute by minute and returns the
// calls; after each minute snap receives the server's state.
func simulateFleet(t0 time.Time, vllm *demo.VLLMMetrics, snap func(end time.Time)) []fleetMinute {
	r := rand.New(rand.NewPCG(41, 7))
	var out []fleetMinute
	for m := range baselineMinutes + windowMinutes {
		at := t0.Add(time.Duration(m) * time.Minute)
		incident := m >= baselineMinutes
		fm := fleetMinute{at: at}
		for range 20 {
			queue := time.Duration(r.ExpFloat64() * float64(20*time.Millisecond))
			if incident {
				queue = 1500*time.Millisecond + time.Duration(r.Float64()*float64(1500*time.Millisecond))
			}
			prefill := 150*time.Millisecond + time.Duration(r.Float64()*float64(100*time.Millisecond))
			vllm.ObserveRequest(demo.RequestPhases{Queue: queue, Prefill: prefill, Decode: time.Second, OutputTokens: 100})
			fm.calls = append(fm.calls, queue+prefill+30*time.Millisecond)
		}
		if incident {
			vllm.SetScheduler(32, 48, 0.97)
		} else {
			vllm.SetScheduler(0, 12, 0.35)
		}
		vllm.AddPrefixCache(600, 1000)
		out = append(out, fm)
		snap(at.Add(time.Minute))
	}
	return out
}

// sendCalls exports the app's client spans (no server spans: vLLM's
// tracing is off) with the endpoint they called.
func sendCalls(t *testing.T, srv *apptest.Server, service, host string, port int, minutes []fleetMinute) {
	t.Helper()
	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(srv.OTLPHTTPAddr), otlptracehttp.WithInsecure(),
		otlptracehttp.WithHeaders(map[string]string{"Authorization": "Bearer " + apptest.Key}))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))))
	tr := tp.Tracer("app")
	for _, m := range minutes {
		for i, ttft := range m.calls {
			start := m.at.Add(time.Duration(i) * 3 * time.Second)
			_, s := tr.Start(ctx, "chat llama", trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindClient),
				trace.WithAttributes(attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.provider.name", "vllm"),
					attribute.String("gen_ai.request.model", "llama"), attribute.Int("gen_ai.usage.input_tokens", 900),
					attribute.Int("gen_ai.usage.output_tokens", 100), attribute.Float64("gen_ai.response.time_to_first_chunk", ttft.Seconds()),
					attribute.String("server.address", host), attribute.Int("server.port", port)))
			s.End(trace.WithTimestamp(start.Add(ttft + time.Second)))
		}
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// apiJSON GETs an API path into out.
func apiJSON(t *testing.T, srv *apptest.Server, path string, out any) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+srv.HTTPAddr+path, nil)
	req.Header.Set("Authorization", "Bearer "+apptest.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
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
	Components    map[string]struct{ P95 *float64 } `json:"components"`
	ServerMetrics *struct {
		Servers   []string `json:"servers"`
		Endpoints []string `json:"endpoints"`
	} `json:"server_metrics"`
}

// checkMetricsQueueing waits until service's window diagnosis has its requests
// (when it calls the server) and then asserts a queueing verdict read
// from server's metrics, with the waiting requests and KV cache as
// evidence and the queue p95 in the bucket vLLM's layout puts it in.
func checkMetricsQueueing(t *testing.T, srv *apptest.Server, service, server string, window [2]time.Time, calls bool) {
	t.Helper()
	path := fmt.Sprintf("/api/v1/diagnose?service=%s&from=%s&to=%s", service, window[0].Format(time.RFC3339), window[1].Format(time.RFC3339))
	var d diagnosisJSON
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		d = diagnosisJSON{}
		apiJSON(t, srv, path, &d)
		ready := d.ServerMetrics != nil && (!calls || d.Requests == 20*windowMinutes)
		if ready && d.Verdict == "queueing" || time.Now().After(deadline) {
			break
		}
	}
	if d.Verdict != "queueing" || d.ServerMetrics == nil || len(d.ServerMetrics.Servers) != 1 || d.ServerMetrics.Servers[0] != server {
		t.Fatalf("%s: verdict %q (%s), server metrics %+v; want queueing from %s", service, d.Verdict, d.Summary, d.ServerMetrics, server)
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
	// Queue waits of 1.5–3 s: vLLM's buckets put the p95 in (2.5, 5] s.
	if p95 := figs["p95"]; p95 <= 2500 || p95 > 5000 || figs["requests_waiting_peak"] != 32 || figs["kv_cache_peak"] != 0.97 {
		t.Errorf("%s: evidence figures %v; want queue p95 in (2.5, 5] s, 32 waiting, KV 0.97", service, figs)
	}
	if base := figs["baseline_p95"]; base <= 0 || base > 300 {
		t.Errorf("%s: baseline queue p95 %v ms, want within vLLM's first bucket (0, 300]", service, base)
	}
}

// A fleet whose vLLM has tracing off gets a queueing verdict from the
// server's histograms, relayed over OTLP as the Collector's Prometheus
// receiver does and scraped by the built-in scraper; both servers are
// listed as services, and a server diagnosed by itself reads the same.
func TestMetricsOnlyFleetQueueing(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	ctx := context.Background()
	t0 := time.Now().Add(-time.Duration(baselineMinutes+windowMinutes+2) * time.Minute).Truncate(time.Minute)
	window := [2]time.Time{t0.Add(baselineMinutes * time.Minute), t0.Add((baselineMinutes + windowMinutes) * time.Minute)}

	t.Run("relayed over OTLP", func(t *testing.T) {
		vllm := demo.NewVLLMMetrics("llama")
		exp, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpoint(srv.OTLPHTTPAddr), otlpmetrichttp.WithInsecure(),
			otlpmetrichttp.WithHeaders(map[string]string{"Authorization": "Bearer " + apptest.Key}))
		if err != nil {
			t.Fatal(err)
		}
		// The Collector's Prometheus receiver: job → service.name, the
		// scraped host:port → service.instance.id, server.address/port.
		res := resource.NewSchemaless(attribute.String("service.name", "vllm-relayed"), attribute.String("service.instance.id", "10.0.0.5:8000"),
			attribute.String("server.address", "10.0.0.5"), attribute.String("server.port", "8000"))
		start := t0.Add(-10 * time.Second)
		minutes := simulateFleet(t0, vllm, func(end time.Time) {
			rm := &metricdata.ResourceMetrics{Resource: res, ScopeMetrics: []metricdata.ScopeMetrics{{
				Scope: instrumentation.Scope{Name: "otelcol/prometheusreceiver"}, Metrics: vllm.Metricdata(start, end)}}}
			if err := exp.Export(ctx, rm); err != nil {
				t.Fatal(err)
			}
		})
		sendCalls(t, srv, "chat-relayed", "10.0.0.5", 8000, minutes)
		checkMetricsQueueing(t, srv, "chat-relayed", "vllm-relayed", window, true)
	})

	t.Run("built-in scraper", func(t *testing.T) {
		// Each scrape reads the next simulated minute, stamped with its
		// time, so 40 minutes of history take 40 one-second scrapes.
		vllm := demo.NewVLLMMetrics("llama")
		var (
			mu    sync.Mutex
			pages [][]byte
			next  int
		)
		_ = simulateFleet(t0, vllm, func(end time.Time) {
			page, err := vllm.Exposition(end)
			if err != nil {
				t.Fatal(err)
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
		defer fake.Close()
		u, _ := url.Parse(fake.URL)
		host, portS, _ := net.SplitHostPort(u.Host)
		port, _ := strconv.Atoi(portS)
		if _, err := srv.PG.Pool.Exec(ctx, `INSERT INTO scrape_targets (project_id, url, interval_s, timeout_s, service)
			SELECT id, $1, 1, 1, 'vllm-scraped' FROM projects WHERE name = 'default'`, fake.URL+"/metrics"); err != nil {
			t.Fatal(err)
		}
		srv.Scraper.Reload()
		minutes := simulateFleet(t0, demo.NewVLLMMetrics("llama"), func(time.Time) {})
		sendCalls(t, srv, "chat-scraped", host, port, minutes)
		select {
		case <-done:
		case <-time.After(3 * time.Minute):
			t.Fatalf("the scraper read %d of %d pages", next, len(pages))
		}
		checkMetricsQueueing(t, srv, "chat-scraped", "vllm-scraped", window, true)
		// The server alone, known only by its metrics.
		checkMetricsQueueing(t, srv, "vllm-scraped", "vllm-scraped", window, false)

		var services struct {
			Services []struct {
				Service   string   `json:"service"`
				Instances []string `json:"instances"`
			} `json:"services"`
		}
		apiJSON(t, srv, "/api/v1/services", &services)
		listed := map[string]string{}
		for _, s := range services.Services {
			listed[s.Service] = strings.Join(s.Instances, ",")
		}
		if listed["vllm-scraped"] != u.Host || listed["vllm-relayed"] != "10.0.0.5:8000" {
			t.Errorf("services %v; want the metrics-only servers with their host:port", listed)
		}
	})
}
