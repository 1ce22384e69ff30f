package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/mirror"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/upstream"
)

// Decider routes one request. DecideInto is called exactly once for every
// request that passes validation, from many goroutines at once. The
// attr.Request is valid only during the call; the Decision's
// Identity.Value and Tag may keep strings from it, which the Proxy copies
// before the request's buffers are reused. Its other strings (Rule, Group,
// Identity.Source, pool names) must not alias the request: they are logged
// after the handler has returned. If the Decision carries a Breaker, the
// Proxy asks it (Decision.Guard) once the request has passed the route's
// limits and taken its pool's concurrency slot, and reports the outcome of
// every request it let through (see the package doc).
type Decider interface {
	// DecideInto writes the decision for req into *d, overwriting it
	// whole (the request's flow holds d, so the decision is not copied
	// through the call).
	DecideInto(req attr.Request, d *router.Decision)
}

// Proxy is the gateway's data plane. It is safe for concurrent use.
type Proxy struct {
	// opts is the current configuration; each request loads it once
	// (Reconfigure replaces it).
	opts atomic.Pointer[Options]
	// live counts the requests begun and not yet finished (flow.begin,
	// flow.finish), so that Shutdown can wait for the access-log lines of
	// those it cut off.
	live    atomic.Int64
	decider Decider
	log     *slog.Logger
	now     func() time.Time
	// realClock is set when now is time.Now.
	realClock bool
	server    *fasthttp.Server
	access    atomic.Pointer[accessLog] // nil when the access log is off
	accessMu  sync.Mutex                // serialises access log changes
	degrade   *degradeLog
	ids       requestIDs
	lcfg      atomic.Pointer[listener.Config]
	gate      listener.Gate // the client connections open over every listener

	clients   atomic.Pointer[map[clientKey]*upstreamClient]
	clientsMu sync.Mutex
	stop      chan struct{} // closed by Shutdown: stops sweepClients
	stopOnce  sync.Once

	violations [numViolations]atomic.Uint64

	exchanges sync.Pool
	// hijacks are the WebSocket tunnels and hijacked responses; closing
	// is set when Shutdown begins, after which a WebSocket handshake is
	// refused.
	hijacks hijackSet
	closing atomic.Bool
	conns   connSet
	// lns are the listeners Serve and ServeWith serve, which Shutdown
	// closes itself as well as through fasthttp: a Serve that had not yet
	// handed its listener to fasthttp when Shutdown ran (fasthttp then
	// has none to close, and returns at once) would accept for ever.
	// lnMu orders a Serve against Shutdown's closing.
	lnMu sync.Mutex
	lns  []net.Listener
	// draining is set by Drain, and by Shutdown: HTTP/1.1 answers close
	// their connection, and HTTP/2 ones are followed by a GOAWAY.
	draining atomic.Bool

	// The HTTP/2 codec (h2.go) and the net/http upstream transports
	// (nethttp.go).
	streams sync.Pool
	h2      h2State
	nets    netTransports
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
		decider: decider,
		log:     logger.With("component", "proxy"),
	}
	o := opts.withDefaults()
	p.opts.Store(&o)
	p.lcfg.Store(listenerConfig(&o))
	p.now = o.Now
	// With the real clock, a request's start time is also a reading good
	// enough for its network deadlines.
	p.realClock = opts.Now == nil
	p.ids.init()
	p.degrade = newDegradeLog(p.log.Handler(), DefaultDegradationLogQueue)
	p.exchanges.New = func() any { return p.newExchange() }
	p.streams.New = func() any { return p.newStream() }
	p.reconfigureH2(&o)
	p.stop = make(chan struct{})
	go p.sweepClients(p.stop)
	if o.AccessLog != nil {
		p.access.Store(newAccessLog(o.AccessLog, o.AccessLogQueue, o.AccessLogFlushInterval))
	}
	p.server = &fasthttp.Server{
		Handler:      p.Handler,
		ErrorHandler: p.errorHandler,
		Logger:       fasthttpLogger{p.log},
		// The request body is streamed to the upstream, never buffered;
		// multipart bodies must not be pre-parsed into temporary files.
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		// The listener's Guard bounds the head at MaxHeaderBytes (431);
		// fasthttp's buffer is a little larger so that the Guard decides.
		ReadBufferSize: o.MaxHeaderBytes + 1024,
		// No ReadTimeout or IdleTimeout: the listener bounds the head
		// (ReadHeaderTimeout), the keep-alive wait (IdleTimeout) and each
		// read of a body (ReadTimeout), from its Guard's view of where
		// the connection is. fasthttp would read the clock twice per
		// request to re-arm its two deadlines, and the listener twice more
		// to see them; the listener reads it once, between requests.
		// Tracks client connections so that Shutdown can close the ones
		// still busy when its deadline passes; fasthttp leaves them open.
		ConnState: p.conns.track,
		// Pass the upstream's Server, Content-Type and Date through
		// untouched; the gateway adds a Date where the upstream sent none.
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		NoDefaultDate:         true,
		CloseOnShutdown:       true,
		SecureErrorLogMessage: true,
		// The gateway reads the clock itself (Options.Now); fasthttp need
		// not read it for every request too.
		LazyRequestTime: true,
	}
	return p
}

