package upstream

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestActiveHealthSpeaksThePoolsProtocol probes h2 and h2c instances that
// speak nothing else, as gRPC servers do. The probes used to go out as
// HTTP/1.1 in clear whatever the pool's protocol, so an h2 pool's healthy
// instances failed every probe (the TLS server answered 400 to plain
// text) and were taken out: a 503 for every request.
func TestActiveHealthSpeaksThePoolsProtocol(t *testing.T) {
	tests := []struct {
		name  string
		proto Protocol
	}{
		{"h2", H2},
		{"h2c", H2C},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var good, bad atomic.Int64
			var status atomic.Int32
			status.Store(http.StatusOK)
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.ProtoMajor != 2 || r.URL.Path != "/hc" || (tt.proto == H2) != (r.TLS != nil) {
					bad.Add(1)
					w.WriteHeader(http.StatusBadRequest)
					return
				}
				code := int(status.Load())
				if code == http.StatusOK {
					good.Add(1)
				}
				w.WriteHeader(code)
			}))
			var ps http.Protocols
			var conf *tls.Config
			key := ""
			if tt.proto == H2 {
				ps.SetHTTP2(true) // no HTTP/1.1 over TLS either
				srv.Config.Protocols = &ps
				srv.TLS = &tls.Config{NextProtos: []string{"h2"}}
				srv.StartTLS()
				roots := x509.NewCertPool()
				roots.AddCert(srv.Certificate())
				// The data plane's settings: the pool's CA, and a
				// server name the certificate has (httptest's is
				// example.com), not the address's host.
				conf = &tls.Config{RootCAs: roots, ServerName: "example.com", MinVersion: tls.VersionTLS12}
				key = "sni=example.com;ca=test"
			} else {
				ps.SetUnencryptedHTTP2(true) // HTTP/2 with prior knowledge only
				srv.Config.Protocols = &ps
				srv.Start()
			}
			t.Cleanup(srv.Close)
			addr := strings.TrimPrefix(strings.TrimPrefix(srv.URL, "https://"), "http://")

			h := NewHealth(HealthOptions{})
			defer h.Close()
			p := mustPool(t, "grpc", []*Instance{{Addr: addr}}, PoolOptions{Health: h, Active: fastProbes, Protocol: tt.proto, TLS: conf, TLSKey: key})
			defer p.Close()
			if p.Protocol != tt.proto || p.TLS != conf || p.TLSKey != key {
				t.Fatalf("pool transport = %v %p %q, want %v %p %q", p.Protocol, p.TLS, p.TLSKey, tt.proto, conf, key)
			}
			waitFor(t, "five passing probes", func() bool { return good.Load() >= 5 })
			if st := p.Stats(); st.Healthy != 1 || st.Failing != 0 {
				t.Errorf("after %d passing probes: %+v", good.Load(), st)
			}
			if n := bad.Load(); n != 0 {
				t.Errorf("%d probes came in the wrong protocol", n)
			}
			// The probes still judge the answer.
			status.Store(http.StatusServiceUnavailable)
			waitFor(t, "the instance to fail its checks", func() bool { return p.Stats().Failing == 1 })
			status.Store(http.StatusOK)
			waitFor(t, "the instance to pass again", func() bool { return p.Stats().Healthy == 1 })
		})
	}
}

// TestActiveHealthTLSKeyKeepsTheLoop rebuilds an h2 pool with a new but
// equal *tls.Config, as every reload and discovery update does: the probe
// loop keeps its settings and is not kicked into an extra probe.
func TestActiveHealthTLSKeyKeepsTheLoop(t *testing.T) {
	a := &activeCfg{path: "/hc", proto: H2, tls: &tls.Config{ServerName: "x"}, tlsKey: "sni=x"}
	b := *a
	b.tls = &tls.Config{ServerName: "x"}
	if !a.same(&b) {
		t.Error("equal settings with a new *tls.Config differ")
	}
	b.tlsKey = "sni=y"
	if a.same(&b) {
		t.Error("a new TLS key must count as a change")
	}
}
