// Package etcdtest runs a real single-member etcd server on loopback for
// integration tests: on free ports, with its data in a test's temporary
// directory, and with Stop (SIGKILL) and Restart on the same ports and data
// so that tests can cause an outage.
//
// The server binary is "etcd" from PATH, or the path in GRAYGATE_ETCD.
// Without it a test fails and says how to install it (apt-get install
// etcd-server), unless GRAYGATE_SKIP_ETCD=1, which skips it instead.
//
// The server dies with the test: it is killed in t.Cleanup, and on Linux
// also when the test process dies (PR_SET_PDEATHSIG), so no etcd outlives a
// crashed or timed-out test binary.
package etcdtest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/graygate/graygate/internal/testport"
	"github.com/graygate/graygate/internal/testproc"
)

// startTimeout bounds how long a start or restart may take to become
// healthy.
const startTimeout = 30 * time.Second

// Config changes how the server is started. The zero value serves plain
// HTTP/2 without authentication.
type Config struct {
	// CertFile and KeyFile, PEM, serve the client port over TLS.
	CertFile, KeyFile string
	// ClientCAFile, PEM, makes the server require client certificates
	// signed by it.
	ClientCAFile string
	// ClientTLS is what the test's own clients (Client, and the health
	// check) use to connect when the server speaks TLS.
	ClientTLS *tls.Config
}

// Server is one etcd process. Its methods fail the test that started it on
// error. It is not safe for concurrent use.
type Server struct {
	t          testing.TB
	cfg        Config
	bin        string
	dataDir    string
	logPath    string
	clientPort int
	peerPort   int

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// Binary returns the etcd binary to run, or fails (or skips) t with how to
// get one.
func Binary(t testing.TB) string {
	t.Helper()
	if os.Getenv("GRAYGATE_SKIP_ETCD") == "1" {
		t.Skip("GRAYGATE_SKIP_ETCD=1: skipping a test that needs a real etcd server")
	}
	if p := os.Getenv("GRAYGATE_ETCD"); p != "" {
		return p
	}
	p, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatalf("this test needs the etcd server binary, which is not in PATH (%v): install it with `apt-get install -y etcd-server` (Debian/Ubuntu), set GRAYGATE_ETCD to its path, or set GRAYGATE_SKIP_ETCD=1 to skip etcd tests", err)
	}
	return p
}

// Start starts etcd on free loopback ports with a fresh data directory and
// waits until it is healthy. The server is killed when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartConfig(t, Config{})
}

