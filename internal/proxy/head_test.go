package proxy

import (
	"bufio"
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/upstream"
)

// TestUpstreamHead pins the exact head buildRequest sends upstream for
// requests the gateway forwards: the client's fields in arrival order, minus
// hop-by-hop and untrusted forwarding fields, then the gateway's own, then
// the framing.
func TestUpstreamHead(t *testing.T) {
	const tail = "X-Request-Id: rid\r\nVia: 1.1 graygate\r\n"
	tests := []struct {
		name    string
		raw     string
		trusted bool
		ws      bool
		d       router.Decision
		want    string
	}{
		{name: "GET", raw: "GET /a/b?q=1&r=%20 HTTP/1.1\r\nHost: example.com\r\nX-User-Id: 42\r\nCookie: a=1; b=2\r\nAccept: */*\r\n\r\n",
			want: "GET /a/b?q=1&r=%20 HTTP/1.1\r\nHost: example.com\r\nX-User-Id: 42\r\nCookie: a=1; b=2\r\nAccept: */*\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: example.com\r\n" + tail + "\r\n"},
		{name: "HEAD", raw: "HEAD / HTTP/1.1\r\nHost: example.com\r\n\r\n",
			want: "HEAD / HTTP/1.1\r\nHost: example.com\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: example.com\r\n" + tail + "\r\n"},
		{name: "POST without a body", raw: "POST /submit HTTP/1.1\r\nHost: example.com\r\nContent-Length: 0\r\n\r\n",
			want: "POST /submit HTTP/1.1\r\nHost: example.com\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: example.com\r\n" + tail + "Content-Length: 0\r\n\r\n"},
		{name: "POST with a body", raw: "POST /submit HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\n\r\nhello",
			want: "POST /submit HTTP/1.1\r\nHost: example.com\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: example.com\r\n" + tail + "Content-Length: 5\r\n\r\n"},
		{name: "HTTP/1.0, no Host", raw: "GET /old HTTP/1.0\r\nX-A: 1\r\n\r\n",
			want: "GET /old HTTP/1.1\r\nHost: 10.0.0.9:8080\r\nX-A: 1\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\n" + tail + "\r\n"},
		{name: "absolute form", raw: "GET http://example.com/abs?x=1 HTTP/1.1\r\nHost: example.com\r\n\r\n",
			want: "GET /abs?x=1 HTTP/1.1\r\nHost: example.com\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: example.com\r\n" + tail + "\r\n"},
		{name: "hop-by-hop and Connection tokens", raw: "GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\nKeep-Alive: 5\r\nTE: trailers\r\nUpgrade: h2c\r\nX-Kept: k\r\n\r\n",
			want: "GET / HTTP/1.1\r\nHost: h\r\nX-Kept: k\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\n" + tail + "\r\n"},
		{name: "untrusted forwarding headers", raw: "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil\r\nForwarded: for=6.6.6.6\r\nX-Real-Ip: 6.6.6.6\r\nX-Gray-Tag: forged\r\nX-Request-Id: forged\r\n\r\n",
			want: "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\n" + tail + "\r\n"},
		{name: "trusted forwarding headers", trusted: true, raw: "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.1.1.1, 2.2.2.2\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: front\r\nForwarded: for=1.1.1.1\r\nVia: 1.1 edge\r\n\r\n",
			want: "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: front\r\nForwarded: for=1.1.1.1\r\nVia: 1.1 edge\r\nX-Forwarded-For: 1.1.1.1, 2.2.2.2, 192.0.2.7\r\n" + tail + "\r\n"},
		{name: "coloring tag and upstream host", raw: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", d: router.Decision{Tag: "gray", UpstreamHost: true},
			want: "GET / HTTP/1.1\r\nHost: 10.0.0.9:8080\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\nX-Gray-Tag: gray\r\n" + tail + "\r\n"},
		{name: "odd header names", raw: "GET / HTTP/1.1\r\nHost: h\r\nx-lower: 1\r\nX-MiXeD-CaSe: 2\r\nx-empty:\r\n\r\n",
			want: "GET / HTTP/1.1\r\nHost: h\r\nX-Lower: 1\r\nX-Mixed-Case: 2\r\nX-Empty: \r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\n" + tail + "\r\n"},
		{name: "underscores dropped", raw: "POST / HTTP/1.1\r\nHost: h\r\nTransfer_Encoding: chunked\r\nX_Custom: 1\r\nContent-Length: 0\r\n\r\n",
			want: "POST / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\n" + tail + "Content-Length: 0\r\n\r\n"},
		{name: "websocket", ws: true, raw: "GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n",
			want: "GET /ws HTTP/1.1\r\nHost: h\r\nSec-Websocket-Key: k\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\n" + tail + "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ctx fasthttp.RequestCtx
			if err := ctx.Request.Read(bufio.NewReader(strings.NewReader(tt.raw))); err != nil {
				t.Fatal(err)
			}
			p := New(Options{}, nil, nil)
			t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
			ex := p.getExchange()
			ex.d = tt.d
			ex.pol = router.NoPolicy
			ex.reqID = []byte("rid")
			ex.inst = &upstream.Instance{Addr: "10.0.0.9:8080"}
			ex.peer = netip.MustParseAddr("192.0.2.7")
			p.buildRequest(&ctx, ex, tt.trusted, tt.ws)
			if got := string(ex.head); got != tt.want {
				t.Errorf("head:\n%q\nwant:\n%q", got, tt.want)
			}
		})
	}
}
