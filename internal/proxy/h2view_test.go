package proxy

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/router"
)

// seen is what a decider read of a request, through attr.Request.
type seen struct {
	method, host, path, header, cookie, cookie2, query, query2 string
	hasQuery, hasHeader                                        bool
	ip                                                         netip.Addr
	trusted                                                    bool
}

// see records what r shows. The view's strings alias buffers that the
// next request on the connection reuses, so they are copied.
func see(r attr.Request) seen {
	c := strings.Clone
	s := seen{method: c(r.Method()), host: c(r.Host()), path: c(r.Path()), ip: r.ClientIP(), trusted: r.PeerTrusted()}
	s.header, s.hasHeader = r.Header("x-user-id")
	s.cookie, _ = r.Cookie("user_id")
	s.cookie2, _ = r.Cookie("b")
	s.query, s.hasQuery = r.Query("a")
	s.query2, _ = r.Query("c")
	s.header, s.cookie, s.cookie2, s.query, s.query2 = c(s.header), c(s.cookie), c(s.cookie2), c(s.query), c(s.query2)
	return s
}

// TestViewsAgree: the HTTP/1.1 and the HTTP/2 codec show the decision the
// same request the same way — path normalisation, query and cookie
// decoding, headers, trust and the client address behind a trusted proxy —
// through the real listeners.
func TestViewsAgree(t *testing.T) {
	backend := h2cBackend(t, "b")
	var mu sync.Mutex
	got := map[string]seen{}
	d := deciderFunc(func(r attr.Request) router.Decision {
		s := see(r)
		id, _ := r.Header("x-case")
		mu.Lock()
		got[strings.Clone(id)] = s
		mu.Unlock()
		return router.Decision{Target: poolOf("b", addrOf(backend))}
	})
	opts := Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	_, addr := startProxyWith(t, opts, d, listener.Protocols{H2C: true})
	cases := []struct {
		target  string
		headers [][2]string
	}{
		{"/plain?a=1", nil},
		{"/a/../b/./c?a=x%20y&a=2&c", [][2]string{{"X-User-Id", "u-1"}}},
		{"/%7Euser/%2e%2e/x?a=%E7%94%A8", [][2]string{{"Cookie", "user_id=%E7%94%A8%E6%88%B7; b=1+2"}}},
		{"/x//double//slash/?a=&c=3", [][2]string{{"Cookie", "a=1"}, {"Cookie", "user_id=x"}, {"X-User-Id", ""}}},
		{"/xff", [][2]string{{"X-Forwarded-For", "203.0.113.9, 127.0.0.2"}, {"X-User-Id", "v"}}},
		{"/Case/Kept?A=1&a=2", [][2]string{{"Cookie", "user_id = spaced ; b"}}},
		// A field value is what lies between the optional whitespace
		// around it (RFC 9110 section 5.5): HTTP/1.1's parser drops it,
		// and HTTP/2 must show the same value.
		{"/ows", [][2]string{{"X-User-Id", " \tpadded \t"}}},
		// A path that starts with "//" is a path, not an authority.
		{"//zzz/echo", nil},
		{"//g/x", nil},
		// Even when it holds "://": fasthttp alone read "evil.test:" as
		// the host and /x/admin as the path.
		{"//evil.test://x/admin?a=1", nil},
	}
	h2 := h2cClient(t)
	for i, c := range cases {
		for _, proto := range []string{"h1", "h2"} {
			id := fmt.Sprintf("%s-%d", proto, i)
			if proto == "h1" {
				raw := "GET " + c.target + " HTTP/1.1\r\nHost: views.test\r\nX-Case: " + id + "\r\n"
				for _, h := range c.headers {
					raw += h[0] + ": " + h[1] + "\r\n"
				}
				resp, _ := rawExchange(t, addr, "GET", raw+"\r\n")
				if resp.StatusCode != 200 {
					t.Fatalf("%s: status %d", id, resp.StatusCode)
				}
				continue
			}
			u, _ := url.Parse("http://" + addr)
			u.Opaque = c.target
			if q := strings.IndexByte(c.target, '?'); q >= 0 {
				u.Opaque, u.RawQuery = c.target[:q], c.target[q+1:]
			}
			if strings.HasPrefix(u.Opaque, "//") {
				// An opaque "//x" would be sent as an authority.
				u.Opaque, u.Path = "", u.Opaque
			}
			req := &http.Request{Method: "GET", URL: u, Host: "views.test", Header: http.Header{"X-Case": {id}}}
			for _, h := range c.headers {
				req.Header.Add(h[0], h[1])
			}
			resp, err := h2.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			resp.Body.Close()
		}
		mu.Lock()
		h1, h2v := got[fmt.Sprintf("h1-%d", i)], got[fmt.Sprintf("h2-%d", i)]
		mu.Unlock()
		if h1 != h2v {
			t.Errorf("%s: the views differ\nHTTP/1.1 %+v\nHTTP/2   %+v", c.target, h1, h2v)
		}
		if h1.path == "" || !h1.ip.IsValid() || !h1.trusted {
			t.Errorf("%s: seen %+v", c.target, h1)
		}
	}
	if s := got[fmt.Sprintf("h1-%d", len(cases)-1)]; s.host != "views.test" || s.path != "/evil.test:/x/admin" || s.query != "1" {
		t.Errorf("//evil.test://x/admin?a=1 was seen at host %q, path %q, a=%q; want views.test, /evil.test:/x/admin, 1", s.host, s.path, s.query)
	}
	if s := got["h2-4"]; s.ip != netip.MustParseAddr("203.0.113.9") {
		t.Errorf("client IP behind trusted proxies = %v, want 203.0.113.9", s.ip)
	}
}
