//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestAccessLogRotation is issue 12, item 5: access_log.path names a file,
// and logrotate's convention works under load. The file is renamed away
// twice while four clients keep sending requests, each time followed by
// SIGUSR1; after the process has stopped, the lines across the three files
// are exactly the requests answered, and a renamed file gets no line after
// the reopen.
func TestAccessLogRotation(t *testing.T) {
	stable := backend(t, "stable")
	dir := t.TempDir()
	logPath := filepath.Join(dir, "access.log")
	cfg := filepath.Join(dir, "graygate.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("default_upstream: %q\naccess_log: {enabled: true, path: %q}\n", stable, logPath)), 0o644)
	p := startServe(t, "--config", cfg, "--data-dir", filepath.Join(dir, "data"))
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	defer client.CloseIdleConnections()

	var answered atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Go(func() {
			for n := 0; n < 20000; n++ { // bounded, whatever happens
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Get(fmt.Sprintf("http://%s/r/%d/%d", p.data, w, n))
				if err != nil {
					t.Errorf("request: %v", err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				answered.Add(1)
			}
		})
	}
	size := func(path string) int64 {
		fi, err := os.Stat(path)
		if err != nil {
			return -1
		}
		return fi.Size()
	}
	// waitFor polls cond against a deadline.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s\n%s", what, p.stderr)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	var rotated []string
	for r := 1; r <= 2; r++ {
		waitFor("lines in "+logPath, func() bool { return size(logPath) > 0 })
		old := fmt.Sprintf("%s.%d", logPath, r)
		if err := os.Rename(logPath, old); err != nil {
			t.Fatal(err)
		}
		rotated = append(rotated, old)
		if err := p.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		// The reopened file gets lines: the reopen is done, and the
		// renamed file is closed to further writes.
		waitFor("the reopened "+logPath, func() bool { return size(logPath) > 0 })
	}
	final := map[string]int64{}
	for _, f := range rotated {
		final[f] = size(f)
	}
	time.Sleep(200 * time.Millisecond) // more traffic into the current file only
	close(stop)
	wg.Wait()
	p.kill(syscall.SIGTERM) // Shutdown flushes the access log
	if p.cmd.ProcessState == nil || !p.cmd.ProcessState.Success() {
		t.Fatalf("graygate did not exit cleanly: %v\n%s", p.cmd.ProcessState, p.stderr)
	}

	lines := 0
	for _, f := range append(rotated, logPath) {
		if f != logPath && size(f) != final[f] {
			t.Errorf("%s grew from %d to %d bytes after the reopen", f, final[f], size(f))
		}
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var line map[string]any
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil || line["status"] != float64(200) {
				t.Fatalf("%s: bad access log line %q: %v", f, sc.Text(), err)
			}
			lines++
		}
		fh.Close()
	}
	if n := answered.Load(); int64(lines) != n || n == 0 {
		t.Fatalf("%d access log lines across %d files for %d answered requests", lines, len(rotated)+1, n)
	}
	t.Logf("%d requests, %d lines across %d files", answered.Load(), lines, len(rotated)+1)
}

// TestAccessLogPathRefused: an access_log.path whose directory does not
// exist is refused the same way everywhere, naming the key and the value,
// whether the log is on or not (--access-log or a later reload would turn
// it on): by validate, by serve at start (which does not start), and by a
// reload, which keeps the running config serving, its access log
// included, and shows the error in the status's last_error.
func TestAccessLogPathRefused(t *testing.T) {
	stable := backend(t, "stable")
	for _, enabled := range []bool{true, false} {
		t.Run(fmt.Sprintf("enabled=%v", enabled), func(t *testing.T) {
			dir := t.TempDir()
			bad := filepath.Join(dir, "missing", "access.log")
			want := fmt.Sprintf("access_log.path: cannot open %q for appending: directory %s does not exist", bad, filepath.Dir(bad))
			good := filepath.Join(dir, "access.log")
			doc := func(path string) string {
				return fmt.Sprintf("default_upstream: %q\naccess_log: {enabled: %v, path: %q}\n", stable, enabled, path)
			}
			badCfg := filepath.Join(dir, "bad.yaml")
			if err := os.WriteFile(badCfg, []byte(doc(bad)), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, code := runCLI(t, nil, "validate", badCfg); code == 0 || !strings.Contains(out, want) {
				t.Errorf("validate = %d %s\nwant a failure saying %s", code, out, want)
			}

			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, binary, "serve", "--config", badCfg, "--listen", "127.0.0.1:0",
				"--admin-listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data0")).CombinedOutput()
			if err == nil || ctx.Err() != nil || !strings.Contains(string(out), want) {
				t.Errorf("serve with the bad path: %v (timed out: %v)\n%s\nwant it to stop at once saying %s", err, ctx.Err() != nil, out, want)
			}

			cfg := filepath.Join(dir, "graygate.yaml")
			if err := os.WriteFile(cfg, []byte(doc(good)), 0o644); err != nil {
				t.Fatal(err)
			}
			p := startServe(t, "--config", cfg, "--data-dir", filepath.Join(dir, "data"))
			if err := os.WriteFile(cfg, []byte(doc(bad)), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			var st map[string]any
			for deadline := time.Now().Add(5 * time.Second); ; {
				st = adminStatus(t, p.admin)
				if st["last_error"] != nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no last_error 5s after the reload: %v", st)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if e, _ := st["last_error"].(string); !strings.Contains(e, want) {
				t.Errorf("last_error = %q, want it to say %s", e, want)
			}
			p.waitLog(t, "config reload failed; the previous config keeps serving")
			if b, err := dataGet(p.data, "u1"); err != nil || b != "stable" {
				t.Errorf("data plane after the refused reload: %q %v", b, err)
			}
			if enabled {
				// The running access log is the old config's, still open.
				for deadline := time.Now().Add(5 * time.Second); ; {
					if b, _ := os.ReadFile(good); strings.Contains(string(b), `"path":"/"`) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("no line in the running access log %s after the refused reload", good)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
}

// adminStatus reads GET /api/v1/status with the test token.
func adminStatus(t *testing.T, admin string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+admin+"/api/v1/status", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}
