// Package listener accepts the data plane's client connections. It opens
// the listening socket (with SO_REUSEPORT for zero-downtime handovers) and
// wraps every accepted connection in a Conn, which checks the request
// framing strictly as the bytes arrive (Guard, RFC 9112) and bounds how
// long a client may stall while it sends a request body or reads a
// response. The HTTP/1.1 codec behind it (fasthttp) then only ever sees
// requests that every parser frames the same way.
//
// Split serves a listener that offers more than cleartext HTTP/1.1: it
// terminates TLS (the certificates come from package certs) and sends a
// connection that negotiated "h2" by ALPN, or a cleartext one that opens
// with the HTTP/2 preface (h2c with prior knowledge), to the HTTP/2
// codec, and every other one, guarded the same way over TLS as in clear,
// to the HTTP/1.1 codec.
//
// This is the first stop of the request path: listener → identity →
// router (the decision) → proxy.
package listener

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/graygate/graygate/internal/rawio"
)

// Config is what a listener enforces on its connections. It is read for
// every operation, so a new Config applies to open connections at once.
type Config struct {
	// MaxHeaderBytes bounds a request line plus its header fields, and a
	// trailer section; a larger one is refused with 431.
	MaxHeaderBytes int
	// BodyReadTimeout bounds how long a client may leave the connection
	// idle while the gateway waits for the rest of a request body
	// (proxy.client_read_timeout). 0 means no bound.
	BodyReadTimeout time.Duration
	// WriteTimeout bounds how long one write to the client may wait for
	// the client to read (proxy.client_write_timeout). 0 means no bound.
	WriteTimeout time.Duration
	// MaxConns caps the client connections open at once over the
	// listeners that share a Gate (proxy.max_client_connections); a new
	// one beyond it is closed at once. 0 means no cap.
	MaxConns int
	// HeaderTimeout bounds reading a request line and header
	// (proxy.read_header_timeout): a connection's first one from when it
	// opens, a later one from its first bytes. 0 means no bound.
	HeaderTimeout time.Duration
	// IdleTimeout bounds a keep-alive connection's wait for its client's
	// next request (proxy.client_idle_timeout). 0 means no bound.
	IdleTimeout time.Duration
}

// Listen opens a listener. With reusePort it sets SO_REUSEPORT before
// binding (Linux only; elsewhere it fails with an error wrapping
// errors.ErrUnsupported), so that a new graygate process can bind the
// address while the old one still holds it: the kernel then spreads new
// connections over both, and once the old process closes its listener all
// of them go to the new one. Every process sharing the port must set it
// and run as the same user.
func Listen(network, addr string, reusePort bool) (net.Listener, error) {
	var lc net.ListenConfig
	if reusePort {
		lc.Control = reusePortControl
	}
	ln, err := lc.Listen(context.Background(), network, addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s %s (reuse port %t): %w", network, addr, reusePort, err)
	}
	return ln, nil
}

// Wrap returns a listener whose TCP connections are Conns enforcing
// config(). Connections of other kinds are returned as they are. gate
// (nil: none) counts the TCP connections and closes new ones beyond
// config().MaxConns. log gets accept's warnings and the gate's (nil:
// discard).
func Wrap(ln net.Listener, config func() *Config, gate *Gate, log *slog.Logger) net.Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &wrapped{Listener: ln, config: config, gate: gate, log: log}
}

type wrapped struct {
	net.Listener
	config func() *Config
	gate   *Gate
	log    *slog.Logger
}

func (l *wrapped) Accept() (net.Conn, error) {
	for {
		c, err := accept(l.Listener, l.log)
		if err != nil {
			return nil, err
		}
		tc, ok := c.(*net.TCPConn)
		if !ok {
			return c, nil
		}
		if l.gate.take(tc, l.config().MaxConns, l.log) {
			return newConn(tc, tc, l.config, nil, l.gate), nil
		}
	}
}

