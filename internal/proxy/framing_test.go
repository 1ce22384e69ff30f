package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/internal/listener"
)

// TestBareLFResponseHead: an http1 upstream whose response head ends its
// lines with a bare LF (RFC 9112 section 2.2 lets a recipient accept one,
// as net/http's client and nginx do) is answered at once and correctly,
// not after the response header timeout with a 504: whole, in parts, on
// an interim response, with a streamed or a chunked body. The upstream
// connection is reused afterwards, as after any well-framed answer.
func TestBareLFResponseHead(t *testing.T) {
	const gap, timeout = 3 * watchDelay, 3 * time.Second
	parts := map[string][]string{
		"/lf":          {"HTTP/1.1 200 OK\nContent-Length: 2\nX-A: b\n\nok"},
		"/lf-end":      {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: b\r\n\nok"},
		"/crlf-end":    {"HTTP/1.1 200 OK\nContent-Length: 2\nX-A: b\n\r\nok"},
		"/status-line": {"HTTP/1.1 200 OK\nContent-Length: 2\r\nX-A: b\r\n\r\nok"},
		"/lf-parts":    {"HTTP/1.1 200 OK\n", "Content-Length: 2\nX-A: b\n", "\nok"},
		"/lf-large":    {"HTTP/1.1 200 OK\nContent-Length: 100000\nX-A: b\n\n" + strings.Repeat("x", 100000)},
		"/lf-interim":  {"HTTP/1.1 103 Early Hints\nLink: </a.css>; rel=preload\n\n", "HTTP/1.1 200 OK\nContent-Length: 2\nX-A: b\n\nok"},
		"/lf-chunked":  {"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\nX-A: b\n\n2\r\nok\r\n0\r\n\r\n"},
		"/lf-head":     {"HTTP/1.1 200 OK\nContent-Length: 2\nX-A: b\n\n"},
	}
	conns := make(chan struct{}, 64)
	var closed atomic.Int64
	up := partsBackendClosing(t, parts, gap, conns, &closed, func(string) bool { return true })
	_, addr := startProxy(t, Options{ResponseHeaderTimeout: timeout}, staticDecider{Group: "stable", Target: poolOf("stable", up)})
	requests := []struct{ path, body string }{
		{"/lf", "ok"},
		{"/lf", "ok"}, // on the same upstream connection
		{"/lf-end", "ok"},
		{"/crlf-end", "ok"},
		{"/status-line", "ok"},
		{"/lf-parts", "ok"},
		{"/lf-large", strings.Repeat("x", 100000)},
		{"/lf-interim", "ok"},
		{"/lf-chunked", "ok"},
		{"/lf-head", ""},
	}
	for _, tt := range requests {
		t.Run(tt.path[1:], func(t *testing.T) {
			method := "GET"
			if tt.path == "/lf-head" {
				method = "HEAD"
			}
			start := time.Now()
			resp, body := rawExchange(t, addr, method, method+" "+tt.path+" HTTP/1.1\r\nHost: x\r\n\r\n")
			if resp.StatusCode != 200 || body != tt.body || resp.Header.Get("X-A") != "b" {
				t.Errorf("%d, X-A %q, %d bytes %.20q after %v; want 200, X-A b, %d bytes", resp.StatusCode, resp.Header.Get("X-A"), len(body), body, time.Since(start), len(tt.body))
			}
			if resp.Header.Get("Date") == "" {
				t.Error("no Date: the gateway adds one to an answer without (RFC 9110 section 6.6.1)")
			}
		})
	}
	// A response with bare LF line ends is well framed: the gateway
	// closes no upstream connection after one, and reuses them. (A request
	// may still open a second connection when it comes before the previous
	// answer's connection is back in the pool: a loaded CI machine did.)
	if n := closed.Load(); n != 0 {
		t.Errorf("the gateway closed %d upstream connections, want none", n)
	}
	if n := len(conns); n > len(requests)/2 {
		t.Errorf("the upstream accepted %d connections for %d requests: they were not reused", n, len(requests))
	}
}

// TestMalformedFirstChunk: a chunked response whose first chunk-size line
// the gateway's parser refuses (a bare LF, which errata 7633 of RFC 9112
// excludes from chunked lines, as net/http does; whitespace before a
// chunk extension's ";", which fasthttp and net/http refuse) gets a
// prompt 502 with the request id when the line came with the header:
// nothing has been sent to the client, so it is not given a 200 and a
// body cut off at its first byte. The breaker counts a failure and the
// upstream connection is closed, not pooled. A chunk extension the parser
// accepts is forwarded, and a malformed line further into the body, or
// chunk data not followed by CRLF, cuts the answer off at once (it cannot
// hang, nor go on as if the bytes past the flaw were more chunks, nor
// leave the connection pooled). An HTTP/2 client of the http1
// pool is answered alike, whichever way its request goes there: without
// a body (the HTTP/1.1 codec's pooled connections, read by net/http's
// parser) or with one (net/http's Transport).
func TestMalformedFirstChunk(t *testing.T) {
	const head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	answers := map[string]string{
		"/chunk-lf":      head + "2\nok\n0\n\n",
		"/chunk-lf-all":  "HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n2\nok\n0\n\n",
		"/bws":           head + "a ;ext=1\r\n0123456789\r\n0\r\n\r\n",
		"/bws-tab":       head + "a\t;ext=1\r\n0123456789\r\n0\r\n\r\n",
		"/ext":           head + "a;ext=1\r\n0123456789\r\n0\r\n\r\n",
		"/ext-quoted":    head + "a;ext=\"x y\"\r\n0123456789\r\n0\r\n\r\n",
		"/ows":           head + "a \r\n0123456789\r\n0\r\n\r\n",
		"/empty":         head + "0\r\nX-T: 1\r\n\r\n",
		"/later-bws":     head + "2\r\nok\r\na ;ext=1\r\n0123456789\r\n0\r\n\r\n",
		"/data-no-crlf":  head + "2\r\n0000\r\n\r\n",
		"/later-no-crlf": head + "2\r\nok\r\n1\r\nx00\r\n\r\n",
		"/next":          "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext",
	}
	opts := Options{ResponseHeaderTimeout: 5 * time.Second, UpstreamReadTimeout: 5 * time.Second}
	for _, codec := range []string{"h1", "h2c", "h2c-post"} {
		for _, tt := range []struct {
			path   string
			status int
			body   string
			cut    bool // the body breaks off after the header went out
		}{
			{"/chunk-lf", 502, "", false},
			{"/chunk-lf-all", 502, "", false},
			{"/bws", 502, "", false},
			{"/bws-tab", 502, "", false},
			{"/ext", 200, "0123456789", false},
			{"/ext-quoted", 200, "0123456789", false},
			{"/ows", 200, "0123456789", false},
			{"/empty", 200, "", false},
			{"/later-bws", 200, "ok", true},
			// Chunk data not followed by CRLF: what follows must not be
			// read as more chunks (fasthttp's writer reads again after
			// the error, so respBody keeps it).
			{"/data-no-crlf", 200, "00", true},
			{"/later-no-crlf", 200, "okx", true},
		} {
			t.Run(codec+tt.path, func(t *testing.T) {
				var conns atomic.Int32
				up := framedBackend(t, answers, &conns)
				var r *stallRig
				idle := func() {}
				var get func(path string) (*http.Response, string, error)
				if codec == "h1" {
					r = newStallRig(t, up, opts)
					get = func(path string) (*http.Response, string, error) {
						c := dialRaw(t, r.addr)
						fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: a\r\n\r\n", path)
						resp, err := http.ReadResponse(newReader(c), nil)
						if err != nil {
							t.Fatalf("reading the answer: %v", err)
						}
						b, berr := io.ReadAll(resp.Body)
						return resp, string(b), berr
					}
				} else {
					r = newH2RigFor(t, poolOf("gray", up), opts)
					c := h2cClient(t)
					idle = c.CloseIdleConnections
					get = func(path string) (*http.Response, string, error) {
						req, _ := http.NewRequest("GET", "http://"+r.addr+path, nil)
						if codec == "h2c-post" {
							req, _ = http.NewRequest("POST", "http://"+r.addr+path, strings.NewReader("upload"))
						}
						resp, err := c.Do(req)
						if err != nil {
							t.Fatalf("%s %s: %v", req.Method, path, err)
						}
						defer resp.Body.Close()
						b, berr := io.ReadAll(resp.Body)
						return resp, string(b), berr
					}
				}
				start := time.Now()
				resp, body, berr := get(tt.path)
				idle() // so that the client connection's goroutine ends before settle
				switch {
				case resp.StatusCode != tt.status:
					t.Fatalf("status %d, body %q after %v; want %d", resp.StatusCode, body, time.Since(start), tt.status)
				case tt.status == 502:
					id := resp.Header.Get("X-Request-Id")
					if id == "" || !strings.Contains(body, id) || strings.Contains(body, up) {
						t.Errorf("error answer with X-Request-Id %q, body %q; want the id in the body and no instance address", id, body)
					}
				case tt.cut && (berr == nil || body != tt.body):
					t.Errorf("body %q, %v; want %q and then the body cut off", body, berr, tt.body)
				case !tt.cut && (berr != nil || body != tt.body):
					t.Errorf("body %q, %v; want %q", body, berr, tt.body)
				}
				wantFail := uint64(0)
				if tt.status == 502 || tt.cut {
					wantFail = 1
				}
				r.settle(t, "")
				if f := r.failures(); f != wantFail {
					t.Errorf("breaker failures = %d, want %d", f, wantFail)
				}
				// The next request must go on a new upstream connection when
				// the answer was refused or cut, and on the same one after a
				// well-formed answer.
				if resp, body, err := get("/next"); resp.StatusCode != 200 || body != "next" || err != nil {
					t.Fatalf("next request: %d %q %v", resp.StatusCode, body, err)
				}
				want := int32(1)
				if wantFail == 1 {
					want = 2
				}
				if n := conns.Load(); n != want {
					t.Errorf("the upstream accepted %d connections, want %d", n, want)
				}
			})
		}
	}
}

// TestContentLengthWithChunked: an upstream response with both
// Content-Length and Transfer-Encoding: chunked (in either order) is
// framed by the chunked coding, which overrides the length (RFC 9112
// section 6.3), and relayed without the Content-Length; but such a
// message "ought to be handled as an error" (it is how response
// splitting and smuggling look), so the connection it came on is closed
// after it and never reused, and the violation is counted. The same holds
// for an HTTP/1.0 response that carries Transfer-Encoding (RFC 9112
// section 6.1: its framing is faulty, close after it). Both codecs share
// the pools: an HTTP/2 client's request to the http1 pool is checked too,
// on every way it goes there: without a body (the HTTP/1.1 codec's
// pooled connections), and with one (net/http's Transport), streamed,
// held for a replay on stable, and over TLS. The next request goes the
// same way as the one that met the conflict, so that it would find the
// same connection pooled.
func TestContentLengthWithChunked(t *testing.T) {
	answers := map[string]string{
		"/clte": "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"/tecl": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\ncontent-length: 3\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		// fasthttp drops the whitespace before the colon (RFC 9112 section
		// 5.1 asks a proxy to); net/http's reader refuses the field.
		"/tecl-ws": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length : 3\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"/http10":  "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\nhello",
		// The head in parts, and after an interim response.
		"/clte-parts":   "HTTP/1.1 200 OK\r\nContent-Le|ngth: 3\r\nTransfer-Encoding: chunked\r|\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"/clte-interim": "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"/next":         "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext",
	}
	gw := newGatewayTLS(t)
	for _, codec := range []string{"h1", "h2c", "h2c-post", "h2c-post-held", "h2-post"} {
		for _, path := range []string{"/clte", "/tecl", "/tecl-ws", "/http10", "/clte-parts", "/clte-interim"} {
			if codec != "h1" && path == "/tecl-ws" {
				continue
			}
			t.Run(codec+path, func(t *testing.T) {
				var conns atomic.Int32
				up := framedBackend(t, answers, &conns)
				d := staticDecider{Group: "stable", Target: poolOf("stable", up)}
				if codec == "h2c-post-held" {
					// A stable target to fall back on: the body is
					// buffered at admit and lent to the Transport whole.
					d.Group, d.Stable = "gray", poolOf("other", up)
				}
				var p *Proxy
				var get func(path string) (int, string, *http.Response)
				if codec == "h1" {
					var addr string
					p, addr = startProxy(t, Options{}, d)
					get = func(path string) (int, string, *http.Response) {
						resp, body := rawExchange(t, addr, "GET", "GET "+path+" HTTP/1.1\r\nHost: a\r\n\r\n")
						return resp.StatusCode, body, resp
					}
				} else {
					var addr, base string
					var c *http.Client
					if codec == "h2-post" {
						p, addr = startProxyWith(t, Options{}, d, listener.Protocols{TLS: gw.conf})
						base, c = "https://"+addr, h2Client(t, gw.ca.Pool)
					} else {
						p, addr = startProxyWith(t, Options{}, d, listener.Protocols{H2C: true})
						base, c = "http://"+addr, h2cClient(t)
					}
					get = func(path string) (int, string, *http.Response) {
						method, body := "POST", io.Reader(strings.NewReader("upload"))
						switch codec {
						case "h2c":
							method, body = "GET", nil
						case "h2-post":
							// Of unknown length: sent without a
							// Content-Length.
							body = io.MultiReader(strings.NewReader("up"), strings.NewReader("load"))
						}
						req, _ := http.NewRequest(method, base+path, body)
						resp, err := c.Do(req)
						if err != nil {
							t.Fatalf("%s %s: %v", req.Method, path, err)
						}
						defer resp.Body.Close()
						b, err := io.ReadAll(resp.Body)
						if err != nil {
							t.Fatalf("%s %s: body: %v", req.Method, path, err)
						}
						return resp.StatusCode, string(b), resp
					}
				}
				code, body, resp := get(path)
				if code != 200 || body != "hello" {
					t.Errorf("%d %q, want 200 \"hello\"", code, body)
				}
				if cl := resp.Header.Get("Content-Length"); cl != "" && cl != "5" {
					t.Errorf("relayed with Content-Length %q, which the chunked coding overrode", cl)
				}
				if code, body, _ := get("/next"); code != 200 || body != "next" {
					t.Fatalf("next request: %d %q", code, body)
				}
				if n := conns.Load(); n != 2 {
					t.Errorf("the upstream accepted %d connections, want 2: the one that carried the conflicting framing was reused", n)
				}
				v := p.ProtocolViolations()
				if got := v[violationFramingConflict]; got != 1 {
					t.Errorf("%s violations = %d, want 1 (%v)", ViolationReasons[violationFramingConflict], got, v)
				}
			})
		}
	}
}

// framedBackend is an upstream that reads each request whole, body
// included, and answers it with the bytes answers gives for its path, on
// as many requests per connection as come; an answer with "|" in it is
// written in parts, a few milliseconds apart, the "|" left out. It counts
// the connections it accepted.
func framedBackend(t *testing.T, answers map[string]string, conns *atomic.Int32) string {
	t.Helper()
	return stallBackend(t, func(c net.Conn, br *bufio.Reader) {
		conns.Add(1)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if _, err := io.Copy(io.Discard, req.Body); err != nil {
				return
			}
			for i, part := range strings.Split(answers[req.URL.Path], "|") {
				if i > 0 {
					time.Sleep(5 * time.Millisecond)
				}
				if _, err := io.WriteString(c, part); err != nil {
					return
				}
			}
		}
	})
}

