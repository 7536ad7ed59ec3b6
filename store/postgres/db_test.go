package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/store/postgres/pgtest"
)

func testURL(t *testing.T) string { return pgtest.URL(t) }

// openTestStore opens and migrates a Store on a fresh schema.
func openTestStore(t *testing.T) *Store {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestOpenUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Port 1 on loopback refuses at once; the password must not leak into
	// the message a user or a log will see.
	_, err := Open(ctx, "postgres://tokenpath:s3cret-pw@127.0.0.1:1/x?sslmode=disable")
	if err == nil {
		t.Fatal("Open succeeded against a closed port")
	}
	if !strings.Contains(err.Error(), "postgres at 127.0.0.1:1 unreachable") {
		t.Errorf("error does not name the server: %v", err)
	}
	if strings.Contains(err.Error(), "s3cret-pw") {
		t.Errorf("error leaks the password: %v", err)
	}
}
