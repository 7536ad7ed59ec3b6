package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/telemetry"
)

// webhookReceiver records Slack-style posts on 127.0.0.1; fail makes it
// answer 500.
type webhookReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	posts []map[string]any
	fail  bool
}

func newWebhookReceiver(t *testing.T) *webhookReceiver {
	t.Helper()
	return newWebhookReceiverOn(t, "127.0.0.1")
}

// newWebhookReceiverOn is a webhookReceiver on another loopback address.
func newWebhookReceiverOn(t *testing.T, ip string) *webhookReceiver {
	t.Helper()
	w := &webhookReceiver{}
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	w.Server = &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var msg map[string]any
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &msg) != nil {
			http.Error(rw, "bad request", http.StatusBadRequest)
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.fail {
			http.Error(rw, "no_service", http.StatusInternalServerError)
			return
		}
		w.posts = append(w.posts, msg)
		_, _ = rw.Write([]byte("ok"))
	})}}
	w.Start()
	t.Cleanup(w.Close)
	return w
}

func (w *webhookReceiver) received() []map[string]any {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]map[string]any(nil), w.posts...)
}

func (w *webhookReceiver) setFail(fail bool) {
	w.mu.Lock()
	w.fail = fail
	w.mu.Unlock()
}

var deleteSLOAction = regexp.MustCompile(`action="(/slos/\d+/delete)"`)