// newConn guards c, which runs over the TCP connection tc (c itself, or a
// TLS connection on it). pre are bytes already read from c, which the
// Guard checks first. gate counted tc (nil: none); the Conn tells it when
// it closes.
func newConn(c net.Conn, tc *net.TCPConn, config func() *Config, pre []byte, gate *Gate) *Conn {
	cc := &Conn{Conn: c, tcp: tc, config: config, pre: pre, gate: gate}
	_, cc.tls = c.(*tls.Conn)
	if !cc.tls {
		cc.sock = rawio.New(tc)
		if cc.sock != nil {
			cc.sock.OnWriteWait(cc.writeWaits)
		}
	}
	if a, ok := tc.RemoteAddr().(*net.TCPAddr); ok {
		cc.peer = a.AddrPort().Addr().Unmap()
	}
	cc.guard.Reset(config().MaxHeaderBytes)
	return cc
}

// Conn is one client connection. Its Read hands the HTTP parser only bytes
// the Guard accepted, and returns the Guard's *Error once it refuses
// something. Its read deadline follows where the Guard is: between
// requests it keeps it at IdleTimeout from now; for a head (a new
// connection's first, or one whose first bytes came with the last read)
// it sets HeaderTimeout once, at the head's first read, so that it bounds
// the whole head; while a request body is due it keeps it at
// BodyReadTimeout from now. A write that has to wait for the client (its
// receive window and the send buffer are full) gets the write deadline
// WriteTimeout from when it starts waiting, taken off when it is done; a
// write that does not wait arms nothing and reads no clock. (Over TLS,
// and once another deadline was set, every write keeps the write deadline
// at WriteTimeout from now instead.) Read deadlines are moved only when
// they would otherwise be off by more than an eighth of the timeout, so a
// busy connection rarely re-arms a timer, and one whose heads arrive
// whole reads the clock once per request.
//
// A read deadline in the future is armed lazily: SetReadDeadline records
// it (as do the bounds above), and the next Read arms it before it reads,
// unless the deadline armed already falls within an eighth of the asked
// time before it (it may end the wait that much early, never late). A
// deadline that is cleared (zero) or in the past is armed at once: that is
// how a blocked Read, or a watcher reading through SyscallConn, is
// released or unbounded from another goroutine. (The HTTP/1.1 codec's own
// read deadlines are off: it would set two per request, each with a clock
// read of its own and one here to see it.)
//
// Between requests (the Guard has read whole requests and nothing of the
// next), Read first lets the other runnable goroutines run: the answer has
// just been written and a client that does not pipeline has not sent its
// next request yet, so a read at once would mostly fail and park. Under
// load the request arrives meanwhile and the read finds it; an idle
// connection loses nothing but the yield.
//
// Requests that arrive together (pipelined) are handed to the parser one
// at a time: a Read stops where a request ends, and the next Read hands
// over the rest (see hand). So the HTTP/1.1 server has written its answer
// to one request before it sees the next, and a handler may write to the
// connection (interim responses) in order.
//
// A plain TCP connection is read and written through rawio, a TLS one
// through crypto/tls.
//
// A Conn carries a plain TCP connection or a TLS one; either way the Guard
// sees the decrypted bytes. One goroutine reads and one writes, as
// net.Conn allows.
type Conn struct {
	net.Conn
	tcp    *net.TCPConn // the TCP connection under Conn
	sock   *rawio.Conn  // tcp's reads and writes, for a plain one (nil: use Conn)
	tls    bool
	peer   netip.Addr // the client's address, unmapped
	pre    []byte     // bytes read before the Conn was made, handed out first
	config func() *Config

	guard  Guard
	err    error       // the Guard's refusal (*Error), returned by every later Read
	tunnel atomic.Bool // a WebSocket or CONNECT tunnel was opened
	// pending: bytes read and not yet handed to the parser: the next
	// request's, read with the last one (see hand), or a tunnel's first
	// bytes, read together with its head.
	pending []byte
	// midRequest mirrors guard.MidRequest() after every Read, for Close,
	// which may run on another goroutine.
	midRequest atomic.Bool
	closing    atomic.Bool // Close began a lingering close
	gate       *Gate       // counted the connection (nil: none)
	released   atomic.Bool // the gate was told it closed
	// interrupted: Interrupt was called, and no Resume since.
	interrupted atomic.Bool
	// Deadlines armed on the connection, in Unix nanoseconds (0: none;
	// arming: a read deadline is being set, its value not yet known).
	rdl, wdl atomic.Int64
	// arm serializes setting the read deadline (see armRead), warm the
	// write deadline (see armWrite).
	arm, warm sync.Mutex
	// wcut: the write deadline set last (SetWriteDeadline) is past, a
	// cancel that no Write undoes.
	wcut atomic.Bool
	// wwait: the write deadline armWriteWait armed, for disarmWrite
	// (0: none); guarded by warm.
	wwait int64
	// The read deadline asked for (0: none), and how much earlier than it
	// the armed one may fall (see armRead).
	rwant, rtol atomic.Int64
	arms        atomic.Uint64 // read deadlines armed, for tests
	// headAsked: the number of the request (counting from 1) whose head
	// deadline was asked for (see Read).
	headAsked uint64
	// answered: when the last request's answer was done, in Unix
	// nanoseconds, as Answered was told (0: not known); see Answered.
	answered atomic.Int64
}

