package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"

	"golang.org/x/net/http2"

	"github.com/graygate/graygate/internal/upstream"
)

// The net/http upstream transports. The HTTP/2 codec forwards every
// request through one of them, whatever the upstream speaks, but for a
// request without a body to an http1 pool (h2h1.go), and the HTTP/1.1
// codec forwards to h2 and h2c pools through them:
//
//   - h2c: an http2.Transport with prior knowledge over plain TCP, one
//     for every h2c pool;
//   - h2: an http2.Transport over TLS, one per TLS setting (a pool's
//     ca_file and server_name), shared by the pools that have the same;
//   - http1, for HTTP/2 clients' requests with a body: a net/http
//     Transport limited to HTTP/1.1 (https:// instances with
//     Options.UpstreamTLS). Those without one go over the HTTP/1.1
//     codec's own pooled connections instead (h2h1.go).
//
// Why net/http's Transport and not the fasthttp-based one the HTTP/1.1
// codec drives for http1 pools: that transport reads the upstream's
// answer straight into the client's fasthttp response (readResponse),
// watches the client's TCP socket while it waits, and frames the request
// from the client's HTTP/1.1 header, which is what makes the HTTP/1.1
// path cost no allocation; none of those hold for an HTTP/2 stream, whose
// response is a net/http ResponseWriter. net/http's Transport gives the
// HTTP/2 codec the same guarantees on net/http's own types (streaming both
// ways, trailers, 100-continue, pooled connections), so the HTTP/2 codec
// has one forwarding path for every upstream protocol, with one shortcut:
// a request without a body to an http1 pool has none of those needs, and
// goes on the HTTP/1.1 codec's pooled connections, written and read with
// net/http's Request.Write and ReadResponse on the stream's goroutine
// (h2h1.go), which saves the Transport's goroutine hand-offs. What stays one is
// the policy around it (policy.go), and the dialer: every transport dials
// through Proxy.dial, so a failure to connect is a dialError and counts,
// for the fallback, as nothing sent.
//
// A transport is made on first use and kept while requests ask for it:
// pools come and go with reloads (an h2 pool's TLS setting, its CA file's
// contents included, is a new key each time it changes), and the proxy
// sees pools only through its decisions, so at every reload it drops the
// transports no request asked for since the previous reload (prune). A
// key no pool has any more is gone at the second reload after its last
// use at the latest, and its idle connections meanwhile close after
// IdleConnTimeout, as any; a pool of the running config that had no
// request for a whole reload interval gets a new transport when it next
// has one, which costs it at most a new connection.
type netTransports struct {
	mu sync.Mutex
	m  map[netKey]*netEntry
	// gen counts the reloads; an entry notes the one it was last asked
	// for in.
	gen uint64
}

type netEntry struct {
	t    netTransport
	used uint64
}

type netKey struct {
	proto  upstream.Protocol
	tlsKey string
}

// netTransport is a RoundTripper that can drop its idle connections.
type netTransport interface {
	http.RoundTripper
	CloseIdleConnections()
}

// netTransport returns the transport for pool, made on first use.
func (p *Proxy) netTransport(pool *upstream.Pool) netTransport {
	k := netKey{proto: pool.Protocol}
	if pool.Protocol == upstream.H2 {
		k.tlsKey = pool.TLSKey
	}
	p.nets.mu.Lock()
	defer p.nets.mu.Unlock()
	if e, ok := p.nets.m[k]; ok {
		e.used = p.nets.gen
		return e.t
	}
	if p.nets.m == nil {
		p.nets.m = map[netKey]*netEntry{}
	}
	t := p.newNetTransport(pool)
	p.nets.m[k] = &netEntry{t: t, used: p.nets.gen}
	return t
}

func (p *Proxy) newNetTransport(pool *upstream.Pool) netTransport {
	o := p.opts.Load()
	switch pool.Protocol {
	case upstream.H2C:
		return &http2.Transport{
			AllowHTTP:          true,
			DisableCompression: true,
			DialTLSContext: func(ctx context.Context, _, addr string, _ *tls.Config) (net.Conn, error) {
				return p.dialContext(ctx, addr, nil)
			},
			MaxHeaderListSize: uint32(o.MaxResponseHeaderBytes),
			IdleConnTimeout:   o.IdleConnTimeout,
			ReadIdleTimeout:   30 * time.Second,
			PingTimeout:       15 * time.Second,
			WriteByteTimeout:  o.UpstreamWriteTimeout,
		}
	case upstream.H2:
		return &http2.Transport{
			DisableCompression: true,
			DialTLSContext: func(ctx context.Context, _, addr string, _ *tls.Config) (net.Conn, error) {
				return p.dialContext(ctx, addr, h2TLS(pool.TLS, addr))
			},
			MaxHeaderListSize: uint32(o.MaxResponseHeaderBytes),
			IdleConnTimeout:   o.IdleConnTimeout,
			ReadIdleTimeout:   30 * time.Second,
			PingTimeout:       15 * time.Second,
			WriteByteTimeout:  o.UpstreamWriteTimeout,
		}
	}
	maxConns := o.MaxConnsPerHost
	if maxConns <= 0 {
		maxConns = 512 // fasthttp's default, as for the HTTP/1.1 codec
	}
	// Every connection looks at the response heads (headConn).
	headLimit := o.MaxResponseHeaderBytes + 4096
	watched := func(c net.Conn, err error) (net.Conn, error) {
		if err != nil {
			return nil, err
		}
		return &headConn{Conn: c, max: headLimit}, nil
	}
	return &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return watched(p.dialContext(ctx, addr, nil))
		},
		DialTLSContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return watched(p.dialContext(ctx, addr, p.tlsConfigFor(addr)))
		},
		MaxConnsPerHost:        maxConns,
		MaxIdleConnsPerHost:    maxConns,
		IdleConnTimeout:        o.IdleConnTimeout,
		ExpectContinueTimeout:  o.ExpectContinueTimeout,
		MaxResponseHeaderBytes: int64(o.MaxResponseHeaderBytes),
		// The client's Accept-Encoding goes up as it is, and the body
		// comes back as the upstream sent it.
		DisableCompression: true,
		// HTTP/1.1 only: an https instance of an http1 pool is HTTP/1.1.
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
}

