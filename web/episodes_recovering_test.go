package web_test

import (
	"context"
	"fmt"
	"html"
	"math/rand"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// A queueing incident whose last 4 minutes are healthy again is still an
// open episode (5 quiet minutes close it), recovering since the minute
// after its last slow one: GET /api/v1/episodes gives recovering_since,
// and the overview and the diagnosis page say "recovering since".
func TestEpisodeRecoveringShown(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	project := defaultProject(t, srv)
	end := time.Now().UTC().Truncate(time.Minute)
	slowFrom, recovered := end.Add(-14*time.Minute), end.Add(-4*time.Minute)
	rng := rand.New(rand.NewSource(3))
	var rows []telemetry.LLMRequest
	for ts, n := end.Add(-100*time.Minute), 0; ts.Before(end); ts, n = ts.Add(1500*time.Millisecond), n+1 {
		ttft := 150 + rng.Float64()*60
		if !ts.Before(slowFrom) && ts.Before(recovered) {
			ttft = 2000 + rng.Float64()*800
		}
		decode := 700 + rng.Float64()*300
		rows = append(rows, telemetry.LLMRequest{
			ProjectID: project, TraceID: fmt.Sprintf("%032x", uint64(project)<<48|uint64(n)), SpanID: fmt.Sprintf("%016x", n),
			Service: "rag-chat", Model: "llama-3-8b", Provider: "vllm", Start: ts, TTFT: telemetry.Ptr(ttft), Decode: telemetry.Ptr(decode),
			E2E: telemetry.Ptr(ttft + decode), ITL: telemetry.Ptr(decode / 149), OutputTokens: telemetry.Ptr(int64(150)), Route: "/chat",
		})
	}
	if err := srv.CH.Insert(context.Background(), clickhouse.RequestsBatch(rows, nil, 1)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Episodes.Detect(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := logIn(t, srv, apptest.Key)
	var got struct {
		Episodes []struct {
			Service         string     `json:"service"`
			Start           time.Time  `json:"start"`
			Ongoing         bool       `json:"ongoing"`
			RecoveringSince *time.Time `json:"recovering_since"`
		} `json:"episodes"`
	}
	b.getJSON("/api/v1/episodes?last=1h", apptest.Key, &got)
	if len(got.Episodes) != 1 {
		t.Fatalf("episodes of the last hour: %+v, want rag-chat's", got.Episodes)
	}
	e := got.Episodes[0]
	if !e.Ongoing || e.RecoveringSince == nil || !e.RecoveringSince.Equal(recovered) {
		t.Fatalf("rag-chat's episode: ongoing %v, recovering since %v; want ongoing, recovering since %v", e.Ongoing, e.RecoveringSince, recovered)
	}
	// "Provider since 10:50, 14 min · recovering since 11:00": the verdict
	// is the diagnosis's of these rows (no server to blame), the duration
	// counts to now.
	line := regexp.MustCompile(` since ` + e.Start.Format("15:04") + `, \d+ min · recovering since ` + recovered.Format("15:04") + `</a>`)
	for _, path := range []string{"/", "/diagnose?service=rag-chat"} {
		page := html.UnescapeString(b.page(path))
		if !line.MatchString(page) {
			i := strings.Index(page, `class="card episodes"`)
			t.Errorf("%s does not match %s; its episodes section:\n%.1200s", path, line, page[max(0, i):])
		}
		if !strings.Contains(page, `class="episode-recovering"`) {
			t.Errorf("%s draws no recovering tail on the strip", path)
		}
	}
}
