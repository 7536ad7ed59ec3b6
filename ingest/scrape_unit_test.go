package ingest

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseStaticTarget(t *testing.T) {
	tests := []struct {
		entry string
		want  ScrapeTarget
	}{
		{"http://10.0.0.7:8000/metrics", ScrapeTarget{URL: "http://10.0.0.7:8000/metrics"}},
		{" vllm = http://10.0.0.7:8000/metrics ", ScrapeTarget{Service: "vllm", URL: "http://10.0.0.7:8000/metrics"}},
		// '=' inside the URL's query is not a service separator.
		{"http://h:9400/metrics?match[]=vllm", ScrapeTarget{URL: "http://h:9400/metrics?match[]=vllm"}},
		{"sglang=http://h/metrics?a=b", ScrapeTarget{Service: "sglang", URL: "http://h/metrics?a=b"}},
	}
	for _, tt := range tests {
		if got := ParseStaticTarget(tt.entry); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseStaticTarget(%q) = %+v, want %+v", tt.entry, got, tt.want)
		}
	}
}

func TestNewScrapeJob(t *testing.T) {
	tests := []struct {
		name                             string
		in                               ScrapeTarget
		url, instance, service, redacted string
		interval, timeout                time.Duration
		err                              string
	}{
		{name: "defaults", in: ScrapeTarget{URL: "http://vllm-0.vllm:8000/metrics"},
			url: "http://vllm-0.vllm:8000/metrics", instance: "vllm-0.vllm:8000", service: "vllm-0.vllm", redacted: "http://vllm-0.vllm:8000/metrics",
			interval: 15 * time.Second, timeout: 10 * time.Second},
		{name: "default port and path", in: ScrapeTarget{URL: "https://tgi.example.com", Service: "tgi"},
			url: "https://tgi.example.com/metrics", instance: "tgi.example.com:443", service: "tgi", redacted: "https://tgi.example.com/metrics",
			interval: 15 * time.Second, timeout: 10 * time.Second},
		{name: "timeout clamped to interval", in: ScrapeTarget{URL: "http://h:80/m", Interval: 5 * time.Second, Timeout: 9 * time.Second},
			url: "http://h:80/m", instance: "h:80", service: "h", redacted: "http://h:80/m", interval: 5 * time.Second, timeout: 5 * time.Second},
		{name: "password never shown", in: ScrapeTarget{URL: "http://scraper:s3cret@h:9090/metrics"},
			url: "http://scraper:s3cret@h:9090/metrics", instance: "h:9090", service: "h", redacted: "http://scraper:xxxxx@h:9090/metrics",
			interval: 15 * time.Second, timeout: 10 * time.Second},
		{name: "file scheme", in: ScrapeTarget{URL: "file:///etc/passwd"}, redacted: "file:///etc/passwd", err: "only http and https"},
		{name: "no scheme", in: ScrapeTarget{URL: "10.0.0.7:8000/metrics"}, err: "not a valid URL"},
		{name: "no host", in: ScrapeTarget{URL: "http:///metrics"}, err: "no host"},
		{name: "unparsable with password", in: ScrapeTarget{URL: "http://u:s3cret@h:99999999999/%zz"}, redacted: "http://xxxxx@h:99999999999/%zz", err: "not a valid URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := newScrapeJob(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				if strings.Contains(err.Error(), "s3cret") || strings.Contains(j.redacted, "s3cret") {
					t.Errorf("password leaked: %v / %s", err, j.redacted)
				}
				if tt.redacted != "" && j.redacted != tt.redacted {
					t.Errorf("redacted = %q, want %q", j.redacted, tt.redacted)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := []any{j.URL, j.instance, j.Service, j.redacted, j.Interval, j.Timeout}
			want := []any{tt.url, tt.instance, tt.service, tt.redacted, tt.interval, tt.timeout}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("job = %v, want %v", got, want)
			}
		})
	}
}

func TestWithTargetLabels(t *testing.T) {
	got := withTargetLabels(map[string]string{"model_name": "llama", "cluster": "a"}, map[string]string{"cluster": "eu-1", "team": "ml"})
	want := map[string]string{"model_name": "llama", "cluster": "eu-1", "exported_cluster": "a", "team": "ml"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("labels = %v, want %v", got, want)
	}
	if got := withTargetLabels(nil, map[string]string{"a": "b"}); !reflect.DeepEqual(got, map[string]string{"a": "b"}) {
		t.Errorf("labels on a bare series = %v", got)
	}
}