// h2TLS is the TLS configuration of a connection to an h2 instance at
// addr: the pool's (CA, server name), or the system roots, with the
// instance's host as the server name unless the pool names one, and
// ALPN h2.
func h2TLS(c *tls.Config, addr string) *tls.Config {
	if c == nil {
		c = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	c = c.Clone()
	if c.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			c.ServerName = host
		}
	}
	c.NextProtos = []string{http2.NextProtoTLS}
	return c
}

// dialContext is Proxy.dial under a context: a canceled request stops
// waiting for its connection.
func (p *Proxy) dialContext(ctx context.Context, addr string, tlsConf *tls.Config) (net.Conn, error) {
	timeout := p.opts.Load().DialTimeout
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &dialError{addr: addr, err: err}
	}
	if tlsConf == nil {
		return c, nil
	}
	tc := tls.Client(c, tlsConf)
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		_ = c.Close()
		return nil, &dialError{addr: addr, err: fmt.Errorf("tls handshake: %w", err)}
	}
	return tc, nil
}

// closeNetTransports drops every net/http transport's idle connections,
// and with forget the transports themselves (their options changed).
func (p *Proxy) closeNetTransports(forget bool) {
	p.nets.mu.Lock()
	m := p.nets.m
	if forget {
		p.nets.m = nil
	}
	p.nets.mu.Unlock()
	for _, e := range m {
		e.t.CloseIdleConnections()
	}
}

// pruneNetTransports is a reload's sweep (see netTransports): it drops
// the transports no request asked for since the previous reload, and
// their idle connections. A request still in flight on one keeps it,
// and its connection closes once idle (IdleConnTimeout).
func (p *Proxy) pruneNetTransports() {
	var gone []netTransport
	p.nets.mu.Lock()
	for k, e := range p.nets.m {
		if e.used < p.nets.gen {
			delete(p.nets.m, k)
			gone = append(gone, e.t)
		}
	}
	p.nets.gen++
	p.nets.mu.Unlock()
	for _, t := range gone {
		t.CloseIdleConnections()
	}
}

// errHeaderTimeout cancels a net/http round trip whose response header
// did not come within the route's timeout.
var errHeaderTimeout = &timeoutError{"timed out waiting for the response header"}

// timeoutError is a timeout that classify maps to 504.
type timeoutError struct{ msg string }

func (e *timeoutError) Error() string { return e.msg }
func (e *timeoutError) Timeout() bool { return true }

// netCall is one attempt through a net/http transport: the request's
// context, and the timer that bounds the wait for the response header.
// The timer starts once the request body has been read to its end (or at
// once without one), as for the HTTP/1.1 transport, so an upload or a
// client-streaming call is not cut while it sends. A gRPC call's deadline
// is not that timer's: it runs from the call's start (newNetCallUntil).
type netCall struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	timer  *time.Timer
	limit  time.Duration
	done   bool
	// unbound stops the deadline's timer (newNetCallUntil), nil without.
	unbound context.CancelFunc
	// deadline is the call's own (newNetCallUntil; zero: none).
	deadline time.Time
}

func newNetCall(parent context.Context, headerTimeout time.Duration) *netCall {
	ctx, cancel := context.WithCancelCause(parent)
	return &netCall{ctx: ctx, cancel: cancel, limit: headerTimeout}
}

// newNetCallUntil is newNetCall for a call that ends at deadline (zero:
// none), a gRPC call's grpc-timeout, which gRPC makes the whole call's
// deadline: once it passes, the call's context ends with errCallDeadline
// whatever the call waits for, the response header, the client's next
// message or the upstream's, and the transport cancels the upstream's
// stream.
func newNetCallUntil(parent context.Context, headerTimeout time.Duration, deadline time.Time) *netCall {
	if deadline.IsZero() {
		return newNetCall(parent, headerTimeout)
	}
	bounded, unbound := context.WithDeadlineCause(parent, deadline, errCallDeadline)
	c := newNetCall(bounded, headerTimeout)
	c.unbound, c.deadline = unbound, deadline
	return c
}

