package diagnose

import (
	"fmt"
	"math"
	"strings"

	"github.com/tokenpath/tokenpath/analysis/stats"
	"github.com/tokenpath/tokenpath/telemetry"
)

// VerdictProvider is a managed API whose bundled TTFT grew on its own.
const VerdictProvider Verdict = "provider"

// The provider wins by the bundled TTFT of a managed API; when the prompts
// grew it is prefill, bundled or not. It is corroborated by prompts that
// did not grow and a TTFT that does not follow them.
func init() {
	register(verdictRule{
		Verdict:      VerdictProvider,
		Label:        "Provider",
		CauseWords:   "The managed API got slower to its first token",
		Component:    componentBundled,
		HoldSurfaces: true,
		Reconsider:   (*analysis).providerOrPrefill,
		Corroborate:  (*analysis).corroborateProvider,
	})
}

// providerOrPrefill: a managed API whose prompts got longer is prefill,
// bundled or not.
func (a *analysis) providerOrPrefill(g *group) Verdict {
	if a.promptsGrew(g) {
		return VerdictPrefill
	}
	return VerdictProvider
}

func (a *analysis) corroborateProvider(g *group) {
	now, ref := a.slowTokens(g, true)
	if shift := stats.Ratio(now, ref); !math.IsNaN(shift) {
		a.add(fmt.Sprintf("Prompts did not get longer: slow requests' input tokens p50 %s vs %s.", fmtTokens(now), fmtTokens(ref)),
			figures("input_tokens_p50", now, "reference_input_tokens_p50", ref))
		if shift < 1.3 {
			a.bonus += 0.15
		}
	}
	if c, ok := findCorrelation(a.corrs, seriesInputTokens, ComponentTTFT); ok {
		r := c.best()
		a.add(fmt.Sprintf("TTFT does not follow prompt length (Spearman ρ = %s over %d requests).", fmtR(val(c.Spearman)), c.Pairs),
			figures("rho_ttft_input_tokens", val(c.Spearman)))
		if r < 0.3 {
			a.bonus += 0.15
		}
	}
	who := strings.TrimSpace(mostCommon(a.in.Requests, g.slow, func(r *telemetry.LLMRequest) string { return r.Provider }) + " " +
		mostCommon(a.in.Requests, g.slow, func(r *telemetry.LLMRequest) string { return r.Model }))
	if who == "" {
		who = "the managed API"
	}
	a.cause = "the provider (" + who + ") got slower to its first token while prompt sizes did not change"
}
