package gateway

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/graygate/graygate/internal/testport"
)

// trustConfig is baseConfig with region and tag headers, trusting the
// given proxies. Every test client connects from 127.0.0.1, so trusting
// 127.0.0.1/32 makes it a trusted proxy and trusting only 10.0.0.0/8 makes
// it an ordinary client.
func trustConfig(trusted string) string {
	return baseConfig + fmt.Sprintf(`
trusted_proxies: [%q]
trust_gray_tag: true
targeting:
  region: {header: X-Region}
  tags: {header: X-User-Tags}
`, trusted)
}

// TestTrustedHeadersReachLiveTraffic: a trusted peer's X-Region and
// X-User-Tags route real requests, through the gateway's listener, to gray;
// the same headers from a peer outside trusted_proxies change nothing.
func TestTrustedHeadersReachLiveTraffic(t *testing.T) {
	rules := map[string]map[string]any{
		"in_beijing": {"type": "gray", "gray_percent": 100, "targets": map[string]string{"gray": "gray", "stable": "stable"},
			"conditions": map[string]any{"path_prefix": []string{"/region/"}, "region_in": []string{"北京"}}},
		"vips": {"type": "gray", "gray_percent": 100, "targets": map[string]string{"gray": "gray", "stable": "stable"},
			"conditions": map[string]any{"path_prefix": []string{"/tags/"}, "tags": []map[string]any{{"tag": "vip", "operator": "eq", "value": true}}}},
		"vips_in_beijing": {"type": "gray", "gray_percent": 100, "targets": map[string]string{"gray": "gray", "stable": "stable"},
			"conditions": map[string]any{"path_prefix": []string{"/both/"}, "region_in": []string{"北京"},
				"tags": []map[string]any{{"tag": "vip", "operator": "exists"}}}},
	}
	trusted := start(t, trustConfig("127.0.0.1/32"), "")
	untrusted := start(t, trustConfig("10.0.0.0/8"), "")
	for _, e := range []*env{trusted, untrusted} {
		for k, r := range rules {
			e.mustPut(k, r)
		}
	}
	tests := []struct {
		name, path string
		hdr        []string
		trusted    bool
		wantRule   string
	}{
		{"region from a trusted peer", "/region/x", []string{"X-Region", "beijing"}, true, "in_beijing"},
		{"region from an untrusted peer", "/region/x", []string{"X-Region", "beijing"}, false, ""},
		{"tag from a trusted peer", "/tags/x", []string{"X-User-Tags", "vip"}, true, "vips"},
		{"tag from an untrusted peer", "/tags/x", []string{"X-User-Tags", "vip"}, false, ""},
		{"both from a trusted peer", "/both/x", []string{"X-Region", "beijing", "X-User-Tags", "vip"}, true, "vips_in_beijing"},
		{"both from an untrusted peer", "/both/x", []string{"X-Region", "beijing", "X-User-Tags", "vip"}, false, ""},
		{"another region from a trusted peer", "/region/x", []string{"X-Region", "上海"}, true, ""},
		{"no tags from a trusted peer", "/tags/x", []string{}, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := untrusted
			if tt.trusted {
				e = trusted
			}
			a, err := e.get(tt.path, append([]string{"X-User-Id", "u1"}, tt.hdr...)...)
			if err != nil {
				t.Fatal(err)
			}
			wantGroup, wantBackend := "default", "stable"
			if tt.wantRule != "" {
				wantGroup, wantBackend = "gray", "gray"
			}
			if a.status != 200 || a.rule != tt.wantRule || a.group != wantGroup || a.backend != wantBackend {
				t.Errorf("GET %s %v: %+v; want rule %q, group %s from %s", tt.path, tt.hdr, a, tt.wantRule, wantGroup, wantBackend)
			}
			// Explain, asked about the same peer, agrees.
			code, ex := e.api("POST", "/api/v1/explain", map[string]any{"path": tt.path, "host": "gw",
				"headers": headerMap(append([]string{"X-User-Id", "u1"}, tt.hdr...)), "remote_addr": "127.0.0.1"})
			d, _ := ex["decision"].(map[string]any)
			if code != 200 || d["rule"] != tt.wantRule || d["group"] != wantGroup {
				t.Errorf("explain = %d %v; want rule %q, group %s", code, ex, tt.wantRule, wantGroup)
			}
		})
	}
}

