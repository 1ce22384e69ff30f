package proxy

import (
	"bufio"
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/tracing"
	"github.com/graygate/graygate/internal/upstream"
)

// inboundParent is a client's traceparent (the W3C spec's example).
const inboundParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestUpstreamHead pins the exact head buildRequest sends upstream for
// requests the gateway forwards: the client's fields in arrival order, minus
// hop-by-hop and untrusted forwarding fields, then the gateway's own
// (X-Forwarded-*, X-Gray-Tag, the baggage carrying it, with tracing on
// the trace context, X-Request-Id, Via), then the framing.
func TestUpstreamHead(t *testing.T) {
	const tail = "X-Request-Id: rid\r\nVia: 1.1 graygate\r\n"
	tests := []struct {
		name    string
		raw     string
		trusted bool
		ws      bool
		traced  bool // a tracer that samples nothing new, so parent-based
		d       router.Decision
		want    string // {{trace}} and {{span}}: the ids of graygate's span
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
			want: "GET /old HTTP/1.1\r\nHost: 10.0.0.9:8080\r\nX-A: 1\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Request-Id: rid\r\nVia: 1.0 graygate\r\n\r\n"},
		{name: "absolute form", raw: "GET http://example.com/abs?x=1 HTTP/1.1\r\nHost: example.com\r\n\r\n",
			want: "GET /abs?x=1 HTTP/1.1\r\nHost: example.com\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: example.com\r\n" + tail + "\r\n"},
		{name: "hop-by-hop and Connection tokens", raw: "GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\nKeep-Alive: 5\r\nTE: trailers\r\nUpgrade: h2c\r\nX-Kept: k\r\n\r\n",
			want: "GET / HTTP/1.1\r\nHost: h\r\nX-Kept: k\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\n" + tail + "\r\n"},
		{name: "untrusted forwarding headers", raw: "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil\r\nForwarded: for=6.6.6.6\r\nX-Real-Ip: 6.6.6.6\r\nX-Gray-Tag: forged\r\nX-Request-Id: forged\r\n\r\n",
			want: "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\n" + tail + "\r\n"},
		{name: "trusted forwarding headers", trusted: true, raw: "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.1.1.1, 2.2.2.2\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: front\r\nForwarded: for=1.1.1.1\r\nVia: 1.1 edge\r\n\r\n",
			want: "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: front\r\nForwarded: for=1.1.1.1\r\nVia: 1.1 edge\r\nX-Forwarded-For: 1.1.1.1, 2.2.2.2, 192.0.2.7\r\n" + tail + "\r\n"},
		// The tag also goes up as baggage gray.tag, beside X-Gray-Tag.
		{name: "coloring tag and upstream host", raw: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", d: router.Decision{Tag: "gray", UpstreamHost: true},
			want: "GET / HTTP/1.1\r\nHost: 10.0.0.9:8080\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\nX-Gray-Tag: gray\r\nBaggage: gray.tag=gray\r\n" + tail + "\r\n"},
		// A client's baggage moves after the gateway's X-Gray-Tag: its
		// other members byte for byte and in order, its gray.tag (any
		// properties included) gone, the decision's tag appended.
		{name: "baggage: the client's gray.tag replaced by the tag", raw: "GET / HTTP/1.1\r\nHost: h\r\nBaggage: a=1, gray.tag=forged;p=1, b=x%20y;q\r\nX-Kept: k\r\n\r\n", d: router.Decision{Tag: "v2"},
			want: "GET / HTTP/1.1\r\nHost: h\r\nX-Kept: k\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\nX-Gray-Tag: v2\r\nBaggage: a=1,b=x%20y;q,gray.tag=v2\r\n" + tail + "\r\n"},
		{name: "baggage: an untrusted gray.tag stripped without a tag", raw: "GET / HTTP/1.1\r\nHost: h\r\nbaggage: gray.tag=forged,k=v\r\n\r\n",
			want: "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\nBaggage: k=v\r\n" + tail + "\r\n"},
		{name: "baggage: nothing left, no field", raw: "GET / HTTP/1.1\r\nHost: h\r\nBaggage: gray.tag=forged\r\n\r\n",
			want: "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\n" + tail + "\r\n"},
		{name: "baggage: two fields are one list", raw: "GET / HTTP/1.1\r\nHost: h\r\nBaggage: a=1\r\nX-Kept: k\r\nBaggage: gray.tag=forged, b=2\r\n\r\n", d: router.Decision{Tag: "gray"},
			want: "GET / HTTP/1.1\r\nHost: h\r\nX-Kept: k\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\nX-Gray-Tag: gray\r\nBaggage: a=1,b=2,gray.tag=gray\r\n" + tail + "\r\n"},
		{name: "baggage: a tag that needs percent-encoding", raw: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", d: router.Decision{Tag: "v 2,x"},
			want: "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\nX-Gray-Tag: v 2,x\r\nBaggage: gray.tag=v%202%2Cx\r\n" + tail + "\r\n"},
		// With tracing off the trace context is the client's business:
		// it passes through where it was.
		{name: "tracing off: trace context untouched", raw: "GET / HTTP/1.1\r\nHost: h\r\nTraceparent: " + inboundParent + "\r\nTracestate: k=v\r\n\r\n",
			want: "GET / HTTP/1.1\r\nHost: h\r\nTraceparent: " + inboundParent + "\r\nTracestate: k=v\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\n" + tail + "\r\n"},
		// With tracing on, graygate's span is the parent: same trace id,
		// its own span id, the client's flags and tracestate.
		{name: "tracing on: graygate's span is the parent", traced: true, raw: "GET / HTTP/1.1\r\nHost: h\r\nTraceparent: " + inboundParent + "\r\nTracestate: k=v\r\nBaggage: a=1\r\n\r\n", d: router.Decision{Tag: "gray"},
			want: "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\nX-Gray-Tag: gray\r\nBaggage: a=1,gray.tag=gray\r\nTracestate: k=v\r\nTraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-{{span}}-01\r\n" + tail + "\r\n"},
		{name: "tracing on: a new trace without a traceparent", traced: true, raw: "GET / HTTP/1.1\r\nHost: h\r\n\r\n",
			want: "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\nTraceparent: 00-{{trace}}-{{span}}-00\r\n" + tail + "\r\n"},
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
			t.Cleanup(func() { dropExchange(p, ex) })
			ex.d = tt.d
			ex.pol = router.NoPolicy
			ex.reqID = []byte("rid")
			ex.inst = &upstream.Instance{Addr: "10.0.0.9:8080"}
			ex.peer = netip.MustParseAddr("192.0.2.7")
			ex.ctx = &ctx
			want := tt.want
			if tt.traced {
				tr, err := tracing.New(tracing.Options{SampleRatio: 0, Exporter: tracetest.NewInMemoryExporter()})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
				ex.view.see(&ctx.Request, ex.peer, ex.trusted, ex.opts.AllowUnderscoresInHeaders)
				ex.startSpan(tr, &ex.view, &ctx.Request.Header)
				sc := ex.span.SpanContext()
				want = strings.NewReplacer("{{trace}}", sc.TraceID().String(), "{{span}}", sc.SpanID().String()).Replace(want)
			}
			p.buildRequest(&ctx, ex, tt.trusted, tt.ws)
			if got := string(ex.head); got != want {
				t.Errorf("head:\n%q\nwant:\n%q", got, want)
			}
		})
	}
}
