package proxy

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// refusedAddr returns a loopback address nothing listens on: a connection
// to it is refused.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestNextInstanceOnRefusedConnection: an instance whose process died
// (its address still in the pool, not yet ejected) refuses connections.
// Nothing was sent, so the request goes to another instance of the pool,
// as nginx's proxy_next_upstream error does, and the client never sees the
// 502; a body goes along whole. A pool of one has no other: 502.
func TestNextInstanceOnRefusedConnection(t *testing.T) {
	backend, hits := echoBackend(t, "live")
	dead := refusedAddr(t)
	t.Run("two instances", func(t *testing.T) {
		_, gw := startProxy(t, Options{}, staticDecider{Group: "g", Target: poolOf("up", dead, addrOf(backend))})
		for i := range 10 {
			var body io.Reader
			method := http.MethodGet
			if i%2 == 1 {
				method, body = http.MethodPost, strings.NewReader("payload")
			}
			req, _ := http.NewRequest(method, "http://"+gw+"/x", body)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || (body != nil && !strings.Contains(string(b), "payload")) {
				t.Fatalf("request %d (%s): %d %q, want the live instance's answer", i, method, resp.StatusCode, b)
			}
		}
		if n := hits.Load(); n != 10 {
			t.Errorf("the live instance got %d requests, want all 10", n)
		}
	})
	t.Run("one instance", func(t *testing.T) {
		_, gw := startProxy(t, Options{}, staticDecider{Group: "g", Target: poolOf("up", dead)})
		resp, err := http.Get("http://" + gw + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("status %d, want 502: the pool has no other instance", resp.StatusCode)
		}
	})
}
