package analysis

import (
	"strings"
	"testing"
)

// Mappings are cleaned as saved: lower-case endpoints, sorted, empty rows
// dropped; a URL, a duplicate or a half row is refused with every reason.
func TestCleanServerMappings(t *testing.T) {
	got, err := CleanServerMappings([]ServerMapping{{Endpoint: " GW.internal:443", Server: "vllm "}, {}, {Endpoint: "10.0.0.9", Server: "10.0.0.5:8000"}, {Endpoint: "[::1]:8000", Server: "tgi"}})
	if err != nil || len(got) != 3 || got[0].Endpoint != "10.0.0.9" || got[2] != (ServerMapping{Endpoint: "gw.internal:443", Server: "vllm"}) {
		t.Fatalf("got %+v %v", got, err)
	}
	_, err = CleanServerMappings([]ServerMapping{{Endpoint: "http://gw", Server: "a"}, {Endpoint: "gw:1", Server: "a"}, {Endpoint: "gw:1", Server: "b"}, {Endpoint: "", Server: "c"}, {Endpoint: "gw:2"}})
	for _, want := range []string{`"http://gw" is not a host`, "gw:1 is mapped twice", `"c" has no address`, "gw:2 has no metrics server"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to say %q", err, want)
		}
	}
}

// A mapping names a server by its service or by one of its instances; a
// bare host matches calls to any of its ports; other addresses tie nothing.
func TestMappedServers(t *testing.T) {
	series := map[string][]serverInstance{"vllm-a": {{name: "10.0.0.5:8000"}}, "vllm-b": {{name: "10.0.0.6:8000"}}}
	mappings := []ServerMapping{{Endpoint: "gw.internal:443", Server: "vllm-a"}, {Endpoint: "edge", Server: "10.0.0.6:8000"}, {Endpoint: "other:1", Server: "vllm-a"}}
	got := mappedServers(mappings, []string{"gw.internal:443", "edge:8443", "unmapped:80"}, series)
	if len(got) != 2 || got["vllm-a"] != "gw.internal:443" || got["vllm-b"] != "edge:8443" {
		t.Fatalf("mapped %v", got)
	}
	if got := mappedServers(mappings, []string{"gw.internal:444"}, series); len(got) != 0 {
		t.Fatalf("another port mapped: %v", got)
	}
}