// Answered tells the connection that its request was answered at t, in
// Unix nanoseconds on the real clock, by the handler that just read the
// clock for its own ends (latency, the access log). The keep-alive wait
// that follows counts from t instead of reading the clock again, unless a
// write of the answer had to wait for the client since (writeWaits): then
// it counts from its own start. Only the next Read uses t, and only if it
// is the read between requests. A connection whose writes cannot tell
// whether they waited (TLS, or no raw socket calls) ignores it.
func (c *Conn) Answered(t int64) {
	if c.sock != nil {
		c.answered.Store(t)
	}
}

// BodyRefused returns the Guard's refusal of the body of the n-th request
// on the connection (counting from 1), or nil. A handler asks before it
// forwards a request whose body has already arrived, so that a malformed
// body never reaches an upstream, and when reading a body fails, to tell a
// malformed body (400) from a client that went away. Only the goroutine
// reading the connection may call it.
func (c *Conn) BodyRefused(n uint64) *Error {
	if e, ok := c.err.(*Error); ok && c.guard.FailedInBody(n) {
		return e
	}
	return nil
}

// Interrupt ends a read pending on the connection, and fails every later
// one with a timeout (os.ErrDeadlineExceeded), until Resume. It is a
// cancel from another goroutine that the body read deadline, which Read
// asks for anew each time, cannot undo, as a past read deadline set a
// moment before a Read would be. The data plane uses it to stop waiting
// for more of a client's upload once the upstream has answered or gone.
func (c *Conn) Interrupt() error {
	c.interrupted.Store(true)
	c.askRead(pastDeadline, 0)
	return c.armRead()
}

// Resume undoes Interrupt. The next read deadline asked for applies.
func (c *Conn) Resume() { c.interrupted.Store(false) }

// pastDeadline is a read deadline long past, in Unix nanoseconds.
var pastDeadline = time.Unix(1, 0).UnixNano()

// RefusedLine returns the method and target of the request whose head the
// Guard refused, if its request line came before the refusal (see
// Guard.RefusedLine). Only the goroutine reading the connection may call
// it.
func (c *Conn) RefusedLine() (method, target []byte, ok bool) {
	if c.err == nil {
		return nil, nil, false
	}
	return c.guard.RefusedLine()
}

