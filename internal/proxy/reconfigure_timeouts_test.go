package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/graygate/graygate/internal/listener"
)

// TestReconfigureAppliesClientTimeouts: proxy.read_header_timeout and
// proxy.client_idle_timeout change without a restart. After Reconfigure, a
// connection opened before it takes the new idle timeout at its next
// keep-alive wait; a new connection's head, an h2c listener's wait for a
// new connection's first bytes and a new HTTP/2 connection's idle wait are
// bounded by the new values. Before, Reconfigure kept the old values and
// named both fields as needing a restart.
func TestReconfigureAppliesClientTimeouts(t *testing.T) {
	up := h2cBackend(t, "stable")
	p, addr := startProxyWith(t, Options{}, staticDecider{Rule: "r", Group: "stable", Target: poolOf("stable", up.Listener.Addr().String())}, listener.Protocols{H2C: true})

	get := func(c net.Conn, br *bufio.Reader) int {
		t.Helper()
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("GET on a kept connection: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// dribbled sends a head whose end comes after pause, and says what
	// came back.
	dribbled := func(pause time.Duration) string {
		c := dialRaw(t, addr)
		defer c.Close()
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: a\r\n")
		time.Sleep(pause)
		fmt.Fprint(c, "\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "closed"
		}
		resp.Body.Close()
		return fmt.Sprint(resp.StatusCode)
	}
	kept := dialRaw(t, addr)
	defer kept.Close()
	keptR := bufio.NewReader(kept)
	if code := get(kept, keptR); code != 200 {
		t.Fatalf("before Reconfigure: %d", code)
	}
	if got := dribbled(700 * time.Millisecond); got != "200" {
		t.Fatalf("before Reconfigure, a head that pauses 700ms: %s, want 200 (read_header_timeout is 10s)", got)
	}

	if restart := p.Reconfigure(Options{ReadHeaderTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}); len(restart) != 0 {
		t.Fatalf("Reconfigure says restart required for %v", restart)
	}

	if code := get(kept, keptR); code != 200 {
		t.Fatalf("after Reconfigure, on the connection opened before: %d", code)
	}
	if what, took := waitClosed(kept, keptR, 3*time.Second); what != "closed" || took > 2*time.Second {
		t.Errorf("the connection opened before Reconfigure, idle after its next answer: %s after %v, want closed within 2s (client_idle_timeout 300ms)", what, took)
	}
	if got := dribbled(time.Second); got == "200" {
		t.Errorf("a new connection whose head pauses 1s was answered 200; want it cut by the 300ms read_header_timeout")
	}
	silent := dialRaw(t, addr)
	defer silent.Close()
	if what, took := waitClosed(silent, silent, 5*time.Second); what != "closed" || took > 3*time.Second {
		t.Errorf("a new connection that sends nothing to the h2c listener: %s after %v, want closed within 3s (the wait for its first bytes follows read_header_timeout)", what, took)
	}

	h2 := dialRaw(t, addr)
	defer h2.Close()
	if _, err := io.WriteString(h2, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(h2, h2)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = h2.SetReadDeadline(start.Add(5 * time.Second))
	var err error
	for err == nil {
		var f http2.Frame
		if f, err = fr.ReadFrame(); err == nil {
			if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
				err = fr.WriteSettingsAck()
			}
		}
	}
	if took := time.Since(start); errors.Is(err, os.ErrDeadlineExceeded) || took > 3*time.Second {
		t.Errorf("a new HTTP/2 connection left idle: %v after %v, want it closed within 3s (client_idle_timeout 300ms)", err, took)
	}
}

// waitClosed reads from c (through r) until it ends or within passes, and
// says which, and when.
func waitClosed(c net.Conn, r io.Reader, within time.Duration) (string, time.Duration) {
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(within))
	_, err := io.Copy(io.Discard, r)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return "open", time.Since(start)
	}
	return "closed", time.Since(start)
}
