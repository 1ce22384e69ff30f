package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/graygate/graygate/internal/config"
)

// TestConfigReload swaps the default upstream by reloading the config, and
// checks that a bad config keeps the old one serving and shows its error.
func TestConfigReload(t *testing.T) {
	e := start(t, baseConfig, "")
	if a, _ := e.get("/", "X-User-Id", "1"); a.backend != "stable" {
		t.Fatalf("before reload: %+v", a)
	}
	next := strings.Replace(baseConfig, "default_upstream: stable", "default_upstream: b", 1)
	for name, addr := range e.backends {
		next = strings.ReplaceAll(next, "{{"+name+"}}", addr)
	}
	load := func(y string) func() (*config.Config, error) {
		return func() (*config.Config, error) {
			c, err := config.Parse([]byte(y))
			if err == nil {
				c.DataDir = e.gw.cfg.DataDir
			}
			return c, err
		}
	}
	if err := e.gw.ReloadConfigFile(context.Background(), load(next)); err != nil {
		t.Fatal(err)
	}
	if a, _ := e.get("/", "X-User-Id", "1"); a.backend != "b" {
		t.Errorf("after reload the default upstream is %q, want b", a.backend)
	}
	bad := next + "\nunknown_key: 1\n"
	if err := e.gw.ReloadConfigFile(context.Background(), load(bad)); err == nil {
		t.Fatal("bad config accepted")
	}
	if a, _ := e.get("/", "X-User-Id", "1"); a.backend != "b" {
		t.Errorf("a bad config changed what serves: %q", a.backend)
	}
	_, st := e.api("GET", "/api/v1/status", nil)
	if !strings.Contains(st["last_error"].(string), "unknown_key: unknown field") || st["last_reload_result"] != "error" {
		t.Errorf("status = %v", st)
	}
	// A config that drops an upstream a stored rule needs is refused whole.
	e.mustPut("g", grayRule(100))
	noGray := strings.Replace(next, "  gray:", "  grey:", 1)
	err := e.gw.ReloadConfigFile(context.Background(), load(noGray))
	if err == nil || !strings.Contains(err.Error(), `rule "g" would stop compiling`) {
		t.Errorf("reload without the gray upstream = %v", err)
	}
	if a, _ := e.get("/", "X-User-Id", "1"); a.backend != "gray" || a.rule != "g" {
		t.Errorf("rule g stopped serving: %+v", a)
	}
	if st := e.gw.Status(); len(st.BrokenRules) != 0 || st.LastResult != "error" {
		t.Errorf("status after a refused reload = %+v", st)
	}
}

// reload makes yaml, with {{name}} replaced by the backend addresses, the
// gateway's config, keeping its data dir.
func (e *env) reload(yaml string) error {
	e.t.Helper()
	for name, addr := range e.backends {
		yaml = strings.ReplaceAll(yaml, "{{"+name+"}}", addr)
	}
	return e.gw.ReloadConfigFile(context.Background(), func() (*config.Config, error) {
		c, err := config.Parse([]byte(yaml))
		if err == nil {
			c.DataDir = e.gw.cfg.DataDir
		}
		return c, err
	})
}