// OpenTunnel tells the connection that the request it carried became a
// tunnel (a 101 answer to a WebSocket handshake), so the bytes that follow
// are the tunnel's. After a handshake that was not accepted, Read reports
// the end of the connection instead: nothing that follows an upgrade
// request is read as another request.
func (c *Conn) OpenTunnel() { c.tunnel.Store(true) }

// Peer is the client's IP address (an IPv4-mapped one unmapped), read
// once when the connection was accepted.
func (c *Conn) Peer() netip.Addr { return c.peer }

// TLS reports whether the connection terminated TLS.
func (c *Conn) TLS() bool { return c.tls }

// SyscallConn returns the raw TCP connection under the Conn, so that the
// data plane can watch it for a hang-up without reading from it.
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return c.tcp.SyscallConn() }

// read reads from the connection, the bytes read before it was made first,
// under the read deadline asked for.
func (c *Conn) read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	if err := c.armRead(); err != nil {
		return 0, err
	}
	if c.sock != nil {
		return c.sock.Read(p)
	}
	return c.Conn.Read(p)
}

// armRead arms the read deadline asked for, unless the one armed is no
// later than it and no more than its tolerance earlier. A deadline armed
// at once by another goroutine while it runs (a cancel) wins: it arms
// again until what it armed is still what is asked.
//
// The reading goroutine and a canceling one (Interrupt, a past
// SetReadDeadline) may arm at once. Setting is serialized, and rdl reads
// arming while a set is under way, so that neither trusts a value the
// other is replacing: without that, a read could keep a deadline recorded
// as a minute away while a cancel it had already outlived was setting a
// past one, and time out at once.
func (c *Conn) armRead() error {
	if c.kept() {
		return nil
	}
	c.arm.Lock()
	defer c.arm.Unlock()
	for !c.kept() {
		want := c.rwant.Load()
		var t time.Time
		if want != 0 {
			t = time.Unix(0, want)
		}
		c.arms.Add(1)
		c.rdl.Store(arming)
		if err := c.Conn.SetReadDeadline(t); err != nil {
			return err // rdl stays arming: the next arm sets it for sure
		}
		c.rdl.Store(want)
	}
	return nil
}

// kept reports whether the read deadline armed may stay for the one asked
// for (see armRead).
func (c *Conn) kept() bool {
	want, armed := c.rwant.Load(), c.rdl.Load()
	return armed != arming && (armed == want || Keeps(armed, want, c.rtol.Load()))
}

// arming is rdl while the read deadline is being set.
const arming = math.MinInt64

// askRead records want as the read deadline, with tolerance tol, for the
// next read to arm (see armRead).
func (c *Conn) askRead(want, tol int64) {
	c.rtol.Store(tol)
	c.rwant.Store(want)
}

