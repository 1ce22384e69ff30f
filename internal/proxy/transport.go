package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"

	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/mirror"
	"github.com/graygate/graygate/internal/rawio"
	"github.com/graygate/graygate/internal/upstream"
)

// watchDelay is how long the gateway waits for an upstream response header
// before it starts watching the client connection for a hang-up. Answers
// faster than this (nearly all of them) never pay for the watcher goroutine.
const watchDelay = 50 * time.Millisecond

// clientKey identifies an upstream client: one per instance address and
// scheme.
type clientKey struct {
	addr string
	tls  bool
}

// upstreamClient is the connection pool of one instance. The pool itself is
// a fasthttp.HostClient; the gateway drives it through its exported
// AcquireConn/ReleaseConn API instead of HostClient.Do so that it holds the
// connection during the exchange: that is what makes a response-header
// timeout that does not also cut the body, and cancelling the upstream
// request when the client hangs up, possible.
type upstreamClient struct {
	hc *fasthttp.HostClient
	// lastUse is when a request last picked this client (Unix nanoseconds,
	// updated at most once a second), for sweepClients.
	lastUse atomic.Int64
	conns   connSource
	addr    string
	// maxPooled is the most connections the pool holds (its MaxConns).
	maxPooled int
	// tls is the TLS configuration for the instance, nil for plain HTTP.
	// WebSocket tunnels dial with it too.
	tls *tls.Config
	// http10 is whether the instance's last answer came over HTTP/1.0.
	// Such a server ignores "Expect: 100-continue" (RFC 9110 section
	// 10.1.1) and waits for the body, so a request to it is sent without
	// one, and its body at once (buildRequest).
	http10 atomic.Bool
}

// client returns the pooled client for inst, creating it on first use.
// Lookups read an immutable map through an atomic pointer; creation copies
// the map under a mutex. A client no request has used for a while is
// dropped by sweepClients, so instances that left (discovery, reloads) do
// not accumulate.
func (p *Proxy) client(inst *upstream.Instance, now time.Time) *upstreamClient {
	k := clientKey{addr: inst.Addr, tls: inst.TLS}
	if m := p.clients.Load(); m != nil {
		if c, ok := (*m)[k]; ok {
			if t := now.UnixNano(); t-c.lastUse.Load() > int64(time.Second) {
				c.lastUse.Store(t)
			}
			return c
		}
	}
	p.clientsMu.Lock()
	defer p.clientsMu.Unlock()
	old := p.clients.Load()
	if old != nil {
		if c, ok := (*old)[k]; ok {
			return c
		}
	}
	c := p.newClient(k)
	c.lastUse.Store(now.UnixNano())
	m := make(map[clientKey]*upstreamClient, 1)
	if old != nil {
		for kk, v := range *old {
			m[kk] = v
		}
	}
	m[k] = c
	p.clients.Store(&m)
	return c
}

func (p *Proxy) newClient(k clientKey) *upstreamClient {
	o := p.opts.Load()
	var tlsConf *tls.Config
	if k.tls {
		tlsConf = p.tlsConfigFor(k.addr)
	}
	hc := &fasthttp.HostClient{
		Addr: k.addr,
		// TLS is done in dial, not by fasthttp, so that the connection
		// fasthttp pools is the one whose deadlines the gateway controls.
		Dial: func(addr string) (net.Conn, error) {
			c, err := p.dial(addr, tlsConf)
			if err != nil {
				return nil, err
			}
			if tc, ok := c.(*net.TCPConn); ok {
				if raw, err := tc.SyscallConn(); err == nil {
					return &upstreamTCP{TCPConn: tc, raw: raw, sock: rawio.New(tc)}, nil
				}
			}
			return c, nil
		},
		MaxConns:            o.MaxConnsPerHost,
		MaxConnWaitTimeout:  o.DialTimeout,
		MaxIdleConnDuration: o.IdleConnTimeout,
		// LIFO, as nginx's keep-alive cache: the connection that answered
		// last goes out first, so under load the busy ones stay warm and
		// within peekAfter, and the rest sit until MaxIdleConnDuration
		// closes them.
		ConnPoolStrategy:         fasthttp.LIFO,
		ReadBufferSize:           o.MaxResponseHeaderBytes,
		NoDefaultUserAgentHeader: true,
		DisablePathNormalizing:   true,
	}
	maxPooled := o.MaxConnsPerHost
	if maxPooled <= 0 {
		maxPooled = fasthttp.DefaultMaxConnsPerHost
	}
	return &upstreamClient{
		hc:        hc,
		conns:     newConnPool(hc.AcquireConn, hc.ReleaseConn, hc.CloseConn),
		addr:      k.addr,
		tls:       tlsConf,
		maxPooled: maxPooled,
	}
}

// sweepClients drops, every IdleConnTimeout, the upstream clients that no
// request has used for twice that long and that hold no connection: their
// idle connections have been closed by then, and an instance that comes
// back simply gets a new client. It returns when stop is closed.
func (p *Proxy) sweepClients(stop <-chan struct{}) {
	for {
		every := p.opts.Load().IdleConnTimeout
		select {
		case <-stop:
			return
		case <-time.After(every):
		}
		cutoff := time.Now().Add(-2 * every).UnixNano()
		p.clientsMu.Lock()
		if old := p.clients.Load(); old != nil {
			m := make(map[clientKey]*upstreamClient, len(*old))
			for k, c := range *old {
				if c.lastUse.Load() >= cutoff || c.hc.ConnsCount() > 0 {
					m[k] = c
				}
			}
			if len(m) < len(*old) {
				p.clients.Store(&m)
			}
		}
		p.clientsMu.Unlock()
	}
}

// UpstreamClients returns how many upstream instances the proxy keeps a
// connection pool for.
func (p *Proxy) UpstreamClients() int {
	if m := p.clients.Load(); m != nil {
		return len(*m)
	}
	return 0
}

func (p *Proxy) tlsConfigFor(addr string) *tls.Config {
	var c *tls.Config
	if t := p.opts.Load().UpstreamTLS; t != nil {
		c = t.Clone()
	} else {
		c = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if c.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			c.ServerName = host
		}
	}
	if len(c.NextProtos) == 0 {
		c.NextProtos = []string{"http/1.1"}
	}
	return c
}

