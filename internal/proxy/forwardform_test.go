package proxy

import (
	"io"
	"net/http"
	"testing"

	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/upstream"
)

// TestForwardedFormOnEveryPath: a request's target and host reach the
// upstream in the same form whichever listener the client came in on
// (HTTP/1.1 or h2c) and whichever protocol the pool speaks (http1 or h2c),
// four paths through three transports, each through the real listener:
//
//   - a path holding bytes net/url escapes itself ('"', '\') is sent as
//     the client sent it; it went to the upstream as "/a%22b%5C" from an
//     HTTP/2 client and to an h2c pool, and as sent only on the HTTP/1.1
//     codec's own path;
//   - an empty query keeps its "?" ("/q?"), which net/url drops unless
//     told;
//   - a Host with a percent-escape ("issu%8261.com", which Go's server
//     takes) goes upstream as it came; the HTTP/1.1 codec sent fasthttp's
//     decoded host, a byte past ASCII;
//   - a Host with an IPv6 zone ("[::1%25en0]:80", which Go's server takes)
//     reaches the upstream without the zone, in Host and X-Forwarded-Host
//     alike (RFC 6874 section 4); the HTTP/1.1 codec sent the zone decoded,
//     "[::1%en0]:80", not a valid host, and the HTTP/2 listener sent it in
//     X-Forwarded-Host as it came.
func TestForwardedFormOnEveryPath(t *testing.T) {
	seen := make(chan string, 4)
	note := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.RequestURI + " Host=" + r.Host + " XFH=" + r.Header.Get("X-Forwarded-Host")
		_, _ = io.WriteString(w, "ok")
	})
	h1 := h2cServer(t, note) // speaks HTTP/1.1 too
	for _, pool := range []struct {
		name  string
		proto upstream.Protocol
	}{{"http1 pool", upstream.HTTP1}, {"h2c pool", upstream.H2C}} {
		p := poolOf("stable", addrOf(h1))
		p.Protocol = pool.proto
		_, addr := startProxyWith(t, Options{}, staticDecider{Group: "stable", Target: p}, listener.Protocols{H2C: true})
		for _, tc := range []struct {
			target, host, want string
		}{
			{`/with_"quotes"/a\b?q="x"`, "a", `/with_"quotes"/a\b?q="x" Host=a XFH=a`},
			{`/a%2Fb/%41"`, "a", `/a%2Fb/%41" Host=a XFH=a`},
			{"/z", "[::1%25en0]:80", "/z Host=[::1]:80 XFH=[::1]:80"},
			{"/q?", "a", "/q? Host=a XFH=a"},
			{"/h", "issu%8261.com", "/h Host=issu%8261.com XFH=issu%8261.com"},
		} {
			resp, body := rawExchange(t, addr, http.MethodGet, "GET "+tc.target+" HTTP/1.1\r\nHost: "+tc.host+"\r\n\r\n")
			if resp.StatusCode != http.StatusOK || body != "ok" {
				t.Errorf("%s, HTTP/1.1 client, %s: status %d, body %q", pool.name, tc.target, resp.StatusCode, body)
			} else if got := <-seen; got != tc.want {
				t.Errorf("%s, HTTP/1.1 client: the upstream got %q, want %q", pool.name, got, tc.want)
			}
			fields := [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", tc.host}, {":path", tc.target}}
			if status, body, err := h2Exchange(t, addr, fields, nil); err != nil || status != http.StatusOK || body != "ok" {
				t.Errorf("%s, HTTP/2 client, %s: status %d, body %q (%v)", pool.name, tc.target, status, body, err)
			} else if got := <-seen; got != tc.want {
				t.Errorf("%s, HTTP/2 client: the upstream got %q, want %q", pool.name, got, tc.want)
			}
		}
	}
}
