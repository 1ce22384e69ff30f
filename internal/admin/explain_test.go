package admin

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/graygate/graygate/internal/geo"
	"github.com/graygate/graygate/internal/identity"
	"github.com/graygate/graygate/internal/match"
	"github.com/graygate/graygate/internal/proxy"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/tags"
	"github.com/graygate/graygate/internal/upstream"
)

// explainRules are the rules of the explain tests: path-pinned ones (the
// router indexes them by first path segment) and unpinned ones.
var explainRules = []string{
	`{"key":"user_v2","type":"gray","gray_percent":30,"white_list":["uid:10001","ip:198.51.100.7","ip:10.20.0.0/16"],
	  "conditions":{"path_prefix":["/api/user/"]},"targets":{"gray":"gray","stable":"stable"},"target_tags":{"gray":"v2","stable":"v1"}}`,
	`{"key":"shop_ab","type":"ab","experiment_id":"shop","conditions":{"path_prefix":["/shop/"]},
	  "groups":[{"name":"A","weight":50,"target":"a","control":true},{"name":"B","weight":50,"target":"b","tag":"b-tag"}]}`,
	`{"key":"b_path","type":"gray","gray_percent":50,"conditions":{"path_prefix":["/b"]},"targets":{"gray":"gray","stable":"stable"}}`,
	`{"key":"x_path","type":"gray","gray_percent":100,"priority":150,"conditions":{"path_prefix":["/x"]},"targets":{"gray":"gray","stable":"stable"}}`,
	`{"key":"api_host","type":"gray","gray_percent":40,"route":"api","targets":{"gray":"gray","stable":"stable"}}`,
	`{"key":"beijing","type":"gray","gray_percent":100,"priority":120,"conditions":{"region_in":["北京"]},"targets":{"gray":"gray","stable":"stable"}}`,
	`{"key":"vip","type":"gray","gray_percent":50,"conditions":{"tags":[{"tag":"vip","operator":"eq","value":true}]},"targets":{"gray":"gray","stable":"stable"}}`,
	`{"key":"wechat","type":"gray","gray_percent":20,"conditions":{"ua_contains":["WeChat"]},"targets":{"gray":"gray","stable":"stable"}}`,
	`{"key":"web_ab","type":"ab","experiment_id":"web","priority":300,"conditions":{"header_exists":["X-Exp"]},
	  "groups":[{"name":"X","weight":70,"target":"a","tag":"x-tag"},{"name":"Y","weight":30,"target":"b"}]}`,
}

