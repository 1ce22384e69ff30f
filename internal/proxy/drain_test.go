package proxy

import (
	"bufio"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestDrainClosesKeepAlive: once Drain is called (the gateway's
// drain_delay begins) every HTTP/1.1 answer carries "Connection: close"
// and its connection closes after it, so a keep-alive client opens its
// next connection elsewhere instead of sending its next request on one
// that the listener's close cuts (a request lost with a bare EOF, found by
// the live-operations audit: one per keep-alive client per handover).
func TestDrainClosesKeepAlive(t *testing.T) {
	backend, _ := echoBackend(t, "stable")
	p, addr := startProxy(t, Options{}, staticDecider{Group: "g", Target: poolOf("stable", addrOf(backend))})
	c := dialBounded(t, addr, 5*time.Second)
	defer c.Close()
	br := bufio.NewReader(c)
	get := func() *http.Response {
		t.Helper()
		if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := get(); resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("before Drain: %d, close %v; want 200 on a kept connection", resp.StatusCode, resp.Close)
	}
	p.Drain()
	if resp := get(); resp.StatusCode != http.StatusOK || !resp.Close {
		t.Fatalf("after Drain: %d, close %v; want 200 with Connection: close", resp.StatusCode, resp.Close)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after the draining answer the connection gave %v, want EOF: it closes", err)
	}
}
