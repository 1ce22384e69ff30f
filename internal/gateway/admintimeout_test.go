package gateway

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestAdminTimeouts: an admin client that sends a header and then
// trickles (or stops) its body, or keeps a connection idle, is
// disconnected after admin.read_timeout or admin.idle_timeout. Before,
// the admin server bounded only the header: such connections were held
// for ever. A client within the bounds is served.
func TestAdminTimeouts(t *testing.T) {
	e := start(t, baseConfig+"\nadmin: {read_timeout: 400ms, idle_timeout: 300ms}\n", "")
	addr := strings.TrimPrefix(e.admin, "http://")
	dial := func() net.Conn {
		t.Helper()
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		return c
	}
	// closedWithin reads until the server closes c, and reports how long
	// that took after from, failing past limit.
	closedWithin := func(name string, c net.Conn, from time.Time, limit time.Duration) {
		t.Helper()
		_, err := io.Copy(io.Discard, c)
		took := time.Since(from)
		if err != nil || took > limit {
			t.Errorf("%s: the connection ended after %v (%v), want a close within %v", name, took, err, limit)
		}
	}

	// A body that stops halfway.
	c := dial()
	start := time.Now()
	_, _ = io.WriteString(c, "PUT /api/v1/rules/k HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer "+token+"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"type\":")
	closedWithin("stalled body", c, start, 3*time.Second)
	if code, _ := e.api("GET", "/api/v1/rules/k", nil); code != 404 {
		t.Errorf("the stalled PUT wrote the rule: GET is %d", code)
	}

	// A body trickled a byte at a time, each within any idle bound: the
	// whole request is bounded, not each read.
	tc := dial()
	start = time.Now()
	_, _ = io.WriteString(tc, "PUT /api/v1/rules/k HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer "+token+"\r\nContent-Length: 100\r\n\r\n")
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		for range 100 {
			if _, err := tc.Write([]byte(" ")); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	closedWithin("trickled body", tc, start, 3*time.Second)
	tc.Close()
	<-trickled

	// An idle keep-alive connection, after one answered request.
	c = dial()
	_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, "200") {
		t.Fatalf("healthz: %q %v", line, err)
	}
	start = time.Now()
	_, err = io.Copy(io.Discard, br)
	if took := time.Since(start); err != nil || took > 3*time.Second {
		t.Errorf("idle keep-alive connection ended after %v (%v), want a close within 3s", took, err)
	}

	// Within the bounds, the API works.
	if code, out := e.api("PUT", "/api/v1/rules/k", grayRule(5)); code != 201 {
		t.Errorf("a prompt PUT: %d %v", code, out)
	}
}