// TestScrapeRefuses covers the scrapes that must fail with a clear reason
// rather than store something wrong or hold memory.
func TestScrapeRefuses(t *testing.T) {
	big := strings.Repeat("vllm:num_requests_running{engine=\"0\"} 1\n", 2000) // ~80 KB
	mux := http.NewServeMux()
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, big) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	mux.HandleFunc("/proto", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited")
		_, _ = w.Write([]byte{0x0a, 0x01})
	})
	mux.HandleFunc("/garbage", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "<html>login</html>\n") })
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("X-Prometheus-Scrape-Timeout-Seconds"); got != "1" {
			http.Error(w, "timeout header "+got, http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, "vllm:num_requests_waiting 3\n")
	})
	ts := httptest.NewServer(mux)
	defer ts.Close()
	s := &Scraper{MaxBodyBytes: 16 << 10, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s.init()
	tests := []struct{ path, err string }{
		{"/big", "larger than 16384 bytes"},
		{"/slow", "no answer within the 1s scrape timeout"},
		{"/proto", "not a Prometheus text exposition"},
		{"/garbage", "not a Prometheus text exposition"},
		{"/missing", "HTTP 4xx"},
		{"/ok", ""},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			j, err := newScrapeJob(ScrapeTarget{ProjectID: 3, URL: ts.URL + tt.path, Timeout: time.Second, Service: "vllm"})
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			scraped, err := s.scrape(context.Background(), j, t0)
			pts := scraped.Points
			if time.Since(t0) > 3*time.Second {
				t.Errorf("scrape took %s, the timeout is 1s", time.Since(t0))
			}
			if tt.err == "" {
				if err != nil || len(pts) != 1 || pts[0].Name != "requests_waiting" || pts[0].Value != 3 || pts[0].ProjectID != 3 || !pts[0].Time.Equal(t0) {
					t.Fatalf("points %+v, err %v", pts, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v, want %q", err, tt.err)
			}
		})
	}
}

// A failed scrape shows a class of failure: neither the target's reply nor
// its URL (password, token in the query) reaches the error, the debug log
// or the self-metrics.
func TestScrapeErrorsEchoNoReply(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/admin", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "<html>internal-admin-secret</html>\n")
	})
	mux.HandleFunc("/gone", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "secret-404", http.StatusNotFound) })
	ts := httptest.NewServer(mux)
	defer ts.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	p, err := NewPipeline(filepath.Join(t.TempDir(), "wal"), nil, PipelineConfig{}, QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s := &Scraper{Receiver: &Receiver{Pipeline: p, Log: QuietLog}, Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	s.init()
	host := strings.TrimPrefix(ts.URL, "http://")
	for i, tt := range []struct{ url, class string }{
		{"http://scraper:pw@" + host + "/admin?api_key=s3cr3t", "not a Prometheus text exposition"},
		{"http://scraper:pw@" + host + "/gone?api_key=s3cr3t", "the target answered HTTP 4xx"},
		{"http://scraper:pw@" + closedAddr + "/metrics?api_key=s3cr3t", "cannot reach the target"},
	} {
		j, err := newScrapeJob(ScrapeTarget{ProjectID: 3, URL: tt.url, Timeout: 2 * time.Second, Service: "vllm"})
		if err != nil {
			t.Fatal(err)
		}
		j.name = "static-" + strconv.Itoa(i)
		_, err = s.scrape(context.Background(), j, time.Now())
		if err == nil || !strings.Contains(err.Error(), tt.class) {
			t.Errorf("%s: %v, want %q", tt.url, err, tt.class)
		}
		s.scrapeAndRecord(context.Background(), j)
		for _, leak := range []string{"s3cr3t", "scraper", "pw@", "internal-admin-secret", "secret-404"} {
			if err != nil && strings.Contains(err.Error(), leak) {
				t.Errorf("%s: the error %q shows %q", tt.url, err, leak)
			}
		}
	}
	var metrics strings.Builder
	families, err := p.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		metrics.WriteString(f.String())
	}
	for _, leak := range []string{"s3cr3t", "scraper", "pw@", "internal-admin-secret", "secret-404", "/metrics", "/admin"} {
		if strings.Contains(logs.String(), leak) {
			t.Errorf("the log shows %q:\n%s", leak, logs.String())
		}
		if strings.Contains(metrics.String(), leak) {
			t.Errorf("the self-metrics show %q", leak)
		}
	}
	// Labels are read from the families, not their text form: protobuf's
	// text output varies its spacing on purpose.
	labelled := false
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labelled = labelled || (l.GetName() == "target" && l.GetValue() == "static-2")
			}
		}
	}
	if !labelled || !strings.Contains(logs.String(), "target=static-2") {
		t.Errorf("the failed targets are not named by id in the metrics and log:\n%s", logs.String())
	}
}
