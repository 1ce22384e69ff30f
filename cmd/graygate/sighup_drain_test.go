package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSIGHUPWhileDraining sends SIGHUP (a config deploy's reload, a
// closed terminal) to a gateway that is draining after SIGTERM, with a slow
// request in flight, with and without --config. The SIGHUP must not kill the
// process: the slow request gets its whole answer and the gateway exits 0
// once drained. Without --config a SIGHUP while serving is ignored too.
func TestSIGHUPWhileDraining(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		io.WriteString(w, "slow-done")
	}))
	defer slow.Close()
	defer close(release)
	up := strings.TrimPrefix(slow.URL, "http://")
	for _, withConfig := range []bool{true, false} {
		name := "without --config"
		if withConfig {
			name = "with --config"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"--data-dir", filepath.Join(dir, "data"), "--default-upstream", up}
			if withConfig {
				cfg := filepath.Join(dir, "graygate.yaml")
				os.WriteFile(cfg, []byte("lifecycle: {drain_delay: 300ms, shutdown_timeout: 10s}\n"), 0o644)
				args = append(args, "--config", cfg)
			}
			p := startServe(t, args...)
			if !withConfig {
				// While serving, too, a SIGHUP without a config file to
				// reload is ignored, not the end of the process.
				if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
					t.Fatal(err)
				}
				p.waitLog(t, "SIGHUP ignored")
			}
			type result struct {
				status int
				body   string
				err    error
			}
			done := make(chan result, 1)
			go func() {
				c := &http.Client{Timeout: 15 * time.Second}
				resp, err := c.Get("http://" + p.data + "/slow")
				if err != nil {
					done <- result{err: err}
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				done <- result{resp.StatusCode, string(b), err}
			}()
			time.Sleep(200 * time.Millisecond) // the request reaches the upstream
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			// Stopping: /readyz fails (503 while drain_delay runs, then the
			// admin listener is closed).
			for deadline := time.Now().Add(5 * time.Second); ; {
				resp, err := http.Get("http://" + p.admin + "/readyz")
				if err != nil {
					break
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("/readyz still answers 200 after SIGTERM")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			release <- struct{}{}
			select {
			case r := <-done:
				if r.err != nil || r.status != 200 || r.body != "slow-done" {
					t.Errorf("request in flight across SIGTERM and SIGHUP = %d %q %v, want 200 slow-done", r.status, r.body, r.err)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("the request in flight did not finish")
			}
			exited := make(chan error, 1)
			go func() { exited <- p.cmd.Wait() }()
			select {
			case err := <-exited:
				if err != nil {
					p.mu.Lock()
					defer p.mu.Unlock()
					t.Errorf("graygate exited with %v after SIGTERM then SIGHUP, want 0 once drained\n%s", err, p.stderr)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("graygate did not exit")
			}
		})
	}
}
