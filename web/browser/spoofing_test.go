package browser_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// Service names that spoof the overview unless the page clamps and
// isolates them: 300 characters without a space, and one with a
// right-to-left override (U+202E) that is never closed. They are stored
// straight into ClickHouse, past ingest's cleaning, as data written
// elsewhere or by an older release would be.
var (
	longService = "svc-" + strings.Repeat("verylongname", 25)[:296]
	rloService  = "rtl-\u202Eevil-service"
)

// spoofSpans is a root span and an LLM client span of service.
func spoofSpans(traceID, service string, start time.Time) []telemetry.Span {
	ttft := 400 * time.Millisecond
	res := map[string]string{"service.name": service}
	return []telemetry.Span{
		{ProjectID: 1, TraceID: traceID, SpanID: "00000000000000c1", Service: service, Name: "POST /chat", Kind: "server",
			Start: start, End: start.Add(2 * time.Second), StatusCode: "ok", Resource: res},
		{ProjectID: 1, TraceID: traceID, SpanID: "00000000000000c2", ParentSpanID: "00000000000000c1", Service: service,
			Name: "chat gpt-4o", Kind: "client", Start: start.Add(100 * time.Millisecond), End: start.Add(1900 * time.Millisecond),
			StatusCode: "ok", Resource: res, Attributes: map[string]string{"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"},
			LLM: telemetry.LLMCall{Role: telemetry.LLMClient, Provider: "openai", Model: "gpt-4o", Operation: "chat",
				InputTokens: telemetry.Ptr[int64](100), OutputTokens: telemetry.Ptr[int64](20), ClientTTFT: &ttft}},
	}
}

// testSpoofing: in the overview's services table a 300-character service
// name stays within its cell (ellipsis, the full name in the title) and
// the row fits the table's box, and a name with an unclosed RLO does not
// reorder the role tag after it: the tag is drawn to the right of the
// name, as it reads in the markup. It runs last: its services would
// change what earlier tests count.
func (s *suite) testSpoofing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	at := time.Now().UTC().Add(-3 * time.Minute)
	var spans []telemetry.Span
	for i, svc := range []string{longService, rloService} {
		spans = append(spans, spoofSpans(fmt.Sprintf("%032x", 0xc0ffee00+i), svc, at)...)
	}
	if err := s.srv.CH.Insert(ctx, clickhouse.SpansBatch(spans)); err != nil {
		t.Fatalf("insert spans: %v", err)
	}
	for _, svc := range []string{longService, rloService} {
		for deadline := time.Now().Add(45 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			q := url.Values{"service": {svc}, "from": {rfc(at.Add(-time.Minute))}, "to": {rfc(time.Now().Add(time.Minute))}}
			if len(apiRequests(t, s.srv, q)) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the request of %q was not assembled within 45 s", svc)
			}
		}
	}

	tb := s.loggedInTab(t)
	tb.open("/?last=1h")
	// The row header of a service, found by its link's text.
	const rowOf = `(name => [...document.querySelectorAll("table.services th[scope=row]")].find(th => th.querySelector("a").textContent === name))`
	type box struct {
		Found                  bool
		Name, Cell, Wrap, Page float64 // widths: the link, its cell, the table's box and its scroll width
		Title                  string
		NameRight, TagLeft     float64
	}
	measure := func(name string) box {
		return eval[box](tb, fmt.Sprintf(`(function () {
			const th = %s(%q);
			if (!th) return {Found: false};
			const a = th.querySelector("a"), tag = th.querySelector(".tag"), wrap = th.closest(".table-wrap");
			const titled = th.querySelector("[title]");
			return {Found: true, Name: a.getBoundingClientRect().width, Cell: th.getBoundingClientRect().width,
				Wrap: wrap.clientWidth, Page: wrap.scrollWidth, Title: titled ? titled.title : "",
				NameRight: a.getBoundingClientRect().right, TagLeft: tag.getBoundingClientRect().left};
		})()`, rowOf, name))
	}

	long := measure(longService)
	switch {
	case !long.Found:
		t.Fatalf("the 300-character service has no row on the overview")
	case long.Name > long.Cell || long.Name > 16*16:
		t.Errorf("the long name is %.0f px wide in a %.0f px cell; want it clamped to 16rem", long.Name, long.Cell)
	case long.Page > long.Wrap+1:
		t.Errorf("the services table scrolls sideways: %.0f px of content in %.0f px", long.Page, long.Wrap)
	case long.Title != longService:
		t.Errorf("the full name is not in the title: %q", long.Title)
	}

	rlo := measure(rloService)
	if !rlo.Found {
		t.Fatalf("the RLO service has no row on the overview")
	}
	if rlo.TagLeft < rlo.NameRight-1 {
		t.Errorf("the RLO in the name reorders the row: its tag starts at %.0f px, left of the name's end at %.0f px", rlo.TagLeft, rlo.NameRight)
	}
	s.screenshot(tb, "spoofing-overview")
	tb.checkClean()
}
