package admin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/graygate/graygate/internal/proxy"
	"github.com/graygate/graygate/internal/router"
)

// liveDecision is what one request got, or what explain says it gets.
type liveDecision struct {
	Rule, Group, Target, Tag, Degraded, UserID, Source string
}

// decisionBackends start the four upstreams of explainSnapshot. Each
// answers with its name and the X-Gray-Tag it received.
func decisionBackends(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range []string{"stable", "gray", "a", "b"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Backend", name)
			w.Header().Set("X-Seen-Tag", strings.Join(r.Header.Values("X-Gray-Tag"), ","))
		}))
		t.Cleanup(srv.Close)
		out[name] = srv.Listener.Addr().String()
	}
	return out
}

// gateway is one data plane with its admin API: a proxy serving a real
// loopback listener and an in-memory one, whose connections come from any
// peer address the test names.
type gateway struct {
	p   *proxy.Proxy
	api *Server
	tcp string
	mem *fasthttputil.InmemoryListener
}

// TestExplainEqualsLive is the property that explain is live traffic:
// for 10,000 random requests (seeded) with trusted and untrusted peers,
// X-Forwarded-For chains, region and tag headers, X-Gray-Tag, ids from
// headers, cookies and queries, and odd paths, the admin API's explain
// answer equals the decision the data plane made for the same request
// (rule, group, target, tag, degraded, identity). Every request goes
// through a real proxy: the first 400 over TCP on 127.0.0.1 (to a proxy
// that trusts 127.0.0.1 and one that does not), the rest over in-memory
// connections with the peer address the request names. What the upstream
// received and the decision headers are checked against the decision too.
func TestExplainEqualsLive(t *testing.T) {
	n, overTCP := 10000, 400
	if testing.Short() {
		n, overTCP = 1000, 200
	}
	addrs := decisionBackends(t)
	snap := explainSnapshot(t, namedPools(func(name string) string { return addrs[name] }))
	rt := router.New(snap)
	decided := make(chan liveDecision, 1)
	onDone := func(done *proxy.Done) {
		d := done.Decision
		ld := liveDecision{Rule: d.Rule, Group: d.Group, Tag: strings.Clone(d.Tag), Degraded: d.Degraded,
			UserID: strings.Clone(d.Identity.Value), Source: d.Identity.Source}
		if d.Target != nil {
			ld.Target = d.Target.Name
		}
		decided <- ld
	}
	start := func(trusted ...string) *gateway {
		opts := proxy.Options{OnDone: onDone}
		for _, p := range trusted {
			opts.TrustedProxies = append(opts.TrustedProxies, netip.MustParsePrefix(p))
		}
		g := &gateway{p: proxy.New(opts, rt, nil), mem: fasthttputil.NewInmemoryListener()}
		g.api = New(Options{Router: rt, View: g.p.View, Tokens: []Token{{Name: "t", Value: "tok", Role: RoleViewer}}})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		g.tcp = ln.Addr().String()
		done := make(chan error, 2)
		go func() { done <- g.p.Serve(ln) }()
		go func() { done <- g.p.Serve(g.mem) }()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := g.p.Shutdown(ctx); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			for range 2 {
				if err := <-done; err != nil {
					t.Errorf("Serve: %v", err)
				}
			}
		})
		return g
	}
	// Both trust 10.0.0.0/8 and ::1; only the first trusts 127.0.0.1, the
	// address every TCP request comes from.
	gws := []*gateway{start("127.0.0.1/32", "10.0.0.0/8", "::1/128"), start("10.0.0.0/8", "::1/128")}

	r := rand.New(rand.NewPCG(12, 2026))
	claimed := map[string]int{}
	var colored, trustedRegion, mismatches int
	for i := range n {
		q := randomRequest(r)
		g := gws[r.IntN(2)]
		var conn net.Conn
		var err error
		if i < overTCP {
			q.peer = netip.MustParseAddr("127.0.0.1")
			conn, err = net.DialTimeout("tcp", g.tcp, 5*time.Second)
		} else {
			conn, err = g.mem.DialWithLocalAddr(&net.TCPAddr{IP: q.peer.AsSlice(), Port: 40000 + i%20000})
		}
		if err != nil {
			t.Fatal(err)
		}
		seen, err := q.send(conn)
		conn.Close()
		if err != nil {
			t.Fatalf("request %d (%s): %v", i, q, err)
		}
		var d liveDecision
		select {
		case d = <-decided:
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d (%s): no decision recorded", i, q)
		}
		// The wire does not show the identity; the rest must agree.
		seen.UserID, seen.Source = d.UserID, d.Source
		if seen != d {
			t.Fatalf("request %d (%s): the answer (%+v) disagrees with the recorded decision %+v", i, q, seen, d)
		}
		ex := explainOver(t, g.api, q.explain())
		if ex != d {
			mismatches++
			if mismatches <= 10 {
				t.Errorf("request %d (%s):\n  live    %+v\n  explain %+v", i, q, d, ex)
			}
		}
		claimed[d.Rule]++
		if q.has("X-Gray-Tag") && d.Tag == q.header("X-Gray-Tag") && d.Rule != "" {
			colored++
		}
		if d.Rule == "beijing" {
			trustedRegion++
		}
	}
	if mismatches > 0 {
		t.Fatalf("explain disagreed with live traffic on %d of %d requests", mismatches, n)
	}
	// The requests must have exercised every rule, colors and trusted
	// headers, or the property says little.
	for _, js := range explainRules {
		var k struct{ Key string }
		_ = json.Unmarshal([]byte(js), &k)
		if claimed[k.Key] == 0 {
			t.Errorf("no request was claimed by rule %s: %v", k.Key, claimed)
		}
	}
	if claimed[""] == 0 || colored == 0 || trustedRegion == 0 {
		t.Errorf("unclaimed %d, colored %d, region %d: the random requests miss a case", claimed[""], colored, trustedRegion)
	}
	t.Logf("%d requests (%d over TCP), claimed by rule: %v; %d honoured an inbound color", n, overTCP, claimed, colored)
}

