package proxy

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/valyala/fasthttp"
)

// Listen opens a listener for Serve. With reusePort it sets SO_REUSEPORT
// before binding (Linux only; elsewhere it fails with an error wrapping
// errors.ErrUnsupported), so that a new graygate process can bind the
// address while the old one still holds it: the kernel then spreads new
// connections over both, and once the old process's Shutdown closes its
// listener, all of them go to the new one while the old one finishes what
// it has. Every process sharing the port must set it, and run as the same
// user. See the package doc for the one connection race this leaves.
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
