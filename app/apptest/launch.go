package apptest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The process harness below returns errors instead of failing a test, so
// cmd/bench drives the real server binary with the same code as the tests
// (StartProcess, ServerBinary wrap it).

// BuildServer compiles cmd/server into dir and returns the binary's path.
// It builds from the module's root, found from the working directory up.
func BuildServer(ctx context.Context, dir string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "tokenpath-server")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/server")
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/server: %w\n%s", err, msg)
	}
	return out, nil
}

// RepoRoot finds the module root (the go.mod of
// github.com/tokenpath/tokenpath) from the working directory up.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/tokenpath/tokenpath\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run inside the tokenpath repository (no go.mod found above the working directory)")
		}
		dir = parent
	}
}

// Launch runs the binary bin (BuildServer) with opt (DataDir and
// DatabaseURL are required here) and returns once it logged "tokenpath
// ready", with the addresses its listeners bound. On failure the process
// is killed and the error carries its log's tail.
func Launch(ctx context.Context, bin string, opt ProcessOptions) (*Process, error) {
	if opt.DataDir == "" || opt.DatabaseURL == "" {
		return nil, errors.New("launch: a data dir and a database URL are needed")
	}
	cmd := exec.Command(bin)
	cmd.Dir = opt.Dir
	cmd.Env = append(os.Environ(),
		"TOKENPATH_DATA_DIR="+opt.DataDir, "TOKENPATH_DATABASE_URL="+opt.DatabaseURL, "TOKENPATH_BOOTSTRAP_KEY="+Key,
		"TOKENPATH_HTTP_ADDR=127.0.0.1:0", "TOKENPATH_OTLP_HTTP_ADDR=127.0.0.1:0", "TOKENPATH_OTLP_GRPC_ADDR=127.0.0.1:0",
		"TOKENPATH_LOG_FORMAT=json", "TOKENPATH_LOG_LEVEL=info")
	cmd.Env = append(cmd.Env, opt.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	p := &Process{Cmd: cmd, DataDir: opt.DataDir, DatabaseURL: opt.DatabaseURL, done: make(chan struct{})}
	type addrs struct{ ui, otlpHTTP, otlpGRPC string }
	ready := make(chan addrs, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			p.logMu.Lock()
			if p.log.Len() < 8<<20 {
				p.log.Write(line)
				p.log.WriteByte('\n')
			}
			p.logMu.Unlock()
			var rec struct {
				Msg      string `json:"msg"`
				UI       string `json:"ui"`
				OTLPHTTP string `json:"otlp_http"`
				OTLPGRPC string `json:"otlp_grpc"`
			}
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "tokenpath ready" {
				ready <- addrs{rec.UI, rec.OTLPHTTP, rec.OTLPGRPC}
			}
		}
		p.exitErr = cmd.Wait()
		close(p.done)
	}()
	select {
	case a := <-ready:
		p.UI, p.OTLPHTTP, p.OTLPGRPC = a.ui, a.otlpHTTP, a.otlpGRPC
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("server exited before ready (%v):\n%s", p.exitErr, p.LogTail(4000))
	case <-ctx.Done():
		p.Kill()
		return nil, ctx.Err()
	case <-time.After(90 * time.Second):
		p.Kill()
		return nil, fmt.Errorf("server not ready after 90 s:\n%s", p.LogTail(4000))
	}
}

// Kill kills the process group and waits for the process to exit.
func (p *Process) Kill() {
	select {
	case <-p.done:
	default:
		_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Terminate sends SIGTERM (the server flushes what it acknowledged) and
// waits up to timeout for the process to exit, then kills it. The error is
// an unclean exit or the timeout.
func (p *Process) Terminate(timeout time.Duration) error {
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil && p.Alive() {
		return fmt.Errorf("signal the server: %w", err)
	}
	select {
	case <-p.done:
		if p.exitErr != nil {
			return fmt.Errorf("server exit: %w", p.exitErr)
		}
		return nil
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("server did not stop within %s; killed", timeout)
	}
}

// Memory is a process's resident memory from /proc/<pid>/status, bytes.
type Memory struct {
	RSS, Peak int64 // VmRSS and VmHWM
	File      int64 // RssFile: mapped files, mostly libchdb's code
}

// ReadMemory reads pid's Memory.
func ReadMemory(pid int) (Memory, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return Memory{}, fmt.Errorf("read process status: %w", err)
	}
	var m Memory
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var dst *int64
		switch k {
		case "VmRSS":
			dst = &m.RSS
		case "VmHWM":
			dst = &m.Peak
		case "RssFile":
			dst = &m.File
		default:
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("parse %s %q: %w", k, v, err)
		}
		*dst = kb << 10
	}
	if m.RSS == 0 || m.Peak == 0 {
		return Memory{}, errors.New("no VmRSS or VmHWM in /proc/<pid>/status")
	}
	return m, nil
}
