// Package promtest runs a real Prometheus server on loopback for
// integration tests: Debian's prometheus binary, a scrape interval of 1s
// over the targets a test names, its data in the test's temporary
// directory, and a bounded wait for it to be ready. It is stopped when the
// test ends (and on Linux also when the test process dies).
//
// The binary is "prometheus" from PATH, or the path in GRAYGATE_PROMETHEUS.
// Without it a test fails and says how to install it (scripts/prometheus.sh,
// or apt-get install prometheus), unless GRAYGATE_SKIP_PROMETHEUS=1, which
// skips it instead.
package promtest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/testport"
)

// startTimeout bounds how long the server may take to become ready.
const startTimeout = 60 * time.Second

// Server is one prometheus process.
type Server struct {
	t       testing.TB
	port    int
	logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// Binary returns the prometheus binary to run, or fails (or skips) t with
// how to get one.
func Binary(t testing.TB) string {
	t.Helper()
	if os.Getenv("GRAYGATE_SKIP_PROMETHEUS") == "1" {
		t.Skip("GRAYGATE_SKIP_PROMETHEUS=1: skipping a test that needs a real prometheus server")
	}
	if p := os.Getenv("GRAYGATE_PROMETHEUS"); p != "" {
		return p
	}
	p, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("this test needs the prometheus server binary, which is not in PATH (%v): run scripts/prometheus.sh (or apt-get install -y prometheus), set GRAYGATE_PROMETHEUS to its path, or set GRAYGATE_SKIP_PROMETHEUS=1 to skip these tests", err)
	}
	return p
}

// Start starts prometheus on a free loopback port, scraping the /metrics
// of each target ("127.0.0.1:PORT") every second as job "graygate", and
// waits until it is ready. It is killed when t ends.
func Start(t testing.TB, targets ...string) *Server {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: graygate
    scrape_interval: 1s
    scrape_timeout: 900ms
    metrics_path: /metrics
    static_configs:
      - targets: [%s]
`, strings.Join(quoted, ", "))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, port: freePort(t), logPath: filepath.Join(dir, "prometheus.log")}
	logf, err := os.Create(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+s.Addr(),
		"--storage.tsdb.retention.time=1h",
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(s.Stop)
	if err := s.waitReady(); err != nil {
		s.Stop()
		t.Fatalf("prometheus on %s: %v\n--- log ---\n%s", s.Addr(), err, s.Log())
	}
	return s
}

// Addr is "127.0.0.1:PORT".
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// URL is the HTTP API's base URL.
func (s *Server) URL() string { return "http://" + s.Addr() }

// Log returns what the server wrote.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}

func (s *Server) waitReady() error {
	cli := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(startTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return fmt.Errorf("prometheus exited during startup")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/-/ready", nil)
		resp, err := cli.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Errorf("/-/ready answered %d", resp.StatusCode)
		} else {
			last = err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("not ready within %v: %v", startTimeout, last)
}

// Stop kills the server and waits for it to exit.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.t.Errorf("prometheus pid %d did not exit within 10s of SIGKILL", cmd.Process.Pid)
	}
}

// freePort is a port that stays usable across a restart (see testport).
func freePort(t testing.TB) int {
	t.Helper()
	port, err := testport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	return port
}