func TestSLOsPageAndAlerts(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	ctx := context.Background()
	project := projectOfKey(t, srv, apptest.Key)

	contains(t, "empty SLO page", b.page("/slos"), "<h1>SLOs and alerts</h1>", "No SLOs yet", "No alert has fired yet", "14.4×")

	// chat-api: 20 healthy requests over the last hour, then its queue blew
	// up: the 10 requests of the last 5 minutes take 2 s to the first token.
	now := time.Now().UTC()
	var reqs []telemetry.LLMRequest
	for i := range 20 {
		reqs = append(reqs, llmRequest(project, "chat-api", "vllm", "llama", "vllm-0", now.Add(-6*time.Minute-time.Duration(i)*150*time.Second), 20, 60, 20, 800))
	}
	for i := range 10 {
		reqs = append(reqs, llmRequest(project, "chat-api", "vllm", "llama", "vllm-0", now.Add(-15*time.Second-time.Duration(i)*25*time.Second), 1900, 60, 20, 800))
	}
	insertRequests(t, srv, reqs)

	// SLOs are created from the form; bad input is explained.
	for _, tc := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"metric": {"ttft"}, "percentile": {"95"}, "threshold": {"-5"}, "window": {"1d"}}, "positive number of milliseconds"},
		{url.Values{"metric": {"tpot"}, "percentile": {"95"}, "threshold": {"fast"}, "window": {"1d"}}, "tokens per second"},
		{url.Values{"metric": {"ttft"}, "percentile": {"0.95"}, "threshold": {"500"}, "window": {"1d"}}, "at least 50 and below 100"},
		{url.Values{"metric": {"cost"}, "percentile": {"95"}, "threshold": {"500"}, "window": {"1d"}}, "Pick a metric"},
		{url.Values{"metric": {"ttft"}, "percentile": {"95"}, "threshold": {"500"}, "window": {"90d"}}, "at most 31 days"},
	} {
		r := b.post("/slos", tc.form)
		if r.Code != http.StatusUnprocessableEntity || !strings.Contains(r.Body, tc.want) {
			t.Errorf("create SLO %v: %d, want 422 saying %q", tc.form, r.Code, tc.want)
		}
	}
	// A service or model that never sent a request is refused beside its field.
	for _, tc := range []struct {
		form      url.Values
		field     string
		wantWords string
	}{
		{url.Values{"service": {"chat-apj"}, "metric": {"ttft"}, "percentile": {"95"}, "threshold": {"500"}, "window": {"1d"}},
			"service", `No service named &#34;chat-apj&#34; has sent LLM requests in the last 7 days`},
		{url.Values{"service": {"chat-api"}, "model": {"lama"}, "metric": {"ttft"}, "percentile": {"95"}, "threshold": {"500"}, "window": {"1d"}},
			"model", `chat-api has sent no requests for a model named &#34;lama&#34;`},
	} {
		r := b.post("/slos", tc.form)
		if r.Code != http.StatusUnprocessableEntity {
			t.Errorf("create SLO %v: %d, want 422", tc.form, r.Code)
			continue
		}
		contains(t, "SLO form error", r.Body, `<p class="field-error" id="slo-`+tc.field+`-error" role="alert">`+tc.wantWords,
			`id="slo-`+tc.field+`" aria-invalid`, `aria-describedby="slo-`+tc.field+`-error"`)
	}
	for _, form := range []url.Values{
		{"service": {"chat-api"}, "metric": {"ttft"}, "percentile": {"95"}, "threshold": {"500"}, "window": {"1d"}},
		{"service": {"chat-api"}, "model": {"llama"}, "metric": {"tpot"}, "percentile": {"90"}, "threshold": {"50"}, "window": {"7d"}},
	} {
		if r := b.post("/slos", form); r.Code != http.StatusSeeOther || r.Header.Get("Location") != "/slos?done=slo-created" {
			t.Fatalf("create SLO %v: %d %s", form, r.Code, r.Body)
		}
	}
	body := b.page("/slos?done=slo-created")
	contains(t, "SLO page", body, "SLO added.", ">chat-api</a>", "TTFT p95 &lt; 500 ms", ">chat-api · llama</a>", "TPOT p90 ≥ 50 tok/s",
		"violated",  // TTFT: 10 of 30 requests missed, p95 2.0 s
		"1.98 s",    // its current p95
		"125 tok/s", // TPOT: ITL 8 ms
		`10 <span class="muted small">of 30`)
	lacks(t, "SLO page", body, "burning fast")
	// Burn rates: 1 h 10 bad of 30 over a 5 % budget = 6.7×, 5 min 10 of
	// 10 = 20×; the TPOT SLO burns nothing.
	contains(t, "burn rates", body, ">6.7×<", ">20×<", ">0×<")

	// The diagnosis reads the stored SLO (web.Deps.Settings is wired).
	var diag struct {
		Answers struct {
			SLO *struct {
				TTFT *struct{ Target float64 } `json:"ttft"`
			} `json:"slo"`
		} `json:"answers"`
	}
	getAPI(t, srv, "/api/v1/diagnose?last=1h&service=chat-api", &diag)
	if diag.Answers.SLO == nil || diag.Answers.SLO.TTFT == nil || diag.Answers.SLO.TTFT.Target != 500 {
		t.Errorf("the diagnosis of chat-api does not judge against its SLO: %+v", diag.Answers.SLO)
	}

	// The 1 h burn is below 14.4×, so nothing fires yet.
	hook := newWebhookReceiver(t)
	if r := b.post("/slos/alerts", url.Values{"webhook_url": {hook.URL + "/hook"}, "enabled": {"true"}, "action": {"test"}}); r.Code != http.StatusOK ||
		!strings.Contains(r.Body, "Test message posted") {
		t.Fatalf("test message: %d\n%s", r.Code, r.Body)
	}
	if got := hook.received(); len(got) != 1 || !strings.Contains(got[0]["text"].(string), "Tokenpath test message") {
		t.Fatalf("test message received: %v", got)
	}
	if r := b.post("/slos/alerts", url.Values{"webhook_url": {"javascript:alert(1)"}, "enabled": {"true"}, "action": {"save"}}); r.Code != http.StatusUnprocessableEntity ||
		!strings.Contains(r.Body, "absolute http:// or https:// URL") {
		t.Errorf("bad webhook URL: %d", r.Code)
	}
	if r := b.post("/slos/alerts", url.Values{"webhook_url": {hook.URL + "/hook"}, "enabled": {"true"}, "action": {"save"}}); r.Code != http.StatusSeeOther {
		t.Fatalf("save alert rule: %d %s", r.Code, r.Body)
	}
	contains(t, "saved rule", b.page("/slos?done=alerts-saved"), "Alert rule saved", `value="`+hook.URL+`/hook"`, `name="enabled" value="true" checked`)
	if n, err := srv.Alerts.Evaluate(ctx); err != nil || n != 0 {
		t.Fatalf("evaluate with a slow burn: %d alerts, %v; want none", n, err)
	}

	// Now most of the hour misses the objective: 100 of 120 bad, 16.7× over
	// 1 h and 20× over 5 min; the alert fires once, with the verdict and a
	// frozen diagnosis.
	var burst []telemetry.LLMRequest
	for i := range 90 {
		burst = append(burst, llmRequest(project, "chat-api", "vllm", "llama", "vllm-0", now.Add(-6*time.Minute-time.Duration(i)*30*time.Second), 1900, 60, 20, 800))
	}
	insertRequests(t, srv, burst)
	hook.setFail(true)
	if n, err := srv.Alerts.Evaluate(ctx); err == nil || n != 0 {
		t.Fatalf("evaluate with a failing webhook: %d, %v; want an error", n, err)
	}
	failed, err := srv.PG.ListSLOAlerts(ctx, int64(project), 10)
	if err != nil || len(failed) != 1 || failed[0].Delivered || failed[0].Error != "webhook answered HTTP 5xx" {
		t.Fatalf("a failed post should be recorded with its error: %+v %v", failed, err)
	}
	contains(t, "failed alert", b.page("/slos"), "Failed", "webhook answered HTTP 5xx")
	hook.setFail(false)
	n, err := srv.Alerts.Evaluate(ctx) // a failed delivery is retried
	if err != nil || n != 1 {
		t.Fatalf("evaluate: %d alerts, %v; want 1", n, err)
	}
	posts := hook.received()
	alert := posts[len(posts)-1]
	text, _ := alert["text"].(string)
	contains(t, "alert text", text, "SLO burning fast: chat-api — TTFT p95 < 500 ms", "faster than allowed over the last hour")
	slos, err := srv.PG.ListSLOAlerts(ctx, int64(project), 10)
	if err != nil || len(slos) != 1 || !slos[0].Delivered || slos[0].Error != "" || slos[0].ShareURL != failed[0].ShareURL {
		t.Fatalf("recorded alerts: %+v %v; want the failed one retried and delivered with the same diagnosis", slos, err)
	}
	fired := slos[0]
	if fired.Summary == "" || !strings.Contains(text, fired.Summary) {
		t.Errorf("the alert should carry the verdict sentence %q:\n%s", fired.Summary, text)
	}
	if !strings.Contains(fired.ShareURL, "/s/") || !strings.Contains(text, fired.ShareURL) {
		t.Errorf("the alert should link a frozen diagnosis (/s/…), got %q in\n%s", fired.ShareURL, text)
	}
	blocks, _ := alert["blocks"].([]any)
	if len(blocks) < 3 {
		t.Errorf("Slack blocks: %v", alert["blocks"])
	}
	// The share link opens without a session.
	if u, err := url.Parse(fired.ShareURL); err == nil {
		resp, err := http.Get("http://" + srv.HTTPAddr + u.Path)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %v %v", u.Path, resp.StatusCode, err)
		}
		if resp != nil {
			resp.Body.Close()
		}
	}
	// De-duplicated: the same SLO is not posted again within 30 minutes.
	if n, err := srv.Alerts.Evaluate(ctx); err != nil || n != 0 {
		t.Errorf("second evaluation posted %d alerts (%v); want 0 within 30 min", n, err)
	}
	if len(hook.received()) != len(posts) {
		t.Errorf("the webhook got a duplicate post")
	}
	body = b.page("/slos")
	contains(t, "fired alerts", body, "Recent alerts", "Posted", "Frozen diagnosis", "17× / 20×", "burning fast")

	// Deleting an SLO removes it and its history.
	m := deleteSLOAction.FindAllStringSubmatch(body, -1)
	if len(m) != 2 {
		t.Fatalf("delete forms: %v", m)
	}
	for _, x := range m {
		if r := b.post(x[1], url.Values{}); r.Code != http.StatusSeeOther {
			t.Fatalf("delete SLO: %d", r.Code)
		}
	}
	body = b.page("/slos?done=slo-deleted")
	contains(t, "after delete", body, "SLO deleted", "No SLOs yet", "No alert has fired yet")
	if r := b.post("/slos/"+strconv.Itoa(999999)+"/delete", url.Values{}); r.Code != http.StatusNotFound {
		t.Errorf("deleting a missing SLO: %d, want 404", r.Code)
	}
}

