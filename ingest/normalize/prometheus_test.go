package normalize

import (
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// vllmMetrics is a /metrics page as vLLM's OpenAI server (Python
// prometheus_client, text format 0.0.4) serves it, shortened.
const vllmMetrics = `# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12894.0
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 2.147483648e+09
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 24.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.9731
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
# HELP vllm:time_to_first_token_seconds_created Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds_created gauge
vllm:time_to_first_token_seconds_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7405376e+09
`

func TestPrometheusVLLM(t *testing.T) {
	scraped := now.Add(-5 * time.Second)
	got, err := Prometheus(9, strings.NewReader(vllmMetrics), "text/plain; version=0.0.4; charset=utf-8", scraped, "vllm", "10.0.3.7:8000")
	if err != nil {
		t.Fatal(err)
	}
	model := map[string]string{"engine": "0", "model_name": "meta-llama/Llama-3.1-8B-Instruct"}
	point := func(name string, labels map[string]string, v float64) telemetry.MetricPoint {
		return telemetry.MetricPoint{ProjectID: 9, Time: scraped, Service: "vllm", Instance: "10.0.3.7:8000", Name: name, Labels: labels, Value: v}
	}
	want := []telemetry.MetricPoint{
		point("python_gc_objects_collected_total", map[string]string{"generation": "0"}, 12894),
		point("process_resident_memory_bytes", map[string]string{}, 2147483648),
		point("requests_running", model, 24),
		point("requests_waiting", model, 7),
		point("kv_cache_usage", model, 0.9731),
		point("vllm:prompt_tokens_total", model, 4.213e6),
		point("vllm:time_to_first_token_seconds_count", model, 1523),
		point("vllm:time_to_first_token_seconds_sum", model, 412.87),
	}
	// Families come back in expfmt's map order; compare as sets.
	byKey := func(ps []telemetry.MetricPoint) {
		sort.Slice(ps, func(i, j int) bool { return seriesKey(ps[i]) < seriesKey(ps[j]) })
	}
	byKey(got)
	byKey(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("points\n got %+v\nwant %+v", got, want)
	}
}

func TestPrometheusFormats(t *testing.T) {
	scraped := now
	tests := []struct {
		name, contentType, body string
		want                    map[string]float64 // name{sorted labels} → value
		wantTime                time.Time
	}{
		{
			name: "SGLang and TGI names, untyped series",
			body: "sglang:token_usage{model_name=\"Qwen/Qwen2.5-7B\"} 0.42\nsglang:num_queue_reqs{model_name=\"Qwen/Qwen2.5-7B\"} 3\ntgi_queue_size 1\ntgi_batch_current_size 8\n",
			want: map[string]float64{`kv_cache_usage{model_name=Qwen/Qwen2.5-7B}`: 0.42, `requests_waiting{model_name=Qwen/Qwen2.5-7B}`: 3, `requests_waiting{}`: 1, `requests_running{}`: 8},
		},
		{
			name: "summary keeps _sum and _count, not quantiles",
			body: "# TYPE go_gc_duration_seconds summary\ngo_gc_duration_seconds{quantile=\"0.5\"} 2.1e-05\ngo_gc_duration_seconds_sum 0.0123\ngo_gc_duration_seconds_count 87\n",
			want: map[string]float64{"go_gc_duration_seconds_sum{}": 0.0123, "go_gc_duration_seconds_count{}": 87},
		},
		{
			name: "label escapes, spaces, trailing comma, NaN dropped",
			body: "# free comment\n\n  m{a=\"x\\\"y\\\\z\\n\" , b=\"\",} 1\nm_nan NaN\nm_inf +Inf\n",
			want: map[string]float64{"m{a=x\"y\\z\n,b=}": 1},
		},
		{
			name:     "millisecond timestamps honoured",
			body:     "m 1 " + itoa(now.Add(-time.Minute).UnixMilli()) + "\n",
			want:     map[string]float64{"m{}": 1},
			wantTime: now.Add(-time.Minute),
		},
		{
			name: "implausible timestamps dropped",
			body: "m 1 1000\nn 2 " + itoa(now.Add(72*time.Hour).UnixMilli()) + "\n",
			want: map[string]float64{},
		},
		{
			// Python's prometheus_client in the 0.0.4 text format (what the
			// scraper asks for): a counter family plus its _created gauge.
			name: "counter _created gauge skipped",
			body: "# TYPE vllm:request_success_total counter\nvllm:request_success_total{finished_reason=\"stop\"} 17\n" +
				"# TYPE vllm:request_success_created gauge\nvllm:request_success_created{finished_reason=\"stop\"} 1.7e9\n",
			want: map[string]float64{"vllm:request_success_total{finished_reason=stop}": 17},
		},
		{
			name: "quoted UTF-8 metric name",
			body: "{\"gen_ai.server.queue\",\"k.v\"=\"1\"} 5\n",
			want: map[string]float64{"gen_ai.server.queue{k.v=1}": 5},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pts, err := Prometheus(1, strings.NewReader(tc.body), tc.contentType, scraped, "svc", "inst")
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]float64{}
			for _, p := range pts {
				got[seriesKey(p)] = p.Value
				wantTime := tc.wantTime
				if wantTime.IsZero() {
					wantTime = scraped
				}
				if !p.Time.Equal(wantTime) {
					t.Errorf("%s: time %v, want %v", p.Name, p.Time, wantTime)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestPrometheusErrors(t *testing.T) {
	tests := []struct{ name, contentType, body, frag string }{
		{"protobuf", "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited", "", "protobuf"},
		{"bad content type", "text/plain; version", "", "content type"},
		{"bad value", "", "m{a=\"b\"} twelve\n", "line 1: expected float as value"},
		{"no value", "", "ok 1\nm\n", "line 2"},
		{"unterminated labels", "", "m{a=\"b\" 1\n", "line 1"},
		{"bad escape", "", "m{a=\"\\q\"} 1\n", "invalid escape"},
		{"bad timestamp", "", "m 1 soon\n", "expected integer as timestamp"},
		{"garbage after timestamp", "", "m 1 1700000000000 extra\n", "after timestamp"},
		{"bad metric name", "", "9lives 1\n", "invalid metric name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Prometheus(1, strings.NewReader(tc.body), tc.contentType, now, "s", "i")
			if err == nil || !strings.Contains(err.Error(), tc.frag) {
				t.Errorf("error %v, want one containing %q", err, tc.frag)
			}
		})
	}
}

func seriesKey(p telemetry.MetricPoint) string {
	var ls []string
	for k, v := range p.Labels {
		ls = append(ls, k+"="+v)
	}
	sort.Strings(ls)
	return p.Name + "{" + strings.Join(ls, ",") + "}"
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
