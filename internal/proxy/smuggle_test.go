package proxy

import (
	"bufio"
	"net/http"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/internal/listener"
)

// TestSmuggling sends request shapes that two parsers could frame
// differently. Each must be refused before anything reaches the upstream.
// The listener's Guard refuses every one of them (but CONNECT, which the
// handler refuses); "by" records whether fasthttp's own parser would refuse
// it too ("fasthttp") or only the Guard does ("gateway"), which pins what
// the package doc says to the fasthttp version in go.mod.
func TestSmuggling(t *testing.T) {
	backend, seen := echoBackend(t, "stable")
	_, addr := startProxy(t, Options{MaxHeaderBytes: 4096}, staticDecider{
		Rule: "r", Group: "stable", Target: poolOf("stable", addrOf(backend)),
	})
	tests := []struct {
		name   string
		by     string
		raw    string
		status int
	}{
		{
			name: "Content-Length and Transfer-Encoding", by: "gateway", status: 400,
			raw: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		},
		{
			name: "Transfer-Encoding and Content-Length", by: "gateway", status: 400,
			raw: "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n",
		},
		{
			name: "Transfer-Encoding identity", by: "gateway", status: 400,
			raw: "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
		},
		{
			name: "obs-fold continuation line", by: "gateway", status: 400,
			raw: "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n X-B: 2\r\n\r\n",
		},
		{
			name: "obs-fold hiding Transfer-Encoding", by: "gateway", status: 400,
			raw: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nX-A: 1\r\n\tTransfer-Encoding: chunked\r\n\r\nhello",
		},
		{
			name: "bare LF line ending", by: "gateway", status: 400,
			raw: "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		},
		{
			name: "space inside header name", by: "gateway", status: 400,
			raw: "POST / HTTP/1.1\r\nHost: a\r\nTransfer Encoding: chunked\r\nContent-Length: 0\r\n\r\n",
		},
		{
			name: "missing Host in HTTP/1.1", by: "fasthttp", status: 400,
			raw: "GET / HTTP/1.1\r\nX-A: 1\r\n\r\n",
		},
		{
			name: "CONNECT", by: "handler", status: 405,
			raw: "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
		},
		{
			name: "duplicate Content-Length", by: "fasthttp", status: 400,
			raw: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\nbody",
		},
		{
			name: "conflicting Content-Length", by: "fasthttp", status: 400,
			raw: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nbodyx",
		},
		{
			name: "Content-Length list", by: "fasthttp", status: 400,
			raw: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4, 4\r\n\r\nbody",
		},
		{
			name: "signed Content-Length", by: "fasthttp", status: 400,
			raw: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +4\r\n\r\nbody",
		},
		{
			name: "Transfer-Encoding gzip, chunked", by: "fasthttp", status: 400,
			raw: "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		},
		{
			name: "Transfer-Encoding twice", by: "fasthttp", status: 400,
			raw: "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		},
		{
			name: "Transfer-Encoding in HTTP/1.0", by: "fasthttp", status: 400,
			raw: "POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		},
		{
			name: "space before colon", by: "fasthttp", status: 400,
			raw: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length : 4\r\n\r\nbody",
		},
		{
			name: "header block starting with space", by: "fasthttp", status: 400,
			raw: "GET / HTTP/1.1\r\n Host: a\r\n\r\n",
		},
		{
			name: "NUL in header value", by: "fasthttp", status: 400,
			raw: "GET / HTTP/1.1\r\nHost: a\r\nX-A: a\x00b\r\n\r\n",
		},
		{
			name: "duplicate Host", by: "fasthttp", status: 400,
			raw: "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		},
		{
			name: "header over MaxHeaderBytes", by: "fasthttp", status: 431,
			raw: "GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("x", 8<<10) + "\r\n\r\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.by+"/"+tt.name, func(t *testing.T) {
			if tt.by != "handler" {
				g := listener.NewGuard(4096)
				if _, gerr := g.Scan([]byte(tt.raw)); gerr == nil || gerr.Status != tt.status {
					t.Errorf("Guard.Scan = %v, want a refusal with %d", gerr, tt.status)
				}
			}
			// Pin which layer refuses the request: fasthttp's own header
			// parser must accept exactly the "gateway" rows.
			if tt.status != http.StatusRequestHeaderFieldsTooLarge && tt.by != "handler" {
				var h fasthttp.RequestHeader
				err := h.Read(bufio.NewReader(strings.NewReader(tt.raw)))
				if accepted := err == nil; accepted != (tt.by == "gateway") {
					t.Errorf("fasthttp RequestHeader.Read error = %v; the test says %s refuses it", err, tt.by)
				}
			}
			before := seen.Load()
			resp, body := rawExchange(t, addr, "POST", tt.raw)
			if resp.StatusCode != tt.status {
				t.Errorf("status %d (%q), want %d", resp.StatusCode, body, tt.status)
			}
			if !resp.Close {
				t.Errorf("connection kept open after a rejected request")
			}
			if n := seen.Load() - before; n != 0 {
				t.Errorf("upstream received %d requests, want 0", n)
			}
		})
	}

	// The same connection shapes that are fine must still go through.
	t.Run("accepted/chunked without Content-Length", func(t *testing.T) {
		resp, body := rawExchange(t, addr, "POST",
			"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"body":"hello"`) {
			t.Errorf("status %d body %q, want 200 echoing hello", resp.StatusCode, body)
		}
	})
}