// apiAs calls the admin API with another bearer token and returns the status.
func (e *env) apiAs(tok, method, path string) int {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.admin+path, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestReloadRevokesAdminToken is issue 12, item 4: a token removed from the
// config file is refused from the first request after the reload, on the
// gateway's real admin listener, while the others keep working.
func TestReloadRevokesAdminToken(t *testing.T) {
	tokens := `
admin:
  tokens:
    - {name: ops, token: ops-secret-0123456789}
    - {name: leaked, token: leaked-secret-0123456789}
`
	e := start(t, baseConfig+tokens, "")
	for _, tok := range []string{"ops-secret-0123456789", "leaked-secret-0123456789", token} {
		if code := e.apiAs(tok, "GET", "/api/v1/status"); code != 200 {
			t.Fatalf("token %s before the reload: %d", tok, code)
		}
	}
	revoked := strings.Replace(tokens, "    - {name: leaked, token: leaked-secret-0123456789}\n", "", 1)
	if err := e.reload(baseConfig + revoked); err != nil {
		t.Fatal(err)
	}
	if code := e.apiAs("leaked-secret-0123456789", "GET", "/api/v1/status"); code != 401 {
		t.Errorf("the revoked token after the reload: %d, want 401", code)
	}
	for _, tok := range []string{"ops-secret-0123456789", token} {
		if code := e.apiAs(tok, "GET", "/api/v1/status"); code != 200 {
			t.Errorf("token %s after the reload: %d, want 200", tok, code)
		}
	}
}

// TestReloadAppliesLive reloads one field at a time and checks, through the
// data plane or the admin API, that it took effect: the fields the reload
// table calls live and that have an effect a request can see.
func TestReloadAppliesLive(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name         string
		before, next string
		// check returns what the gateway does now, in one string.
		check               func(e *env) string
		wantBefore, wantNow string
	}{
		{
			name:   "identity.sources",
			before: "identity: {sources: [{header: X-User-Id}]}\n",
			next:   "identity: {sources: [{header: X-Uid}]}\n",
			check: func(e *env) string {
				a, _ := e.get("/", "X-Uid", "vip")
				return a.group
			},
			wantBefore: "default", wantNow: "gray",
		},
		{
			// No sources: X-User-Id is not believed, so vip is anonymous.
			name:   "identity.sources empty",
			before: "",
			next:   "identity: {sources: [], anonymous: ip}\n",
			check: func(e *env) string {
				a, _ := e.get("/", "X-User-Id", "vip")
				return a.group
			},
			wantBefore: "gray", wantNow: "default",
		},
		{
			name:   "limits.max_body_bytes",
			before: "",
			next:   "limits: {max_body_bytes: 10}\n",
			check: func(e *env) string {
				resp, err := e.client.Post(e.data+"/", "text/plain", strings.NewReader(strings.Repeat("x", 100)))
				if err != nil {
					return err.Error()
				}
				resp.Body.Close()
				return fmt.Sprint(resp.StatusCode)
			},
			wantBefore: "200", wantNow: "413",
		},
		{
			name:   "routes",
			before: "",
			next:   "routes: [{name: api, path_prefix: /api/, upstream: a}]\n",
			check: func(e *env) string {
				a, _ := e.get("/api/x", "X-User-Id", "1")
				return a.backend
			},
			wantBefore: "stable", wantNow: "a",
		},
		{
			name:   "upstreams",
			before: "",
			next:   "upstreams_override",
			check: func(e *env) string {
				a, _ := e.get("/", "X-User-Id", "1")
				return a.backend
			},
			wantBefore: "stable", wantNow: "b",
		},
		{
			name:   "breaker",
			before: "breaker: {error_rate: 20}\n",
			next:   "breaker: {error_rate: 50}\n",
			check: func(e *env) string {
				_, st := e.api("GET", "/api/v1/status", nil)
				bs, _ := st["breakers"].([]any)
				if len(bs) != 1 {
					return fmt.Sprint(bs)
				}
				return fmt.Sprint(bs[0].(map[string]any)["config"].(map[string]any)["error_rate"])
			},
			wantBefore: "20", wantNow: "50",
		},
		{
			name:   "rules",
			before: "",
			next:   "rules: [{key: seeded, type: gray, gray_percent: 100, targets: {gray: gray, stable: stable}}]\n",
			check: func(e *env) string {
				a, _ := e.get("/", "X-User-Id", "1")
				return a.rule
			},
			wantBefore: "", wantNow: "seeded",
		},
		{
			name:   "targeting and identity.jwt",
			before: "",
			next:   "identity: {jwt: only, anonymous: ip}\ntargeting: {tags: {jwt: {hs256_secret_file: " + writeSecret(t, dir) + "}}}\n",
			check: func(e *env) string {
				tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "vip", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(strings.Repeat("s", 32)))
				a, _ := e.get("/", "Authorization", "Bearer "+tok)
				return a.group
			},
			wantBefore: "default", wantNow: "gray",
		},
		{
			name:   "access_log.path",
			before: "access_log: {enabled: true, path: " + filepath.Join(dir, "a.log") + "}\n",
			next:   "access_log: {enabled: true, path: " + filepath.Join(dir, "b.log") + "}\n",
			check: func(e *env) string {
				mark, _ := e.logMark()
				if f := loggedIn(mark, filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")); f != "" {
					return filepath.Base(f)
				}
				return "no line"
			},
			wantBefore: "a.log", wantNow: "b.log",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := baseConfig + tt.before
			e := start(t, base, "")
			e.mustPut("vip", map[string]any{"type": "gray", "gray_percent": 0, "white_list": []string{"uid:vip"}, "targets": grayRule(1).Targets})
			if got := tt.check(e); got != tt.wantBefore {
				t.Fatalf("before the reload: %q, want %q", got, tt.wantBefore)
			}
			next := baseConfig + tt.next
			if tt.next == "upstreams_override" {
				next = strings.Replace(baseConfig, `stable: {instances: [{addr: "{{stable}}"}]}`, `stable: {instances: [{addr: "{{b}}"}]}`, 1)
			}
			if err := e.reload(next); err != nil {
				t.Fatal(err)
			}
			if got := tt.check(e); got != tt.wantNow {
				t.Errorf("after the reload: %q, want %q", got, tt.wantNow)
			}
			if st := e.gw.Status(); st.LastResult != "ok" || len(st.RestartRequired) != 0 {
				t.Errorf("a live change reported %q, restart required %v", st.LastResult, st.RestartRequired)
			}
		})
	}
}