// FuzzBufferHead: bufferHead and readHead's bare-LF path frame a head
// where fasthttp's parser does when it can (a CRLFCRLF in sight): the
// bytes left after the head are the same either way, and nothing panics
// or reads past the input.
func FuzzBufferHead(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\nContent-Length: 2\n\nok"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\nok\r\n\r\n"))
	f.Add([]byte("\r\nHTTP/1.1 200 OK\nX: a\n b\n\r\nok"))
	f.Add([]byte("HTTP/1.1 103 Early Hints\nLink: </a>\n\nHTTP/1.1 200 OK\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(in), 512)
		lfEnd, err := bufferHead(br)
		if err != nil {
			return
		}
		var h fasthttp.ResponseHeader
		if lfEnd == 0 {
			_ = h.Read(br)
			return
		}
		if err := readBareLF(&h, br, mustPeek(br)[:lfEnd]); err != nil {
			return
		}
		rest := mustPeek(br)
		// fasthttp, shown the head with a CRLFCRLF after it, ends it at
		// the same place.
		var h2 fasthttp.ResponseHeader
		br2 := bufio.NewReaderSize(bytes.NewReader(append(append([]byte(nil), in[:len(in)-len(rest)]...), "\r\n\r\n"...)), 1024)
		if err := h2.Read(br2); err != nil {
			head := in[:len(in)-len(rest)]
			if bytes.Contains(head, []byte("\n ")) || bytes.Contains(head, []byte("\n\t")) {
				return // a fold readBareLF joined as net/http does; fasthttp may refuse what it joins ("5 ")
			}
			t.Fatalf("fasthttp refuses %q, which readBareLF took", head)
		}
		if left := mustPeek(br2); string(left) != "\r\n\r\n" {
			t.Fatalf("fasthttp ends the head of %q with %q left, readBareLF with none", in[:len(in)-len(rest)], left)
		}
	})
}

