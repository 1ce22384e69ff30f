package proxy

import (
	"crypto/tls"
	"io"
	"net/netip"
	"time"

	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/mirror"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/tracing"
)

// Defaults applied by New to zero fields of Options.
const (
	DefaultDialTimeout            = 2 * time.Second
	DefaultResponseHeaderTimeout  = 30 * time.Second
	DefaultIdleConnTimeout        = 90 * time.Second
	DefaultReadHeaderTimeout      = 10 * time.Second
	DefaultIdleTimeout            = 75 * time.Second
	DefaultReadTimeout            = 60 * time.Second
	DefaultWriteTimeout           = 60 * time.Second
	DefaultUpstreamReadTimeout    = 60 * time.Second
	DefaultUpstreamWriteTimeout   = 60 * time.Second
	DefaultExpectContinueTimeout  = time.Second
	DefaultMaxHeaderBytes         = 16 << 10
	DefaultMaxResponseHeaderBytes = 64 << 10
	DefaultAccessLogQueue         = 4096
	DefaultAccessLogFlushInterval = time.Second
)

// Options configures a Proxy. It is a plain value: New copies it and fills
// zero fields with the documented defaults, so one Options may be reused.
type Options struct {
	// TrustedProxies are the peers whose forwarding headers are believed.
	// For a request from a trusted peer the client IP is found by walking
	// X-Forwarded-For from the right, skipping trusted addresses, and the
	// inbound X-Forwarded-Proto and X-Forwarded-Host are kept. A request from
	// any other peer has X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-Host,
	// Forwarded and X-Real-Ip removed before the gateway sets its own.
	TrustedProxies []netip.Prefix

	// DialTimeout bounds connecting to an instance, TLS handshake included.
	// It is also how long a request waits for a free connection when
	// MaxConnsPerHost are busy. Default 2s.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the upstream response header,
	// counted from when the request (body included) has been written. It does
	// not bound the body, so long downloads and event streams are unaffected.
	// Default 30s.
	ResponseHeaderTimeout time.Duration
	// IdleConnTimeout closes pooled upstream connections idle this long.
	// Default 90s.
	IdleConnTimeout time.Duration
	// UpstreamReadTimeout bounds how long an upstream may go silent between
	// two reads of a response body (proxy.read_timeout). When it fires the
	// upstream connection is closed, the client's response is cut off, and
	// the breaker counts a failure. Default 60s.
	UpstreamReadTimeout time.Duration
	// UpstreamWriteTimeout bounds how long one write of a request to the
	// upstream may wait for it to read (proxy.write_timeout), which bounds an
	// upstream that stops reading an upload. Default 60s.
	UpstreamWriteTimeout time.Duration
	// ExpectContinueTimeout is how long a request with "Expect:
	// 100-continue" waits for the upstream's 100 (or final answer) before
	// its body is sent anyway, as net/http's Transport does. Default 1s.
	ExpectContinueTimeout time.Duration
	// MaxConnsPerHost limits connections to one instance address; 0 means
	// fasthttp's default (512).
	MaxConnsPerHost int
	// MaxResponseHeaderBytes limits an upstream response header; a larger one
	// is a 502. Default 64 KiB.
	MaxResponseHeaderBytes int
	// UpstreamTLS configures connections to instances with TLS set. nil means
	// the system roots. ServerName defaults to the instance host and
	// NextProtos to http/1.1.
	UpstreamTLS *tls.Config

	// ReadHeaderTimeout bounds reading a request line and header, from the
	// first byte of a new connection or of a kept-alive one. Default 10s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds how long a client may go silent between two reads
	// of its request body (proxy.client_read_timeout): a slow upload that
	// keeps sending is never cut, one that stops is answered 408. Default
	// 60s.
	ReadTimeout time.Duration
	// WriteTimeout bounds how long one write of a response may wait for the
	// client to read it (proxy.client_write_timeout); a client that stops
	// reading has its connection closed. Default 60s.
	WriteTimeout time.Duration
	// IdleTimeout closes client keep-alive connections idle this long
	// (proxy.client_idle_timeout). Default 75s.
	IdleTimeout time.Duration
	// MaxHeaderBytes limits the request line plus header, and a request's
	// trailer section; a larger one gets 431. Default 16 KiB.
	MaxHeaderBytes int
	// MaxClientConns caps the client connections open at once over all
	// the data-plane listeners (proxy.max_client_connections); a new one
	// beyond it is closed at once. Default listener.DefaultMaxConns(),
	// from the open-file limit.
	MaxClientConns int
	// AllowUnderscoresInHeaders forwards request header fields whose names
	// contain "_". By default they are dropped, as nginx does
	// (ignore_invalid_headers), because upstreams that fold "_" into "-"
	// would read "Transfer_Encoding" as Transfer-Encoding.
	AllowUnderscoresInHeaders bool
	// NoVia turns off the "Via: 1.1 graygate" field (RFC 9110 section
	// 7.6.3) the gateway adds to forwarded requests and responses.
	NoVia bool

	// AccessLog receives one JSON line per request (see the package doc for
	// the fields). nil turns the access log off. Writes happen on a separate
	// goroutine, so a slow writer never blocks a request: lines that do not
	// fit in the queue are dropped and counted (AccessLogDropped).
	AccessLog io.Writer
	// AccessLogQueue is the number of lines that may wait for the writer.
	// Default 4096.
	AccessLogQueue int
	// AccessLogFlushInterval is how often buffered lines are flushed to
	// AccessLog. Default 1s. Shutdown flushes too.
	AccessLogFlushInterval time.Duration

	// OnDone, if set, is called once per request when the gateway is done
	// with it (see Done): for a streamed body, after the last byte; for a
	// WebSocket, when the tunnel closes; for an answer without a body, the
	// gateway's own error answers and a small body copied whole (see the
	// package doc), just before the server writes it. The Done and what it
	// points to are valid only during the call. OnDone runs on the
	// request's goroutine and must be fast and safe for concurrent use.
	OnDone func(*Done)

	// Mirrors receives a shadow copy of every request whose decision has
	// a Mirror (router.Decision.Mirror), with the primary's answer, once
	// the client's answer is complete (see the package doc, "Shadow
	// traffic"). nil turns mirroring off: decisions with a Mirror are
	// served as if they had none.
	Mirrors *mirror.Set
	// Tracer starts one server span per routed request and propagates the
	// W3C trace context upstream (see the package doc, "Tracing"). nil is
	// tracing off, which costs a nil check. The gray color goes upstream
	// in baggage whether or not tracing is on.
	Tracer *tracing.Tracer

	// Now is the clock that times requests: the elapsed time OnDone and the
	// access log report, and the latency and end time of the outcomes
	// reported to breakers. Breakers measure their windows with their own
	// clock and take the end time given to Record as a reading of it, so
	// Now must be the clock the breakers in the decisions were built with
	// (the gateway passes the one it gives its breaker.Set). Network
	// deadlines always use the real clock. Default time.Now.
	Now func() time.Time
}

