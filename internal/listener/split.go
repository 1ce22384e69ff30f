package listener

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Preface is the HTTP/2 client connection preface (RFC 9113 section 3.4).
// A cleartext client that knows the server speaks HTTP/2 (h2c with prior
// knowledge) starts with it.
const Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Protocols says what a data-plane listener offers besides guarded
// HTTP/1.1.
type Protocols struct {
	// TLS terminates TLS on every connection with this configuration
	// (nil: cleartext). Its NextProtos are what ALPN offers; a connection
	// that negotiates "h2" is served by ServeH2, any other by HTTP/1.1.
	TLS *tls.Config
	// H2C accepts HTTP/2 with prior knowledge on a cleartext listener: a
	// connection whose first bytes are Preface is served by ServeH2.
	// Without it the Guard answers the preface as any other request line
	// it refuses (505).
	H2C bool
	// ServeH2 serves one HTTP/2 connection and returns when it is done.
	// It is called on the connection's own goroutine. On cleartext the
	// connection hands out the preface again, so the HTTP/2 server reads
	// it as if nothing had been looked at.
	ServeH2 func(net.Conn)
	// HandshakeTimeout bounds the TLS handshake, or, with H2C, the wait
	// for a new connection's first bytes. 0 takes the HeaderTimeout of
	// the config at each connection's start (so a reload that changes it
	// applies to the next connection), or 10s when that is 0 too.
	HandshakeTimeout time.Duration
	// Logger receives failed handshakes at debug level, and failures to
	// accept that are waited out (accept) and the Gate's refusals as
	// warnings (nil: discard).
	Logger *slog.Logger
	// Gate (nil: none) counts the TCP connections, HTTP/2 ones too, and
	// closes new ones beyond Config.MaxConns, as for Wrap.
	Gate *Gate
}

// Split returns the HTTP/1.1 side of ln: a listener whose Accept returns
// the connections that speak HTTP/1.1, each a *Conn guarded as by Wrap,
// while those that speak HTTP/2 go to p.ServeH2. With neither TLS nor H2C
// it is Wrap.
//
// Which protocol a connection speaks is known only after its TLS handshake
// (ALPN) or its first bytes, which a slow or silent client may hold back,
// so one goroutine accepts and every connection is looked at on a
// goroutine of its own, bounded by HandshakeTimeout; Accept never waits
// on a client. Closing the returned listener closes ln. A connection
// taken from ln before that is still looked at and handed on: the client
// was accepted, and in a handover (lifecycle.reuse_port) no other process
// can take it any more, so closing it would fail its request. Accept
// reports the end only once every such connection has been handed on,
// and a caller that keeps accepting until then (net/http's and fasthttp's
// Serve do) serves them; one that has stopped gets them closed after a
// handshake timeout.
func Split(ln net.Listener, config func() *Config, p Protocols) net.Listener {
	if p.TLS == nil && !p.H2C {
		return Wrap(ln, config, p.Gate, p.Logger)
	}
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	s := &split{ln: ln, config: config, p: p, conns: make(chan net.Conn), closed: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

// handshakeTimeout is Protocols.HandshakeTimeout, or else the config's
// HeaderTimeout now, or else 10s.
func (s *split) handshakeTimeout() time.Duration {
	if d := s.p.HandshakeTimeout; d > 0 {
		return d
	}
	if d := s.config().HeaderTimeout; d > 0 {
		return d
	}
	return 10 * time.Second
}

type split struct {
	ln     net.Listener
	config func() *Config
	p      Protocols

	conns   chan net.Conn  // HTTP/1.1 connections for Accept
	closed  chan struct{}  // closed when ln fails or is closed
	sorting sync.WaitGroup // connections taken from ln, not yet handed on
	done    chan struct{}  // closed once ln has failed and sorting is over

	mu      sync.Mutex
	err     error // why accepting ended
	closing bool
}

func (s *split) Addr() net.Addr { return s.ln.Addr() }

func (s *split) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		s.mu.Lock()
		defer s.mu.Unlock()
		return nil, s.err
	}
}

