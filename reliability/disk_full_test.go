package reliability_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/app/apptest/otlptest"
	"github.com/tokenpath/tokenpath/app/apptest/uiclient"
)

// mountCmd runs mount(8)/umount(8) and wraps their output into the error.
func mountCmd(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// smallDisk mounts a tmpfs of size bytes on a fresh directory and unmounts
// it at cleanup (after the server, which is started later, is gone). The
// test cannot make a disk it can fill without it, so failing to mount
// fails the test: run the suite as root, as CI does.
func smallDisk(t *testing.T, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := mountCmd("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0750", size), "tokenpath-reliability", dir); err != nil {
		msg := fmt.Sprintf("cannot mount a %d MiB tmpfs to fill (this test needs root or CAP_SYS_ADMIN): %v", size>>20, err)
		if os.Getenv("CI") == "true" {
			msg = "CI: " + msg
		}
		t.Fatal(msg)
	}
	t.Cleanup(func() { unmount(t, dir) })
	return dir
}

// unmount detaches the top mount at dir, lazily if something still holds it.
func unmount(t *testing.T, dir string) {
	if err := mountCmd("umount", dir); err != nil {
		if lerr := mountCmd("umount", "-l", dir); lerr != nil {
			t.Errorf("unmount %s: %v; %v", dir, err, lerr)
		}
	}
}

// readOnlyBind attaches a read-only bind mount of dir on top of dir in one
// step. Binding first and remounting read-only after, as mount(8) does,
// races the server: a file it opens for writing through the new mount in
// between (a write-ahead log segment, a stage file; under load there is
// always one) makes the remount fail with "mount point is busy" for as long
// as the file stays open. The mount is made read-only before it is attached,
// so nothing can open it for writing.
func readOnlyBind(dir string) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("mount_setattr ro on a clone of %s: %w", dir, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount a read-only clone onto %s: %w", dir, err)
	}
	return nil
}

// freeBytes is the space left for unprivileged writers on dir's file
// system, and the file system's size.
func freeBytes(dir string) (free, size int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Bavail) * st.Bsize, int64(st.Blocks) * st.Bsize, nil
}