// withDefaults returns o with zero fields set to their defaults and the
// trusted prefixes normalised, so that IPv4-mapped peers match IPv4 prefixes.
func (o Options) withDefaults() Options {
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.ResponseHeaderTimeout <= 0 {
		o.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	}
	if o.IdleConnTimeout <= 0 {
		o.IdleConnTimeout = DefaultIdleConnTimeout
	}
	if o.MaxResponseHeaderBytes <= 0 {
		o.MaxResponseHeaderBytes = DefaultMaxResponseHeaderBytes
	}
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.UpstreamReadTimeout <= 0 {
		o.UpstreamReadTimeout = DefaultUpstreamReadTimeout
	}
	if o.UpstreamWriteTimeout <= 0 {
		o.UpstreamWriteTimeout = DefaultUpstreamWriteTimeout
	}
	if o.ExpectContinueTimeout <= 0 {
		o.ExpectContinueTimeout = DefaultExpectContinueTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if o.MaxClientConns <= 0 {
		o.MaxClientConns = listener.DefaultMaxConns()
	}
	if o.AccessLogQueue <= 0 {
		o.AccessLogQueue = DefaultAccessLogQueue
	}
	if o.AccessLogFlushInterval <= 0 {
		o.AccessLogFlushInterval = DefaultAccessLogFlushInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	trusted := make([]netip.Prefix, 0, len(o.TrustedProxies))
	for _, p := range o.TrustedProxies {
		if !p.IsValid() {
			continue
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		trusted = append(trusted, p.Masked())
	}
	o.TrustedProxies = trusted
	return o
}

// isTrusted reports whether a is in one of o.TrustedProxies.
func (o *Options) isTrusted(a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	for _, pf := range o.TrustedProxies {
		if pf.Contains(a) {
			return true
		}
	}
	return false
}

// Done describes a request the gateway has finished with, for
// Options.OnDone. Everything in it, the strings and slices included, is
// valid only during the call: copy what you keep.
type Done struct {
	// Decision is the request's decision, as degraded if it was; a zero
	// Decision for a request rejected before routing.
	Decision *router.Decision
	// Status is what the client was sent, or 499 if the client went away
	// before the upstream answered.
	Status int
	// Start is when the gateway began the request, by Options.Now; with
	// Elapsed it dates the request without another clock read.
	Start time.Time
	// Elapsed is the time from the request's start to now.
	Elapsed time.Duration
	// BytesOut counts body bytes sent to the client.
	BytesOut int64
	// Method and Path are the request's method and decoded path.
	Method, Path string
	// Refused says why the route's policy refused the request, if it did:
	// RefusedRateLimit (429), RefusedConcurrencyCap (503) or
	// RefusedBodyTooLarge (413); "" otherwise.
	Refused string
	// Reported holds, in the order of Decision.Report.Headers, the values
	// of the response headers the upstream reported metrics in (nil where
	// it sent none); those headers were removed before the client saw the
	// response.
	Reported [][]byte
}
