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
		Claim:        (*analysis).claimNetworkFromServer,
		Summary:      (*analysis).serverSummary,
	})
}

// claimNetworkFromServer: without server spans, the app's TTFT grew while
// the servers' own (their TTFT histogram, else queue + prefill) did not:
// the time went between them (network, a gateway).
func (a *analysis) claimNetworkFromServer() bool {
	f := a.serverPicked(VerdictNetwork)
	if f == nil {
		return false
	}
	gap, _ := f.clientGap()
	sd, _ := f.serverTTFTGrowth()
	ev := Evidence{Text: fmt.Sprintf("Client TTFT p95 %s → %s while the servers' own TTFT moved %s: the time is spent between the app and the server (network, gateway).",
		fmtMs(*f.clientB), fmtMs(*f.clientP95), fmtDelta(sd)),
		Figures: map[string]float64{"client_ttft_p95": *f.clientP95, "client_ttft_baseline_p95": *f.clientB, "server_ttft_growth_ms": sd}}
	return a.claimFromServer("", gap, []Evidence{ev}, "the app waited longer but the server did not")
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
