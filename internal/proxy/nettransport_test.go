package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/upstream"
)

// TestNetTransportsPrunedOnReload: the transport of an h2 pool is kept
// per TLS setting (its CA and server name), and a reload drops those no
// request asked for since the reload before, with their idle
// connections, so that settings no pool has any more (a rotated CA file
// is a new one each time) do not pile up for as long as the gateway
// runs. A transport in use is kept across reloads, connection and all.
func TestNetTransportsPrunedOnReload(t *testing.T) {
	// Each backend counts the connections it accepted and closed.
	type backend struct {
		pool           *upstream.Pool
		opened, closed atomic.Int64
	}
	newBackend := func(name string) *backend {
		b := &backend{}
		srv := httptest.NewUnstartedServer(echoHandler(name))
		srv.EnableHTTP2 = true
		srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				b.opened.Add(1)
			case http.StateClosed:
				b.closed.Add(1)
			}
		}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		roots := x509.NewCertPool()
		roots.AddCert(srv.Certificate())
		b.pool = poolOf(name, addrOf(srv))
		b.pool.Protocol = upstream.H2
		b.pool.TLS = &tls.Config{RootCAs: roots, ServerName: "example.com"}
		b.pool.TLSKey = "sni=example.com;ca=" + name
		return b
	}
	a, b := newBackend("a"), newBackend("b")
	var cur atomic.Pointer[upstream.Pool]
	cur.Store(a.pool)
	d := deciderFunc(func(attr.Request) router.Decision {
		return router.Decision{Rule: "r", Group: "g", Target: cur.Load()}
	})
	opts := Options{}
	p, gw := startProxyWith(t, opts, d, listener.Protocols{H2C: true})
	c := httpClient(t)
	get := func(want string) {
		t.Helper()
		code, body := fetch(t, c, "GET", "http://"+gw+"/x", "")
		if code != http.StatusOK || !strings.Contains(body, `"name":"`+want+`"`) {
			t.Fatalf("GET: %d %q, want %s's answer", code, body, want)
		}
	}
	keys := func() map[string]bool {
		p.nets.mu.Lock()
		defer p.nets.mu.Unlock()
		m := map[string]bool{}
		for k := range p.nets.m {
			m[k.tlsKey] = true
		}
		return m
	}
	reload := func() {
		t.Helper()
		if restart := p.Reconfigure(opts); len(restart) != 0 {
			t.Fatalf("Reconfigure: restart required for %v", restart)
		}
	}

	get("a")
	reload() // a was asked for before it: kept
	if k := keys(); !k[a.pool.TLSKey] {
		t.Fatalf("after a reload, a's transport, used just before, is gone: %v", k)
	}
	cur.Store(b.pool) // the config now has b's setting only
	get("b")
	reload()
	if k := keys(); k[a.pool.TLSKey] || !k[b.pool.TLSKey] || len(k) != 1 {
		t.Errorf("after a reload with no request for a since the previous one: transports %v, want b's only", k)
	}
	waitFor(t, 5*time.Second, "a's idle connection to close", func() bool { return a.closed.Load() == a.opened.Load() })
	get("b")
	reload()
	get("b")
	if n, closed := b.opened.Load(), b.closed.Load(); n != 1 || closed != 0 {
		t.Errorf("b accepted %d connections and closed %d across two reloads, want 1 kept open", n, closed)
	}
}
