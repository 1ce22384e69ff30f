package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/identity"
	"github.com/graygate/graygate/internal/router"
)

// TestHopByHopRequest sends raw requests so that the test, not a client
// library, decides the header bytes.
func TestHopByHopRequest(t *testing.T) {
	backend, _ := echoBackend(t, "stable")
	tests := []struct {
		name    string
		trusted bool
		headers string
		absent  []string          // headers the upstream must not see
		want    map[string]string // headers the upstream must see, with these values
	}{
		{
			name: "standard hop-by-hop headers",
			headers: "Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\n" +
				"Te: trailers\r\nTrailer: X-T\r\nUpgrade: h2c\r\nConnection: keep-alive, Upgrade\r\nX-Keep: 1\r\n",
			absent: []string{"Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Te", "Trailer", "Upgrade", "Connection"},
			want:   map[string]string{"X-Keep": "1"},
		},
		{
			name:    "headers named in Connection",
			headers: "Connection: X-Foo, x-bar\r\nX-Foo: 1\r\nX-Bar: 2\r\nX-Baz: 3\r\n",
			absent:  []string{"X-Foo", "X-Bar"},
			want:    map[string]string{"X-Baz": "3"},
		},
		{
			name:    "Connection cannot strip the gateway's headers",
			headers: "Connection: X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-Host, X-Gray-Tag\r\nX-Forwarded-For: 6.6.6.6\r\nX-Gray-Tag: evil\r\n",
			want: map[string]string{
				"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http",
				"X-Forwarded-Host": "app.test", "X-Gray-Tag": "gray",
			},
		},
		{
			name:    "trusted peer naming X-Forwarded-For in Connection loses its list",
			trusted: true,
			headers: "Connection: X-Forwarded-For\r\nX-Forwarded-For: 6.6.6.6\r\n",
			want:    map[string]string{"X-Forwarded-For": "127.0.0.1"},
		},
		{
			name:    "Expect goes on to the upstream with the streamed body",
			headers: "Expect: 100-continue\r\nContent-Length: 2\r\n",
			want:    map[string]string{"Expect": "100-continue"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := Options{}
			if tt.trusted {
				opts.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
			}
			_, addr := startProxy(t, opts, staticDecider{
				Group: "gray", Tag: "gray", Target: poolOf("stable", addrOf(backend)),
			})
			raw := "GET /x HTTP/1.1\r\nHost: app.test\r\n" + tt.headers + "\r\n"
			if strings.Contains(tt.headers, "Content-Length: 2") {
				raw = strings.Replace(raw, "GET", "POST", 1) + "ok"
			}
			resp, body := rawExchange(t, addr, "GET", raw)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, body %q", resp.StatusCode, body)
			}
			var e echo
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatal(err)
			}
			for _, h := range tt.absent {
				if v, ok := e.Header[http.CanonicalHeaderKey(h)]; ok {
					t.Errorf("upstream saw %s: %q, want it removed", h, v)
				}
			}
			for h, want := range tt.want {
				if got := strings.Join(e.Header.Values(h), ","); got != want {
					t.Errorf("upstream %s = %q, want %q", h, got, want)
				}
			}
		})
	}
}