func (c *Conn) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.guard.Tunnel() {
		switch {
		case !c.tunnel.Load():
			return 0, io.EOF
		case len(c.pending) > 0:
			n := copy(p, c.pending)
			c.pending = c.pending[n:]
			return n, nil
		}
		return c.read(p)
	}
	if len(c.pending) > 0 {
		// The next request, read with the last one: the parser has
		// answered that one, so it gets this one now, without a wait
		// or a deadline (the bytes are here).
		if c.interrupted.Load() {
			return 0, os.ErrDeadlineExceeded
		}
		return c.hand(p, copy(p, c.pending), true)
	}
	answered := c.answered.Load()
	if answered != 0 {
		c.answered.Store(0)
	}
	switch {
	case c.guard.InBody():
		if d := c.config().BodyReadTimeout; d > 0 {
			c.askRead(time.Now().Add(d).UnixNano(), int64(d/8))
		}
	case c.guard.Between():
		// The keep-alive wait. Asked for at every read between requests,
		// from when the handler answered (Answered), or else now; the one
		// armed stays while it is within an eighth of it (see armRead), so
		// a busy connection arms none, and reads no clock.
		if d := c.config().IdleTimeout; d > 0 {
			if answered == 0 {
				answered = time.Now().UnixNano()
			}
			c.askRead(answered+int64(d), int64(d/8))
		}
		// The answer to the last request has just been written, and the
		// client's next request cannot have come yet unless it pipelines.
		// A read now would mostly find nothing (a failed system call) and
		// park in the poller; letting the goroutines already runnable go
		// first gives the request time to arrive, so that under load the
		// read finds it. The read itself is unchanged: bytes already
		// queued are read at once, and nothing is skipped.
		runtime.Gosched()
	default:
		// A head: a new connection's first, or one whose first bytes came
		// with the last read. Its deadline is asked for once, at its
		// first read, so it bounds the whole head, not each read. A head
		// that arrives whole with the read between requests never gets
		// here: it costs no clock read.
		if n := c.guard.Requests() + 1; c.headAsked != n {
			c.headAsked = n
			if d := c.config().HeaderTimeout; d > 0 {
				c.askRead(time.Now().Add(d).UnixNano(), int64(d/8))
			}
		}
	}
	// After the body deadline was asked for above: an Interrupt from
	// another goroutine that came before is seen here, and one that comes
	// after asks for its past deadline over it (see Interrupt).
	if c.interrupted.Load() {
		return 0, os.ErrDeadlineExceeded
	}
	n, err := c.read(p)
	if n > 0 {
		if good, gerr := c.hand(p, n, false); gerr != nil || good < n {
			return good, gerr
		}
	}
	return n, err
}

// hand scans the n bytes at the start of p, read from the connection or
// kept from an earlier read, and returns how many of them the parser gets:
// those of one request at most (Guard.ScanRequest), so that the HTTP/1.1
// server never holds the next request while it answers one. fasthttp
// flushes its answers only when it has no further request bytes
// buffered; with none, every answer has been written to the connection
// before the next request's handler runs, which is what lets a handler
// write interim (1xx) responses straight to the connection, in order. A
// refusal is kept in c.err: the parser gets the bytes before it (and a
// placeholder, see Guard.Placeholder), then the refusal. The bytes after
// those the parser gets (the next request, or a tunnel's first bytes) are
// kept in c.pending until the parser has answered this request, or the
// tunnel opens; kept says the n bytes came from c.pending itself.
func (c *Conn) hand(p []byte, n int, kept bool) (int, error) {
	good, gerr := c.guard.ScanRequest(p[:n])
	switch {
	case gerr != nil:
		c.err = gerr
		if c.guard.Placeholder() {
			// See Guard.Placeholder: the parser must see a byte it
			// cannot skip, so that it asks for more and gets gerr.
			p[good] = 'x'
			good++
		}
	case kept:
		c.pending = c.pending[good:]
	case good < n:
		c.pending = append(c.pending[:0], p[good:n]...)
	}
	if mid := c.guard.MidRequest() || len(c.pending) > 0; mid != c.midRequest.Load() {
		c.midRequest.Store(mid)
	}
	if gerr != nil && good == 0 {
		return 0, gerr
	}
	return good, nil
}

// Close closes the connection. One closed while the client may still be
// sending a request (the answer came before the body was read: a refused
// Expect: 100-continue, an early 401 or 413; a head refused with 400, 431
// or 505 while its body or the rest of it is on its way; the next
// pipelined request's first bytes after a Connection: close) closes
// lingering, as nginx's lingering_close and Go's net/http do. Closing a
// socket with unread bytes makes the kernel send a reset, which can
// destroy the answer before the client reads it; so the write side is
// shut down first (the answer, then FIN), and what the client still sends
// is read and dropped until it closes, for at most LingerTime and
// LingerBytes, on a goroutine of its own. At most maxLingering connections
// linger at once; beyond that, Close closes at once.
func (c *Conn) Close() error {
	if !c.midRequest.Load() || c.tunnel.Load() || !c.closing.CompareAndSwap(false, true) {
		return c.closeNow()
	}
	select {
	case lingering <- struct{}{}:
	default:
		return c.closeNow()
	}
	if err := c.tcp.CloseWrite(); err != nil {
		<-lingering
		return c.closeNow()
	}
	go func() {
		defer func() { <-lingering }()
		_ = c.tcp.SetReadDeadline(time.Now().Add(LingerTime))
		_, _ = io.CopyN(io.Discard, c.tcp, LingerBytes)
		_ = c.closeNow()
	}()
	return nil
}

