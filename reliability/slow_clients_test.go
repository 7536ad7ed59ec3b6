package reliability_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// readHeaderTimeout is the servers' http.Server.ReadHeaderTimeout (app.go).
const readHeaderTimeout = 10 * time.Second

// TestSlowAndIdleClients: slowloris clients are cut off after the header
// timeout; thousands of idle connections keep memory and goroutines bounded
// while a normal request still succeeds; clients that vanish mid-body leak
// nothing.
func TestSlowAndIdleClients(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir(), databaseURL(t))
	client := &http.Client{Timeout: 10 * time.Second}
	baseGoroutines, baseRSS := goroutines(t, srv), rss(t, srv)
	t.Logf("baseline: %d goroutines, RSS %d MiB", baseGoroutines, baseRSS>>20)
	ports := map[string]string{"ui": srv.UI, "otlp_http": srv.OTLPHTTP}

	// Slowloris, meanwhile: one header byte a second on each port.
	var slow sync.WaitGroup
	for name, addr := range ports {
		slow.Add(1)
		go func() {
			defer slow.Done()
			held, err := slowloris(addr, 30*time.Second)
			switch {
			case err != nil:
				t.Errorf("slowloris on %s: %v", name, err)
			case held < readHeaderTimeout-time.Second || held > readHeaderTimeout+5*time.Second:
				t.Errorf("slowloris on %s: connection closed after %v; want about %v (ReadHeaderTimeout)", name, held.Round(time.Millisecond), readHeaderTimeout)
			default:
				t.Logf("slowloris on %s: closed by the server after %v", name, held.Round(time.Millisecond))
			}
		}()
	}

	idle := pick(2000, 10000)
	for name, addr := range ports {
		conns := make([]net.Conn, 0, idle)
		for range idle {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatalf("%s: dial idle connection %d: %v", name, len(conns)+1, err)
			}
			conns = append(conns, c)
		}
		time.Sleep(500 * time.Millisecond) // let the server accept them all
		g, rss := goroutines(t, srv), rss(t, srv)
		t0 := time.Now()
		r := exportTraces(client, srv.OTLPHTTP, uint64(len(name)), 3, time.Now().Add(-time.Minute))
		took := time.Since(t0)
		t.Logf("%s: %d idle connections: %d goroutines, RSS %d MiB; an export meanwhile took %v", name, idle, g, rss>>20, took.Round(time.Millisecond))
		if r.err != nil || r.code != http.StatusOK {
			t.Errorf("%s: export with %d idle connections open: %d %v", name, idle, r.code, r.err)
		}
		if g > baseGoroutines+idle+500 {
			t.Errorf("%s: %d goroutines with %d idle connections (baseline %d): more than one per connection", name, g, idle, baseGoroutines)
		}
		// A served connection costs a goroutine stack and two 4 KiB buffers.
		if limit := baseRSS + int64(idle)*64<<10 + 256<<20; rss > limit {
			t.Errorf("%s: RSS %d MiB with %d idle connections; want below %d MiB", name, rss>>20, idle, limit>>20)
		}
		// The server, not the client, must end them: ReadHeaderTimeout.
		closed := closedWithin(conns, readHeaderTimeout+10*time.Second)
		if closed != len(conns) {
			t.Errorf("%s: server closed %d of %d idle connections within %v", name, closed, len(conns), readHeaderTimeout+10*time.Second)
		}
		for _, c := range conns {
			c.Close()
		}
	}
	slow.Wait()

	// Clients that announce a large body, send a little and vanish.
	for i := range 200 {
		c, err := net.DialTimeout("tcp", srv.OTLPHTTP, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /v1/traces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/x-protobuf\r\nContent-Length: 1000000\r\n\r\n", key)
		_, _ = c.Write(make([]byte, 1000+i))
		c.Close()
	}
	var g int
	waitFor(t, "goroutines back near the baseline", 20*time.Second, func() bool {
		g = goroutines(t, srv)
		return g <= baseGoroutines+50
	})
	t.Logf("after idle, slow and vanishing clients: %d goroutines (baseline %d), RSS %d MiB", g, baseGoroutines, rss(t, srv)>>20)
	if r := do(client, http.MethodGet, "http://"+srv.UI+"/readyz", nil, ""); r.code != http.StatusOK {
		t.Errorf("readyz after the attack: %d %s", r.code, r.body)
	}
	srv.Stop(t)
}

// slowloris sends a request header one byte a second and returns how long
// the server kept the connection open.
func slowloris(addr string, limit time.Duration) (time.Duration, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	closed := make(chan time.Time, 1)
	go func() {
		_, _ = io.Copy(io.Discard, c) // returns when the server closes
		closed <- time.Now()
	}()
	header := []byte("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + string(make([]byte, 64)))
	t0 := time.Now()
	for i := 0; time.Since(t0) < limit; i++ {
		select {
		case at := <-closed:
			return at.Sub(t0), nil
		default:
		}
		if _, err := c.Write(header[i%len(header) : i%len(header)+1]); err != nil {
			return time.Since(t0), nil
		}
		select {
		case at := <-closed:
			return at.Sub(t0), nil
		case <-time.After(time.Second):
		}
	}
	return 0, fmt.Errorf("connection still open after %v", limit)
}

// closedWithin waits until the peer has closed every connection or the
// time is up, and returns how many it closed.
func closedWithin(conns []net.Conn, d time.Duration) int {
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(deadline)
			_, err := c.Read(make([]byte, 1))
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return
			}
			mu.Lock()
			n++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return n
}