// explainSnapshot compiles explainRules over pools (names stable, gray, a,
// b), with region and tag headers, trust_gray_tag, anonymous ids from the
// client address, and a route for the host api.example.com.
func explainSnapshot(t testing.TB, pools map[string]*upstream.Pool) *router.Snapshot {
	t.Helper()
	env := rule.Env{
		Resolve: func(target string) (*upstream.Pool, error) {
			if p, ok := pools[target]; ok {
				return p, nil
			}
			return nil, fmt.Errorf("no upstream named %q", target)
		},
		HasRoute: func(name string) bool { return name == "api" },
	}
	g, err := geo.New(geo.Config{Header: "X-Region"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	tg, err := tags.New(tags.Config{Header: "X-User-Tags"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(); tg.Close() })
	in := router.Input{
		Revision:     1,
		Identity:     identity.Config{Anonymous: "ip"},
		Default:      pools["stable"],
		TrustGrayTag: true,
		Sources:      &match.Sources{Geo: g, Tags: tg},
		Routes:       []router.RouteSpec{{Name: "api", Host: "api.example.com", Default: pools["stable"]}},
	}
	for _, js := range explainRules {
		c, err := rule.Parse([]byte(js), env)
		if err != nil {
			t.Fatalf("rule %s: %v", js, err)
		}
		in.Rules = append(in.Rules, c)
	}
	s, err := router.Build(in)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func namedPools(addr func(name string) string) map[string]*upstream.Pool {
	out := map[string]*upstream.Pool{}
	for _, n := range []string{"stable", "gray", "a", "b"} {
		out[n] = upstream.NewPool(n, []*upstream.Instance{{Addr: addr(n)}})
	}
	return out
}

// dataPlane is a proxy that trusts 10.0.0.0/8, whose View explain uses.
func dataPlane(t testing.TB, rt *router.Router, trusted ...string) *proxy.Proxy {
	t.Helper()
	var opts proxy.Options
	for _, p := range trusted {
		opts.TrustedProxies = append(opts.TrustedProxies, netip.MustParsePrefix(p))
	}
	return proxy.New(opts, rt, nil)
}

// TestExplainSeesTheRequestAsTheDataPlane: explain normalises the path,
// decodes cookies and the query, resolves the client address through
// trusted proxies and believes trusted headers only from trusted peers,
// the way the data plane does, because it decides through the data
// plane's own view.
func TestExplainSeesTheRequestAsTheDataPlane(t *testing.T) {
	snap := explainSnapshot(t, namedPools(func(string) string { return "127.0.0.1:1" }))
	p := dataPlane(t, router.New(snap), "10.0.0.0/8")
	const trusted, untrusted = "10.0.0.1", "203.0.113.9"
	tests := []struct {
		name      string
		req       ExplainRequest
		wantRule  string
		wantGroup string
		wantID    string
		wantIP    string
		// wantWhitelist is user_v2's whitelist hit, if checkWhitelist.
		checkWhitelist bool
		wantWhitelist  string
	}{
		{name: "dot segments resolved", req: ExplainRequest{Path: "/shop/../api/user/x", Headers: map[string]string{"X-User-Id": "10001"}},
			wantRule: "user_v2", wantGroup: "gray", wantID: "10001"},
		{name: "encoded dot segments resolved", req: ExplainRequest{Path: "/api/user/%2e%2e/%2E%2E/x/1", Headers: map[string]string{"X-User-Id": "10001"}},
			wantRule: "x_path", wantGroup: "gray", wantID: "10001"},
		{name: "double slash collapsed", req: ExplainRequest{Path: "//api//user/p", Headers: map[string]string{"X-User-Id": "10001"}},
			wantRule: "user_v2", wantGroup: "gray", wantID: "10001"},
		{name: "percent-decoded segment", req: ExplainRequest{Path: "/%61pi/user/p", Headers: map[string]string{"X-User-Id": "10001"}},
			wantRule: "user_v2", wantGroup: "gray", wantID: "10001"},
		{name: "case is kept", req: ExplainRequest{Path: "/API/user/p", Headers: map[string]string{"X-User-Id": "10001"}},
			wantGroup: "default", wantID: "10001"},
		{name: "cookie decoded as PHP does", req: ExplainRequest{Path: "/", Cookies: map[string]string{"user_id": "a b+c"}},
			wantGroup: "default", wantID: "a b+c"},
		{name: "raw cookie header decoded as PHP does", req: ExplainRequest{Path: "/", Headers: map[string]string{"Cookie": "user_id=%E7%94%A8+1"}},
			wantGroup: "default", wantID: "用 1"},
		{name: "query decoded", req: ExplainRequest{Path: "/?user_id=x%20y", Query: map[string]string{"other": "1"}},
			wantGroup: "default", wantID: "x y"},
		{name: "host lowercased for routes", req: ExplainRequest{Host: "API.Example.COM", Path: "/", Headers: map[string]string{"X-User-Id": "1"}},
			wantRule: "api_host", wantGroup: "gray", wantID: "1"}, // bucket 1371 < 4000
		{name: "region from a trusted peer", req: ExplainRequest{Path: "/", Headers: map[string]string{"X-User-Id": "u", "X-Region": "beijing"}, RemoteAddr: trusted},
			wantRule: "beijing", wantGroup: "gray", wantID: "u"},
		{name: "region from an untrusted peer", req: ExplainRequest{Path: "/", Headers: map[string]string{"X-User-Id": "u", "X-Region": "beijing"}, RemoteAddr: untrusted},
			wantGroup: "default", wantID: "u"},
		{name: "color from a trusted peer", req: ExplainRequest{Path: "/shop/x", Headers: map[string]string{"X-User-Id": "u", "X-Gray-Tag": "b-tag"}, RemoteAddr: trusted + ":5555"},
			wantRule: "shop_ab", wantGroup: "B", wantID: "u"},
		{name: "color from an untrusted peer", req: ExplainRequest{Path: "/web", Headers: map[string]string{"X-User-Id": "u", "X-Gray-Tag": "b-tag"}, RemoteAddr: untrusted + ":5555"},
			wantGroup: "default", wantID: "u"},
		{name: "client address behind a trusted proxy", req: ExplainRequest{Path: "/api/user/p", Headers: map[string]string{"X-User-Id": "u9", "X-Forwarded-For": "198.51.100.7, 10.9.9.9"}, RemoteAddr: trusted},
			wantRule: "user_v2", wantGroup: "gray", wantID: "u9", wantIP: "198.51.100.7", checkWhitelist: true, wantWhitelist: "ip:198.51.100.7"},
		{name: "forwarded-for from an untrusted peer", req: ExplainRequest{Path: "/api/user/p", Headers: map[string]string{"X-User-Id": "u9", "X-Forwarded-For": "198.51.100.7"}, RemoteAddr: untrusted},
			wantRule: "user_v2", wantGroup: "gray", wantID: "u9", wantIP: untrusted, checkWhitelist: true}, // u9 is in the 30%, not whitelisted
		{name: "anonymous from the client address", req: ExplainRequest{Path: "/", Headers: map[string]string{"X-Forwarded-For": "198.51.100.8"}, RemoteAddr: "[::ffff:10.1.2.3]:80"},
			wantGroup: "default", wantID: "ip_198.51.100.8", wantIP: "198.51.100.8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, tr, err := Explain(snap, p.View, tt.req)
			if err != nil {
				t.Fatalf("Explain(%+v): %v", tt.req, err)
			}
			if d.Rule != tt.wantRule || d.Group != tt.wantGroup || d.UserID != tt.wantID {
				t.Errorf("Explain(%+v) = rule %q group %q user %q; want %q %q %q", tt.req, d.Rule, d.Group, d.UserID, tt.wantRule, tt.wantGroup, tt.wantID)
			}
			if tt.checkWhitelist {
				hit := "(user_v2 not evaluated)"
				for _, r := range tr.Rules {
					if r.Key == "user_v2" {
						hit = r.Whitelist
					}
				}
				if hit != tt.wantWhitelist {
					t.Errorf("user_v2 whitelist hit %q, want %q", hit, tt.wantWhitelist)
				}
			}
			if tt.wantIP != "" && tr.ClientIP != tt.wantIP {
				t.Errorf("trace client_ip = %q, want %q", tr.ClientIP, tt.wantIP)
			}
			if want := strings.HasPrefix(tt.req.RemoteAddr, "10.") || strings.HasPrefix(tt.req.RemoteAddr, "[::ffff:10."); tr.PeerTrusted != want {
				t.Errorf("trace peer_trusted = %v, want %v", tr.PeerTrusted, want)
			}
		})
	}
}

// TestExplainTraceFollowsTheIndex: explain evaluates the candidates the
// path index chose, as live traffic does, and names the rules it skipped.
func TestExplainTraceFollowsTheIndex(t *testing.T) {
	snap := explainSnapshot(t, namedPools(func(string) string { return "127.0.0.1:1" }))
	p := dataPlane(t, router.New(snap))
	_, tr, err := Explain(snap, p.View, ExplainRequest{Path: "/web", Headers: map[string]string{"X-User-Id": "u"}})
	if err != nil {
		t.Fatal(err)
	}
	var evaluated []string
	for _, r := range tr.Rules {
		evaluated = append(evaluated, r.Key)
	}
	// /b and /x do not end in "/", so they pin no segment ("/bar" is
	// under "/b"): only user_v2 and shop_ab are left out.
	if got, want := strings.Join(evaluated, ","), "b_path,vip,wechat,beijing,x_path,web_ab"; got != want {
		t.Errorf("evaluated %s, want %s", got, want)
	}
	if got, want := strings.Join(tr.SkippedByIndex, ","), "user_v2,shop_ab"; got != want {
		t.Errorf("skipped_by_index %s, want %s", got, want)
	}
}

// TestExplainRequestErrors: a bad description is refused with every
// problem named by its field.
func TestExplainRequestErrors(t *testing.T) {
	snap := explainSnapshot(t, namedPools(func(string) string { return "127.0.0.1:1" }))
	p := dataPlane(t, router.New(snap))
	tests := []struct {
		name string
		req  ExplainRequest
		want []string
	}{
		{"bad method", ExplainRequest{Method: "GE T"}, []string{`method: must be an HTTP method token, got "GE T"`}},
		{"relative path", ExplainRequest{Path: "api/x"}, []string{`path: must be a request target starting with "/"`}},
		{"space in path", ExplainRequest{Path: "/a b"}, []string{`path: must be a request target`}},
		{"header name", ExplainRequest{Headers: map[string]string{"X Bad": "1"}}, []string{`headers["X Bad"]: invalid header name`}},
		{"header value", ExplainRequest{Headers: map[string]string{"X-A": "1\r\nX-Injected: 2"}}, []string{`headers["X-A"]: invalid value`}},
		{"body header", ExplainRequest{Headers: map[string]string{"Content-Length": "5"}}, []string{`headers["Content-Length"]: an explained request has no body`}},
		{"cookie name", ExplainRequest{Cookies: map[string]string{"a;b": "1"}}, []string{`cookies["a;b"]: invalid cookie name`}},
		{"host", ExplainRequest{Host: "a b"}, []string{`host: invalid host "a b"`}},
		{"remote address", ExplainRequest{RemoteAddr: "nowhere"}, []string{`remote_addr: must be an IP address or IP:port, got "nowhere"`}},
		{"all at once", ExplainRequest{Method: "(", Path: "x", RemoteAddr: "?"}, []string{"method:", "path:", "remote_addr:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Explain(snap, p.View, tt.req)
			for _, want := range tt.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Explain(%+v) error = %v, want %q", tt.req, err, want)
				}
			}
		})
	}
}

// FuzzExplain: no described request makes explain panic; a request it
// accepts is decided.
func FuzzExplain(f *testing.F) {
	f.Add("GET", "", "/api/user/%2e%2e/x?user_id=1", "X-Forwarded-For", "1.2.3.4, 10.0.0.1", "user_id", "a b", "10.0.0.1:80")
	f.Add("POST", "API.example.com", "//x", "X-Gray-Tag", "gray", "c", "%zz", "")
	f.Add("", "h", "/%", "X-Region", "CN/北京", "", "", "::1")
	snap := explainSnapshot(f, namedPools(func(string) string { return "127.0.0.1:1" }))
	p := dataPlane(f, router.New(snap), "10.0.0.0/8", "::1/128")
	f.Fuzz(func(t *testing.T, method, host, path, hk, hv, ck, cv, remote string) {
		req := ExplainRequest{Method: method, Host: host, Path: path, Headers: map[string]string{hk: hv}, Cookies: map[string]string{ck: cv}, RemoteAddr: remote}
		d, _, err := Explain(snap, p.View, req)
		if err == nil && d.Target == "" {
			t.Errorf("Explain(%+v) accepted the request but chose no target", req)
		}
	})
}
