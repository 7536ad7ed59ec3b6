package alerts

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/postgres"
)

// evaluateEpisodes posts an alert for every ongoing episode of the project
// once the episode detector has diagnosed it, with a link to its frozen
// diagnosis: at most one per service per Dedupe (the detector rewrites
// episodes as late data moves their starts, so the alerts are kept per
// service, not per stored episode). A failed post is retried within
// Dedupe with the same link.
func (e *AlertEvaluator) evaluateEpisodes(ctx context.Context, project uint32, rule analysis.AlertRule, now time.Time) (int, error) {
	eps, err := e.PG.Episodes(ctx, int64(project), "", now.Add(-e.Dedupe), now.Add(time.Minute))
	if err != nil {
		return 0, err
	}
	posted := 0
	for _, ep := range eps {
		if ep.End != nil || ep.DiagnosedAt == nil {
			continue // resolved, or its diagnosis is a pass away
		}
		last, ok, err := e.PG.LastEpisodeAlert(ctx, int64(project), ep.Service)
		if err != nil {
			return posted, err
		}
		a := last
		switch {
		case ok && now.Sub(last.FiredAt) < e.Dedupe && last.Delivered:
			continue
		case ok && now.Sub(last.FiredAt) < e.Dedupe:
			a.Delivered, a.Error = e.post(ctx, rule, EpisodeAlertMessage(ep, a, now))
			if err := e.PG.UpdateEpisodeAlertDelivery(ctx, a); err != nil {
				return posted, err
			}
		case ok && !last.FiredAt.Before(ep.Start):
			continue // this episode was posted (or tried) already
		default:
			a = postgres.EpisodeAlert{ProjectID: int64(project), Service: ep.Service, EpisodeStart: ep.Start, FiredAt: now,
				Verdict: ep.Verdict, Summary: ep.Summary, ShareURL: e.link(ctx, project, analysis.EpisodePath(ep, now))}
			a.Delivered, a.Error = e.post(ctx, rule, EpisodeAlertMessage(ep, a, now))
			if _, err := e.PG.RecordEpisodeAlert(ctx, a); err != nil {
				return posted, err
			}
		}
		if !a.Delivered {
			return posted, fmt.Errorf("episode alert of %s: %s", ep.Service, a.Error)
		}
		posted++
		e.Log.Info("episode alert posted", "service", ep.Service, "start", ep.Start, "verdict", ep.Verdict)
	}
	return posted, nil
}

// link freezes the page at path as a share link, or links the live page
// under PublicURL when it cannot.
func (e *AlertEvaluator) link(ctx context.Context, project uint32, path string) string {
	link := strings.TrimRight(e.PublicURL, "/") + path
	if e.Share != nil {
		u, err := e.Share(ctx, project, path)
		if err == nil {
			return u
		}
		e.Log.Warn("alert: cannot freeze the diagnosis; linking the live page", "path", path, "err", err)
	}
	return link
}

// EpisodeAlertMessage writes the episode-start message: which service,
// since when, the verdict of its diagnosis and the link to it.
func EpisodeAlertMessage(e postgres.Episode, a postgres.EpisodeAlert, now time.Time) WebhookMessage {
	verdict := verdictLabel(diagnose.Verdict(e.Verdict))
	headline := fmt.Sprintf("Episode under way: %s — %s since %s UTC", e.Service, verdict, e.Start.UTC().Format("15:04"))
	what := fmt.Sprintf("Started %s ago", strings.TrimSuffix(now.Sub(e.Start).Round(time.Minute).String(), "0s"))
	if e.PeakTTFTMs > 0 {
		what += fmt.Sprintf("; TTFT p95 up to %s", diagnose.FormatMs(e.PeakTTFTMs))
		if e.BaselineTTFTMs > 0 {
			what += fmt.Sprintf(" (baseline %s)", diagnose.FormatMs(e.BaselineTTFTMs))
		}
	}
	what += "."
	if e.SilentSince != nil {
		what += " No traffic since " + e.SilentSince.UTC().Format("15:04") + " UTC."
	}
	summary := fmt.Sprintf("%s (confidence %s): %s", verdict, diagnose.FormatPct(e.Confidence), e.Summary)
	return WebhookMessage{
		Text: headline + "\n" + what + "\n" + summary + "\nDiagnosis: " + a.ShareURL,
		Blocks: []map[string]any{
			{"type": "header", "text": map[string]any{"type": "plain_text", "text": truncate(headline, 150)}},
			{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": slackEscape(what)}},
			{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": "*" + slackEscape(verdict) + "* — " + slackEscape(e.Summary)}},
			{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": "<" + a.ShareURL + "|Open the frozen diagnosis>"}},
		},
	}
}
