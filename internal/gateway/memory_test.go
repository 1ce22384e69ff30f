//go:build !race

// This test measures the process's resident set, which the race detector's
// shadow memory makes meaningless; scripts/test.sh runs it in a separate
// invocation without -race.

package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// vm returns a field of /proc/self/status in bytes ("VmRSS", "VmHWM").
func vm(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("parse %s %q: %v", field, rest, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// TestMemoryIdentitiesThroughListener sends requests with distinct
// 256-byte X-User-Id values through the gateway's real listener, on keep-
// alive connections, to a route limited per identity with the default
// bounds (16 MiB of buckets), far more ids than the budget holds. Every
// fresh id is served (its bucket is new); alice, who spent her only token,
// is refused every time she comes back, so her bucket survives the
// rotation; and the peak resident set of the whole process (gateway,
// upstream and clients) grows by less than 64 MiB.
func TestMemoryIdentitiesThroughListener(t *testing.T) {
	if os.Getenv("GRAYGATE_MEMORY_CHILD") != "1" {
		// Measured in a process of its own: the heap that earlier tests
		// of this binary left behind would pace the GC, and so the peak.
		cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryIdentitiesThroughListener$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "GRAYGATE_MEMORY_CHILD=1")
		out, err := cmd.CombinedOutput()
		t.Logf("the measuring process:\n%s", out)
		switch {
		case err != nil:
			t.Fatalf("the measuring process failed: %v", err)
		case bytes.Contains(out, []byte("--- SKIP")):
			t.Skip("the measuring process skipped")
		case !bytes.Contains(out, []byte("--- PASS: TestMemoryIdentitiesThroughListener")):
			t.Fatal("the measuring process did not run the test")
		}
		return
	}
	const (
		ids     = 100_000 // the budget holds about 33,800 of them
		clients = 8
		growMax = 64 << 20
	)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer be.Close()
	e := start(t, `
default_upstream: be
upstreams:
  be: {instances: [{addr: "`+strings.TrimPrefix(be.URL, "http://")+`"}]}
limits:
  rate_limit: {rps: 0.001, burst: 1, per_identity: true}
`, "")
	addr := strings.TrimPrefix(e.data, "http://")
	if a, err := e.get("/", "X-User-Id", "alice"); err != nil || a.status != 200 {
		t.Fatalf("alice's first request: %+v %v", a, err)
	}
	runtime.GC()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
	base := vm(t, "VmRSS")

	var next, served, aliceRefused atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			id := bytes.Repeat([]byte{'u'}, 256)
			req := make([]byte, 0, 512)
			for {
				n := next.Add(1) - 1
				if n >= ids {
					return
				}
				strconv.AppendInt(id[:0], n, 10)
				req = append(append(append(req[:0], "GET / HTTP/1.1\r\nHost: gw\r\nX-User-Id: "...), id...), "\r\n\r\n"...)
				alice := n%5000 == 4999
				if alice {
					req = append(req[:0], "GET / HTTP/1.1\r\nHost: gw\r\nX-User-Id: alice\r\n\r\n"...)
				}
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				if _, err := c.Write(req); err != nil {
					errs <- err
					return
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					errs <- fmt.Errorf("request %d: %w", n, err)
					return
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch {
				case err != nil:
					errs <- fmt.Errorf("request %d body: %w", n, err)
					return
				case alice && resp.StatusCode == 429:
					aliceRefused.Add(1)
				case alice:
					errs <- fmt.Errorf("alice's request %d: %d, want 429: her bucket was evicted", n, resp.StatusCode)
					return
				case resp.StatusCode != 200:
					errs <- fmt.Errorf("request %d: status %d", n, resp.StatusCode)
					return
				default:
					served.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	peak := vm(t, "VmHWM")
	runtime.GC()
	debug.FreeOSMemory()
	after := vm(t, "VmRSS")
	t.Logf("%d requests (%d fresh ids served, alice refused %d times) in %v; RSS %.1f MiB before, %.1f after, peak %.1f",
		ids, served.Load(), aliceRefused.Load(), elapsed.Round(time.Millisecond), mb(base), mb(after), mb(peak))
	if want := int64(ids / 5000); aliceRefused.Load() != want {
		t.Errorf("alice refused %d times, want %d", aliceRefused.Load(), want)
	}
	if peak-base > growMax {
		t.Errorf("peak RSS grew by %.1f MiB, over %d MiB", mb(peak-base), growMax>>20)
	}
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }
