package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/router"
)

// TestEarlyAnswerSurvivesTheUnreadBody: a client that keeps sending a
// body the gateway has already refused gets the answer, can finish
// writing, and then reads the end of the connection: a 413 from the
// declared Content-Length, before the body is read, and the refusals of a
// head whose body follows (400 for a folded field, 505 for a version, 417
// for an Expect, 431 for an over-long field). Closing with the body unread
// would make the kernel reset the connection, failing the client's writes
// and possibly destroying the answer before it is read (curl: "Send
// failure: Connection reset by peer"); the gateway closes lingering.
func TestEarlyAnswerSurvivesTheUnreadBody(t *testing.T) {
	backend, seen := echoBackend(t, "gray")
	route := &grayRoute{gray: poolOf("gray", addrOf(backend)), pol: &router.Policy{MaxBodyBytes: 1 << 10}}
	_, addr := startProxy(t, Options{}, route)
	const size = 4 << 20
	for _, tt := range []struct {
		name, head string
		status     int
	}{
		{"413 body over max_body", "POST /up HTTP/1.1\r\nHost: a\r\n", 413},
		{"400 folded field", "POST /up HTTP/1.1\r\nHost: a\r\nX-A: a\r\n b\r\n", 400},
		{"505 version", "POST /up HTTP/2.0\r\nHost: a\r\n", 505},
		{"417 expectation", "POST /up HTTP/1.1\r\nHost: a\r\nExpect: foo\r\n", 417},
		{"431 field too long", "POST /up HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("b", 20<<10) + "\r\n", 431},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for range 5 {
				earlyAnswer(t, addr, fmt.Sprintf("%sContent-Length: %d\r\n\r\n", tt.head, size), size, tt.status)
			}
		})
	}
	if seen.Load() != 0 {
		t.Errorf("the backend saw %d requests", seen.Load())
	}
}

// earlyAnswer writes head and then size bytes of body to addr while it
// reads the answer, which must have status, and then the end of the
// connection; every write must succeed.
func earlyAnswer(t *testing.T, addr, head string, size, status int) {
	t.Helper()
	piece := bytes.Repeat([]byte("b"), 16<<10)
	c := dialBounded(t, addr, 10*time.Second)
	defer c.Close()
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() {
		for n := 0; n < size; n += len(piece) {
			if _, err := c.Write(piece); err != nil {
				wrote <- fmt.Errorf("after %d bytes: %w", n, err)
				return
			}
		}
		wrote <- nil
	}()
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the %d was lost: %v", status, err)
	}
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != status || err != nil {
		t.Fatalf("%d %q %v, want %d", resp.StatusCode, body, err, status)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("writing the rest of the refused body failed: %v", err)
	}
	if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("after the answer read %d bytes, %v; want the end of the connection", n, err)
	}
}

// TestUpstreamEarlyAnswer: an upstream that answers a request before its
// body has arrived (a 413) and then closes, or stops reading, makes the
// gateway's sending of the body fail; the answer it sent is what the
// client gets (RFC 9112 section 9.3), not a 502 or a 504, and the client
// can finish writing its body and then reads the end of the connection.
func TestUpstreamEarlyAnswer(t *testing.T) {
	for _, tt := range []struct {
		name  string
		close bool
	}{
		{"answers and closes", true},
		{"answers and stops reading", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan struct{})
			up := stallBackend(t, func(c net.Conn, br *bufio.Reader) {
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				fmt.Fprint(c, "HTTP/1.1 413 Content Too Large\r\nContent-Length: 3\r\nConnection: close\r\n\r\nbig")
				if !tt.close {
					<-done // read nothing more until the test ends
				}
			})
			t.Cleanup(func() { close(done) }) // before stallBackend's, which waits for this handler
			_, addr := startProxy(t, Options{UpstreamWriteTimeout: 300 * time.Millisecond}, staticDecider{Group: "stable", Target: poolOf("stable", up)})
			const size = 8 << 20
			earlyAnswer(t, addr, fmt.Sprintf("POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n", size), size, 413)
		})
	}
}
