package gateway

import (
	"github.com/graygate/graygate/internal/metrics"
	"github.com/graygate/graygate/internal/mirror"
	"github.com/graygate/graygate/internal/router"
)

// syncMirrors gives the mirrors of snap's rules their running state (queue,
// workers, diff statistics) before snap is published, and stops the
// mirrors no rule of snap has; see mirror.Set.Sync. The caller holds g.mu,
// or is New.
func (g *Gateway) syncMirrors(snap *router.Snapshot) {
	var specs []*mirror.Spec
	for _, c := range snap.RuleSet {
		if c.Mirror != nil {
			specs = append(specs, c.Mirror)
		}
	}
	g.mirrors.Sync(specs)
}

// exportMirrorMetrics registers graygate_mirror_{sent,failed,dropped}_total.
func (g *Gateway) exportMirrorMetrics() {
	g.metrics.Mirrors(func() []metrics.MirrorStats {
		st := g.mirrors.Stats()
		out := make([]metrics.MirrorStats, len(st))
		for i, s := range st {
			out[i] = metrics.MirrorStats{Rule: s.Rule, Sent: s.Sent, Failed: s.Failed, Dropped: s.Dropped}
		}
		return out
	})
}

// Mirrors returns the gateway's mirror set: the data plane hands it the
// shadow copies of the requests whose decision has a Mirror.
func (g *Gateway) Mirrors() *mirror.Set { return g.mirrors }
