package reliability_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/app/apptest/otlptest"
)

// answer is how the server answered one export.
type answer struct {
	outcome string // "200", "503 Retry-After", "grpc ResourceExhausted", "transport error", …
	acked   bool
	body    string
}

// httpAnswer classifies an OTLP/HTTP export's result.
func httpAnswer(r httpResult) answer {
	switch {
	case r.err != nil:
		return answer{outcome: "transport error", body: r.err.Error()}
	case r.code == 200:
		return answer{outcome: "200", acked: true}
	}
	o := strconv.Itoa(r.code)
	if r.retryAfter != "" {
		o += " Retry-After"
	}
	// A protobuf google.rpc.Status: keep the message, drop the framing.
	body := strings.Map(func(r rune) rune {
		if r < ' ' || r == utf8.RuneError {
			return -1
		}
		return r
	}, r.body)
	return answer{outcome: o, body: body}
}

// grpcAnswer classifies an OTLP/gRPC export's result.
func grpcAnswer(code codes.Code, err error) answer {
	a := answer{outcome: "grpc " + code.String(), acked: code == codes.OK}
	if err != nil {
		a.body = err.Error()
	}
	return a
}

// exportLoad runs OTLP exporters in the background, each export a new
// trace of spansPer spans, and tallies the answers per phase of the test,
// remembering every acknowledged trace.
type exportLoad struct {
	spansPer int
	seed     atomic.Uint64
	paused   atomic.Bool
	wg       sync.WaitGroup
	cancel   context.CancelFunc

	mu      sync.Mutex
	phase   string
	order   []string                  // phases in the order they began
	acked   []string                  // hex trace ids
	tally   map[string]map[string]int // phase → outcome → exports
	example map[string]string         // phase + outcome → one answer body
}

// startLoad runs workers exporters, each sending one export per interval
// (back to back when interval is 0) through send until stop.
func startLoad(spansPer, workers int, interval time.Duration, send func(seed uint64) answer) *exportLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &exportLoad{spansPer: spansPer, cancel: cancel, phase: "start", order: []string{"start"},
		tally: map[string]map[string]int{}, example: map[string]string{}}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			var tick <-chan time.Time
			if interval > 0 {
				tk := time.NewTicker(interval)
				defer tk.Stop()
				tick = tk.C
			}
			for ctx.Err() == nil {
				if tick != nil {
					select {
					case <-ctx.Done():
						return
					case <-tick:
					}
				}
				if l.paused.Load() {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				seed := l.seed.Add(1)
				phase := l.currentPhase()
				l.record(phase, seed, send(seed))
			}
		}()
	}
	return l
}

func (l *exportLoad) currentPhase() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.phase
}

// setPhase tags the exports sent from now on.
func (l *exportLoad) setPhase(p string) {
	l.mu.Lock()
	l.phase = p
	if !slices.Contains(l.order, p) {
		l.order = append(l.order, p)
	}
	l.mu.Unlock()
}

func (l *exportLoad) record(phase string, seed uint64, a answer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a.acked {
		l.acked = append(l.acked, otlptest.TraceHex(seed))
	}
	if l.tally[phase] == nil {
		l.tally[phase] = map[string]int{}
	}
	l.tally[phase][a.outcome]++
	if _, ok := l.example[phase+" "+a.outcome]; !ok && a.body != "" {
		l.example[phase+" "+a.outcome] = a.body
	}
}

// pause holds new exports (those in flight finish) until resume.
func (l *exportLoad) pause()  { l.paused.Store(true) }
func (l *exportLoad) resume() { l.paused.Store(false) }

// stop ends the load and waits for exports in flight.
func (l *exportLoad) stop() {
	l.cancel()
	l.wg.Wait()
}

// count is the number of exports of phase answered with outcome.
func (l *exportLoad) count(phase, outcome string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tally[phase][outcome]
}

// outcomes lists the outcomes seen in phase, with counts, for messages.
func (l *exportLoad) outcomes(phase string) map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.tally[phase])
}

// exampleBody is one answer body of phase with outcome ("" if none).
func (l *exportLoad) exampleBody(phase, outcome string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.example[phase+" "+outcome]
}

// ackedIDs are the trace ids of every acknowledged export so far.
func (l *exportLoad) ackedIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.acked)
}

// sent is the number of exports attempted so far.
func (l *exportLoad) sent() int { return int(l.seed.Load()) }

// checkStored reads the stopped server's data dir and fails unless every
// acknowledged export is stored exactly once, and nothing beyond what was
// sent; it reports whether all was well.
func (l *exportLoad) checkStored(t *testing.T, dataDir string, spansPerExport int) bool {
	t.Helper()
	acked := l.ackedIDs()
	stored := apptest.StoredTraces(t, dataDir)
	lost, wrong := apptest.CheckAcknowledged(stored, acked, spansPerExport)
	if len(lost) > 0 || len(wrong) > 0 {
		t.Errorf("%d of %d acknowledged exports lost (e.g. %v), %d stored wrong (e.g. %v)",
			len(lost), len(acked), lost[:min(len(lost), 5)], len(wrong), wrong[:min(len(wrong), 5)])
	}
	if len(stored) > l.sent() {
		t.Errorf("%d traces stored, only %d sent", len(stored), l.sent())
	}
	return len(lost) == 0 && len(wrong) == 0
}

// summary is one line per phase, in order: "full: 200×12, 503 Retry-After×40".
func (l *exportLoad) summary() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var lines []string
	for _, phase := range l.order {
		if l.tally[phase] == nil {
			continue
		}
		var parts []string
		for _, o := range slices.Sorted(maps.Keys(l.tally[phase])) {
			parts = append(parts, fmt.Sprintf("%s×%d", o, l.tally[phase][o]))
		}
		lines = append(lines, phase+": "+strings.Join(parts, ", "))
	}
	return lines
}