// StartConfig is Start with a Config.
func StartConfig(t testing.TB, cfg Config) *Server {
	t.Helper()
	s := &Server{
		t:       t,
		cfg:     cfg,
		bin:     Binary(t),
		dataDir: filepath.Join(t.TempDir(), "etcd"),
	}
	s.logPath = s.dataDir + ".log"
	t.Cleanup(s.kill)
	// A free port can be taken between its probe and etcd binding it; the
	// first start tries fresh ports a few times (a restart must keep them).
	var err error
	for range 3 {
		s.clientPort, s.peerPort = freePort(t), freePort(t)
		if err = s.tryStart(); err == nil {
			return s
		}
		if err := os.RemoveAll(s.dataDir); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal(err)
	return nil
}

// Endpoint is the client address, "127.0.0.1:PORT".
func (s *Server) Endpoint() string { return "127.0.0.1:" + strconv.Itoa(s.clientPort) }

// URL returns the graygate store URL etcd://127.0.0.1:PORT/prefix.
func (s *Server) URL(prefix string) string {
	return "etcd://" + s.Endpoint() + "/" + strings.TrimPrefix(prefix, "/")
}

// ClientConfig returns a client configuration for the server, to which a
// test can add credentials.
func (s *Server) ClientConfig() clientv3.Config {
	return clientv3.Config{
		Endpoints:   []string{s.scheme() + s.Endpoint()},
		DialTimeout: 2 * time.Second,
		TLS:         s.cfg.ClientTLS,
		Logger:      zap.NewNop(),
	}
}

func (s *Server) scheme() string {
	if s.cfg.CertFile != "" {
		return "https://"
	}
	return "http://"
}

// Client returns a new client of the server, closed when t ends.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(s.ClientConfig())
	if err != nil {
		t.Fatalf("etcd client for %s: %v", s.Endpoint(), err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Stop kills the server with SIGKILL, as a crash or a power cut would, and
// waits until it is gone. Its data directory is kept for Restart.
func (s *Server) Stop() {
	s.t.Helper()
	s.kill()
}

// Restart starts the server again on the same ports and data directory and
// waits until it is healthy.
func (s *Server) Restart() {
	s.t.Helper()
	s.kill()
	s.start()
}

// Backup stops the server, copies its data directory aside, as an
// operator's file-level backup would, and starts it again. It returns the
// copy, for Restore.
func (s *Server) Backup() string {
	s.t.Helper()
	s.kill()
	dir := filepath.Join(s.t.TempDir(), "etcd-backup")
	if err := copyDir(dir, s.dataDir); err != nil {
		s.t.Fatalf("back up etcd: %v", err)
	}
	s.start()
	return dir
}

// Restore stops the server, replaces its data directory with a copy made
// by Backup and starts it again: etcd comes back with the keys and the
// revision it had when the copy was made, and the same cluster and member
// ids.
func (s *Server) Restore(backup string) {
	s.t.Helper()
	s.kill()
	if err := os.RemoveAll(s.dataDir); err != nil {
		s.t.Fatalf("restore etcd: %v", err)
	}
	if err := copyDir(s.dataDir, backup); err != nil {
		s.t.Fatalf("restore etcd: %v", err)
	}
	s.start()
}

// copyDir copies the tree src to dst, which must not exist, with
// directories private to the owner as etcd wants its data directory.
func copyDir(dst, src string) error {
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		return err
	}
	return filepath.WalkDir(dst, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		return os.Chmod(path, 0o700)
	})
}

// Log returns what the server wrote so far, for failure messages.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}

func (s *Server) start() {
	s.t.Helper()
	if err := s.tryStart(); err != nil {
		s.t.Fatal(err)
	}
}

// tryStart starts the server and waits until it is healthy.
func (s *Server) tryStart() error {
	peer := fmt.Sprintf("http://127.0.0.1:%d", s.peerPort)
	client := s.scheme() + s.Endpoint()
	args := []string{
		"--name", "etcdtest",
		"--data-dir", s.dataDir,
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", "etcdtest=" + peer,
		"--initial-cluster-state", "new",
		"--initial-cluster-token", "etcdtest",
		// A lone member elects itself after one election timeout; keep
		// it short so that starts and restarts take milliseconds.
		"--heartbeat-interval", "20",
		"--election-timeout", "200",
		"--logger", "zap",
		"--log-outputs", "stderr",
	}
	if s.cfg.CertFile != "" {
		args = append(args, "--cert-file", s.cfg.CertFile, "--key-file", s.cfg.KeyFile)
	}
	if s.cfg.ClientCAFile != "" {
		args = append(args, "--client-cert-auth", "--trusted-ca-file", s.cfg.ClientCAFile)
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("etcd log: %w", err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "\n=== %s %s\n", s.bin, strings.Join(args, " "))
	cmd := exec.Command(s.bin, args...)
	cmd.Env = env()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	if err := s.waitHealthy(exited); err != nil {
		s.kill()
		return fmt.Errorf("etcd on %s: %v\n--- etcd log (tail) ---\n%s", s.Endpoint(), err, tail(s.Log(), 40))
	}
	return nil
}

// env is the test's environment without ETCD_* settings, which etcd reads
// as flags, plus what the server needs on this architecture: etcd 3.4
// refuses to start on architectures other than amd64 and ppc64le unless
// ETCD_UNSUPPORTED_ARCH names the architecture.
func env() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") && !strings.HasPrefix(kv, "ETCDCTL_") {
			out = append(out, kv)
		}
	}
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "ppc64le" {
		out = append(out, "ETCD_UNSUPPORTED_ARCH="+runtime.GOARCH)
	}
	return out
}

// waitHealthy polls the member's status until it has a leader, the process
// exits, or startTimeout passes. Status needs no credentials, so this
// works with authentication enabled.
func (s *Server) waitHealthy(exited <-chan struct{}) error {
	cli, err := clientv3.New(s.ClientConfig())
	if err != nil {
		return err
	}
	defer cli.Close()
	deadline := time.Now().Add(startTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("etcd exited during startup")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		resp, err := cli.Status(ctx, s.scheme()+s.Endpoint())
		cancel()
		switch {
		case err != nil:
			last = err
		case resp.Leader == 0:
			last = errors.New("no leader yet")
		default:
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not healthy within %v: %v", startTimeout, last)
}

// Freeze stops the process (SIGSTOP) without closing its sockets: requests
// are taken by the kernel and never answered, as by a hung etcd, until
// the returned function resumes it (SIGCONT). The test's end resumes it
// too.
func (s *Server) Freeze() (thaw func()) {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		s.t.Fatal("Freeze: etcd is not running")
	}
	return testproc.Freeze(s.t, cmd.Process.Pid)
}

// kill stops the process, if running, and waits for it.
func (s *Server) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		s.t.Errorf("etcd pid %d did not exit within 10s of SIGKILL", cmd.Process.Pid)
	}
}

// freePort is a port that stays usable across Restart (see testport).
func freePort(t testing.TB) int {
	t.Helper()
	port, err := testport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
