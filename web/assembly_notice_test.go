package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/store/postgres"
)

const (
	assemblyNotice = "LLM requests are behind the spans received"
	// snapshotBehind is how a share link's page says the same, frozen.
	snapshotBehind = "LLM requests were assembled only from spans that arrived up to "
)

var assemblerLag = regexp.MustCompile(`(?m)^tokenpath_assembler_lag_seconds ([0-9.e+]+)$`)

// When assembly trails the spans received by minutes, pages say so and
// /metrics shows the lag; once the assembler has run again, the notice is
// gone. A share link taken meanwhile keeps saying it, one taken after
// does not. The test holds the assembler's lock, as another node in the middle
// of a long pass does, so that no pass moves the watermark meanwhile.
func TestAssemblyBehindNotice(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	ctx := context.Background()
	// The first passes run at start; wait for one so the watermark exists.
	waitFor(t, "no notice once assembly has started", func() bool {
		return !strings.Contains(b.page("/"), assemblyNotice) && assemblerLag.MatchString(b.get("/metrics").Body)
	})

	held, behindShare := false, ""
	for deadline := time.Now().Add(30 * time.Second); !held && time.Now().Before(deadline); {
		var err error
		held, err = srv.PG.TryLock(ctx, postgres.LockAssembler, func(ctx context.Context) error {
			behind := time.Now().Add(-10 * time.Minute)
			if _, err := srv.PG.Pool.Exec(ctx, "UPDATE assembly_watermarks SET watermark = $1 WHERE name = 'assembler'", behind.UnixNano()); err != nil {
				return err
			}
			for _, path := range []string{"/", "/requests", "/diagnose"} {
				contains(t, path, b.page(path), assemblyNotice, "(10 min ago)", behind.UTC().Format("15:04:05")+" UTC")
			}
			if got := assembledThrough(t, b); got == nil || !got.Equal(time.Unix(0, behind.UnixNano())) {
				t.Errorf("/api/v1/diagnose assembled_through = %v, want %v", got, behind)
			}
			behindShare = sharePath(t, b.apiShare(apptest.Key, "/diagnose?last=15m", "").URL)
			contains(t, behindShare, b.get(behindShare).Body, snapshotBehind+behind.UTC().Format("15:04:05")+" UTC, 10 min earlier")
			m := assemblerLag.FindStringSubmatch(b.get("/metrics").Body)
			if m == nil {
				t.Fatal("/metrics has no tokenpath_assembler_lag_seconds")
			}
			if lag, _ := strconv.ParseFloat(m[1], 64); lag < 600 || lag > 700 {
				t.Errorf("tokenpath_assembler_lag_seconds %v, want ~600", lag)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !held {
		t.Fatal("the assembler's lock stayed taken for 30 s")
	}
	waitFor(t, "the notice gone after the assembler's next pass", func() bool {
		return !strings.Contains(b.page("/"), assemblyNotice)
	})
	if got := assembledThrough(t, b); got != nil {
		t.Errorf("/api/v1/diagnose assembled_through = %v once caught up, want none", got)
	}
	contains(t, behindShare+" once caught up", b.get(behindShare).Body, snapshotBehind)
	later := sharePath(t, b.apiShare(apptest.Key, "/diagnose?last=15m", "").URL)
	lacks(t, later+" taken once caught up", b.get(later).Body, snapshotBehind)
}

// assembledThrough reads the last 15 minutes' diagnosis from the API.
func assembledThrough(t *testing.T, b *browser) *time.Time {
	t.Helper()
	r := b.get("/api/v1/diagnose?from="+url.QueryEscape(time.Now().Add(-15*time.Minute).Format(time.RFC3339))+"&to="+url.QueryEscape(time.Now().Format(time.RFC3339)),
		"Authorization", "Bearer "+apptest.Key)
	if r.Code != http.StatusOK {
		t.Fatalf("/api/v1/diagnose: %d %s", r.Code, r.Body)
	}
	var d struct {
		AssembledThrough *time.Time `json:"assembled_through"`
	}
	if err := json.Unmarshal([]byte(r.Body), &d); err != nil {
		t.Fatal(err)
	}
	return d.AssembledThrough
}

// waitFor polls cond for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within 30 s", what)
}
