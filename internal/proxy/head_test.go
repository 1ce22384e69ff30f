package proxy

import (
	"bufio"
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/upstream"
)

// TestRawHeadMatchesRequestWriter checks that a request without a body,
// which buildRequest writes as bytes itself, goes upstream exactly as
// fasthttp's request writer sends the same request built in ex.req (the
// path of requests with a body).
func TestRawHeadMatchesRequestWriter(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		trusted bool
		d       router.Decision
	}{
		{name: "GET", raw: "GET /a/b?q=1&r=%20 HTTP/1.1\r\nHost: example.com\r\nX-User-Id: 42\r\nCookie: a=1; b=2\r\nAccept: */*\r\n\r\n"},
		{name: "HEAD", raw: "HEAD / HTTP/1.1\r\nHost: example.com\r\n\r\n"},
		{name: "POST without a body", raw: "POST /submit HTTP/1.1\r\nHost: example.com\r\nContent-Length: 0\r\n\r\n"},
		{name: "DELETE", raw: "DELETE /item/7 HTTP/1.1\r\nHost: example.com\r\n\r\n"},
		{name: "HTTP/1.0, no Host", raw: "GET /old HTTP/1.0\r\nX-A: 1\r\n\r\n"},
		{name: "absolute form", raw: "GET http://example.com/abs?x=1 HTTP/1.1\r\nHost: example.com\r\n\r\n"},
		{name: "hop-by-hop and Connection tokens", raw: "GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\nKeep-Alive: 5\r\nTE: trailers\r\nUpgrade: h2c\r\nX-Kept: k\r\n\r\n"},
		{name: "untrusted forwarding headers", raw: "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil\r\nForwarded: for=6.6.6.6\r\nX-Real-Ip: 6.6.6.6\r\nX-Gray-Tag: forged\r\n\r\n"},
		{name: "trusted forwarding headers", trusted: true, raw: "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.1.1.1, 2.2.2.2\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: front\r\nForwarded: for=1.1.1.1\r\n\r\n"},
		{name: "coloring tag and upstream host", raw: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", d: router.Decision{Tag: "gray", UpstreamHost: true}},
		{name: "odd header names", raw: "GET / HTTP/1.1\r\nHost: h\r\nx-lower: 1\r\nX-MiXeD-CaSe: 2\r\nx-empty:\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			build := func(ws bool) (*exchange, []byte) {
				var ctx fasthttp.RequestCtx
				if err := ctx.Request.Read(bufio.NewReader(strings.NewReader(tt.raw))); err != nil {
					t.Fatal(err)
				}
				p := New(Options{}, nil, nil)
				t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
				ex := p.newExchange()
				ex.d = tt.d
				ex.inst = &upstream.Instance{Addr: "10.0.0.9:8080"}
				ex.peer = netip.MustParseAddr("192.0.2.7")
				p.buildRequest(&ctx, ex, tt.trusted, ws)
				var out bytes.Buffer
				w := bufio.NewWriter(&out)
				if ex.rawHead {
					_, _ = w.Write(ex.head)
				} else if err := ex.req.Write(w); err != nil {
					t.Fatal(err)
				}
				_ = w.Flush()
				return ex, out.Bytes()
			}
			rawEx, raw := build(false)
			reqEx, viaReq := build(true) // a WebSocket handshake always goes through ex.req
			if !rawEx.rawHead || reqEx.rawHead {
				t.Fatalf("rawHead: %v and %v, want true and false", rawEx.rawHead, reqEx.rawHead)
			}
			if !bytes.Equal(raw, viaReq) {
				t.Errorf("raw head:\n%q\nfasthttp writer:\n%q", raw, viaReq)
			}
		})
	}
}