// TestReloadNamesRestartRequired: a reload that changes a field that needs
// a restart applies the rest and names the field in the status, until a
// config with the running value comes back.
func TestReloadNamesRestartRequired(t *testing.T) {
	e := start(t, baseConfig, "")
	next := baseConfig + "lifecycle: {reuse_port: true}\nstore: {history_limit: 7}\n"
	next = strings.Replace(next, "default_upstream: stable", "default_upstream: b", 1)
	if err := e.reload(next); err != nil {
		t.Fatal(err)
	}
	if a, _ := e.get("/", "X-User-Id", "1"); a.backend != "b" {
		t.Errorf("the live part was not applied: %+v", a)
	}
	_, st := e.api("GET", "/api/v1/status", nil)
	want := "ok; restart required: lifecycle.reuse_port; restart required: store.history_limit"
	if st["last_reload_result"] != want || fmt.Sprint(st["restart_required"]) != "[lifecycle.reuse_port store.history_limit]" {
		t.Errorf("status: last_reload_result %q, restart_required %v; want %q", st["last_reload_result"], st["restart_required"], want)
	}
	// A rule write rebuilds the snapshot; the fields still wait.
	e.mustPut("k", grayRule(1))
	if st := e.gw.Status(); st.LastResult != want {
		t.Errorf("after a rule write: %q, want %q", st.LastResult, want)
	}
	// Until the data plane can be reconfigured in place, its options are
	// named too (applyProxy).
	if err := e.reload(baseConfig + "proxy: {max_header_bytes: 4096}\n"); err != nil {
		t.Fatal(err)
	}
	if st := e.gw.Status(); st.LastResult != "ok; restart required: proxy.max_header_bytes" {
		t.Errorf("a data-plane option: %q", st.LastResult)
	}
	if err := e.reload(baseConfig); err != nil {
		t.Fatal(err)
	}
	if st := e.gw.Status(); st.LastResult != "ok" || len(st.RestartRequired) != 0 {
		t.Errorf("back to the running values: %q %v", st.LastResult, st.RestartRequired)
	}
}

