package auth

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/store/postgres/pgtest"
)

// gatedStore is the real PostgreSQL key store with a gate: while it is
// shut, lookups wait for it, so a test sees who waits on the database and
// how many lookups are made. With holdAnswers the lookup reads the
// database first and waits at the gate with its answer.
type gatedStore struct {
	*postgres.Store
	holdAnswers atomic.Bool
	calls       atomic.Int64
	mu          sync.Mutex
	gate        chan struct{} // nil: open
}

func (g *gatedStore) ProjectForKey(ctx context.Context, key string) (int64, error) {
	g.calls.Add(1)
	var p int64
	var err error
	hold := g.holdAnswers.Load()
	if hold {
		p, err = g.Store.ProjectForKey(ctx, key)
	}
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if hold {
		return p, err
	}
	return g.Store.ProjectForKey(ctx, key)
}

func (g *gatedStore) shut() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedStore) open() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

// newGatedCache returns a cache over a fresh database holding one project
// and its key.
func newGatedCache(t *testing.T, ttl time.Duration) (c *Cache, g *gatedStore, key string, project int64) {
	t.Helper()
	ctx := context.Background()
	pg, err := postgres.Open(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	if err := pg.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	key = "cache-test-key-0123456789abcdef"
	if project, err = pg.EnsureProjectWithKey(ctx, "cache", key); err != nil {
		t.Fatal(err)
	}
	g = &gatedStore{Store: pg}
	t.Cleanup(g.open)
	c = NewCache(g)
	c.TTL = ttl
	return c, g, key, project
}

// within calls ProjectForKey and fails the test if it has not answered
// after d: the caller waited on the shut gate.
func within(t *testing.T, c *Cache, key string, d time.Duration) (int64, error) {
	t.Helper()
	type answer struct {
		p   int64
		err error
	}
	done := make(chan answer, 1)
	go func() {
		p, err := c.ProjectForKey(context.Background(), key)
		done <- answer{p, err}
	}()
	select {
	case a := <-done:
		return a.p, a.err
	case <-time.After(d):
		t.Fatalf("ProjectForKey waited more than %s on the key store", d)
		return 0, nil
	}
}

// A key in use is renewed in the background before it expires: callers
// keep the cached answer while the lookup waits on the database, and
// after the old entry's expiry the renewed one answers.
func TestCacheRenewsKeysInUse(t *testing.T) {
	const ttl = 600 * time.Millisecond
	c, g, key, project := newGatedCache(t, ttl)
	if p, err := within(t, c, key, 5*time.Second); err != nil || p != project {
		t.Fatalf("first lookup = %d, %v; want %d", p, err, project)
	}
	cachedAt := time.Now()
	g.shut()
	// Into the last third of the TTL: the next call starts the renewal.
	time.Sleep(ttl * 3 / 4)
	for i := 0; i < 5; i++ {
		if p, err := within(t, c, key, 5*time.Second); err != nil || p != project {
			t.Fatalf("call %d in the renewal window = %d, %v; want %d", i, p, err, project)
		}
	}
	// The renewal runs in the background: wait for it to reach the store.
	for deadline := time.Now().Add(5 * time.Second); g.calls.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if n := g.calls.Load(); n != 2 {
		t.Fatalf("%d lookups after five calls in the renewal window, want 2 (the first and one renewal)", n)
	}
	g.open()
	// Past the first entry's expiry: the renewed entry answers, with no
	// lookup of its own.
	for time.Since(cachedAt) < ttl+100*time.Millisecond {
		time.Sleep(20 * time.Millisecond)
	}
	g.shut()
	if p, err := within(t, c, key, 5*time.Second); err != nil || p != project {
		t.Fatalf("after the first entry expired = %d, %v; want %d", p, err, project)
	}
	if n := g.calls.Load(); n != 2 {
		t.Errorf("%d lookups, want 2: the renewed entry did not answer", n)
	}
}

// Callers asking for a key not cached wait for one lookup between them.
func TestCacheLooksAKeyUpOnce(t *testing.T) {
	c, g, key, project := newGatedCache(t, time.Minute)
	g.shut()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := c.ProjectForKey(context.Background(), key)
			if err == nil && p != project {
				err = errors.New("wrong project")
			}
			errs <- err
		}()
	}
	// Let every caller reach the cache before the lookup is let through.
	for deadline := time.Now().Add(5 * time.Second); g.calls.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	g.open()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := g.calls.Load(); n != 1 {
		t.Errorf("20 callers made %d lookups, want 1", n)
	}
	// A caller that gives up gets its own context's error, not the
	// lookup's.
	c.Forget()
	g.shut()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.ProjectForKey(ctx, key); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a caller that gave up got %v, want its deadline", err)
	}
}

// A renewal that read the key before it was revoked does not bring it
// back after Forget.
func TestCacheForgetOutlivesARenewal(t *testing.T) {
	const ttl = 600 * time.Millisecond
	c, g, key, project := newGatedCache(t, ttl)
	ctx := context.Background()
	if p, err := within(t, c, key, 5*time.Second); err != nil || p != project {
		t.Fatalf("first lookup = %d, %v; want %d", p, err, project)
	}
	g.holdAnswers.Store(true)
	g.shut()
	time.Sleep(ttl * 3 / 4)
	within(t, c, key, 5*time.Second) // starts a renewal
	for deadline := time.Now().Add(5 * time.Second); g.calls.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	// The renewal has read the key (valid) and holds its answer; now the
	// key is revoked and the cache told.
	time.Sleep(100 * time.Millisecond)
	keys, err := g.Store.ListKeys(ctx, project)
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys = %v, %v", keys, err)
	}
	if err := g.Store.RevokeKey(ctx, project, keys[0].ID); err != nil {
		t.Fatal(err)
	}
	c.Forget()
	g.holdAnswers.Store(false)
	g.open()
	time.Sleep(100 * time.Millisecond) // the renewal answers
	if p, err := within(t, c, key, 5*time.Second); !isUnknown(err) {
		t.Errorf("a revoked key after Forget: project %d, %v; want unknown key", p, err)
	}
}
