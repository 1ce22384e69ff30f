package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/graygate/graygate/internal/identity"
)

// wsEchoBackend echoes every message prefixed with its name, and reports
// the request headers it saw on the returned channel.
func wsEchoBackend(t *testing.T, name string) (string, <-chan http.Header) {
	headers := make(chan http.Header, 8)
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !websocket.IsWebSocketUpgrade(r) {
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, "not a websocket")
			return
		}
		if r.URL.Path == "/refuse" {
			http.Error(w, "go away", http.StatusForbidden)
			return
		}
		headers <- r.Header.Clone()
		c, err := up.Upgrade(w, r, http.Header{"X-Backend": {name}})
		if err != nil {
			return
		}
		defer c.Close()
		for {
			mt, msg, err := c.ReadMessage()
			if err != nil {
				return
			}
			if err := c.WriteMessage(mt, append([]byte(name+":"), msg...)); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return addrOf(srv), headers
}

func dialWS(t *testing.T, url string, h http.Header) (*websocket.Conn, *http.Response, error) {
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	c, resp, err := d.Dial(url, h)
	if c != nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, resp, err
}

func TestWebSocket(t *testing.T) {
	backend, seen := wsEchoBackend(t, "gray")
	rec := newDoneRecorder()
	_, addr := startProxy(t, Options{OnDone: rec.onDone}, staticDecider{
		Rule: "ws-rule", Group: "gray", Tag: "gray", Target: poolOf("gray", backend),
		Identity: identity.ID{Value: "anon-9", Issued: true, Cookie: "gg_uid"},
	})

	c, resp, err := dialWS(t, "ws://"+addr+"/chat", http.Header{"X-Forwarded-For": {"6.6.6.6"}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	for h, want := range map[string]string{
		"X-Backend": "gray", "X-Gray-Rule": "ws-rule", "X-Gray-Group": "gray",
		"Set-Cookie": "gg_uid=anon-9; Path=/; Max-Age=31536000; HttpOnly; SameSite=Lax",
	} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("handshake response %s = %q, want %q", h, got, want)
		}
	}
	up := <-seen
	for h, want := range map[string]string{
		"X-Forwarded-For": "127.0.0.1", "X-Gray-Tag": "gray", "Upgrade": "websocket", "Connection": "Upgrade",
	} {
		if got := up.Get(h); got != want {
			t.Errorf("upstream handshake %s = %q, want %q", h, got, want)
		}
	}

	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var total int64
	for _, msg := range []string{"hello", strings.Repeat("x", 100<<10), "bye"} {
		if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatalf("write: %v", err)
		}
		_, got, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if string(got) != "gray:"+msg {
			t.Fatalf("echo = %.40q, want %.40q", got, "gray:"+msg)
		}
		total += int64(len(got))
	}
	_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	_, _, err = c.ReadMessage()
	if !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Errorf("after close: %v, want a normal close", err)
	}
	d := rec.next(t, 3*time.Second)
	if d.status != http.StatusSwitchingProtocols || d.rule != "ws-rule" || d.bytes < total {
		t.Errorf("OnDone(status %d, rule %q, bytes %d), want (101, ws-rule, >= %d)", d.status, d.rule, d.bytes, total)
	}
}

func TestWebSocketRefused(t *testing.T) {
	backend, _ := wsEchoBackend(t, "gray")
	_, addr := startProxy(t, Options{}, staticDecider{Rule: "r", Group: "gray", Target: poolOf("gray", backend)})
	_, resp, err := dialWS(t, "ws://"+addr+"/refuse", nil)
	if err == nil {
		t.Fatal("dial succeeded, want the upstream's refusal")
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Gray-Rule") != "r" {
		t.Fatalf("response %+v, want 403 with X-Gray-Rule", resp)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "go away") {
		t.Errorf("body %q, want the upstream's", body)
	}
}

// TestWebSocketShutdown: fasthttp's Shutdown does not see hijacked
// connections; the Proxy must close its tunnels itself.
func TestWebSocketShutdown(t *testing.T) {
	backend, _ := wsEchoBackend(t, "gray")
	rec := newDoneRecorder()
	p, addr := startProxy(t, Options{OnDone: rec.onDone}, staticDecider{Group: "gray", Target: poolOf("gray", backend)})
	c, _, err := dialWS(t, "ws://"+addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := p.tunnels.len(); n != 1 {
		t.Fatalf("%d open tunnels, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Shutdown took %v", d)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, _, err := c.ReadMessage(); err == nil {
		t.Error("tunnel still open after Shutdown")
	}
	if d := rec.next(t, 2*time.Second); d.status != http.StatusSwitchingProtocols {
		t.Errorf("OnDone status %d, want 101", d.status)
	}
}
