//go:build linux

package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// postmaster is one started postgres process.
type postmaster struct {
	cmd       *exec.Cmd
	logOffset int64         // size of postgres.log when it started: its own lines follow
	exited    chan struct{} // closed once the process has exited and been reaped
	err       error         // exit status; read only after exited is closed
}

// stopOrphan deals with the postmaster.pid a killed owner may have left.
func (e *Embedded) stopOrphan(ctx context.Context) error {
	pidFile := filepath.Join(e.pgData, "postmaster.pid")
	b, err := os.ReadFile(pidFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("embedded postgres: read %s: %w", pidFile, err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		// A torn pid file from a start that was killed midway: postgres
		// would refuse to start on it, and nobody can be using it.
		e.log.Warn("removing unreadable postmaster.pid", "file", pidFile)
		return removePIDFile(pidFile)
	}
	state, err := inspectPostmaster(pid, e.pgData)
	if err != nil {
		return fmt.Errorf("embedded postgres: %w", err)
	}
	switch state {
	case processGone:
		// postgres itself replaces a pid file whose process is gone.
		return nil
	case processOther:
		// The pid was reused by an unrelated process (common in containers,
		// where pids restart low); postgres would refuse to start.
		e.log.Warn("removing stale postmaster.pid naming an unrelated process", "pid", pid)
		return removePIDFile(pidFile)
	}
	e.log.Warn("stopping postgres left running by a previous Tokenpath process", "pid", pid, "dir", e.pgData)
	if err := terminate(ctx, pid); err != nil {
		return fmt.Errorf("embedded postgres: stop orphaned postgres (pid %d): %w", pid, err)
	}
	return nil
}

func removePIDFile(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("embedded postgres: remove stale %s: %w", p, err)
	}
	return nil
}

type processState int

const (
	processGone     processState = iota // no such process, or a zombie
	processOther                        // alive, but not a postgres on our PGDATA
	processPostgres                     // a postgres serving our PGDATA
)

// inspectPostmaster tells whether pid is a live postmaster for pgData: its
// name is postgres and its working directory (postgres chdirs into PGDATA)
// or, when that is unreadable, its command line names pgData.
func inspectPostmaster(pid int, pgData string) (processState, error) {
	if !processAlive(pid) {
		return processGone, nil
	}
	proc := "/proc/" + strconv.Itoa(pid)
	comm, err := os.ReadFile(proc + "/comm")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return processGone, nil
		}
		return 0, fmt.Errorf("inspect pid %d: %w", pid, err)
	}
	if strings.TrimSpace(string(comm)) != "postgres" {
		return processOther, nil
	}
	want := pgData
	if resolved, err := filepath.EvalSymlinks(pgData); err == nil {
		want = resolved
	}
	if cwd, err := os.Readlink(proc + "/cwd"); err == nil {
		if cwd == want || cwd == pgData {
			return processPostgres, nil
		}
		return processOther, nil
	}
	cmdline, err := os.ReadFile(proc + "/cmdline")
	if err != nil {
		return 0, fmt.Errorf("inspect pid %d: %w", pid, err)
	}
	if bytes.Contains(cmdline, []byte(pgData)) || bytes.Contains(cmdline, []byte(want)) {
		return processPostgres, nil
	}
	return processOther, nil
}

// processAlive reports whether pid exists and is not a zombie. A process of
// another user still counts: kill answers EPERM, not ESRCH.
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	// The state follows the parenthesised command name, which may itself
	// contain spaces and parentheses.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z'
	}
	return true
}

// terminate stops a postmaster that is not our child: fast shutdown first,
// escalating to immediate shutdown and SIGKILL if it does not exit.
func terminate(ctx context.Context, pid int) error {
	steps := []struct {
		sig  syscall.Signal
		wait time.Duration
	}{
		{syscall.SIGINT, 30 * time.Second}, // fast shutdown
		{syscall.SIGQUIT, 5 * time.Second}, // immediate shutdown
		{syscall.SIGKILL, 5 * time.Second},
	}
	for _, step := range steps {
		if err := syscall.Kill(pid, step.sig); errors.Is(err, syscall.ESRCH) {
			return nil
		} else if err != nil {
			return fmt.Errorf("send %v: %w", step.sig, err)
		}
		deadline := time.Now().Add(step.wait)
		for time.Now().Before(deadline) {
			if !processAlive(pid) {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return errors.New("still running after SIGKILL")
}

// shutdown asks postgres for a fast shutdown and waits; if ctx ends first
// it forces an immediate one.
func (pm *postmaster) shutdown(ctx context.Context) error {
	select {
	case <-pm.exited:
		return pm.exitErr()
	default:
	}
	if err := pm.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("embedded postgres: request shutdown: %w", err)
	}
	select {
	case <-pm.exited:
		return pm.exitErr()
	case <-ctx.Done():
	}
	pm.kill()
	return fmt.Errorf("embedded postgres: fast shutdown unfinished (%w); forced an immediate shutdown, crash recovery will run at next start", ctx.Err())
}

func (pm *postmaster) exitErr() error {
	if pm.err != nil {
		return fmt.Errorf("embedded postgres exited with %w", pm.err)
	}
	return nil
}

// kill forces postgres down: immediate shutdown (it still stops its own
// children), then SIGKILL if that hangs. It returns once postgres is reaped.
func (pm *postmaster) kill() {
	_ = pm.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-pm.exited:
		return
	case <-time.After(5 * time.Second):
	}
	_ = pm.cmd.Process.Kill()
	<-pm.exited
}
