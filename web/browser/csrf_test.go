package browser_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// tossedToken is the value a hostile same-site page writes into tp_csrf
// and submits as the form token.
const tossedToken = "tossedtossedtossedtossedtossed00"

// testCookieTossing is the same-site CSRF attack: a page on another port
// of 127.0.0.1 (same site, another origin) sets tp_csrf for /slos and
// submits a form carrying the same value that re-points the alert webhook
// at itself. Chromium sends the victim's session cookie along (SameSite=Lax
// allows same-site posts); Tokenpath must refuse the form and keep the
// webhook.
func (s *suite) testCookieTossing(t *testing.T) {
	tb := s.loggedInTab(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	evil := "http://" + ln.Addr().String()
	page := fmt.Sprintf(`<!doctype html><title>evil</title>
<form id="f" method="post" action="%s/slos/alerts">
<input name="_csrf" value="%s"><input name="webhook_url" value="%s/stolen">
<input name="enabled" value="true"><input name="action" value="save"></form>
<script>document.cookie = "tp_csrf=%s; path=/slos"; document.getElementById("f").submit();</script>`, tb.base, tossedToken, evil, tossedToken)
	attacker := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(page))
	})}
	go func() { _ = attacker.Serve(ln) }()
	t.Cleanup(func() { _ = attacker.Close() })

	tb.expectStatus(http.StatusForbidden)
	if code := tb.openStatus(evil + "/"); code != http.StatusOK {
		t.Fatalf("the attacker's page: HTTP %d", code)
	}
	tb.waitJS("the forged form's answer", fmt.Sprintf(`location.origin === %q && document.readyState === "complete"`, tb.base))
	if body := tb.bodyText(); !strings.Contains(body, "another site") {
		t.Errorf("the forged form was not refused; Tokenpath answered: %.300s", body)
	}
	// The attack did run: the tossed cookie is in the browser.
	res := run(tb, func(ctx context.Context, tg *chromedp.Target) (network.GetCookiesResult, error) {
		return cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{URLs: []string{tb.base + "/slos/alerts"}})
	})
	tossed := false
	for _, c := range res.Cookies {
		tossed = tossed || c.Name == "tp_csrf" && c.Value == tossedToken
	}
	if !tossed {
		t.Fatalf("the attacker's page did not set tp_csrf (cookies %v); the test did not attack", res.Cookies)
	}
	tb.open("/slos")
	if hook := eval[string](tb, `document.getElementById("alert-webhook").value`); strings.Contains(hook, "/stolen") {
		t.Errorf("a same-site page re-pointed the alert webhook to %s", hook)
	}
	tb.checkClean()
}
