package diagnose

import (
	"fmt"
)

// VerdictNetwork: time was lost between the server's first token and the
// client's.
const VerdictNetwork Verdict = "network"

// Network is corroborated by a server that is not slower (queue and
// prefill flat).
func init() {
	register(verdictRule{
		Verdict:      VerdictNetwork,
		Label:        "Network",
		CauseWords:   "Time is lost between the server and the client",
		Component:    ComponentNetwork,
		HoldSurfaces: true,
		Corroborate:  (*analysis).corroborateNetwork,
	})
}

// corroborateNetwork ignores the headline: the part itself tells.
func (a *analysis) corroborateNetwork(*group) {
	q, p := a.comps[ComponentQueue], a.comps[ComponentPrefill]
	flat := q.P95 != nil && p.P95 != nil && q.BaselineP95 != nil && p.BaselineP95 != nil &&
		!moved(*q.BaselineP95, *q.P95, noiseMs) && !moved(*p.BaselineP95, *p.P95, noiseMs)
	if flat {
		a.add(fmt.Sprintf("The server is not slower: queue p95 %s → %s, prefill p95 %s → %s; the time is spent between server and client (network, gateway, proxy).",
			fmtMs(*q.BaselineP95), fmtMs(*q.P95), fmtMs(*p.BaselineP95), fmtMs(*p.P95)), nil)
		a.bonus += 0.2
	}
	n := a.comps[ComponentNetwork]
	a.cause = fmt.Sprintf("the time between the server's first token and the client's grew (network or gateway, p95 %s → %s)",
		fmtMs(val(n.BaselineP95)), fmtMs(val(n.P95)))
}
