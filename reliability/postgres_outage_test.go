package reliability_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/store/postgres/pgtest"
)

// proxiedDatabaseURL returns a fresh test schema's URL rewritten to go
// through a proxy the test controls.
func proxiedDatabaseURL(t *testing.T) (string, *tcpProxy) {
	t.Helper()
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	p := newTCPProxy(t, u.Host)
	u.Host = p.addr
	return u.String(), p
}

// timed runs f and fails the test if it took longer than limit: a request
// that hangs while a store is away is the bug we look for.
func timed(t *testing.T, what string, limit time.Duration, f func() httpResult) httpResult {
	t.Helper()
	t0 := time.Now()
	r := f()
	if d := time.Since(t0); d > limit {
		t.Errorf("%s took %v (limit %v): a store outage must not make requests hang", what, d.Round(time.Millisecond), limit)
	}
	return r
}

// waitFor polls cond every 200 ms until it holds or timeout passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestPostgresOutage takes PostgreSQL away under a running server — first
// refused/cut connections (a restart), then a black hole (a partition) —
// and brings it back: the server answers 503 with a clear reason while it
// is away, never hangs or crashes, and recovers without a restart.
func TestPostgresOutage(t *testing.T) {
	t.Parallel()
	dbURL, proxy := proxiedDatabaseURL(t)
	srv := startServer(t, t.TempDir(), dbURL)
	client := &http.Client{Timeout: 30 * time.Second}
	ui, otlp := "http://"+srv.UI, srv.OTLPHTTP
	t0 := time.Now().Add(-time.Minute)
	var seed uint64
	export := func() httpResult { seed++; return exportTraces(client, otlp, seed, 3, t0) }
	// A key the server has never seen is checked against PostgreSQL on
	// every use (a miss is cached 5 s at most), unlike the bootstrap key
	// that the auth cache remembers for 30 s.
	unseen := func(method, u string) func() httpResult {
		return func() httpResult {
			req, _ := http.NewRequest(method, u, strings.NewReader("{}"))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer tp_unseen_"+time.Now().Format("150405.000000000"))
			resp, err := client.Do(req)
			if err != nil {
				return httpResult{err: err}
			}
			defer resp.Body.Close()
			b := make([]byte, 4096)
			n, _ := resp.Body.Read(b)
			return httpResult{code: resp.StatusCode, body: string(b[:n])}
		}
	}
	readyz := func() httpResult { return do(client, http.MethodGet, ui+"/readyz", nil, "") }
	api := func() httpResult { return do(client, http.MethodGet, ui+"/api/v1/requests?last=1h", nil, "") }

	expect := func(what string, r httpResult, code int, bodyHas string) {
		t.Helper()
		if r.err != nil {
			t.Errorf("%s: %v", what, r.err)
			return
		}
		if r.code != code || !strings.Contains(r.body, bodyHas) {
			t.Errorf("%s: %d %s; want %d containing %q", what, r.code, tail(r.body, 300), code, bodyHas)
		}
	}
	healthy := func(phase string) {
		t.Helper()
		expect(phase+": readyz", readyz(), 200, `"postgres":"ok"`)
		expect(phase+": API with the bootstrap key", api(), 200, "")
		expect(phase+": unknown key is rejected (auth checks PostgreSQL again)", unseen(http.MethodGet, ui+"/api/v1/requests")(), 401, "invalid or revoked")
		expect(phase+": OTLP export", export(), 200, "")
	}
	healthy("before")

	for _, outage := range []struct {
		name  string
		begin func()
		limit time.Duration // how long one request may take while PostgreSQL is away
	}{
		{"down", proxy.down, 3 * time.Second},
		{"blackhole", func() { proxy.setBlackhole(true) }, 12 * time.Second},
	} {
		outage.begin()
		began := time.Now()
		// The key lookup goes first, while the pool still holds idle
		// connections that look fine: it must not wait on them forever.
		r := timed(t, outage.name+": API with an unseen key", outage.limit, unseen(http.MethodGet, ui+"/api/v1/requests"))
		expect(outage.name+": API with an unseen key", r, 503, `{"error":"cannot check the API key right now`)
		waitFor(t, outage.name+": readyz turns 503", 15*time.Second, func() bool { return readyz().code == 503 })
		expect(outage.name+": readyz", timed(t, "readyz", outage.limit, readyz), 503, "postgres")
		r = timed(t, outage.name+": OTLP export with an unseen key", outage.limit, unseen(http.MethodPost, "http://"+otlp+"/v1/traces"))
		if r.err != nil || r.code != http.StatusServiceUnavailable {
			t.Errorf("%s: OTLP export with an unseen key: %d %v; want 503 (retryable)", outage.name, r.code, r.err)
		}
		// ClickHouse is still up and the key was checked a moment ago:
		// ingest and queries carry on for recently seen keys.
		expect(outage.name+": OTLP export with the cached key", timed(t, "export", outage.limit, export), 200, "")
		if long() {
			// Past the auth cache's 30 s TTL the bootstrap key must be
			// checked again, and that cannot happen now.
			time.Sleep(time.Until(began.Add(35 * time.Second)))
			r := timed(t, outage.name+": API with an expired cached key", outage.limit, api)
			expect(outage.name+": API with an expired cached key", r, 503, "cannot check the API key")
		}
		if !srv.Alive() {
			t.Fatalf("%s: server exited while PostgreSQL was away", outage.name)
		}
		proxy.down() // also drops the black hole's stuck connections
		proxy.up(t)
		back := time.Now()
		waitFor(t, outage.name+": readyz back to 200", 20*time.Second, func() bool { return readyz().code == 200 })
		t.Logf("%s: PostgreSQL away for %v, ready again %v after it returned", outage.name,
			back.Sub(began).Round(time.Millisecond), time.Since(back).Round(time.Millisecond))
		healthy("after " + outage.name)
	}
	if strings.Contains(srv.Log(), "panic") {
		t.Errorf("server log mentions a panic:\n%s", tail(srv.Log(), 4000))
	}
	srv.Stop(t)
}

// databaseURL is a fresh test schema on the machine's PostgreSQL,
// for tests that do not take the database away.
func databaseURL(t *testing.T) string { return pgtest.URL(t) }
