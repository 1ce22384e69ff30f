package proxy

import (
	"net/netip"
	"time"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/limit"
	"github.com/graygate/graygate/internal/mirror"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/tracing"
	"github.com/graygate/graygate/internal/upstream"
)

// flow is the forwarding policy of one request: what the gateway decides
// and records about it, whichever codec it arrived through. Both codecs
// (the fasthttp HTTP/1.1 exchange and the net/http HTTP/2 stream) embed
// one and call its phases in the same order:
//
//   - begin: the clock, the options, the request id (setRequestID);
//   - decide: Decide over the codec's attr.Request view, keepDecision,
//     whether the request is mirrored (keepMirror), and with tracing on
//     the server span (startSpan, spanDecided);
//   - admit: the route's rate limit and declared body size, and whether
//     the request could be replayed on stable or mirrored
//     (prepareReplay, mirrorBody);
//   - acquire: the pool's concurrency slot, then the breaker (Guard,
//     spanDecided when it degrades);
//   - pick: an instance of the target pool;
//   - decorate the upstream request: which client fields go up
//     (keepRequestHeader) and what the gateway adds (addForwarded:
//     X-Forwarded-*, X-Gray-Tag, baggage, traceparent and tracestate
//     (addTraceFields), X-Request-Id, Via);
//   - read the upstream response: a mirrored request's copy of the
//     upstream's answer (keepMirrorResponse, teeBody), which fields come
//     back (dropResponseField, the reported metric fields captured and
//     removed), then the decision headers (setDecisionHeaders) and Via;
//   - on a failure before any response byte: fallBackOK, then fallBack to
//     stable (spanDecided); otherwise failure (classify, the body of the
//     answer);
//   - finish: the breaker's outcome, passive health, the concurrency slot,
//     OnDone, the access log line and the degradation record, then the
//     end of the span (endSpan) and the shadow copy (sendMirror).
//
// The codecs own only what is theirs: parsing, framing, their connection
// pools and their client connections. Each phase has one home here, so a
// fix to the policy lands once for both listeners. A flow is pooled with
// its codec's state and used by one request at a time; the client watcher
// of the HTTP/1.1 codec sets canceled under its exchange's lock.
type flow struct {
	p    *Proxy
	opts *Options // loaded once per request
	// c answers what only the codec knows (see codec).
	c    codec
	d    router.Decision
	peer netip.Addr

	inst *upstream.Instance
	pool *upstream.Pool // the pool inst came from, told the outcome once
	// versioned: inst was picked by a version header (seed 003), whose
	// value version holds, so that a retry after a refused connection
	// stays in the same version (nextInstance).
	versioned bool
	version   []byte
	// tried are the instances whose connection failed this request
	// (nextInstance), which its next tries skip.
	tried []*upstream.Instance

	// Route policy state (resilience.go).
	pol           *router.Policy
	headerTimeout time.Duration // the route's, or Options.ResponseHeaderTimeout
	gate          *limit.Gate   // acquired for the pool being tried, released by finish
	retryAfter    time.Duration // for a 429
	body          []byte        // a request body buffered for a replay on stable
	loan          *bodyLoan     // body as lent to net/http transports (kept while it settles)
	lent          bool          // body was lent under loan by this request
	buffered      bool          // body holds the whole request body
	trailers      bool          // trailer fields were announced (prepareReplay reads a declared body to its end)
	replayable    bool          // the request may be sent again, to stable
	fellBack      bool
	fallbackErr   error  // why the gray target failed
	fallbackAddr  string // the gray instance that failed ("" if none was picked)
	sent          bool   // the request was (partly) written to the current target
	respStarted   bool   // a response byte arrived from the current target
	recorded      bool   // the breaker has the outcome
	tooLarge      bool   // the body exceeded Policy.MaxBodyBytes while streaming
	bodyWait      time.Duration
	brkPending    bool          // the breaker outcome waits for the end of the body
	brkLatency    time.Duration // its latency, measured at the header

	// reqBody is the client's body as the upstream request reads it.
	reqBody reqBody

	start    time.Time
	status   int
	bytesOut int64
	// reported holds the values of Decision.Report.Headers, in reportBuf.
	reported  [][]byte
	reportBuf []byte
	done      Done
	upErr     error
	clientErr error
	writeErr  error  // the client write that failed
	timeout   string // which timeout fired, for the access log
	// errMsg is what the gateway's own answer said (its error body
	// without "graygate: " and the request id; "client closed the
	// request" for a 499), for the access log's error field.
	errMsg []byte
	// canceled: the client went away while the upstream was asked.
	canceled bool

	// proto is the client's protocol for the access log: "" for
	// HTTP/1.x, "h2" for HTTP/2.
	proto string
	// upHTTP10: the upstream's response came over HTTP/1.0 (for Via).
	upHTTP10 bool
	// grpc: the request is a gRPC call (Content-Type application/grpc);
	// grpcStatus is the upstream's grpc-status, -1 while none was seen.
	grpc       bool
	grpcStatus int

	reqID        []byte
	method, path []byte
	idVal, tag   []byte
	scratch      []byte
	// client is the client address the decision saw, and limKey the
	// rate limit key built from it (admit).
	client netip.Addr
	limKey []byte
	tokens [][]byte
	// Inbound X-Forwarded-Proto / -Host kept from a trusted peer.
	sawProto, sawHost bool
	// refusedBy is why the route's policy refused the request (Done.Refused).
	refusedBy string

	// Tracing (trace.go): the server span, when traced is set, and the
	// adapters the tracer reads the request and writes the upstream
	// request through. failType is the gateway's own failure, for the
	// span's error.type.
	traced   bool
	span     tracing.Span
	spanIn   spanHeaders
	spanOut  spanSink
	spanBuf  []byte
	failType string
	// The baggage rewrite (trace.go): the client sent a baggage field;
	// bagIn joins several, bagOut is the field sent upstream.
	sawBaggage    bool
	bagIn, bagOut []byte

	// Shadow traffic (shadow.go): the mirror state, and the copy of the
	// primary's answer, which the mirror set owns once handed over (never
	// pooled). upgrade says the request is a WebSocket handshake, set by
	// the codec before decide; respEnded that the upstream's answer was
	// read to its end.
	mirror    uint8
	upgrade   bool
	respEnded bool
	mresp     mirror.Response
}