// deadlinePassed reports whether the call ended by its deadline: its
// context ended so, or the deadline has passed though its timer has not
// fired yet. The upstream was sent the same grpc-timeout, and counts it
// from when the request reached it, so when it ends the call for it (a
// gRPC server resets the stream, CANCEL) the gateway's deadline has
// passed too; under load its timer can still be pending, and that reset
// was taken for the upstream's failure (CANCELLED, "upstream failed"),
// where the client must be told DEADLINE_EXCEEDED (found by
// TestGRPCDeadlinesAndCancel in a fresh-clone CI run).
func (c *netCall) deadlinePassed() bool {
	if errors.Is(context.Cause(c.ctx), errCallDeadline) {
		return true
	}
	return !c.deadline.IsZero() && !time.Now().Before(c.deadline)
}

// errCallDeadline ends a gRPC call whose deadline (grpc-timeout) passed:
// a timeout (504) that a gRPC client is told as DEADLINE_EXCEEDED.
var errCallDeadline = &timeoutError{"the call's deadline (grpc-timeout) passed"}

// errDeadlineSending marks errCallDeadline before the response header
// while the client was still sending its request: the upstream may have
// been waiting for the rest, so the breaker does not count it (as a slow
// upload is not counted as a slow upstream).
var errDeadlineSending = errors.New("while the client was still sending")

// arm starts the header timer, once.
func (c *netCall) arm() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil || c.done || c.limit <= 0 {
		return
	}
	c.timer = time.AfterFunc(c.limit, func() { c.cancel(errHeaderTimeout) })
}

// answered stops the header timer: the response header came.
func (c *netCall) answered() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	if c.timer != nil {
		c.timer.Stop()
	}
}

// rearm restarts the header timer if it runs: an interim response went to
// the client, and the final one is waited for a whole timeout from now,
// as the HTTP/1.1 transport does (writeHijacked).
func (c *netCall) rearm() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil && !c.done {
		c.timer.Reset(c.limit)
	}
}

// end cancels what is left of the call.
func (c *netCall) end() {
	c.answered()
	c.cancel(context.Canceled)
	if c.unbound != nil {
		c.unbound()
	}
}

// netAttempt is one attempt through a net/http transport, whichever codec
// makes it (stream.forward for HTTP/2 clients, forwardNet for HTTP/1.1
// clients of h2 and h2c pools): its call, the body the transport reads,
// and, toward an h2 or h2c pool, the requests the HTTP/2 transport made
// for it. Its hooks (gotConn, getBody) and refused are the one policy for
// a stream an instance refused unprocessed (REFUSED_STREAM, or a GOAWAY
// that left it out). The transport asks again, on the same instance, for
// as long as the server refuses (up to seven times, backing off from 1 s
// to 32 s after the second), so an instance that sheds load or drains
// would hold the request until the header timeout: one immediate retry
// covers a connection that was going away, and the attempt ends after
// it, the request being one that was never processed (README: a stream
// the server refused unread goes to stable). The hooks run on the
// goroutine that called RoundTrip.
type netAttempt struct {
	call *netCall
	// body is the client's body as the transport streams it; held is a
	// body the gateway holds whole (buffered at admit). At most one is set.
	body *upBody
	held []byte
	// loan is the loan held is lent under, when it is the flow's
	// buffer (bodyLoan).
	loan *bodyLoan
	// h2: the pool speaks HTTP/2, whose transport retries refused streams.
	h2 bool
	// asked counts the requests the HTTP/2 transport made (refusedTwice).
	asked int
	// conn is, toward an http1 pool, the connection the Transport sent
	// the request on last (gotH1Conn).
	conn *headConn
}

