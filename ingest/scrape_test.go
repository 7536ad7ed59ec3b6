package ingest_test

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/config"
	"github.com/tokenpath/tokenpath/ingest"
)

// vllmExposition is a /metrics page as vLLM (v0.10, Python prometheus_client,
// text format 0.0.4) serves it, shortened: process metrics, the scheduler
// gauges the diagnosis reads, a counter with its _created twin, a histogram.
const vllmExposition = `# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12894.0
python_gc_objects_collected_total{generation="1"} 3121.0
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 2.147483648e+09
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 24.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.9731
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.213e+06
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7405376e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 811.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1402.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1523.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1523.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 412.87
# HELP vllm:e2e_request_latency_seconds Histogram of end to end request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds summary
vllm:e2e_request_latency_seconds{quantile="0.99",model_name="meta-llama/Llama-3.1-8B-Instruct"} NaN
vllm:e2e_request_latency_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} 1523.0
vllm:e2e_request_latency_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2931.5
`

// sglangExposition is SGLang's scheduler gauges.
const sglangExposition = `# HELP sglang:token_usage The token usage
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="Qwen/Qwen2.5-7B-Instruct"} 0.42
# HELP sglang:num_queue_reqs The number of requests in the waiting queue
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="Qwen/Qwen2.5-7B-Instruct"} 3
# HELP sglang:num_running_reqs The number of running requests
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="Qwen/Qwen2.5-7B-Instruct"} 17
`

// exposition serves body the way prometheus_client does: text format,
// gzip when the client accepts it.
func exposition(body string, accept *atomic.Value) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if accept != nil {
			accept.Store(r.Header.Get("Accept"))
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			_, _ = io.WriteString(zw, body)
			_ = zw.Close()
			return
		}
		_, _ = io.WriteString(w, body)
	}
}