// TestTrustedHeaderLastLineWins: a trusted proxy that appends its own
// X-Region, X-User-Tags or X-Gray-Tag after one the client sent (as it
// appends to X-Forwarded-For) is believed, not the client's line before
// it. The first line was taken, so a client behind such a proxy could
// name its own region, tags or color.
func TestTrustedHeaderLastLineWins(t *testing.T) {
	e := start(t, trustConfig("127.0.0.1/32"), "")
	gray := map[string]string{"gray": "gray", "stable": "stable"}
	e.mustPut("in_beijing", map[string]any{"type": "gray", "gray_percent": 100, "targets": gray,
		"conditions": map[string]any{"path_prefix": []string{"/region/"}, "region_in": []string{"北京"}}})
	e.mustPut("vips", map[string]any{"type": "gray", "gray_percent": 100, "targets": gray,
		"conditions": map[string]any{"path_prefix": []string{"/tags/"}, "tags": []map[string]any{{"tag": "vip", "operator": "eq", "value": true}}}})
	e.mustPut("canary", map[string]any{"type": "gray", "gray_percent": 0, "targets": gray,
		"conditions": map[string]any{"path_prefix": []string{"/color/"}}})
	for _, tt := range []struct {
		path, name, client, proxy, group string
	}{
		{"/region/x", "X-Region", "beijing", "上海", "default"},
		{"/region/x", "X-Region", "上海", "beijing", "gray"},
		{"/tags/x", "X-User-Tags", "vip", "basic", "default"},
		{"/tags/x", "X-User-Tags", "basic", "vip", "gray"},
		{"/color/x", "X-Gray-Tag", "gray", "stable", "stable"},
	} {
		a, err := e.get(tt.path, "X-User-Id", "u1", tt.name, tt.client, tt.name, tt.proxy)
		if err != nil || a.group != tt.group {
			t.Errorf("%s: %s then %s: %+v %v; want group %q, the proxy's line", tt.name, tt.client, tt.proxy, a, err, tt.group)
		}
	}
}

func headerMap(kv []string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// TestGrayTagOnlyFromTrustedPeers: with trust_gray_tag on, an inbound
// X-Gray-Tag: gray from a peer outside trusted_proxies neither reaches gray
// nor is passed on; from a trusted peer it routes to gray and the color
// travels on.
func TestGrayTagOnlyFromTrustedPeers(t *testing.T) {
	rule := map[string]any{"type": "gray", "gray_percent": 0, "targets": map[string]string{"gray": "gray", "stable": "stable"}}
	trusted := start(t, trustConfig("127.0.0.1/32"), "")
	untrusted := start(t, trustConfig("10.0.0.0/8"), "")
	for _, e := range []*env{trusted, untrusted} {
		e.mustPut("canary", rule)
	}
	tests := []struct {
		name                       string
		e                          *env
		wantGroup, backend, seenAs string
	}{
		{"untrusted client", untrusted, "default", "stable", ""},
		{"trusted peer", trusted, "gray", "gray", "gray"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range 20 { // nobody is gray at 0%; only the color can send them there
				a, err := tt.e.get("/", "X-User-Id", strconv.Itoa(i), "X-Gray-Tag", "gray")
				if err != nil {
					t.Fatal(err)
				}
				if a.group != tt.wantGroup || a.backend != tt.backend || a.tag != tt.seenAs {
					t.Fatalf("user %d with X-Gray-Tag: gray: %+v; want group %s from %s, upstream X-Gray-Tag %q", i, a, tt.wantGroup, tt.backend, tt.seenAs)
				}
			}
		})
	}
	// The inbound header is stripped, not forwarded next to the gateway's
	// own: the backend sees at most one X-Gray-Tag.
	raw := "GET / HTTP/1.1\r\nHost: gw\r\nX-User-Id: 1\r\nX-Gray-Tag: gray\r\nX-Gray-Tag: gray\r\nConnection: close\r\n\r\n"
	resp := rawRoundTrip(t, untrusted, raw)
	if !strings.Contains(resp, "X-Backend: stable") || !strings.Contains(resp, "X-Seen-Tag: \r\n") {
		t.Errorf("untrusted client with two X-Gray-Tag headers got:\n%s", resp)
	}
}