func mustPeek(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return b
}

// TestBareLFResponseHeadH2: an HTTP/2 client of an http1 pool is answered
// as an HTTP/1.1 client is when the upstream's head ends its lines with a
// bare LF, whichever way the request goes there: without a body (the
// HTTP/1.1 codec's pooled connections, read by net/http's parser) or with
// one (net/http's Transport).
func TestBareLFResponseHeadH2(t *testing.T) {
	addr := rawBackend(t, func(req *http.Request, w *bufio.Writer) {
		if req.URL.Path == "/lf-chunked" {
			_, _ = w.WriteString("HTTP/1.1 200 OK\nTransfer-Encoding: chunked\nX-A: b\n\n2\r\nok\r\n0\r\n\r\n")
			return
		}
		_, _ = w.WriteString("HTTP/1.1 200 OK\nContent-Length: 2\nX-A: b\n\nok")
	})
	_, gw := startProxyWith(t, Options{}, staticDecider{Group: "stable", Target: poolOf("stable", addr)}, listener.Protocols{H2C: true})
	c := h2cClient(t)
	for _, method := range []string{"GET", "POST"} {
		for _, path := range []string{"/lf", "/lf-chunked"} {
			var body io.Reader
			if method == "POST" {
				body = strings.NewReader("payload")
			}
			req, _ := http.NewRequest(method, "http://"+gw+path, body)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || string(b) != "ok" || resp.Header.Get("X-A") != "b" {
				t.Errorf("%s %s: %d %q (%v), X-A %q; want 200 \"ok\", X-A b", method, path, resp.StatusCode, b, err, resp.Header.Get("X-A"))
			}
		}
	}
}

