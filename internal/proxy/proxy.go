package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/limit"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/upstream"
)

// Decider routes one request. Decide is called exactly once for every
// request that passes validation, from many goroutines at once. The
// attr.Request is valid only during the call; the returned Decision's
// Identity.Value and Tag may keep strings from it, which the Proxy copies
// before the request's buffers are reused. Its other strings (Rule, Group,
// Identity.Source, pool names) must not alias the request: they are logged
// after the handler has returned. If the Decision carries a Breaker, the
// Proxy asks it (Decision.Guard) once the request has passed the route's
// limits and taken its pool's concurrency slot, and reports the outcome of
// every request it let through (see the package doc).
type Decider interface {
	Decide(req attr.Request) router.Decision
}

// Proxy is the gateway's data plane. It is safe for concurrent use.
type Proxy struct {
	opts    Options
	decider Decider
	log     *slog.Logger
	now     func() time.Time
	// realClock is set when now is time.Now.
	realClock bool
	server    *fasthttp.Server
	access    *accessLog // nil when the access log is off
	degrade   *degradeLog

	clients   atomic.Pointer[map[clientKey]*upstreamClient]
	clientsMu sync.Mutex

	exchanges sync.Pool
	tunnels   tunnelSet
	conns     connSet
}

// New returns a Proxy that routes with decider. Zero Options fields take the
// defaults documented on Options. A nil logger discards. New starts the
// goroutine that logs degraded requests and, if opts.AccessLog is set, the
// access log writer goroutine; Shutdown stops both.
func New(opts Options, decider Decider, logger *slog.Logger) *Proxy {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{
		opts:    opts.withDefaults(),
		decider: decider,
		log:     logger.With("component", "proxy"),
	}
	p.now = p.opts.Now
	// With the real clock, a request's start time is also a reading good
	// enough for its network deadlines.
	p.realClock = opts.Now == nil
	p.degrade = newDegradeLog(p.log.Handler(), DefaultDegradationLogQueue)
	p.exchanges.New = func() any { return p.newExchange() }
	if p.opts.AccessLog != nil {
		p.access = newAccessLog(p.opts.AccessLog, p.opts.AccessLogQueue, p.opts.AccessLogFlushInterval)
	}
	p.server = &fasthttp.Server{
		Handler:      p.Handler,
		ErrorHandler: p.errorHandler,
		Logger:       fasthttpLogger{p.log},
		// The request body is streamed to the upstream, never buffered;
		// multipart bodies must not be pre-parsed into temporary files.
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		ReadBufferSize:               p.opts.MaxHeaderBytes,
		// fasthttp's ReadTimeout is armed before the request line and stays
		// armed while the body is read, including the first 8 KiB that
		// fasthttp reads before calling the handler. HeaderReceived re-arms
		// it for the body once the header is in.
		ReadTimeout:    p.opts.ReadHeaderTimeout,
		HeaderReceived: p.headerReceived,
		IdleTimeout:    p.opts.IdleTimeout,
		// Tracks client connections so that Shutdown can close the ones
		// still busy when its deadline passes; fasthttp leaves them open.
		ConnState: p.conns.track,
		// Pass the upstream's Server and Content-Type through untouched.
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		CloseOnShutdown:       true,
		SecureErrorLogMessage: true,
		// The gateway reads the clock itself (Options.Now); fasthttp need
		// not read it for every request too.
		LazyRequestTime: true,
	}
	return p
}

// Serve accepts connections on ln until Shutdown. It returns nil after a
// Shutdown and the listener's error otherwise. For a restart without
// downtime, open ln with Listen and reusePort set (see the package doc).
func (p *Proxy) Serve(ln net.Listener) error {
	return p.server.Serve(clientListener{ln})
}

// Shutdown stops accepting (it closes the listeners), closes idle client
// connections, and waits until ctx is done for requests in flight, which
// are answered with "Connection: close". It then closes the client
// connections still busy (only if ctx ran out), WebSocket tunnels and idle
// upstream connections, and flushes the access log and the degradation
// log. It returns ctx's error if requests were still in flight at the
// deadline.
func (p *Proxy) Shutdown(ctx context.Context) error {
	err := p.server.ShutdownWithContext(ctx)
	if err != nil && ctx.Err() != nil {
		// fasthttp gives up waiting but leaves the connections open, and
		// serving: its stop flag is cleared again when it returns.
		p.conns.closeAll()
	}
	p.tunnels.closeAll()
	if m := p.clients.Load(); m != nil {
		for _, c := range *m {
			c.hc.CloseIdleConnections()
		}
	}
	if p.access != nil {
		if aerr := p.access.close(ctx); aerr != nil {
			err = errors.Join(err, fmt.Errorf("access log: %w", aerr))
		}
	}
	if derr := p.degrade.close(ctx); derr != nil && !errors.Is(err, derr) {
		err = errors.Join(err, fmt.Errorf("degradation log: %w", derr))
	}
	return err
}

// AccessLogDropped returns how many access log lines were dropped because
// the writer could not keep up.
func (p *Proxy) AccessLogDropped() uint64 {
	if p.access == nil {
		return 0
	}
	return p.access.w.dropped.Load()
}

// DegradationLogDropped returns how many degraded requests were not logged
// one by one because the logger could not keep up. They are still counted
// in a summary record ("degraded requests not logged individually").
func (p *Proxy) DegradationLogDropped() uint64 {
	return p.degrade.dropped.Load()
}

// exchange is the state of one request, pooled. It outlives the handler
// when the response body is streamed or the connection becomes a WebSocket
// tunnel, but it never keeps the RequestCtx or its buffers past the handler:
// what it needs later (method, path, decision strings) it copies.
type exchange struct {
	p    *Proxy
	view view
	d    router.Decision
	peer netip.Addr

	inst *upstream.Instance
	pool *upstream.Pool // the pool inst came from, told the outcome once
	uc   *upstreamClient
	req  fasthttp.Request
	resp fasthttp.Response

	// Route policy state (resilience.go).
	pol           *router.Policy
	headerTimeout time.Duration // the route's, or Options.ResponseHeaderTimeout
	gate          *limit.Gate   // acquired for the pool being tried, released by finish
	retryAfter    time.Duration // for a 429
	body          []byte        // a request body buffered for a replay on stable
	buffered      bool          // body holds the whole request body
	replayable    bool          // the request may be sent again, to stable
	fellBack      bool
	fallbackErr   error  // why the gray target failed
	fallbackAddr  string // the gray instance that failed ("" if none was picked)
	sent          bool   // the request was (partly) written to the current target
	respStarted   bool   // a response byte arrived from the current target
	recorded      bool   // the breaker has the outcome
	tooLarge      bool   // the body exceeded Policy.MaxBodyBytes while streaming
	bodyWait      time.Duration

	reqBody  reqBody
	respBody respBody
	up       upstreamConn  // held while the response body streams
	br       *bufio.Reader // the reader of up
	upBody   interface{ Read([]byte) (int, error) }

	start     time.Time
	status    int
	inline    int // the length of a body left in br for respond to copy, or -1
	bytesOut  int64
	streaming bool // respBody or a tunnel owns the exchange
	upEOF     bool
	upErr     error
	clientErr error

	method, path []byte
	idVal, tag   []byte
	scratch      []byte
	head         []byte // the upstream request's head (rawHead), then a response header written on a hijacked connection
	rawHead      bool   // the upstream request is head, with no body, rather than req
	tokens       [][]byte
	// Inbound X-Forwarded-Proto / -Host kept from a trusted peer.
	sawProto, sawHost bool

	// Client watch state. mu guards canceled and upConn between the
	// watcher goroutine and the request goroutine.
	mu        sync.Mutex
	canceled  bool
	upConn    net.Conn
	gone      bool
	watchDone chan struct{}
	peekBuf   [1]byte
	peekFn    func(uintptr) bool

	// flushAndWait state.
	flushBW  *bufio.Writer
	flushed  bool
	flushErr error
	flushFn  func(uintptr) bool
}

func (p *Proxy) newExchange() *exchange {
	ex := &exchange{p: p, watchDone: make(chan struct{}, 1), inline: -1}
	ex.reqBody.ex = ex
	ex.respBody.ex = ex
	ex.peekFn = ex.peek
	ex.flushFn = ex.flushThenWait
	return ex
}

