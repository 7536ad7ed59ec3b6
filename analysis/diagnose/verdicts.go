package diagnose

import (
	"fmt"
	"sort"
)

// Verdict names the part of the request a slowdown is attributed to.
type Verdict string

// verdictRule is one verdict as data: its words, the part of the request
// that wins it, and the hooks that corroborate it. Each verdict's rule
// lives in a verdict_<name>.go file of its own, registered from that
// file's init; the engine below (attribute) applies whichever rules are
// registered, so adding a verdict is one file plus a scenario test
// (docs/architecture.md, "Adding a verdict").
//
// Hooks read the window's figures from the *analysis they get: the
// requests and their columns (a.in, a.winCols, a.baseCols), the
// component percentiles (a.comps), the series and correlations (a.series,
// a.corrs), the gauges split by window (a.metricsWin, a.metricsBase), the
// events (a.in.Events) and the SLO (a.slo). A rule that needs another
// input (server histograms, error counts) adds an optional field to Input
// and reads it from a.in; evidence is written with a.add and figures().
type verdictRule struct {
	Verdict Verdict
	// Label names the verdict on badges, pages and alerts ("Cold start").
	Label string
	// CauseWords answer the page's "Why is it slow?" ("Requests are held
	// while new instances start"); empty for a verdict that names no cause.
	CauseWords string
	// Component is the part of the request whose growth among the slow
	// requests wins this verdict; empty for a verdict reached otherwise.
	Component string
	// HoldSurfaces says a cold start's hold can show up as this verdict's
	// part (queue, prefill, network, the provider's bundled TTFT), so an
	// Override may hand the verdict to cold_start.
	HoldSurfaces bool
	// WithinNoise, when this verdict's part tops a headline that regressed,
	// may explain the regression away: it returns why, or "" when it stands.
	WithinNoise func(a *analysis, g *group) string
	// Rerank may hand the win to this verdict's part from the part ranked
	// first (a.winner, a.ranked), before any evidence is written.
	Rerank func(a *analysis)
	// Explain adds evidence right after the winning part's own lines,
	// whichever verdict won (e.g. why a Rerank happened).
	Explain func(a *analysis)
	// Reconsider may turn this verdict into another once the winning part's
	// evidence is written (a managed API whose prompts grew is prefill).
	Reconsider func(a *analysis, g *group) Verdict
	// Override may take over the verdict v reached so far, adding the
	// evidence why; it returns true when it does.
	Override func(a *analysis, g *group, v Verdict) bool
	// Corroborate adds the evidence for and against the verdict, moves
	// a.bonus and a.penalty, and writes a.cause (the summary's "because …").
	Corroborate func(a *analysis, g *group)
	// Claim lets a verdict that is not a part of the request's latency
	// (errors, rate limits, a window known only from the server's metrics)
	// take the window before latency is attributed, regressed or not. It
	// returns true after writing its evidence and a.cause and moving
	// a.bonus/a.penalty; the confidence is then confBase + bonus − penalty.
	// Claims are tried in the order of the verdicts' names.
	Claim func(a *analysis) bool
	// Summary writes the one sentence of a claimed verdict; nil writes the
	// latency sentence around a.cause.
	Summary func(a *analysis) string
	// Aside adds evidence to whichever verdict the window reached when
	// this verdict's signal is present but did not take the window (errors
	// beside a latency verdict or a healthy one); it returns a clause for
	// a healthy summary, or "".
	Aside func(a *analysis) string
}

// verdictTable holds the registered rules, looked up by verdict and by
// the part of the request that wins them.
type verdictTable struct {
	rules       []*verdictRule // sorted by verdict name
	byVerdict   map[Verdict]*verdictRule
	byComponent map[string]*verdictRule
}

// verdicts is every verdict a diagnosis can reach.
var verdicts = &verdictTable{}

// register adds a verdict's rule; a second rule for the same verdict or
// the same part of the request is a programming error.
func register(r verdictRule) {
	if err := verdicts.add(r); err != nil {
		panic(err)
	}
}

func (t *verdictTable) add(r verdictRule) error {
	if t.byVerdict == nil {
		t.byVerdict, t.byComponent = map[Verdict]*verdictRule{}, map[string]*verdictRule{}
	}
	if r.Verdict == "" || r.Label == "" {
		return fmt.Errorf("verdict rule %q: a verdict needs a name and a label", r.Verdict)
	}
	if _, dup := t.byVerdict[r.Verdict]; dup {
		return fmt.Errorf("verdict %q registered twice", r.Verdict)
	}
	if o, dup := t.byComponent[r.Component]; dup && r.Component != "" {
		return fmt.Errorf("verdicts %q and %q both claim the part %q", o.Verdict, r.Verdict, r.Component)
	}
	rule := &r
	t.byVerdict[r.Verdict] = rule
	if r.Component != "" {
		t.byComponent[r.Component] = rule
	}
	t.rules = append(t.rules, rule)
	sort.Slice(t.rules, func(i, j int) bool { return t.rules[i].Verdict < t.rules[j].Verdict })
	return nil
}