// upstreamTCP is a plain TCP upstream connection that keeps the
// syscall.RawConn it was given when dialled, for flushAndWait, and the read
// deadline it has, for armHeaderDeadline.
type upstreamTCP struct {
	*net.TCPConn
	raw  syscall.RawConn
	sock *rawio.Conn // the connection's reads and writes (nil: TCPConn's)
	// rdl and wdl are the read and write deadlines last set, in Unix
	// nanoseconds (0: none), whoever set them (either codec, a cancel), so
	// that armHeaderDeadline and keepUpstreamWriteDeadline re-arm a
	// deadline only when it must be moved, on the connection's later
	// requests too. The Set*Deadline methods keep them, from any goroutine.
	rdl, wdl atomic.Int64
	// peekIdle's state.
	peekFn  func(uintptr)
	peekErr error
	peekBuf [1]byte
}

// Read reads through sock where there is one.
func (u *upstreamTCP) Read(p []byte) (int, error) {
	if u.sock != nil {
		return u.sock.Read(p)
	}
	return u.TCPConn.Read(p)
}

// Write writes through sock where there is one.
func (u *upstreamTCP) Write(p []byte) (int, error) {
	if u.sock != nil {
		return u.sock.Write(p)
	}
	return u.TCPConn.Write(p)
}

// SetReadDeadline records t and sets it.
func (u *upstreamTCP) SetReadDeadline(t time.Time) error {
	u.rdl.Store(listener.UnixNano(t))
	return u.TCPConn.SetReadDeadline(t)
}

// SetWriteDeadline records t and sets it.
func (u *upstreamTCP) SetWriteDeadline(t time.Time) error {
	u.wdl.Store(listener.UnixNano(t))
	return u.TCPConn.SetWriteDeadline(t)
}

// SetDeadline records t for both directions and sets it.
func (u *upstreamTCP) SetDeadline(t time.Time) error {
	u.rdl.Store(listener.UnixNano(t))
	u.wdl.Store(listener.UnixNano(t))
	return u.TCPConn.SetDeadline(t)
}

// dialError marks a failure to connect (or to finish the TLS handshake), as
// opposed to a failure on an established connection.
type dialError struct {
	addr string
	err  error
}

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// dial connects to addr within DialTimeout, with TLS if tlsConf is set.
func (p *Proxy) dial(addr string, tlsConf *tls.Config) (net.Conn, error) {
	timeout := p.opts.Load().DialTimeout
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, &dialError{addr: addr, err: err}
	}
	if tlsConf == nil {
		return c, nil
	}
	tc := tls.Client(c, tlsConf)
	if err := tc.SetDeadline(time.Now().Add(timeout)); err != nil {
		_ = c.Close()
		return nil, &dialError{addr: addr, err: err}
	}
	if err := tc.Handshake(); err != nil {
		_ = c.Close()
		return nil, &dialError{addr: addr, err: fmt.Errorf("tls handshake: %w", err)}
	}
	if err := tc.SetDeadline(time.Time{}); err != nil {
		_ = c.Close()
		return nil, &dialError{addr: addr, err: err}
	}
	return tc, nil
}

// upstreamConn is one connection borrowed from an upstream pool.
type upstreamConn interface {
	Conn() net.Conn
	// Reused reports whether the connection served an earlier request, in
	// which case a failure before any response byte may just mean the
	// upstream closed it while it sat idle.
	Reused() bool
	// Idle returns how long a reused connection sat in the pool before
	// this request took it, as of now (0 for a new one).
	Idle(now time.Time) time.Duration
	// Release returns the connection to the pool, or closes it if reuse is
	// false. The upstreamConn must not be used afterwards.
	Release(reuse bool)
}

type connSource interface {
	get() (upstreamConn, error)
}

// fastConn is the part of fasthttp's unexported *clientConn that the
// gateway uses. HostClient.AcquireConn returns that type, which cannot be
// named outside fasthttp; connPool is generic so that the compiler infers
// it from the method values and the pooled handle can hold it without a
// per-request closure.
type fastConn interface {
	Conn() net.Conn
	LastUseTime() time.Time
}

type connPool[C fastConn] struct {
	acquire func(time.Duration, bool) (C, error)
	release func(C)
	close   func(C)
	handles sync.Pool
}

func newConnPool[C fastConn](acquire func(time.Duration, bool) (C, error), release, closeFn func(C)) *connPool[C] {
	return &connPool[C]{acquire: acquire, release: release, close: closeFn}
}

func (cp *connPool[C]) get() (upstreamConn, error) {
	cc, err := cp.acquire(0, false)
	if err != nil {
		return nil, err
	}
	h, _ := cp.handles.Get().(*heldConn[C])
	if h == nil {
		h = &heldConn[C]{pool: cp}
	}
	h.cc = cc
	return h, nil
}

type heldConn[C fastConn] struct {
	pool *connPool[C]
	cc   C
}

func (h *heldConn[C]) Conn() net.Conn { return h.cc.Conn() }

// Reused relies on fasthttp setting a connection's last use time only when
// it goes back to the pool.
func (h *heldConn[C]) Reused() bool { return !h.cc.LastUseTime().IsZero() }

func (h *heldConn[C]) Idle(now time.Time) time.Duration {
	t := h.cc.LastUseTime()
	if t.IsZero() {
		return 0
	}
	return max(now.Sub(t), 0)
}

func (h *heldConn[C]) Release(reuse bool) {
	if reuse {
		h.pool.release(h.cc)
	} else {
		dropCloseNotify(h.cc.Conn())
		h.pool.close(h.cc)
	}
	var zero C
	h.cc = zero
	h.pool.handles.Put(h)
}

// dropCloseNotify closes the TCP connection under c when c is a TLS
// connection, so that closing c then sends no close_notify alert. It is
// for an upstream connection the gateway gives up on (Release(false)): in
// the middle of an exchange (a timeout, an aborted or refused upload, a
// protocol violation), or after an answer that asked to close it.
// tls.Conn.Close writes the alert under a write deadline of its own, five
// seconds away, and to an upstream that has stopped reading (the
// write_timeout case) that write waited those five seconds, with the
// client's answer held behind it. A peer gets nothing from the alert on a
// connection closed mid-exchange; nginx leaves it out on a timed-out or
// failed connection too (ngx_ssl_shutdown). Idle connections that the
// pool closes still get it.
func dropCloseNotify(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		_ = tc.NetConn().Close()
	}
}

// staleError is a failure before the first response byte: the connection
// was closed or reset. On a reused connection that is usually the upstream
// having closed it while idle, and the request may be sent again.
type staleError struct{ err error }

func (e *staleError) Error() string { return e.err.Error() }
func (e *staleError) Unwrap() error { return e.err }

