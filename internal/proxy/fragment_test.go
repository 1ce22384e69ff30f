package proxy

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/router"
)

// TestFragmentIsNotForwarded: a request target has no fragment (RFC 9112
// §3.2), but Go's server and llhttp accept one. The decision parses the
// target as a URI and never sees the fragment, so the upstream must not
// either: "/p#x?user_id=1" is path /p with no query to the decision, and
// was path "/p#x" with user_id=1 to a Go upstream, which routed on what
// the gateway never saw. The fragment is dropped, as nginx drops it.
func TestFragmentIsNotForwarded(t *testing.T) {
	backend, _ := echoBackend(t, "stable")
	type seen struct{ path, host, q string }
	var mu sync.Mutex
	var got seen
	d := deciderFunc(func(r attr.Request) router.Decision {
		q, _ := r.Query("q")
		mu.Lock()
		got = seen{r.Path(), r.Host(), q}
		mu.Unlock()
		return router.Decision{Group: "stable", Target: poolOf("stable", addrOf(backend))}
	})
	_, h1 := startProxy(t, Options{}, d)
	_, h2 := startProxyWith(t, Options{}, d, listener.Protocols{H2C: true})
	tests := []struct {
		target, wantURI, wantQ, wantHost string
		wantPath                         string // the decision's, when normalising changes it
	}{
		{"/p?q=1#frag", "/p?q=1", "1", "app.test", ""},
		{"/p#frag?q=1", "/p", "", "app.test", ""},
		{"/p#", "/p", "", "app.test", ""},
		{"/a/b#/../../c", "/a/b", "", "app.test", ""},
		{"http://abs.test/p?q=2#f", "/p?q=2", "2", "abs.test", ""},
		// (A '#' right after the host, "http://abs.test#f/p", is in the
		// authority for Go's server, which refuses it, and so does the
		// gateway: TestGuard.)
		{"http://abs.test/#f/p?q=3", "/", "", "abs.test", ""},
		{"http://abs.test?q=4#f", "/?q=4", "4", "abs.test", ""},
		// An origin-form path that holds "://" is a path: the decision and
		// the upstream see the client's Host, and the same path.
		{"//evil.test://x/admin?q=5#f", "//evil.test://x/admin?q=5", "5", "app.test", "/evil.test:/x/admin"},
	}
	for _, tt := range tests {
		wantPath, _, _ := strings.Cut(tt.wantURI, "?")
		if tt.wantPath != "" {
			wantPath = tt.wantPath
		}
		t.Run("http/1.1 "+tt.target, func(t *testing.T) {
			resp, body := rawExchange(t, h1, "GET", "GET "+tt.target+" HTTP/1.1\r\nHost: app.test\r\n\r\n")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var e echo
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			s := got
			mu.Unlock()
			if e.URI != tt.wantURI || s.path != wantPath || s.q != tt.wantQ || e.Host != tt.wantHost || s.host != tt.wantHost {
				t.Errorf("upstream saw %q at %q, the decision %s q=%q at %q; want %q, q=%q, at %q",
					e.URI, e.Host, s.path, s.q, s.host, tt.wantURI, tt.wantQ, tt.wantHost)
			}
		})
		if tt.target[0] != '/' {
			continue // HTTP/2 has no absolute form: the authority is :authority
		}
		if strings.HasPrefix(tt.target, "//") {
			continue // an opaque "//x" is sent as an authority; TestViewsAgree sends it as a path
		}
		t.Run("h2c "+tt.target, func(t *testing.T) {
			// Opaque is sent as the :path, fragment and all.
			req := &http.Request{Method: "GET", Host: "app.test", Header: http.Header{},
				URL: &url.URL{Scheme: "http", Host: h2, Opaque: tt.target}}
			resp, err := h2cClient(t).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			e := decodeEcho(t, resp)
			mu.Lock()
			s := got
			mu.Unlock()
			if e.URI != tt.wantURI || s.path != wantPath || s.q != tt.wantQ {
				t.Errorf("upstream saw %q, the decision %s q=%q; want %q, q=%q", e.URI, s.path, s.q, tt.wantURI, tt.wantQ)
			}
		})
	}
}
