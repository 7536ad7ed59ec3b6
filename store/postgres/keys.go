package postgres

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrUnknownKey means the API key does not exist or was revoked. Auth maps it
// to 401 and must not tell the two apart.
var ErrUnknownKey = errors.New("unknown or revoked API key")

// ErrKeyRevoked means EnsureProjectWithKey was given a key that exists but
// was revoked: the operator must configure a new bootstrap key.
var ErrKeyRevoked = errors.New("API key was revoked")

// APIKey describes a stored key. The key itself is never stored, so it
// cannot be listed; Prefix is enough to tell keys apart.
type APIKey struct {
	ID         int64
	ProjectID  int64
	Name       string
	Prefix     string
	CreatedAt  time.Time
	LastUsedAt *time.Time // nil: never used
	RevokedAt  *time.Time // nil: active
}

// keyPrefix marks Tokenpath keys so secret scanners and humans recognise them.
const keyPrefix = "tp_"

// lastUsedResolution bounds how often a key lookup writes last_used_at, so
// every OTLP export does not turn into an UPDATE.
const lastUsedResolution = time.Minute

// keyEncoding writes generated keys in lowercase base32: shorter than hex and
// safe in headers, URLs and shells.
var keyEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// HashKey returns the digest under which an API key is stored and looked up.
// Plain SHA-256 is enough: generated keys carry 256 random bits, so there is
// nothing to brute-force, and a slow password hash would cost CPU on every
// request while making lookup by hash impossible.
func HashKey(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return sum[:]
}

// displayPrefix is the part of a key kept in clear for the UI. Operator-chosen
// bootstrap keys can be short, so those reveal at most a quarter of
// themselves.
func displayPrefix(key string) string {
	n := 8
	if len(key) < 32 {
		n = len(key) / 4
	}
	return key[:n]
}

// EnsureProjectWithKey makes sure project projectName exists and that key
// authenticates for it, creating either when missing; it backs
// TOKENPATH_BOOTSTRAP_KEY and is safe to call on every start, from several
// nodes at once. It fails if the key belongs to another project or was
// revoked (ErrKeyRevoked): a revocation outlives restarts.
func (s *Store) EnsureProjectWithKey(ctx context.Context, projectName, key string) (projectID int64, err error) {
	if projectName == "" || key == "" {
		return 0, errors.New("ensure project with key: project name and key must not be empty")
	}
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		// ON CONFLICT DO NOTHING + SELECT instead of SELECT-then-INSERT, so
		// two nodes bootstrapping at once do not trip on the unique index.
		if _, err := tx.Exec(ctx, "INSERT INTO projects (name) VALUES ($1) ON CONFLICT (name) DO NOTHING", projectName); err != nil {
			return fmt.Errorf("create project: %w", err)
		}
		if err := tx.QueryRow(ctx, "SELECT id FROM projects WHERE name = $1", projectName).Scan(&projectID); err != nil {
			return fmt.Errorf("find project: %w", err)
		}
		hash := HashKey(key)
		if _, err := tx.Exec(ctx, `INSERT INTO api_keys (project_id, name, prefix, hash)
			VALUES ($1, 'bootstrap', $2, $3) ON CONFLICT (hash) DO NOTHING`,
			projectID, displayPrefix(key), hash); err != nil {
			return fmt.Errorf("create key: %w", err)
		}
		var owner int64
		var revokedAt *time.Time
		if err := tx.QueryRow(ctx, "SELECT project_id, revoked_at FROM api_keys WHERE hash = $1", hash).Scan(&owner, &revokedAt); err != nil {
			return fmt.Errorf("find key: %w", err)
		}
		if owner != projectID {
			return fmt.Errorf("the key already belongs to another project (id %d)", owner)
		}
		if revokedAt != nil {
			return fmt.Errorf("key %s… of project %q: %w", displayPrefix(key), projectName, ErrKeyRevoked)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("ensure project %q with key: %w", projectName, err)
	}
	return projectID, nil
}

// CreateKey creates a new API key for the project and returns it in clear.
// This is the only time the key is visible: only its hash is stored.
func (s *Store) CreateKey(ctx context.Context, projectID int64, name string) (key string, err error) {
	var secret [32]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return "", fmt.Errorf("create key: read random bytes: %w", err)
	}
	key = keyPrefix + keyEncoding.EncodeToString(secret[:])
	_, err = s.Pool.Exec(ctx, "INSERT INTO api_keys (project_id, name, prefix, hash) VALUES ($1, $2, $3, $4)",
		projectID, name, displayPrefix(key), HashKey(key))
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23503" { // foreign_key_violation
			return "", fmt.Errorf("create key: project %d does not exist", projectID)
		}
		return "", fmt.Errorf("create key for project %d: %w", projectID, err)
	}
	return key, nil
}

// ProjectForKey returns the project an active API key belongs to, or
// ErrUnknownKey. The lookup is by hash, so its timing depends on the digest,
// not on how many leading characters of a guess are right: no constant-time
// comparison of secrets is needed.
func (s *Store) ProjectForKey(ctx context.Context, key string) (projectID int64, err error) {
	// A missing Authorization header is the common case of an empty key; it
	// deserves no database round trip.
	if strings.TrimSpace(key) == "" {
		return 0, ErrUnknownKey
	}
	var keyID int64
	var lastUsed *time.Time
	err = s.Pool.QueryRow(ctx,
		"SELECT id, project_id, last_used_at FROM api_keys WHERE hash = $1 AND revoked_at IS NULL",
		HashKey(key)).Scan(&keyID, &projectID, &lastUsed)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrUnknownKey
	}
	if err != nil {
		return 0, fmt.Errorf("look up API key: %w", err)
	}
	if lastUsed == nil || time.Since(*lastUsed) >= lastUsedResolution {
		// Best effort on purpose: last_used_at is a hint for the UI, and a
		// failed write (e.g. during a failover) must not reject a valid key.
		// The WHERE clause keeps concurrent lookups from writing twice.
		_, _ = s.Pool.Exec(ctx, `UPDATE api_keys SET last_used_at = now()
			WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < now() - $2 * interval '1 second')`,
			keyID, int(lastUsedResolution.Seconds()))
	}
	return projectID, nil
}

// RevokeKey revokes key keyID of the project; the key stops authenticating
// at once. Revoking an already revoked key is a no-op; a key that does not
// exist in this project yields ErrUnknownKey.
func (s *Store) RevokeKey(ctx context.Context, projectID, keyID int64) error {
	// COALESCE keeps the first revocation time, which makes retries harmless.
	tag, err := s.Pool.Exec(ctx,
		"UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1 AND project_id = $2",
		keyID, projectID)
	if err != nil {
		return fmt.Errorf("revoke key %d of project %d: %w", keyID, projectID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("revoke key %d of project %d: %w", keyID, projectID, ErrUnknownKey)
	}
	return nil
}

// ListKeys returns the project's keys, revoked ones included, oldest first.
func (s *Store) ListKeys(ctx context.Context, projectID int64) ([]APIKey, error) {
	rows, err := s.Pool.Query(ctx, `SELECT id, project_id, name, prefix, created_at, last_used_at, revoked_at
		FROM api_keys WHERE project_id = $1 ORDER BY id`, projectID)
	if err != nil {
		return nil, fmt.Errorf("list keys of project %d: %w", projectID, err)
	}
	keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (APIKey, error) {
		var k APIKey
		err := row.Scan(&k.ID, &k.ProjectID, &k.Name, &k.Prefix, &k.CreatedAt, &k.LastUsedAt, &k.RevokedAt)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("list keys of project %d: %w", projectID, err)
	}
	return keys, nil
}
