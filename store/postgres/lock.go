package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Advisory lock ids for work that must run once per cluster of Tokenpath
// nodes sharing one database schema. Advisory locks are database-wide, so
// the lock is taken on the pair (id, hash of the current schema): two
// installations in different schemas of one database (or parallel test
// servers) never block each other.
const (
	// LockClickHouseMigrations serializes ClickHouse schema changes.
	LockClickHouseMigrations int32 = 0x746f6b01
	// LockAssembler lets one node at a time assemble traces.
	LockAssembler int32 = 0x746f6b02
)

// WithLock runs fn while holding the session advisory lock key, waiting for
// it. The connection is taken out of the pool and closed afterwards, so a
// lock can never leak to another borrower.
func (s *Store) WithLock(ctx context.Context, key int32, fn func(ctx context.Context) error) error {
	pooled, err := s.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("advisory lock: %w", err)
	}
	conn := pooled.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, hashtext(current_schema()))", key); err != nil {
		return fmt.Errorf("take advisory lock: %w", err)
	}
	return fn(ctx)
}

// TryLock is WithLock without waiting: ok is false when another node holds
// the lock, and fn did not run.
func (s *Store) TryLock(ctx context.Context, key int32, fn func(ctx context.Context) error) (ok bool, err error) {
	pooled, err := s.Pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("advisory lock: %w", err)
	}
	conn := pooled.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, hashtext(current_schema()))", key).Scan(&ok); err != nil {
		return false, fmt.Errorf("try advisory lock: %w", err)
	}
	if !ok {
		return false, nil
	}
	return true, fn(ctx)
}

// RunLocked calls pass every interval until ctx is done, each time under
// the advisory lock key so one node of a cluster works at a time. A pass
// that reports more work runs again at once (catching up after a backlog);
// a failed pass is logged and retried at the next tick.
func (s *Store) RunLocked(ctx context.Context, key int32, interval time.Duration, log *slog.Logger, what string,
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
			_, err := s.TryLock(ctx, key, func(ctx context.Context) error {
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