// ClientConns returns how many client connections are open over the
// data-plane listeners, and how many were closed at once because
// proxy.max_client_connections were open.
func (p *Proxy) ClientConns() (open int64, refused uint64) {
	return p.gate.Open(), p.gate.Refused()
}

// listenerConfig is what the listener enforces for o.
func listenerConfig(o *Options) *listener.Config {
	return &listener.Config{MaxHeaderBytes: o.MaxHeaderBytes, BodyReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout, MaxConns: o.MaxClientConns,
		HeaderTimeout: o.ReadHeaderTimeout, IdleTimeout: o.IdleTimeout}
}

// Reconfigure applies new options to the running proxy: requests that start
// after it returns use them. Connections to upstreams are pooled per
// option set, so the pools are replaced (requests in flight finish on the
// old ones, whose idle connections are closed). With the same upstream
// options, the net/http transports no request asked for since the last
// Reconfigure are dropped (pruneNetTransports): the gateway calls it at
// every reload of its config. It returns the fields that
// cannot change without a restart, as config paths: MaxHeaderBytes, which
// sizes the listening server's read buffer, keeps its old value. The
// client timeouts apply at once: ReadHeaderTimeout and IdleTimeout to the
// next head and keep-alive wait of every HTTP/1.1 connection (the
// listener reads them at each read) and the next TLS handshake, and, with
// WriteTimeout, to the HTTP/2 connections opened from then on. Now and
// the OnDone hook are kept as they are.
func (p *Proxy) Reconfigure(opts Options) []string {
	old := p.opts.Load()
	o := opts.withDefaults()
	o.Now, o.OnDone = old.Now, old.OnDone
	var restart []string
	if o.MaxHeaderBytes != old.MaxHeaderBytes {
		restart = append(restart, "proxy.max_header_bytes")
		o.MaxHeaderBytes = old.MaxHeaderBytes
	}
	p.accessMu.Lock()
	oldLog := p.access.Load()
	switch {
	case o.AccessLog == nil && oldLog != nil:
		p.access.Store(nil)
	case o.AccessLog != nil && (oldLog == nil || oldLog.out != o.AccessLog):
		p.access.Store(newAccessLog(o.AccessLog, o.AccessLogQueue, o.AccessLogFlushInterval))
	default:
		oldLog = nil // unchanged
	}
	p.accessMu.Unlock()
	p.opts.Store(&o)
	p.lcfg.Store(listenerConfig(&o))
	if o.WriteTimeout != old.WriteTimeout || o.ReadHeaderTimeout != old.ReadHeaderTimeout || o.IdleTimeout != old.IdleTimeout {
		// New HTTP/2 connections take the new client timeouts.
		p.reconfigureH2(&o)
	}
	if !upstreamOptionsChanged(old, &o) {
		p.pruneNetTransports()
	} else {
		p.closeNetTransports(true)
		p.clientsMu.Lock()
		m := p.clients.Swap(nil)
		p.clientsMu.Unlock()
		if m != nil {
			for _, c := range *m {
				c.hc.CloseIdleConnections()
			}
		}
	}
	if oldLog != nil {
		// Lines already queued are written out; a request finishing now
		// may still log into it, which close tolerates.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = oldLog.close(ctx)
		cancel()
	}
	return restart
}

// upstreamOptionsChanged reports whether the options pooled upstream
// clients were built with differ. UpstreamWriteTimeout is among them: the
// HTTP/2 transports of h2 and h2c pools take it as their WriteByteTimeout
// when they are built, so a reload that changes it must replace them.
func upstreamOptionsChanged(a, b *Options) bool {
	return a.DialTimeout != b.DialTimeout || a.IdleConnTimeout != b.IdleConnTimeout ||
		a.MaxConnsPerHost != b.MaxConnsPerHost || a.MaxResponseHeaderBytes != b.MaxResponseHeaderBytes ||
		a.UpstreamTLS != b.UpstreamTLS || a.UpstreamWriteTimeout != b.UpstreamWriteTimeout
}

// Serve accepts connections on ln until Shutdown. It returns nil after a
// Shutdown and the listener's error otherwise. Every connection is guarded
// by the listener package (strict framing, client stall bounds). For a
// restart without downtime, open ln with listener.Listen and reusePort set
// (see the package doc).
func (p *Proxy) Serve(ln net.Listener) error {
	return p.serveOn(ln, func() net.Listener { return listener.Wrap(ln, p.lcfg.Load, &p.gate, p.log) })
}

// serveOn hands the listener wrap makes of ln to fasthttp, unless Shutdown
// has begun: then it closes ln and returns nil, as fasthttp's Serve does
// after a Shutdown.
func (p *Proxy) serveOn(ln net.Listener, wrap func() net.Listener) error {
	p.lnMu.Lock()
	if p.closing.Load() {
		p.lnMu.Unlock()
		_ = ln.Close()
		return nil
	}
	w := wrap()
	p.lns = append(p.lns, w)
	p.lnMu.Unlock()
	return p.server.Serve(w)
}

