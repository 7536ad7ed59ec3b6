// Package auth resolves API keys to projects with a small cache, so OTLP
// exports and API calls do not each cost a PostgreSQL round trip.
package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"time"

	"github.com/tokenpath/tokenpath/store/postgres"
)

// KeyStore is the PostgreSQL lookup being cached.
type KeyStore interface {
	ProjectForKey(ctx context.Context, key string) (int64, error)
}

// Cache remembers valid keys for TTL and unknown ones for NegativeTTL.
// Revocation takes effect within TTL on other nodes; Forget makes it
// immediate on this one.
type Cache struct {
	Store       KeyStore
	TTL         time.Duration
	NegativeTTL time.Duration

	mu      sync.Mutex
	entries map[[32]byte]entry
}

type entry struct {
	project int64
	err     error
	expires time.Time
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
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.project, e.err
	}
	// Bounded: a partitioned PostgreSQL accepts the query and never
	// answers, and without a deadline every request would wait with it.
	lookupCtx, cancel := context.WithTimeout(ctx, lookupTimeout)
	p, err := c.Store.ProjectForKey(lookupCtx, key)
	cancel()
	if err != nil && !isUnknown(err) {
		return 0, err // store trouble is not cached
	}
	ttl := c.TTL
	if err != nil {
		ttl = c.NegativeTTL
	}
	c.mu.Lock()
	if len(c.entries) > 100_000 {
		c.entries = map[[32]byte]entry{} // bound memory under a key-guessing flood
	}
	c.entries[h] = entry{project: p, err: err, expires: now.Add(ttl)}
	c.mu.Unlock()
	return p, err
}

// Forget drops every cached entry (after a key is revoked).
func (c *Cache) Forget() {
	c.mu.Lock()
	c.entries = map[[32]byte]entry{}
	c.mu.Unlock()
}

func isUnknown(err error) bool { return errors.Is(err, postgres.ErrUnknownKey) }