// rawRoundTrip writes raw to the gateway's data plane and returns the whole
// answer (the request must ask for Connection: close).
func rawRoundTrip(t *testing.T, e *env, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(e.data, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// TestABFallbackCountsInItsGroup: the metrics count an experiment group's
// requests that fell back to the control group's upstream in their own
// group, as degraded, and never in the control group or as stable.
func TestABFallbackCountsInItsGroup(t *testing.T) {
	down := testport.Refused(t)
	e := start(t, strings.Replace(baseConfig, `{{b}}`, down, 1), "")
	e.mustPut("exp", map[string]any{"type": "ab", "experiment_id": "e1", "groups": []map[string]any{
		{"name": "A", "weight": 50, "target": "a", "control": true}, {"name": "B", "weight": 50, "target": "b"}}})
	inB := 0
	for i := range 40 {
		a, err := e.get("/", "X-User-Id", strconv.Itoa(i))
		if err != nil || a.status != 200 || a.backend != "a" {
			t.Fatalf("user %d: %+v %v; want 200 from a", i, a, err)
		}
		switch {
		case a.group == "B" && a.degraded == "fallback" && a.tag == "A":
			inB++
		case a.group == "A" && a.degraded == "" && a.tag == "A":
		default:
			t.Errorf("user %d: %+v; want group A, or group B degraded fallback, with the control tag A upstream", i, a)
		}
	}
	if inB == 0 {
		t.Fatal("no user landed in group B")
	}
	resp, err := e.client.Get(e.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(resp)
	resp.Body.Close()
	metric := func(re string) (int, bool) {
		m := regexp.MustCompile(re + ` (\d+)`).FindStringSubmatch(body)
		if m == nil {
			return 0, false
		}
		n, _ := strconv.Atoi(m[1])
		return n, true
	}
	if n, _ := metric(`graygate_requests_total\{code="2xx",group="B",rule="exp",upstream="a"\}`); n != inB {
		t.Errorf("requests_total for group B served by a = %d, want %d", n, inB)
	}
	if n, _ := metric(`graygate_degraded_requests_total\{reason="fallback",rule="exp"\}`); n != inB {
		t.Errorf("degraded_requests_total{fallback} = %d, want %d", n, inB)
	}
	if n, _ := metric(`graygate_requests_total\{code="2xx",group="A",rule="exp",upstream="a"\}`); n != 40-inB {
		t.Errorf("requests_total for group A = %d, want %d (the fallbacks must not count there)", n, 40-inB)
	}
	if _, ok := metric(`graygate_requests_total\{code="2xx",group="stable",rule="exp",upstream="\w+"\}`); ok {
		t.Errorf("an experiment's request was counted as group stable:\n%s", body)
	}
}

// TestGrayTagInBaggage: with trust_gray_tag on, an inbound baggage
// gray.tag from a trusted peer is honoured like X-Gray-Tag (the request
// goes to gray and the color travels on, in X-Gray-Tag and in baggage);
// from anyone else it is stripped. Other baggage members reach the
// upstream untouched, byte for byte and in order, either way.
func TestGrayTagInBaggage(t *testing.T) {
	backend := func(name string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Backend", name)
			w.Header().Set("X-Seen-Tag", r.Header.Get("X-Gray-Tag"))
			w.Header().Set("X-Seen-Baggage", strings.Join(r.Header.Values("Baggage"), "|"))
			_, _ = io.WriteString(w, name)
		}))
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://")
	}
	stable, gray := backend("stable"), backend("gray")
	cfg := func(trusted string) string {
		return fmt.Sprintf("default_upstream: stable\nupstreams:\n  stable: {instances: [{addr: %q}]}\n  gray: {instances: [{addr: %q}]}\ntrusted_proxies: [%q]\ntrust_gray_tag: true\n",
			stable, gray, trusted)
	}
	rule := map[string]any{"type": "gray", "gray_percent": 0, "targets": map[string]string{"gray": "gray", "stable": "stable"}}
	trusted, untrusted := start(t, cfg("127.0.0.1/32"), ""), start(t, cfg("10.0.0.0/8"), "")
	for _, e := range []*env{trusted, untrusted} {
		e.mustPut("canary", rule)
	}
	tests := []struct {
		name, baggage                   string
		e                               *env
		backend, seenTag, wantUpBaggage string
	}{
		{"trusted peer", "a=1, gray.tag=gray;p=x, b=%20two", trusted, "gray", "gray", "a=1,b=%20two,gray.tag=gray"},
		{"untrusted client", "a=1, gray.tag=gray;p=x, b=%20two", untrusted, "stable", "", "a=1,b=%20two"},
		{"untrusted client, only the tag", "gray.tag=gray", untrusted, "stable", "", ""},
		{"trusted peer, no tag", "k=v", trusted, "stable", "", "k=v"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", tt.e.data+"/p", nil)
			req.Header.Set("X-User-Id", "7")
			req.Header.Set("Baggage", tt.baggage)
			resp, err := tt.e.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			got := []string{resp.Header.Get("X-Backend"), resp.Header.Get("X-Seen-Tag"), resp.Header.Get("X-Seen-Baggage")}
			if want := []string{tt.backend, tt.seenTag, tt.wantUpBaggage}; !slices.Equal(got, want) {
				t.Errorf("baggage %q: backend, upstream X-Gray-Tag, upstream baggage = %q, want %q", tt.baggage, got, want)
			}
		})
	}
}