func TestHopByHopResponse(t *testing.T) {
	backend := rawBackend(t, func(_ *http.Request, w *bufio.Writer) {
		fmt.Fprint(w, "HTTP/1.1 200 OK\r\n"+
			"Connection: X-Secret, keep-alive\r\nX-Secret: s\r\nKeep-Alive: timeout=5\r\n"+
			"Proxy-Authenticate: Basic\r\nUpgrade: foo\r\nTrailer: X-T\r\nX-Public: p\r\n"+
			"X-Gray-Group: forged\r\nX-Gray-Rule: forged\r\n"+
			"Set-Cookie: a=1; Path=/\r\nSet-Cookie: b=2\r\nServer: backend/1\r\n"+
			"Content-Length: 2\r\n\r\nhi")
	})
	_, addr := startProxy(t, Options{}, staticDecider{Group: "stable", Target: poolOf("stable", backend)})
	resp, body := rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	if body != "hi" {
		t.Errorf("body = %q, want %q", body, "hi")
	}
	for _, h := range []string{"X-Secret", "Keep-Alive", "Proxy-Authenticate", "Upgrade", "Trailer", "X-Gray-Rule"} {
		if v := resp.Header.Get(h); v != "" {
			t.Errorf("client saw %s: %q, want it removed", h, v)
		}
	}
	if c := resp.Header.Get("Connection"); c != "" {
		t.Errorf("Connection = %q, want none", c)
	}
	checks := map[string]string{"X-Public": "p", "X-Gray-Group": "stable", "Server": "backend/1"}
	for h, want := range checks {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	if got := resp.Header.Values("Set-Cookie"); len(got) != 2 || got[0] != "a=1; Path=/" || got[1] != "b=2" {
		t.Errorf("Set-Cookie = %q, want both upstream cookies unchanged", got)
	}
}

func TestForwardedHeaders(t *testing.T) {
	backend, _ := echoBackend(t, "stable")
	tests := []struct {
		name     string
		trusted  []string
		headers  string
		wantIP   string
		wantXFF  string
		wantXFP  string
		wantXFH  string
		wantFwd  string
		wantReal string
	}{
		{
			name:    "untrusted peer: spoofed headers dropped",
			headers: "X-Forwarded-For: 1.2.3.4\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil.test\r\nForwarded: for=1.2.3.4\r\nX-Real-Ip: 1.2.3.4\r\n",
			wantIP:  "127.0.0.1", wantXFF: "127.0.0.1", wantXFP: "http", wantXFH: "app.test",
		},
		{
			name:    "trusted peer: list extended, proto and host kept",
			trusted: []string{"127.0.0.1/32", "10.0.0.0/8"},
			headers: "X-Forwarded-For: 1.2.3.4, 10.0.0.1\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: www.test\r\nForwarded: for=1.2.3.4\r\nX-Real-Ip: 1.2.3.4\r\n",
			wantIP:  "1.2.3.4", wantXFF: "1.2.3.4, 10.0.0.1, 127.0.0.1", wantXFP: "https", wantXFH: "www.test",
			wantFwd: "for=1.2.3.4", wantReal: "1.2.3.4",
		},
		{
			name:    "trusted peer: several XFF headers are one list",
			trusted: []string{"127.0.0.1/32"},
			headers: "X-Forwarded-For: 9.9.9.9\r\nX-Forwarded-For: 8.8.8.8\r\n",
			wantIP:  "8.8.8.8", wantXFF: "9.9.9.9, 8.8.8.8, 127.0.0.1", wantXFP: "http", wantXFH: "app.test",
		},
		{
			name:    "trusted peer without forwarding headers",
			trusted: []string{"127.0.0.0/8"},
			wantIP:  "127.0.0.1", wantXFF: "127.0.0.1", wantXFP: "http", wantXFH: "app.test",
		},
		{
			name:    "all hops trusted: leftmost is the client",
			trusted: []string{"127.0.0.1/32", "10.0.0.0/8"},
			headers: "X-Forwarded-For: 10.1.1.1, 10.2.2.2\r\n",
			wantIP:  "10.1.1.1", wantXFF: "10.1.1.1, 10.2.2.2, 127.0.0.1", wantXFP: "http", wantXFH: "app.test",
		},
		{
			name:    "garbage stops the walk at the last good hop",
			trusted: []string{"127.0.0.1/32", "10.0.0.0/8"},
			headers: "X-Forwarded-For: 5.5.5.5, not-an-ip, 10.0.0.7\r\n",
			wantIP:  "10.0.0.7", wantXFF: "5.5.5.5, not-an-ip, 10.0.0.7, 127.0.0.1", wantXFP: "http", wantXFH: "app.test",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts Options
			for _, s := range tt.trusted {
				opts.TrustedProxies = append(opts.TrustedProxies, netip.MustParsePrefix(s))
			}
			var gotIP atomic.Value
			pool := poolOf("stable", addrOf(backend))
			_, addr := startProxy(t, opts, deciderFunc(func(r attr.Request) router.Decision {
				gotIP.Store(r.ClientIP().String())
				return router.Decision{Group: "stable", Target: pool}
			}))
			resp, body := rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: app.test\r\n"+tt.headers+"\r\n")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var e echo
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatal(err)
			}
			if ip := gotIP.Load(); ip != tt.wantIP {
				t.Errorf("ClientIP() = %v, want %s", ip, tt.wantIP)
			}
			for h, want := range map[string]string{
				"X-Forwarded-For": tt.wantXFF, "X-Forwarded-Proto": tt.wantXFP, "X-Forwarded-Host": tt.wantXFH,
				"Forwarded": tt.wantFwd, "X-Real-Ip": tt.wantReal,
			} {
				if got := strings.Join(e.Header.Values(h), "|"); got != want {
					t.Errorf("upstream %s = %q, want %q", h, got, want)
				}
			}
		})
	}
}

