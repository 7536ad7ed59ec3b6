package web_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
)

// POST /api/v1/events over HTTP: what it stores and how it answers bad
// bodies (parsing itself is ingest's TestParseEvents).
func TestEventsAPI(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	gz := func(s string) []byte {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, _ = w.Write([]byte(s))
		_ = w.Close()
		return b.Bytes()
	}
	post := func(body []byte, gzipped bool, key string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+srv.HTTPAddr+"/api/v1/events", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if gzipped {
			req.Header.Set("Content-Encoding", "gzip")
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	one := `{"kind":"scale","service":"vllm-evtest","from_replicas":1,"to_replicas":2,"reason":"HPA","source":"test"}`
	two := `[{"service":"vllm-evtest","to_replicas":3},{"kind":"k8s","service":"vllm-evtest","instance":"vllm-evtest-0","attributes":{"reason":"Pulled"}}]`
	valid := gz(one)
	for _, c := range []struct {
		name    string
		body    []byte
		gzipped bool
		key     string
		code    int
		says    string
	}{
		{"one event", []byte(one), false, apptest.Key, http.StatusAccepted, `{"accepted":1}`},
		{"a batch", []byte(two), false, apptest.Key, http.StatusAccepted, `{"accepted":2}`},
		{"gzipped", valid, true, apptest.Key, http.StatusAccepted, `{"accepted":1}`},
		{"no key", []byte(one), false, "", http.StatusUnauthorized, "key"},
		{"not JSON", []byte("kind=scale"), false, apptest.Key, http.StatusBadRequest, "invalid event JSON"},
		{"gzip header on plain JSON", []byte(one), true, apptest.Key, http.StatusBadRequest, "invalid gzip body"},
		{"gzip cut midway", valid[:len(valid)-6], true, apptest.Key, http.StatusBadRequest, "cannot read the gzip body"},
		{"over 4 MiB once decompressed", gz(`[` + strings.Repeat(" ", 5<<20) + `]`), true, apptest.Key, http.StatusRequestEntityTooLarge, "exceeds 4194304 bytes"},
	} {
		code, body := post(c.body, c.gzipped, c.key)
		if code != c.code || !strings.Contains(body, c.says) {
			t.Errorf("%s: %d %s, want %d saying %q", c.name, code, strings.TrimSpace(body), c.code, c.says)
		}
	}
	// Only the accepted ones are stored: 1 + 2 + 1. An acknowledged
	// event is in the write-ahead log; the pipeline inserts it shortly.
	var n int64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		r, err := srv.CH.Query(context.Background(), "SELECT count() AS n FROM events WHERE service = 'vllm-evtest'")
		if err != nil {
			t.Fatal(err)
		}
		if n = r.Row(0).Int("n"); n >= 4 {
			break
		}
	}
	time.Sleep(500 * time.Millisecond) // room for a wrongly stored fifth to show
	r, err := srv.CH.Query(context.Background(), "SELECT count() AS n FROM events WHERE service = 'vllm-evtest'")
	if err != nil {
		t.Fatal(err)
	}
	if n = r.Row(0).Int("n"); n != 4 {
		t.Errorf("%d events stored, want 4", n)
	}
}
