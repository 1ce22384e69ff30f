package proxy

import (
	"net"
	"sync"

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

func (s *connSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
