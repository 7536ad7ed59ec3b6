// Package auth resolves API keys to projects with a small cache, so OTLP
// exports and API calls do not each cost a PostgreSQL round trip.
package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/tokenpath/tokenpath/store/postgres"
)

// KeyStore is the PostgreSQL lookup being cached.
type KeyStore interface {
	ProjectForKey(ctx context.Context, key string) (int64, error)
}

// Cache remembers valid keys for TTL and unknown ones for NegativeTTL.
// Revocation takes effect within TTL on other nodes; Forget makes it
// immediate on this one.
//
// A key in use never makes its callers wait on PostgreSQL once it is
// cached: in the last third of its TTL one lookup renews it in the
// background while callers keep the cached answer. Before, every export
// arriving in the moment an entry expired looked the key up itself; with
// the machine busy ingesting, those lookups (and the last_used_at write)
// took 100–500 ms, every 30 s (bench ingest). A key not
// cached is looked up once however many callers ask at the same time.
type Cache struct {
	Store       KeyStore
	TTL         time.Duration
	NegativeTTL time.Duration

	mu      sync.Mutex
	entries map[[32]byte]entry
	// gen counts Forget calls: a lookup that began before one does not
	// store its answer, which may predate the revocation.
	gen     uint64
	lookups singleflight.Group
}

type entry struct {
	project int64
	err     error
	expires time.Time
	// renewing: a background lookup is renewing the entry.
	renewing bool
}

// lookupTimeout bounds one PostgreSQL key lookup, so callers answer
// "unavailable" instead of hanging while the database does not respond.
const lookupTimeout = 5 * time.Second

// NewCache wraps store with a 30 s positive and 5 s negative cache.
func NewCache(store KeyStore) *Cache {
	return &Cache{Store: store, TTL: 30 * time.Second, NegativeTTL: 5 * time.Second, entries: map[[32]byte]entry{}}
}

// ProjectForKey returns the key's project. Keys are cached by hash, never
// in clear.
func (c *Cache) ProjectForKey(ctx context.Context, key string) (int64, error) {
	h := sha256.Sum256([]byte(key))
	now := time.Now()
	c.mu.Lock()
	e, ok := c.entries[h]
	gen := c.gen
	if ok && now.Before(e.expires) {
		if e.err == nil && !e.renewing && e.expires.Sub(now) < c.TTL/3 {
			e.renewing = true
			c.entries[h] = e
			c.lookupOnce(h, key, gen)
		}
		c.mu.Unlock()
		return e.project, e.err
	}
	c.mu.Unlock()
	select {
	case r := <-c.lookupOnce(h, key, gen):
		if r.Err != nil {
			return 0, r.Err
		}
		found := r.Val.(entry)
		return found.project, found.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// lookupOnce starts the lookup of a key in generation gen, or joins the
// one under way: one at a time per key, and callers after a Forget do
// not join one that began before it.
func (c *Cache) lookupOnce(h [32]byte, key string, gen uint64) <-chan singleflight.Result {
	return c.lookups.DoChan(fmt.Sprintf("%x/%d", h, gen), func() (any, error) { return c.lookup(h, key, gen) })
}

// lookup asks PostgreSQL for the key's project and caches the answer
// unless Forget ran since generation gen began; the error is store
// trouble, which is not cached (a renewed entry keeps its old answer
// until it expires). It runs detached from any one caller, so
// a caller that gives up does not fail the others waiting on it.
func (c *Cache) lookup(h [32]byte, key string, gen uint64) (entry, error) {
	// Bounded: a partitioned PostgreSQL accepts the query and never
	// answers, and without a deadline every request would wait with it.
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	p, err := c.Store.ProjectForKey(ctx, key)
	cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil && !isUnknown(err) {
		if e, ok := c.entries[h]; ok && e.renewing {
			e.renewing = false
			c.entries[h] = e
		}
		return entry{}, err
	}
	ttl := c.TTL
	if err != nil {
		ttl = c.NegativeTTL
	}
	e := entry{project: p, err: err, expires: time.Now().Add(ttl)}
	if gen != c.gen {
		return e, nil // answered, but not kept: Forget ran meanwhile
	}
	if len(c.entries) > 100_000 {
		c.entries = map[[32]byte]entry{} // bound memory under a key-guessing flood
	}
	c.entries[h] = e
	return e, nil
}

// Forget drops every cached entry (after a key is revoked).
func (c *Cache) Forget() {
	c.mu.Lock()
	c.entries = map[[32]byte]entry{}
	c.gen++
	c.mu.Unlock()
}

func isUnknown(err error) bool { return errors.Is(err, postgres.ErrUnknownKey) }
