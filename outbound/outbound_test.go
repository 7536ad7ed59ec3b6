package outbound

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

func mustParse(t *testing.T, list string) *Policy {
	t.Helper()
	p, err := Parse(list)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParse(t *testing.T) {
	if p := mustParse(t, " , "); p != nil {
		t.Errorf("an empty list parsed to %+v, want nil (every host)", p)
	}
	p := mustParse(t, "*.SVC.cluster.local., 10.0.0.0/8, 192.168.1.7, ::1, public")
	if len(p.names) != 1 || p.names[0] != "*.svc.cluster.local" || len(p.nets) != 3 || !p.public {
		t.Errorf("parsed %+v", p)
	}
	for _, bad := range []string{"10.0.0.0/33", "http://x", "a[", "user@host", "host:80"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func TestIsPublic(t *testing.T) {
	for addr, want := range map[string]bool{
		"8.8.8.8": true, "2606:4700::1111": true, "::ffff:8.8.8.8": true,
		"127.0.0.1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.0.1": false, "169.254.169.254": false,
		"100.64.0.1": false, "0.0.0.0": false, "255.255.255.255": false, "224.0.0.1": false, "::1": false,
		"fd00::1": false, "fe80::1": false, "::ffff:127.0.0.1": false, "64:ff9b::a00:1": false, "2002:a00:1::": false,
	} {
		if got := IsPublic(netip.MustParseAddr(addr)); got != want {
			t.Errorf("IsPublic(%s) = %v, want %v", addr, got, want)
		}
	}
}

func TestCheckHost(t *testing.T) {
	ctx := context.Background()
	p := mustParse(t, "*.svc.cluster.local,hooks.slack.com,10.0.0.0/8,fd00::/8")
	for host, want := range map[string]bool{
		"vllm.ml.svc.cluster.local": true, "VLLM.ML.SVC.CLUSTER.LOCAL.": true, "hooks.slack.com": true,
		"10.9.8.7": true, "[fd00::5]": true, "::ffff:10.0.0.1": true,
		"svc.cluster.local.evil.example": false, "evil-hooks.slack.com": false, "127.0.0.1": false, "169.254.169.254": false,
		"[::1]": false, "localhost": false, // resolves to loopback only
	} {
		err := p.CheckHost(ctx, host)
		if (err == nil) != want {
			t.Errorf("CheckHost(%s) = %v, want allowed=%v", host, err, want)
		}
		if err != nil && !errors.Is(err, ErrNotAllowed) {
			t.Errorf("CheckHost(%s) = %v, want it to wrap ErrNotAllowed", host, err)
		}
	}
	if err := (*Policy)(nil).CheckURL(ctx, "http://127.0.0.1:1/metrics"); err != nil {
		t.Errorf("no list refused %v", err)
	}
	// A list of names alone resolves nothing: an unlisted name is refused
	// by name.
	if err := mustParse(t, "hooks.slack.com").CheckURL(ctx, "http://localhost:9/x"); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("unlisted name: %v", err)
	}
}

// get fetches url through the policy's client; the body on success.
func get(t *testing.T, p *Policy, url string) (string, error) {
	t.Helper()
	resp, err := p.Client(0).Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), nil
}

// TestDialChecksTheConnectedAddress: names are resolved and the address
// connected to is checked, on the first request and on redirects.
func TestDialChecksTheConnectedAddress(t *testing.T) {
	var hits atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, "metrics")
	}))
	defer target.Close()
	port := target.URL[strings.LastIndexByte(target.URL, ':'):]

	for _, tc := range []struct {
		list, url string
		allowed   bool
	}{
		{"10.0.0.0/8", target.URL, false},
		{"10.0.0.0/8", "http://localhost" + port, false}, // a name is judged by what it resolves to
		{"public", "http://localhost" + port, false},
		{"127.0.0.0/8,::1", "http://localhost" + port, true},
		{"127.0.0.1", target.URL, true},
		{"localhost", "http://localhost" + port, true}, // a listed name is trusted as it resolves
		{"", target.URL, true},
	} {
		before := hits.Load()
		body, err := get(t, mustParse(t, tc.list), tc.url)
		switch {
		case tc.allowed && (err != nil || body != "metrics"):
			t.Errorf("list %q, %s: %v, want the page", tc.list, tc.url, err)
		case !tc.allowed && !errors.Is(err, ErrNotAllowed):
			t.Errorf("list %q, %s: err %v, want ErrNotAllowed", tc.list, tc.url, err)
		case !tc.allowed && hits.Load() != before:
			t.Errorf("list %q, %s: the refused request reached the server", tc.list, tc.url)
		}
	}

	// An allowed host that redirects to one the list leaves out.
	inner, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	innerSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })}
	go func() { _ = innerSrv.Serve(inner) }()
	defer innerSrv.Close()
	redirect := httptest.NewServer(http.RedirectHandler("http://"+inner.Addr().String()+"/", http.StatusFound))
	defer redirect.Close()
	before := hits.Load()
	if _, err := get(t, mustParse(t, "127.0.0.1"), redirect.URL); !errors.Is(err, ErrNotAllowed) || hits.Load() != before {
		t.Errorf("redirect to 127.0.0.2: err %v, hits %d, want ErrNotAllowed before any request", err, hits.Load()-before)
	}
}

// TestDialDefeatsDNSRebinding: a name that resolves to an allowed address
// when the URL is saved and to loopback when it is dialled is refused at
// the dial. A real DNS server (UDP, on loopback) answers the first A
// query with 10.255.0.1 and every later one with 127.0.0.1.
func TestDialDefeatsDNSRebinding(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var aQueries atomic.Int32
	go serveRebindingDNS(pc, &aQueries)
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", pc.LocalAddr().String())
	}}

	var hits atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer target.Close()
	port := target.URL[strings.LastIndexByte(target.URL, ':'):]
	url := "http://rebind.example" + port + "/metrics"

	p := mustParse(t, "10.0.0.0/8")
	p.Resolver = resolver
	if err := p.CheckURL(context.Background(), url); err != nil {
		t.Fatalf("saving: %v (the name resolved to 10.255.0.1 then)", err)
	}
	if _, err := get(t, p, url); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("dial after the name moved to 127.0.0.1: %v, want ErrNotAllowed", err)
	}
	if hits.Load() != 0 || aQueries.Load() < 2 {
		t.Errorf("target hit %d times, %d A queries; want 0 hits after 2+ queries", hits.Load(), aQueries.Load())
	}
	if err := p.CheckURL(context.Background(), url); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("saving again once the name points at loopback: %v, want ErrNotAllowed", err)
	}
}

// serveRebindingDNS answers A queries with 10.255.0.1 the first time and
// 127.0.0.1 after; other types get an empty answer.
func serveRebindingDNS(pc net.PacketConn, aQueries *atomic.Int32) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		var parser dnsmessage.Parser
		h, err := parser.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := parser.Question()
		if err != nil {
			continue
		}
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired})
		_ = b.StartQuestions()
		_ = b.Question(q)
		_ = b.StartAnswers()
		if q.Type == dnsmessage.TypeA {
			a := [4]byte{127, 0, 0, 1}
			if aQueries.Add(1) == 1 {
				a = [4]byte{10, 255, 0, 1}
			}
			_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET}, dnsmessage.AResource{A: a})
		}
		msg, err := b.Finish()
		if err == nil {
			_, _ = pc.WriteTo(msg, from)
		}
	}
}
