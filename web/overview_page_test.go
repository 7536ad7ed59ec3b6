package web_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/telemetry"
)

func TestOverviewPage(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	project := projectOfKey(t, srv, apptest.Key)

	// A project that never sent anything gets the onboarding steps.
	first := b.page("/")
	contains(t, "onboarding", first, "No LLM requests yet", "OTEL_EXPORTER_OTLP_ENDPOINT=http://", "OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20&lt;your key&gt;",
		"make run", `data-copy=`)
	lacks(t, "onboarding", first, "<h2 id=\"services-h\">")

	// chat-api calls llama on vllm-a: 40 requests over the last 40 minutes,
	// TTFT 300 ms each but 3 s for the last four; summarizer calls a
	// managed API with a 1 % … 10 % error share.
	now := time.Now().UTC()
	var reqs []telemetry.LLMRequest
	for i := range 40 {
		queue := 200.0
		if i >= 36 {
			queue = 2900
		}
		reqs = append(reqs, llmRequest(project, "chat-api", "vllm-a", "llama-3-8b", "vllm-a-0", now.Add(-time.Duration(40-i)*time.Minute), queue, 60, 40, 1000))
	}
	for i := range 10 {
		r := telemetry.LLMRequest{ProjectID: project, TraceID: newTraceID(), SpanID: "00000000000000b1", Service: "summarizer",
			Model: "gpt-4o-mini", Provider: "openai", Start: now.Add(-time.Duration(30-i) * time.Minute),
			TTFT: telemetry.Ptr(600.0), E2E: telemetry.Ptr(1600.0), Decode: telemetry.Ptr(1000.0), Error: i == 0}
		reqs = append(reqs, r)
	}
	insertRequests(t, srv, reqs)

	body := b.page("/?last=1h")
	contains(t, "overview", body,
		"<h1>Overview</h1>", "Last 1 h",
		">chat-api</bdi></a>", ">vllm-a</bdi></a>", ">summarizer</bdi></a>", // services, each side of the calls
		"inference server", "llama-3-8b", "gpt-4o-mini",
		`<div class="kpi">50</div>`, // chat-api 40 + summarizer 10 (vllm-a serves chat-api's)
		"300 ms",                    // chat-api TTFT p50
		"10 %",                      // summarizer error share
		`aria-current="true">1 h</a>`,
		`class="spark"`, `data-chart="overview-ttft"`, `id="overview-ttft" type="application/json"`,
		"Show the numbers", "/diagnose?last=1h&amp;service=chat-api", "/requests?last=1h&amp;model=llama-3-8b")
	// Verdicts load after the page (each is a diagnosis): a placeholder
	// asks htmx for the badge and links to the diagnosis without script.
	verdictURL := regexp.MustCompile(`hx-get="(/\?last=1h&amp;part=verdict&amp;service=chat-api)" hx-trigger="load"`).FindStringSubmatch(body)
	if verdictURL == nil {
		t.Fatalf("overview: no verdict placeholder for chat-api:\n%s", body)
	}
	badge := b.page(html.UnescapeString(verdictURL[1]))
	if !regexp.MustCompile(`^<a href="/diagnose\?last=1h&amp;service=chat-api" title="[^"]+" class="badge-link"><span class="badge v-[a-z_]+">`).MatchString(badge) {
		t.Errorf("verdict fragment: %s", badge)
	}
	// The verdict is kept a minute: the next overview shows it inline.
	if again := b.page("/?last=1h"); !strings.Contains(again, `class="badge-link"><span class="badge v-`) {
		t.Errorf("overview after the verdict was computed: no inline badge")
	}
	// The busiest service comes first.
	if i, j := strings.Index(body, ">chat-api</bdi></a>"), strings.Index(body, ">summarizer</bdi></a>"); i < 0 || j < i {
		t.Errorf("overview: chat-api (40 requests) should be listed before summarizer (10)")
	}
	// The TTFT p95 of chat-api sits in its row, with the 3 s tail.
	row := body[strings.Index(body, ">chat-api</bdi></a>"):]
	row = row[:strings.Index(row, "</tr>")]
	contains(t, "chat-api row", row, "300 ms", "3.0 s", "40 requests", "no SLO")

	// With an SLO that the tail misses, the SLO column says so in words.
	r := b.post("/slos", url.Values{"service": {"chat-api"}, "metric": {"ttft"}, "percentile": {"95"}, "threshold": {"1000"}, "window": {"1d"}})
	if r.Code != http.StatusSeeOther {
		t.Fatalf("create SLO: %d\n%s", r.Code, r.Body)
	}
	body = b.page("/?last=1h")
	row = body[strings.Index(body, ">chat-api</bdi></a>"):]
	row = row[:strings.Index(row, "</tr>")]
	if !strings.Contains(row, "1 of 1 missed") && !strings.Contains(row, "burning") {
		t.Errorf("chat-api row should show its missed SLO:\n%s", row)
	}
	contains(t, "SLO KPI", body, "1 of 1 missed")

	// A custom range without traffic explains itself; the form's
	// datetime-local values are read as UTC.
	from, to := now.Add(-5*time.Hour).Format("2006-01-02T15:04"), now.Add(-4*time.Hour).Format("2006-01-02T15:04")
	empty := b.page("/?from=" + from + "&to=" + to)
	contains(t, "empty range", empty, "No requests in this range", "pick a longer range", "Custom range", `value="`+from+`"`)

	// A bad range is a clear 400 page.
	bad := b.get("/?last=forever")
	if bad.Code != http.StatusBadRequest || !strings.Contains(bad.Body, "is not a duration") {
		t.Errorf("last=forever: %d, want 400 with an explanation\n%s", bad.Code, bad.Body)
	}
	if bad := b.get("/?from=" + to + "&to=" + from); bad.Code != http.StatusBadRequest || !strings.Contains(bad.Body, "must be before") {
		t.Errorf("reversed range: %d, want 400", bad.Code)
	}
}
