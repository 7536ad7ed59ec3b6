package web_test

import (
	"html"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/telemetry"
)

// An app and the inference server that served exactly its requests name
// each other on the overview and show one verdict, the app's: the server
// row's badge loads the app's diagnosis and says so.
func TestOverviewPairsAppAndServer(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	project := projectOfKey(t, srv, apptest.Key)
	now := time.Now().UTC()
	var reqs []telemetry.LLMRequest
	for i := range 40 {
		queue := 200.0
		if i >= 30 {
			queue = 4000
		}
		reqs = append(reqs, llmRequest(project, "pair-app", "pair-vllm", "llama-3-8b", "pair-vllm-0", now.Add(-time.Duration(40-i)*time.Minute), queue, 60, 40, 1000))
	}
	insertRequests(t, srv, reqs)

	body := b.page("/?last=1h")
	rowOf := func(body, name string) string {
		t.Helper()
		i := strings.Index(body, ">"+name+"</bdi></a>")
		if i < 0 {
			t.Fatalf("no row for %s", name)
		}
		row := body[i:]
		return row[:strings.Index(row, "</tr>")]
	}
	for _, c := range []struct{ row, pair string }{
		{"pair-app", `calls\s+<bdi class="name" title="pair-vllm">pair-vllm</bdi> \(same requests, one verdict\)`},
		{"pair-vllm", `serves\s+<bdi class="name" title="pair-app">pair-app</bdi> \(same requests, one verdict\)`},
	} {
		if !regexp.MustCompile(c.pair).MatchString(rowOf(body, c.row)) {
			t.Errorf("%s row does not name its pair:\n%s", c.row, rowOf(body, c.row))
		}
	}
	hx := regexp.MustCompile(`hx-get="([^"]+)"`)
	app, server := hx.FindStringSubmatch(rowOf(body, "pair-app")), hx.FindStringSubmatch(rowOf(body, "pair-vllm"))
	if app == nil || server == nil {
		t.Fatalf("verdict placeholders: app %v, server %v", app, server)
	}
	if !strings.Contains(server[1], "service=pair-app") || !strings.Contains(server[1], "for=pair-vllm") {
		t.Errorf("the server row loads %s, want the app's verdict", server[1])
	}
	// Both rows then show the one verdict inline. The verdict cache is keyed
	// by the minute, so a reload in the next minute misses it: then once
	// more within one minute.
	badgeOf := regexp.MustCompile(`class="badge v-([a-z_]+)"`)
	for attempt := 0; ; attempt++ {
		minute := time.Now().Unix() / 60
		badge := b.page(html.UnescapeString(server[1]))
		if !strings.Contains(badge, `title="Same requests as pair-app, diagnosed once: `) {
			t.Errorf("the server row's badge does not say whose verdict it shows: %s", badge)
		}
		again := b.page("/?last=1h")
		va, vs := badgeOf.FindStringSubmatch(rowOf(again, "pair-app")), badgeOf.FindStringSubmatch(rowOf(again, "pair-vllm"))
		if (va == nil || vs == nil) && attempt == 0 && time.Now().Unix()/60 != minute {
			continue
		}
		if va == nil || vs == nil || va[1] != vs[1] {
			t.Errorf("verdicts of the pair: app %v, server %v; want one verdict on both rows", va, vs)
		}
		break
	}
}
