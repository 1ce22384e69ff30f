package upstream

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// activeCfg is a pool's resolved active-health policy; forHost completes it
// with one address's URL.
type activeCfg struct {
	url                string
	path               string
	interval, timeout  time.Duration
	healthy, unhealthy int64
	// proto is the pool's protocol: probes speak it, as requests do.
	proto Protocol
	// tls is an h2 pool's TLS configuration (nil: the system's roots),
	// tlsKey identifies its contents (Pool.TLSKey).
	tls    *tls.Config
	tlsKey string
}

func (c *activeCfg) forHost(inst *Instance) *activeCfg {
	cp := *c
	scheme := "http://"
	if inst.TLS || c.proto == H2 {
		scheme = "https://"
	}
	cp.url = scheme + inst.Addr + c.path
	return &cp
}

// same reports whether c and o probe alike. The TLS configuration is
// compared by its key: a rebuilt pool has a new *tls.Config with the same
// contents.
func (c *activeCfg) same(o *activeCfg) bool {
	a, b := *c, *o
	a.tls, b.tls = nil, nil
	return a == b
}

// clientFor returns the client that probes in cfg's protocol: the shared
// HTTP/1.1 client, or (without an injected Transport) one per HTTP/2
// protocol and TLS key, built on first use and closed by Close.
func (h *Health) clientFor(cfg *activeCfg) *http.Client {
	if h.own == nil || cfg.proto == HTTP1 {
		return h.client
	}
	key := cfg.proto.String() + "|" + cfg.tlsKey
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.h2[key]; c != nil {
		return c
	}
	tr := newProbeTransport(nil)
	var ps http.Protocols
	if cfg.proto == H2C {
		ps.SetUnencryptedHTTP2(true)
	} else {
		ps.SetHTTP2(true)
		if cfg.tls != nil {
			tr.TLSClientConfig = cfg.tls.Clone()
		}
	}
	tr.Protocols = &ps
	c := &http.Client{Transport: tr, CheckRedirect: h.client.CheckRedirect}
	if h.h2 == nil {
		h.h2 = map[string]*http.Client{}
	}
	h.h2[key] = c
	return c
}

// newProbeTransport is the transport of active probes: one idle
// connection per address, no compression.
func newProbeTransport(tlsConf *tls.Config) *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsConf,
		TLSHandshakeTimeout:   5 * time.Second,
		MaxIdleConnsPerHost:   1,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: time.Minute,
		DisableCompression:    true,
	}
}

// prober is one address's probe loop. Only its goroutine writes the runs
// and down; Pick reads down.
type prober struct {
	cfg    atomic.Pointer[activeCfg]
	down   atomic.Bool
	okRun  int64
	badRun int64
	kick   chan struct{} // new settings: probe now
	cancel context.CancelFunc
	done   chan struct{}
}

// startProbe launches the loop for s. The caller holds h.mu.
func (h *Health) startProbe(s *hostState, cfg *activeCfg) {
	ctx, cancel := context.WithCancel(context.Background())
	pr := &prober{cancel: cancel, done: make(chan struct{}), kick: make(chan struct{}, 1)}
	pr.cfg.Store(cfg)
	s.probe.Store(pr)
	h.loops.Add(1)
	go h.runProbe(ctx, s.addr, pr)
}

func stopAll(ps []*prober) {
	for _, pr := range ps {
		pr.cancel()
	}
	for _, pr := range ps {
		<-pr.done
	}
}

// runProbe checks the address at once, then every interval, and at once
// again when a rebuilt pool changes the settings, until canceled. An instance starts healthy, so a reload never takes traffic away
// from an instance nobody has checked yet; UnhealthyThreshold failures in a
// row mark it down and HealthyThreshold successes in a row bring it back.
func (h *Health) runProbe(ctx context.Context, addr string, pr *prober) {
	defer close(pr.done)
	defer h.loops.Add(-1)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-pr.kick:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		cfg := pr.cfg.Load()
		ok, why := h.check(ctx, cfg)
		if ctx.Err() != nil {
			return
		}
		if ok {
			pr.badRun = 0
			pr.okRun++
			if pr.down.Load() && pr.okRun >= cfg.healthy {
				pr.down.Store(false)
				h.log.Info("instance passes its health checks again", "addr", addr, "url", cfg.url)
			}
		} else {
			pr.okRun = 0
			pr.badRun++
			if !pr.down.Load() && pr.badRun >= cfg.unhealthy {
				pr.down.Store(true)
				h.log.Warn("instance fails its health checks", "addr", addr, "url", cfg.url, "reason", why)
			}
		}
		t.Reset(cfg.interval)
	}
}

// check sends one probe. 2xx and 3xx are healthy.
func (h *Health) check(ctx context.Context, cfg *activeCfg) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.url, nil)
	if err != nil {
		return false, err.Error()
	}
	req.Header.Set("User-Agent", "graygate-health-check")
	resp, err := h.clientFor(cfg).Do(req)
	if err != nil {
		return false, err.Error()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 399 {
		return false, resp.Status
	}
	return true, ""
}
