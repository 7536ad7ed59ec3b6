package assembler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis/assemble"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// Joining across traces (assemble.Pair): a pass's traces may leave halves
// of LLM calls unpaired (a server span without trace context, a client
// call whose server span is elsewhere). The pass looks for their other
// halves in stored spans, in two levels:
//
//  1. the traces holding candidates of the pass's halves are assembled
//     again: a pairing changes their rows (a client-only row becomes the
//     joined request, a server-only row goes);
//  2. the traces holding candidates of those traces' halves are read, not
//     rewritten: they complete every candidate set the decisions need.
//
// Stored match pairings (server_span_id on a client row) stand, so a
// candidate arriving later never reopens a pairing already counted, and
// every decision is taken again the same way by any later pass or after a
// restart: the rows depend on the stored spans and rows only.

// joinLookupSlack widens the time range a pass looks for candidates in,
// beyond its halves' spans: an id pair's spans start within IDSlack of
// each other's span, and a client call may have waited this long before
// its server span began (a request held while an instance came up).
const joinLookupSlack = assemble.IDSlack

// joined is what joining changed: the rows of the traces it assembled
// again (pass traces with a pairing, and every level-1 trace), and the
// level-1 traces, whose stored rows the pass must compare with.
type joined struct {
	rows    map[string][]telemetry.LLMRequest
	touched []string
}

// join pairs the pass's unpaired halves (of the project's traces passIDs)
// with halves of other traces, and re-derives the traces a pairing
// changes.
func (a *Assembler) join(ctx context.Context, project uint32, passIDs []string, halves []assemble.Half) (joined, error) {
	inPass := make(map[string]bool, len(passIDs))
	for _, id := range passIDs {
		inPass[id] = true
	}
	known := maps.Clone(inPass)
	level1, err := a.candidateTraces(ctx, project, halves, known)
	if err != nil {
		return joined{}, err
	}
	_, halves1, err := a.deriveTraces(ctx, project, level1, nil)
	if err != nil {
		return joined{}, err
	}
	level2, err := a.candidateTraces(ctx, project, halves1, known)
	if err != nil {
		return joined{}, err
	}
	_, halves2, err := a.deriveTraces(ctx, project, level2, nil)
	if err != nil {
		return joined{}, err
	}
	all := slices.Concat(halves, halves1, halves2)
	claims, err := a.matchClaims(ctx, project, slices.Concat(passIDs, level1, level2))
	if err != nil {
		return joined{}, err
	}
	pairs := assemble.Pair(all, func(k assemble.CallKey) bool { return inPass[k.Trace] }, claims)

	// Pass traces change only where one of their halves paired; level-1
	// traces are assembled again with the pairings whatever they were.
	// A level-2 trace is assembled again where a half of it pairs, or where
	// a stored match took its server span and no longer does (a server
	// span naming the client's id arrived later and took the call): that
	// span is a server-only request again (TestJoinLateIDServerCountsOnce).
	redo := slices.Clone(level1)
	seen := map[string]bool{}
	for _, id := range level1 {
		seen[id] = true
	}
	changed := func(h assemble.Half) bool {
		_, client := pairs.Servers[h.Key]
		return client || pairs.Taken[h.Key]
	}
	for _, h := range halves {
		if changed(h) && !seen[h.Key.Trace] {
			seen[h.Key.Trace] = true
			redo = append(redo, h.Key.Trace)
		}
	}
	// standing: stored matches kept as they are, whose rows hold already.
	standing, released := map[assemble.CallKey]bool{}, map[assemble.CallKey]bool{}
	for _, cl := range claims {
		switch p, ok := pairs.Servers[cl.Client]; {
		case !pairs.Taken[cl.Server]:
			released[cl.Server] = true
		case ok && p.Method == telemetry.JoinMatch:
			standing[cl.Client], standing[cl.Server] = true, true
		}
	}
	touched := slices.Clone(level1)
	for _, h := range halves2 {
		if (changed(h) && !standing[h.Key] || released[h.Key]) && !seen[h.Key.Trace] {
			seen[h.Key.Trace] = true
			redo = append(redo, h.Key.Trace)
			touched = append(touched, h.Key.Trace)
		}
	}
	if len(redo) == 0 {
		return joined{}, nil
	}
	rows, _, err := a.deriveTraces(ctx, project, redo, pairs)
	if err != nil {
		return joined{}, err
	}
	out := joined{rows: map[string][]telemetry.LLMRequest{}, touched: touched}
	for _, id := range redo {
		out.rows[id] = nil // a trace whose every call was taken has no rows
	}
	for _, r := range rows {
		out.rows[r.TraceID] = append(out.rows[r.TraceID], r)
	}
	return out, nil
}