func (p *Proxy) getExchange() *exchange {
	ex := p.exchanges.Get().(*exchange)
	ex.start = p.now()
	return ex
}

// finish ends the exchange: it releases the pool's concurrency slot,
// records the exchange (OnDone, access log, degradation log) and returns it
// to the pool.
func (ex *exchange) finish() {
	p := ex.p
	// Passive health: 5xx from the upstream, or a transport failure the
	// gateway answered with 502/504, counts against the instance; a client
	// that left or was refused does not.
	ex.reportUpstream(ex.status < 500)
	end := p.now()
	elapsed := end.Sub(ex.start)
	if ex.gate != nil {
		ex.gate.Release()
		ex.gate = nil
	}
	if p.opts.OnDone != nil {
		p.opts.OnDone(&ex.d, ex.status, elapsed, ex.bytesOut)
	}
	if p.access != nil {
		p.access.record(ex, end, elapsed)
	}
	if ex.d.Degraded != "" {
		p.degrade.record(ex, end)
	}
	ex.reset()
	p.exchanges.Put(ex)
}

// reportUpstream tells the pool the picked instance's outcome, once.
func (ex *exchange) reportUpstream(ok bool) {
	if ex.inst != nil && ex.pool != nil {
		ex.pool.Report(ex.inst, ok)
		ex.pool = nil
	}
}

func (ex *exchange) reset() {
	ex.view.req, ex.view.ip, ex.view.trusted, ex.view.dec = nil, netip.Addr{}, false, ex.view.dec[:0]
	ex.d = router.Decision{}
	ex.peer = netip.Addr{}
	ex.inst, ex.uc, ex.pool = nil, nil, nil
	ex.rawHead = false
	ex.req.Reset()
	ex.resp.Reset()
	ex.reqBody.src, ex.reqBody.n, ex.reqBody.size, ex.reqBody.max, ex.reqBody.pre = nil, 0, 0, 0, nil
	ex.pol, ex.headerTimeout, ex.gate, ex.retryAfter = nil, 0, nil, 0
	if cap(ex.body) > maxPooledBody {
		ex.body = nil // a route with a large FallbackBodyBytes; don't pool it
	}
	ex.body = ex.body[:0]
	ex.buffered, ex.replayable, ex.fellBack, ex.fallbackErr, ex.fallbackAddr = false, false, false, nil, ""
	ex.sent, ex.respStarted, ex.recorded, ex.tooLarge, ex.bodyWait = false, false, false, false, 0
	ex.up, ex.br, ex.upBody = nil, nil, nil
	ex.status, ex.inline, ex.bytesOut = 0, -1, 0
	ex.streaming, ex.upEOF, ex.upErr, ex.clientErr = false, false, nil, nil
	ex.method, ex.path = ex.method[:0], ex.path[:0]
	ex.idVal, ex.tag, ex.scratch = ex.idVal[:0], ex.tag[:0], ex.scratch[:0]
	clear(ex.tokens)
	ex.tokens = ex.tokens[:0]
	ex.canceled, ex.upConn, ex.gone = false, nil, false
}

// keepDecision stores d, copying the two strings a router may take from the
// request (the identity value and the coloring tag) into the exchange, so
// the decision stays valid after fasthttp reuses the request buffers.
func (ex *exchange) keepDecision(d router.Decision) {
	ex.idVal = append(ex.idVal[:0], d.Identity.Value...)
	d.Identity.Value = b2s(ex.idVal)
	ex.tag = append(ex.tag[:0], d.Tag...)
	d.Tag = b2s(ex.tag)
	ex.d = d
}

func (p *Proxy) trusted(a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	for _, pf := range p.opts.TrustedProxies {
		if pf.Contains(a) {
			return true
		}
	}
	return false
}

// Handler serves one request: validate, route, forward, answer. It is a
// fasthttp.RequestHandler; Serve runs it in a server configured for
// streaming, and it also works in a server that buffers bodies.
func (p *Proxy) Handler(ctx *fasthttp.RequestCtx) {
	holdResponse(ctx.Conn(), false)
	ex := p.getExchange()
	ex.method = append(ex.method[:0], ctx.Method()...)
	ex.path = append(ex.path[:0], ctx.Path()...)
	if !p.serve(ctx, ex) {
		ex.finish()
		// The response is complete: its write may wait for the next read
		// (see clientConn).
		holdResponse(ctx.Conn(), true)
	}
	// Otherwise a streamed body or a tunnel owns ex now; don't touch it.
}

