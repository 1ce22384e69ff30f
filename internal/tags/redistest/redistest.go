// Package redistest starts a throwaway redis-server on loopback for tests,
// the way httptest starts an HTTP server: each Server has its own port,
// data directory and process, stopped when the test ends.
//
// Set GRAYGATE_SKIP_REDIS=1 to skip tests that need it. Otherwise a missing
// redis-server binary fails the test with the install command, because a
// skipped integration test would hide the very failures it exists to catch.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/testport"
)

// SkipEnv names the environment variable that skips Redis tests when "1".
const SkipEnv = "GRAYGATE_SKIP_REDIS"

// startTimeout bounds how long a start may take before the test fails.
const startTimeout = 10 * time.Second

// Server is one redis-server process. Its methods must be called from the
// test's goroutine, except Addr and Stop, which are safe anywhere.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int

	cmd    *exec.Cmd
	exited chan struct{}
}

// Start starts redis-server on a free loopback port, waits until it answers
// PING and registers Stop with t.Cleanup. The server persists nothing.
func Start(t testing.TB) *Server {
	t.Helper()
	if os.Getenv(SkipEnv) == "1" {
		t.Skipf("%s=1: skipping a test that needs redis-server", SkipEnv)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not on PATH: install it with `apt-get install -y redis-server` "+
			"(scripts/redis.sh does this), or set %s=1 to skip Redis tests", SkipEnv)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	t.Cleanup(s.Stop)
	// A free port can be taken between closing the probe listener and
	// redis binding it; try a few.
	var last error
	for range 3 {
		if s.port, err = freePort(); err != nil {
			t.Fatalf("redistest: find a free port: %v", err)
		}
		if last = s.start(); last == nil {
			return s
		}
	}
	t.Fatalf("redistest: %v", last)
	return nil
}

// Addr returns host:port for clients.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Stop kills the server (SIGKILL: an outage, not a shutdown) and waits for
// it to exit. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Restart stops the server if it runs and starts a new, empty one on the
// same port.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		s.t.Fatalf("redistest: restart: %v", err)
	}
}

func (s *Server) start() error {
	logPath := filepath.Join(s.dir, "redis.log")
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", s.dir,
		"--logfile", logPath,
	)
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	deadline := time.Now().Add(startTimeout)
	for {
		if ping(s.Addr()) == nil {
			s.cmd, s.exited = cmd, exited
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on port %d exited at start; log:\n%s", s.port, tail(logPath))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server on port %d did not answer PING within %s; log:\n%s", s.port, startTimeout, tail(logPath))
		}
	}
}

// ping sends an inline PING and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// freePort is a port that stays usable across Restart (see testport).
func freePort() (int, error) { return testport.Pick() }

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