// closeListeners closes every listener handed to Serve or ServeWith. A
// listener fasthttp has closed already is closed again, to no effect.
// Shutdown has set closing before, so no Serve adds one after.
func (p *Proxy) closeListeners() {
	p.lnMu.Lock()
	lns := p.lns
	p.lns = nil
	p.lnMu.Unlock()
	for _, ln := range lns {
		_ = ln.Close()
	}
}

// ServeWith is Serve for a listener that offers more than cleartext
// HTTP/1.1: TLS (prot.TLS, with ALPN h2 for HTTP/2) or h2c (prot.H2C).
// HTTP/2 connections are served by ServeH2, HTTP/1.1 ones as by Serve,
// guarded the same way over TLS; see listener.Split. Serve and ServeWith
// may run on several listeners at once; Shutdown stops them all.
func (p *Proxy) ServeWith(ln net.Listener, prot listener.Protocols) error {
	prot.ServeH2 = p.ServeH2
	// A HandshakeTimeout of 0 follows the listener config's HeaderTimeout
	// (ReadHeaderTimeout), which Reconfigure replaces.
	if prot.Logger == nil {
		prot.Logger = p.log
	}
	prot.Gate = &p.gate
	return p.serveOn(ln, func() net.Listener { return listener.Split(ln, p.lcfg.Load, prot) })
}

// Drain tells the data plane that it is about to stop (the gateway's
// drain_delay begins): every HTTP/1.1 answer from now on carries
// "Connection: close", as Envoy's drain does, so that keep-alive clients
// open their next connection elsewhere (to the process that took over, or
// another gateway behind the load balancer) instead of sending it on a
// connection that closes when the listeners do. HTTP/2 connections get a
// graceful GOAWAY at once (their streams in flight finish), and a
// connection opened during the drain gets one with its first answer.
func (p *Proxy) Drain() {
	p.draining.Store(true)
	p.drainH2()
}

// Shutdown stops accepting (it closes the listeners), closes idle client
// connections, and waits until ctx is done for requests in flight, which
// are answered with "Connection: close". WebSocket tunnels and the other
// hijacked connections (a response written on the connection itself,
// respondHijacked) are requests in flight too: they go on until ctx is
// done, and a WebSocket handshake that arrives meanwhile is refused (503):
// the gateway's lifecycle gives in-flight work shutdown_timeout, and a
// tunnel cut when the listeners close (after drain_delay) would throw away
// that time for the connections that need it most. Shutdown then closes
// the client connections still busy (only if ctx ran out), the tunnels
// and hijacked connections, and idle upstream connections, and flushes
// the access log and the degradation log. It returns ctx's error if
// requests were still in flight at the deadline.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.lnMu.Lock()
	p.closing.Store(true) // a Serve from now on closes its listener and returns
	p.lnMu.Unlock()
	// Answers from now on close their connection, also on a connection a
	// listener hands on late (awaitAccepted), when fasthttp's own
	// shutdown flag may be over.
	p.draining.Store(true)
	err := p.server.ShutdownWithContext(ctx)
	// fasthttp closed the listeners its Serve had taken; a Serve that was
	// on its way there takes its own listener, closed now, and returns.
	p.closeListeners()
	if err != nil && ctx.Err() != nil {
		// fasthttp gives up waiting but leaves the connections open, and
		// serving: its stop flag is cleared again when it returns.
		p.conns.closeAll()
	}
	if herr := p.shutdownH2(ctx); herr != nil && err == nil {
		err = herr
	}
	if werr := p.awaitHijacked(ctx); werr != nil && err == nil {
		err = werr
	}
	p.hijacks.closeAll()
	if aerr := p.awaitAccepted(ctx); aerr != nil && err == nil {
		err = aerr
	}
	p.stopOnce.Do(func() { close(p.stop) })
	p.closeNetTransports(false)
	if m := p.clients.Load(); m != nil {
		for _, c := range *m {
			c.hc.CloseIdleConnections()
		}
	}
	// The requests cut off above end on their own goroutines; their lines
	// (499, 502, a body cut short) are waited for a moment, so that a
	// request cut at the deadline is still recorded, and the logs then get
	// a moment of their own to flush.
	grace, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	for p.live.Load() > 0 && grace.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	lctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		lctx, cancel = context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
	}
	if a := p.access.Load(); a != nil {
		if aerr := a.close(lctx); aerr != nil {
			err = errors.Join(err, fmt.Errorf("access log: %w", aerr))
		}
	}
	if derr := p.degrade.close(lctx); derr != nil && !errors.Is(err, derr) {
		err = errors.Join(err, fmt.Errorf("degradation log: %w", derr))
	}
	return err
}

