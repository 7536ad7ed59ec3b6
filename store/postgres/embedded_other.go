//go:build !linux

package postgres

import (
	"context"
	"errors"
	"log/slog"
)

// Embedded is a PostgreSQL server started by this process. The binaries are
// packaged for Linux only; elsewhere StartEmbedded fails and a PostgreSQL
// server must be configured with TOKENPATH_DATABASE_URL.
type Embedded struct{}

// StartEmbedded fails outside Linux: there are no embedded binaries.
func StartEmbedded(ctx context.Context, dataDir string, log *slog.Logger) (*Embedded, error) {
	return nil, errors.New("embedded postgres runs on linux/amd64 only: set TOKENPATH_DATABASE_URL to a PostgreSQL server")
}

// URL returns the empty string: there is no server.
func (e *Embedded) URL() string { return "" }

// Stop does nothing: there is no server.
func (e *Embedded) Stop(ctx context.Context) error { return nil }
