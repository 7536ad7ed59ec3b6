package ingest_test

import (
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/config"
)

// TestJSProducersCollectorRelay sends every recorded library's exports as
// the OpenTelemetry Collector relays them, with the Collector's own wire
// model (go.opentelemetry.io/collector/pdata): each OTLP/JSON export is
// decoded as its OTLP receiver does, the exports of a library are merged
// into one request as its batch processor merges resource spans, and the
// request is encoded as OTLP/protobuf as its OTLP/HTTP exporter sends it.
// Tokenpath must report the same as for the direct exports (jsWant): the
// relay changes the encoding and the batching, never what was sent.
func TestJSProducersCollectorRelay(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{Configure: func(c *config.Config) { c.RetentionDays = 3650 }})
	type fixture struct {
		prov        jsProvenance
		spans       int
		first, last time.Time
	}
	fixtures := map[string]fixture{}
	for _, lib := range sortedLibraries() {
		prov, exports := readFixture(t, lib)
		batch := ptrace.NewTraces()
		for _, e := range exports {
			td, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces(e)
			if err != nil {
				t.Fatalf("%s: the Collector's OTLP/JSON decoder refuses an export: %v", lib, err)
			}
			td.ResourceSpans().MoveAndAppendTo(batch.ResourceSpans())
		}
		body, err := ptraceotlp.NewExportRequestFromTraces(batch).MarshalProto()
		if err != nil {
			t.Fatal(err)
		}
		postOTLP(t, srv, body, "application/x-protobuf")
		f := fixture{prov: prov}
		f.spans, f.first, f.last = exportSpans(t, exports)
		if got := batch.SpanCount(); got != f.spans {
			t.Fatalf("%s: the relayed batch holds %d spans, the exports %d", lib, got, f.spans)
		}
		fixtures[lib] = f
	}
	for _, lib := range sortedLibraries() {
		t.Run(lib, func(t *testing.T) {
			f := fixtures[lib]
			waitAssembled(t, srv, f.prov.Service, f.spans)
			checkRequests(t, srv, f.prov, apiRequests(t, srv, f.prov.Service, f.first.Add(-time.Minute), f.last.Add(time.Minute)))
		})
	}
}
