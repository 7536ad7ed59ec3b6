package diagnose

import (
	"fmt"
	"testing"

	"github.com/tokenpath/tokenpath/telemetry"
)

// Bubble-up lists only values that set the slow requests apart: a value
// as common among the others is left out, however many slow requests hold
// it, and so is a small lead within sampling noise; a rare value several
// times as common among the slow requests is kept.
func TestBubbleUpKeepsOnlyValuesThatStandOut(t *testing.T) {
	const n, nSlow = 10000, 1000
	reqs := make([]telemetry.LLMRequest, n)
	var slow []int
	for i := range reqs {
		r := &reqs[i]
		r.SpanID = fmt.Sprint(i)
		isSlow := i < nSlow
		if isSlow {
			slow = append(slow, i)
		}
		// j counts within the group, so shares are exact.
		j, of := i, nSlow
		if !isSlow {
			j, of = i-nSlow, n-nSlow
		}
		share := func(slowShare, fastShare float64) bool {
			if isSlow {
				return j < int(slowShare*float64(of))
			}
			return j < int(fastShare*float64(of))
		}
		r.Tenant = "beta"
		if share(0.51, 0.50) {
			r.Tenant = "acme" // as common among the rest
		}
		r.Route = "/other"
		if share(0.38, 0.34) {
			r.Route = "/chat" // 4 points ahead: noise at this size
		}
		r.Instance = "vllm-0"
		if share(0.90, 0.10) {
			r.Instance = "vllm-hot"
		}
		tokens := int64(500)
		if share(0.03, 0.009) {
			tokens = 6000 // rare, but 3.3× as common among the slow
		}
		r.InputTokens = &tokens
	}
	got := map[string]Attribution{}
	for _, a := range newAttrIndex(reqs, nil, nil).bubbleUp(slow) {
		got[a.Key+"="+a.Value] = a
	}
	for _, want := range []string{"instance=vllm-hot", "prompt_length=4–16k"} {
		if _, ok := got[want]; !ok {
			t.Errorf("%s is not listed: %v", want, got)
		}
	}
	for _, not := range []string{"tenant=acme", "route=/chat", "instance=vllm-0", "prompt_length=<1k", "cold_start=false"} {
		if a, ok := got[not]; ok {
			t.Errorf("%s is listed (%.3f of slow, %.3f of the rest)", not, a.SlowShare, a.FastShare)
		}
	}
}