// holding returns b, a body held whole, as netAttempt.held: never nil.
func holding(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// errRefusedTwice ends an attempt on an HTTP/2 upstream that refused the
// request unprocessed twice in a row (REFUSED_STREAM, or a GOAWAY that
// left it out).
var errRefusedTwice = errors.New("upstream refused the stream unprocessed, twice")

// trace returns ctx with the attempt's hook (toward an h2 or h2c pool)
// added to t, whose Got1xxResponse the caller may have set.
func (a *netAttempt) trace(ctx context.Context, t *httptrace.ClientTrace) context.Context {
	if a.h2 {
		t.GotConn = a.gotConn
	} else {
		t.GotConn = a.gotH1Conn
	}
	if t.GotConn == nil && t.Got1xxResponse == nil {
		return ctx
	}
	return httptrace.WithClientTrace(ctx, t)
}

// refusedTwice counts a request the HTTP/2 transport makes for the
// attempt, and reports whether two were refused before it.
func (a *netAttempt) refusedTwice() bool {
	a.asked++
	return a.asked > 2
}

// gotConn is the HTTP/2 transport's trace of each request it makes for
// the attempt. The transport retries a request without a body without
// asking getBody, and the third time after a back-off of a second: that
// third request cancels the attempt, though it may already be on its way.
func (a *netAttempt) gotConn(httptrace.GotConnInfo) {
	if a.refusedTwice() {
		a.call.cancel(errRefusedTwice)
	}
}

// gotH1Conn is the http1 Transport's trace of the connection it sends the
// request on (each time it does: it may try another), before it writes
// it: the connection looks at the answer's head, and gives up a read of
// the body should it close first (headConn).
func (a *netAttempt) gotH1Conn(info httptrace.GotConnInfo) {
	if c, ok := info.Conn.(*headConn); ok {
		c.arm(a.body)
		a.conn = c
	}
}

// getBody is the upstream request's GetBody, which a transport calls to
// send a request again on another connection (http2.Transport after the
// server refused it unprocessed: GOAWAY, REFUSED_STREAM): the held body,
// or the streamed one if it can be sent again. Toward an h2 or h2c pool
// the second call ends the attempt (refusedTwice): the transport calls it
// before it backs off.
func (a *netAttempt) getBody() (io.ReadCloser, error) {
	if a.h2 && a.asked >= 2 {
		return nil, errRefusedTwice
	}
	if a.held != nil {
		return a.loan.lend(a.held, a.call), nil
	}
	if b := a.body; b != nil {
		if r, ok := b.replay(b.call); ok {
			if ub, ok := r.(*upBody); ok {
				a.body = ub
			}
			return r, nil
		}
		if a.h2 {
			// The HTTP/2 transport asks only for a request the server
			// did not process, once it is done with the body it read.
			if r, ok := resumeBody(b, b.call); ok {
				a.body = r.(*upBody)
				return r, nil
			}
		}
	}
	return nil, errors.New("graygate: the request body was streamed and cannot be sent again")
}

// refused maps the failure of a round trip (rtErr, which netError made
// err) on an h2 or h2c pool that refused the request twice unprocessed:
// refused by getBody, nothing of the request was processed, and it may go
// to stable as one that could not be sent (fallBackOK); cancelled by
// gotConn, the third request may have gone out, and only an idempotent
// one goes to stable. unsent reports the first case. A failure of the
// client's, or any other, is left as it is.
func (f *flow) refused(a *netAttempt, rtErr, err error) (_ error, unsent bool) {
	if !a.h2 {
		return err, false
	}
	unsent = errors.Is(rtErr, errRefusedTwice)
	if (!unsent && !errors.Is(context.Cause(a.call.ctx), errRefusedTwice)) || f.clientErr != nil || f.tooLarge || f.canceled {
		return err, false
	}
	f.sent = !unsent
	return fmt.Errorf("sending request to %s: %w", f.inst.Addr, errRefusedTwice), unsent
}

// upBody is the client's request body as a net/http transport reads it,
// on the transport's goroutine. It counts the body against the route's
// limit and its declared size (bodyCount, the same accounting reqBody
// does for the HTTP/1.1 codec), keeps what it read while that fits in
// the replay limit, starts the call's header timer at the end of the
// body, and never closes the client's body: a transport closes the bodies
// it is given, and a replay on stable reads on. The request's goroutine
// reads its state through collect, under mu.
//
// Neither transport lets a failed round trip return while its writer is
// in a read of the body. The HTTP/2 transport, when the upstream resets a
// stream before it answers (REFUSED_STREAM, or any other code), closes
// the body and then waits for that read; net/http's HTTP/1 Transport,
// when the upstream closes or resets the connection before it answers,
// waits for its write loop (persistConn.mapRoundTripError) without
// closing the body at all. A client that waits for an answer before it
// sends more (a bidirectional call, a paused upload) would hold that
// read, and the call, until its deadline. So the body reads a source
// whose reads can be given up (aheadReader: readAhead, which both codecs
// make of the client's body) and gives the read up when the transport
// closes it (Close) or the connection it is sent on closes (connClosed,
// from headConn): what the read brings then stays with the source, for
// the next attempt or the fallback. So it does when the call's context
// ends (a deadline, the read timeout, the call over): the HTTP/2
// transport looks at the context only between its reads of the body
// once it has the response header, so a call whose answer streams while
// the client sends nothing would not end.
type upBody struct {
	mu      sync.Mutex
	cond    *sync.Cond // signalled when a read of src returns
	reading bool       // a read of src is under way
	stopped bool       // stop was called: src is not read any more
	closed  bool       // the transport closed the body: it reads no more
	gone    bool       // the connection the body was sent on closed
	// abort, closed by Close, connClosed or stop, gives up a read of an
	// aheadReader src under way.
	abort chan struct{}
	src   io.Reader
	count bodyCount
	held  []byte // what was read, while it fits in keep
	keep  int
	over  bool // more was read than keep
	read  bool // anything was asked of src
	eof   bool
	call  *netCall
	// onEnd runs when the body has been read to its end.
	onEnd func()
}

func (b *upBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	switch {
	case b.eof:
		b.mu.Unlock()
		return 0, io.EOF
	case b.gone:
		b.mu.Unlock()
		return 0, errUpstreamClosed
	case b.stopped, b.closed:
		b.mu.Unlock()
		return 0, errBodyStopped
	}
	b.read, b.reading = true, true
	ar, _ := b.src.(aheadReader)
	var abort chan struct{}
	var done <-chan struct{}
	if ar != nil {
		if b.abort == nil {
			b.abort = make(chan struct{})
		}
		abort = b.abort
		if b.call != nil {
			done = b.call.ctx.Done()
		}
	}
	b.mu.Unlock()
	var n int
	var err error
	if ar != nil {
		n, err = ar.readAbort(p, abort, done)
	} else {
		n, err = b.src.Read(p)
	}
	b.mu.Lock()
	b.reading = false
	if b.cond != nil {
		b.cond.Broadcast()
	}
	if ar != nil && err == errBodyStopped {
		// Given up: nothing was read, and it is neither the client's
		// failure nor the body's end.
		if b.gone {
			err = errUpstreamClosed
		}
		b.mu.Unlock()
		return 0, err
	}
	n, err = b.count.add(n, err)
	if !b.over {
		if len(b.held)+n <= b.keep {
			b.held = append(b.held, p[:n]...)
		} else {
			b.over, b.held = true, b.held[:0]
		}
	}
	if err == io.EOF {
		b.eof = true
	}
	call, onEnd := b.call, b.onEnd
	b.mu.Unlock()
	if err == io.EOF {
		if onEnd != nil {
			onEnd()
		}
		if call != nil {
			call.arm()
		}
	}
	return n, err
}

// Close is the transport's: it is done with the body, and a read under
// way on a source that can give it up returns at once (see upBody). It
// does not close the client's body, which another attempt may read on.
func (b *upBody) Close() error {
	b.mu.Lock()
	b.closed = true
	b.giveUp()
	b.mu.Unlock()
	return nil
}

// connClosed is told by the http1 Transport's connection (headConn) that
// it closed while it carried b: a read under way is given up, and it and
// any later one fail with errUpstreamClosed, which net/http's Transport
// then returns (an error reading the body outranks the connection's).
func (b *upBody) connClosed() {
	b.mu.Lock()
	if !b.eof {
		b.gone = true
	}
	b.giveUp()
	b.mu.Unlock()
}

// errUpstreamClosed fails the round trip of a request whose upstream
// connection closed while the body was still being sent, and before an
// answer came (connClosed).
var errUpstreamClosed = errors.New("upstream connection closed while the request body was being sent")

// giveUp ends a read of src under way that can be given up; under mu.
func (b *upBody) giveUp() {
	if b.abort != nil {
		close(b.abort)
		b.abort = nil
	}
}

// aheadReader is a body source whose reads can be given up without losing
// what they bring (readAhead): readAbort returns errBodyStopped once
// abort or done is closed, and the bytes its read gets later go to the
// next read; unread puts bytes back before what is left.
type aheadReader interface {
	io.Reader
	readAbort(p []byte, abort, done <-chan struct{}) (int, error)
	unread(p []byte)
}

// readAhead is a client's request body read for net/http transports: a
// read that may be given up (readAbort, upBody's) runs on a goroutine of
// its own, into a buffer of the body's, and its bytes wait in ahead for
// the next read, whichever attempt makes it. Other reads (admit's
// buffering, the HTTP/1.1 transport's after a fallback) are made on the
// caller's goroutine, after what waits in ahead. The HTTP/2 codec makes
// one of every client body (clientBody), the HTTP/1.1 codec of a
// streamed body it sends to an h2 or h2c pool (exchange.aheadBody).
type readAhead struct {
	src io.Reader
	// wake unblocks a read of src under way, for settle: nil when src
	// may be read after its request ended (an HTTP/2 stream's body fails
	// its reads then).
	wake func()
	// Under mu: what was read ahead or given back (unread) and not yet
	// handed out, then the error that ended the body, the read under way
	// on its own goroutine (closed when it returns) and its buffer.
	mu      sync.Mutex
	ahead   []byte
	err     error
	reading chan struct{}
	buf     *[aheadBufSize]byte
}

// aheadBufSize is the buffer of a read readAhead runs on its own
// goroutine: a default HTTP/2 frame, which is what the HTTP/2 transport
// asks for at a time.
const aheadBufSize = 16 << 10

// aheadBufs pools those buffers; a body gives its own back once it has
// ended and handed out all it read.
var aheadBufs = sync.Pool{New: func() any { return new([aheadBufSize]byte) }}

func (a *readAhead) Read(p []byte) (int, error) { return a.readAbort(p, nil, nil) }

// readAbort reads into p what waits in ahead, or else src. With abort,
// the read runs on a goroutine of its own, and once abort or done is
// closed readAbort returns errBodyStopped without waiting for it: its
// bytes are kept for the next read. Without, a read already under way is
// waited for, and a new one is made on the caller's goroutine.
func (a *readAhead) readAbort(p []byte, abort, done <-chan struct{}) (int, error) {
	a.mu.Lock()
	for {
		if len(a.ahead) > 0 {
			n := copy(p, a.ahead)
			if a.ahead = a.ahead[n:]; len(a.ahead) == 0 {
				a.ahead = nil
				a.dropBuf()
			}
			a.mu.Unlock()
			return n, nil
		}
		if err := a.err; err != nil {
			a.dropBuf()
			a.mu.Unlock()
			return 0, err
		}
		if a.reading == nil {
			if abort == nil {
				a.mu.Unlock()
				return a.src.Read(p)
			}
			if isClosed(abort) || isClosed(done) {
				// No read to start for a body given up already.
				a.mu.Unlock()
				return 0, errBodyStopped
			}
			if a.buf == nil {
				a.buf = aheadBufs.Get().(*[aheadBufSize]byte)
			}
			a.reading = make(chan struct{})
			go a.fill(a.buf[:], a.reading)
		}
		reading := a.reading
		a.mu.Unlock()
		select {
		case <-reading:
		case <-abort:
			return 0, errBodyStopped
		case <-done:
			return 0, errBodyStopped
		}
		a.mu.Lock()
	}
}

// isClosed reports whether c is closed (nil: never).
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// fill is a read of readAbort's on its own goroutine. It starts only when
// nothing waits in ahead, so buf is not handed out meanwhile; something
// given back meanwhile goes first.
func (a *readAhead) fill(buf []byte, done chan struct{}) {
	n, err := a.src.Read(buf)
	a.mu.Lock()
	switch {
	case n == 0:
	case a.ahead == nil:
		a.ahead = buf[:n]
	default:
		a.ahead = append(a.ahead[:len(a.ahead):len(a.ahead)], buf[:n]...)
	}
	a.err = err
	a.reading = nil
	close(done)
	a.mu.Unlock()
}

// dropBuf gives the read-ahead buffer back once the body has ended and
// nothing in ahead is in it; under mu.
func (a *readAhead) dropBuf() {
	if a.buf != nil && a.err != nil && a.reading == nil && len(a.ahead) == 0 {
		aheadBufs.Put(a.buf)
		a.buf = nil
	}
}

// unread puts p, which the caller gives up, back before what waits in
// ahead.
func (a *readAhead) unread(p []byte) {
	if len(p) == 0 {
		return
	}
	a.mu.Lock()
	a.ahead = append(p[:len(p):len(p)], a.ahead...)
	a.mu.Unlock()
}

// settle ends a read given up that still waits on src (wake), and waits
// for it, so that nothing reads src once it returns: the HTTP/1.1 codec
// calls it as its exchange ends, before fasthttp reads the connection
// again. Nothing may read a afterwards.
func (a *readAhead) settle() {
	if a.wake == nil {
		return
	}
	a.mu.Lock()
	reading := a.reading
	a.mu.Unlock()
	if reading == nil {
		return
	}
	// A read that has not reached the connection yet when the deadline
	// is set arms its own, later one: wake again until it returns.
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		a.wake()
		select {
		case <-reading:
			return
		case <-t.C:
		}
	}
}