// awaitAccepted waits until every client connection the listeners took
// from the kernel has closed, or ctx is done, whose error it then returns
// after closing those left. A TLS or h2c listener hands a connection on
// only after its handshake or preface (listener.Split), so one accepted
// just before the listeners closed may reach fasthttp or ServeH2 after
// both have finished their shutdown; in a handover no other process can
// take it, and it is served, its answers closing the connection. At the
// deadline a connection whose handshake has not ended is closed too.
func (p *Proxy) awaitAccepted(ctx context.Context) error {
	err := awaitZero(ctx, p.gate.Open)
	if err != nil {
		p.gate.CloseSorting()
		p.conns.closeAll()
		p.closeH2Conns()
	}
	return err
}

// awaitHijacked waits, once fasthttp and the HTTP/2 server have no request
// in flight, until the requests that fasthttp no longer sees (tunnels and
// hijacked responses) have ended, or ctx is done, whose error it then
// returns. It counts requests (live) rather than the hijack set, since a
// hijacked connection joins the set only when its hijack handler starts,
// after fasthttp has let go of it.
func (p *Proxy) awaitHijacked(ctx context.Context) error {
	return awaitZero(ctx, p.live.Load)
}

// awaitZero looks at n every 10 ms until it is 0, or ctx is done, whose
// error it then returns.
func awaitZero(ctx context.Context, n func() int64) error {
	for n() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// shutdownGrace is how long Shutdown waits at most for the requests it
// cut off to be logged, and, past its deadline, for the logs to flush.
const shutdownGrace = time.Second

// AccessLogDropped returns how many access log lines were dropped because
// the writer could not keep up.
func (p *Proxy) AccessLogDropped() uint64 {
	if a := p.access.Load(); a != nil {
		return a.w.dropped.Load()
	}
	return 0
}

// DegradationLogDropped returns how many degraded requests were not logged
// one by one because the logger could not keep up. They are still counted
// in a summary record ("degraded requests not logged individually").
func (p *Proxy) DegradationLogDropped() uint64 {
	return p.degrade.dropped.Load()
}

// exchange is the HTTP/1.1 codec's state of one request, pooled: the
// request's flow (the forwarding policy, policy.go) and what fasthttp and
// the gateway's own HTTP/1.1 upstream transport need. It outlives the
// handler when the response body is streamed or the connection becomes a
// WebSocket tunnel or carries a hijacked response, but it never keeps the
// RequestCtx's buffers past the handler: what it needs later (method,
// path, decision strings) the flow copies. (A hijacked response keeps
// ctx, which fasthttp keeps valid until the hijack handler returns.)
type exchange struct {
	flow
	view view
	// announced is how many trailer fields the request's Trailer field
	// named, counted before its body is read (serve): fasthttp adds the
	// names of unannounced ones that arrive after them, and only
	// announced ones go upstream (announcedTrailers).
	announced int
	// chunkBuffered: a bodyBuffered request goes chunked, with its
	// trailer fields (bufferedTrailers).
	chunkBuffered bool
	// sentTrailer holds, for a mirrored request, the trailer fields
	// writeLastChunk sent, in memory of their own (sentRequest).
	sentTrailer []mirror.Header
	// ctx is the request being served, while the handler runs.
	ctx  *fasthttp.RequestCtx
	uc   *upstreamClient
	resp fasthttp.Response // holds the upstream body stream

	// The upstream request: its head, and how its body is sent.
	head     []byte
	bodyKind uint8
	sendBody []byte // the body of a bodyBuffered request
	expect   bool   // the client sent Expect: 100-continue with a streamed body
	upWDL    int64
	buf      []byte // body copy buffer

	respBody respBody
	up       upstreamConn  // held while the response body streams
	br       *bufio.Reader // the reader of up
	upBody   interface{ Read([]byte) (int, error) }
	upRDL    int64 // the upstream read deadline last set while the body streams
	upClose  bool  // the upstream asked to close its connection
	noReuse  bool  // the upstream connection must not go back to the pool

	inline int // the length of a body left in br for respond to copy, or -1
	// dated: the client's header was reset before the upstream's was read
	// into it, so fasthttp writes its own Date (the upstream sent none).
	dated     bool
	streaming bool // respBody, a tunnel or a hijacked response owns the exchange
	hijacked  bool // the response is written by respondHijacked
	completed bool // completeHeader has run
	interim   []byte
	// brkFrom is when the attempt began, for the breaker's latency of a
	// response that began with an interim one (roundTrip); it is set and
	// read only then.
	brkFrom time.Time
	// hijackedConn is the client connection respondHijacked writes to,
	// and hj its entry in the Proxy's hijack set.
	hijackedConn net.Conn
	hj           *hijackedResponse
	// respOut is the client's response header while its body streams, for
	// the trailers.
	respOut *fasthttp.ResponseHeader
	upEOF   bool
	// net is the state of a request forwarded to an HTTP/2 pool
	// (forwardNet), nil otherwise (buildRequest). netOut is the request
	// forwardNet sent last, nil once buildRequest wrote a head
	// (sentRequest).
	net    *netUpstream
	netOut *http.Request
	// ahead is the client's streamed body as attempts on h2 and h2c pools
	// read it (aheadBody), settled when the exchange ends; nil otherwise.
	ahead *readAhead

	// Client watch state. mu guards canceled and upConn between the
	// watcher goroutine and the request goroutine.
	mu        sync.Mutex
	upConn    net.Conn
	gone      bool
	watchDone chan struct{}
	peekBuf   [1]byte
	peekFn    func(uintptr) bool

	// Upstream watch state (watchUpstream), while a streamed body is
	// sent: upSpoke is set once the upstream closed, reset or answered,
	// after upSaw says which (nil: an answer).
	upSpoke     atomic.Bool
	upSaw       error
	upWatchDone chan struct{}
	upPeekBuf   [16]byte
	upPeekN     int
	upPeekErr   error
	upPeekFn    func(uintptr) bool

	// flushAndWait state.
	headOut  headWriter
	flushBW  flusher
	flushed  bool
	flushErr error
	flushFn  func(uintptr) bool
}

// How the upstream request's body is sent.
const (
	bodyNone     = iota
	bodyFixed    // streamed from the client, with its Content-Length
	bodyChunked  // streamed from the client, re-chunked, with its trailers
	bodyBuffered // ex.body, held for a replay, with a Content-Length
)

// The timeouts the access log names.
const (
	timeoutClientRead     = "client_read_timeout"
	timeoutClientWrite    = "client_write_timeout"
	timeoutUpstreamRead   = "read_timeout"
	timeoutUpstreamWrite  = "write_timeout"
	timeoutResponseHeader = "response_header_timeout"
	// timeoutGRPC is a gRPC call's own deadline, its grpc-timeout.
	timeoutGRPC = "grpc_timeout"
)

func (p *Proxy) newExchange() *exchange {
	ex := &exchange{watchDone: make(chan struct{}, 1), upWatchDone: make(chan struct{}, 1), inline: -1}
	ex.p = p
	ex.c = ex
	ex.reqBody.f = &ex.flow
	ex.respBody.ex = ex
	ex.peekFn = ex.peek
	ex.upPeekFn = ex.upPeek
	ex.flushFn = ex.flushThenWait
	return ex
}

func (p *Proxy) getExchange() *exchange {
	ex := p.exchanges.Get().(*exchange)
	ex.begin(p)
	return ex
}

// finish ends the exchange: the flow's finish phase (breaker outcome,
// passive health, concurrency slot, OnDone, access log, degradation log),
// then the exchange goes back to the pool.
func (ex *exchange) finish() {
	if ex.ahead != nil {
		ex.ahead.settle()
	}
	end := ex.flow.finish()
	if ex.ctx != nil && ex.p.realClock && !ex.hijacked && !ex.upgrade {
		// The keep-alive wait that follows the answer counts from here:
		// the listener need not read the clock again.
		if lc, ok := ex.ctx.Conn().(*listener.Conn); ok {
			lc.Answered(end.UnixNano())
		}
	}
	ex.reset()
	ex.p.exchanges.Put(ex)
}

func (ex *exchange) reset() {
	ex.resetFlow()
	ex.view.req, ex.view.ip, ex.view.trusted, ex.view.dec = nil, netip.Addr{}, false, ex.view.dec[:0]
	ex.ctx = nil
	ex.uc = nil
	ex.resp.Reset()
	ex.head, ex.bodyKind, ex.sendBody, ex.expect, ex.upWDL = ex.head[:0], bodyNone, nil, false, 0
	ex.announced, ex.chunkBuffered, ex.sentTrailer = 0, false, nil
	ex.up, ex.br, ex.upBody, ex.upRDL, ex.upClose, ex.noReuse = nil, nil, nil, 0, false, false
	ex.inline, ex.dated, ex.completed = -1, false, false
	ex.streaming, ex.hijacked, ex.interim, ex.hijackedConn, ex.respOut = false, false, ex.interim[:0], nil, nil
	ex.upEOF, ex.hj = false, nil
	ex.net, ex.netOut, ex.ahead = nil, nil, nil
	ex.upConn, ex.gone = nil, false
}

// badBody implements codec: a failure to read the body is its own fault
// when the listener's Guard or fasthttp's chunk parser refused it.
func (ex *exchange) badBody(err error) bool { return isBadBody(ex.ctx, err) }

// protocol implements codec, while the handler runs.
func (ex *exchange) protocol() (string, bool) {
	v := "1.1"
	if !ex.ctx.Request.Header.IsHTTP11() {
		v = "1.0"
	}
	return v, ex.ctx.IsTLS() || isTLSConn(ex.ctx.Conn())
}

// sentRequest implements codec: the head buildRequest wrote, or the
// request forwardNet sent to an HTTP/2 pool. Both outlive the handler.
func (ex *exchange) sentRequest() mirror.Request {
	if ex.netOut != nil {
		return sentNetRequest(ex.netOut)
	}
	r := sentHead(ex.head)
	r.Trailer, ex.sentTrailer = ex.sentTrailer, nil
	return r
}

// Handler serves one request: validate, route, forward, answer. It is a
// fasthttp.RequestHandler; Serve runs it in a server configured for
// streaming, and it also works in a server that buffers bodies.
func (p *Proxy) Handler(ctx *fasthttp.RequestCtx) {
	ex := p.getExchange()
	ex.method = append(ex.method[:0], ctx.Method()...)
	pathTarget(ctx.Request.URI(), ctx.Request.Header.Host(), ctx.Request.Header.RequestURI())
	ex.path = append(ex.path[:0], ctx.Path()...)
	if !p.serve(ctx, ex) {
		ex.finish()
	}
	// Otherwise a streamed body, a tunnel or a hijacked response owns ex
	// now; don't touch it. The answer's header is written after Handler
	// returns; a tunnel's 101, and a hijacked answer, own their connection.
	if p.draining.Load() && !ctx.Hijacked() && ctx.Response.StatusCode() != fasthttp.StatusSwitchingProtocols {
		ctx.SetConnectionClose()
	}
}

// serve does the work of Handler. It returns true if the exchange now
// belongs to a streamed body, a tunnel or a hijacked response, which will
// finish it.
//
// After routing, the route's policy is applied in order of cost, and
// before anything is sent upstream: the rate limit (429), the declared
// body size (413), then, for a request that may fall back to stable, the
// body is buffered. Each attempt (forward) takes a concurrency slot of the
// pool it tries; a gray attempt that fails before any response byte is
// followed by one on stable when fallBackOK allows it.
func (p *Proxy) serve(ctx *fasthttp.RequestCtx, ex *exchange) bool {
	in := &ctx.Request.Header
	ex.ctx = ctx
	ex.peer = peerAddr(ctx)
	trusted := ex.trusted(ex.peer)
	ex.setRequestID(in.Peek(hdrRequestID), trusted)
	ex.announced = len(in.PeekTrailerKeys())
	if in.IsConnect() {
		p.reject(ctx, ex, fasthttp.StatusMethodNotAllowed, "CONNECT is not supported")
		return false
	}
	ws := isWebSocketUpgrade(in)
	ex.upgrade = ws
	ex.view.see(&ctx.Request, ex.peer, ex.trusted, ex.opts.AllowUnderscoresInHeaders)
	ex.decide(&ex.view, in)
	ex.view.req = nil
	if ex.d.Reject != "" { // e.g. an identity over identity.max_length
		p.reject(ctx, ex, fasthttp.StatusBadRequest, ex.d.Reject)
		return false
	}

	if ex.d.Target == nil {
		p.fail(ctx, ex, fmt.Errorf("no target: %w", upstream.ErrNoInstance))
		return false
	}
	if err := p.admit(ctx, ex); err != nil {
		p.fail(ctx, ex, err)
		return false
	}
	if e := bodyRefused(ctx); e != nil {
		// The malformed part of the body has already arrived: nothing of
		// the request goes upstream.
		p.reject(ctx, ex, e.Status, bad(e.Status)+e.Reason)
		return false
	}
	if ws && p.closing.Load() {
		// Shutdown has begun: a tunnel opened now would only be cut at
		// its deadline. The client retries elsewhere.
		p.reject(ctx, ex, fasthttp.StatusServiceUnavailable, "shutting down: no new WebSocket connections")
		return false
	}
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
	if err := ex.pick(&ctx.Request.Header); err != nil {
		return false, err
	}
	if ex.d.Target.Protocol != upstream.HTTP1 {
		streamed, err := p.forwardNet(ctx, ex, trusted, ws)
		for tries := 1; err != nil && ex.nextInstance(err, tries) && ex.net.att.body.untouched(); tries++ {
			// As below; the body, not read yet, is read by the next
			// attempt (aheadBody).
			if ex.toNextInstance() != nil {
				break
			}
			streamed, err = p.forwardNet(ctx, ex, trusted, ws)
		}
		return streamed, err
	}
	err := p.sendTo(ctx, ex, trusted, ws)
	if ws && err == nil {
		return p.serveUpgrade(ctx, ex)
	}
	for tries := 1; err != nil && ex.nextInstance(err, tries); tries++ {
		// The instance could not be connected to, so nothing was sent:
		// as nginx's proxy_next_upstream error, another instance of the
		// pool is asked. Passive health hears of this one.
		if ex.toNextInstance() != nil {
			break
		}
		err = p.sendTo(ctx, ex, trusted, ws)
	}
	if err != nil {
		ex.refusedUnread(err)
		return false, err
	}
	if len(ex.interim) > 0 {
		p.respondHijacked(ctx, ex)
		return true, nil
	}
	return p.respond(ctx, ex), nil
}

// sendTo builds the request for ex.inst, the instance picked, and, unless
// it opens a WebSocket tunnel (which serveUpgrade sends), sends it and
// reads the answer's head (roundTrip). A body of undeclared length for an
// instance that answered over HTTP/1.0 is read whole first
// (holdForHTTP10).
func (p *Proxy) sendTo(ctx *fasthttp.RequestCtx, ex *exchange, trusted, ws bool) error {
	ex.uc = p.client(ex.inst, ex.wallStart())
	if !ws && ex.uc.http10.Load() && ctx.Request.Header.ContentLength() == -1 {
		if err := ex.holdForHTTP10(ctx.RequestBodyStream()); err != nil {
			return err
		}
	}
	p.buildRequest(ctx, ex, trusted, ws)
	if ws {
		return nil
	}
	return p.roundTrip(ctx, ex)
}

// maxNextInstance bounds the instances a request tries in its pool when
// connecting fails (nextInstance), the first included.
const maxNextInstance = 3

// nextInstance reports whether a failed attempt may go to another instance
// of its pool: the connection could not be made (so nothing was sent and
// the request is whole), the pool has another instance, and fewer than
// maxNextInstance instances were tried. Both codecs and every pool
// protocol ask it.
func (f *flow) nextInstance(err error, tries int) bool {
	var de *dialError
	if tries >= maxNextInstance || f.sent || !errors.As(err, &de) || f.canceled || f.clientErr != nil {
		return false
	}
	pool := f.d.Target
	return pool != nil && len(pool.Instances) > 1
}

// refusedUnread makes a request whose streamed body the last attempt
// never read, because its connection could not be made, replayable:
// stable gets the whole body as it streams, as another instance of the
// pool does (nextInstance), however large it is. An attempt on an h2 or
// h2c pool does the same through resumeRefused, and the HTTP/2 codec
// through stream.replayOK.
func (ex *exchange) refusedUnread(err error) {
	var de *dialError
	if ex.replayable || ex.sent || ex.reqBody.read || !errors.As(err, &de) {
		return
	}
	if ex.bodyKind == bodyFixed || ex.bodyKind == bodyChunked {
		ex.replayable = true
	}
}

// toNextInstance moves the flow to another instance of its pool after an
// attempt nextInstance allows another: passive health hears of the one
// that failed. No instance that refused the request is tried again. A
// request placed by a version header is placed by it again (seed 003's
// predicate without those instances: its version's others, else the
// pool's, as PickVersion falls back). It fails when the pool has no other
// instance to give.
func (f *flow) toNextInstance() error {
	f.tried = append(f.tried, f.inst)
	f.reportUpstream(false)
	var inst *upstream.Instance
	var err error
	if f.versioned {
		inst, err = f.d.Target.PickOtherVersion(b2s(f.version), f.tried)
	} else {
		inst, err = f.d.Target.PickOther(f.tried)
	}
	if err != nil {
		return err
	}
	f.inst, f.pool = inst, f.d.Target
	return nil
}

// completeHeader does to the final response header read from the upstream
// what the gateway owes the client (the fields it must not pass on
// removed, the decision headers, Via and a Date added), once per exchange:
// respond and the hijacked writer both call it.
func (ex *exchange) completeHeader(out *fasthttp.ResponseHeader) {
	if ex.completed {
		return
	}
	ex.completed = true
	if ex.mirror != mirrorOff {
		ex.keepMirrorResponse(out.StatusCode(), out.All())
	}
	ex.filterResponseHeader(out)
	ex.setDecisionHeaders(out)
	ex.addVia(out)
	if !ex.dated {
		ensureDate(out)
	}
}

// respond completes the response header read from the upstream and hands
// the body to fasthttp: copied when it came with the header, streamed
// otherwise. It returns true when the body is streamed, in which case
// respBody finishes the exchange.
func (p *Proxy) respond(ctx *fasthttp.RequestCtx, ex *exchange) bool {
	out := &ctx.Response
	ex.completeHeader(&out.Header)
	if ex.inline >= 0 {
		// A small body that came with the header: copied, and the upstream
		// connection goes back now.
		b, _ := ex.br.Peek(ex.inline)
		out.SetBody(b)
		ex.teeBody(b)
		_, _ = ex.br.Discard(ex.inline)
		ex.bytesOut = int64(ex.inline)
		ex.respEnded = true
		ex.releaseUpstream(true)
		return false
	}
	if !ex.resp.IsBodyStream() {
		// HEAD, 1xx, 204 and 304 have no body; the header keeps the length
		// (or chunked coding) the upstream announced for it.
		if out.Header.ContentLength() == -1 {
			setBodilessLength(&out.Header, -1, ctx.Request.Header.IsHTTP11())
		}
		out.SkipBody = true
		ex.respEnded = true
		ex.releaseUpstream(true)
		return false
	}
	ex.upBody = ex.resp.BodyStream()
	size := out.Header.ContentLength()
	// Event streams and bodies of unknown length are sent chunked and each
	// piece is flushed as soon as it arrives (fasthttp flushes every chunk),
	// as net/http's ReverseProxy does; the header goes out at once too, so
	// a client sees the response before the first event.
	if size < 0 || isEventStream(out.Header.ContentType()) {
		size = -1
	}
	// With a length too, the header goes out before the body (fasthttp
	// would hold it in its write buffer with the body's first bytes), so
	// that a body that then breaks off reaches the client as a header and
	// a cut body, not as no answer at all.
	out.ImmediateHeaderFlush = true
	ex.streaming = true
	if size < 0 && !ctx.Request.Header.IsHTTP11() {
		// fasthttp v1.78.0 sends a body stream of unknown length chunked
		// whatever the client's version; an HTTP/1.0 client cannot decode
		// that, so the response is written on the hijacked connection and
		// delimited by closing it (RFC 9112 section 6.3).
		p.respondHijacked(ctx, ex)
		return true
	}
	ex.respOut = &out.Header
	out.SetBodyStream(&ex.respBody, size)
	return true
}

// setBodilessLength frames the header of an answer sent without its body
// (HEAD, 1xx, 204, 304) as the body would have been: length bytes, or
// with length -1 chunked, but to an HTTP/1.0 client with neither (RFC
// 9112 section 6.1; -2 keeps a Content-Length the header already has, so
// that goes first). fasthttp itself writes no length for 1xx, 204 and 304.
func setBodilessLength(h *fasthttp.ResponseHeader, length int, http11 bool) {
	switch {
	case length >= 0:
		h.SetContentLength(length)
	case http11:
		h.SetContentLength(-1)
	default:
		h.Del(fasthttp.HeaderContentLength)
		h.SetContentLength(-2)
	}
}

func isEventStream(ct []byte) bool {
	const es = "text/event-stream"
	return len(ct) >= len(es) && eqFold(ct[:len(es)], es)
}

// errorHandler answers requests that fasthttp or the listener's Guard
// refused to parse: the Guard's status (400, 431 or 505), 431 for a header
// over fasthttp's buffer, 408 for a read timeout, 400 otherwise. They are
// recorded like any other request; with the method and path only when
// fasthttp parsed a request head (RawHeaders holds it then). Before that
// its request header answers defaults (GET, /) for a request line it
// never read: a connection that sent nothing before the head's timeout,
// a head that never ended or did not fit, or one the Guard or fasthttp's
// parser refused, are logged with an empty method and path, as the
// access log has any other value it lacks. (A head whose request line
// was valid but whose fields fasthttp refused, or one without any field
// whose target it could not parse, is among them.)
func (p *Proxy) errorHandler(ctx *fasthttp.RequestCtx, err error) {
	ex := p.getExchange()
	if len(ctx.Request.Header.RawHeaders()) > 0 {
		ex.method = append(ex.method[:0], ctx.Request.Header.Method()...)
		ex.path = append(ex.path[:0], ctx.Request.URI().Path()...)
	}
	ex.ctx = ctx
	ex.peer = peerAddr(ctx)
	ex.setRequestID(nil, false)
	var small *fasthttp.ErrSmallBuffer
	var gerr *listener.Error
	switch {
	case errors.As(err, &gerr):
		if lc := clientConn(ctx); lc != nil && len(ex.method) == 0 {
			// The Guard refused the head after its request line: the log
			// names what was refused, as nginx's does.
			if m, target, ok := lc.RefusedLine(); ok {
				ex.method = append(ex.method[:0], m...)
				ex.path = append(ex.path[:0], targetPath(target)...)
			}
		}
		p.reject(ctx, ex, gerr.Status, bad(gerr.Status)+gerr.Reason)
	case errors.As(err, &small):
		p.reject(ctx, ex, fasthttp.StatusRequestHeaderFieldsTooLarge, "request header fields too large")
	case isTimeout(err):
		ex.timeout = "read_header_timeout"
		p.reject(ctx, ex, fasthttp.StatusRequestTimeout, "request timeout")
	default:
		p.reject(ctx, ex, fasthttp.StatusBadRequest, "bad request")
	}
	p.log.Debug("request rejected by parser", "status", ex.status, "error", err)
	ex.finish()
}

// targetPath is the path of a raw request target: without its query, and
// without the scheme and authority of an absolute form.
func targetPath(t []byte) []byte {
	if i := bytes.Index(t, []byte("://")); i > 0 && t[0] != '/' {
		t = t[i+3:]
		if j := bytes.IndexByte(t, '/'); j >= 0 {
			t = t[j:]
		} else {
			t = nil
		}
	}
	if i := bytes.IndexAny(t, "?#"); i >= 0 {
		t = t[:i]
	}
	return t
}

// bad is the start of a rejection message for status.
func bad(status int) string {
	switch status {
	case fasthttp.StatusBadRequest:
		return "bad request: "
	case fasthttp.StatusHTTPVersionNotSupported:
		return "unsupported: "
	}
	return ""
}

// fasthttpLogger sends fasthttp's own messages (mostly connection errors
// caused by clients) to the debug level.
type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	if f.l.Enabled(context.Background(), slog.LevelDebug) {
		f.l.Debug(fmt.Sprintf(format, args...), "source", "fasthttp")
	}
}
