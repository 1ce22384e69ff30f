package listener

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Gate counts the client connections open at once over the listeners it
// is given to (Wrap, Protocols.Gate), and closes a new one at once while
// Config.MaxConns are open. A process has a bounded number of file
// descriptors: without a cap, clients that hold connections open (idle
// keep-alives, a flood) take them all, and then the admin API cannot
// accept, upstream dials fail, and every request is lost, including the
// ones on connections already open. nginx's worker_connections and
// Envoy's max connections do the same. The zero Gate is ready to use; a
// nil *Gate counts nothing.
type Gate struct {
	open     atomic.Int64
	refused  atomic.Uint64
	lastWarn atomic.Int64 // unix nanoseconds of the last warning

	mu      sync.Mutex
	sorting map[net.Conn]struct{} // taken by Split, not yet handed on
	cut     bool                  // CloseSorting was called
}

// gateWarnEvery spaces the warnings of a gate that keeps refusing.
const gateWarnEvery = time.Minute

// Open returns how many client connections are open.
func (g *Gate) Open() int64 {
	if g == nil {
		return 0
	}
	return g.open.Load()
}

// Refused returns how many connections were closed at once because max
// were open.
func (g *Gate) Refused() uint64 {
	if g == nil {
		return 0
	}
	return g.refused.Load()
}

// take counts c as open, or, when max (> 0) are open already, closes it,
// counts it refused, and warns at most once a minute. Whoever holds a
// counted connection calls done once when it is closed.
func (g *Gate) take(c net.Conn, max int, log *slog.Logger) bool {
	if g == nil {
		return true
	}
	n := g.open.Add(1)
	if max <= 0 || n <= int64(max) {
		return true
	}
	g.open.Add(-1)
	total := g.refused.Add(1)
	_ = c.Close()
	now := time.Now().UnixNano()
	if last := g.lastWarn.Load(); now-last >= int64(gateWarnEvery) && g.lastWarn.CompareAndSwap(last, now) {
		log.Warn("client connections are at proxy.max_client_connections: new ones are closed until some close",
			"max_client_connections", max, "refused_total", total, "remote_addr", c.RemoteAddr().String())
	}
	return false
}

// done counts a connection taken by take as closed.
func (g *Gate) done() {
	if g != nil {
		g.open.Add(-1)
	}
}

// sort records c as taken by Split but not yet handed on: its TLS
// handshake or first bytes have not come. It returns false, with c
// closed, once CloseSorting has been called. The caller calls sorted(c)
// when c is handed on or closed.
func (g *Gate) sort(c net.Conn) bool {
	if g == nil {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cut {
		_ = c.Close()
		return false
	}
	if g.sorting == nil {
		g.sorting = make(map[net.Conn]struct{})
	}
	g.sorting[c] = struct{}{}
	return true
}

// sorted ends what sort began.
func (g *Gate) sorted(c net.Conn) {
	if g == nil {
		return
	}
	g.mu.Lock()
	delete(g.sorting, c)
	g.mu.Unlock()
}

// CloseSorting closes every connection a TLS or h2c listener (Split) has
// taken and not yet handed on, a TLS handshake or the first bytes still
// awaited, and from then on every such connection as it is taken. A
// shutdown that has run out of time calls it: such a connection is in no
// server's hands yet, so closing the servers' connections does not reach
// it, and it would otherwise stay open until its handshake timeout.
func (g *Gate) CloseSorting() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cut = true
	for c := range g.sorting {
		_ = c.Close()
	}
}

// maxConnsFor is DefaultMaxConns for an open-file limit of nofile.
func maxConnsFor(nofile uint64) int {
	const reserved, least = 256, 64
	if nofile <= 2*least+reserved {
		return least
	}
	return int(min((nofile-reserved)/2, 1<<30))
}
