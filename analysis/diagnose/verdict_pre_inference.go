package diagnose

import (
	"fmt"
)

// VerdictPreInference: the app's own work before the model call slowed.
const VerdictPreInference Verdict = "pre_inference"

// Pre-inference is corroborated by a model call that did not change.
func init() {
	register(verdictRule{
		Verdict:     VerdictPreInference,
		Label:       "Pre-inference",
		CauseWords:  "The app's own work before the model call slowed",
		Component:   ComponentPreInference,
		Corroborate: (*analysis).corroboratePreInference,
	})
}

// corroboratePreInference ignores the headline: the part itself tells.
func (a *analysis) corroboratePreInference(*group) {
	t := a.comps[ComponentTTFT]
	if t.P95 != nil && t.BaselineP95 != nil && !moved(*t.BaselineP95, *t.P95, noiseMs) {
		a.add(fmt.Sprintf("The model call is unchanged: TTFT p95 %s → %s.", fmtMs(*t.BaselineP95), fmtMs(*t.P95)),
			figures("ttft_p95_ms", *t.P95, "baseline_ttft_p95_ms", *t.BaselineP95))
		a.bonus += 0.2
	}
	p := a.comps[ComponentPreInference]
	a.cause = fmt.Sprintf("app work before the model call (retrieval, tools) slowed: pre-inference p95 %s → %s",
		fmtMs(val(p.BaselineP95)), fmtMs(val(p.P95)))
}