// errBodyStopped ends the reads of a body whose request is over.
var errBodyStopped = errors.New("graygate: the request is over")

// stop ends the transport's reads of the body: no read of src starts
// after it, and one of an aheadReader under way is given up. With wait,
// it also waits for that read to return, which giving it up makes
// prompt: then b hands out nothing more of what src holds (the HTTP/1.1
// codec's may begin with the flow's buffer, reqBody.pre), and the codec
// may reuse it. A read the source itself runs ahead may still wait on
// the client's connection; readAhead.settle ends it. wait needs an
// aheadReader src, whose reads never wait on the client themselves.
func (b *upBody) stop(wait bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = true
	b.giveUp()
	if !wait || !b.reading {
		return
	}
	if b.cond == nil {
		b.cond = sync.NewCond(&b.mu)
	}
	for b.reading {
		b.cond.Wait()
	}
}

// unread takes, for another attempt, what b read of a body that an
// attempt the upstream did not process read only in part: the bytes it
// holds, which the next attempt sends before what is left of b's source.
// It fails when b does not hold all it read (over the replay limit), or
// its source failed or is being read. b is not read any more afterwards.
// Only a transport that is done with b may ask: the HTTP/2 transport's
// retry (getBody), or the codec once the attempt failed.
func (b *upBody) unread() ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.over || b.reading || b.stopped || b.count.err != nil || b.count.tooLarge {
		return nil, false
	}
	b.stopped = true
	return append([]byte(nil), b.held...), true
}