// errClientGone reports that the client hung up (or its body broke off)
// before the response could be sent.
var errClientGone = errors.New("client closed the request")

// errRequestTimeout reports that the client's body stalled for longer than
// Options.ReadTimeout.
var errRequestTimeout = errors.New("request body read timed out")

// errBadRequestBody reports a request body whose framing is invalid (a
// malformed chunk), found while it was being forwarded: the client gets
// 400, never 499.
var errBadRequestBody = errors.New("malformed request body")

// roundTrip sends the request upstream and reads the response header into
// the client's response (see send), and reports the outcome to the
// decision's breaker: at once when the exchange is over with the header,
// or, for a response whose body streams, when the body has ended, so that
// an upstream that stalls or breaks off mid-body is a failure. A response
// whose interim (1xx) ones are written on a hijacked connection is not
// over either: its final header and body are read by respondHijacked, and
// the outcome is theirs
// (a 5xx, a break-off or a stall is a failure), with the latency to the
// final header (brkFrom). Only a request guarded by a breaker reads the
// clock here.
func (p *Proxy) roundTrip(ctx *fasthttp.RequestCtx, ex *exchange) error {
	if ex.d.Breaker == nil {
		return p.send(ctx, ex)
	}
	start := p.now()
	err := p.send(ctx, ex)
	if err == nil && (ex.resp.IsBodyStream() || len(ex.interim) > 0) {
		ex.brkLatency = max(p.now().Sub(start)-ex.bodyWait, 0)
		ex.brkPending = true
		if len(ex.interim) > 0 {
			ex.brkFrom = start
		}
		return nil
	}
	ex.recordOutcome(start, err)
	return err
}

// send sends the request (its head, ex.head, and its body) upstream and
// reads the response header into ctx.Response, leaving the body as a stream
// on a held connection (ex.up, ex.br) that releaseUpstream gives back. A
// request without a body whose method is safe is sent once more if a reused
// connection turns out to be stale. A reused connection is first checked
// for bytes or a close that arrived while it sat in the pool (peekIdle): a
// connection with stray bytes is a protocol violation and is closed, and
// nothing has been sent on it yet, so the request goes on another one. It
// sets ex.sent before writing and ex.respStarted once a response byte has
// arrived, which is what decides whether a failure may be retried on
// stable.
func (p *Proxy) send(ctx *fasthttp.RequestCtx, ex *exchange) error {
	uc := ex.uc
	streamed := ex.bodyKind == bodyFixed || ex.bodyKind == bodyChunked
	replayable := !streamed && ex.bodyKind != bodyBuffered && safeMethod(ex.method)
	// The time a streamed body takes to arrive from the client is not the
	// upstream's latency; it is left out of the breaker's measurement.
	timeBody := ex.d.Breaker != nil && streamed
	stale := 0
	now := ex.wallStart()
	for attempt := 0; ; attempt++ {
		c, err := p.getChecked(uc, &stale, now, !replayable || attempt > 0)
		if err != nil {
			return err
		}
		reused := c.Reused()
		conn := c.Conn()
		up, _ := conn.(*upstreamTCP)
		ex.upWDL = 0
		// A bodyless request on a plain TCP connection is written by
		// flushAndWait from ex.head itself; anything else goes through a
		// buffered writer.
		var bw *bufio.Writer
		direct := up != nil && ex.bodyKind == bodyNone
		if !direct {
			bw = uc.hc.AcquireWriter(conn)
		}
		ex.sent = true
		// The request goes out now: the write deadline and, for a request
		// without a streamed body, the header timeout count from here,
		// not from its arrival, which may have waited for a connection.
		sentAt := ex.realNow()
		if err = ex.keepUpstreamWriteDeadline(conn, sentAt); err == nil && !direct {
			_, err = bw.Write(ex.head)
			if err == nil && ex.bodyKind == bodyBuffered {
				err = ex.writeBuffered(ctx, bw)
			}
		}
		var flush flusher
		final := false
		if streamed && err == nil {
			if ex.expect {
				// Expect: 100-continue: the head goes first, and the body
				// only after the upstream's 100 (or a short wait); a final
				// answer instead is the response, and the body is not sent.
				if err = bw.Flush(); err == nil {
					final, err = p.awaitContinue(ctx, ex, conn, uc.hc.AcquireReader(conn))
				}
			}
			if err == nil && !final {
				var w0 time.Time
				if timeBody {
					w0 = p.now()
				}
				watching := ex.watchUpstream(ctx, up)
				err = ex.writeBody(ctx, bw, conn)
				if watching {
					ex.unwatchUpstream(ctx, up, err == nil)
				}
				if timeBody {
					ex.bodyWait += p.now().Sub(w0)
				}
			}
			if err == nil {
				err = bw.Flush()
			}
			if err != nil && !final && ex.clientErr == nil && !ex.tooLarge && !ex.canceled && p.earlyAnswer(ctx, ex, conn, uc) {
				// The upstream stopped the upload by answering (a 413, say)
				// and closing, or by no longer reading: its answer is the
				// response (RFC 9112 section 9.3: a client sending a body
				// watches for one), and the body is not sent further.
				final, err = true, nil
			}
		} else if err == nil {
			// A request whose body the gateway holds is flushed by
			// readHeader, which then waits for the answer without a read
			// attempt (see flushAndWait), on a plain TCP connection.
			switch {
			case direct:
				ex.headOut = headWriter{conn: conn, head: ex.head}
				flush = &ex.headOut
			case up != nil:
				flush = bw
			default:
				err = bw.Flush()
			}
		}
		if err != nil {
			var werr *writeError
			if errors.As(err, &werr) {
				err = werr.err
			}
			if isTimeout(err) && ex.clientErr == nil {
				ex.timeout = timeoutUpstreamWrite
			}
			err = fmt.Errorf("sending request to %s: %w", uc.addr, err)
		} else {
			br := ex.br
			if br == nil {
				br = uc.hc.AcquireReader(conn)
			}
			// The header timeout runs from when the request has been
			// written: sentAt, or, after a streamed body, now.
			start := sentAt
			if streamed {
				start = time.Now()
			}
			if final {
				err = ex.finishHeader(ctx, conn, br)
			} else {
				err = p.readHeader(ctx, ex, conn, br, start, up, flush)
			}
			ex.headOut = headWriter{}
			if err == nil {
				if bw != nil {
					uc.hc.ReleaseWriter(bw)
				}
				ex.up, ex.br = c, br
				if final {
					// The upstream answered without the body, which the
					// connection would otherwise still owe it.
					ex.noReuse = true
				}
				return nil
			}
			uc.hc.ReleaseReader(br)
			ex.br = nil
			var werr *writeError
			switch {
			case errors.As(err, &werr):
				if isTimeout(werr.err) {
					ex.timeout = timeoutUpstreamWrite
				}
				err = fmt.Errorf("sending request to %s: %w", uc.addr, werr.err)
			default:
				if isTimeout(err) && !ex.canceled && ex.timeout == "" {
					ex.timeout = timeoutResponseHeader
				}
				if !errors.Is(err, errBodyBrokeOff) && !errors.Is(err, errBadChunk) {
					err = fmt.Errorf("reading response header from %s: %w", uc.addr, err)
				}
			}
		}
		if bw != nil {
			uc.hc.ReleaseWriter(bw)
		}
		c.Release(false)
		var stale *staleError
		switch {
		case ex.tooLarge:
			return fmt.Errorf("%w: sending request to %s", errBodyTooLarge, uc.addr)
		case ex.clientErr != nil && isBadBody(ctx, ex.clientErr):
			return fmt.Errorf("%w: %w", errBadRequestBody, ex.clientErr)
		case ex.clientErr != nil && isTimeout(ex.clientErr):
			ex.timeout = timeoutClientRead
			return fmt.Errorf("%w: %w", errRequestTimeout, ex.clientErr)
		case ex.clientErr != nil:
			return fmt.Errorf("%w: reading request body: %w", errClientGone, ex.clientErr)
		case ex.canceled:
			return errClientGone
		case attempt == 0 && reused && replayable && (errors.As(err, &stale) || isConnReset(err)):
			continue
		}
		return err
	}
}

