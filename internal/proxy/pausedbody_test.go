package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/testserve"
	"github.com/graygate/graygate/internal/upstream"
)

// TestH2ClientPausedUploadToHTTP1: an HTTP/2 client's upload to an http1
// pool (net/http's Transport) that sends a first part and then waits for
// an answer before it sends more gets one promptly, whatever the upstream
// does after it read that part. An upstream that answers early is
// relayed (the Transport hands over the answer while its writer still
// waits on the body). One that closes or resets the connection without an
// answer got nothing until the client's deadline: the Transport returns
// that failure only once its write loop is done, which was blocked in a
// read of the client's body, and nothing closes the body meanwhile. Now
// the connection's close gives that read up, and the client gets a 502
// naming the pool, with its request id.
func TestH2ClientPausedUploadToHTTP1(t *testing.T) {
	const first, deadline = 1024, 10 * time.Second
	early := "HTTP/1.1 403 Forbidden\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno"
	for _, tt := range []struct {
		name   string
		answer string // written before the close, if any
		reset  bool   // close with RST instead of FIN
		status int
		body   string // what the body holds
	}{
		{"closed", "", false, http.StatusBadGateway, `upstream "up" failed`},
		{"reset", "", true, http.StatusBadGateway, `upstream "up" failed`},
		{"early answer, closed", early, false, http.StatusForbidden, "no"},
		{"early answer, reset", early, true, http.StatusForbidden, "no"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := make(chan struct{}, 1)
			addr := testserve.Conns(t, func(c net.Conn) {
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				if _, err := io.ReadFull(req.Body, make([]byte, first)); err != nil {
					return
				}
				got <- struct{}{}
				if tt.answer != "" {
					if _, err := io.WriteString(c, tt.answer); err != nil {
						return
					}
				}
				if tt.reset {
					_ = c.(*net.TCPConn).SetLinger(0)
				}
			})
			d := staticDecider(router.Decision{Rule: "r", Group: "g", Target: poolOf("up", addr)})
			_, gw := startProxyWith(t, Options{}, d, listener.Protocols{H2C: true})
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			pr, pw := io.Pipe()
			defer pw.Close()
			// The client's transport, like the gateway's, looks at its
			// context only between reads of the body: ending the body
			// with it bounds the test when the gateway hangs.
			context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
			go func() { _, _ = pw.Write(make([]byte, first)) }()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+gw+"/up", pr)
			req.ContentLength = 1 << 20 // over fallback_body_bytes: streamed
			start := time.Now()
			resp, err := h2cClient(t).Do(req)
			if err != nil {
				t.Fatalf("after %v: %v; want an answer well before the client's %v deadline", time.Since(start), err, deadline)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if took := time.Since(start); took > deadline/2 {
				t.Errorf("answered after %v, want well before the client's %v deadline", took, deadline)
			}
			select {
			case <-got:
			default:
				t.Fatal("the upstream did not read the first part")
			}
			if resp.StatusCode != tt.status || !strings.Contains(string(b), tt.body) {
				t.Fatalf("%d %q, want %d with %q", resp.StatusCode, b, tt.status, tt.body)
			}
			if tt.status == http.StatusBadGateway {
				errBody(t, resp, string(b))
			}
		})
	}
}