// explainOver asks the admin API's explain handler.
func explainOver(t *testing.T, api *Server, req ExplainRequest) liveDecision {
	t.Helper()
	body, _ := json.Marshal(req)
	hr := httptest.NewRequest("POST", "/api/v1/explain", bytes.NewReader(body))
	hr.Header.Set("Authorization", "Bearer tok")
	w := httptest.NewRecorder()
	api.ServeHTTP(w, hr)
	if w.Code != 200 {
		t.Fatalf("explain %s = %d %s", body, w.Code, w.Body)
	}
	var out struct{ Decision ExplainDecision }
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	d := out.Decision
	return liveDecision{Rule: d.Rule, Group: d.Group, Target: d.Target, Tag: d.Tag, Degraded: d.Degraded, UserID: d.UserID, Source: d.Source}
}

// randRequest is one random request, as raw bytes for the data plane and
// as an ExplainRequest for explain.
type randRequest struct {
	method, host, target string
	headers              [][2]string // unique names, not Host or Cookie
	rawCookie            string      // a Cookie header, sent as is to both
	cookies, query       [][2]string // decoded values; encoded by pctEncode for live traffic
	peer                 netip.Addr
}

var (
	oddPaths = []string{
		"/api/user/profile", "/api/user/", "/api/user", "/API/user", "/API/user/x", "/api/user/./p", "/api//user/p",
		"/a/../b", "//x", "/x//y", "/%2e%2e/api/user/x", "/api/user/%2e%2e/%2e%2e/shop/cart", "/api/%2E%2E/shop/z",
		"/shop/cart", "/shop", "/shop%2Fcart", "/api%2Fuser/1", "/%61pi/user/z", "/b", "/bx/y", "/b/", "/x", "/xy",
		"/", "/web/index", "/shop/../api/user/q", "/a/b/../../api/user/r", "/api/user/%E7%94%A8", "/%2F%2Fx",
	}
	uids      = []string{"10001", "1", "2", "42", "u-7", "a b", "用户", "x+y", "", "10002", "user_%41"}
	xffs      = []string{"198.51.100.7", "203.0.113.5, 10.1.2.3", "junk, 10.0.0.2", "10.20.3.4", "10.2.3.4, 10.3.4.5", "[2001:db8::9]:443", "198.51.100.8,198.51.100.7"}
	regions   = []string{"beijing", "CN/北京", "上海", "CN-BJ", "US", "nowhere"}
	tagValues = []string{"vip", "vip=true", "vip=false", "tier=gold", "v p", "vip;beta"}
	colors    = []string{"gray", "v2", "v1", "b-tag", "A", "x-tag", "stable", "nonsense"}
	peers     = []string{"10.0.0.1", "10.20.9.9", "203.0.113.9", "198.51.100.7", "127.0.0.1", "2001:db8::5", "::1", "::ffff:10.1.1.1"}
	hosts     = []string{"example.com", "API.Example.com", "api.example.com:8080", "shop.local"}
	methods   = []string{"GET", "GET", "GET", "HEAD", "DELETE", "OPTIONS"}
)