// getChecked takes a connection to uc's instance from its pool. A reused
// one is first checked for bytes or a close that arrived while it sat in
// the pool (peekIdle) if it sat there for at least peekAfter, or, with
// always, whatever the time: for a request that may not be sent twice, and
// for one whose first connection turned out stale (when an upstream
// restarts, every pooled connection is). A connection with stray bytes is
// a protocol violation, and either kind is closed. Nothing was sent on it,
// so any request may go on another one; *stale counts the connections a
// request has dropped (and, for roundTripH1, the sends it retried). Every
// pooled connection may be bad (an upstream whose keep-alive timeout is
// shorter than the pool's idle timeout closes them all after a burst), so
// the dropping goes on until a good one or a new one comes out: each
// dropped connection has left the pool for good, and the pool holds at
// most maxPooled. now is the real clock (fasthttp stamps a connection's
// release with it), read by the caller.
func (p *Proxy) getChecked(uc *upstreamClient, stale *int, now time.Time, always bool) (upstreamConn, error) {
	for {
		c, err := uc.conns.get()
		if err != nil {
			return nil, fmt.Errorf("connecting to %s: %w", uc.addr, err)
		}
		up, ok := c.Conn().(*upstreamTCP)
		if !c.Reused() || !ok || (!always && c.Idle(now) < peekAfter) {
			return c, nil
		}
		perr := up.peekIdle()
		if perr == nil {
			return c, nil
		}
		c.Release(false)
		if errors.Is(perr, errStrayBytes) {
			p.violation(violationIdleBytes)
		}
		// The bound only stops a pool refilled with bad connections as
		// fast as they are dropped.
		if *stale++; *stale > uc.maxPooled+maxStaleConns {
			return nil, fmt.Errorf("connecting to %s: %w", uc.addr, perr)
		}
	}
}

// peekAfter is how long a pooled connection must have sat idle before
// getChecked peeks at it. The peek is a system call, as costly as the
// request's own read, and under load a connection goes back to work
// within microseconds of its last answer (the pool is LIFO), when there is
// nothing for a peek to find: an upstream closes a connection for idleness
// after seconds (its keep-alive timeout), and a misbehaving one sends its
// stray bytes with or right after its answer, where releaseUpstream finds
// those already read (violationExtraBytes) and no peek could promise to
// see the others first. A connection taken back sooner goes unpeeked,
// unless its request may not be sent twice (getChecked's always): then a
// close is found by the request (a stale connection: a safe method is sent
// again, on a connection that is peeked, as after a close the peek
// missed), and stray bytes by the next answer's framing, or not at all, as
// when they arrive just after a peek. flushAndWait never hangs on such a
// connection: a close makes the request's write fail or be reset, and an
// answer wakes the wait whatever came before it.
const peekAfter = 10 * time.Millisecond

// maxStaleConns bounds how many times a safe request is sent again after
// its connection turned out stale when used (closed or reset before any
// answer), not how many pooled connections getChecked drops unused.
const maxStaleConns = 8

// keepUpstreamWriteDeadline keeps the upstream write deadline at
// UpstreamWriteTimeout from now (the caller's reading of the real clock),
// moving it only when it is off by more than an eighth of the timeout.
func (ex *exchange) keepUpstreamWriteDeadline(conn net.Conn, now time.Time) error {
	d := ex.opts.UpstreamWriteTimeout
	want := now.Add(d).UnixNano()
	cur := ex.upWDL
	up, tcp := conn.(*upstreamTCP)
	if tcp {
		cur = up.wdl.Load()
	}
	if listener.Keeps(cur, want, int64(d/8)) {
		return nil
	}
	ex.upWDL = want
	return conn.SetWriteDeadline(time.Unix(0, want))
}