// serve does the work of Handler. It returns true if the exchange now
// belongs to a streamed body or a tunnel, which will finish it.
//
// After routing, the route's policy is applied in order of cost, and
// before anything is sent upstream: the rate limit (429), the declared
// body size (413), then, for a request that may fall back to stable, the
// body is buffered. Each attempt (forward) takes a concurrency slot of the
// pool it tries; a gray attempt that fails before any response byte is
// followed by one on stable when fallBackOK allows it.
func (p *Proxy) serve(ctx *fasthttp.RequestCtx, ex *exchange) bool {
	in := &ctx.Request.Header
	if err := checkHeaderBlock(in.RawHeaders()); err != nil {
		p.reject(ctx, ex, fasthttp.StatusBadRequest, "bad request: "+err.Error())
		return false
	}
	if in.IsConnect() {
		p.reject(ctx, ex, fasthttp.StatusMethodNotAllowed, "CONNECT is not supported")
		return false
	}
	ex.peer = peerAddr(ctx)
	ex.view.see(&ctx.Request, ex.peer, p.trusted)
	trusted := ex.view.trusted
	ex.keepDecision(p.decider.Decide(&ex.view))
	ex.view.req = nil

	if ex.d.Target == nil {
		p.fail(ctx, ex, fmt.Errorf("no target: %w", upstream.ErrNoInstance))
		return false
	}
	if err := p.admit(ctx, ex); err != nil {
		p.fail(ctx, ex, err)
		return false
	}
	ws := isWebSocketUpgrade(in)
	for {
		streamed, err := p.forward(ctx, ex, trusted, ws)
		if err == nil {
			return streamed
		}
		if !ex.fallBackOK(err) {
			p.fail(ctx, ex, err)
			return false
		}
		ex.fallBack(err)
	}
}

// forward makes one attempt on ex.d.Target: take a concurrency slot, ask
// the breaker (acquire), pick an instance, build and send the request, and
// relay the answer. An error means nothing has been written to the client
// yet; the caller answers it or falls back.
func (p *Proxy) forward(ctx *fasthttp.RequestCtx, ex *exchange, trusted, ws bool) (bool, error) {
	if err := ex.acquire(); err != nil {
		return false, err
	}
	pool := ex.d.Target
	var inst *upstream.Instance
	var err error
	h := ex.d.VersionHeader
	if h == "" {
		h = pool.VersionHeader
	}
	if h != "" {
		// Seed 003: the request's version header picks instances by their
		// version metadata, falling back to all healthy ones.
		inst, err = pool.PickVersion(b2s(ctx.Request.Header.Peek(h)))
	} else {
		inst, err = pool.Pick()
	}
	if err != nil {
		ex.recordOutcome(time.Time{}, err)
		return false, err
	}
	ex.inst, ex.pool = inst, pool
	ex.uc = p.client(inst)
	p.buildRequest(ctx, ex, trusted, ws)
	if ws {
		return p.serveUpgrade(ctx, ex)
	}
	if err := p.roundTrip(ctx, ex); err != nil {
		return false, err
	}
	return p.respond(ctx, ex), nil
}