// TestH1PausedUploadToH2Reset: an HTTP/1.1 client's upload to an h2c pool
// that sends a first part (a chunk, or the 8 KiB of a declared length
// that fasthttp reads before the handler runs) and then waits for an
// answer is answered promptly when the upstream
// resets the stream before it answers, without the client sending more.
// The HTTP/2 transport closes the body and then waits for its read of the
// client's body, which waited for the client: the HTTP/1.1 codec's body
// now reads ahead on a goroutine of its own too, and gives the read up.
// A stream refused unprocessed is asked once more, then goes to stable
// with what was read of the body, and stable's answer reaches the client
// before it sends the rest; without stable, or reset with another code,
// the answer is a 502 naming the pool.
func TestH1PausedUploadToH2Reset(t *testing.T) {
	const deadline, first = 10 * time.Second, 8 << 10
	stableSrv := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Stable answers once it has the first part, as a streaming
		// service does, and sums up the rest.
		if _, err := io.ReadFull(r.Body, make([]byte, first)); err != nil {
			return
		}
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, "stable got %d\n", first)
		http.NewResponseController(w).Flush()
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "and %d more\n", n)
	}))
	stable := poolOf("stable", addrOf(stableSrv))
	stable.Protocol = upstream.H2C
	for _, tt := range []struct {
		name   string
		gray   func(t *testing.T) *upstream.Pool
		stable bool
		want   int // 0: stable's answer
	}{
		{"refused at once, no stable", func(t *testing.T) *upstream.Pool { p, _ := refusingGray(t, false); return p }, false, http.StatusBadGateway},
		{"refused after the first part, no stable", func(t *testing.T) *upstream.Pool {
			p, _ := resettingGray(t, http2.ErrCodeRefusedStream, true)
			return p
		}, false, http.StatusBadGateway},
		{"internal error after the first part", func(t *testing.T) *upstream.Pool {
			p, _ := resettingGray(t, http2.ErrCodeInternal, true)
			return p
		}, true, http.StatusBadGateway},
		{"cancel after the first part", func(t *testing.T) *upstream.Pool {
			p, _ := resettingGray(t, http2.ErrCodeCancel, true)
			return p
		}, false, http.StatusBadGateway},
		{"refused at once, to stable", func(t *testing.T) *upstream.Pool { p, _ := refusingGray(t, false); return p }, true, 0},
		{"refused after the first part, to stable", func(t *testing.T) *upstream.Pool {
			p, _ := resettingGray(t, http2.ErrCodeRefusedStream, true)
			return p
		}, true, 0},
	} {
		for _, chunked := range []bool{true, false} {
			if chunked && tt.stable {
				// A chunked body is buffered for a fallback before gray
				// is asked (up to fallback_body_bytes, which a paused
				// one never reaches): only a declared length over it
				// streams at once.
				continue
			}
			name := tt.name + map[bool]string{true: ", chunked", false: ", length"}[chunked]
			t.Run(name, func(t *testing.T) {
				d := router.Decision{Rule: "g", Group: "gray", Target: tt.gray(t)}
				if tt.stable {
					d.Stable = stable
				}
				_, gw := startProxyWith(t, Options{}, staticDecider(d), listener.Protocols{H2C: true})
				conn := dialBounded(t, gw, deadline)
				defer conn.Close()
				const rest = 100 << 10
				if chunked {
					fmt.Fprintf(conn, "POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
				} else {
					fmt.Fprintf(conn, "POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", first+rest, strings.Repeat("f", first))
				}
				start := time.Now()
				br := bufio.NewReader(conn)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("after %v: %v; want an answer before the client sends more", time.Since(start), err)
				}
				defer resp.Body.Close()
				if took := time.Since(start); took > deadline/2 {
					t.Errorf("answered after %v, want well before %v", took, deadline)
				}
				if tt.want != 0 {
					b, _ := io.ReadAll(resp.Body)
					if resp.StatusCode != tt.want || !strings.Contains(string(b), `upstream "gray"`) {
						t.Fatalf("%d %q, want %d naming the pool", resp.StatusCode, b, tt.want)
					}
					errBody(t, resp, string(b))
					return
				}
				if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Gray-Degraded") != "fallback" {
					t.Fatalf("%d, degraded %q; want stable's 200, fallback", resp.StatusCode, resp.Header.Get("X-Gray-Degraded"))
				}
				body := bufio.NewReader(resp.Body)
				line, err := body.ReadString('\n')
				if want := fmt.Sprintf("stable got %d\n", first); err != nil || line != want {
					t.Fatalf("stable's first line %q, %v; want %q", line, err, want)
				}
				// Only now does the client send the rest.
				if _, err := conn.Write(make([]byte, rest)); err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(body)
				if err != nil || string(b) != "and "+strconv.Itoa(rest)+" more\n" {
					t.Fatalf("the rest of stable's answer: %q, %v; want the whole body relayed", b, err)
				}
			})
		}
	}
}

// TestReadTimeoutWhilePaused: read_timeout cuts an answer whose upstream
// goes silent mid-body while the client's upload is paused (it waits for
// more of the answer before it sends more). The timer ends the call's
// context, which the HTTP/2 transport looked at only between its reads
// of the request body once it had the response header; the read of the
// paused body held the answer open until client_read_timeout. The read is
// now given up when the call's context ends, for HTTP/2 and HTTP/1.1
// clients alike.
func TestReadTimeoutWhilePaused(t *testing.T) {
	const readTimeout, deadline = 300 * time.Millisecond, 10 * time.Second
	up := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "part")
		http.NewResponseController(w).Flush()
		_, _ = io.Copy(io.Discard, r.Body) // and never more of the answer
	}))
	pool := poolOf("up", addrOf(up))
	pool.Protocol = upstream.H2C
	opts := Options{UpstreamReadTimeout: readTimeout, ReadTimeout: time.Minute}
	_, gw := startProxyWith(t, opts, staticDecider(router.Decision{Rule: "r", Group: "g", Target: pool}), listener.Protocols{H2C: true})
	t.Run("h2", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		pr, pw := io.Pipe()
		defer pw.Close()
		context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
		go func() { _, _ = pw.Write([]byte("first")) }()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+gw+"/up", pr)
		req.ContentLength = 1 << 20
		start := time.Now()
		resp, err := h2cClient(t).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if took := time.Since(start); err == nil || string(b) != "part" || took > deadline/2 {
			t.Fatalf("%q, %v after %v; want \"part\", then the stream reset at the %v read timeout", b, err, took, readTimeout)
		}
	})
	t.Run("h1", func(t *testing.T) {
		conn := dialBounded(t, gw, deadline)
		defer conn.Close()
		fmt.Fprintf(conn, "POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
		start := time.Now()
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if took := time.Since(start); err == nil || string(b) != "part" || took > deadline/2 {
			t.Fatalf("%q, %v after %v; want \"part\", then the answer cut off at the %v read timeout", b, err, took, readTimeout)
		}
	})
}