func randomRequest(r *rand.Rand) *randRequest {
	pick := func(s []string) string { return s[r.IntN(len(s))] }
	q := &randRequest{method: pick(methods), host: pick(hosts), target: pick(oddPaths), peer: netip.MustParseAddr(pick(peers))}
	add := func(k, v string) { q.headers = append(q.headers, [2]string{k, v}) }
	switch uid := pick(uids); r.IntN(5) {
	case 0, 1:
		add("X-User-Id", uid)
	case 2:
		if r.IntN(2) == 0 {
			q.cookies = append(q.cookies, [2]string{"user_id", uid})
		} else {
			q.rawCookie = "theme=dark; user_id=" + pctEncode(uid)
		}
	case 3:
		if r.IntN(2) == 0 {
			q.query = append(q.query, [2]string{"user_id", uid})
		} else {
			q.target += "?user_id=" + pctEncode(uid) + "&x=1"
		}
	}
	if r.IntN(2) == 0 {
		add("X-Forwarded-For", pick(xffs))
	}
	if r.IntN(3) == 0 {
		add("X-Region", pick(regions))
	}
	if r.IntN(3) == 0 {
		add("X-User-Tags", pick(tagValues))
	}
	if r.IntN(4) == 0 {
		add("X-Gray-Tag", pick(colors))
	}
	if r.IntN(4) == 0 {
		add("User-Agent", "Mozilla/5.0 WeChat/8.0")
	}
	if r.IntN(4) == 0 {
		add("X-Exp", "1")
	}
	return q
}

func (q *randRequest) has(name string) bool { return q.header(name) != "" }

func (q *randRequest) header(name string) string {
	for _, h := range q.headers {
		if h[0] == name {
			return h[1]
		}
	}
	return ""
}

func (q *randRequest) String() string {
	return fmt.Sprintf("%s %s host %s peer %s headers %q cookie %q cookies %q query %q", q.method, q.target, q.host, q.peer, q.headers, q.rawCookie, q.cookies, q.query)
}

// raw is the request as a client sends it.
func (q *randRequest) raw() string {
	target := q.target
	for _, kv := range q.query {
		sep := "&"
		if !strings.Contains(target, "?") {
			sep = "?"
		}
		target += sep + pctEncode(kv[0]) + "=" + pctEncode(kv[1])
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", q.method, target, q.host)
	for _, h := range q.headers {
		fmt.Fprintf(&b, "%s: %s\r\n", h[0], h[1])
	}
	if q.rawCookie != "" {
		fmt.Fprintf(&b, "Cookie: %s\r\n", q.rawCookie)
	}
	for _, kv := range q.cookies {
		fmt.Fprintf(&b, "Cookie: %s=%s\r\n", kv[0], pctEncode(kv[1]))
	}
	b.WriteString("Connection: close\r\n\r\n")
	return b.String()
}

// explain is the same request, described.
func (q *randRequest) explain() ExplainRequest {
	e := ExplainRequest{Method: q.method, Host: q.host, Path: q.target, Headers: map[string]string{},
		RemoteAddr: netip.AddrPortFrom(q.peer, 40000).String()}
	for _, h := range q.headers {
		e.Headers[h[0]] = h[1]
	}
	if q.rawCookie != "" {
		e.Headers["Cookie"] = q.rawCookie
	}
	if len(q.cookies) > 0 {
		e.Cookies = map[string]string{}
		for _, kv := range q.cookies {
			e.Cookies[kv[0]] = kv[1]
		}
	}
	if len(q.query) > 0 {
		e.Query = map[string]string{}
		for _, kv := range q.query {
			e.Query[kv[0]] = kv[1]
		}
	}
	return e
}

// send writes the request on c and reads the answer, returning what the
// wire shows of the decision: the decision headers, the upstream that
// answered and the X-Gray-Tag it received (not the identity).
func (q *randRequest) send(c net.Conn) (liveDecision, error) {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, q.raw()); err != nil {
		return liveDecision{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: q.method})
	if err != nil {
		return liveDecision{}, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return liveDecision{}, fmt.Errorf("status %d", resp.StatusCode)
	}
	h := resp.Header
	return liveDecision{Rule: h.Get("X-Gray-Rule"), Group: h.Get("X-Gray-Group"), Target: h.Get("X-Backend"),
		Tag: h.Get("X-Seen-Tag"), Degraded: h.Get("X-Gray-Degraded")}, nil
}

// pctEncode percent-encodes every byte but unreserved ones (RFC 3986
// section 2.3), a different encoding from explain's (url.QueryEscape)
// that decodes to the same value.
func pctEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || slices.Contains([]byte("-._~"), c) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}
