package analysis

import (
	"context"
	"time"

	"github.com/tokenpath/tokenpath/store/postgres"
)

// Run detects until ctx is done, one node of a cluster at a time: a pass
// at once on start, then whenever the assembler's watermark has crossed a
// minute since the last pass, and at least every Interval. After a restart
// the assembler catches up on what arrived meanwhile; a pass per minute it
// assembles closes an episode that ended as soon as its healthy minutes
// are in, instead of a tick later (TestEpisodeDetectorRunsAsAssemblyAdvances).
// Steady traffic still gets one pass a minute; a backlog, one per Poll.
func (d *EpisodeDetector) Run(ctx context.Context) {
	d.defaults()
	t := time.NewTicker(d.Poll)
	defer t.Stop()
	var last, mark time.Time
	for {
		if due, m := d.due(ctx, last, mark); due {
			if _, err := d.PG.TryLock(ctx, postgres.LockEpisodes, d.Detect); err != nil && ctx.Err() == nil {
				d.Log.Error("detecting episodes failed; will retry", "err", err)
			}
			last, mark = d.Now(), m
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// due says whether a pass should run, given when the last one ran and the
// watermark's minute it saw; mark is the watermark's minute now (the last
// one when Progress is not set or cannot be read).
func (d *EpisodeDetector) due(ctx context.Context, last, seen time.Time) (bool, time.Time) {
	mark := seen
	if d.Progress != nil {
		if wm, ok, err := d.Progress.Watermark(ctx); err == nil && ok {
			mark = wm.Truncate(time.Minute)
		}
	}
	return last.IsZero() || d.Now().Sub(last) >= d.Interval || mark.After(seen), mark
}
