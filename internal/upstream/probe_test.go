package upstream

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/testport"
)

// backend is an httptest server whose health answer can be flipped; it
// counts the probes answered with each verdict.
type backend struct {
	*httptest.Server
	status  atomic.Int32
	hang    atomic.Bool
	good    atomic.Int64
	bad     atomic.Int64
	mu      sync.Mutex
	lastReq *http.Request
}

func newBackend(t *testing.T) *backend {
	b := &backend{}
	b.status.Store(http.StatusOK)
	release := make(chan struct{})
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.lastReq = r.Clone(r.Context())
		b.mu.Unlock()
		if b.hang.Load() {
			b.bad.Add(1)
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		code := int(b.status.Load())
		if code >= 300 && code < 400 {
			w.Header().Set("Location", "/elsewhere")
		}
		if code >= 200 && code < 400 {
			b.good.Add(1)
		} else {
			b.bad.Add(1)
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(func() {
		close(release)
		b.Close()
	})
	return b
}

var fastProbes = &ActiveHealth{
	Path:               "/hc",
	Interval:           Duration(10 * time.Millisecond),
	Timeout:            Duration(200 * time.Millisecond),
	HealthyThreshold:   2,
	UnhealthyThreshold: 3,
}

func TestActiveHealth(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(*backend) // makes the backend fail its probes
	}{
		{"500", func(b *backend) { b.status.Store(500) }},
		{"503", func(b *backend) { b.status.Store(503) }},
		{"404", func(b *backend) { b.status.Store(404) }},
		{"timeout", func(b *backend) { b.hang.Store(true) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			flaky, steady := newBackend(t), newBackend(t)
			h := NewHealth(HealthOptions{})
			defer h.Close()
			insts := []*Instance{{Addr: addrOf(flaky.Server)}, {Addr: addrOf(steady.Server)}}
			p := mustPool(t, "svc", insts, PoolOptions{Health: h, Active: fastProbes})
			defer p.Close()
			if st := p.Stats(); st.Healthy != 2 {
				t.Fatalf("instances start healthy: %+v", st)
			}
			waitFor(t, "a passing probe", func() bool { return flaky.good.Load() >= 1 })

			tt.break_(flaky)
			waitFor(t, "the instance to fail its checks", func() bool { return p.Stats().Failing == 1 })
			if n := flaky.bad.Load(); n < 3 {
				t.Errorf("marked down after %d failed probes, want the threshold of 3", n)
			}
			for range 10 {
				in, err := p.Pick()
				if err != nil || in != insts[1] {
					t.Fatalf("Pick while %s fails = %v, %v", insts[0].Addr, in, err)
				}
				p.Report(in, true)
			}
			hs, _ := hostStats(h, insts[0].Addr)
			if !hs.Probed || hs.ProbeHealthy {
				t.Errorf("snapshot of the failing instance = %+v", hs)
			}

			goodBefore := flaky.good.Load()
			flaky.hang.Store(false)
			flaky.status.Store(200)
			waitFor(t, "the instance to pass again", func() bool { return p.Stats().Healthy == 2 })
			if n := flaky.good.Load() - goodBefore; n < 2 {
				t.Errorf("back after %d passing probes, want the threshold of 2", n)
			}
		})
	}
}

func TestActiveHealthRequest(t *testing.T) {
	b := newBackend(t)
	b.status.Store(http.StatusFound) // 3xx passes and is not followed
	h := NewHealth(HealthOptions{})
	defer h.Close()
	p := mustPool(t, "svc", []*Instance{{Addr: addrOf(b.Server)}}, PoolOptions{Health: h, Active: fastProbes})
	defer p.Close()
	waitFor(t, "three probes", func() bool { return b.good.Load() >= 3 })
	if st := p.Stats(); st.Healthy != 1 || b.bad.Load() != 0 {
		t.Errorf("302 must pass: %+v, %d failed", st, b.bad.Load())
	}
	b.mu.Lock()
	r := b.lastReq
	b.mu.Unlock()
	if r.Method != http.MethodGet || r.URL.Path != "/hc" || r.Host != addrOf(b.Server) || r.UserAgent() != "graygate-health-check" {
		t.Errorf("probe = %s %s Host %s UA %q", r.Method, r.URL.Path, r.Host, r.UserAgent())
	}
}

func TestActiveHealthUnreachable(t *testing.T) {
	addr := testport.Refused(t) // nothing listens there, and no other test's server will
	h := NewHealth(HealthOptions{})
	defer h.Close()
	p := mustPool(t, "gone", []*Instance{{Addr: addr}}, PoolOptions{Health: h, Active: fastProbes})
	defer p.Close()
	waitFor(t, "the unreachable instance to fail", func() bool { return p.Stats().Failing == 1 })
	_, err := p.Pick()
	if want := `pool "gone": no healthy instance (1 failing health checks)`; err == nil || err.Error() != want {
		t.Errorf("Pick = %v, want %q", err, want)
	}
}

// TestProbeLoopsFollowPools checks the reference counting: one loop per
// address while some pool with active health holds it, kept (not
// restarted) across a rebuild, and stopped when the last such pool closes.
func TestProbeLoopsFollowPools(t *testing.T) {
	x, y, z := newBackend(t), newBackend(t), newBackend(t)
	slow := *fastProbes
	slow.Interval = Duration(time.Hour) // one probe at start, then idle
	h := NewHealth(HealthOptions{})
	defer h.Close()
	inst := func(b *backend) *Instance { return &Instance{Addr: addrOf(b.Server)} }
	active := PoolOptions{Health: h, Active: &slow}

	pa := mustPool(t, "svc", []*Instance{inst(x), inst(y)}, active)
	if n := h.ProbeLoops(); n != 2 {
		t.Fatalf("loops after pool {x y} = %d, want 2", n)
	}
	waitFor(t, "y's first probe", func() bool { return y.good.Load() == 1 })
	pb := mustPool(t, "svc", []*Instance{inst(y), inst(z)}, active)
	if n := h.ProbeLoops(); n != 3 {
		t.Fatalf("loops with pools {x y} and {y z} = %d, want 3", n)
	}
	pa.Close()
	if n := h.ProbeLoops(); n != 2 {
		t.Fatalf("loops after closing {x y} = %d, want 2 (y and z)", n)
	}
	if _, ok := hostStats(h, x.Listener.Addr().String()); ok {
		t.Error("x is in no pool but still known")
	}
	passiveOnly := mustPool(t, "other", []*Instance{inst(x)}, PoolOptions{Health: h, Passive: &PassiveHealth{}})
	if n := h.ProbeLoops(); n != 2 {
		t.Fatalf("a pool without active health started a loop: %d", n)
	}
	waitFor(t, "z's first probe", func() bool { return z.good.Load() == 1 })
	if n := y.good.Load(); n != 1 {
		t.Errorf("y was probed %d times: its loop was restarted by the rebuild", n)
	}
	pb.Close()
	passiveOnly.Close()
	if n := h.ProbeLoops(); n != 0 {
		t.Fatalf("loops after every pool closed = %d, want 0", n)
	}

	// Close stops what is left; later pools start nothing.
	pc := mustPool(t, "svc", []*Instance{inst(x), inst(y), inst(z)}, active)
	if n := h.ProbeLoops(); n != 3 {
		t.Fatalf("loops = %d, want 3", n)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if n := h.ProbeLoops(); n != 0 {
		t.Fatalf("loops after Health.Close = %d, want 0", n)
	}
	pd := mustPool(t, "svc", []*Instance{inst(x)}, active)
	if n := h.ProbeLoops(); n != 0 {
		t.Fatalf("a pool built after Close started %d loops", n)
	}
	if st := pc.Stats(); st.Healthy != 3 {
		t.Errorf("pools keep serving after Close: %+v", st)
	}
	pc.Close()
	pd.Close()
	_ = h.Close() // idempotent
}

// TestProbeSettingsFollowRebuild checks that a rebuilt pool's active
// settings reach the running loop.
func TestProbeSettingsFollowRebuild(t *testing.T) {
	b := newBackend(t)
	slow := *fastProbes
	slow.Interval = Duration(time.Hour)
	h := NewHealth(HealthOptions{})
	defer h.Close()
	p1 := mustPool(t, "svc", []*Instance{{Addr: addrOf(b.Server)}}, PoolOptions{Health: h, Active: &slow})
	waitFor(t, "the first probe", func() bool { return b.good.Load() == 1 })
	fast := slow
	fast.Path = "/ready"
	p2 := mustPool(t, "svc", []*Instance{{Addr: addrOf(b.Server)}}, PoolOptions{Health: h, Active: &fast})
	p1.Close()
	defer p2.Close()
	waitFor(t, "a probe of the new path", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.lastReq.URL.Path == "/ready"
	})
	// Settings equal to the running ones are not stored again, so they do
	// not make the loop probe out of turn.
	p3 := mustPool(t, "svc", []*Instance{{Addr: addrOf(b.Server)}}, PoolOptions{Health: h, Active: &slow})
	defer p3.Close()
	cfg3 := p3.hosts[0].probe.Load().cfg.Load()
	if cfg3.path != "/hc" {
		t.Fatalf("settings = %+v, want the latest pool's", cfg3)
	}
	p4 := mustPool(t, "svc", []*Instance{{Addr: addrOf(b.Server)}}, PoolOptions{Health: h, Active: &slow})
	defer p4.Close()
	if cfg4 := p4.hosts[0].probe.Load().cfg.Load(); cfg4 != cfg3 {
		t.Errorf("unchanged settings replaced the loop's: %+v", cfg4)
	}
	if n := h.ProbeLoops(); n != 1 {
		t.Errorf("loops = %d, want 1", n)
	}
}
