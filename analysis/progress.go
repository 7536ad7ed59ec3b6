package analysis

import (
	"context"
	"time"
)

// BehindAfter is how far assembly may trail the spans received before
// pages and share snapshots say so: 2–3 s is normal, and passes under
// load take seconds.
const BehindAfter = time.Minute

// Progress is how far assembly has come: an Assembler's watermark, read
// from PostgreSQL whichever node assembles.
type Progress interface {
	Watermark(ctx context.Context) (wm time.Time, ok bool, err error)
}

// AssemblyBehind returns p's watermark and whether it trails now by
// BehindAfter or more, for the pages' notice and share snapshots alike. A
// nil p, or a watermark it cannot read, says nothing: the stores' health
// is /readyz's to report, and a page should not fail over it.
func AssemblyBehind(ctx context.Context, p Progress, now time.Time) (time.Time, bool) {
	if p == nil {
		return time.Time{}, false
	}
	wm, ok, err := p.Watermark(ctx)
	return wm, err == nil && ok && now.Sub(wm) >= BehindAfter
}
