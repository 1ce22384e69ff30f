package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/router"
)

// TestEarlyAnswerSurvivesTheUnreadBody: a client that keeps sending a
// body the gateway has already refused (413 from the declared
// Content-Length, before the body is read) gets the answer, can finish
// writing, and then reads the end of the connection. Closing with the body
// unread would make the kernel reset the connection, failing the client's
// writes and possibly destroying the answer before it is read (curl:
// "Send failure: Connection reset by peer"); the gateway closes lingering.
func TestEarlyAnswerSurvivesTheUnreadBody(t *testing.T) {
	backend, seen := echoBackend(t, "gray")
	route := &grayRoute{gray: poolOf("gray", addrOf(backend)), pol: &router.Policy{MaxBodyBytes: 1 << 10}}
	_, addr := startProxy(t, Options{}, route)
	const size = 4 << 20
	piece := bytes.Repeat([]byte("b"), 16<<10)
	for i := range 10 {
		c := dialBounded(t, addr, 10*time.Second)
		if _, err := fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n", size); err != nil {
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
			t.Fatalf("try %d: the 413 was lost: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		if resp.StatusCode != 413 || err != nil {
			t.Fatalf("try %d: %d %q %v, want 413", i, resp.StatusCode, body, err)
		}
		if err := <-wrote; err != nil {
			t.Fatalf("try %d: writing the rest of the refused body failed: %v", i, err)
		}
		if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Errorf("try %d: after the answer read %d bytes, %v; want the end of the connection", i, n, err)
		}
		c.Close()
	}
	if seen.Load() != 0 {
		t.Errorf("the backend saw %d requests", seen.Load())
	}
}
