package diagnose

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/tokenpath/tokenpath/analysis/stats"
	"github.com/tokenpath/tokenpath/telemetry"
)

// maxAttributions is how many over-represented values bubble-up reports.
const maxAttributions = 10

// Bubble-up keys read from the request itself; Input.Attributes adds more.
const (
	KeyInstance     = "instance"
	KeyModel        = "model"
	KeyTenant       = "tenant"
	KeyRoute        = "route"
	KeyPromptLength = "prompt_length"
	KeyColdStart    = "cold_start"
)

// Attribution is one attribute value and how much more often it appears
// among slow requests than among the rest.
type Attribution struct {
	Key       string  `json:"key"`
	Value     string  `json:"value"`
	SlowShare float64 `json:"slow_share"` // of slow window requests
	FastShare float64 `json:"fast_share"` // of the other window requests
	// BaselineShare is the share among baseline requests; nil without a
	// baseline.
	BaselineShare *float64 `json:"baseline_share"`
	Difference    float64  `json:"difference"` // SlowShare − FastShare
	SlowCount     int      `json:"slow_count"`
	FastCount     int      `json:"fast_count"`
}

// promptLength buckets input tokens the way prompt sizes are talked about.
func promptLength(r *telemetry.LLMRequest) string {
	if r.InputTokens == nil {
		return ""
	}
	switch n := *r.InputTokens; {
	case n < 1000:
		return "<1k"
	case n < 4000:
		return "1–4k"
	case n < 16000:
		return "4–16k"
	default:
		return ">16k"
	}
}

// attributes returns the bubble-up keys of one request; empty values are
// left out (unknown is not a value worth ranking).
func attributes(r *telemetry.LLMRequest, extra map[string]map[string]string) map[string]string {
	out := map[string]string{
		KeyInstance:     r.Instance,
		KeyModel:        r.Model,
		KeyTenant:       r.Tenant,
		KeyRoute:        r.Route,
		KeyPromptLength: promptLength(r),
		KeyColdStart:    strconv.FormatBool(r.ColdStart),
	}
	for k, v := range extra[r.SpanID] {
		// The request's own fields win: they are normalized, raw keys are not.
		if _, taken := out[k]; !taken || out[k] == "" {
			out[k] = v
		}
	}
	for k, v := range out {
		if v == "" {
			delete(out, k)
		}
	}
	return out
}

// bubbleUp ranks attribute values by how over-represented they are among
// the slow requests (indexes into win) compared with the other window
// requests; the baseline share is reported alongside.
func bubbleUp(win []telemetry.LLMRequest, slow []int, base []telemetry.LLMRequest, extra map[string]map[string]string) []Attribution {
	if len(slow) == 0 || len(slow) == len(win) {
		return nil
	}
	isSlow := make([]bool, len(win))
	for _, i := range slow {
		isSlow[i] = true
	}
	type kv struct{ k, v string }
	slowN, fastN := map[kv]int{}, map[kv]int{}
	for i := range win {
		for k, v := range attributes(&win[i], extra) {
			if isSlow[i] {
				slowN[kv{k, v}]++
			} else {
				fastN[kv{k, v}]++
			}
		}
	}
	baseN := map[kv]int{}
	for i := range base {
		for k, v := range attributes(&base[i], extra) {
			baseN[kv{k, v}]++
		}
	}
	nSlow, nFast := len(slow), len(win)-len(slow)

	var out []Attribution
	for key, c := range slowN {
		a := Attribution{
			Key: key.k, Value: key.v,
			SlowShare: stats.Share(c, nSlow), FastShare: stats.Share(fastN[key], nFast),
			SlowCount: c, FastCount: fastN[key],
		}
		a.Difference = a.SlowShare - a.FastShare
		if a.Difference <= 0 {
			continue
		}
		if len(base) > 0 {
			a.BaselineShare = num(stats.Share(baseN[key], len(base)))
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Difference != out[j].Difference {
			return out[i].Difference > out[j].Difference
		}
		if out[i].Key != out[j].Key {
			return out[i].Key < out[j].Key
		}
		return out[i].Value < out[j].Value
	})
	if len(out) > maxAttributions {
		out = out[:maxAttributions]
	}
	return out
}

// sentence says an attribution the way an incident channel would:
// "87 % of slow requests hit instance vllm-7f9c-2, 12 % of fast ones".
func (a Attribution) sentence() string {
	var what string
	switch a.Key {
	case KeyInstance:
		what = "hit instance " + a.Value
	case KeyModel:
		what = "used model " + a.Value
	case KeyTenant:
		what = "came from tenant " + a.Value
	case KeyRoute:
		what = "came through route " + a.Value
	case KeyPromptLength:
		what = "had " + a.Value + " token prompts"
	case KeyColdStart:
		if a.Value == "true" {
			what = "were cold starts"
		} else {
			what = "were not cold starts"
		}
	default:
		what = fmt.Sprintf("had %s = %s", a.Key, a.Value)
	}
	return fmt.Sprintf("%s of slow requests %s, %s of fast ones", fmtPct(a.SlowShare), what, fmtPct(a.FastShare))
}
