package demo

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrapeOnce GETs the fake vLLM's /metrics.
func scrapeOnce(t *testing.T, srv *MetricsOnlyServer) (int, string) {
	t.Helper()
	resp, err := http.Get(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// queueSample is the page's vllm:request_queue_time_seconds count and the
// time it is stamped with (zero when unstamped).
func queueSample(t *testing.T, page string) (float64, time.Time) {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(page))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	f := fams["vllm:request_queue_time_seconds"]
	if f == nil || len(f.Metric) != 1 {
		t.Fatalf("no queue-time histogram in:\n%.400s", page)
	}
	m := f.Metric[0]
	var at time.Time
	if m.TimestampMs != nil {
		at = time.UnixMilli(m.GetTimestampMs()).UTC()
	}
	return float64(m.GetHistogram().GetSampleCount()), at
}

// The metrics-only vLLM: doc-summarizer's calls carry no server span and
// name the fake server's address; its /metrics replays the backfill's
// snapshots in time order, each stamped, answers 503 while the history is
// still being made, then serves the current state unstamped. The batch
// surge shows in the queue-time histogram, not in any span.
func TestMetricsOnlyServerReplaysThenServesLive(t *testing.T) {
	srv, err := StartMetricsOnlyServer(summaryModel)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	from, to := base, base.Add(30*time.Minute)
	phases := []Phase{{Incident: BatchSurge, From: base.Add(20 * time.Minute), To: base.Add(24 * time.Minute)}}
	s := newSim(Config{Seed: 7}, from, phases)
	s.addSummarizer(srv, to)
	if code, _ := scrapeOnce(t, srv); code != http.StatusServiceUnavailable {
		t.Errorf("a scrape before the history is made answered %d, want 503", code)
	}
	s.stopAt = to
	s.advance(to)
	if n := srv.Replaying(); n != replayScrapes(from, to) || n != 59 {
		t.Errorf("%d snapshots for 30 min, want one every 30 s (59), as replayScrapes says (%d)", n, replayScrapes(from, to))
	}
	srv.historyDone()
	// doc-summarizer's spans wait for the scrapes to reach their time.
	if held := s.summary.release(); len(held) != 0 {
		t.Errorf("%d spans released before any scrape", len(held))
	}
	_, page := scrapeOnce(t, srv)
	lastCount, last := queueSample(t, page)
	spans := s.summary.release()
	for _, sp := range spans {
		if sp.End.After(last) {
			t.Fatalf("span ending %v released when the scrapes had read up to %v", sp.End, last)
		}
	}
	if len(spans) == 0 {
		t.Errorf("no span released once the scrapes read %v", last)
	}
	for srv.Replaying() > 0 {
		code, page := scrapeOnce(t, srv)
		count, at := queueSample(t, page)
		if code != http.StatusOK || at.IsZero() || !at.After(last) || at.After(to) || count < lastCount {
			t.Fatalf("replayed snapshot %d at %v after %v (count %v after %v)", code, at, last, count, lastCount)
		}
		last, lastCount = at, count
	}
	code, page := scrapeOnce(t, srv)
	if count, at := queueSample(t, page); code != http.StatusOK || !at.IsZero() || count < lastCount {
		t.Errorf("after the replay: %d, stamped %v, count %v; want the current state, unstamped", code, at, count)
	}

	s.drain()
	sc := s.take()
	sc.Spans = append(sc.Spans, append(spans, s.summary.release()...)...)
	if len(s.summary.held) != 0 {
		t.Errorf("%d spans still held after the replay", len(s.summary.held))
	}
	host, port := srv.Addr()
	var healthy, surge []float64
	for _, r := range sc.Requests {
		if r.Service != summaryService {
			continue
		}
		if !r.MetricsOnly || r.Want().ServerService != "" || r.Want().Queue != nil {
			t.Fatalf("doc-summarizer call %+v: want a metrics-only call without a server split", r)
		}
		if r.Incident == BatchSurge {
			surge = append(surge, ms(r.Queue))
		} else if r.Start.Before(phases[0].From) {
			healthy = append(healthy, ms(r.Queue))
		}
	}
	calls := 0
	for _, sp := range sc.Spans {
		if sp.Resource.Service == summaryServer {
			t.Fatalf("a span of %s: its tracing is off", summaryServer)
		}
		if sp.Resource.Service == summaryService && sp.Kind == KindClient {
			calls++
			a, _ := sp.Attr("server.address")
			p, _ := sp.Attr("server.port")
			if a != host || p != int64(port) {
				t.Fatalf("client span names %v:%v, want the fake server's %s", a, p, net.JoinHostPort(host, strconv.Itoa(port)))
			}
		}
	}
	if calls != len(healthy)+len(surge)+countAfter(sc, phases[0].To) {
		t.Errorf("%d doc-summarizer client spans sent for %d calls", calls, len(healthy)+len(surge)+countAfter(sc, phases[0].To))
	}
	// ~0.8 calls a second; the surge's queue is the model's (KV full).
	if len(healthy) < 600 || percentile(healthy, .95) > 300 || percentile(surge, .95) < 5000 {
		t.Errorf("doc-summarizer queue p95 %.0f ms healthy (%d calls) → %.0f ms in the surge; want within vLLM's first bucket, then seconds",
			percentile(healthy, .95), len(healthy), percentile(surge, .95))
	}
}

// countAfter counts doc-summarizer's healthy calls from t on.
func countAfter(sc *Scenario, t time.Time) int {
	n := 0
	for _, r := range sc.Requests {
		if r.Service == summaryService && r.Incident != BatchSurge && !r.Start.Before(t) {
			n++
		}
	}
	return n
}
