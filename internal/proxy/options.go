package proxy

import (
	"crypto/tls"
	"io"
	"net/netip"
	"time"

	"github.com/graygate/graygate/internal/router"
)

// Defaults applied by New to zero fields of Options.
const (
	DefaultDialTimeout            = 2 * time.Second
	DefaultResponseHeaderTimeout  = 30 * time.Second
	DefaultIdleConnTimeout        = 90 * time.Second
	DefaultReadHeaderTimeout      = 10 * time.Second
	DefaultIdleTimeout            = 90 * time.Second
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
	// ReadTimeout bounds reading a request body, counted from the end of its
	// header. 0, the default, means no limit, so that slow large uploads are
	// not cut.
	ReadTimeout time.Duration
	// IdleTimeout closes client keep-alive connections idle this long.
	// Default 90s.
	IdleTimeout time.Duration
	// MaxHeaderBytes limits the request line plus header; a larger request
	// gets 431. It is fasthttp's ReadBufferSize. Default 16 KiB.
	MaxHeaderBytes int

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
	// with it: for a streamed body, after the last byte; for a WebSocket,
	// when the tunnel closes; for an answer without a body, the gateway's
	// own error answers and a small body copied whole (see the package
	// doc), just before the server writes it. status is what the client was
	// sent, or 499 if the client went away before the upstream answered.
	// bytesOut counts body bytes sent to the client. d is valid only during
	// the call; for requests rejected before routing it is a zero Decision.
	// OnDone runs on the request's goroutine and must be fast and safe for
	// concurrent use.
	OnDone func(d *router.Decision, status int, elapsed time.Duration, bytesOut int64)

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
	if o.ReadTimeout < 0 {
		o.ReadTimeout = 0
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
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