func (s *split) Close() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	s.mu.Unlock()
	return s.ln.Close()
}

// run accepts until ln fails, retrying temporary errors with backoff as
// net/http's server does.
func (s *split) run() {
	for {
		c, err := accept(s.ln, s.p.Logger)
		if err != nil {
			s.mu.Lock()
			s.err = err
			if s.closing {
				s.err = net.ErrClosed
			}
			s.mu.Unlock()
			close(s.closed)
			s.sorting.Wait()
			close(s.done)
			return
		}
		tc, counted := c.(*net.TCPConn)
		if counted && !s.p.Gate.take(tc, s.config().MaxConns, s.p.Logger) {
			continue
		}
		if !s.p.Gate.sort(c) {
			if counted {
				s.p.Gate.done()
			}
			continue
		}
		s.sorting.Add(1)
		go s.sort(c)
	}
}

// sort finds out what c speaks and hands it on: to ServeH2, or to Accept.
// It ends c's part in s.sorting once c is handed on (or closed), not when
// ServeH2 returns, which is when the connection ends. The Gate counted a
// TCP connection: a *Conn made for HTTP/1.1 tells it when it closes;
// otherwise sort does, once the connection is closed (ServeH2 returns
// when it is).
func (s *split) sort(c net.Conn) {
	sorted := sync.OnceFunc(func() {
		s.p.Gate.sorted(c)
		s.sorting.Done()
	})
	defer sorted()
	tc, ok := c.(*net.TCPConn)
	if !ok {
		s.offer(c)
		return
	}
	owned := false // a *Conn tells the Gate
	defer func() {
		if !owned {
			s.p.Gate.done()
		}
	}()
	deadline := time.Now().Add(s.handshakeTimeout())
	if s.p.TLS != nil {
		tlc := tls.Server(tc, s.p.TLS)
		_ = tlc.SetDeadline(deadline)
		if err := tlc.Handshake(); err != nil {
			s.p.Logger.Debug("TLS handshake failed", "remote_addr", c.RemoteAddr().String(), "error", err)
			_ = c.Close()
			return
		}
		_ = tlc.SetDeadline(time.Time{})
		if tlc.ConnectionState().NegotiatedProtocol == "h2" {
			sorted()
			s.p.ServeH2(tlc)
			return
		}
		owned = true
		s.offer(newConn(tlc, tc, s.config, nil, s.p.Gate))
		return
	}
	// Cleartext with h2c: read until the bytes leave the preface or are it.
	_ = tc.SetReadDeadline(deadline)
	var buf [len(Preface)]byte
	n := 0
	for n < len(buf) {
		m, err := tc.Read(buf[n:])
		n += m
		if !bytes.HasPrefix([]byte(Preface), buf[:n]) {
			break
		}
		if err != nil {
			if n == 0 || !errors.Is(err, io.EOF) {
				_ = c.Close()
				return
			}
			break // what came is all there is: the Guard refuses it
		}
	}
	_ = tc.SetReadDeadline(time.Time{})
	pre := append([]byte(nil), buf[:n]...)
	if n == len(Preface) && string(pre) == Preface {
		sorted()
		s.p.ServeH2(&replayConn{Conn: tc, pre: pre})
		return
	}
	owned = true
	s.offer(newConn(tc, tc, s.config, pre, s.p.Gate))
}

// offer hands an HTTP/1.1 connection to Accept. After the listener has
// closed, Accept still takes it if its caller goes on accepting (Accept
// reports the end only after this); a caller that has stopped gets it
// closed after a handshake timeout.
func (s *split) offer(c net.Conn) {
	select {
	case s.conns <- c:
		return
	case <-s.closed:
	}
	t := time.NewTimer(s.handshakeTimeout())
	defer t.Stop()
	select {
	case s.conns <- c:
	case <-t.C:
		_ = c.Close()
	}
}

// replayConn hands out pre before reading from Conn: the bytes Split read
// to find out what the connection speaks.
type replayConn struct {
	net.Conn
	pre []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
