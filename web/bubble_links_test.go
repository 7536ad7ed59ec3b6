package web_test

import (
	"fmt"
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

var bubbleLink = regexp.MustCompile(`<a href="(/requests\?[^"]+)" title="The window's slow requests with this value">`)

// Each value "What sets the slow requests apart" names links to the
// window's slow requests holding it, and that list holds those and no
// others: two thirds of the slow requests come from tenant acme's batch
// route with 8k-token prompts on instance vllm-1, the rest look like the
// fast ones.
func TestBubbleUpValuesLinkToTheirRequests(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	project := projectOfKey(t, srv, apptest.Key)
	end := time.Now().UTC().Truncate(time.Minute).Add(-time.Minute)
	from := end.Add(-30 * time.Minute)
	var reqs []telemetry.LLMRequest
	for i, ts := 0, end.Add(-120*time.Minute); ts.Before(end); i, ts = i+1, ts.Add(5*time.Second) {
		r := llmRequest(project, "chat-api", "vllm", "llama-3-8b", "vllm-0", ts, 10, 150, 20, 800)
		r.Tenant, r.Route, r.InputTokens = "initech", "/chat", telemetry.Ptr(int64(500))
		if i%10 == 5 {
			r.Tenant, r.Instance = "acme", "vllm-1" // a few fast ones too
		}
		if !ts.Before(from) && i%10 == 0 {
			slow := llmRequest(project, "chat-api", "vllm", "llama-3-8b", "vllm-0", ts, 3000, 150, 20, 800)
			slow.Tenant, slow.Route, slow.InputTokens = r.Tenant, r.Route, r.InputTokens
			if i%30 != 0 {
				slow.Tenant, slow.Route, slow.Instance, slow.InputTokens = "acme", "/batch", "vllm-1", telemetry.Ptr(int64(8000))
			}
			r = slow
		}
		reqs = append(reqs, r)
	}
	insertRequests(t, srv, reqs)

	page := b.diagnosePage(url.Values{"service": {"chat-api"}, "from": {from.Format(time.RFC3339)}, "to": {end.Format(time.RFC3339)}}.Encode())
	bubble := page[strings.Index(page, `id="bubble-h"`):]
	bubble = bubble[:strings.Index(bubble, "</section>")]
	links := map[string]string{}
	for _, m := range bubbleLink.FindAllStringSubmatch(bubble, -1) {
		href := html.UnescapeString(m[1])
		u, err := url.Parse(href)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"tenant", "route", "prompt_length", "instance"} {
			if v := u.Query().Get(k); v != "" {
				links[k+"="+v] = href
			}
		}
	}
	type apiList struct {
		Requests []struct {
			Instance, Tenant, Route string
			InputTokens             int64   `json:"input_tokens"`
			TTFTMs                  float64 `json:"ttft_ms"`
		} `json:"requests"`
		Total int `json:"total"`
	}
	for _, want := range []string{"tenant=acme", "route=/batch", "prompt_length=4–16k", "instance=vllm-1"} {
		href, ok := links[want]
		if !ok {
			t.Errorf("no bubble-up link for %s; links %v in:\n%s", want, links, bubble)
			continue
		}
		if !strings.Contains(href, "slow=true") {
			t.Errorf("%s links to %s, not to the slow requests", want, href)
		}
		// The page lists them, with the filter in its form.
		list := b.page(href)
		contains(t, href, list, "24 requests", "above the p90 of the range&#39;s requests of chat-api, as a diagnosis counts them")
		// The API, asked the same, returns exactly the 24 slow ones of acme:
		// slow by the window's p90, not by the p90 of acme's own requests.
		var got apiList
		b.getJSON("/api/v1/"+strings.TrimPrefix(href, "/")+"&limit=1000", apptest.Key, &got)
		if got.Total != 24 || len(got.Requests) != 24 {
			t.Errorf("%s: the API lists %d of %d requests, want the 24 slow ones of acme", want, len(got.Requests), got.Total)
		}
		for _, r := range got.Requests {
			if r.Tenant != "acme" || r.Route != "/batch" || r.Instance != "vllm-1" || r.InputTokens != 8000 || r.TTFTMs < 3000 {
				t.Errorf("%s lists %+v", want, r)
				break
			}
		}
	}
	if s := apiStatus(t, srv, "/api/v1/requests?prompt_length=huge", apptest.Key); s != http.StatusBadRequest {
		t.Errorf("prompt_length=huge: %d, want 400", s)
	}
	form := b.page("/requests?" + url.Values{"tenant": {"acme"}, "route": {"/batch"}, "prompt_length": {"4–16k"}}.Encode())
	contains(t, "the requests form", form, `name="tenant" type="text" value="acme"`, `name="route" type="text" value="/batch"`,
		fmt.Sprintf(`<option value="%s" selected>`, "4–16k"))
}