// TestH1PausedUploadToHTTP1: an HTTP/1.1 client's upload to an http1
// pool that sends a first part (a chunk, or part of a declared length)
// and then waits for an answer before it sends more gets one promptly,
// whatever the upstream does after it read that part: its early answer,
// or a 502 naming the pool when it closes or resets without one. Before,
// the first part sat in the gateway's write buffer, so the upstream never
// saw it, and the gateway looked at the upstream again only when the
// client sent more: the client waited until its own deadline (or the
// gateway's client_read_timeout). An interim (1xx) answer ends nothing:
// the upload goes on once the client resumes, and the final answer
// follows.
func TestH1PausedUploadToHTTP1(t *testing.T) {
	const rest, deadline = 64 << 10, 10 * time.Second
	early := "HTTP/1.1 403 Forbidden\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno"
	for _, tt := range []struct {
		name    string
		answer  string // written after the first part, if any
		reset   bool   // close with RST instead of FIN
		keep    bool   // keep the connection open (and unread) after the answer
		interim bool   // answer 103 first, then read the whole body and answer 200
		status  int
		body    string // what the body holds
	}{
		{name: "closed", status: http.StatusBadGateway, body: `upstream "up" failed`},
		{name: "reset", reset: true, status: http.StatusBadGateway, body: `upstream "up" failed`},
		{name: "early answer, closed", answer: early, status: http.StatusForbidden, body: "no"},
		{name: "early answer, reset", answer: early, reset: true, status: http.StatusForbidden, body: "no"},
		{name: "early answer, kept open", answer: early, keep: true, status: http.StatusForbidden, body: "no"},
		{name: "interim, then the whole body", interim: true, status: http.StatusOK, body: "got "},
	} {
		for _, chunked := range []bool{true, false} {
			name := tt.name + map[bool]string{true: ", chunked", false: ", length"}[chunked]
			// fasthttp reads the first 8 KiB of a declared length before
			// the handler runs; a chunk goes on as it is.
			first := 8 << 10
			if chunked {
				first = 1024
			}
			t.Run(name, func(t *testing.T) {
				got := make(chan struct{}, 1)
				release := make(chan struct{})
				defer close(release)
				addr := testserve.Conns(t, func(c net.Conn) {
					req, err := http.ReadRequest(bufio.NewReader(c))
					if err != nil {
						return
					}
					if _, err := io.ReadFull(req.Body, make([]byte, first)); err != nil {
						return
					}
					got <- struct{}{}
					if tt.interim {
						if _, err := io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"); err != nil {
							return
						}
						n, _ := io.Copy(io.Discard, req.Body)
						fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\ngot %d", len("got ")+len(strconv.Itoa(int(n)+first)), int(n)+first)
						<-release
						return
					}
					if tt.answer != "" {
						if _, err := io.WriteString(c, tt.answer); err != nil {
							return
						}
					}
					if tt.keep {
						<-release
						return
					}
					if tt.reset {
						_ = c.(*net.TCPConn).SetLinger(0)
					}
				})
				d := staticDecider(router.Decision{Rule: "r", Group: "g", Target: poolOf("up", addr)})
				_, gw := startProxy(t, Options{}, d)
				conn := dialBounded(t, gw, deadline)
				defer conn.Close()
				if chunked {
					fmt.Fprintf(conn, "POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", first, strings.Repeat("f", first))
				} else {
					fmt.Fprintf(conn, "POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", first+rest, strings.Repeat("f", first))
				}
				start := time.Now()
				select {
				case <-got:
				case <-time.After(deadline / 2):
					t.Fatal("the upstream did not get the first part of the body")
				}
				if tt.interim {
					// The client resumes once the upstream has the
					// first part; the 103 must not have cut the body.
					time.Sleep(100 * time.Millisecond)
					if chunked {
						fmt.Fprintf(conn, "%x\r\n%s\r\n0\r\n\r\n", rest, strings.Repeat("r", rest))
					} else {
						_, _ = conn.Write([]byte(strings.Repeat("r", rest)))
					}
				}
				br := bufio.NewReader(conn)
				resp, err := http.ReadResponse(br, nil)
				for err == nil && resp.StatusCode < 200 {
					resp, err = http.ReadResponse(br, nil)
				}
				if err != nil {
					t.Fatalf("after %v: %v; want an answer before the client sends more", time.Since(start), err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if took := time.Since(start); took > deadline/2 {
					t.Errorf("answered after %v, want well before the client's %v deadline", took, deadline)
				}
				want := tt.body
				if tt.interim {
					want += strconv.Itoa(first + rest)
				}
				if resp.StatusCode != tt.status || !strings.Contains(string(b), want) {
					t.Fatalf("%d %q, want %d with %q", resp.StatusCode, b, tt.status, want)
				}
				if tt.status == http.StatusBadGateway {
					errBody(t, resp, string(b))
				}
				if !tt.interim && !resp.Close {
					t.Error("the client connection stays open after an answer to half a body")
				}
			})
		}
	}
}