// codec is what the policy asks of the codec a request arrived through.
type codec interface {
	// badBody reports whether a failure to read the request body is the
	// body's own fault (malformed framing: 400) rather than the client
	// going away (499).
	badBody(err error) bool
	// protocol is the client's HTTP version ("1.0", "1.1" or "2") and
	// whether it came over TLS, for the server span.
	protocol() (version string, tls bool)
	// sentRequest is a copy, in memory of its own, of the request last
	// sent upstream: request line, Host and header fields as the gateway
	// wrote them (the body is the policy's), for the mirror.
	sentRequest() mirror.Request
}

// inHeader is a client request header as the policy reads it.
// *fasthttp.RequestHeader satisfies it; the HTTP/2 codec adapts
// net/http's Header (netIn).
type inHeader interface {
	Peek(key string) []byte
	PeekAll(key string) [][]byte
}

// fieldSink receives the header fields of the upstream request, in order.
type fieldSink interface {
	addField(k, v []byte)
}

// fields is a response header as the policy edits it.
// *fasthttp.ResponseHeader satisfies it; the HTTP/2 codec adapts
// net/http's Header (netOut).
type fields interface {
	Peek(key string) []byte
	AddBytesKV(key, value []byte)
}

// begin starts the flow of a request that arrived at start.
func (f *flow) begin(p *Proxy) {
	p.live.Add(1)
	f.p = p
	f.opts = p.opts.Load()
	f.start = p.now()
	f.grpcStatus = -1
}

// wallStart returns the real clock's time at the request's start: start
// itself unless a test gave the proxy its own clock. It is what fasthttp's
// time stamps (a pooled connection's last use) compare with.
func (f *flow) wallStart() time.Time {
	if f.p.realClock {
		return f.start
	}
	return time.Now()
}

// realNow returns the real clock's time: on a proxy that runs on it, the
// request's start plus the time since on the monotonic clock, one clock
// read where time.Now takes two (the wall clock is read only at the
// start).
func (f *flow) realNow() time.Time {
	if f.p.realClock {
		return f.start.Add(time.Since(f.start))
	}
	return time.Now()
}

// end returns the time the request ends, on the proxy's clock.
func (f *flow) end() time.Time {
	if f.p.realClock {
		return f.realNow()
	}
	return f.p.now()
}

// decide routes the request seen through v and keeps the decision; then,
// with tracing on, it starts the server span (while v and in, the
// request's header, are valid: the trace context is read from them), and
// it notes whether the request is mirrored.
func (f *flow) decide(v attr.Request, in inHeader) {
	f.p.decider.DecideInto(v, &f.d)
	f.client = v.ClientIP()
	f.keepDecision()
	f.keepMirror(v)
	if t := f.opts.Tracer; t != nil {
		f.startSpan(t, v, in)
	}
}

// keepDecision copies the two strings of the decision a router may take
// from the request (the identity value and the coloring tag) into the
// flow, so the decision stays valid after the codec reuses the request
// buffers.
func (f *flow) keepDecision() {
	d := &f.d
	f.idVal = append(f.idVal[:0], d.Identity.Value...)
	d.Identity.Value = b2s(f.idVal)
	f.tag = append(f.tag[:0], d.Tag...)
	d.Tag = b2s(f.tag)
}

// trusted reports whether a is one of Options.TrustedProxies.
func (f *flow) trusted(a netip.Addr) bool { return f.opts.isTrusted(a) }