// writeBody streams the client's body to the upstream after the head: as
// it came, with its Content-Length, or re-chunked, with the client's
// trailer fields after the last chunk.
func (ex *exchange) writeBody(ctx *fasthttp.RequestCtx, bw *bufio.Writer, conn net.Conn) error {
	buf := ex.copyBuf()
	for {
		n, rerr := ex.reqBody.Read(buf)
		if n > 0 {
			if err := ex.keepUpstreamWriteDeadline(conn, time.Now()); err != nil {
				return err
			}
			var werr error
			if ex.bodyKind == bodyChunked {
				werr = ex.writeChunk(bw, buf[:n])
			} else {
				_, werr = bw.Write(buf[:n])
			}
			if werr != nil {
				return wrapWrite(werr)
			}
			// What arrived goes on at once, as it does through nginx
			// without request buffering: an upload that pauses for an
			// answer has its first part with the upstream.
			if rerr == nil {
				if err := bw.Flush(); err != nil {
					return wrapWrite(err)
				}
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if ex.upSpoke.Load() && interruptedRead(ctx, rerr) {
				// watchUpstream ended the read: the upstream closed,
				// reset or answered, and the body goes no further.
				ex.clientErr = nil
				if ex.upSaw == nil {
					return wrapWrite(errAnsweredEarly)
				}
				return wrapWrite(ex.upSaw)
			}
			return rerr
		}
	}
	if ex.bodyKind != bodyChunked {
		return nil
	}
	if err := ex.keepUpstreamWriteDeadline(conn, time.Now()); err != nil {
		return err
	}
	return ex.writeLastChunk(ctx, bw)
}

// writeBuffered writes a bodyBuffered request's body after its head: as
// it is, or, when it goes chunked (chunkBuffered), as one chunk, then the
// last chunk and the trailer section.
func (ex *exchange) writeBuffered(ctx *fasthttp.RequestCtx, bw *bufio.Writer) error {
	if !ex.chunkBuffered {
		_, err := bw.Write(ex.sendBody)
		return err
	}
	if len(ex.sendBody) > 0 {
		if err := ex.writeChunk(bw, ex.sendBody); err != nil {
			return err
		}
	}
	return ex.writeLastChunk(ctx, bw)
}

// writeChunk writes p, which is not empty, as one chunk of a chunked
// request body: its size line, the data, and its CRLF.
func (ex *exchange) writeChunk(bw *bufio.Writer, p []byte) error {
	ex.scratch = append(strconv.AppendInt(ex.scratch[:0], int64(len(p)), 16), "\r\n"...)
	if _, err := bw.Write(ex.scratch); err != nil {
		return err
	}
	if _, err := bw.Write(p); err != nil {
		return err
	}
	_, err := bw.WriteString("\r\n")
	return err
}

// writeLastChunk ends a chunked request body: the last chunk, and the
// trailer section (RFC 9112 section 7.1.2), which fasthttp parsed into the
// request header when the body ended, with the announced fields that
// keepRequestTrailer keeps.
func (ex *exchange) writeLastChunk(ctx *fasthttp.RequestCtx, bw *bufio.Writer) error {
	if _, err := bw.WriteString("0\r\n"); err != nil {
		return wrapWrite(err)
	}
	in := &ctx.Request.Header
	mirrored := ex.mirror == mirrorOn
	ex.sentTrailer = ex.sentTrailer[:0]
	for _, k := range ex.announcedTrailers(in) {
		if !ex.keepRequestTrailer(k) {
			continue
		}
		for _, v := range in.PeekAll(b2s(k)) {
			ex.scratch = append(append(append(append(ex.scratch[:0], k...), ": "...), v...), "\r\n"...)
			if _, err := bw.Write(ex.scratch); err != nil {
				return wrapWrite(err)
			}
			if mirrored {
				ex.sentTrailer = append(ex.sentTrailer, mirror.Header{Name: string(k), Value: string(v)})
			}
		}
	}
	_, err := bw.WriteString("\r\n")
	return wrapWrite(err)
}

// wrapWrite marks a failed write of the request as the upstream's (the
// body's reads report the client's failures themselves).
func wrapWrite(err error) error {
	if err == nil {
		return nil
	}
	return &writeError{err: err}
}

// copyBuf returns the exchange's body copy buffer.
func (ex *exchange) copyBuf() []byte {
	if ex.buf == nil {
		ex.buf = make([]byte, 32<<10)
	}
	return ex.buf
}

// awaitContinue waits, after a head carrying "Expect: 100-continue", for
// the upstream's 100 Continue or final answer, at most
// ExpectContinueTimeout. It reports whether a final answer came, in which
// case its header has been read into the client's response and the body
// must not be sent. A 100, or no answer in time, means: send the body.
func (p *Proxy) awaitContinue(ctx *fasthttp.RequestCtx, ex *exchange, conn net.Conn, br *bufio.Reader) (bool, error) {
	ex.br = br
	if err := conn.SetReadDeadline(time.Now().Add(ex.opts.ExpectContinueTimeout)); err != nil {
		return false, err
	}
	if _, err := br.Peek(1); err != nil {
		if isTimeout(err) {
			return false, nil
		}
		if errors.Is(err, io.EOF) || isConnReset(err) {
			return false, &staleError{err: err}
		}
		return false, err
	}
	ex.respStarted = true
	out := &ctx.Response.Header
	if err := ex.readHeadFrom(out, br); err != nil {
		return false, err
	}
	if out.StatusCode() == fasthttp.StatusContinue {
		return false, nil
	}
	return true, nil
}

// earlyAnswer reads, after sending a request body failed, a response
// header the upstream sent before it stopped reading or closed, into the
// client's response; it waits at most earlyAnswerWait for one (an answer
// sent before a reset or a stall is there already). It reports whether a
// header was read, in which case the exchange goes on as after an early
// answer to Expect (awaitContinue): finishHeader, and the connection is
// not reused.
func (p *Proxy) earlyAnswer(ctx *fasthttp.RequestCtx, ex *exchange, conn net.Conn, uc *upstreamClient) bool {
	br := ex.br
	if br == nil {
		br = uc.hc.AcquireReader(conn)
		ex.br = br
	}
	if br.Buffered() == 0 {
		if err := conn.SetReadDeadline(time.Now().Add(earlyAnswerWait)); err != nil {
			return false
		}
		if _, err := br.Peek(1); err != nil {
			return false
		}
	}
	ex.respStarted = true
	return ex.readHeadFrom(&ctx.Response.Header, br) == nil
}

// errAnsweredEarly is why a body was not sent to its end: the upstream
// answered first (watchUpstream).
var errAnsweredEarly = errors.New("the upstream answered before the request body ended")

// earlyAnswerWait is how long earlyAnswer waits for an answer.
const earlyAnswerWait = 20 * time.Millisecond

// readHeader reads the response header within ResponseHeaderTimeout,
// counted from start. The deadline is set once the request has been
// written, or, when flush is given, just before its buffered last part is
// (flushAndWait), and it is
// cleared before a body is streamed: that is net/http's
// ResponseHeaderTimeout, where fasthttp's own ReadTimeout would also cut
// long bodies. While the upstream is silent past watchDelay, the client
// connection is watched so that a client hanging up aborts the wait (499)
// instead of holding an upstream connection. A failure to flush is returned
// as a *writeError.
func (p *Proxy) readHeader(ctx *fasthttp.RequestCtx, ex *exchange, conn net.Conn, br *bufio.Reader, start time.Time, up *upstreamTCP, flush flusher) error {
	timeout := ex.headerTimeout
	if err := armHeaderDeadline(conn, up, start, timeout); err != nil {
		return err
	}
	var err error
	if flush != nil {
		err = ex.flushAndWait(up.raw, flush)
	}
	if err == nil {
		_, err = br.Peek(1)
	}
	buffered := err == nil && finalHeadBuffered(br)
	watching := false
	if watchDelay < timeout && (err == nil && !buffered || err != nil && isTimeout(err)) {
		// The upstream is slow to answer, or its header came in part (or
		// after an interim response): the rest of it is read under the
		// full timeout, not the first wait's.
		watching = ex.watch(ctx, conn)
		if err = ex.setUpstreamReadDeadline(conn, start.Add(timeout)); err == nil {
			_, err = br.Peek(1)
		}
	}
	if err == nil {
		ex.respStarted = true
		err = ex.readResponse(ctx, conn, br, buffered)
	} else if errors.Is(err, io.EOF) || isConnReset(err) {
		err = &staleError{err: err}
	}
	if watching {
		ex.unwatch(ctx)
	}
	if err != nil {
		return err
	}
	if ex.canceled {
		return errClientGone
	}
	if !ex.resp.IsBodyStream() || len(ex.interim) > 0 {
		// Nothing more is read from conn for this request here: the body
		// is empty or already in br, or an interim response hands the
		// rest to respondHijacked, which keeps the header deadline. The
		// deadline stays armed; whoever reads from conn next sets its own
		// first (or keeps it, see armHeaderDeadline).
		return nil
	}
	return conn.SetReadDeadline(time.Time{})
}

// armHeaderDeadline sets the deadline of the first wait for the response
// header: start+watchDelay, or start+timeout when that is sooner. On a plain
// TCP connection, the read deadline it has (whoever set it: an earlier
// request, most often) is kept when it falls between start+watchDelay/2
// and start+watchDelay. The first wait
// then ends at most watchDelay/2 early, which only starts the client
// watcher sooner (the full timeout is then armed from start), and busy
// connections skip re-arming a runtime timer, and two clock reads, on
// nearly every request.
func armHeaderDeadline(conn net.Conn, up *upstreamTCP, start time.Time, timeout time.Duration) error {
	if timeout <= watchDelay {
		return conn.SetReadDeadline(start.Add(timeout))
	}
	d := start.Add(watchDelay)
	if up != nil {
		if listener.Keeps(up.rdl.Load(), d.UnixNano(), int64(watchDelay/2)) {
			return nil
		}
	}
	return conn.SetReadDeadline(d)
}

// finalHeadBuffered reports whether br holds a whole response header that
// is not an interim (1xx) one, as fasthttp's parser frames it (it needs a
// CRLFCRLF): what readResponse can read without waiting. A header whose
// empty line is a bare LF, or that does not start with "HTTP/", counts as
// incomplete, which only means it is read under the full header timeout
// (and by bufferHead).
func finalHeadBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	c := statusClass(b)
	return c != 0 && c != '1' && bytes.Contains(b, crlfCRLF)
}

