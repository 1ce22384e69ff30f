package proxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// connSet tracks the client connections of a server, through
// fasthttp.Server.ConnState, so that Shutdown can close those still busy
// when its deadline passes. Only a connection's opening and closing touch
// the lock; the per-request state changes return at once.
type connSet struct {
	mu sync.Mutex
	m  map[net.Conn]struct{}
}

func (s *connSet) track(c net.Conn, state fasthttp.ConnState) {
	switch state {
	case fasthttp.StateNew:
		s.mu.Lock()
		if s.m == nil {
			s.m = make(map[net.Conn]struct{})
		}
		s.m[c] = struct{}{}
		s.mu.Unlock()
	case fasthttp.StateHijacked, fasthttp.StateClosed:
		s.mu.Lock()
		delete(s.m, c)
		s.mu.Unlock()
	}
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.m {
		_ = c.Close()
	}
}

// hijacked is a client connection the gateway took over from fasthttp: a
// WebSocket tunnel, or a response written on the connection itself
// (respondHijacked). close ends it, from any goroutine, at most once.
type hijacked interface{ close() }

// hijackSet tracks the hijacked connections so that Shutdown can wait for
// them and then close them: fasthttp's Shutdown neither waits for nor
// closes a connection once it is hijacked. Once closeAll has run, add
// refuses: a tunnel or hijacked response that only starts then (its
// handshake or request was in flight) is closed at once by its owner.
type hijackSet struct {
	mu     sync.Mutex
	m      map[hijacked]struct{}
	closed bool
}

// add tracks h, or reports false once closeAll has run.
func (s *hijackSet) add(h hijacked) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.m == nil {
		s.m = make(map[hijacked]struct{})
	}
	s.m[h] = struct{}{}
	return true
}

func (s *hijackSet) remove(h hijacked) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, h)
}

// closeAll closes every tracked connection, and those added later.
func (s *hijackSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	hs := make([]hijacked, 0, len(s.m))
	for h := range s.m {
		hs = append(hs, h)
	}
	s.mu.Unlock()
	for _, h := range hs {
		h.close()
	}
}

func (s *hijackSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// hijackedResponse is a response respondHijacked writes on the client
// connection. Closing it expires the connection's write deadline, which
// ends a write under way and fails every later one (the listener's
// connection keeps a past write deadline, whatever its write timeout),
// and marks it cut, which the writer checks before each write
// (writeHijacked) so that the failure is named errCutByShutdown rather
// than a client timeout. The cut is a failure to write to the client, not
// the upstream's (the breaker hears no failure; the upstream connection is
// closed, as for any response cut short). A writer waiting for the
// upstream meanwhile is bounded by the header and read timeouts, as
// always: the upstream connection is not touched from Shutdown's
// goroutine, since the writer may be giving it back to the pool.
type hijackedResponse struct {
	c   net.Conn
	cut atomic.Bool
}

func (h *hijackedResponse) close() {
	h.cut.Store(true)
	_ = h.c.SetDeadline(aLongTimeAgo)
}

// errCutByShutdown is a hijacked response that Shutdown cut at its
// deadline.
var errCutByShutdown = errors.New("cut off by the gateway's shutdown")