// resumeBody returns, for another attempt, b's body resumed (unread): what
// b holds, then what is left of its source, counted as b counts.
func resumeBody(b *upBody, call *netCall) (io.ReadCloser, bool) {
	held, ok := b.unread()
	if !ok {
		return nil, false
	}
	src := b.src
	if ar, ok := src.(aheadReader); ok {
		// Before what a read given up brought, which came after held.
		ar.unread(held)
	} else {
		src = io.MultiReader(newBytesReader(held), src)
	}
	return b.again(src, call), true
}

// again returns a body for another attempt that reads src, as b does.
func (b *upBody) again(src io.Reader, call *netCall) *upBody {
	return &upBody{src: src, call: call, keep: b.keep, onEnd: b.onEnd,
		count: bodyCount{size: b.count.size, max: b.count.max}}
}

// untouched reports whether nothing was asked of b's source, so that
// another attempt may read it from its start; a nil b (no streamed body)
// is untouched too.
func (b *upBody) untouched() bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.read
}

// ended reports whether the body was read to its end.
func (b *upBody) ended() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof
}

// replay returns the body for another attempt, or false when it cannot be
// sent again: nothing of it was read (a new body reads the same source: a
// transport may have closed b), or it was read to its end and is held
// whole.
func (b *upBody) replay(call *netCall) (io.ReadCloser, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !b.read:
		b.stopped = true
		return b.again(b.src, call), true
	case b.eof && !b.over:
		return &heldBody{r: bytes.NewReader(b.held), call: call}, true
	}
	return nil, false
}