// statusClass returns the first digit of the status of the response head
// b starts with ('2' for "HTTP/1.1 204"), or 0 when b does not start with
// one as far as the status.
func statusClass(b []byte) byte {
	if len(b) > len("HTTP/1.1 ") && bytes.HasPrefix(b, httpSlash) {
		return b[len("HTTP/1.1 ")]
	}
	return 0
}

var httpSlash = []byte("HTTP/")

var crlfCRLF = []byte("\r\n\r\n")

// maxInlineBody is the largest response body that is copied into the
// client's response, when it has arrived together with its header, instead
// of being streamed: the upstream connection goes back at once and the
// exchange ends in the handler.
const maxInlineBody = 16 << 10

// maxInterimResponses bounds the 1xx responses before the final one.
const maxInterimResponses = 100

var errTooManyInterim = errors.New("too many 1xx informational responses")

// readResponse reads the upstream response header from br straight into
// the client's response header, so that nothing is copied and the
// upstream's own fields (Date among them) are what the client gets; then it
// prepares the body. A 100 Continue is skipped (the gateway answered the
// client's Expect itself); any other interim (1xx) response is kept in
// ex.interim to be forwarded, and the exchange then continues on a
// hijacked connection (see respondHijacked). A response without a body (to
// HEAD; 1xx, 204, 304) has none. A body with a Content-Length of at most
// maxInlineBody bytes that is already in br is left there for respond to
// copy (ex.inline). Any other body becomes a stream on br.
//
// When br holds a whole final header without a Date, the client's header
// is reset first, which makes fasthttp write its own Date (RFC 9110
// section 6.6.1) without ensureDate's round trip; a reset header would also
// get a default Content-Type, which is turned off again. (A header read
// again for the same request, after an attempt that failed within its
// header, keeps the reset: fasthttp's Date then replaces the upstream's.)
//
// buffered says br holds the whole header already (finalHeadBuffered, the
// common case); otherwise it is first read to its end (bufferHead), which
// also finds a header fasthttp cannot end by itself (bare LF lines).
func (ex *exchange) readResponse(ctx *fasthttp.RequestCtx, conn net.Conn, br *bufio.Reader, buffered bool) error {
	out := &ctx.Response.Header
	lfEnd := 0
	if !buffered {
		var err error
		if lfEnd, err = bufferHead(br); err != nil {
			return err
		}
	}
	if !ex.dated && headerWithoutDate(br) {
		out.Reset()
		out.SetNoDefaultContentType(true)
		ex.dated = true
	}
	if err := ex.readHead(out, br, lfEnd); err != nil {
		return err
	}
	return ex.finishHeader(ctx, conn, br)
}

