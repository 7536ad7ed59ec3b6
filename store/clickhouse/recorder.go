package clickhouse

import (
	"context"
	"fmt"
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
	// Rows is how many rows it read (or an insert wrote).
	Rows int
	// rerun runs the statement again through the reader that ran it (a
	// typed decoder's is much faster than Store.Query's generic one);
	// nil for an insert.
	rerun func(context.Context) (rows int, err error)
}

// Rerun runs a recorded read again alone, through the reader the page
// used, and returns how many rows it read.
func (r Recorded) Rerun(ctx context.Context) (int, error) {
	if r.rerun == nil {
		return 0, fmt.Errorf("%.40s… cannot be run again", r.SQL)
	}
	return r.rerun(ctx)
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

// timed starts timing a statement for the context's recorder (nil
// without one: its methods do nothing then). rerun runs it again
// (Recorded.Rerun).
func timed(ctx context.Context, sql string, rerun func(context.Context) (int, error)) *timing {
	r, _ := ctx.Value(recorderKey{}).(*Recorder)
	if r == nil {
		return nil
	}
	return &timing{rec: r, st: Recorded{SQL: sql, rerun: rerun}, t0: time.Now()}
}

// timing is one statement being timed.
type timing struct {
	rec *Recorder
	st  Recorded
	t0  time.Time
}

// ran ends the statement's time where what follows is the caller's work,
// not the statement's (a typed reader's batches handed on).
func (t *timing) ran() {
	if t != nil && t.st.Took == 0 {
		t.st.Took = max(time.Since(t.t0), time.Nanosecond)
	}
}

// done records the statement with the rows it read (or wrote).
func (t *timing) done(rows int) {
	if t == nil {
		return
	}
	t.ran()
	t.st.Rows = rows
	t.rec.mu.Lock()
	t.rec.statements = append(t.rec.statements, t.st)
	t.rec.mu.Unlock()
}
