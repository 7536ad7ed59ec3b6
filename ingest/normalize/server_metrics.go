package normalize

import "strings"

// Canonical names of the inference-server histograms and counters the
// metrics-only diagnosis reads. Latency histograms are in seconds.
const (
	HistQueue   = "queue_seconds"   // waiting for a batch slot
	HistPrefill = "prefill_seconds" // prompt processing (vLLM: PREFILL phase)
	HistDecode  = "decode_seconds"  // token generation (vLLM: DECODE phase)
	HistTTFT    = "ttft_seconds"    // server-side time to first token
	HistITL     = "itl_seconds"     // inter-token latency / time per output token
	HistE2E     = "e2e_seconds"     // server-side request latency
	// HistForward is TGI's per-batch forward pass, label method=prefill|decode.
	HistForward = "forward_seconds"

	MetricPreemptions       = "preemptions_total"       // counter: requests preempted (KV cache pressure)
	MetricPrefixCacheHits   = "prefix_cache_hits_total" // counter, tokens
	MetricPrefixCacheQuery  = "prefix_cache_queries_total"
	MetricPrefixCacheRate   = "prefix_cache_hit_rate"    // gauge 0..1 (SGLang)
	MetricRetracted         = "retracted_requests"       // gauge (SGLang: requests retracted under KV pressure)
	MetricGPUDRAMActive     = "gpu_dram_active"          // gauge 0..1: memory interface busy (memory-bound)
	MetricGPUTensorActive   = "gpu_tensor_active"        // gauge 0..1: tensor pipes busy (compute-bound)
	MetricGPUSMActive       = "gpu_sm_active"            // gauge 0..1
	MetricGPUFramebufferMiB = "gpu_framebuffer_used_mib" // gauge, MiB
)

// serverMetricRule folds one producer's metric into a canonical name. The
// names are written as the server exports them; the spellings the OTel
// Collector produces (':' → '_' by its Prometheus exporters, counters
// with and without "_total" by its Prometheus receiver) are derived.
type serverMetricRule struct {
	canonical string
	names     []string
}

// serverMetricRules is the one table of inference-server metrics beyond
// the gauges of metricNames. Bucket layouts are noted where the diagnosis
// depends on their resolution.
var serverMetricRules = []serverMetricRule{
	// vLLM (vllm-project/vllm vllm/v1/metrics/loggers.py, PrometheusStatLogger;
	// labels model_name, engine). Queue/prefill/decode/e2e share
	// request_latency_buckets 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, …, 7680 s;
	// TTFT 0.001 … 2560 s; ITL (and the older time_per_output_token) 0.01 … 80 s.
	{HistQueue, []string{"vllm:request_queue_time_seconds"}},
	{HistPrefill, []string{"vllm:request_prefill_time_seconds"}},
	{HistDecode, []string{"vllm:request_decode_time_seconds"}},
	{HistTTFT, []string{"vllm:time_to_first_token_seconds"}},
	{HistITL, []string{"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"}},
	{HistE2E, []string{"vllm:e2e_request_latency_seconds"}},
	// Counters vllm:num_preemptions, vllm:prefix_cache_hits/_queries
	// (tokens), exposed with prometheus_client's "_total".
	{MetricPreemptions, []string{"vllm:num_preemptions_total"}},
	{MetricPrefixCacheHits, []string{"vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"}},
	{MetricPrefixCacheQuery, []string{"vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"}},

	// SGLang (sgl-project/sglang python/sglang/srt/metrics/collector.py:
	// TokenizerMetricsCollector's histograms, SchedulerMetricsCollector's
	// queue_time histogram and gauges). Queue time buckets start 0, 0.1,
	// 0.2, 0.5, 1, 2 … s in the versions that have it.
	{HistQueue, []string{"sglang:queue_time_seconds"}},
	{HistTTFT, []string{"sglang:time_to_first_token_seconds"}},
	{HistITL, []string{"sglang:inter_token_latency_seconds"}},
	{HistE2E, []string{"sglang:e2e_request_latency_seconds"}},
	{MetricPrefixCacheRate, []string{"sglang:cache_hit_rate"}},
	{MetricRetracted, []string{"sglang:num_retracted_reqs"}},
	// SchedulerMetricsCollector's counter of retracted requests: SGLang's
	// name for a running request pushed back under KV pressure, what vLLM
	// counts as a preemption.
	{MetricPreemptions, []string{"sglang:num_retracted_requests_total"}},

	// TGI (huggingface/text-generation-inference router/src/server.rs,
	// backends/v3/src/backend.rs; metrics-rs, no ':'): every *_duration
	// histogram has 35 buckets 0.00015 × 1.5^k s.
	{HistQueue, []string{"tgi_request_queue_duration"}},
	{HistITL, []string{"tgi_request_mean_time_per_token_duration"}},
	{HistE2E, []string{"tgi_request_duration"}},
	{HistForward, []string{"tgi_batch_forward_duration"}},

	// NVIDIA DCGM exporter (NVIDIA/dcgm-exporter etc/default-counters.csv):
	// profiling ratios 0..1 ("ratio of cycles"), framebuffer in MiB.
	// DRAM and tensor-pipe activity are on by default; SM activity is
	// listed but commented out there, so the decode verdict falls back to
	// it only when the tensor pipes are missing.
	{MetricGPUDRAMActive, []string{"DCGM_FI_PROF_DRAM_ACTIVE"}},
	{MetricGPUTensorActive, []string{"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"}},
	{MetricGPUSMActive, []string{"DCGM_FI_PROF_SM_ACTIVE"}},
	{MetricGPUFramebufferMiB, []string{"DCGM_FI_DEV_FB_USED"}},
}

// serverMetricNames is serverMetricRules by every spelling.
var serverMetricNames = func() map[string]string {
	out := map[string]string{}
	for _, r := range serverMetricRules {
		for _, n := range r.names {
			for _, s := range []string{n, strings.ReplaceAll(n, ":", "_")} {
				out[s] = r.canonical
				if base, ok := strings.CutSuffix(s, "_total"); ok {
					out[base] = r.canonical
				}
			}
		}
	}
	return out
}()

// HistogramName folds an inference-server histogram's name into its
// canonical one; any other name is returned unchanged.
func HistogramName(name string) string {
	if c, ok := serverMetricNames[name]; ok {
		return c
	}
	return name
}
