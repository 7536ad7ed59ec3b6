package web_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis/alerts"
	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/config"
	"github.com/tokenpath/tokenpath/outbound"
)

// TestOutboundAllowList: with TOKENPATH_OUTBOUND_ALLOW=127.0.0.2, scrape
// targets and webhooks elsewhere are refused when saved (by address, and
// by the address a name resolves to), and at the dial: a configured
// target on localhost is never reached, and the alert evaluator's client
// refuses 127.0.0.1. Hosts on the list work as before.
func TestOutboundAllowList(t *testing.T) {
	var hits atomic.Int32
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, "internal_secret 1\n")
	}))
	defer internal.Close()
	port := internal.URL[strings.LastIndexByte(internal.URL, ':'):]
	srv := apptest.Start(t, apptest.Options{Configure: func(c *config.Config) {
		p, err := outbound.Parse("127.0.0.2")
		if err != nil {
			t.Fatal(err)
		}
		c.Outbound = p
		c.ScrapeTargets = []string{"internal=http://localhost" + port + "/metrics"}
	}})
	b := logIn(t, srv, apptest.Key)

	for _, target := range []string{internal.URL + "/metrics", "http://localhost" + port + "/metrics", "http://[::1]:9/metrics"} {
		r := b.post("/settings/targets", url.Values{"url": {target}, "interval": {"15"}})
		if r.Code != http.StatusUnprocessableEntity || !strings.Contains(r.Body, "is not on the outbound allow-list (TOKENPATH_OUTBOUND_ALLOW)") {
			t.Errorf("target %s: %d, want 422 naming the allow-list", target, r.Code)
		}
	}
	if r := b.post("/settings/targets", url.Values{"url": {"http://127.0.0.2:9/metrics"}, "interval": {"15"}}); r.Code != http.StatusSeeOther {
		t.Errorf("target on the list: %d, want it saved\n%s", r.Code, r.Body)
	}

	hook := newWebhookReceiver(t)
	for _, action := range []string{"save", "test"} {
		r := b.post("/slos/alerts", url.Values{"webhook_url": {hook.URL + "/hook"}, "enabled": {"true"}, "action": {action}})
		if r.Code != http.StatusUnprocessableEntity || !strings.Contains(r.Body, "Alerts cannot be posted there") {
			t.Errorf("webhook on 127.0.0.1, %s: %d, want 422", action, r.Code)
		}
	}
	allowed := newWebhookReceiverOn(t, "127.0.0.2")
	if r := b.post("/slos/alerts", url.Values{"webhook_url": {allowed.URL + "/hook"}, "enabled": {"true"}, "action": {"test"}}); r.Code != http.StatusOK ||
		!strings.Contains(r.Body, "Test message posted") || len(allowed.received()) != 1 {
		t.Errorf("test message to 127.0.0.2: %d, %d received\n%s", r.Code, len(allowed.received()), r.Body)
	}

	// At the dial: the alert evaluator's client and the scraper.
	err := alerts.PostWebhook(context.Background(), srv.Alerts.Client, hook.URL+"/hook", alerts.TestMessage(""))
	if err == nil || !strings.Contains(err.Error(), "outbound allow-list") || len(hook.received()) != 0 {
		t.Errorf("alert post to 127.0.0.1: %v, %d received; want refused before connecting", err, len(hook.received()))
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		var lastError string
		for _, st := range srv.Scraper.Status() {
			if st.Service == "internal" {
				lastError = st.LastError
			}
		}
		if strings.Contains(lastError, "outbound allow-list") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the localhost target's status is %q, want the allow-list refusal", lastError)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if hits.Load() != 0 {
		t.Errorf("the internal server was reached %d times", hits.Load())
	}
}
