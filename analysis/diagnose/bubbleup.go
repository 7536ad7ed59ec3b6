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

// A value sets the slow requests apart only when its over-representation
// is beyond sampling noise (a two-proportion z of at least
// standOutZ, about one chance in 700 on one value) and big enough to act
// on: at least standOutPoints more of the slow requests than of the rest,
// or standOutLift times the rest's share. Without the gate the demo's
// queueing incident listed tenant acme at 51 % of slow requests against
// 50 % of the rest.
const (
	standOutZ      = 3
	standOutPoints = 0.05
	standOutLift   = 2
)

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

// PromptLengths bucket input tokens the way prompt sizes are talked
// about: a bucket holds prompts of From tokens up to, not including, To
// (0: no bound). Bubble-up ranks them and the requests list filters by
// them, so a bucket named on a diagnosis lists its own requests.
var PromptLengths = []PromptLength{
	{"<1k", 0, 1000},
	{"1–4k", 1000, 4000},
	{"4–16k", 4000, 16000},
	{">16k", 16000, 0},
}

// PromptLength is one bucket of PromptLengths.
type PromptLength struct {
	Label    string
	From, To int64
}

// PromptLengthNamed is the bucket labelled label.
func PromptLengthNamed(label string) (PromptLength, bool) {
	for _, b := range PromptLengths {
		if b.Label == label {
			return b, true
		}
	}
	return PromptLength{}, false
}

// promptLength is the label of r's prompt bucket, "" without a count.
func promptLength(r *telemetry.LLMRequest) string {
	if r.InputTokens == nil {
		return ""
	}
	n := *r.InputTokens
	for _, b := range PromptLengths {
		if n >= b.From && (b.To == 0 || n < b.To) {
			return b.Label
		}
	}
	return PromptLengths[0].Label // a negative count: below every bound
}

// eachAttribute calls f with every bubble-up key and value of one request;
// empty values are left out (unknown is not a value worth ranking).
func eachAttribute(r *telemetry.LLMRequest, extra map[string]map[string]string, f func(k, v string)) {
	own := [...]attrKV{
		{KeyInstance, r.Instance},
		{KeyModel, r.Model},
		{KeyTenant, r.Tenant},
		{KeyRoute, r.Route},
		{KeyPromptLength, promptLength(r)},
		{KeyColdStart, strconv.FormatBool(r.ColdStart)},
	}
	for _, a := range own {
		if a.v != "" {
			f(a.k, a.v)
		}
	}
extra:
	for k, v := range extra[r.SpanID] {
		if v == "" {
			continue
		}
		// The request's own fields win: they are normalized, raw keys are not.
		for _, a := range own {
			if a.k == k && a.v != "" {
				continue extra
			}
		}
		f(k, v)
	}
}

type attrKV struct{ k, v string }

// attrIndex holds every window request's bubble-up values as small
// integers, interned once, and the baseline's count of each: a diagnosis
// ranks them for up to three groups of slow requests, and building a map
// per request per ranking was a tenth of its time.
type attrIndex struct {
	values []attrKV
	// ids[off[i]:off[i+1]] are window request i's values.
	ids   []int32
	off   []int32
	base  []int // baseline requests holding each value
	nBase int
}

func newAttrIndex(win, base []telemetry.LLMRequest, extra map[string]map[string]string) *attrIndex {
	x := &attrIndex{off: make([]int32, 0, len(win)+1), ids: make([]int32, 0, 7*len(win)), nBase: len(base)}
	seen := map[attrKV]int32{}
	intern := func(k, v string) int32 {
		id, ok := seen[attrKV{k, v}]
		if !ok {
			id = int32(len(x.values))
			seen[attrKV{k, v}] = id
			x.values = append(x.values, attrKV{k, v})
		}
		return id
	}
	add := func(k, v string) { x.ids = append(x.ids, intern(k, v)) }
	for i := range win {
		x.off = append(x.off, int32(len(x.ids)))
		eachAttribute(&win[i], extra, add)
	}
	x.off = append(x.off, int32(len(x.ids)))
	count := func(k, v string) {
		id := intern(k, v)
		for int(id) >= len(x.base) {
			x.base = append(x.base, 0)
		}
		x.base[id]++
	}
	for i := range base {
		eachAttribute(&base[i], extra, count)
	}
	return x
}

// bubbleUp ranks attribute values by how over-represented they are among
// the slow requests (indexes into the window) compared with the other
// window requests; the baseline share is reported alongside.
func (x *attrIndex) bubbleUp(slow []int) []Attribution {
	n := len(x.off) - 1
	if len(slow) == 0 || len(slow) == n {
		return nil
	}
	isSlow := make([]bool, n)
	for _, i := range slow {
		isSlow[i] = true
	}
	slowN, fastN := make([]int, len(x.values)), make([]int, len(x.values))
	for i := range n {
		counts := fastN
		if isSlow[i] {
			counts = slowN
		}
		for _, id := range x.ids[x.off[i]:x.off[i+1]] {
			counts[id]++
		}
	}
	nSlow, nFast := len(slow), n-len(slow)

	var out []Attribution
	for id, c := range slowN {
		if c == 0 {
			continue
		}
		a := Attribution{
			Key: x.values[id].k, Value: x.values[id].v,
			SlowShare: stats.Share(c, nSlow), FastShare: stats.Share(fastN[id], nFast),
			SlowCount: c, FastCount: fastN[id],
		}
		a.Difference = a.SlowShare - a.FastShare
		if !standsOut(c, nSlow, fastN[id], nFast) {
			continue
		}
		if x.nBase > 0 {
			inBase := 0
			if id < len(x.base) {
				inBase = x.base[id]
			}
			a.BaselineShare = num(stats.Share(inBase, x.nBase))
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

// standsOut says whether a value held by slow of nSlow slow requests and
// fast of nFast others is over-represented among the slow ones by the
// bubble-up's gate (above).
func standsOut(slow, nSlow, fast, nFast int) bool {
	ps, pf := stats.Share(slow, nSlow), stats.Share(fast, nFast)
	if ps-pf < standOutPoints && ps < standOutLift*pf {
		return false
	}
	return stats.TwoProportionZ(slow, nSlow, fast, nFast) >= standOutZ
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