// collect copies what the transport's reads found into the flow: a body
// over the limit, or a client that failed while it was read.
func (b *upBody) collect(f *flow) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.count.tooLarge {
		f.tooLarge = true
	}
	if b.count.err != nil && f.clientErr == nil {
		f.clientErr = b.count.err
	}
}

func newBytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// heldBody is a request body a transport reads from memory: the body
// the flow buffered at admit (lent from its pooled buffer, see bodyLoan),
// or what an attempt's upBody kept of a body it read whole (memory of its
// own, loan nil).
type heldBody struct {
	r    *bytes.Reader
	call *netCall
	// loan is set when r reads the flow's pooled buffer. Then Read and
	// Close run under loan.mu, and back and closed are kept under it.
	loan   *bodyLoan
	back   bool // counted as given back to the loan
	closed bool
}

func (h *heldBody) Read(p []byte) (int, error) {
	var n int
	var err error
	if l := h.loan; l != nil {
		l.mu.Lock()
		if h.closed {
			l.mu.Unlock()
			return 0, errBodyStopped
		}
		n, err = h.r.Read(p)
		if h.r.Len() == 0 {
			// A bytes.Reader at its end reads no byte of the buffer
			// again.
			h.giveBack()
		}
		l.mu.Unlock()
	} else {
		n, err = h.r.Read(p)
	}
	if err == io.EOF && h.call != nil {
		h.call.arm()
	}
	return n, err
}

// Close ends the reads: a transport calls it once it is done with the
// body, possibly from another goroutine than the one that reads it, and
// a read after it gets errBodyStopped.
func (h *heldBody) Close() error {
	if l := h.loan; l != nil {
		l.mu.Lock()
		h.closed = true
		h.giveBack()
		l.mu.Unlock()
	}
	return nil
}

// giveBack counts h as given back to its loan, once; under loan.mu.
func (h *heldBody) giveBack() {
	if !h.back {
		h.back = true
		h.loan.out--
	}
}

// bodyLoan is the flow's buffered request body (flow.body, filled at
// admit and pooled with the flow) while net/http transports may read it.
// A transport reads a request body on a goroutine of its own, and may go
// on after RoundTrip has returned (http.RoundTripper allows it; it must
// only close the body at some point): the HTTP/2 transport's body writer
// runs until it notices that the stream is over, so when an upstream
// answers before it has read an upload, the answer is relayed and the
// request ends while the writer is still copying the body, and it closes
// the body from yet another goroutine. The next request that takes the
// pooled buffer must not fill it then: the writer would read it unordered
// with that, a data race (TestEarlyAnswerBodyNotReused shows it on an h2c
// pool; the HTTP/2 writer then drops what it read, but net/http's HTTP/1
// write loop, which checks nothing between its reads and its writes,
// would send the next request's bytes as this one's body if it read them
// before its connection was closed). Waiting for the transport to let go
// of the body could
// hold the request for as long as the upstream takes to read its socket
// (up to UpstreamWriteTimeout); instead each reader lent the buffer
// (heldBody) counts as given back once it has been read to its end or
// closed, both under mu, after which it touches the buffer no more, and
// resetFlow pools the buffer again only if every reader was given back.
// Otherwise the buffer is left to the transport (and the garbage
// collector), and the next request that buffers a body allocates one: a
// cost only an early answer pays.
type bodyLoan struct {
	mu  sync.Mutex
	out int // readers lent and not given back
}

// lend returns a reader of b, which is the flow's buffer, for a
// transport, counted by the loan (l nil: b is memory of the caller's
// own, and not counted).
func (l *bodyLoan) lend(b []byte, call *netCall) *heldBody {
	h := &heldBody{r: newBytesReader(b), call: call, loan: l}
	if l == nil {
		return h
	}
	l.mu.Lock()
	if len(b) == 0 {
		h.back = true // nothing to read
	} else {
		l.out++
	}
	l.mu.Unlock()
	return h
}

// settled reports whether every reader lent was given back.
func (l *bodyLoan) settled() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.out == 0
}

// loanBody returns the loan under which f.body is lent to a transport,
// made on first use: it is kept with the flow for as long as it settles,
// and resetFlow looks at it only after a request that lent the body.
func (f *flow) loanBody() *bodyLoan {
	if f.loan == nil {
		f.loan = &bodyLoan{}
	}
	f.lent = true
	return f.loan
}

// bodyCount accounts for a request body as it streams: bytes against
// Policy.MaxBodyBytes (past it the read fails with errBodyTooLarge, and
// the client gets 413) and against the declared size (an end before it
// is the client breaking off: io.ErrUnexpectedEOF). It records the
// client's read failure.
type bodyCount struct {
	size     int64 // declared length, or -1
	n        int64
	max      int64 // 0: no limit
	tooLarge bool
	err      error
}

func (c *bodyCount) add(n int, err error) (int, error) {
	c.n += int64(n)
	switch {
	case c.max > 0 && c.n > c.max:
		c.tooLarge = true
		return 0, errBodyTooLarge
	case err == io.EOF && c.size >= 0 && c.n < c.size:
		c.err = io.ErrUnexpectedEOF
		return n, io.ErrUnexpectedEOF
	case err != nil && err != io.EOF:
		c.err = err
	}
	return n, err
}