// with returns a copy of the table with more rules, for a diagnosis that
// tries a rule without registering it.
func (t *verdictTable) with(extra ...verdictRule) (*verdictTable, error) {
	out := &verdictTable{}
	for _, r := range t.rules {
		if err := out.add(*r); err != nil {
			return nil, err
		}
	}
	for _, r := range extra {
		if err := out.add(r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// of returns a verdict's rule; a zero rule for an unknown verdict.
func (t *verdictTable) of(v Verdict) *verdictRule {
	if r := t.byVerdict[v]; r != nil {
		return r
	}
	return &verdictRule{}
}

// Label names a verdict in words for pages and alerts ("Cold start"); ""
// for anything that is not a verdict.
func (v Verdict) Label() string { return verdicts.of(v).Label }

// CauseWords answer "Why is it slow?" for a verdict ("Requests are held
// while new instances start"); "" for healthy and for anything that is not
// a verdict.
func (v Verdict) CauseWords() string { return verdicts.of(v).CauseWords }

// withinNoise asks the rule of a regressed headline's top part whether the
// regression is noise; it returns why, or "".
func (a *analysis) withinNoise(g *group) string {
	var top *candidate
	cands := g.candidates(modeRegression)
	for i := range cands {
		if top == nil || cands[i].score > top.score {
			top = &cands[i]
		}
	}
	if top == nil {
		return ""
	}
	if r := a.rules.byComponent[top.comp]; r != nil && r.WithinNoise != nil {
		return r.WithinNoise(a, g)
	}
	return ""
}

// claim gives the rules with a Claim the window; it returns the rule that
// took it, or nil.
func (a *analysis) claim() *verdictRule {
	for _, r := range a.rules.rules {
		if r.Claim != nil && r.Claim(a) {
			return r
		}
	}
	return nil
}

// attribute picks the winning part, corroborates it and writes the
// evidence; it returns the verdict.
func (a *analysis) attribute() Verdict {
	a.ranked = rankCandidates(a.groups, a.mode)
	g := a.primaryGroup()
	if len(a.ranked) == 0 {
		// Only when no part of any regressed headline can be read: say so
		// weakly rather than invent a split.
		for _, gg := range a.groups {
			if gg.regressed {
				g = gg
				break
			}
		}
		a.headlineEvidence(g)
		a.add("No part of the request explains the change: the spans do not carry the split.", nil)
		a.penalty += 0.2
		a.cause = "no recorded part of the request explains it"
		a.bubble = a.bubbleUpFor(g)
		if g.name == "first_token" {
			return VerdictPreInference
		}
		return VerdictProvider
	}
	a.winner = a.ranked[0]
	for _, r := range a.rules.rules {
		if r.Rerank != nil {
			r.Rerank(a)
		}
	}
	g = a.winner.g
	a.bubble = a.bubbleUpFor(g)
	rule := a.rules.byComponent[a.winner.comp]

	a.headlineEvidence(g)
	a.componentEvidence(a.winner)
	for _, r := range a.rules.rules {
		if r.Explain != nil {
			r.Explain(a)
		}
	}
	if rule.Reconsider != nil {
		rule = a.rules.of(rule.Reconsider(a, g))
	}
	for _, r := range a.rules.rules {
		if r.Override != nil && r != rule && r.Override(a, g, rule.Verdict) {
			rule = r
			break
		}
	}
	if rule.Corroborate != nil {
		rule.Corroborate(a, g)
	}
	a.bubbleEvidence()
	a.secondaryEvidence()
	if a.slo != nil {
		a.add(a.slo.Text, nil)
	}
	switch a.mode {
	case modeSelf:
		a.penalty += 0.1
	case modeSLO:
		a.penalty += 0.05
	}
	return rule.Verdict
}

// asides runs every rule's Aside; it returns the clauses a healthy
// summary adds.
func (a *analysis) asides() []string {
	var out []string
	for _, r := range a.rules.rules {
		if r.Aside == nil {
			continue
		}
		if c := r.Aside(a); c != "" {
			out = append(out, c)
		}
	}
	return out
}