// closeNow closes the connection and, the first time, tells the Gate
// that counted it.
func (c *Conn) closeNow() error {
	err := c.Conn.Close()
	if c.gate != nil && c.released.CompareAndSwap(false, true) {
		c.gate.done()
	}
	return err
}

// The bounds of a lingering close (see Conn.Close).
const (
	LingerTime   = 2 * time.Second
	LingerBytes  = 8 << 20
	maxLingering = 512
)

var lingering = make(chan struct{}, maxLingering)

func (c *Conn) Write(p []byte) (int, error) {
	d := c.config().WriteTimeout
	if c.sock != nil && (d <= 0 || c.wdl.Load() == 0) {
		// No deadline is armed: the write deadline is armed only if this
		// write has to wait for the client (armWriteWait), and taken off
		// again once it is done, so a write that never waits reads no
		// clock.
		n, err := c.sock.Write(p)
		if c.sock.WriteWaited() {
			c.disarmWrite()
		}
		return n, err
	}
	if d > 0 {
		if err := c.armWrite(d); err != nil {
			return 0, err
		}
	}
	if c.sock != nil {
		return c.sock.Write(p)
	}
	return c.Conn.Write(p)
}

// ReadFrom writes what it reads from r to the client as it arrives, one
// Write per read, until r ends (io.EOF, which is no error) or fails, and
// reports the bytes written. It makes Conn an io.ReaderFrom, which
// bufio.Writer.ReadFrom hands a copy to whenever its own buffer is empty:
// fasthttp copies a response body of known length that way, once the
// header has gone out. Through the writer's buffer instead, each part of
// the body waited there until 4 KiB of it had come (a slow upstream's
// first bytes reached the client only with later ones), and what sat
// there when the body broke off was lost with the connection's close.
// Now each part goes out as soon as it is read, and a failed read returns
// only after what came before it has been written: io.CopyBuffer's loop,
// through a writer that hides this method (as net.TCPConn's ReadFrom
// does), with a pooled buffer.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	bp := copyBufs.Get().(*[copyBufSize]byte)
	defer copyBufs.Put(bp)
	return io.CopyBuffer(writerOnly{c}, r, bp[:])
}

// writerOnly is a Conn as a plain io.Writer, so that io.CopyBuffer does
// not hand the copy back to ReadFrom.
type writerOnly struct{ io.Writer }

// copyBufSize is ReadFrom's buffer: io.Copy's size.
const copyBufSize = 32 << 10

var copyBufs = sync.Pool{New: func() any { return new([copyBufSize]byte) }}

// writeWaits is the socket's OnWriteWait: a write is about to wait for the
// client. The time Answered gave no longer starts the keep-alive wait,
// and the write deadline is armed (armWriteWait).
func (c *Conn) writeWaits() error {
	c.answered.Store(0)
	return c.armWriteWait()
}

// armWriteWait arms the write deadline at WriteTimeout from now for a
// write that found the client's receive window and the send buffer full
// and is about to wait (rawio.Conn.OnWriteWait). A cancel (a past
// deadline) or a deadline set since the write began stays as it is.
func (c *Conn) armWriteWait() error {
	d := c.config().WriteTimeout
	if d <= 0 {
		return nil
	}
	c.warm.Lock()
	defer c.warm.Unlock()
	if c.wcut.Load() || c.wdl.Load() != 0 {
		return nil
	}
	want := time.Now().Add(d).UnixNano()
	c.wdl.Store(want)
	c.wwait = want
	return c.Conn.SetWriteDeadline(time.Unix(0, want))
}

