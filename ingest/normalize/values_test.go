package normalize

import "testing"

// TestLangfuseUsageDetails reads both shapes the Langfuse SDKs send (see
// usageCount): the split one, whose side is its count plus its details,
// and the provider's raw usage object.
func TestLangfuseUsageDetails(t *testing.T) {
	cases := []struct {
		name, json string
		in, out    int64 // -1: absent
	}{
		// @langfuse/openai 5.11 on a Chat Completions usage of 37 prompt
		// tokens, 16 of them cached (testdata/producers/js/langfuse).
		{"JS split chat usage", `{"input":21,"output":6,"total":43,"input_cached_tokens":16,"input_audio_tokens":0,"output_reasoning_tokens":0,"output_audio_tokens":0}`, 37, 6},
		{"JS split with reasoning", `{"input":100,"output":20,"total":160,"input_cached_tokens":0,"output_reasoning_tokens":40}`, 100, 60},
		// The LangChain handler keeps priority tiers inside the count.
		{"LangChain priority tier", `{"input":50,"output":5,"input_cache_read":10,"input_priority":60}`, 60, 5},
		{"Python raw chat usage", `{"prompt_tokens":320,"completion_tokens":48,"total_tokens":368,"prompt_tokens_details":{"cached_tokens":64},"completion_tokens_details":{"reasoning_tokens":0}}`, 320, 48},
		{"Python raw Responses usage", `{"input_tokens":12,"output_tokens":3,"total_tokens":15,"input_tokens_details":{"cached_tokens":0}}`, 12, 3},
		{"nested details beside split counts", `{"input":10,"output":5,"input_tokens_details":{"cached_tokens":2}}`, 10, 5},
		{"negative count", `{"input":-1,"output":5}`, -1, 5},
		{"not JSON", `input=10`, -1, -1},
		{"no counts", `{"total":10}`, -1, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for side, want := range map[string]int64{"input": c.in, "output": c.out} {
				n, ok := usageCount(sv(c.json), side)
				if want < 0 {
					if ok {
						t.Errorf("%s = %d, want absent", side, n)
					}
					continue
				}
				if !ok || n != want {
					t.Errorf("%s = %d (ok %v), want %d", side, n, ok, want)
				}
			}
		})
	}
}
