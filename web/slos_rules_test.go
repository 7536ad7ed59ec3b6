package web_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/telemetry"
)

var sloRulesAction = regexp.MustCompile(`action="(/slos/\d+/rules)"`)

// The SLO page says when each burn rule fires for the SLO's budget (the
// bad share it needs, capped), takes an SLO's own rules and explains bad
// ones, and keeps the episode-alert switch of the alert rule.
func TestSLOsPageBurnRules(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	project := projectOfKey(t, srv, apptest.Key)
	insertRequests(t, srv, []telemetry.LLMRequest{llmRequest(project, "chat-api", "vllm", "llama", "vllm-0", time.Now().UTC().Add(-time.Minute), 20, 60, 20, 800)})
	if r := b.post("/slos", url.Values{"service": {"chat-api"}, "metric": {"ttft"}, "percentile": {"95"}, "threshold": {"1000"}, "window": {"1d"}}); r.Code != http.StatusSeeOther {
		t.Fatalf("create SLO: %d\n%s", r.Code, r.Body)
	}
	page := b.page("/slos")
	contains(t, "default rule", page, "Fires when over 1 h and over 5 min at least 50", "capped from 14×")
	m := sloRulesAction.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no rules form on the SLO row")
	}
	if r := b.post(m[1], url.Values{"rules": {"6h/30m:6, 24h/2h:3"}}); r.Code != http.StatusSeeOther {
		t.Fatalf("save rules: %d\n%s", r.Code, r.Body)
	}
	page = b.page("/slos")
	contains(t, "own rules", page, "Fires when over 6 h and over 30 min at least 30", "Fires when over 24 h and over 2 h at least 15", `value="6h/30m:6, 1d/2h:3"`)
	if strings.Contains(page, "over 1 h and over 5 min") {
		t.Error("the default rule is still listed beside the SLO's own")
	}
	r := b.post(m[1], url.Values{"rules": {"fast"}})
	if r.Code != http.StatusUnprocessableEntity || !strings.Contains(r.Body, "want long/short:burn like 1h/5m:14.4") {
		t.Errorf("bad rules: %d, want 422 saying how to write them", r.Code)
	}
	if r := b.post("/slos/999999/rules", url.Values{"rules": {"1h/5m:10"}}); r.Code != http.StatusNotFound {
		t.Errorf("rules of an unknown SLO: %d, want 404", r.Code)
	}

	if r := b.post("/slos/alerts", url.Values{"webhook_url": {"https://hooks.example.test/x"}, "enabled": {"true"}, "episodes": {"true"}, "action": {"save"}}); r.Code != http.StatusSeeOther {
		t.Fatalf("save alert rule: %d\n%s", r.Code, r.Body)
	}
	contains(t, "episode alerts switch", b.page("/slos"), `name="episodes" value="true" checked`)
}

// Default objectives are set per service on the SLO page and through the
// API; each service shows the objective it is judged against and where it
// comes from (a TTFT SLO wins over a saved objective).
func TestObjectivesPageAndAPI(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	project := projectOfKey(t, srv, apptest.Key)
	now := time.Now().UTC()
	insertRequests(t, srv, []telemetry.LLMRequest{
		llmRequest(project, "chat-api", "vllm", "llama", "vllm-0", now.Add(-time.Minute), 20, 60, 20, 800),
		llmRequest(project, "batch", "", "gpt-4o", "", now.Add(-time.Minute), 20, 60, 20, 800),
	})
	contains(t, "built-in default", b.page("/slos"), `<h2 id="objectives-h">Default objectives</h2>`, "the built-in default", "10.0 s")

	if r := b.post("/slos/objectives", url.Values{"service": {"batch"}, "ttft_p95_ms": {"-5"}}); r.Code != http.StatusUnprocessableEntity ||
		!strings.Contains(r.Body, "above 0 and at most 600000") {
		t.Errorf("negative objective: %d, want 422 saying the range", r.Code)
	}
	if r := b.post("/slos/objectives", url.Values{"service": {"batch"}, "ttft_p95_ms": {"25000"}}); r.Code != http.StatusSeeOther {
		t.Fatalf("save objective: %d\n%s", r.Code, r.Body)
	}
	code, body := apiPut(t, srv, "/api/v1/objectives", `{"service": "", "ttft_p95_ms": 4000}`)
	if code != http.StatusOK {
		t.Fatalf("PUT objectives: %d %s", code, body)
	}
	if code, body := apiPut(t, srv, "/api/v1/objectives", `{"service": "batch"}`); code != http.StatusBadRequest {
		t.Errorf("PUT without an objective: %d %s, want 400", code, body)
	}
	if r := b.post("/slos", url.Values{"service": {"chat-api"}, "metric": {"ttft"}, "percentile": {"99"}, "threshold": {"1500"}, "window": {"1d"}}); r.Code != http.StatusSeeOther {
		t.Fatalf("create SLO: %d", r.Code)
	}
	code, _, body = apiGet(t, srv, "/api/v1/objectives")
	if code != http.StatusOK {
		t.Fatalf("GET objectives: %d %s", code, body)
	}
	var got struct {
		Saved     map[string]float64 `json:"saved"`
		Effective []struct {
			Service string  `json:"service"`
			TTFTP95 float64 `json:"ttft_p95_ms"`
			Source  string  `json:"source"`
		} `json:"effective"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if got.Saved["batch"] != 25000 || got.Saved[""] != 4000 {
		t.Errorf("saved = %v, want batch 25000 and every service 4000", got.Saved)
	}
	want := map[string]string{"": "4000 project", "batch": "25000 saved", "chat-api": "1500 slo", "vllm": "4000 project"}
	for _, e := range got.Effective {
		if w, ok := want[e.Service]; ok {
			if g := strconv.FormatFloat(e.TTFTP95, 'f', -1, 64) + " " + e.Source; g != w {
				t.Errorf("%q judged against %s, want %s", e.Service, g, w)
			}
			delete(want, e.Service)
		}
	}
	if len(want) != 0 {
		t.Errorf("no effective objective for %v in %s", want, body)
	}
	contains(t, "objectives table", b.page("/slos"), "25.0 s", "set here", "its TTFT SLO")
}
