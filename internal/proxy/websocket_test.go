package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/identity"
	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/testserve"
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

// TestWebSocketShutdown: a WebSocket tunnel open when Shutdown begins
// keeps carrying messages until Shutdown's context ends (the gateway's
// shutdown_timeout), not only until the listeners close (drain_delay);
// then it is closed, and Shutdown reports that it had to cut something.
// fasthttp's Shutdown does not see hijacked connections: the Proxy waits
// for and closes its tunnels itself.
func TestWebSocketShutdown(t *testing.T) {
	backend, _ := wsEchoBackend(t, "gray")
	rec := newDoneRecorder()
	p, addr := startProxy(t, Options{OnDone: rec.onDone}, staticDecider{Group: "gray", Target: poolOf("gray", backend)})
	c, _, err := dialWS(t, "ws://"+addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	echo := func(msg string) error {
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			return err
		}
		_, got, err := c.ReadMessage()
		if err == nil && string(got) != "gray:"+msg {
			err = fmt.Errorf("echo %q, want %q", got, "gray:"+msg)
		}
		return err
	}
	if err := echo("before"); err != nil {
		t.Fatal(err)
	}
	if n := p.hijacks.len(); n != 1 {
		t.Fatalf("%d open tunnels, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- p.Shutdown(ctx) }()
	waitShutdownBegan(t, addr)
	for i := range 3 {
		if err := echo(fmt.Sprint("during shutdown ", i)); err != nil {
			t.Fatalf("the tunnel stopped once Shutdown began, before its deadline: %v", err)
		}
	}
	select {
	case err := <-shut:
		if ctx.Err() == nil {
			t.Errorf("Shutdown returned (%v) before its deadline with a tunnel open", err)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown: %v, want the deadline's error: the tunnel was cut", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return after its deadline")
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := c.ReadMessage(); err == nil {
		t.Error("tunnel still open after Shutdown")
	}
	if d := rec.next(t, 5*time.Second); d.status != http.StatusSwitchingProtocols {
		t.Errorf("OnDone status %d, want 101", d.status)
	}
	if n := p.hijacks.len(); n != 0 {
		t.Errorf("%d tunnels left", n)
	}
}

// TestWebSocketRefusedDuringShutdown: a WebSocket handshake that reaches
// the gateway's routing once Shutdown has begun is refused with a 503 and
// "Connection: close", and opens no tunnel: a tunnel opened then would
// only be cut at the deadline.
func TestWebSocketRefusedDuringShutdown(t *testing.T) {
	backend, seen := wsEchoBackend(t, "gray")
	entered, release := make(chan struct{}), make(chan struct{})
	d := deciderFunc(func(attr.Request) router.Decision {
		close(entered)
		<-release
		return router.Decision{Group: "gray", Target: poolOf("gray", backend)}
	})
	p, addr := startProxy(t, Options{}, d)
	c := dialBounded(t, addr, 10*time.Second)
	defer c.Close()
	io.WriteString(c, "GET /late HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- p.Shutdown(ctx) }()
	waitShutdownBegan(t, addr)
	close(release)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close {
		t.Errorf("handshake during shutdown: %d, close %v; want 503 and Connection: close", resp.StatusCode, resp.Close)
	}
	select {
	case h := <-seen:
		t.Errorf("the handshake reached the upstream: %v", h)
	default:
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// waitShutdownBegan waits until the proxy at addr refuses connections:
// Shutdown has closed its listener.
func waitShutdownBegan(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener still accepts connections after Shutdown")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHijackedResponseShutdown: a response the gateway writes on the
// hijacked client connection (here a body of unknown length to an
// HTTP/1.0 client, delimited by the close) is in flight for Shutdown as a
// tunnel is: it goes on streaming after Shutdown began, Shutdown waits
// for it until its deadline, and it is cut then.
func TestHijackedResponseShutdown(t *testing.T) {
	up := stallBackend(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
		for {
			if _, err := io.WriteString(c, "5\r\ntick\n\r\n"); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	p, addr := startProxy(t, Options{}, staticDecider{Group: "stable", Target: poolOf("stable", up)})
	c := dialBounded(t, addr, 30*time.Second)
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.0\r\nHost: a\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	tick := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, tick); err != nil || string(tick) != "tick\n" {
		t.Fatalf("first tick %q, %v", tick, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- p.Shutdown(ctx) }()
	waitShutdownBegan(t, addr)
	if _, err := io.ReadFull(resp.Body, make([]byte, 5*5)); err != nil {
		t.Fatalf("the response stopped once Shutdown began, before its deadline: %v", err)
	}
	select {
	case err := <-shut:
		if ctx.Err() == nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown returned %v before its deadline, with a response still streaming", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return after its deadline")
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, resp.Body); isTimeout(err) {
		t.Errorf("the response still streams after Shutdown's deadline: %v", err)
	}
}

// TestWebSocketHalfClose: a client that half-closes an upgraded connection
// (shutdown of its writing side, as a client does that has sent all it
// will) still gets everything the upstream sends until the upstream closes
// too. The gateway passes the half-close on; before, it closed both sides
// at the client's EOF and the upstream's last words were lost. Raw bytes
// through the real listener, with a raw upstream that answers the EOF.
func TestWebSocketHalfClose(t *testing.T) {
	backend := lastWordsBackend(t)
	rec := newDoneRecorder()
	_, addr := startProxy(t, Options{OnDone: rec.onDone}, staticDecider{Group: "stable", Target: poolOf("stable", backend)})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, lastWordsRequest)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v %v, want 101", resp, err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	rest := readLastWords(t, br)
	if d := rec.next(t, 3*time.Second); d.status != http.StatusSwitchingProtocols || d.bytes != int64(len(rest)) {
		t.Errorf("OnDone(status %d, bytes %d), want (101, %d)", d.status, d.bytes, len(rest))
	}
}

// lastWordsRequest is a WebSocket handshake with the client's last words
// after it, for lastWordsBackend.
const lastWordsRequest = "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\nlast words"

// lastWordsBackend switches protocols, reads what the client sends until
// its half-close arrives, and then answers what it read and closes.
func lastWordsBackend(t *testing.T) string {
	return testserve.Conns(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		got, err := io.ReadAll(br) // until the client's half-close arrives
		if err != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
		_, _ = fmt.Fprintf(c, "upstream saw %q, and ends here", got)
	})
}

// readLastWords reads, after the client's half-close, what
// lastWordsBackend answers to lastWordsRequest, and then the close.
func readLastWords(t *testing.T, br *bufio.Reader) []byte {
	t.Helper()
	rest, err := io.ReadAll(br)
	if want := `upstream saw "last words", and ends here`; err != nil || string(rest) != want {
		t.Errorf("after the half-close: %q (%v), want %q and the close", rest, err, want)
	}
	return rest
}

// TestWebSocketOverTLS: wss:// through the TLS listener, where the tunnel
// reads and writes through Go's tls.Conn. Messages up to 1 MiB are echoed
// whole. A client's close_notify is its half-close, and is passed on as
// one, whether it comes in a read of its own or with the last words of
// the handshake's own write (which tls.Conn returns as bytes and io.EOF
// at once); the upstream's answer to it is relayed, and then the close.
func TestWebSocketOverTLS(t *testing.T) {
	gw := newGatewayTLS(t)
	prot := listener.Protocols{TLS: gw.conf}
	t.Run("echo", func(t *testing.T) {
		backend, _ := wsEchoBackend(t, "gray")
		_, addr := startProxyWith(t, Options{}, staticDecider{Group: "gray", Target: poolOf("gray", backend)}, prot)
		d := websocket.Dialer{HandshakeTimeout: 5 * time.Second, TLSClientConfig: &tls.Config{RootCAs: gw.ca.Pool, ServerName: "gw.test"}}
		c, _, err := d.Dial("wss://"+addr+"/chat", nil)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		for _, msg := range []string{"hello", strings.Repeat("x", 1<<20), "bye"} {
			if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
				t.Fatalf("write: %v", err)
			}
			if _, got, err := c.ReadMessage(); err != nil || string(got) != "gray:"+msg {
				t.Fatalf("echo = %.40q (%v), want %.40q", got, err, "gray:"+msg)
			}
		}
	})
	for _, together := range []bool{false, true} {
		t.Run(fmt.Sprintf("close_notify with the last words %v", together), func(t *testing.T) {
			rec := newDoneRecorder()
			_, addr := startProxyWith(t, Options{OnDone: rec.onDone}, staticDecider{Group: "stable", Target: poolOf("stable", lastWordsBackend(t))}, prot)
			c, rc := dialTLSRecorded(t, addr, net.Dialer{}, &tls.Config{RootCAs: gw.ca.Pool, ServerName: "gw.test", NextProtos: []string{"http/1.1"}})
			if together {
				rc.holdWrites()
			}
			_, _ = io.WriteString(c, lastWordsRequest)
			if together {
				if err := rc.closeNotify(c); err != nil {
					t.Fatal(err)
				}
				if _, err := rc.Conn.Write(rc.held()); err != nil {
					t.Fatal(err)
				}
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("handshake: %v %v, want 101", resp, err)
			}
			if !together {
				if err := rc.closeNotify(c); err != nil {
					t.Fatal(err)
				}
			}
			rest := readLastWords(t, br)
			if d := rec.next(t, 3*time.Second); d.status != http.StatusSwitchingProtocols || d.bytes != int64(len(rest)) {
				t.Errorf("OnDone(status %d, bytes %d), want (101, %d)", d.status, d.bytes, len(rest))
			}
		})
	}
}
