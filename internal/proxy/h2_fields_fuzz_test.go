package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/testserve"
	"github.com/graygate/graygate/internal/upstream"
)

// FuzzH2FieldsNeverBlameUpstream sends HTTP/2 requests with any header
// fields, body and trailer fields through the real h2c listener, to an
// http1 pool and to an h2c pool whose upstreams answer every request they
// can read with 200, and checks two things. What reaches the http1 pool
// is a request Go's HTTP/1.1 server reads, trailers and all. And the
// client is never answered 502, 503 or 504: a request the gateway cannot
// forward is the client's to fix (4xx), or refused by x/net/http2's
// server (a reset stream), not an upstream's failure, which a breaker
// would count against a healthy version. Nor does an exchange take
// long: a stall until a timeout would be a hang to a client. An empty or badly named
// Trailer field made the transport fail, and the client got 502
// (TestTrailerFieldAlike).
//
// Each input is a list of fields, one "name: value" per line, a body (no
// body when empty: a GET) and a list of trailer fields in the same form.
func FuzzH2FieldsNeverBlameUpstream(f *testing.F) {
	for _, s := range [][3]string{
		{"x-a: 1", "", ""},
		{"x-a: 1\nx-a: 2", "abc", ""},
		{"trailer: x-t", "abc", "x-t: 1"},
		{"trailer: ", "abc", ""},
		{"trailer: h?ack", "abc", ""},
		{"trailer: x-t,,x-v", "abc", "x-t: 1\nx-v: 2"},
		{"trailer: x_t", "abc", "x_t: 1"},
		{"te: trailers\nx-b: ", "", ""},
		{"cookie: a=1\ncookie: b=2", "", ""},
		{"content-type: a\ncontent-type: b", "abc", ""},
		{"expect: 100-continue", "abc", ""},
		{"x-user-id: 7\nx-gray: 1", "", ""},
		{"via: 1.0 a\nx-forwarded-for: 1.2.3.4", "", ""},
		{"upgrade: websocket", "", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	addrs, bad := healthyRig(f)
	f.Fuzz(func(t *testing.T, fieldLines, body, trailerLines string) {
		method := http.MethodGet
		var data []byte
		if body != "" {
			method, data = http.MethodPost, []byte(body)
		}
		fields := append([][2]string{{":method", method}, {":scheme", "http"}, {":authority", "a"}, {":path", "/p"}}, fuzzFields(fieldLines)...)
		var trailers [][2]string
		if body != "" && trailerLines != "" {
			trailers = fuzzFields(trailerLines)
		}
		for i, addr := range addrs {
			start := time.Now()
			status, answer, err := h2ExchangeTrailers(t, addr, fields, data, trailers)
			if took := time.Since(start); took > 4*time.Second { // under the 5 s bound of the exchange
				t.Errorf("pool %d: fields %q, body %q, trailers %q: took %v (%d, %v)", i, fields[4:], body, trailers, took, status, err)
			}
			if err == nil && (status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout) {
				t.Errorf("pool %d: fields %q, body %q, trailers %q: answered %d %q", i, fields[4:], body, trailers, status, answer)
			}
			select {
			case msg := <-bad:
				t.Fatalf("fields %q, body %q, trailers %q: %s", fields[4:], body, trailers, msg)
			default:
			}
		}
	})
}

// fuzzFields reads "name: value" lines; a line without ": " is a name
// with an empty value.
func fuzzFields(lines string) [][2]string {
	var out [][2]string
	for l := range strings.SplitSeq(lines, "\n") {
		name, value, _ := strings.Cut(l, ": ")
		out = append(out, [2]string{name, value})
	}
	return out
}

// healthyRig is two gateways, each serving HTTP/1.1 and h2c on its real
// listener: the first to an http1 pool, the second to an h2c pool, whose
// upstreams answer 200 to every request they can read. A request the
// http1 upstream's reader (Go's) refuses is reported on bad.
func healthyRig(f *testing.F) ([2]string, chan string) {
	bad := make(chan string, 16)
	h1 := testserve.Conns(f, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				if err != io.EOF {
					bad <- fmt.Sprintf("Go's server refuses the request: %v", err)
				}
				return
			}
			if _, err := io.Copy(io.Discard, req.Body); err != nil {
				// A body cut short: the client's stream was reset
				// (an upper-case trailer name), and the gateway
				// gave up the upload. Had it not been, the client's
				// answer would be the 502 checked below.
				return
			}
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	h2c := h2cServer(f, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}))
	var addrs [2]string
	for i, p := range []*upstream.Pool{poolOf("stable", h1), poolOf("stable", addrOf(h2c))} {
		if i == 1 {
			p.Protocol = upstream.H2C
		}
		_, addrs[i] = startProxyWith(f, Options{}, staticDecider{Group: "stable", Target: p}, listener.Protocols{H2C: true})
	}
	return addrs, bad
}

