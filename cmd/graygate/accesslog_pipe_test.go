//go:build unix

package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestAccessLogBrokenPipeKeepsServing runs graygate serve with the access
// log on its standard output, a pipe (as under a container runtime, journald
// or `| tee`), and closes the pipe's reader. The gateway must keep serving:
// Go kills a program that writes to a broken pipe on its standard output
// unless SIGPIPE is handled, so the next log line used to stop the gateway
// without a word. The lost lines are counted in
// graygate_access_log_dropped_total, and the log on standard error says
// that writes fail.
func TestAccessLogBrokenPipeKeepsServing(t *testing.T) {
	be := backend(t, "stable")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	stderr := &bytes.Buffer{}
	cmd := exec.Command(binary, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--admin-token", "tok",
		"--data-dir", t.TempDir(), "--default-upstream", be, "--access-log")
	cmd.Stdout = w
	cmd.Stderr = &lockedWriter{w: stderr, mu: &mu}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close() // the child holds the only write end
	// exited is closed once the process is gone; waitErr says how.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	serving := waitServing(t, func() string { mu.Lock(); defer mu.Unlock(); return stderr.String() })
	data, admin := serving.Listen, serving.AdminListen
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(url string) (int, string, error) {
		resp, err := client.Get(url)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if code, body, err := get("http://" + admin + "/healthz"); err == nil && code == 200 && body == "ok\n" {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("graygate did not become healthy:\n%s", stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// One request, and its line read from the pipe: the log is flowing.
	if code, _, err := get("http://" + data + "/first"); err != nil || code != 200 {
		t.Fatalf("first request: %d %v", code, err)
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(r).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if !strings.Contains(l, `"path":"/first"`) {
			t.Fatalf("first access log line %q", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no access log line on standard output")
	}
	// The log's reader goes away.
	r.Close()

	for i := range 20 {
		code, _, err := get("http://" + data + "/after-" + strconv.Itoa(i))
		if err != nil || code != 200 {
			select {
			case <-exited:
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("graygate exited (%v) once its access log's reader was gone:\n%s", waitErr, stderr)
			case <-time.After(time.Second):
			}
			t.Fatalf("request %d after the log's reader was gone: %d %v", i, code, err)
		}
		time.Sleep(10 * time.Millisecond) // let the log flush between requests
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		_, body, err := get("http://" + admin + "/metrics")
		v := -1.0
		for _, l := range strings.Split(body, "\n") {
			if s, ok := strings.CutPrefix(l, "graygate_access_log_dropped_total "); ok {
				v, _ = strconv.ParseFloat(s, 64)
			}
		}
		if err == nil && v >= 1 {
			break
		}
		select {
		case <-exited:
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("graygate exited (%v) once its access log's reader was gone:\n%s", waitErr, stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("graygate_access_log_dropped_total = %v (%v), want at least 1 after 20 requests logged into a broken pipe", v, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if l := stderr.String(); !strings.Contains(l, "log write failed") || !strings.Contains(l, "broken pipe") {
		t.Errorf("the log does not say that access log writes fail:\n%s", l)
	}
	select {
	case <-exited:
		t.Fatalf("graygate exited: %v", waitErr)
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
}
