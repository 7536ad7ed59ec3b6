//go:build linux

package postgres

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// embeddedDir returns a fresh data dir for an embedded server. As root,
// postgres runs as nobody, which must be able to pass through the test's
// temporary directories (created 0700).
func embeddedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		for _, d := range []string{filepath.Dir(dir), dir} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	return filepath.Join(dir, "postgres")
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startEmbedded starts a server and returns it with a migrated Store on it;
// both are stopped at cleanup unless the test did it.
func startEmbedded(t *testing.T, dir string) (*Embedded, *Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, err := StartEmbedded(ctx, dir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	s, err := Open(ctx, e.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return e, s
}

func projectExists(t *testing.T, s *Store, name string) bool {
	t.Helper()
	var n int
	if err := s.Pool.QueryRow(context.Background(), "SELECT count(*) FROM projects WHERE name = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func TestEmbeddedRestartKeepsData(t *testing.T) {
	ctx := context.Background()
	dir := embeddedDir(t)

	e, s := startEmbedded(t, dir)
	if _, err := s.EnsureProjectWithKey(ctx, "kept", "a-key-long-enough-to-be-realistic-0001"); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		var user string
		if err := s.Pool.QueryRow(ctx, "SELECT current_user").Scan(&user); err != nil || user != "tokenpath" {
			t.Errorf("current_user = %q, %v", user, err)
		}
		// The server process must not run as root.
		pid := readPostmasterPID(t, dir)
		var st syscall.Stat_t
		if err := syscall.Stat("/proc/"+strconv.Itoa(pid), &st); err != nil || st.Uid == 0 {
			t.Errorf("postgres (pid %d) runs as uid %d (%v), want unprivileged", pid, st.Uid, err)
		}
	}

	// One owner at a time.
	if e2, err := StartEmbedded(ctx, dir, nil); err == nil {
		_ = e2.Stop(ctx)
		t.Fatal("a second StartEmbedded on a directory in use succeeded")
	} else if !strings.Contains(err.Error(), "in use") {
		t.Errorf("second start: %v, want an in-use error", err)
	}

	s.Close()
	if err := e.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, pgDataName, "postmaster.pid")); !os.IsNotExist(err) {
		t.Errorf("postmaster.pid still there after Stop (%v): not a clean shutdown", err)
	}

	_, s = startEmbedded(t, dir)
	if !projectExists(t, s, "kept") {
		t.Error("project committed before the restart is gone")
	}
}

func readPostmasterPID(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, pgDataName, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestEmbeddedRecoversFromKill simulates the machine or the server dying
// under postgres: the postmaster gets SIGKILL, leaving a stale pid file and
// WAL to replay, and the next start must bring back every committed row.
func TestEmbeddedRecoversFromKill(t *testing.T) {
	ctx := context.Background()
	dir := embeddedDir(t)
	e, s := startEmbedded(t, dir)
	if _, err := s.EnsureProjectWithKey(ctx, "survivor", "a-key-long-enough-to-be-realistic-0002"); err != nil {
		t.Fatal(err)
	}
	pid := e.pm.cmd.Process.Pid
	if got := readPostmasterPID(t, dir); got != pid {
		t.Fatalf("postmaster.pid names %d, started %d", got, pid)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-e.pm.exited
	s.Close()
	// Our process lives on in this test, so release the directory the way
	// our death would.
	_ = e.lock.Close()

	_, s = startEmbedded(t, dir)
	if !projectExists(t, s, "survivor") {
		t.Error("project committed before the kill is gone")
	}
}

// TestEmbeddedStopsOrphan covers a Tokenpath process that died while its
// postgres kept running (say, started by an older build): the next start
// must stop that postgres and own the directory.
func TestEmbeddedStopsOrphan(t *testing.T) {
	ctx := context.Background()
	dir := embeddedDir(t)
	old, s := startEmbedded(t, dir)
	if _, err := s.EnsureProjectWithKey(ctx, "before-orphan", "a-key-long-enough-to-be-realistic-0003"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	oldPID := old.pm.cmd.Process.Pid
	_ = old.lock.Close() // the owner "dies"; its postgres does not

	e, s := startEmbedded(t, dir)
	select {
	case <-old.pm.exited:
	case <-time.After(5 * time.Second):
		t.Fatal("orphaned postgres still running after the new start")
	}
	if pid := e.pm.cmd.Process.Pid; pid == oldPID || readPostmasterPID(t, dir) != pid {
		t.Errorf("new postmaster %d does not own the directory (old %d)", pid, oldPID)
	}
	if !projectExists(t, s, "before-orphan") {
		t.Error("data lost while replacing the orphan")
	}
}

func TestFindPGDirFromEnv(t *testing.T) {
	t.Setenv("TOKENPATH_PG_DIR", t.TempDir())
	if _, err := findPGDir(); err == nil || !strings.Contains(err.Error(), "TOKENPATH_PG_DIR") {
		t.Errorf("bad TOKENPATH_PG_DIR: %v", err)
	}
	t.Setenv("TOKENPATH_PG_DIR", "")
	dir, err := findPGDir()
	if err != nil {
		t.Fatalf("from the checkout: %v (run npm ci)", err)
	}
	pkg := filepath.Dir(dir)
	t.Setenv("TOKENPATH_PG_DIR", pkg) // the package dir works as well as native/
	if got, err := findPGDir(); err != nil || got != dir {
		t.Errorf("TOKENPATH_PG_DIR=%s: %q, %v; want %q", pkg, got, err, dir)
	}
}

func TestSocketDirFallsBackForLongPaths(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 100), "postgres")
	e := &Embedded{dataDir: long}
	if err := e.prepareSocketDir(); err != nil {
		t.Fatal(err)
	}
	if !e.tempSockDir || strings.HasPrefix(e.sockDir, long) {
		t.Fatalf("socket dir %s for a %d-byte data dir path: want a temporary one", e.sockDir, len(long))
	}
	if n := len(filepath.Join(e.sockDir, ".s.PGSQL.65535")); n >= maxSocketPath {
		t.Errorf("socket path is %d bytes", n)
	}
	e.release()
	if _, err := os.Stat(e.sockDir); !os.IsNotExist(err) {
		t.Errorf("temporary socket dir left behind: %v", err)
	}

	short := &Embedded{dataDir: t.TempDir()}
	if err := short.prepareSocketDir(); err != nil {
		t.Fatal(err)
	}
	if short.tempSockDir || short.sockDir != filepath.Join(short.dataDir, socketName) {
		t.Errorf("short data dir got socket dir %s", short.sockDir)
	}
}

func TestCheckReachableNamesTheBlockingDir(t *testing.T) {
	// A uid/gid owning nothing here, so only the "other" bits apply.
	stranger := &syscall.Credential{Uid: 4242424, Gid: 4242424}
	closed := filepath.Join(t.TempDir(), "closed")
	inner := filepath.Join(closed, "inner")
	if err := os.MkdirAll(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(closed), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(filepath.Dir(closed)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	err := checkReachable(inner, stranger, true)
	if err == nil || !strings.Contains(err.Error(), "cannot enter "+closed) {
		t.Errorf("checkReachable through a 0700 dir: %v", err)
	}
	if err := os.Chmod(closed, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := checkReachable(inner, stranger, true); err != nil {
		t.Errorf("checkReachable through o+x dirs: %v", err)
	}
}