// waitFor polls cond until it returns "" (done) or the deadline passes, then
// fails with cond's last complaint.
func waitFor(t *testing.T, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func statusOf(s *ingest.Scraper, rawURL string) (ingest.TargetStatus, bool) {
	for _, st := range s.Status() {
		if st.URL == rawURL {
			return st, true
		}
	}
	return ingest.TargetStatus{}, false
}

func TestScraper(t *testing.T) {
	var accept atomic.Value
	vllm := httptest.NewServer(exposition(vllmExposition, &accept))
	defer vllm.Close()
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "engine dead", http.StatusInternalServerError)
	}))
	defer broken.Close()
	var sglangDown atomic.Bool
	sglangOK := exposition(sglangExposition, nil)
	sglang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sglangDown.Load() {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return
		}
		sglangOK(w, r)
	}))
	defer sglang.Close()

	vllmURL, brokenURL := vllm.URL+"/metrics", broken.URL+"/metrics"
	srv := apptest.Start(t, apptest.Options{Configure: func(c *config.Config) {
		c.ScrapeTargets = []string{"vllm-llama=" + vllmURL, brokenURL, "file:///etc/passwd",
			"secret-exporter=http://scraper:pw@" + strings.TrimPrefix(broken.URL, "http://") + "/metrics?api_key=s3cr3t"}
	}})
	ctx := context.Background()

	t.Run("static vLLM target lands canonical points", func(t *testing.T) {
		waitFor(t, 20*time.Second, func() string {
			st, ok := statusOf(srv.Scraper, vllmURL)
			if !ok || st.LastScrape.IsZero() || !st.Up {
				return fmt.Sprintf("vLLM target status %+v (listed %v), want up", st, ok)
			}
			return ""
		})
		st, _ := statusOf(srv.Scraper, vllmURL)
		if st.Service != "vllm-llama" || st.LastError != "" || st.Duration <= 0 {
			t.Errorf("status = %+v, want service vllm-llama, no error, a duration", st)
		}
		if a, _ := accept.Load().(string); !strings.HasPrefix(a, "text/plain") {
			t.Errorf("scrape Accept = %q, want the text format first", a)
		}
		u, _ := url.Parse(vllm.URL)
		want := map[string]float64{"kv_cache_usage": 0.9731, "requests_waiting": 7, "requests_running": 24,
			"vllm:prompt_tokens_total": 4.213e6, "vllm:e2e_request_latency_seconds_sum": 2931.5}
		var got map[string]float64
		waitFor(t, 20*time.Second, func() string {
			r, err := srv.CH.Query(ctx, "SELECT name, any(value) AS v, any(instance) AS i, any(labels['model_name']) AS m, count() AS n "+
				"FROM metric_points WHERE service = 'vllm-llama' GROUP BY name ORDER BY name")
			if err != nil {
				t.Fatal(err)
			}
			got = map[string]float64{}
			for i := range r.Rows {
				row := r.Row(i)
				got[row.String("name")] = row.Float("v")
				if row.String("i") != u.Host {
					return fmt.Sprintf("%s: instance %q, want %q", row.String("name"), row.String("i"), u.Host)
				}
				if strings.HasPrefix(row.String("name"), "vllm:") && row.String("m") != "meta-llama/Llama-3.1-8B-Instruct" {
					return fmt.Sprintf("%s: model_name label %q", row.String("name"), row.String("m"))
				}
			}
			for name, v := range want {
				if g, ok := got[name]; !ok || g != v {
					return fmt.Sprintf("metric_points %v, want %s = %v", got, name, v)
				}
			}
			return ""
		})
		// Buckets, quantiles and _created timestamps are not points.
		for name := range got {
			if strings.HasSuffix(name, "_bucket") || strings.HasSuffix(name, "_created") || name == "vllm:e2e_request_latency_seconds" {
				t.Errorf("unexpected series %s stored", name)
			}
		}
	})

	t.Run("failing target is down with the error", func(t *testing.T) {
		waitFor(t, 20*time.Second, func() string {
			st, ok := statusOf(srv.Scraper, brokenURL)
			if !ok || st.LastScrape.IsZero() || st.Up || st.LastError != "the target answered HTTP 5xx" {
				return fmt.Sprintf("broken target status %+v (listed %v), want down with HTTP 5xx", st, ok)
			}
			return ""
		})
		st, _ := statusOf(srv.Scraper, "file:///etc/passwd")
		if st.Up || !strings.Contains(st.LastError, "only http and https") || !st.LastScrape.IsZero() {
			t.Errorf("file:// target status %+v, want never scraped with a scheme error", st)
		}
		resp, err := http.Get("http://" + srv.HTTPAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// Targets are named by id and service, never by URL: /metrics
		// may be open, and URLs carry passwords and tokens.
		for _, line := range []string{
			`service="vllm-llama",target="static-0"} 1`,
			`service="127.0.0.1",target="static-1"} 0`,
			`service="secret-exporter",target="static-3"} 0`,
		} {
			if !regexp.MustCompile(`tokenpath_scrape_up\{project="\d+",` + regexp.QuoteMeta(line)).Match(page) {
				t.Errorf("self metrics lack %q", line)
			}
		}
		for _, leak := range []string{"s3cr3t", "scraper", vllmURL, brokenURL} {
			if strings.Contains(string(page), leak) {
				t.Errorf("self metrics show %q", leak)
			}
		}
		// The scraped points are in metric_points: its parts are counted.
		if !strings.Contains(string(page), `tokenpath_clickhouse_active_parts{table="metric_points"}`) {
			t.Errorf("self metrics lack the active parts of metric_points")
		}
		if !strings.Contains(string(page), `tokenpath_clickhouse_allocator_bytes{state="dirty"}`) {
			t.Errorf("self metrics lack the engine allocator's dirty pages")
		}
	})

	t.Run("table target is picked up and its row updated", func(t *testing.T) {
		sglangURL := sglang.URL + "/metrics"
		var id int64
		err := srv.PG.Pool.QueryRow(ctx, `INSERT INTO scrape_targets (project_id, url, interval_s, timeout_s, service, labels)
			SELECT id, $1, 1, 1, 'sglang-qwen', '{"cluster": "eu-1", "model_name": "override"}' FROM projects WHERE name = 'default' RETURNING id`,
			sglangURL).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		srv.Scraper.Reload()
		type row struct {
			up        bool
			lastError string
			scraped   bool
		}
		readRow := func() row {
			var r row
			var at *time.Time
			if err := srv.PG.Pool.QueryRow(ctx, "SELECT up, last_error, last_scrape_at FROM scrape_targets WHERE id = $1", id).Scan(&r.up, &r.lastError, &at); err != nil {
				t.Fatal(err)
			}
			r.scraped = at != nil
			return r
		}
		waitFor(t, 20*time.Second, func() string {
			if r := readRow(); !r.up || !r.scraped || r.lastError != "" {
				return fmt.Sprintf("scrape_targets row %+v, want up", r)
			}
			r, err := srv.CH.Query(ctx, "SELECT value, labels['cluster'] AS c, labels['model_name'] AS m, labels['exported_model_name'] AS em "+
				"FROM metric_points WHERE service = 'sglang-qwen' AND name = 'kv_cache_usage' LIMIT 1")
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Rows) == 0 {
				return "no kv_cache_usage point from the table target yet"
			}
			got := fmt.Sprintf("%v %s %s %s", r.Row(0).Float("value"), r.Row(0).String("c"), r.Row(0).String("m"), r.Row(0).String("em"))
			if want := "0.42 eu-1 override Qwen/Qwen2.5-7B-Instruct"; got != want {
				return fmt.Sprintf("point %q, want %q (target labels win, scraped kept as exported_)", got, want)
			}
			return ""
		})

		sglangDown.Store(true)
		waitFor(t, 20*time.Second, func() string {
			if r := readRow(); r.up || r.lastError != "the target answered HTTP 5xx" {
				return fmt.Sprintf("scrape_targets row %+v, want down with HTTP 5xx", r)
			}
			return ""
		})

		if _, err := srv.PG.Pool.Exec(ctx, "DELETE FROM scrape_targets WHERE id = $1", id); err != nil {
			t.Fatal(err)
		}
		srv.Scraper.Reload()
		waitFor(t, 10*time.Second, func() string {
			if st, ok := statusOf(srv.Scraper, sglangURL); ok {
				return fmt.Sprintf("deleted target still listed: %+v", st)
			}
			return ""
		})
	})
}