// respond writes the upstream response header and hands the body stream to
// fasthttp. It returns true when the body is streamed, in which case
// respBody finishes the exchange.
func (p *Proxy) respond(ctx *fasthttp.RequestCtx, ex *exchange) bool {
	out := &ctx.Response
	ex.copyResponseHeader(&out.Header, &ex.resp.Header)
	ex.setDecisionHeaders(&out.Header)
	ex.status = ex.resp.StatusCode()

	if ex.inline >= 0 {
		// A small body that came with the header: copied, and the upstream
		// connection goes back now.
		b, _ := ex.br.Peek(ex.inline)
		out.SetBody(b)
		_, _ = ex.br.Discard(ex.inline)
		ex.bytesOut = int64(ex.inline)
		ex.releaseUpstream(true)
		return false
	}
	if !ex.resp.IsBodyStream() {
		// HEAD, 1xx, 204 and 304 have no body. A HEAD answer keeps the
		// length (or chunked coding) the upstream announced.
		if ctx.IsHead() {
			if cl := ex.resp.Header.ContentLength(); cl >= -1 {
				out.Header.SetContentLength(cl)
			}
		}
		ex.releaseUpstream(true)
		return false
	}
	ex.upBody = ex.resp.BodyStream()
	size := ex.resp.Header.ContentLength()
	// Event streams and bodies of unknown length are sent chunked and each
	// piece is flushed as soon as it arrives (fasthttp flushes every chunk),
	// as net/http's ReverseProxy does; the header goes out at once too, so
	// a client sees the response before the first event.
	if size < 0 || isEventStream(ex.resp.Header.ContentType()) {
		size = -1
		out.ImmediateHeaderFlush = true
	}
	ex.streaming = true
	if size < 0 && !ctx.Request.Header.IsHTTP11() {
		p.respondUntilClose(ctx, ex)
		return true
	}
	out.SetBodyStream(&ex.respBody, size)
	return true
}

// respondUntilClose sends a body of unknown length to an HTTP/1.0 client,
// which cannot read the chunked coding, delimited by closing the connection
// (RFC 9112 section 6.3). fasthttp v1.78.0 always sends a body stream of
// unknown length chunked, whatever the client's version, so the response is
// written on the hijacked connection instead.
func (p *Proxy) respondUntilClose(ctx *fasthttp.RequestCtx, ex *exchange) {
	out := &ctx.Response
	out.Header.SetContentLength(-2) // no framing header, and Connection: close
	ex.head = out.Header.AppendBytes(ex.head[:0])
	out.Reset()
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(ex.writeUntilClose)
}

// writeUntilClose is the hijack handler of respondUntilClose; fasthttp
// closes the connection when it returns.
func (ex *exchange) writeUntilClose(c net.Conn) {
	_, err := c.Write(ex.head)
	if err == nil {
		_, err = io.Copy(c, &ex.respBody)
	}
	_ = ex.respBody.CloseWithError(err)
}

func isEventStream(ct []byte) bool {
	const es = "text/event-stream"
	return len(ct) >= len(es) && eqFold(ct[:len(es)], es)
}

// noReadLimit stands for "no body read timeout": fasthttp's per-request
// ReadTimeout can only replace the header deadline, not clear it.
const noReadLimit = 100 * 365 * 24 * time.Hour

// headerReceived gives a request with a body Options.ReadTimeout to send it,
// counted from the end of its header, instead of what is left of
// ReadHeaderTimeout.
func (p *Proxy) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if cl := h.ContentLength(); cl == 0 || cl == -2 {
		return fasthttp.RequestConfig{}
	}
	if p.opts.ReadTimeout > 0 {
		return fasthttp.RequestConfig{ReadTimeout: p.opts.ReadTimeout}
	}
	return fasthttp.RequestConfig{ReadTimeout: noReadLimit}
}

// errorHandler answers requests that fasthttp could not parse, as fasthttp's
// default handler does (431 for a header over MaxHeaderBytes, 408 for a
// read timeout, 400 otherwise), and records them like any other request.
func (p *Proxy) errorHandler(ctx *fasthttp.RequestCtx, err error) {
	ex := p.getExchange()
	ex.method = append(ex.method[:0], ctx.Request.Header.Method()...)
	ex.path = append(ex.path[:0], ctx.Request.URI().Path()...)
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.As(err, &small):
		p.reject(ctx, ex, fasthttp.StatusRequestHeaderFieldsTooLarge, "request header too large")
	case isTimeout(err):
		p.reject(ctx, ex, fasthttp.StatusRequestTimeout, "request timeout")
	default:
		p.reject(ctx, ex, fasthttp.StatusBadRequest, "bad request")
	}
	p.log.Debug("request rejected by parser", "status", ex.status, "error", err)
	ex.finish()
}

// fasthttpLogger sends fasthttp's own messages (mostly connection errors
// caused by clients) to the debug level.
type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	if f.l.Enabled(context.Background(), slog.LevelDebug) {
		f.l.Debug(fmt.Sprintf(format, args...), "source", "fasthttp")
	}
}
