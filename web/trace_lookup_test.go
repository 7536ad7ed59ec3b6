package web_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// The header's trace ID box opens a trace pasted as people paste them
// (any case, spaces around, a 64-bit ID's 16 digits) and says what a trace
// ID looks like when it is not one.
func TestOpenTraceByID(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	project := projectOfKey(t, srv, apptest.Key)
	long := "0af7651916cd43dd8448eb211c80319c"
	short := "00000000000000008448eb211c80319c" // a 64-bit ID as OTLP pads it
	start := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
	var spans []telemetry.Span
	for _, id := range []string{long, short} {
		spans = append(spans, telemetry.Span{ProjectID: project, TraceID: id, SpanID: strings.Repeat("1", 16), Service: "rag-chat",
			Name: "POST /chat", Kind: "server", Start: start, End: start.Add(time.Second), StatusCode: "ok"})
	}
	if err := srv.CH.Insert(context.Background(), clickhouse.SpansBatch(spans)); err != nil {
		t.Fatal(err)
	}

	if !strings.Contains(b.page("/"), `action="/trace"`) {
		t.Error("the header has no trace ID box")
	}
	for typed, want := range map[string]string{
		"  " + strings.ToUpper(long) + " ": long,
		"8448eb211c80319c":                 short,
	} {
		r := b.get("/trace?" + url.Values{"id": {typed}}.Encode())
		if r.Code != http.StatusSeeOther || r.Header.Get("Location") != "/requests/"+want {
			t.Errorf("id %q: %d → %q, want 303 → /requests/%s", typed, r.Code, r.Header.Get("Location"), want)
			continue
		}
		if page := b.page("/requests/" + want); !strings.Contains(page, want) || !strings.Contains(page, "POST /chat") {
			t.Errorf("the trace page of %s lacks its ID or root span", want)
		}
	}
	for _, bad := range []string{"", "not-a-trace", strings.Repeat("0", 32), long + "00"} {
		r := b.get("/trace?" + url.Values{"id": {bad}}.Encode())
		if r.Code != http.StatusBadRequest || !strings.Contains(html.UnescapeString(r.Body), "a trace ID is 32 hexadecimal digits") ||
			strings.Contains(r.Body, "Something went wrong") {
			t.Errorf("id %q: %d, want 400 saying what a trace ID is:\n%.300s", bad, r.Code, r.Body)
		}
	}
	if r := newBrowser(t, srv).get("/trace?id=" + long); r.Code != http.StatusSeeOther || !strings.HasPrefix(r.Header.Get("Location"), "/login") {
		t.Errorf("logged out: %d → %q, want the login page", r.Code, r.Header.Get("Location"))
	}
}