func TestHost(t *testing.T) {
	backend, _ := echoBackend(t, "stable")
	tests := []struct {
		name         string
		upstreamHost bool
		requestLine  string
		host         string
		wantHost     string
		wantURI      string
	}{
		{name: "client Host kept", requestLine: "GET /p?q=1 HTTP/1.1", host: "app.test", wantHost: "app.test", wantURI: "/p?q=1"},
		{name: "UpstreamHost sends the instance address", upstreamHost: true, requestLine: "GET /p HTTP/1.1", host: "app.test", wantHost: addrOf(backend), wantURI: "/p"},
		{name: "absolute-form becomes origin-form", requestLine: "GET http://abs.test/a/b?c HTTP/1.1", host: "ignored.test", wantHost: "abs.test", wantURI: "/a/b?c"},
		{name: "absolute-form without path", requestLine: "GET http://abs.test?c=1 HTTP/1.1", host: "abs.test", wantHost: "abs.test", wantURI: "/?c=1"},
		{name: "raw path is not normalised", requestLine: "GET /a/../b//c%2Fd HTTP/1.1", host: "app.test", wantHost: "app.test", wantURI: "/a/../b//c%2Fd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, addr := startProxy(t, Options{}, staticDecider{
				Group: "stable", Target: poolOf("stable", addrOf(backend)), UpstreamHost: tt.upstreamHost,
			})
			resp, body := rawExchange(t, addr, "GET", tt.requestLine+"\r\nHost: "+tt.host+"\r\n\r\n")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var e echo
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatal(err)
			}
			if e.Host != tt.wantHost {
				t.Errorf("upstream Host = %q, want %q", e.Host, tt.wantHost)
			}
			if e.URI != tt.wantURI {
				t.Errorf("upstream request target = %q, want %q", e.URI, tt.wantURI)
			}
		})
	}
}

func TestDecisionHeaders(t *testing.T) {
	gray, _ := echoBackend(t, "gray")
	tests := []struct {
		name       string
		d          router.Decision
		wantHeader map[string]string
		wantCookie string
		wantTag    string
	}{
		{
			name: "rule, group, tag",
			d:    router.Decision{Rule: "r1", Group: "gray", Tag: "gray"},
			wantHeader: map[string]string{
				"X-Gray-Rule": "r1", "X-Gray-Group": "gray", "X-Gray-Degraded": "", "X-Backend": "gray",
			},
			wantTag: "gray",
		},
		{
			name:       "no rule, degraded",
			d:          router.Decision{Group: "stable", Degraded: router.DegradedBreaker},
			wantHeader: map[string]string{"X-Gray-Rule": "", "X-Gray-Group": "stable", "X-Gray-Degraded": "breaker"},
		},
		{
			name: "issued identity sets the cookie",
			d: router.Decision{Rule: "r2", Group: "exp-a", Identity: identity.ID{
				Value: "anon-123", Source: "anonymous-cookie", Issued: true, Cookie: "gg_uid",
			}},
			wantHeader: map[string]string{"X-Gray-Group": "exp-a"},
			wantCookie: "gg_uid=anon-123; Path=/; Max-Age=31536000; HttpOnly; SameSite=Lax",
		},
		{
			name:       "resolved identity sets no cookie",
			d:          router.Decision{Group: "stable", Identity: identity.ID{Value: "u1", Source: "header:X-User-Id", Cookie: "gg_uid"}},
			wantHeader: map[string]string{"X-Gray-Group": "stable"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.d
			d.Target = poolOf("gray", addrOf(gray))
			_, addr := startProxy(t, Options{}, staticDecider(d))
			req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
			req.Header.Set("X-Gray-Tag", "inbound")
			resp, e := getEcho(t, httpClient(t), req)
			for h, want := range tt.wantHeader {
				if got := resp.Header.Get(h); got != want {
					t.Errorf("%s = %q, want %q", h, got, want)
				}
			}
			cookies := resp.Header.Values("Set-Cookie")
			switch {
			case tt.wantCookie == "" && len(cookies) != 0:
				t.Errorf("Set-Cookie = %q, want none", cookies)
			case tt.wantCookie != "" && (len(cookies) != 1 || cookies[0] != tt.wantCookie):
				t.Errorf("Set-Cookie = %q, want %q", cookies, tt.wantCookie)
			}
			if got := strings.Join(e.Header.Values("X-Gray-Tag"), ","); got != tt.wantTag {
				t.Errorf("upstream X-Gray-Tag = %q, want %q", got, tt.wantTag)
			}
		})
	}
}

