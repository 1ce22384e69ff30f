package upstream

import (
	"sync"
	"sync/atomic"
)

// Balancer names a load-balancing policy.
type Balancer string

// The balancers.
const (
	// RoundRobin takes the healthy instances in turn, ignoring weights.
	RoundRobin Balancer = "round_robin"
	// Weighted is nginx's smooth weighted round robin: every instance gets
	// its weight's share, spread out rather than in bursts.
	Weighted Balancer = "weighted"
	// LeastRequest samples two healthy instances at random and takes the
	// one with fewer requests in flight (power of two choices). It ignores
	// weights.
	LeastRequest Balancer = "least_request"
)

func (b Balancer) valid() bool {
	switch b {
	case "", RoundRobin, Weighted, LeastRequest:
		return true
	}
	return false
}

// group is a candidate set of a pool: all its instances, or those of one
// version. Each group has its own cursor and weights, so interleaved picks
// of different versions do not disturb each other's rotation.
type group struct {
	idx []int32 // indexes into Pool.Instances
	rr  atomic.Uint64

	mu sync.Mutex
	cw []int64 // smooth weighted round robin's current weights, by position in idx
}

func newGroup(idx []int32) *group {
	return &group{idx: idx, cw: make([]int64, len(idx))}
}

// choose returns a healthy instance of g by the pool's balancer.
func (p *Pool) choose(g *group) (int32, bool) {
	if g == nil || len(g.idx) == 0 {
		return -1, false
	}
	at := instant{now: p.now}
	switch p.balancer {
	case Weighted:
		return p.smooth(g, &at)
	case LeastRequest:
		return p.twoChoices(g, &at)
	}
	return p.roundRobin(g, &at)
}

// roundRobin takes the next instance of the rotation if it is healthy.
// Otherwise it takes the k-th healthy one, k = (round + position) mod
// healthy: the down slots of one round go to different instances and each
// slot visits every healthy instance over successive rounds, so a down
// instance's share is spread evenly instead of landing on its successor
// (as a plain "next healthy" scan would do), without a filtered list.
func (p *Pool) roundRobin(g *group, at *instant) (int32, bool) {
	m := uint64(len(g.idx))
	n := g.rr.Add(1) - 1
	if i := g.idx[n%m]; p.up(i, at) {
		return i, true
	}
	return p.nthUp(g, n/m+n%m, at)
}

// nthUp returns the (k mod healthy)-th healthy instance of g.
func (p *Pool) nthUp(g *group, k uint64, at *instant) (int32, bool) {
	h := uint64(0)
	for _, i := range g.idx {
		if p.up(i, at) {
			h++
		}
	}
	if h == 0 {
		return -1, false
	}
	k %= h
	last := int32(-1)
	for _, i := range g.idx {
		if p.up(i, at) {
			if k == 0 {
				return i, true
			}
			k--
			last = i
		}
	}
	// Health changed between the passes.
	return last, last >= 0
}

// smooth is nginx's smooth weighted round robin
// (ngx_http_upstream_get_peer): each healthy candidate's current weight
// grows by its weight, the largest wins and pays back the total.
func (p *Pool) smooth(g *group, at *instant) (int32, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	best := -1
	var total int64
	for pos, i := range g.idx {
		if !p.up(i, at) {
			continue
		}
		w := p.weights[i]
		g.cw[pos] += w
		total += w
		if best < 0 || g.cw[pos] > g.cw[best] {
			best = pos
		}
	}
	if best < 0 {
		return -1, false
	}
	g.cw[best] -= total
	return g.idx[best], true
}

// twoChoices samples two distinct candidates and keeps the one with fewer
// requests in flight, the first on a tie. If either sample is down it
// samples again among the healthy ones only, which keeps every healthy
// pair equally likely.
func (p *Pool) twoChoices(g *group, at *instant) (int32, bool) {
	m := len(g.idx)
	if m == 1 {
		i := g.idx[0]
		return i, p.up(i, at)
	}
	a, b := pair(p.random(), m)
	ia, ib := g.idx[a], g.idx[b]
	if p.up(ia, at) && p.up(ib, at) {
		return p.lesser(ia, ib), true
	}
	h := 0
	for _, i := range g.idx {
		if p.up(i, at) {
			h++
		}
	}
	switch h {
	case 0:
		return -1, false
	case 1:
		return p.nthUp(g, 0, at)
	}
	a, b = pair(p.random(), h)
	ia, ib = -1, -1
	k := 0
	for _, i := range g.idx {
		if !p.up(i, at) {
			continue
		}
		if k == a {
			ia = i
		}
		if k == b {
			ib = i
		}
		k++
	}
	switch {
	case ia >= 0 && ib >= 0:
		return p.lesser(ia, ib), true
	case ia >= 0:
		return ia, true
	case ib >= 0:
		return ib, true
	}
	return p.nthUp(g, 0, at) // health changed between the passes
}

func (p *Pool) lesser(a, b int32) int32 {
	if p.hosts[b].inflight.Load() < p.hosts[a].inflight.Load() {
		return b
	}
	return a
}

// pair maps 64 random bits to two distinct positions in [0, m), m >= 2,
// with Lemire's multiply-shift on each half.
func pair(r uint64, m int) (int, int) {
	a := int((r & 0xffffffff) * uint64(m) >> 32)
	b := int((r >> 32) * uint64(m-1) >> 32)
	if b >= a {
		b++
	}
	return a, b
}
