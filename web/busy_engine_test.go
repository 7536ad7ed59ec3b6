package web_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/store/clickhouse"
)

// While background statements hold every connection they may take (at
// full ingest, inserts and assembler passes do, back to back), the API
// still answers: a request's statements are interactive.
func TestAPIAnswersWhileTheEngineIsBusy(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	ctx := context.Background()
	// Four is the most background statements the embedded pool runs at
	// once; on a smaller machine the rest wait their turn.
	const long = 4
	var longDone atomic.Int32
	done := make(chan error, long)
	for range long {
		go func() {
			err := srv.CH.Exec(ctx, "SELECT sleepEachRow(0.5) FROM numbers(6) SETTINGS max_block_size = 1 FORMAT Null")
			longDone.Add(1)
			done <- err
		}()
	}
	// Until a background statement can no longer start.
	for {
		probe, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := srv.CH.Query(probe, "SELECT 1")
		cancel()
		if err != nil {
			break
		}
		if longDone.Load() != 0 {
			t.Fatal("the long statements ended before they held every background connection")
		}
	}
	from, to := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), time.Now().UTC().Format(time.RFC3339)
	if code := apiStatus(t, srv, "/api/v1/requests?from="+from+"&to="+to, apptest.Key); code != http.StatusOK {
		t.Fatalf("requests API: HTTP %d", code)
	}
	if longDone.Load() != 0 {
		t.Fatal("the API answered only after a background statement ended")
	}
	// Statements marked interactive outside a request take the same way.
	if _, err := srv.CH.Query(clickhouse.Interactive(ctx), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	for range long {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