// finishHeader goes on from a response header already read into the
// client's response: interim responses, then the body. conn is the
// upstream connection br reads.
func (ex *exchange) finishHeader(ctx *fasthttp.RequestCtx, conn net.Conn, br *bufio.Reader) error {
	ex.inline = -1
	out := &ctx.Response.Header
	for n := 0; isInterim(out.StatusCode()); n++ {
		if n >= maxInterimResponses {
			return errTooManyInterim
		}
		if out.StatusCode() != fasthttp.StatusContinue && ctx.Request.Header.IsHTTP11() {
			// RFC 9110 section 15.2: a proxy forwards 1xx responses
			// (never to an HTTP/1.0 client).
			ex.filterResponseHeader(out)
			ex.interim = out.AppendBytes(ex.interim)
			switch lc := inPlace(ctx); {
			case ex.hijacked:
				if err := ex.writeInterim(); err != nil {
					return err
				}
			case lc != nil:
				// Forwarded at once, and the answer goes on through
				// fasthttp, which keeps the connection.
				if err := ex.forwardInterim(lc); err != nil {
					return fmt.Errorf("%w: forwarding an interim response: %w", errClientGone, err)
				}
				// The final header is waited for under the full timeout
				// from now, as after any interim response.
				if err := conn.SetReadDeadline(time.Now().Add(ex.headerTimeout)); err != nil {
					return err
				}
			default:
				// The rest is read and written by respondHijacked, once
				// fasthttp has flushed earlier pipelined answers.
				return nil
			}
		}
		if err := ex.readHeadFrom(out, br); err != nil {
			return err
		}
	}
	return ex.prepareBody(ctx, conn, br)
}

// prepareBody decides how the final response's body is relayed: none,
// copied (ex.inline), or streamed (ex.resp's body stream on br). A body of
// at most maxInlineBody bytes is copied: what has not come with the header
// is read into br first (readInline), so that an upstream that breaks off
// within it is answered with a 502 and not with a header that promised
// more. An event stream is not waited for: its events are relayed as they
// come, whatever its length.
func (ex *exchange) prepareBody(ctx *fasthttp.RequestCtx, conn net.Conn, br *bufio.Reader) error {
	out := &ctx.Response.Header
	status := out.StatusCode()
	if err := checkFinal(out); err != nil {
		return err
	}
	if status == fasthttp.StatusSwitchingProtocols {
		// This path carries no upgrade (serveUpgrade does): what follows
		// a 101 is not HTTP, and the client asked for nothing else.
		return errSwitchedProtocols
	}
	ex.status = status
	if b2s(ex.method) == fasthttp.MethodHead || !hasBody(status) {
		return nil
	}
	cl := out.ContentLength()
	if cl >= 0 && cl <= maxInlineBody && cl <= br.Size() && (br.Buffered() >= cl || !isEventStream(out.ContentType())) {
		if br.Buffered() < cl {
			if err := ex.readInline(conn, br, cl, cl); err != nil {
				return err
			}
		}
		ex.inline = cl
		return nil
	}
	if cl > 0 && br.Buffered() == 0 && !isEventStream(out.ContentType()) {
		// A longer body goes out as it comes, but fasthttp writes nothing
		// of the answer before the body's first bytes (its header waits
		// in the write buffer), so waiting for them costs the client
		// nothing: an upstream that breaks off (or stalls) before any
		// gets the client a 502 (504) with its request id, where the
		// client got no answer at all.
		if err := ex.readInline(conn, br, 1, cl); err != nil {
			return err
		}
	}
	if cl == -1 {
		if err := ex.checkFirstChunk(br); err != nil {
			return err
		}
	}
	r := &ex.resp
	r.Header.SetStatusCode(status)
	r.Header.SetContentLength(cl)
	r.StreamBody = true
	return r.ReadBody(br, 0)
}

// readInline reads into br the first want bytes (at most br's size) of a
// response body of cl bytes that did not all come with its header: the
// whole body, or the first byte of a longer one. Each read waits at most
// the read timeout, as a streamed body's do. The client has been sent
// nothing yet, so a body that breaks off (or stalls) here is answered 502
// (504).
func (ex *exchange) readInline(conn net.Conn, br *bufio.Reader, want, cl int) error {
	for br.Buffered() < want {
		if err := ex.setUpstreamReadDeadline(conn, time.Now().Add(ex.opts.UpstreamReadTimeout)); err != nil {
			return err
		}
		if _, err := br.Peek(br.Buffered() + 1); err != nil {
			if ex.canceled {
				return err
			}
			return ex.brokeOff(br.Buffered(), cl, err)
		}
	}
	return nil
}

// brokeOff is the failure of an upstream whose answer's body, of size
// bytes, which the gateway reads whole before it answers (readInline,
// readNetInline), ended after got bytes with err, or stalled (err a
// timeout): the client has been sent nothing of the answer, and gets a
// 502 (504).
func (f *flow) brokeOff(got, size int, err error) error {
	if isTimeout(err) {
		f.timeout = timeoutUpstreamRead
	} else if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%w after %d of %d bytes from %s: %w", errBodyBrokeOff, got, size, f.inst.Addr, err)
}

// checkFinal refuses a final response header that no client may be
// given: a status outside 100..599 (invalidStatus), or a field name that
// is not a token: fasthttp takes a name with a space ("X Y: z"), which RFC
// 9110 section 5.1 does not allow and a client may read otherwise.
func checkFinal(h *fasthttp.ResponseHeader) error {
	if status := h.StatusCode(); !validStatus(status) {
		return invalidStatus(status)
	}
	for k := range h.All() {
		if !httpguts.ValidHeaderFieldName(b2s(k)) {
			return fmt.Errorf("%w: %q", errBadFieldName, k)
		}
	}
	return nil
}

// errBadFieldName is a response header field whose name is not a token.
var errBadFieldName = errors.New("upstream sent an invalid header field name")

// errBodyBrokeOff is an upstream that broke off (or stalled) within a
// response body.
var errBodyBrokeOff = errors.New("upstream response body broke off")

// errInvalidStatus is a response status outside 100..599, which RFC 9110
// section 15 calls invalid: "099" would go out as a two-digit status, and
// a client must take "999" for a server error.
var errInvalidStatus = errors.New("upstream sent invalid status")

// invalidStatus is errInvalidStatus for status, as the upstream wrote it.
func invalidStatus(status int) error { return fmt.Errorf("%w %03d", errInvalidStatus, status) }

// validStatus reports whether status is in 100..599, the range RFC 9110
// section 15 allows; a client must treat any other as a 5xx, so a gateway
// answers 502 for it instead of passing it on.
func validStatus(status int) bool { return status >= 100 && status <= 599 }

// isInterim reports whether a response status is informational, other than
// 101 Switching Protocols, which is final.
func isInterim(status int) bool {
	return status >= 100 && status < 200 && status != fasthttp.StatusSwitchingProtocols
}

// hasBody reports whether a response with this status may have a body
// (RFC 9110 section 6.4.1).
func hasBody(status int) bool {
	return status >= 200 && status != fasthttp.StatusNoContent && status != fasthttp.StatusNotModified
}

