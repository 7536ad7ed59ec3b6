package web

import (
	"testing"

	"github.com/tokenpath/tokenpath/analysis"
)

// A service row counts its requests with the noun's right number.
func TestServiceRowCountsRequests(t *testing.T) {
	for n, want := range map[int]string{1: "1 request", 2: "2 requests", 5526: "5\u202f526 requests"} {
		if got := serviceRow(analysis.ServiceOverview{Service: "rag-chat", Requests: n}, nil, nil, nil).Requests; got != want {
			t.Errorf("%d requests: %q, want %q", n, got, want)
		}
	}
}