// FuzzH1FieldsNeverBlameUpstream is FuzzH2FieldsNeverBlameUpstream for the
// HTTP/1.1 listener: a request with any field lines ("name: value", one
// a line, which may hold anything, CR and LF too) and, when the body is
// not empty, that body chunked and then any trailer lines, sent as bytes,
// to an http1 and an h2c pool that answer 200. The listener may refuse
// it (4xx, or a close before any answer), and what reaches the http1
// pool must be a request Go's server reads; but no answer is 502, 503
// or 504, and none keeps the client waiting.
func FuzzH1FieldsNeverBlameUpstream(f *testing.F) {
	for _, s := range [][3]string{
		{"X-A: 1", "", ""},
		{"X-A: 1\nX-A: 2", "abc", ""},
		{"Trailer: X-T", "abc", "X-T: 1"},
		{"Trailer: ", "abc", ""},
		{"Trailer: X-T,,X-V", "abc", "X-T: 1"},
		{"TE: trailers, gzip\nConnection: TE", "", ""},
		{"Connection: keep-alive, Upgrade\nUpgrade: h2c", "", ""},
		{"Keep-Alive: 5\nProxy-Connection: keep-alive", "", ""},
		{"Cookie: a=1\nCookie: b=2", "", ""},
		{"Content-Type: a\nContent-Type: b", "abc", ""},
		{"Expect: 100-continue", "abc", ""},
		{"Host: b", "", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	addrs, bad := healthyRig(f)
	f.Fuzz(func(t *testing.T, fieldLines, body, trailerLines string) {
		var b strings.Builder
		method := http.MethodGet
		if body != "" {
			method = http.MethodPost
		}
		b.WriteString(method + " /p HTTP/1.1\r\nHost: a\r\n")
		for l := range strings.SplitSeq(fieldLines, "\n") {
			b.WriteString(l + "\r\n")
		}
		if body != "" {
			b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
			fmt.Fprintf(&b, "%x\r\n%s\r\n0\r\n", len(body), body)
			if trailerLines != "" {
				for l := range strings.SplitSeq(trailerLines, "\n") {
					b.WriteString(l + "\r\n")
				}
			}
		}
		b.WriteString("\r\n")
		raw := b.String()
		for i, addr := range addrs {
			start := time.Now()
			c := dialBounded(t, addr, 5*time.Second)
			_, _ = io.WriteString(c, raw)
			resp, err := readFinalResponse(bufio.NewReader(c), method)
			c.Close()
			if took := time.Since(start); took > 4*time.Second {
				t.Errorf("pool %d: %q took %v (%v)", i, raw, took, err)
			}
			if err == nil && (resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout) {
				t.Errorf("pool %d: %q: answered %d", i, raw, resp.StatusCode)
			}
			select {
			case msg := <-bad:
				t.Fatalf("%q: %s", raw, msg)
			default:
			}
		}
	})
}
