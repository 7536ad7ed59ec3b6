// Package analysistest holds the fixtures the analysis packages' tests
// share: stored request series with planted incidents.
package analysistest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// QueueIncident is a stretch of minutes (from the series start) whose
// requests wait in the server's queue.
type QueueIncident struct{ From, To int }

// ChatRequests are minutes of a chat app calling a vLLM server, 30 a
// minute, whose requests wait ~2 s in the queue during the incidents.
func ChatRequests(seed uint64, start time.Time, minutes int, incidents ...QueueIncident) []telemetry.LLMRequest {
	r := rand.New(rand.NewPCG(seed, 1))
	var out []telemetry.LLMRequest
	for m := range minutes {
		queue := 15.0
		for _, in := range incidents {
			if m >= in.From && m < in.To {
				queue = 2500
			}
		}
		for i := range 30 {
			jitter := math.Exp(0.25 * r.NormFloat64())
			q, prefill, itl := queue*jitter, 180*math.Exp(0.2*r.NormFloat64()), 22*math.Exp(0.1*r.NormFloat64())
			ttft := q + prefill + 20
			out = append(out, telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("%08x%08x", seed, m*100+i), SpanID: "c1",
				Service: "chat", ServerService: "vllm", Model: "llama", Provider: "vllm", Instance: "vllm-0",
				Start: start.Add(time.Duration(m)*time.Minute + time.Duration(i)*2*time.Second),
				TTFT:  &ttft, Queue: &q, Prefill: &prefill, Network: telemetry.Ptr(20.0), ITL: &itl, Decode: telemetry.Ptr(itl * 99),
				E2E: telemetry.Ptr(ttft + itl*99), InputTokens: telemetry.Ptr(int64(800)), OutputTokens: telemetry.Ptr(int64(100))})
		}
	}
	return out
}