// apply replaces the rows of the traces joining assembled again.
func (j joined) apply(reqs []telemetry.LLMRequest) []telemetry.LLMRequest {
	if len(j.rows) == 0 {
		return reqs
	}
	out := reqs[:0]
	for _, r := range reqs {
		if _, redone := j.rows[r.TraceID]; !redone {
			out = append(out, r)
		}
	}
	for _, rows := range j.rows {
		out = append(out, rows...)
	}
	return out
}

// candidateTraces finds the traces, other than known ones, holding spans
// that may be the other half of one of halves: by id, or by input tokens
// (Pair checks the rest). It adds what it finds to known.
func (a *Assembler) candidateTraces(ctx context.Context, project uint32, halves []assemble.Half, known map[string]bool) ([]string, error) {
	var responseIDs, requestIDs []string
	var clientTokens, serverTokens []string
	var lo, hi time.Time
	for i, h := range halves {
		if i == 0 || h.Start.Before(lo) {
			lo = h.Start
		}
		if i == 0 || h.End.After(hi) {
			hi = h.End
		}
		tok := ""
		if h.InputTokens != nil {
			tok = fmt.Sprint(*h.InputTokens)
		}
		switch {
		case h.Server:
			// Its client: a client span that received one of its id's forms.
			responseIDs = append(responseIDs, assemble.RequestIDForms(h.ID)...)
			if tok != "" {
				clientTokens = append(clientTokens, tok)
			}
		default:
			if h.ID != "" {
				requestIDs = append(requestIDs, h.ID)
			}
			if tok != "" {
				serverTokens = append(serverTokens, tok)
			}
		}
	}
	var server, client []string
	var args []any
	args = append(args, project, lo.Add(-joinLookupSlack), hi.Add(joinLookupSlack))
	// A match needs the server span within its client span (MatchTolerance),
	// so candidates by tokens come from narrower ranges than ids: a server
	// starts within the halves' range, a client may start before it (a
	// held request).
	between := func(from, to time.Time) string {
		const layout = "2006-01-02 15:04:05.999999999"
		return fmt.Sprintf(" AND start >= toDateTime64('%s', 9, 'UTC') AND start <= toDateTime64('%s', 9, 'UTC')",
			from.UTC().Format(layout), to.UTC().Format(layout))
	}
	serverNear := between(lo.Add(-assemble.MatchTolerance), hi.Add(assemble.MatchTolerance))
	clientNear := between(lo.Add(-joinLookupSlack), hi.Add(assemble.MatchTolerance))
	if len(requestIDs) > 0 {
		server = append(server, "hasAny(?, "+assemble.RequestIDFormsSQL("response_id")+")")
		args = append(args, slices.Compact(slices.Sorted(slices.Values(requestIDs))))
	}
	if len(serverTokens) > 0 {
		// Only a root server span is a match candidate of a client call:
		// one with a parent is, nearly always, below its client already
		// (trace context propagated), and a busy self-hosted service has
		// many such spans of every prompt length.
		server = append(server, "(parent_span_id = '' AND input_tokens IN ("+strings.Join(slices.Compact(slices.Sorted(slices.Values(serverTokens))), ",")+")"+serverNear+")")
	}
	if len(responseIDs) > 0 {
		client = append(client, "has(?, response_id)")
		args = append(args, slices.Compact(slices.Sorted(slices.Values(responseIDs))))
	}
	if len(clientTokens) > 0 {
		client = append(client, "(input_tokens IN ("+strings.Join(slices.Compact(slices.Sorted(slices.Values(clientTokens))), ",")+")"+clientNear+")")
	}
	var either []string
	if len(server) > 0 {
		either = append(either, "(llm_role = 'server' AND ("+strings.Join(server, " OR ")+"))")
	}
	if len(client) > 0 {
		either = append(either, "(llm_role = 'client' AND ("+strings.Join(client, " OR ")+"))")
	}
	if len(either) == 0 {
		return nil, nil
	}
	r, err := a.CH.Query(ctx, "SELECT DISTINCT trace_id FROM spans PREWHERE project_id = ? AND start >= ? AND start <= ? WHERE "+
		strings.Join(either, " OR ")+assemblyReadSettings, args...)
	if err != nil {
		return nil, fmt.Errorf("find join candidates: %w", err)
	}
	var out []string
	for i := range r.Len() {
		id := r.Row(i).String("trace_id")
		if !known[id] {
			known[id] = true
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out, nil
}

// deriveTraces reads every span of the given traces of a project and
// assembles them with joins (nil: as their own traces say), returning their
// requests and unpaired halves.
func (a *Assembler) deriveTraces(ctx context.Context, project uint32, traceIDs []string, joins *assemble.Joins) ([]telemetry.LLMRequest, []assemble.Half, error) {
	if len(traceIDs) == 0 {
		return nil, nil, nil
	}
	within, args, _, err := a.traceWindow(ctx, project, traceIDs, time.Time{})
	if err != nil {
		return nil, nil, err
	}
	// The server spans joined from other traces: their services' events
	// decide cold starts too.
	var partners []telemetry.Span
	if joins != nil {
		for _, p := range joins.Servers {
			for _, s := range p.Spans {
				partners = append(partners, *s)
			}
		}
	}
	events := passEvents{a: a, project: project}
	var reqs []telemetry.LLMRequest
	var halves []assemble.Half
	var batchErr error
	err = a.CH.QuerySpanCores(ctx, a.batchSpans, func(batch []telemetry.Span) error {
		hist, err := events.cover(ctx, slices.Concat(batch, partners))
		if err != nil {
			batchErr = err
			return err
		}
		r, h := assemble.TracesJoined(batch, hist, a.Options, joins)
		reqs, halves = append(reqs, r...), append(halves, h...)
		return nil
	}, "SELECT "+assemblySpanColumns+" FROM spans PREWHERE project_id = ?"+within+" AND trace_id IN ?"+assemblyReadSettings,
		append(append([]any{project}, args...), clickhouse.StringSet(traceIDs))...)
	if batchErr != nil {
		return nil, nil, batchErr
	}
	if err != nil {
		return nil, nil, fmt.Errorf("load spans to join: %w", err)
	}
	return reqs, halves, nil
}

// matchClaims reads the stored match pairings of the given traces' live
// rows.
func (a *Assembler) matchClaims(ctx context.Context, project uint32, traceIDs []string) ([]assemble.Claim, error) {
	rows, err := a.storedRows(ctx, project, traceIDs)
	if err != nil {
		return nil, err
	}
	var claims []assemble.Claim
	for _, r := range rows {
		if r.Join == telemetry.JoinMatch && r.ServerSpanID != "" {
			claims = append(claims, assemble.Claim{
				Client: assemble.CallKey{Project: project, Trace: r.TraceID, Span: r.SpanID},
				Server: assemble.CallKey{Project: project, Trace: r.ServerTraceID, Span: r.ServerSpanID},
			})
		}
	}
	return claims, nil
}

// storedRows reads the live rows of the given traces of a project, as
// FINAL would return them (liveRequests).
func (a *Assembler) storedRows(ctx context.Context, project uint32, traceIDs []string) ([]telemetry.LLMRequest, error) {
	if len(traceIDs) == 0 {
		return nil, nil
	}
	within, args, _, err := a.traceWindow(ctx, project, traceIDs, time.Time{})
	if err != nil {
		return nil, err
	}
	er, err := a.CH.Query(ctx, "SELECT "+existingRowColumns+" FROM llm_requests PREWHERE project_id = ?"+within+" AND trace_id IN ?"+assemblyReadSettings,
		append(append([]any{project}, args...), clickhouse.StringSet(traceIDs))...)
	if err != nil {
		return nil, fmt.Errorf("load existing requests: %w", err)
	}
	return liveRequests(er), nil
}

// existingRowColumns is what the assembler reads of stored rows: every
// column it writes, and the version and tombstone flag FINAL would use.
var existingRowColumns = clickhouse.RequestColumns + ", " + clickhouse.DetailColumns + ", toInt64(version) AS row_version, is_deleted"