// pick chooses an instance of the target pool: by the request's version
// header when the route or the pool names one (seed 003), else by the
// pool's balancer. A pool without an instance is reported to the breaker
// as a failure with no latency.
func (f *flow) pick(in inHeader) error {
	pool := f.d.Target
	var inst *upstream.Instance
	var err error
	h := f.d.VersionHeader
	if h == "" {
		h = pool.VersionHeader
	}
	f.versioned = h != ""
	if f.versioned {
		f.version = append(f.version[:0], in.Peek(h)...)
		inst, err = pool.PickVersion(b2s(f.version))
	} else {
		inst, err = pool.Pick()
	}
	if err != nil {
		f.recordOutcome(time.Time{}, err)
		return err
	}
	f.inst, f.pool = inst, pool
	return nil
}

// finish ends the flow: it reports a breaker outcome still pending,
// passive health, releases the pool's concurrency slot, and records the
// request (OnDone, access log, degradation log); then it ends the server
// span and hands a mirrored request's copy to the mirror set, which
// returns at once. The copy never passes through OnDone, the breaker,
// passive health or the access log. The codec resets the flow afterwards
// (resetFlow) and pools it. It returns the time the request ended, on the
// proxy's clock.
func (f *flow) finish() time.Time {
	p := f.p
	if f.brkPending {
		f.brkPending = false
		f.recordBody()
	}
	// Passive health: 5xx from the upstream, or a transport failure the
	// gateway answered with 502/504, counts against the instance; a client
	// that left or was refused does not.
	f.reportUpstream(f.status < 500 && f.upErr == nil)
	end := f.end()
	elapsed := end.Sub(f.start)
	if f.gate != nil {
		f.gate.Release()
		f.gate = nil
	}
	if f.opts.OnDone != nil {
		f.done = Done{Decision: &f.d, Status: f.status, Start: f.start, Elapsed: elapsed, BytesOut: f.bytesOut,
			Method: b2s(f.method), Path: b2s(f.path), Reported: f.reported, Refused: f.refusedBy}
		f.opts.OnDone(&f.done)
		f.done = Done{}
	}
	if a := p.access.Load(); a != nil {
		a.record(f, end, elapsed)
	}
	if f.d.Degraded != "" {
		p.degrade.record(f, end)
	}
	f.endSpan()
	f.sendMirror()
	p.live.Add(-1)
	return end
}

// reportUpstream tells the pool the picked instance's outcome, once.
func (f *flow) reportUpstream(ok bool) {
	if f.inst != nil && f.pool != nil {
		f.pool.Report(f.inst, ok)
		f.pool = nil
	}
}

// resetFlow clears the flow for the next request, keeping its buffers.
func (f *flow) resetFlow() {
	f.d = router.Decision{}
	f.opts = nil
	f.peer = netip.Addr{}
	f.inst, f.pool = nil, nil
	f.versioned, f.version = false, f.version[:0]
	clear(f.tried)
	f.tried = f.tried[:0]
	f.reqBody.src, f.reqBody.n, f.reqBody.size, f.reqBody.max, f.reqBody.pre, f.reqBody.read = nil, 0, 0, 0, nil, false
	f.pol, f.headerTimeout, f.gate, f.retryAfter = nil, 0, nil, 0
	if cap(f.body) > maxPooledBody {
		f.body = nil // a route with a large FallbackBodyBytes; don't pool it
	}
	if f.lent {
		f.lent = false
		if !f.loan.settled() {
			// A transport may still read the body (bodyLoan): the
			// buffer, and the loan that counts its readers, are left
			// to it.
			f.body, f.loan = nil, nil
		}
	}
	f.body = f.body[:0]
	f.buffered, f.replayable, f.fellBack, f.fallbackErr, f.fallbackAddr = false, false, false, nil, ""
	f.trailers = false
	f.sent, f.respStarted, f.recorded, f.tooLarge, f.bodyWait = false, false, false, false, 0
	f.brkPending, f.brkLatency = false, 0
	f.status, f.bytesOut = 0, 0
	f.upErr, f.clientErr, f.writeErr, f.timeout = nil, nil, nil, ""
	f.errMsg = f.errMsg[:0]
	f.canceled = false
	f.proto, f.upHTTP10, f.grpc, f.grpcStatus = "", false, false, -1
	f.reqID = f.reqID[:0]
	clear(f.reported)
	f.reported, f.reportBuf = f.reported[:0], f.reportBuf[:0]
	f.method, f.path = f.method[:0], f.path[:0]
	f.idVal, f.tag, f.scratch = f.idVal[:0], f.tag[:0], f.scratch[:0]
	f.client, f.limKey = netip.Addr{}, f.limKey[:0]
	clear(f.tokens)
	f.tokens = f.tokens[:0]
	f.sawProto, f.sawHost = false, false
	f.traced, f.span, f.failType, f.refusedBy = false, tracing.Span{}, "", ""
	f.spanBuf = f.spanBuf[:0]
	f.sawBaggage, f.bagIn, f.bagOut = false, f.bagIn[:0], f.bagOut[:0]
	f.mirror, f.upgrade, f.respEnded, f.mresp = mirrorOff, false, false, mirror.Response{}
}
