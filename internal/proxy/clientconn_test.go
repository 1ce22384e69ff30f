package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// tcpPair returns a clientConn accepted from a loopback listener and the
// client end connected to it.
func tcpPair(t *testing.T) (*clientConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	c, err := clientListener{ln}.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cc, ok := c.(*clientConn)
	if !ok {
		t.Fatalf("accepted %T, want *clientConn", c)
	}
	return cc, peer
}

// readWithin reads what arrives at c within d.
func readWithin(c net.Conn, d time.Duration) string {
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 64<<10)
	n, _ := c.Read(buf)
	return string(buf[:n])
}

func TestClientConnHoldsBackOneResponse(t *testing.T) {
	cc, peer := tcpPair(t)

	// Without deferResponse, writes go out at once.
	if _, err := cc.Write([]byte("direct")); err != nil {
		t.Fatal(err)
	}
	if got := readWithin(peer, 2*time.Second); got != "direct" {
		t.Fatalf("peer got %q, want the write at once", got)
	}

	// After deferResponse, one small write waits for the next Read...
	holdResponse(cc, true)
	if _, err := cc.Write([]byte("response")); err != nil {
		t.Fatal(err)
	}
	if got := readWithin(peer, 50*time.Millisecond); got != "" {
		t.Fatalf("peer got %q before the connection was read", got)
	}
	// ...which sends it, then waits for and returns what the peer sends.
	done := make(chan string, 1)
	go func() {
		buf := make([]byte, 100)
		n, err := cc.Read(buf)
		done <- fmt.Sprintf("%q %v", buf[:n], err)
	}()
	if got := readWithin(peer, 2*time.Second); got != "response" {
		t.Fatalf("peer got %q, want the held-back response once the connection is read", got)
	}
	if _, err := peer.Write([]byte("next request")); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-done:
		if got != `"next request" <nil>` {
			t.Fatalf("Read returned %s", got)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Read did not return the peer's bytes")
	}

	// Only one write is held back, and a large one never is.
	holdResponse(cc, true)
	big := bytes.Repeat([]byte("x"), maxDeferredWrite+1)
	if _, err := cc.Write(big); err != nil {
		t.Fatal(err)
	}
	if _, err := cc.Write([]byte("after")); err != nil {
		t.Fatal(err)
	}
	var got []byte
	deadline := time.Now().Add(2 * time.Second)
	for len(got) < len(big)+5 && time.Now().Before(deadline) {
		got = append(got, readWithin(peer, 100*time.Millisecond)...)
	}
	if !bytes.Equal(got, append(big, "after"...)) {
		t.Fatalf("peer got %d bytes, want the large write and the next one at once", len(got))
	}

	// A cleared mark holds nothing back.
	holdResponse(cc, true)
	holdResponse(cc, false)
	if _, err := cc.Write([]byte("streamed")); err != nil {
		t.Fatal(err)
	}
	if got := readWithin(peer, 2*time.Second); got != "streamed" {
		t.Fatalf("peer got %q, want the write at once after the mark was cleared", got)
	}

	// Close sends a held-back write.
	holdResponse(cc, true)
	if _, err := cc.Write([]byte("last")); err != nil {
		t.Fatal(err)
	}
	cc.Close()
	if b, _ := io.ReadAll(peer); string(b) != "last" {
		t.Fatalf("after Close the peer got %q, want the held-back write", b)
	}
}

func TestClientConnReadErrors(t *testing.T) {
	t.Run("peer closed", func(t *testing.T) {
		cc, peer := tcpPair(t)
		holdResponse(cc, true)
		_, _ = cc.Write([]byte("response"))
		go func() {
			_ = readWithin(peer, 2*time.Second)
			peer.Close()
		}()
		if _, err := cc.Read(make([]byte, 10)); err != io.EOF {
			t.Fatalf("Read after the peer closed: %v, want EOF", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		cc, peer := tcpPair(t)
		holdResponse(cc, true)
		_, _ = cc.Write([]byte("response"))
		_ = cc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err := cc.Read(make([]byte, 10))
		if !isTimeout(err) {
			t.Fatalf("Read past its deadline: %v, want a timeout", err)
		}
		if got := readWithin(peer, 2*time.Second); got != "response" {
			t.Fatalf("peer got %q, want the held-back response", got)
		}
	})
}

// TestKeepAliveAndPipelining drives the gateway the way clients do over one
// connection: request, response, request; then two requests in one write.
// Each response must arrive without the client sending anything more.
func TestKeepAliveAndPipelining(t *testing.T) {
	backend, _ := echoBackend(t, "stable")
	_, addr := startProxy(t, Options{}, staticDecider{Rule: "r", Group: "stable", Target: poolOf("stable", addrOf(backend))})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	read := func(path string) {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the response to %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"uri":"`+path+`"`) {
			t.Fatalf("response to %s: %d %s", path, resp.StatusCode, body)
		}
	}
	for i := range 5 {
		path := fmt.Sprintf("/seq/%d", i)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: a\r\n\r\n", path)
		read(path)
	}
	fmt.Fprint(c, "GET /pipe/1 HTTP/1.1\r\nHost: a\r\n\r\nGET /pipe/2 HTTP/1.1\r\nHost: a\r\n\r\n")
	read("/pipe/1")
	read("/pipe/2")
	fmt.Fprint(c, "GET /bye HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
	read("/bye")
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after Connection: close: %v, want EOF", err)
	}
}

// TestPipelinedEventStream: a plain request pipelined before an event
// stream on one connection. The first response may be held back; the
// stream's header and first event must still reach the client while the
// upstream is blocked, after the first response and in order.
func TestPipelinedEventStream(t *testing.T) {
	release := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/events" {
			fmt.Fprint(w, "ok")
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer backend.Close()
	defer close(release) // before backend.Close, which waits for the handler
	_, addr := startProxy(t, Options{}, staticDecider{Group: "stable", Target: poolOf("stable", addrOf(backend))})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(c, "GET /plain HTTP/1.1\r\nHost: a\r\n\r\nGET /events HTTP/1.1\r\nHost: a\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "ok" {
		t.Fatalf("first response %q", b)
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the event stream's header did not arrive: %v", err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("first event %q, %v", line, err)
	}
}
