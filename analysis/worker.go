package analysis

import (
	"context"
	"log/slog"
	"time"

	"github.com/tokenpath/tokenpath/store/postgres"
)

// runLocked calls pass every interval until ctx is done, each time under
// the advisory lock key so one node of a cluster works at a time. A pass
// that reports more work runs again at once (catching up after a backlog);
// a failed pass is logged and retried at the next tick.
func runLocked(ctx context.Context, pg *postgres.Store, key int32, interval time.Duration, log *slog.Logger, what string,
	pass func(ctx context.Context) (more bool, err error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for more := true; more; {
			more = false
			_, err := pg.TryLock(ctx, key, func(ctx context.Context) error {
				var err error
				more, err = pass(ctx)
				return err
			})
			if err != nil {
				if ctx.Err() == nil {
					log.Error(what+" failed; will retry", "err", err)
				}
				break
			}
		}
	}
}
