package main

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestOpenFileLimitKeepsAdminAnswering runs graygate serve under
// `ulimit -n 300` and holds 400 client connections open against it. The
// default proxy.max_client_connections for that limit (64) is served, the
// rest are closed at once; the admin API still answers, a held
// connection's next request still reaches the upstream (a dial), and a
// connection that closes frees a place. Before the cap, accept ran out of
// descriptors: new connections waited in the backlog unanswered, the
// admin API could not accept either, and upstream dials failed.
func TestOpenFileLimitKeepsAdminAnswering(t *testing.T) {
	stable := backend(t, "stable")
	var stderr bytes.Buffer
	var mu sync.Mutex
	cmd := exec.Command("sh", "-c", `ulimit -n 300 && exec "$0" "$@"`, binary, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--admin-token", "tok", "--data-dir", t.TempDir(), "--default-upstream", stable)
	cmd.Stderr = &lockedWriter{w: &stderr, mu: &mu}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd}
	t.Cleanup(func() { p.kill(syscall.SIGKILL) })
	serving := waitServing(t, func() string { mu.Lock(); defer mu.Unlock(); return stderr.String() })
	data, admin := serving.Listen, serving.AdminListen
	waitHealthy(t, admin)

	request := func(c net.Conn) bool {
		c.SetDeadline(time.Now().Add(2 * time.Second))
		defer c.SetDeadline(time.Time{})
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: fd.test\r\n\r\n")); err != nil {
			return false
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200 && string(body) == "stable"
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	answered, unanswered := 0, 0
	for i := 0; i < 400 && unanswered < 400-64; i++ {
		c, err := net.DialTimeout("tcp", data, 2*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		held = append(held, c)
		if request(c) {
			answered++
		} else {
			unanswered++
		}
	}
	if answered != 64 {
		mu.Lock()
		t.Errorf("%d of %d connections were answered, want the default cap for 300 descriptors, 64\n%s", answered, len(held), stderr.String())
		mu.Unlock()
	}
	req, _ := http.NewRequest("GET", "http://"+admin+"/api/v1/status", nil)
	req.Header.Set("Authorization", "Bearer tok")
	client := &http.Client{Timeout: 5 * time.Second}
	if resp, err := client.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("the admin API with 400 connections held: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if !request(held[0]) {
		t.Errorf("a held connection's next request was not answered")
	}
	held[1].Close()
	// Once the gateway has seen it close, a new connection is served.
	deadline := time.Now().Add(5 * time.Second)
	for open := ""; open != "63"; {
		if time.Now().After(deadline) {
			t.Fatalf("graygate_client_connections is %q 5 s after one of 64 closed, want 63", open)
		}
		time.Sleep(20 * time.Millisecond)
		resp, err := http.Get("http://" + admin + "/metrics")
		if err != nil {
			continue
		}
		m, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, l := range strings.Split(string(m), "\n") {
			if v, ok := strings.CutPrefix(l, "graygate_client_connections "); ok {
				open = v
			}
		}
	}
	c, err := net.DialTimeout("tcp", data, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	held = append(held, c)
	if !request(c) {
		t.Errorf("a new connection after one closed was not answered")
	}
	mu.Lock()
	log := stderr.String()
	mu.Unlock()
	if strings.Count(log, "proxy.max_client_connections") != 1 || strings.Contains(log, "too many open files") {
		t.Errorf("want one warning about the cap and no accept failures:\n%s", log)
	}
}

// waitHealthy waits until the admin API's /healthz answers.
func waitHealthy(t *testing.T, admin string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("graygate did not become healthy: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
