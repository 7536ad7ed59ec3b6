package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/app/apptest"
)

// Gateway mappings are saved from the settings form and the API, read
// back by both, and a bad row saves nothing and says why.
func TestSettingsServerMappings(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	ctx := context.Background()
	project := projectOfKey(t, srv, apptest.Key)
	settings := &analysis.StoredSettings{PG: srv.PG}

	contains(t, "empty", b.page("/settings"), `id="mappings"`, `name="endpoint"`, "Servers behind a gateway")
	r := b.post("/settings/server-mappings", url.Values{"endpoint": {" LLM-Gateway.internal:443 ", ""}, "server": {"vllm-llama", ""}})
	if r.Code != http.StatusSeeOther {
		t.Fatalf("save mappings: %d\n%s", r.Code, r.Body)
	}
	contains(t, "saved", b.page("/settings?done=mappings-saved"), "Server mappings saved", `value="llm-gateway.internal:443"`, `value="vllm-llama"`)
	got, err := settings.ServerMappings(ctx, project)
	if err != nil || len(got) != 1 || got[0] != (analysis.ServerMapping{Endpoint: "llm-gateway.internal:443", Server: "vllm-llama"}) {
		t.Fatalf("stored mappings %+v %v", got, err)
	}
	for _, form := range []url.Values{
		{"endpoint": {"https://gw/v1"}, "server": {"vllm"}},
		{"endpoint": {"gw:443", "gw:443"}, "server": {"a", "b"}},
		{"endpoint": {"gw:443"}, "server": {""}},
	} {
		r := b.post("/settings/server-mappings", form)
		if r.Code != http.StatusUnprocessableEntity || !strings.Contains(r.Body, "Nothing was saved") {
			t.Errorf("mappings %v: %d, want 422 saying nothing was saved", form, r.Code)
		}
	}
	if got, _ := settings.ServerMappings(ctx, project); len(got) != 1 {
		t.Errorf("a rejected form changed the mappings: %+v", got)
	}

	// The API reads and replaces the same list.
	code, body := apiPut(t, srv, "/api/v1/settings/server-mappings", `{"mappings":[{"endpoint":"10.1.2.3","server":"10.0.0.5:8000"},{"endpoint":"gw.internal:8443","server":"sglang"}]}`)
	if code != http.StatusOK {
		t.Fatalf("PUT mappings: %d %s", code, body)
	}
	var read struct{ Mappings []analysis.ServerMapping }
	b.getJSON("/api/v1/settings/server-mappings", apptest.Key, &read)
	if len(read.Mappings) != 2 || read.Mappings[0].Endpoint != "10.1.2.3" || read.Mappings[1].Server != "sglang" {
		t.Errorf("GET mappings %+v", read.Mappings)
	}
	if code, body := apiPut(t, srv, "/api/v1/settings/server-mappings", `{"mappings":[{"endpoint":"gw:443/path","server":"x"}]}`); code != http.StatusUnprocessableEntity || !strings.Contains(body, "not a host or host:port") {
		t.Errorf("bad PUT: %d %s", code, body)
	}
	if code, _ := apiPut(t, srv, "/api/v1/settings/server-mappings", `{"mappings":`); code != http.StatusBadRequest {
		t.Errorf("malformed PUT: %d, want 400", code)
	}
	if got, _ := settings.ServerMappings(ctx, project); len(got) != 2 {
		t.Errorf("a rejected PUT changed the mappings: %+v", got)
	}
}
