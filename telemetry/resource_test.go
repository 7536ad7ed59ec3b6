package telemetry

import "testing"

func TestResourceHash(t *testing.T) {
	pod := map[string]string{"service.name": "chat", "k8s.pod.name": "chat-7d9f", "host.name": "node-3"}
	tests := []struct {
		name string
		a, b uint64
		same bool
	}{
		{"same attributes, same project", ResourceHash(1, pod), ResourceHash(1, map[string]string{"host.name": "node-3", "k8s.pod.name": "chat-7d9f", "service.name": "chat"}), true},
		{"another project", ResourceHash(1, pod), ResourceHash(2, pod), false},
		{"another value", ResourceHash(1, pod), ResourceHash(1, map[string]string{"service.name": "chat", "k8s.pod.name": "chat-7d9g", "host.name": "node-3"}), false},
		{"key/value boundary", ResourceHash(1, map[string]string{"ab": "c"}), ResourceHash(1, map[string]string{"a": "bc"}), false},
	}
	for _, tt := range tests {
		if (tt.a == tt.b) != tt.same {
			t.Errorf("%s: %d vs %d, want same=%v", tt.name, tt.a, tt.b, tt.same)
		}
	}
	if h := ResourceHash(1, nil); h != 0 {
		t.Errorf("empty resource hashes to %d, want 0 (nothing to store)", h)
	}
	// A write-ahead log written by one version is replayed by the next:
	// the hash of a resource must not change.
	if h, want := ResourceHash(1, pod), uint64(13014469510270983012); h != want {
		t.Errorf("ResourceHash changed: %d, was %d", h, want)
	}
}
