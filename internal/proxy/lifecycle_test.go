package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/router"
)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestReusePortHandover is a zero-downtime restart: a second proxy binds the
// same port with SO_REUSEPORT, the first is shut down gracefully, and
// clients sending a steady stream of requests see no failure, while a
// request in flight on the old proxy completes.
func TestReusePortHandover(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("SO_REUSEPORT handover is Linux only")
	}
	release := make(chan struct{})
	slowArrived := make(chan struct{}, 1)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			slowArrived <- struct{}{}
			<-release
		}
		fmt.Fprint(w, "ok")
	}))
	defer backend.Close()
	d := staticDecider{Group: "stable", Target: poolOf("stable", addrOf(backend))}

	ln1, err := listener.Listen("tcp", "127.0.0.1:0", true)
	if err != nil {
		t.Fatal(err)
	}
	addr := ln1.Addr().String()
	var served1, served2 atomic.Int64
	count := func(n *atomic.Int64) func(*router.Decision, int, time.Duration, int64) {
		return func(*router.Decision, int, time.Duration, int64) { n.Add(1) }
	}
	old := New(Options{OnDone: count(&served1)}, d, nil)
	oldDone := make(chan error, 1)
	go func() { oldDone <- old.Serve(ln1) }()

	get := func(c *http.Client, path string) error {
		resp, err := c.Get("http://" + addr + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != 200 || string(b) != "ok" {
			return fmt.Errorf("%d %q", resp.StatusCode, b)
		}
		return nil
	}

	// A request in flight on the old proxy across its shutdown.
	slowErr := make(chan error, 1)
	go func() { slowErr <- get(httpClient(t), "/slow") }()
	select {
	case <-slowArrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the slow request never reached the backend")
	}

	// Steady clients, each on one keep-alive connection (opened now, to the
	// only listener there is) that they reopen when the server closes it.
	const workers = 4
	var failures atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := get(c, "/"); err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	waitFor(t, 10*time.Second, "traffic on the old proxy", func() bool { return served1.Load() >= 50 })

	// The new process binds the same port.
	ln2, err := listener.Listen("tcp", addr, true)
	if err != nil {
		t.Fatalf("second Listen on %s: %v", addr, err)
	}
	_, _ = startProxyOn(t, ln2, Options{OnDone: count(&served2)}, d)

	// SIGTERM to the old one.
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- old.Shutdown(ctx)
	}()
	waitFor(t, 10*time.Second, "traffic to move to the new proxy", func() bool { return served2.Load() >= 100 })
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a request still in flight", err)
	default:
	}
	close(release)
	if err := <-slowErr; err != nil {
		t.Errorf("the in-flight request failed: %v", err)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-oldDone; err != nil {
		t.Errorf("old Serve: %v", err)
	}
	after := served2.Load()
	waitFor(t, 10*time.Second, "traffic on the new proxy alone", func() bool { return served2.Load() >= after+100 })
	if n := failures.Load(); n != 0 {
		t.Errorf("%d requests failed during the handover; first: %v", n, firstErr.Load())
	}
	t.Logf("old proxy served %d requests, new %d", served1.Load(), served2.Load())
}

func TestListen(t *testing.T) {
	ln, err := listener.Listen("tcp", "127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := listener.Listen("tcp", ln.Addr().String(), false); err == nil {
		t.Error("a second plain Listen on a bound port succeeded")
	}
	if _, err := listener.Listen("tcp", ln.Addr().String(), true); err == nil {
		t.Error("SO_REUSEPORT joined a socket bound without it")
	} else if runtime.GOOS != "linux" && !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Listen with reusePort on %s: %v, want ErrUnsupported", runtime.GOOS, err)
	}
}
