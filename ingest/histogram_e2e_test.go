package ingest_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/tokenpath/tokenpath/app/apptest"
)

// storedHistogram sums the histogram_points of one series name and
// service: observations, and per-bucket counts.
func storedHistogram(t *testing.T, srv *apptest.Server, service, name string) (count uint64, counts []uint64, rows int) {
	t.Helper()
	r, err := srv.CH.Query(context.Background(), fmt.Sprintf(
		"SELECT toString(sum(count)) AS n, toString(sumForEach(counts)) AS c, toString(count()) AS rows FROM histogram_points FINAL WHERE service = '%s' AND name = '%s'", service, name))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rows) == 0 {
		return 0, nil, 0
	}
	row := r.Row(0)
	fmt.Sscan(row.String("n"), &count)
	fmt.Sscan(row.String("rows"), &rows)
	var c []uint64
	s := row.String("c")
	for _, f := range splitArray(s) {
		var v uint64
		fmt.Sscan(f, &v)
		c = append(c, v)
	}
	return count, c, rows
}

func splitArray(s string) []string {
	if len(s) < 2 {
		return nil
	}
	var out []string
	cur := ""
	for _, ch := range s[1 : len(s)-1] {
		if ch == ',' {
			out = append(out, cur)
			cur = ""
			continue
		}
		cur += string(ch)
	}
	if cur != "" {
		out = append(out, cur)
	}
	return out
}

// An OTel SDK's cumulative histogram, exported twice over OTLP/HTTP, is
// stored as intervals whose counts add up to every observation, in the
// right buckets, under the canonical name.
func TestHistogramsOverOTLP(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	ctx := context.Background()
	exp, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpoint(srv.OTLPHTTPAddr), otlpmetrichttp.WithInsecure(),
		otlpmetrichttp.WithHeaders(map[string]string{"Authorization": "Bearer " + apptest.Key}))
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	res := resource.NewSchemaless(attribute.String("service.name", "vllm-otlp"), attribute.String("service.instance.id", "10.1.2.3:8000"))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res))
	defer mp.Shutdown(ctx)
	h, err := mp.Meter("vllm").Float64Histogram("vllm_request_queue_time_seconds",
		metric.WithExplicitBucketBoundaries(0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10))
	if err != nil {
		t.Fatal(err)
	}
	export := func() {
		rm := new(metricdata.ResourceMetrics)
		if err := reader.Collect(ctx, rm); err != nil {
			t.Fatal(err)
		}
		if err := exp.Export(ctx, rm); err != nil {
			t.Fatal(err)
		}
	}
	model := metric.WithAttributes(attribute.String("model_name", "llama"))
	for _, v := range []float64{0.1, 0.2, 0.4, 1.2} {
		h.Record(ctx, v, model)
	}
	export()
	for _, v := range []float64{3, 4, 7, 0.2} {
		h.Record(ctx, v, model)
	}
	export()
	if err := srv.Ingest.Pipeline.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	count, counts, rows := storedHistogram(t, srv, "vllm-otlp", "queue_seconds")
	want := []uint64{3, 1, 0, 0, 1, 0, 0, 2, 1, 0}
	if count != 8 || fmt.Sprint(counts) != fmt.Sprint(want) || rows != 2 {
		t.Fatalf("stored %d observations in %d rows, buckets %v; want 8 in 2 rows, %v", count, rows, counts, want)
	}
}

// A vLLM-like /metrics (client_golang, vLLM's queue-time name and buckets)
// scraped while requests finish: the stored intervals hold what happened
// after the first scrape, bucket by bucket.
func TestHistogramsFromScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	queue := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vllm:request_queue_time_seconds",
		Buckets: []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10}}, []string{"model_name", "engine"})
	reg.MustRegister(queue)
	obs := queue.WithLabelValues("llama", "0")
	obs.Observe(0.1) // before the first scrape: only seeds the series
	scrapes := make(chan struct{}, 100)
	handler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	vllm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handler.ServeHTTP(w, r)
		scrapes <- struct{}{}
	}))
	defer vllm.Close()
	srv := apptest.Start(t, apptest.Options{})
	ctx := context.Background()
	if _, err := srv.PG.Pool.Exec(ctx, `INSERT INTO scrape_targets (project_id, url, interval_s, timeout_s, service)
		SELECT id, $1, 1, 1, 'vllm-scraped' FROM projects WHERE name = 'default'`, vllm.URL+"/metrics"); err != nil {
		t.Fatal(err)
	}
	srv.Scraper.Reload()
	<-scrapes
	for _, v := range []float64{0.4, 0.4, 3, 12} {
		obs.Observe(v)
	}
	<-scrapes
	<-scrapes
	if err := srv.Ingest.Pipeline.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(vllm.URL)
	waitFor(t, 20*time.Second, func() string {
		count, counts, _ := storedHistogram(t, srv, "vllm-scraped", "queue_seconds")
		want := []uint64{0, 2, 0, 0, 0, 0, 0, 1, 0, 1}
		if count != 4 || fmt.Sprint(counts) != fmt.Sprint(want) {
			_ = srv.Ingest.Pipeline.Flush(ctx)
			return fmt.Sprintf("stored %d observations, buckets %v; want 4, %v", count, counts, want)
		}
		r, err := srv.CH.Query(ctx, "SELECT DISTINCT instance FROM histogram_points WHERE service = 'vllm-scraped'")
		if err != nil || len(r.Rows) != 1 || r.Row(0).String("instance") != u.Host {
			return fmt.Sprintf("instance %v, want the target's host:port %s (%v)", r, u.Host, err)
		}
		return ""
	})
}
