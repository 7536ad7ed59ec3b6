package normalize

import (
	"testing"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
)

// Every producer spelling folds to its canonical name: as exported, with
// the Collector's '_' for ':', and counters with or without "_total".
func TestServerMetricNames(t *testing.T) {
	for name, want := range map[string]string{
		"vllm:request_queue_time_seconds":          HistQueue,
		"vllm_request_queue_time_seconds":          HistQueue,
		"vllm:time_per_output_token_seconds":       HistITL,
		"vllm:inter_token_latency_seconds":         HistITL,
		"vllm_request_prefill_time_seconds":        HistPrefill,
		"vllm:num_preemptions_total":               MetricPreemptions,
		"vllm_num_preemptions":                     MetricPreemptions,
		"vllm:num_preemptions":                     MetricPreemptions,
		"vllm_prefix_cache_queries_total":          MetricPrefixCacheQuery,
		"sglang_queue_time_seconds":                HistQueue,
		"sglang:time_to_first_token_seconds":       HistTTFT,
		"sglang:cache_hit_rate":                    MetricPrefixCacheRate,
		"sglang:num_retracted_requests_total":      MetricPreemptions,
		"sglang_num_retracted_requests":            MetricPreemptions,
		"tgi_request_mean_time_per_token_duration": HistITL,
		"tgi_batch_forward_duration":               HistForward,
		"DCGM_FI_PROF_DRAM_ACTIVE":                 MetricGPUDRAMActive,
		"DCGM_FI_DEV_FB_USED":                      MetricGPUFramebufferMiB,
		"vllm:prompt_tokens_total":                 "vllm:prompt_tokens_total", // not read: unchanged
	} {
		if got := HistogramName(name); got != want {
			t.Errorf("HistogramName(%q) = %q, want %q", name, got, want)
		}
	}
	// Gauges keep their own table; server rules add to it.
	if got := MetricName("vllm_kv_cache_usage_perc"); got != MetricKVCacheUsage {
		t.Errorf("MetricName(vllm_kv_cache_usage_perc) = %q", got)
	}
	if got := MetricName("sglang_cache_hit_rate"); got != MetricPrefixCacheRate {
		t.Errorf("MetricName(sglang_cache_hit_rate) = %q", got)
	}
}

// The diagnosis reads the names ingest writes.
func TestServerMetricNamesMatchDiagnosis(t *testing.T) {
	for ours, theirs := range map[string]string{
		HistQueue: diagnose.HistQueue, HistPrefill: diagnose.HistPrefill, HistDecode: diagnose.HistDecode,
		HistTTFT: diagnose.HistTTFT, HistITL: diagnose.HistITL, HistE2E: diagnose.HistE2E, HistForward: diagnose.HistForward,
		MetricPreemptions: diagnose.MetricPreemptions, MetricPrefixCacheHits: diagnose.MetricPrefixCacheHits,
		MetricPrefixCacheQuery: diagnose.MetricPrefixCacheQueries, MetricPrefixCacheRate: diagnose.MetricPrefixCacheHitRate,
		MetricGPUDRAMActive: diagnose.MetricGPUDRAMActive, MetricGPUTensorActive: diagnose.MetricGPUTensorActive, MetricGPUSMActive: diagnose.MetricGPUSMActive,
	} {
		if ours != theirs {
			t.Errorf("ingest writes %q, the diagnosis reads %q", ours, theirs)
		}
	}
}