// writeSecret writes a 32-byte HS256 secret into dir and returns its path.
func writeSecret(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "hs256.secret")
	if err := os.WriteFile(p, []byte(strings.Repeat("s", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestProxyClock: the data plane reads the real clock itself unless the
// gateway was given a clock, which it then hands on (tests drive both
// with one fake clock). On the real clock the proxy reuses a request's
// start time for its network deadlines instead of reading the clock again.
func TestProxyClock(t *testing.T) {
	fake := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tt := range []struct {
		name string
		now  func() time.Time
	}{{"real clock", nil}, {"fake clock", func() time.Time { return fake }}} {
		t.Run(tt.name, func(t *testing.T) {
			y := strings.NewReplacer("{{stable}}", "127.0.0.1:1", "{{gray}}", "127.0.0.1:2", "{{a}}", "127.0.0.1:3", "{{b}}", "127.0.0.1:4").Replace(baseConfig)
			cfg, err := config.Parse([]byte(y))
			if err != nil {
				t.Fatal(err)
			}
			cfg.DataDir = t.TempDir()
			g, err := New(Options{Config: cfg, Now: tt.now})
			if err != nil {
				t.Fatal(err)
			}
			switch got := g.popts.Now; {
			case tt.now == nil && got != nil:
				t.Error("the proxy was handed a clock though none was given")
			case tt.now != nil && (got == nil || !got().Equal(fake)):
				t.Error("the proxy was not handed the gateway's fake clock")
			}
		})
	}
}

// TestReloadDropsRemovedRouteLimiter: a route's rate limiter keeps its
// spent tokens across a reload that keeps the route, also one that
// changes its limit, and is dropped by one that removes the route: added
// back later, the route starts with a full bucket. Reloads through ever
// new route names keep only the limiters of the routes there are.
func TestReloadDropsRemovedRouteLimiter(t *testing.T) {
	route := func(name string, burst int) string {
		return fmt.Sprintf("routes: [{name: %s, path_prefix: /api/, upstream: a, rate_limit: {rps: 0.001, burst: %d}}]\n", name, burst)
	}
	e := start(t, baseConfig+route("api", 1), "")
	statuses := func(n int) string {
		var out []string
		for range n {
			a, err := e.get("/api/x")
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprint(a.status))
		}
		return strings.Join(out, " ")
	}
	if got := statuses(2); got != "200 429" {
		t.Fatalf("before any reload: %s, want 200 429", got)
	}
	steps := []struct {
		name, config string
		want         string
	}{
		{"an unrelated reload", strings.Replace(baseConfig, "default_upstream: stable", "default_upstream: b", 1) + route("api", 1), "429"},
		{"a changed limit", baseConfig + route("api", 2), "429"},
		{"the route removed", baseConfig, "200 200"},
		{"the route back", baseConfig + route("api", 1), "200 429"},
	}
	for _, s := range steps {
		if err := e.reload(s.config); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := statuses(len(strings.Fields(s.want))); got != s.want {
			t.Errorf("after %s: %s, want %s", s.name, got, s.want)
		}
	}
	for i := range 20 {
		if err := e.reload(baseConfig + route(fmt.Sprintf("r%d", i), 1)); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := e.gw.limits.Len(); n != 1 {
		t.Errorf("after reloads through 20 route names, %d rate limiters are kept, want 1", n)
	}
	if err := e.reload(baseConfig + "limits: {rate_limit: {rps: 10}}\n"); err != nil {
		t.Fatal(err)
	}
	if err := e.reload(baseConfig); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.gw.limits.Len(); n != 0 {
		t.Errorf("with no rate limit configured, %d rate limiters are kept, want 0", n)
	}
}

// TestReloadDropsRemovedUpstreamGate: reloads through ever new capped
// upstream names keep only the concurrency gates of the upstreams the
// serving config caps, and taking a cap off drops its gate too.
func TestReloadDropsRemovedUpstreamGate(t *testing.T) {
	capped := func(name string) string {
		return baseConfig + fmt.Sprintf("  %s: {instances: [{addr: \"{{a}}\"}], max_concurrent: 4}\n", name)
	}
	e := start(t, capped("c0"), "")
	for i := range 20 {
		if err := e.reload(capped(fmt.Sprintf("c%d", i+1))); err != nil {
			t.Fatal(err)
		}
		a, err := e.get("/api/x")
		if err != nil || a.status != 200 {
			t.Fatalf("after reload %d: %v, %+v", i, err, a)
		}
	}
	if _, n := e.gw.limits.Len(); n != 1 {
		t.Errorf("after reloads through 21 capped upstream names, %d gates are kept, want 1", n)
	}
	if err := e.reload(baseConfig); err != nil {
		t.Fatal(err)
	}
	if _, n := e.gw.limits.Len(); n != 0 {
		t.Errorf("with no upstream capped, %d gates are kept, want 0", n)
	}
}
