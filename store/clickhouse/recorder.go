package clickhouse

import (
	"context"
	"sync"
	"time"
)

// Recorder collects the statements run under a context carrying it
// (WithRecorder): each bound read and its duration, each insert as
// "INSERT INTO table". It rides the context, not the store, so a caller
// sees only its own statements while background workers share the store:
// the query bench times the statements a page really runs with it, and
// tests check what a read planned (TestRecorderSeesOnlyItsContext).
type Recorder struct {
	mu         sync.Mutex
	statements []Recorded
}

// Recorded is one statement a Recorder saw.
type Recorded struct {
	SQL  string // bound: it runs again as it is (Store.Query with no arguments)
	Took time.Duration
}

type recorderKey struct{}

// WithRecorder returns ctx carrying r; statements run under it (and under
// contexts derived from it) are recorded, concurrent ones included.
func WithRecorder(ctx context.Context, r *Recorder) context.Context {
	return context.WithValue(ctx, recorderKey{}, r)
}

// Statements returns what was recorded so far, in the order the
// statements finished.
func (r *Recorder) Statements() []Recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Recorded(nil), r.statements...)
}

// timed starts timing a statement for the context's recorder; call what it
// returns when the statement is done.
func timed(ctx context.Context, sql string) func() {
	r, _ := ctx.Value(recorderKey{}).(*Recorder)
	if r == nil {
		return func() {}
	}
	t0 := time.Now()
	return func() {
		took := time.Since(t0)
		r.mu.Lock()
		r.statements = append(r.statements, Recorded{SQL: sql, Took: took})
		r.mu.Unlock()
	}
}
