package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestResponseBodyInlineOrStreamed covers both ways a response body goes to
// the client: copied when it is small and arrived with its header, streamed
// otherwise (larger than maxInlineBody, sent after the header, or chunked).
// Every body must arrive whole, with OnDone reporting its size, and the
// upstream connection must be reused.
func TestResponseBodyInlineOrStreamed(t *testing.T) {
	tests := []struct {
		name  string
		size  int
		delay bool // the body is sent 20ms after the header
		coded string
	}{
		{"empty", 0, false, "length"},
		{"small", 100, false, "length"},
		{"at the inline limit", maxInlineBody, false, "length"},
		{"over the inline limit", maxInlineBody + 1, false, "length"},
		{"small, after the header", 100, true, "length"},
		{"chunked", 100, false, "chunked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := bytes.Repeat([]byte("0123456789abcdef"), tt.size/16+1)[:tt.size]
			// Each upstream connection has its own writer: numbering the
			// writers numbers the connections.
			var mu sync.Mutex
			conns := map[*bufio.Writer]int{}
			addr := rawBackend(t, func(req *http.Request, w *bufio.Writer) {
				mu.Lock()
				if conns[w] == 0 {
					conns[w] = len(conns) + 1
				}
				id := conns[w]
				mu.Unlock()
				fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nX-Conn: %d\r\n", id)
				switch tt.coded {
				case "length":
					fmt.Fprintf(w, "Content-Length: %d\r\n\r\n", len(body))
				case "chunked":
					fmt.Fprintf(w, "Transfer-Encoding: chunked\r\n\r\n")
				}
				if tt.delay {
					_ = w.Flush()
					time.Sleep(20 * time.Millisecond)
				}
				switch tt.coded {
				case "chunked":
					fmt.Fprintf(w, "%x\r\n%s\r\n0\r\n\r\n", len(body), body)
				default:
					_, _ = w.Write(body)
				}
			})
			rec := newDoneRecorder()
			_, proxyAddr := startProxy(t, Options{OnDone: rec.onDone}, staticDecider{Rule: "r", Group: "stable", Target: poolOf("stable", addr)})
			c := httpClient(t)
			var lastConn string
			for i := range 3 {
				resp, err := c.Get("http://" + proxyAddr + "/x")
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatalf("request %d: reading body: %v", i, err)
				}
				if !bytes.Equal(got, body) {
					t.Fatalf("request %d: got %d body bytes, want %d", i, len(got), len(body))
				}
				if tt.coded == "length" && resp.ContentLength != int64(len(body)) {
					t.Errorf("request %d: Content-Length %d, want %d", i, resp.ContentLength, len(body))
				}
				if d := rec.next(t, 5*time.Second); d.status != 200 || d.bytes != int64(len(body)) {
					t.Errorf("request %d: OnDone status %d bytes %d, want 200 and %d", i, d.status, d.bytes, len(body))
				}
				lastConn = resp.Header.Get("X-Conn")
			}
			if lastConn != "1" {
				t.Errorf("third request came on upstream connection %s, want the first one, reused", lastConn)
			}
		})
	}
}