// TestReasonPhraseControlBytes: an upstream's reason phrase with a control
// byte in it (RFC 9112 section 4 allows HTAB, SP, VCHAR and obs-text) is
// replaced by the standard phrase in the HTTP/1.1 client's status line,
// on a final and on an interim answer. fasthttp keeps any byte but CR and
// LF there, and "404 \x1b[31mred" reached the client's terminal as it
// came. A valid phrase, tab and obs-text included, is kept.
func TestReasonPhraseControlBytes(t *testing.T) {
	answers := map[string]string{
		"/esc":   "HTTP/1.1 404 \x1b[31mred\r\nContent-Length: 2\r\n\r\nno",
		"/ctl":   "HTTP/1.1 200 O\x01K\r\nContent-Length: 2\r\n\r\nok",
		"/del":   "HTTP/1.1 201 Cr\x7feated\r\nContent-Length: 2\r\n\r\nok",
		"/103":   "HTTP/1.1 103 Ea\x02rly\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"/valid": "HTTP/1.1 200 Fine\tThanks \xe9\r\nContent-Length: 2\r\n\r\nok",
	}
	up := rawBackend(t, func(req *http.Request, w *bufio.Writer) { _, _ = w.WriteString(answers[req.URL.Path]) })
	_, addr := startProxy(t, Options{}, staticDecider{Group: "stable", Target: poolOf("stable", up)})
	for path, want := range map[string][]string{
		"/esc":   {"HTTP/1.1 404 Not Found"},
		"/ctl":   {"HTTP/1.1 200 OK"},
		"/del":   {"HTTP/1.1 201 Created"},
		"/103":   {"HTTP/1.1 103 Early Hints", "HTTP/1.1 200 OK"},
		"/valid": {"HTTP/1.1 200 Fine\tThanks \xe9"},
	} {
		c := dialBounded(t, addr, 5*time.Second)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", path)
		raw, err := io.ReadAll(c)
		c.Close()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var got []string
		for _, l := range strings.Split(string(raw), "\r\n") {
			if i := strings.Index(l, "HTTP/1.1 "); i >= 0 {
				got = append(got, l[i:])
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: status lines %q, want %q", path, got, want)
		}
	}
}

// TestFramingConflictAfterFoldedLine: an answer framed two ways whose
// first field line starts with whitespace (an obs-fold with nothing to
// continue, which net/http's reader and the HTTP/1.1 codec refuse) is a
// 502 on every way to an http1 pool. On the HTTP/2 listener's way through
// net/http's Transport, the Connection field the gateway adds to such a
// head went right after the status line, and took that line for its own
// continuation: the head was relayed, to an HTTP/2 client alone (found by
// TestH2AnswersAgreeWithHTTP1 on a wider set of answers). The conflict
// without the fold is still relayed, so the test sees both.
func TestFramingConflictAfterFoldedLine(t *testing.T) {
	answers := map[string]string{
		"/fold":    "HTTP/1.1 200 OK\r\n X-Fold: 1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"/fold-lf": "HTTP/1.1 200 OK\n\tX-Fold: 1\nTransfer-Encoding: chunked\nContent-Length: 3\n\n5\r\nhello\r\n0\r\n\r\n",
		"/plain":   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	}
	askAnswersEveryWay(t, answers, []string{"/fold", "/fold-lf"}, "hello", nil)
}

// askAnswersEveryWay starts an upstream that answers a request for a path
// with answers[path] (framedBackend) and a gateway in front of it that
// serves HTTP/1.1 and h2c, and asks for each path every way
// (askEveryWay): a path in bad must be answered 502, any other 200 with
// body, whole. check, when not nil, looks further at each answer.
func askAnswersEveryWay(t *testing.T, answers map[string]string, bad []string, body string, check func(way, path string, resp *http.Response)) {
	t.Helper()
	var conns atomic.Int32
	up := framedBackend(t, answers, &conns)
	_, addr := startProxyWith(t, Options{}, staticDecider{Group: "stable", Target: poolOf("stable", up)}, listener.Protocols{H2C: true})
	for _, path := range slices.Sorted(maps.Keys(answers)) {
		want := http.StatusOK
		if slices.Contains(bad, path) {
			want = http.StatusBadGateway
		}
		askEveryWay(t, "http://"+addr+path, func(way string, resp *http.Response, b []byte, err error) {
			if resp.StatusCode != want || (want == http.StatusOK && (err != nil || string(b) != body)) {
				t.Errorf("%s %s: %d %q (%v), want %d", way, path, resp.StatusCode, b, err, want)
			}
			if check != nil {
				check(way, path, resp)
			}
		})
	}
}

// TestInterimVersion: an interim answer whose version is not HTTP/1.1 or
// 1.0 ("HTTP/0.1 103") fails the attempt (502) on every way to an http1
// pool, whether it comes in one write with the final answer or apart. On
// the HTTP/2 listener's way through net/http's Transport, which takes any
// HTTP/x.y for an interim answer, it was relayed with the final one, and
// an HTTP/2 client got 200 where an HTTP/1.1 client got 502 (found by
// TestH2AnswersAgreeWithHTTP1 on a wider set of answers).
func TestInterimVersion(t *testing.T) {
	final := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
	answers := map[string]string{
		"/v01":       "HTTP/0.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n" + final,
		"/v01-apart": "HTTP/0.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n|" + final,
		"/v20-2nd":   "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/2.0 100 Continue\r\n\r\n" + final,
		"/v11":       "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n" + final,
		"/v11-apart": "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n|" + final,
	}
	askAnswersEveryWay(t, answers, []string{"/v01", "/v01-apart", "/v20-2nd"}, "ok", nil)
}

// TestFoldedContentLength: an answer whose Content-Length is folded over
// an empty continuation line ("5\r\n \r\n"; an obs-fold, RFC 9112 section
// 5.2) is relayed, with its other folded fields, on every way to an http1
// pool, in one write and with the fold's line end apart from the rest.
// net/http's reader joins the lines and an HTTP/2 client got the answer;
// the HTTP/1.1 codec kept the fold's LF in the length and refused it, and
// an HTTP/1.1 client got 502 (found by TestH2AnswersAgreeWithHTTP1 on a
// wider set of answers). A length folded into two numbers stays a 502,
// as does a line without a colon followed by a continuation, which
// net/http refuses, and a Transfer-Encoding folded over an empty line,
// whose "chunked " net/http refuses (both found by
// FuzzUpstreamAgainstNetHTTP on a first version that joined every fold
// itself).
// A fold before a Trailer field with an empty element, which the codec
// reads twice (closeEmptyTrailerElements), reads the same the second
// time: fasthttp joined folds over the bytes it had read, and an HTTP/1.1
// client got "a b\t b" for X-A where net/http's reader has "a b".
// A Trailer field folded with empty elements on either side of the fold
// ("Trailer: ,\r\n X-T,,X-U", "X-T,\n ,X-U") is relayed with its trailer
// fields: only its first line's empty elements were closed, fasthttp
// refused the joined value, and an HTTP/1.1 client got 502 (found by
// TestH2AnswersAgreeWithHTTP1 on a wider set of answers).
// The same holds with whitespace between the name and its colon
// ("Content-Length : 5", which a proxy takes and removes, RFC 9112
// section 5.1): the fold was not joined, and an HTTP/1.1 client got 502
// (found by TestH2AnswersAgreeWithHTTP1 on 8,000 answers, seed 211).
func TestFoldedContentLength(t *testing.T) {
	answers := map[string]string{
		"/cl-blank":       "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n \r\nX-A: a\r\n\t b\r\nConnection: close\r\n\r\nhello",
		"/cl-tab":         "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\t\r\nConnection: close\r\n\r\nhello",
		"/cl-spaced":      "HTTP/1.1 200 OK\r\nContent-Length : 5\r\n \r\nX-A: a\r\n\t b\r\nConnection: close\r\n\r\nhello",
		"/cl-lf":          "HTTP/1.1 200 OK\nContent-Length: 5\n \nConnection: close\n\nhello",
		"/cl-apart":       "HTTP/1.1 200 OK\r\nContent-Length: 5\r|\n \r\nConnection: close\r\n\r\nhello",
		"/cl-te":          "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n \r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"/cl-twice":       "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n 5\r\nConnection: close\r\n\r\nhello",
		"/cl-a-line":      "HTTP/1.1 200 OK\r\nContent-Length:\r\n 5\r\nConnection: close\r\n\r\nhello",
		"/trailer":        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: a\r\n\t b\r\nTrailer: , X-T\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
		"/trailer-folded": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: ,\r\n X-T,,X-U\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\nX-U: 2\r\n\r\n",
		"/trailer-apart":  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T,\n ,X-U\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\nX-U: 2\r\n\r\n",
		"/te-blank":       "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n \r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"/te-a-line":      "HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\n chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"/no-colon":       "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n0\r\n :\r\nConnection: close\r\n\r\nhello",
		"/two-folds":      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: a \r\n \r\n\tb \r\nConnection: close\r\n\r\nhello",
	}
	askAnswersEveryWay(t, answers, []string{"/cl-twice", "/no-colon", "/te-blank"}, "hello", func(way, path string, resp *http.Response) {
		if (path == "/cl-blank" || path == "/cl-spaced" || path == "/trailer") && resp.Header.Get("X-A") != "a b" {
			t.Errorf("%s %s: X-A %q, want %q", way, path, resp.Header.Get("X-A"), "a b")
		}
		if path == "/two-folds" && resp.Header.Get("X-A") != "a  b" {
			// net/http's reader: the line and each continuation
			// trimmed, a space before each continuation.
			t.Errorf("%s %s: X-A %q, want %q", way, path, resp.Header.Get("X-A"), "a  b")
		}
		if path == "/trailer" && resp.Trailer.Get("X-T") != "1" {
			t.Errorf("%s %s: trailer %v, want X-T: 1", way, path, resp.Trailer)
		}
		if (path == "/trailer-folded" || path == "/trailer-apart") && (resp.Trailer.Get("X-T") != "1" || resp.Trailer.Get("X-U") != "2") {
			t.Errorf("%s %s: trailer %v, want X-T: 1 and X-U: 2", way, path, resp.Trailer)
		}
	})
}

func TestFoldedHeadEnd(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int // 0, or the length of in up to the "|"
	}{
		{"HTTP/1.1 200 OK\r\nA: 1\r\n \r\n\r\n|body", 1},
		{"HTTP/1.1 200 OK\nA: 1\n\t2\n\n|\r\n\r\n", 1},
		{"HTTP/1.1 200 OK\r\n A: 1\r\n\r\n|", 1},        // a first field line that starts with whitespace
		{"HTTP/1.1 200 OK\r\nA: 1\r\n\r\n body\r\n", 0}, // past the head: the body's
		{"HTTP/1.1 200 OK\r\nA: 1\r\n \r\n", 0},         // not all there yet
		{"HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\n\r\n", 0},
		{"HTTP/1.1 200 OK\r\nA: 1\r\n\r", 0},
		{"", 0},
	} {
		want := 0
		if tc.want == 1 {
			want = strings.Index(tc.in, "|")
		}
		in := strings.Replace(tc.in, "|", "", 1)
		if got := foldedHeadEnd([]byte(in)); got != want {
			t.Errorf("foldedHeadEnd(%q) = %d, want %d", in, got, want)
		}
	}
}

// BenchmarkFoldedHeadEnd is the look for folds every response head gets
// before it is parsed, on the head bench/upstream sends with its body.
func BenchmarkFoldedHeadEnd(b *testing.B) {
	head := []byte("HTTP/1.1 200 OK\r\nServer: benchup\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\n" + strings.Repeat("x", 100))
	for b.Loop() {
		if foldedHeadEnd(head) != 0 {
			b.Fatal("a fold found")
		}
	}
}