// netIn is a net/http request header as the policy reads it (inHeader).
// Its values alias the header; PeekAll reuses one slice.
type netIn struct {
	h    http.Header
	vals [][]byte
}

func (n *netIn) Peek(key string) []byte {
	if v := n.h.Get(key); v != "" {
		return s2b(v)
	}
	return nil
}

func (n *netIn) PeekAll(key string) [][]byte {
	n.vals = n.vals[:0]
	for _, v := range n.h.Values(key) {
		n.vals = append(n.vals, s2b(v))
	}
	return n.vals
}

// netOut is a net/http header as the policy edits and fills it (fields,
// fieldSink). Added values are copied.
type netOut struct{ h http.Header }

func (n *netOut) Peek(key string) []byte {
	if vs := n.h.Values(key); len(vs) > 0 {
		return s2b(vs[0])
	}
	return nil
}

func (n *netOut) AddBytesKV(k, v []byte) { n.h.Add(string(k), string(v)) }
func (n *netOut) addField(k, v []byte)   { n.h.Add(string(k), string(v)) }

// netConnTokens sets f.tokens to the field names h's Connection fields
// list, for dropResponseField and keepRequestHeader.
func (f *flow) netConnTokens(h http.Header) {
	f.tokens = f.tokens[:0]
	for _, v := range h["Connection"] {
		f.tokens = appendConnTokens(f.tokens, [][]byte{s2b(v)})
	}
}

// filterNetResponse removes from an upstream's net/http response header
// what must not reach the client (dropResponseField, the reported metric
// fields), and notes its grpc-status, for a trailers-only answer.
func (f *flow) filterNetResponse(h http.Header, status int) {
	f.netConnTokens(h)
	del := f.scratch[:0]
	for k, vs := range h {
		if f.dropResponseField(s2b(k)) {
			del = append(append(del, k...), 0)
		}
		trimValues(vs)
	}
	clear(f.tokens)
	f.tokens = f.tokens[:0]
	out := netOut{h}
	del = f.takeReported(&out, status, del)
	for len(del) > 0 {
		i := bytes.IndexByte(del, 0)
		h.Del(b2s(del[:i]))
		del = del[i+1:]
	}
	f.scratch = f.scratch[:0]
	if ct := h["Content-Type"]; len(ct) > 1 {
		// Content-Type is not a list (RFC 9110 section 8.3): of a
		// repeated one the last is kept, as the HTTP/1.1 codec keeps
		// it (fasthttp holds one), so that a client is told one media
		// type over either protocol.
		h["Content-Type"] = ct[len(ct)-1:]
	}
	if status == http.StatusNoContent || status < 200 {
		// RFC 9110 section 8.6: no Content-Length on a 1xx or 204, which
		// an HTTP/2 client takes for a protocol error (the HTTP/1.1
		// codec drops it too).
		delete(h, "Content-Length")
	}
	f.noteGRPCStatus(h)
}

// trimValues removes, in place, the whitespace around each of vs. net/http's
// reader leaves a space at the end of a value whose obs-fold ends in a
// blank line ("X-A: a\r\n \r\n" is "a "), and an HTTP/2 field value
// may not start or end with whitespace (RFC 9113 section 8.2.1):
// x/net/http2's server wrote it as it was, and a client that checks
// (nghttp2's, curl's) would refuse the answer as malformed, where an
// HTTP/1.1 client got "a" (found by TestH2AnswersAgreeWithHTTP1 on a
// wider set of answers).
func trimValues(vs []string) {
	for i, v := range vs {
		if v != "" && (v[0] == ' ' || v[0] == '\t' || v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
			vs[i] = b2s(trimOWS(s2b(v)))
		}
	}
}

// noteGRPCStatus keeps the grpc-status of a header or trailer section.
func (f *flow) noteGRPCStatus(h http.Header) {
	if vs := h[hdrGRPCStatus]; len(vs) > 0 {
		f.grpcStatus = parseGRPCStatus(vs[0])
	}
}

// netError maps what a net/http round trip returned to the errors the
// policy knows: the client gone (its context ended), the header timeout,
// a body over the limit or broken by the client (bodyFailure), or the
// upstream's failure as it is. A failure to connect means nothing was
// sent.
func (f *flow) netError(err error, call *netCall, client context.Context) error {
	var de *dialError
	switch {
	case client.Err() != nil:
		f.canceled = true
		return fmt.Errorf("%w: %w", errClientGone, client.Err())
	case errors.Is(context.Cause(call.ctx), errHeaderTimeout):
		f.timeout = timeoutResponseHeader
		return fmt.Errorf("reading response header from %s: %w", f.inst.Addr, errHeaderTimeout)
	case call.deadlinePassed():
		f.timeout = timeoutGRPC
		return fmt.Errorf("waiting for %s: %w", f.inst.Addr, errCallDeadline)
	case f.tooLarge || f.clientErr != nil:
		return f.bodyFailure(err)
	case errors.As(err, &de):
		f.sent = false
		return err
	}
	if isTimeout(err) {
		f.timeout = timeoutResponseHeader
	}
	return fmt.Errorf("sending request to %s: %w", f.inst.Addr, err)
}
