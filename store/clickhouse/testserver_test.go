package clickhouse

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serverStartTimeout bounds how long a test waits for the native port.
const serverStartTimeout = 60 * time.Second

// clickHouseServerCommand finds the server binary: clickhouse-server on PATH
// or in Debian's /usr/sbin (not on a plain user's PATH), else the single
// `clickhouse` binary of upstream packages with its "server" subcommand.
func clickHouseServerCommand() (bin string, args []string, err error) {
	if p, err := exec.LookPath("clickhouse-server"); err == nil {
		return p, nil, nil
	}
	for _, p := range []string{"/usr/sbin/clickhouse-server", "/usr/bin/clickhouse-server"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil, nil
		}
	}
	if p, err := exec.LookPath("clickhouse"); err == nil {
		return p, []string{"server"}, nil
	}
	return "", nil, errors.New("clickhouse-server not found on PATH, in /usr/sbin or /usr/bin: install the clickhouse-server package " +
		"(apt-get install clickhouse-server; .ci/run installs it) to run the server transport tests")
}

// freePort asks the kernel for a free TCP port on 127.0.0.1. Another process
// could take it before the server binds it; the start then fails loudly.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pick a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

const testServerConfig = `<?xml version="1.0"?>
<yandex>
    <logger>
        <level>information</level>
        <log>{{dir}}/log/server.log</log>
        <errorlog>{{dir}}/log/server.err.log</errorlog>
        <size>10M</size>
        <count>1</count>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <tcp_port>{{port}}</tcp_port>
    <!-- no http_port / interserver_http_port: the tests speak native only -->
    <path>{{dir}}/data/</path>
    <tmp_path>{{dir}}/data/tmp/</tmp_path>
    <user_files_path>{{dir}}/data/user_files/</user_files_path>
    <format_schema_path>{{dir}}/data/format_schemas/</format_schema_path>
    <users_config>{{dir}}/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <mark_cache_size>268435456</mark_cache_size>
    <uncompressed_cache_size>268435456</uncompressed_cache_size>
</yandex>
`

const testServerUsers = `<?xml version="1.0"?>
<yandex>
    <profiles><default></default></profiles>
    <users>
        <default>
            <password></password>
            <networks><ip>127.0.0.1</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
    </users>
    <quotas><default></default></quotas>
</yandex>
`

// startClickHouseServer runs a private ClickHouse server for one test:
// loopback only, a free native port, every file under t.TempDir(). It
// returns the native address, stop (idempotent; also run at cleanup) and
// restart, which stops the server if it runs and starts it again on the
// same port and data dir. A missing binary fails the test: the server
// transport must not go untested silently.
func startClickHouseServer(t *testing.T) (addr string, stop func(), restart func()) {
	t.Helper()
	bin, args, err := clickHouseServerCommand()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	port := freePort(t)
	addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for _, sub := range []string{"log", "data/tmp", "data/user_files", "data/format_schemas"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	config := strings.NewReplacer("{{dir}}", dir, "{{port}}", strconv.Itoa(port)).Replace(testServerConfig)
	configPath := filepath.Join(dir, "config.xml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "users.xml"), []byte(testServerUsers), 0o644); err != nil {
		t.Fatal(err)
	}
	args = append(args, "--config-file="+configPath)

	var (
		cmd    *exec.Cmd
		exited chan struct{} // closed when cmd has been waited for
		runs   int
	)
	stop = func() {
		if cmd == nil {
			return
		}
		// SIGKILL, like a crash or an OOM kill: the client must cope with
		// connections cut without a goodbye, and the test does not wait for
		// a graceful shutdown.
		_ = cmd.Process.Kill()
		<-exited
		cmd = nil
	}
	start := func() {
		t.Helper()
		runs++
		out, err := os.Create(filepath.Join(dir, "log", fmt.Sprintf("stdout-%d.log", runs)))
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		c := exec.Command(bin, args...)
		c.Dir = dir
		c.Stdout, c.Stderr = out, out
		// Pdeathsig: the server dies with the test binary even if the test
		// process is killed before cleanup runs.
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			t.Fatalf("start %s: %v", bin, err)
		}
		done := make(chan struct{})
		var waitErr error
		go func() { waitErr = c.Wait(); close(done) }()
		cmd, exited = c, done

		deadline := time.Now().Add(serverStartTimeout)
		for {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				conn.Close()
				return
			}
			select {
			case <-done:
				cmd = nil
				t.Fatalf("clickhouse-server exited before listening on %s: %v\n%s", addr, waitErr, serverLogTail(dir))
			default:
			}
			if time.Now().After(deadline) {
				stop()
				t.Fatalf("clickhouse-server not listening on %s after %s\n%s", addr, serverStartTimeout, serverLogTail(dir))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	restart = func() {
		t.Helper()
		stop()
		start()
	}
	t.Cleanup(stop)
	start()
	return addr, stop, restart
}

// serverLogTail returns the last lines of the server's error log and of its
// stdout/stderr, for a failure message.
func serverLogTail(dir string) string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(dir, "log", "stdout-*.log"))
	for _, name := range append([]string{filepath.Join(dir, "log", "server.err.log")}, files...) {
		data, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 30 {
			lines = lines[len(lines)-30:]
		}
		fmt.Fprintf(&b, "--- tail of %s ---\n%s\n", name, strings.Join(lines, "\n"))
	}
	return b.String()
}