// fillUntil appends to path until about leave bytes are free on its file
// system and returns how many bytes it wrote. It never takes the last
// bytes: see docs/reliability.md on why the test stops short of zero.
func fillUntil(path string, leave int64) (int64, error) {
	free, _, err := freeBytes(filepath.Dir(path))
	if err != nil || free <= leave {
		return 0, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	var total int64
	for want := free - leave; total < want; {
		n, err := f.Write(chunk[:min(int64(len(chunk)), want-total)])
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// TestDiskFullAndReadOnlyDataDir runs the server with its whole data dir
// (write-ahead log and embedded ClickHouse) on a small tmpfs and, under
// steady OTLP load, first fills the disk (down to within the reserve the
// write-ahead log keeps free), then frees it, then makes the data dir
// read-only, then writable again. Meanwhile exports must get a
// retryable answer naming the cause (HTTP 503 with Retry-After, gRPC
// UNAVAILABLE), never a crash, a hang or a false acknowledgement; /metrics
// counts the failed exports; and once space returns ingest resumes by
// itself, the backlog reaches ClickHouse without a restart, and every
// acknowledged span is stored exactly once.
func TestDiskFullAndReadOnlyDataDir(t *testing.T) {
	t.Parallel()
	const (
		spansPerExport = 10
		exporters      = 4
		exportsPerSec  = 25 // per exporter
		diskSize       = 64 << 20
	)
	hold := pick(5*time.Second, time.Minute) // how long each fault lasts
	dataDir := smallDisk(t, diskSize)
	srv := startServer(t, dataDir, databaseURL(t))
	client := &http.Client{Timeout: 30 * time.Second}
	grpcClient := grpcTraces(t, srv)
	t0 := time.Now().Add(-time.Minute)
	load := startLoad(spansPerExport, exporters, time.Second/exportsPerSec, func(seed uint64) answer {
		return httpAnswer(exportTraces(client, srv.OTLPHTTP, seed, spansPerExport, t0))
	})
	defer load.stop()

	// failedExports is /metrics' count of OTLP/HTTP trace exports that
	// failed for a reason other than overload, auth or bad input.
	failedExports := func() float64 {
		return srv.Metric(t, "tokenpath_ingest_requests_total", `signal="traces"`, `transport="http"`, `outcome="error"`)
	}
	waitForOutcome := func(phase, outcome string, timeout time.Duration) time.Duration {
		t.Helper()
		began := time.Now()
		for load.count(phase, outcome) == 0 {
			if time.Since(began) > timeout {
				t.Fatalf("%s: no export answered %s within %v (answers: %v)", phase, outcome, timeout, load.outcomes(phase))
			}
			time.Sleep(100 * time.Millisecond)
		}
		return time.Since(began)
	}
	// allWritten pauses the load and waits for every acknowledged row to be
	// in ClickHouse, with the server still running: the backlog drains
	// without a restart.
	allWritten := func(phase string) time.Duration {
		t.Helper()
		load.pause()
		defer load.resume()
		time.Sleep(500 * time.Millisecond) // exports in flight finish
		began := time.Now()
		waitFor(t, phase+": tokenpath_ingest_queue_rows back to 0", 120*time.Second,
			func() bool { return srv.Metric(t, "tokenpath_ingest_queue_rows") == 0 })
		return time.Since(began)
	}
	// duringFault checks, while a fault lasts, that the process lives, its
	// probes answer, and gRPC exporters get a retryable code too.
	duringFault := func(phase, cause string) {
		t.Helper()
		if !srv.Alive() {
			t.Fatalf("%s: server exited", phase)
		}
		if r := do(client, http.MethodGet, "http://"+srv.UI+"/healthz", nil, ""); r.code != http.StatusOK {
			t.Errorf("%s: /healthz %d %v; want 200", phase, r.code, r.err)
		}
		ready := do(client, http.MethodGet, "http://"+srv.UI+"/readyz", nil, "")
		if ready.err != nil {
			t.Errorf("%s: /readyz: %v", phase, ready.err)
		}
		// Readiness names the trouble, and so does every page: people see
		// why their data stopped arriving.
		if !strings.Contains(ready.body, `"ingest":`) || strings.Contains(ready.body, `"ingest":"ok"`) {
			t.Errorf("%s: /readyz does not name the ingest trouble: %s", phase, ready.body)
		}
		if ui, err := uiclient.LogIn(context.Background(), "http://"+srv.UI, apptest.Key); err != nil {
			t.Errorf("%s: log in: %v", phase, err)
		} else if page := do(ui, http.MethodGet, "http://"+srv.UI+"/", nil, ""); !strings.Contains(page.body, "refusing telemetry right now") {
			t.Errorf("%s: the overview has no banner saying telemetry is refused (HTTP %d)", phase, page.code)
		}
		code, err := grpcExport(grpcClient, otlptest.Traces(load.seed.Add(1), spansPerExport, t0))
		if code == codes.OK {
			t.Errorf("%s: a gRPC export was acknowledged while %s", phase, cause)
		} else if code != codes.Unavailable && code != codes.ResourceExhausted {
			t.Errorf("%s: gRPC export answered %v (%v); want UNAVAILABLE or RESOURCE_EXHAUSTED (retryable)", phase, code, err)
		}
		t.Logf("%s: /readyz %d %s; gRPC export %v; /metrics failed exports %.0f", phase, ready.code, strings.TrimSpace(ready.body), code, failedExports())
	}

	// recovered follows a fault's end: exports are acknowledged again, and
	// the backlog reaches ClickHouse without a restart.
	recovered := func(phase, after string) {
		t.Helper()
		load.setPhase(phase)
		took := waitForOutcome(phase, "200", 60*time.Second)
		t.Logf("%s: exports acknowledged again after %v", phase, took.Round(time.Millisecond))
		time.Sleep(2 * time.Second)
		load.setPhase(after)
		time.Sleep(3 * time.Second)
		t.Logf("%s: every acknowledged row in ClickHouse %v later", after, allWritten(after).Round(time.Millisecond))
	}

	load.setPhase("before")
	time.Sleep(3 * time.Second)
	if n := load.count("before", "200"); n == 0 {
		t.Fatalf("no export acknowledged before the fault: %v", load.outcomes("before"))
	}
	failedBefore := failedExports()

	// 1. The disk fills up under load, down to half the reserve the
	// write-ahead log keeps free (5 % of the file system); a filler keeps it
	// there as segments are deleted.
	_, size, err := freeBytes(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	leave := size / 20 / 2
	filler := filepath.Join(dataDir, "filler")
	load.setPhase("disk full")
	filled, err := fillUntil(filler, leave)
	if err != nil {
		t.Fatalf("fill the disk: %v", err)
	}
	var keepFull sync.WaitGroup
	stopFilling := make(chan struct{})
	keepFull.Add(1)
	go func() {
		defer keepFull.Done()
		for {
			select {
			case <-stopFilling:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := fillUntil(filler, leave); err != nil {
				t.Errorf("keep the disk full: %v", err)
				return
			}
		}
	}()
	took := waitForOutcome("disk full", "503 Retry-After", 30*time.Second)
	t.Logf("disk full (filler %d MiB, %d KiB left): first 503 after %v: %s", filled>>20, leave>>10, took.Round(time.Millisecond),
		tail(load.exampleBody("disk full", "503 Retry-After"), 300))
	time.Sleep(hold)
	duringFault("disk full", "the disk was full")
	if body := load.exampleBody("disk full", "503 Retry-After"); !strings.Contains(body, "disk almost full") && !strings.Contains(body, "no space left on device") {
		t.Errorf("disk full: the 503 does not say why: %q", body)
	}
	if failedExports() <= failedBefore {
		t.Errorf("disk full: /metrics tokenpath_ingest_requests_total{outcome=\"error\"} did not grow (%.0f)", failedBefore)
	}

	// 2. Space returns: ingest resumes by itself and the backlog drains.
	close(stopFilling)
	keepFull.Wait()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	recovered("space freed", "after disk full")

	// 3. The data dir turns read-only: a read-only bind mount of it is put
	// on top (the tmpfs itself cannot go ro while the server has files open).
	if err := readOnlyBind(dataDir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unmount(t, dataDir) })
	load.setPhase("read-only")
	took = waitForOutcome("read-only", "503 Retry-After", 30*time.Second)
	t.Logf("read-only: first 503 after %v: %s", took.Round(time.Millisecond), tail(load.exampleBody("read-only", "503 Retry-After"), 300))
	time.Sleep(hold)
	duringFault("read-only", "the data dir was read-only")
	if body := load.exampleBody("read-only", "503 Retry-After"); !strings.Contains(body, "read-only file system") {
		t.Errorf("read-only: the 503 does not say why: %q", body)
	}

	// 4. Writable again.
	if err := mountCmd("mount", "-o", "remount,bind,rw", dataDir); err != nil {
		t.Fatal(err)
	}
	recovered("writable", "after read-only")
	load.stop()

	for _, l := range load.summary() {
		t.Log(l)
	}
	// Between faults every export succeeds; during them the only answers
	// are an acknowledgement or a retryable refusal.
	for _, phase := range []string{"before", "after disk full", "after read-only"} {
		for o, n := range load.outcomes(phase) {
			if o != "200" {
				t.Errorf("%s: %d exports answered %s: %s", phase, n, o, tail(load.exampleBody(phase, o), 300))
			}
		}
	}
	for _, phase := range []string{"disk full", "space freed", "read-only", "writable"} {
		for o, n := range load.outcomes(phase) {
			if o != "200" && o != "503 Retry-After" && o != "429 Retry-After" {
				t.Errorf("%s: %d exports answered %s (want 200, or 503/429 with Retry-After): %s", phase, n, o, tail(load.exampleBody(phase, o), 300))
			}
		}
	}
	if ready := do(client, http.MethodGet, "http://"+srv.UI+"/readyz", nil, ""); ready.code != http.StatusOK {
		t.Errorf("after the faults: /readyz %d %s; want 200", ready.code, ready.body)
	}
	if strings.Contains(srv.Log(), "panic") {
		t.Errorf("server log mentions a panic:\n%s", srv.LogTail(4000))
	}
	srv.Stop(t)

	// The engine reopens the data dir that went through both faults, and
	// holds every acknowledged span exactly once.
	acked := load.ackedIDs()
	ok := load.checkStored(t, dataDir, spansPerExport)
	t.Logf("acknowledged exports: %d of %d sent (%d spans), all stored exactly once: %v",
		len(acked), load.sent(), len(acked)*spansPerExport, ok)
}
