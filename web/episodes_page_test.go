package web_test

import (
	"context"
	"html"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
)

// With a queueing incident under way, the overview and the diagnosis page
// lead with it ("Queueing since 03:23, 12 min, ongoing") and draw it on a
// strip whose link is the episode's diagnosis, in absolute times, against
// the clean stretch before it. vllm served exactly rag-chat's requests, so
// its episode carries and links rag-chat's diagnosis (diagnosed once).
func TestPagesLeadWithTheOngoingEpisode(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	in := plantQueueingIncident(t, srv, defaultProject(t, srv), "rag-chat")
	if err := srv.Episodes.Detect(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := newBrowser(t, srv)
	c.login(apptest.Key)

	// The first pooled point may hold the minute before the incident.
	starts := []time.Time{in.IncidentFrom.Add(-time.Minute), in.IncidentFrom, in.IncidentFrom.Add(time.Minute)}
	leads := func(what, page string) {
		t.Helper()
		page = html.UnescapeString(page)
		found := false
		for _, s := range starts {
			link := `<a href="/diagnose?baseline_from=` + url.QueryEscape(s.Add(-time.Hour).Format(time.RFC3339)) +
				"&baseline_to=" + url.QueryEscape(s.Format(time.RFC3339)) + "&from=" + url.QueryEscape(s.Format(time.RFC3339)) + "&service=rag-chat&to="
			if strings.Contains(page, link) && strings.Contains(page, "Queueing since "+s.Format("15:04")+", ") && strings.Contains(page, "ongoing</a>") {
				found = true
			}
		}
		if !found {
			i := strings.Index(page, `class="card episodes"`)
			t.Errorf("%s does not lead with the ongoing queueing episode; its episodes section:\n%.1500s", what, page[max(0, i):])
		}
		if !strings.Contains(page, `class="episode-mark mark-queueing ongoing"`) {
			t.Errorf("%s has no strip mark of the ongoing queueing episode", what)
		}
	}
	leads("the overview", c.page("/"))
	leads("the diagnosis page", c.page("/diagnose?service=vllm"))
}