func TestDiagnosisSLOPicksTheMostSpecific(t *testing.T) {
	slos := []postgres.SLO{
		{Metric: "ttft", Percentile: 99, ThresholdMs: 2000},
		{Service: "chat", Metric: "ttft", Percentile: 95, ThresholdMs: 800},
		{Service: "chat", Model: "llama", Metric: "ttft", Percentile: 90, ThresholdMs: 500},
		{Service: "chat", Metric: "tpot", Percentile: 95, ThresholdMs: 20},
		{Service: "other", Metric: "ttft", Percentile: 95, ThresholdMs: 100},
		{Service: "chat", Metric: "e2e", Percentile: 95, ThresholdMs: 100},
	}
	for _, tc := range []struct {
		service, model  string
		pct, ttft, tpot float64
	}{
		{service: "chat", model: "llama", pct: 90, ttft: 500, tpot: 50},
		{service: "chat", model: "gpt", pct: 95, ttft: 800, tpot: 50},
		{service: "chat", pct: 95, ttft: 800, tpot: 50},
		{service: "batch", pct: 99, ttft: 2000},
		{service: "", pct: 99, ttft: 2000},
	} {
		got := analysis.DiagnosisSLO(slos, tc.service, tc.model)
		if got == nil || got.Percentile != tc.pct || got.TTFTMs != tc.ttft || got.TPOT != tc.tpot {
			t.Errorf("DiagnosisSLO(%q, %q) = %+v, want p%v TTFT %v TPOT %v", tc.service, tc.model, got, tc.pct, tc.ttft, tc.tpot)
		}
	}
	if got := analysis.DiagnosisSLO(slos[4:5], "chat", ""); got != nil {
		t.Errorf("another service's SLO applied: %+v", got)
	}
}

// getAPI decodes GET path of the API called with the test key.
func getAPI(t *testing.T, srv *apptest.Server, path string, out any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+srv.HTTPAddr+path, nil)
	req.Header.Set("Authorization", "Bearer "+apptest.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}