// disarmWrite takes off the deadline armWriteWait armed, unless another
// was set since (a cancel from another goroutine stays).
func (c *Conn) disarmWrite() {
	c.warm.Lock()
	defer c.warm.Unlock()
	armed := c.wwait
	c.wwait = 0
	if armed == 0 || c.wcut.Load() || c.wdl.Load() != armed {
		return
	}
	c.wdl.Store(0)
	_ = c.Conn.SetWriteDeadline(time.Time{})
}

// armWrite sets the write deadline to now+d unless the one armed is
// already within [now+7d/8, now+d], or a past one was set (a cancel from
// another goroutine, such as a shutdown cutting a response): that one
// stays, and the write fails on it, until SetWriteDeadline sets a zero or
// future one. Setting is serialized with SetWriteDeadline, so a write
// re-arming its deadline at the moment of a cancel cannot undo the
// cancel: either the cancel comes after and applies to the socket last,
// or it came before and the write sees it.
func (c *Conn) armWrite(d time.Duration) error {
	want := time.Now().Add(d).UnixNano()
	if Keeps(c.wdl.Load(), want, int64(d/8)) {
		return nil
	}
	c.warm.Lock()
	defer c.warm.Unlock()
	if c.wcut.Load() {
		return nil
	}
	c.wdl.Store(want)
	return c.Conn.SetWriteDeadline(time.Unix(0, want))
}

// SetReadDeadline asks for t as the read deadline. One in the future is
// armed by the next Read (see Conn); a zero or past one at once. A t with
// a monotonic reading (fasthttp's time.Now().Add) is compared on the
// monotonic clock alone, one clock read where time.Now takes two.
func (c *Conn) SetReadDeadline(t time.Time) error {
	want := UnixNano(t)
	if want != 0 {
		if d := time.Until(t); d > 0 {
			c.askRead(want, int64(d/8))
			return nil
		}
	}
	c.askRead(want, 0)
	return c.armRead()
}

// SetWriteDeadline records t and sets it. A past t is a cancel: every
// later Write fails on it, the config's write timeout notwithstanding,
// until a zero or future t is set (see armWrite).
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.warm.Lock()
	defer c.warm.Unlock()
	at := UnixNano(t)
	c.wcut.Store(at != 0 && time.Until(t) <= 0)
	c.wdl.Store(at)
	return c.Conn.SetWriteDeadline(t)
}

// SetDeadline sets t as the write deadline and asks for it as the read
// deadline (see SetReadDeadline).
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

// Keeps reports whether a deadline already armed at armed may stay for
// one asked at want (both Unix nanoseconds, 0: none): it is no later, and
// at most tol earlier. A wait under it then ends at most tol early, never
// late, and a busy connection does not re-arm a runtime timer each time.
func Keeps(armed, want, tol int64) bool {
	return armed != 0 && armed <= want && want-armed <= tol
}

// UnixNano is t in Unix nanoseconds, 0 for the zero time (no deadline).
func UnixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// accept accepts a connection from ln, waiting out the failures that pass
// (as net/http's server does): a timeout, and running out of file
// descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) or a connection
// aborted before it was taken (ECONNABORTED). It waits 5 ms, doubling to
// at most 1 s, while they last, and logs the first of a run; any other
// error (the listener closed) is returned. Without this, one moment
// without a free descriptor stopped the server for good, silently, with
// the process still alive.
func accept(ln net.Listener, log *slog.Logger) (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err == nil || !passing(err) {
			return c, err
		}
		if delay == 0 {
			log.Warn("accepting connections failed; trying again", "listen", ln.Addr().String(), "error", err)
		}
		delay = min(max(2*delay, 5*time.Millisecond), time.Second)
		time.Sleep(delay)
	}
}

// passing reports an accept error that is worth waiting out (see accept).
func passing(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
