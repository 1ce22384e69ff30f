package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/listener"
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

// migrateReqPath is the sysctl that makes Linux (5.14 and later) move the
// connections in a closing SO_REUSEPORT listener's accept queue to another
// listener of the group instead of resetting them.
const migrateReqPath = "/proc/sys/net/ipv4/tcp_migrate_req"

// TestReusePortAcceptQueue pins down the one race a SO_REUSEPORT handover
// leaves (see the package doc), deterministically: requests whose
// connections are still in the old listener's accept queue when it closes
// are reset, unless net.ipv4.tcp_migrate_req=1, when the kernel moves them
// to the new listener and the new proxy answers every one. The old
// listener never accepts here, which is the race's window held open; the
// end-to-end restart with continuous new connections is
// cmd/graygate's TestReusePortHandover.
func TestReusePortAcceptQueue(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("SO_REUSEPORT handover is Linux only")
	}
	raw, err := os.ReadFile(migrateReqPath)
	if err != nil {
		t.Skipf("net.ipv4.tcp_migrate_req is not available: %v", err)
	}
	was := strings.TrimSpace(string(raw))
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer backend.Close()
	d := staticDecider{Group: "stable", Target: poolOf("stable", addrOf(backend))}
	tests := []struct {
		migrate string
		// wantServed is whether the queued requests are answered by the
		// new listener (true) or reset (false).
		wantServed bool
	}{
		{"0", false},
		{"1", true},
	}
	for _, tt := range tests {
		t.Run("tcp_migrate_req="+tt.migrate, func(t *testing.T) {
			if tt.migrate != was {
				if err := os.WriteFile(migrateReqPath, []byte(tt.migrate), 0o644); err != nil {
					t.Skipf("cannot set net.ipv4.tcp_migrate_req=%s (it is %s): %v", tt.migrate, was, err)
				}
				defer func() {
					if err := os.WriteFile(migrateReqPath, []byte(was), 0o644); err != nil {
						t.Errorf("restore net.ipv4.tcp_migrate_req=%s: %v", was, err)
					}
				}()
			}
			ln1, err := listener.Listen("tcp", "127.0.0.1:0", true)
			if err != nil {
				t.Fatal(err)
			}
			addr := ln1.Addr().String()
			// Connections that complete their handshake with the old
			// listener, each with a request sent, and are never accepted.
			const queued = 8
			conns := make([]net.Conn, queued)
			for i := range conns {
				c, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if _, err := fmt.Fprintf(c, "GET /%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", i); err != nil {
					t.Fatal(err)
				}
				conns[i] = c
			}
			ln2, err := listener.Listen("tcp", addr, true)
			if err != nil {
				t.Fatalf("second Listen on %s: %v", addr, err)
			}
			var served atomic.Int64
			startProxyOn(t, ln2, Options{OnDone: func(*Done) { served.Add(1) }}, d)
			if err := ln1.Close(); err != nil {
				t.Fatal(err)
			}
			var ok, reset int
			for i, c := range conns {
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				switch {
				case err == nil && resp.StatusCode == 200:
					ok++
					resp.Body.Close()
				case err != nil && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)):
					reset++
				default:
					t.Errorf("queued request %d: %v, %v", i, resp, err)
				}
			}
			// New connections go to the new listener (this also makes sure
			// its Serve is running before the cleanup's Shutdown).
			resp, err := httpClient(t).Get("http://" + addr + "/new")
			if err != nil {
				t.Fatalf("a new connection after the handover: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("a new connection after the handover: %d", resp.StatusCode)
			}
			served.Add(-1)
			if tt.wantServed && (ok != queued || served.Load() != queued) {
				t.Errorf("with tcp_migrate_req=1: %d of %d queued requests answered (%d served by the new proxy), %d reset", ok, queued, served.Load(), reset)
			}
			if !tt.wantServed && reset != queued {
				t.Errorf("with tcp_migrate_req=0: %d of %d queued requests reset, %d answered; the README says they are reset", reset, queued, ok)
			}
		})
	}
}