// writeError is a failure to send the request found by flushAndWait.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// flusher is what flushAndWait writes the rest of a request with: the
// bufio.Writer that holds it, or a headWriter.
type flusher interface{ Flush() error }

// headWriter writes a bodyless request's head, which the exchange already
// holds whole, straight to the connection: no buffered writer to take from
// a pool and copy the head into.
type headWriter struct {
	conn net.Conn
	head []byte
}

// Flush writes the head.
func (w *headWriter) Flush() error {
	_, err := w.conn.Write(w.head)
	return err
}

// flushAndWait writes out the rest of the request (bw: a buffered writer
// holding it, or the head itself) and waits until the upstream connection
// is readable, under its read deadline. A plain read
// would first try the socket, find nothing (the answer cannot be there yet)
// and only then wait: one failed read system call per request. Here the
// wait is armed (RawConn.Read resets the poller's readiness before calling
// back) before the request is written, so an answer that comes at once is
// not missed, and the read that follows finds it. Bytes that were already
// in the socket before the readiness reset do not wake the wait, and need
// not: an answer only comes after the request, and its arrival wakes the
// wait whatever came before it. Stray bytes or a close that arrived while
// the connection was idle were looked for by peekIdle when it sat for
// long (peekAfter); on a connection taken back sooner, a close makes the
// write fail or the upstream reset the connection, which wakes the wait
// too, and stray bytes are read with the answer. A write error is
// returned as a *writeError; a wait error (the deadline) as it is.
func (ex *exchange) flushAndWait(raw syscall.RawConn, bw flusher) error {
	ex.flushBW, ex.flushed, ex.flushErr = bw, false, nil
	err := raw.Read(ex.flushFn)
	if !ex.flushed {
		// The wait ended before the callback ran (a deadline already
		// past): the request still goes out, and the caller's timeout
		// handling takes over the wait.
		ex.flushErr = bw.Flush()
	}
	werr := ex.flushErr
	ex.flushBW, ex.flushErr = nil, nil
	if werr != nil {
		return &writeError{err: werr}
	}
	return err
}

// flushThenWait is flushAndWait's RawConn read callback. Its first call
// flushes and asks to wait (false) unless the flush failed; the call after
// the wait ends it.
func (ex *exchange) flushThenWait(uintptr) bool {
	if ex.flushed {
		return true
	}
	ex.flushed = true
	ex.flushErr = ex.flushBW.Flush()
	return ex.flushErr != nil
}

// setUpstreamReadDeadline sets the upstream read deadline unless the client
// watcher has already cancelled the exchange, whose past deadline must stay.
func (ex *exchange) setUpstreamReadDeadline(conn net.Conn, t time.Time) error {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.canceled {
		return errClientGone
	}
	return conn.SetReadDeadline(t)
}

// cancel aborts the upstream wait; called by the client watcher.
func (ex *exchange) cancel() {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	ex.canceled = true
	if ex.upConn != nil {
		_ = ex.upConn.SetDeadline(aLongTimeAgo)
	}
}

var aLongTimeAgo = time.Unix(1, 0)

// releaseUpstream closes the upstream body stream and gives the connection
// back: to the pool if the response was read to its end, the upstream did
// not ask to close, and nothing is left over; else it is closed. Bytes left
// in the reader after a complete response (a body on a HEAD, 204 or 304
// answer, or anything else past the framing) are a protocol violation: the
// next request on that connection would read them as its answer.
func (ex *exchange) releaseUpstream(fullyRead bool) {
	if ex.up == nil {
		return
	}
	if ex.resp.IsBodyStream() {
		_ = ex.resp.CloseBodyStream()
	}
	reuse := fullyRead && !ex.upClose && !ex.noReuse
	if reuse && ex.br.Buffered() > 0 {
		ex.p.violation(violationExtraBytes)
		reuse = false
	}
	ex.uc.hc.ReleaseReader(ex.br)
	ex.up.Release(reuse)
	ex.up, ex.br, ex.upBody = nil, nil, nil
}

// The protocol violations an upstream connection is closed for.
const (
	violationExtraBytes      = iota // bytes after a complete response
	violationIdleBytes              // bytes that arrived while the connection was idle
	violationFramingConflict        // a response framed two ways (framingConflict)
	numViolations
)

// ViolationReasons names the protocol violations counted by
// ProtocolViolations, in its order.
var ViolationReasons = [numViolations]string{"extra_bytes_after_response", "bytes_while_idle", "conflicting_framing"}

// violation counts a protocol violation by an upstream.
func (p *Proxy) violation(v int) { p.violations[v].Add(1) }

// ProtocolViolations returns how many upstream connections were closed for
// each protocol violation, in the order of ViolationReasons.
func (p *Proxy) ProtocolViolations() [numViolations]uint64 {
	var out [numViolations]uint64
	for i := range out {
		out[i] = p.violations[i].Load()
	}
	return out
}

// errStrayBytes: a pooled upstream connection received bytes while idle.
var errStrayBytes = errors.New("upstream sent bytes on an idle connection")

// errIdleClosed: a pooled upstream connection was closed while idle.
var errIdleClosed = errors.New("upstream closed the idle connection")

// safeMethod reports whether a request may be sent twice (RFC 9110 section
// 9.2.1), for the stale-connection retry.
func safeMethod(m []byte) bool {
	switch b2s(m) {
	case fasthttp.MethodGet, fasthttp.MethodHead, fasthttp.MethodOptions, fasthttp.MethodTrace:
		return true
	}
	return false
}

// idempotentMethod reports whether sending a request twice has the effect
// of sending it once (RFC 9110 section 9.2.2): the safe methods, PUT and
// DELETE. Only those are replayed on stable after the request may have
// reached the gray target.
func idempotentMethod(m []byte) bool {
	switch b2s(m) {
	case fasthttp.MethodPut, fasthttp.MethodDelete:
		return true
	}
	return safeMethod(m)
}

// interruptedRead reports whether a read of the client's body failed on
// its deadline: a timeout, or fasthttp's chunked reader's ErrBrokenChunk,
// which is what a timeout becomes when it ends the read of a chunk-size
// line (its wrapped error cannot be reached), unless the listener's guard
// found the client's framing malformed.
func interruptedRead(ctx *fasthttp.RequestCtx, err error) bool {
	var brk fasthttp.ErrBrokenChunk
	return isTimeout(err) || errors.As(err, &brk) && bodyRefused(ctx) == nil
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

func isConnReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, fasthttp.ErrConnectionClosed)
}
