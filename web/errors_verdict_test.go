package web_test

import (
	"fmt"
	"html"
	"math/rand"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/telemetry"
)

// A managed API that starts refusing a third of the calls: the overview's
// badge and the diagnosis read "Errors & rate limits", with the cause words
// of the verdict table and the failures broken down by status.
func TestErrorsVerdictPages(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	project := defaultProject(t, srv)
	rng := rand.New(rand.NewSource(7))
	end := time.Now().UTC().Truncate(time.Minute).Add(-time.Minute)
	var reqs []telemetry.LLMRequest
	n := 0
	for ts := end.Add(-2 * time.Hour); ts.Before(end); ts = ts.Add(4 * time.Second) {
		n++
		r := telemetry.LLMRequest{ProjectID: project, TraceID: fmt.Sprintf("%032x", n), SpanID: "00000000000000c1", Service: "support-agent",
			Model: "gpt-4o-mini", Provider: "openai", Start: ts, TTFT: telemetry.Ptr(500 + rng.Float64()*100),
			Decode: telemetry.Ptr(900 + rng.Float64()*200), E2E: telemetry.Ptr(1500.0), PreInference: telemetry.Ptr(30.0)}
		failRate := 0.01
		if ts.After(end.Add(-30 * time.Minute)) {
			failRate = 0.3
		}
		if rng.Float64() < failRate {
			r.Error, r.ErrorType, r.TTFT, r.Decode = true, "429", nil, nil
			if rng.Float64() < 0.2 {
				r.ErrorType = "InternalServerError"
			}
		}
		reqs = append(reqs, r)
	}
	insertRequests(t, srv, reqs)

	q := url.Values{"from": {end.Add(-30 * time.Minute).Format(time.RFC3339)}, "to": {end.Format(time.RFC3339)}, "service": {"support-agent"}}
	page := b.diagnosePage(q.Encode())
	contains(t, "diagnosis", page, "Errors &amp; rate limits", "Requests fail: rate limits, server errors or timeouts",
		"Error rate 1", "By status: rate limits (429)", "server errors (5xx)", `verdict-errors`)

	q.Del("service")
	body := b.page("/?" + q.Encode())
	verdictURL := regexp.MustCompile(`hx-get="(/\?[^"]*part=verdict[^"]*service=support-agent[^"]*)" hx-trigger="load"`).FindStringSubmatch(body)
	if verdictURL == nil {
		t.Fatalf("overview: no verdict placeholder for support-agent:\n%s", body)
	}
	badge := b.page(html.UnescapeString(verdictURL[1]))
	contains(t, "overview badge", badge, `class="badge v-errors"`, "Errors &amp; rate limits")

	// The API and the list say how each failed call failed.
	var list struct {
		Requests []struct {
			Error      bool   `json:"error"`
			ErrorType  string `json:"error_type"`
			ErrorClass string `json:"error_class"`
		} `json:"requests"`
	}
	b.getJSON("/api/v1/requests?"+q.Encode()+"&limit=1000", apptest.Key, &list)
	classes := map[string]int{}
	for _, r := range list.Requests {
		if r.Error != (r.ErrorClass != "") {
			t.Fatalf("request error %v with class %q", r.Error, r.ErrorClass)
		}
		classes[r.ErrorType+" "+r.ErrorClass]++
	}
	if classes["429 rate_limit"] == 0 || classes["InternalServerError server_error"] == 0 || len(classes) != 3 {
		t.Errorf("error types and classes listed: %v", classes)
	}
	listPage := b.page("/requests?" + q.Encode())
	contains(t, "requests list", listPage, `<span class="tag tag-error" title="429 (rate limit)">error</span>`)
}