// TestRequestView checks what the Decider sees through the attr.Request.
func TestRequestView(t *testing.T) {
	backend, _ := echoBackend(t, "stable")
	pool := poolOf("stable", addrOf(backend))
	type seen struct {
		method, host, path, ua, uid, cookie, query string
		hasEmpty, hasMissing, hasFlag              bool
	}
	got := make(chan seen, 1)
	_, addr := startProxy(t, Options{}, deciderFunc(func(r attr.Request) router.Decision {
		var s seen
		s.method, s.host, s.path = r.Method(), r.Host(), r.Path()
		s.ua, _ = r.Header("user-agent")
		s.uid, _ = r.Header("X-User-Id")
		_, s.hasEmpty = r.Header("X-Empty")
		_, s.hasMissing = r.Header("X-Missing")
		s.cookie, _ = r.Cookie("uid")
		s.query, _ = r.Query("q")
		_, s.hasFlag = r.Query("flag")
		got <- seen{
			method: strings.Clone(s.method), host: strings.Clone(s.host), path: strings.Clone(s.path),
			ua: strings.Clone(s.ua), uid: strings.Clone(s.uid), cookie: strings.Clone(s.cookie),
			query: strings.Clone(s.query), hasEmpty: s.hasEmpty, hasMissing: s.hasMissing, hasFlag: s.hasFlag,
		}
		return router.Decision{Group: "stable", Target: pool}
	}))
	resp, body := rawExchange(t, addr, "GET", "GET /a/%7Eb/./c?q=x%20y+z&flag HTTP/1.1\r\nHost: App.test\r\n"+
		"User-Agent: ua/1\r\nX-User-Id: u-42\r\nX-Empty:\r\nCookie: a=1; uid=hello+w%6Frld%zz; uid=second\r\n\r\n")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	s := <-got
	want := seen{
		method: "GET", host: "app.test", path: "/a/~b/c", ua: "ua/1", uid: "u-42",
		cookie: "hello world%zz", query: "x y z", hasEmpty: true, hasFlag: true,
	}
	if s != want {
		t.Errorf("Decider saw %+v\nwant         %+v", s, want)
	}
	var e echo
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatal(err)
	}
	if c := e.Header.Get("Cookie"); c != "a=1; uid=hello+w%6Frld%zz; uid=second" {
		t.Errorf("upstream Cookie = %q, want the client's bytes unchanged", c)
	}
}

// TestHandlerInBufferingServer runs Handler in a fasthttp.Server of the
// caller's own, without StreamRequestBody: bodies are then in memory.
func TestHandlerInBufferingServer(t *testing.T) {
	backend, _ := echoBackend(t, "stable")
	p := New(Options{}, staticDecider{Group: "stable", Target: poolOf("stable", addrOf(backend))}, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: p.Handler}
	go srv.Serve(ln) //nolint:errcheck // returns on Shutdown
	defer srv.Shutdown()
	req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+"/b", strings.NewReader("payload"))
	resp, e := getEcho(t, httpClient(t), req)
	if resp.StatusCode != http.StatusOK || e.Body != "payload" || e.CL != int64(len("payload")) {
		t.Errorf("status %d, upstream body %q (Content-Length %d), want 200 payload (7)", resp.StatusCode, e.Body, e.CL)
	}
}
