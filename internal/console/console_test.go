package console_test

import (
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/console"
)

// TestServeHeaders fetches the console's files through the gateway's
// admin listener, without a token, and checks types and security headers.
func TestServeHeaders(t *testing.T) {
	e := startGateway(t, nil)
	noRedirect := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	tests := []struct {
		name, method, path string
		code               int
		contentType        string
		body               string
	}{
		{"the page", "GET", "/ui/", 200, "text/html; charset=utf-8", `<script type="module" src="js/app.js"></script>`},
		{"the page by name", "GET", "/ui/index.html", 200, "text/html; charset=utf-8", `<div id="app"></div>`},
		{"a script", "GET", "/ui/js/app.js", 200, "text/javascript; charset=utf-8", "import"},
		{"a module", "GET", "/ui/js/rule.js", 200, "text/javascript; charset=utf-8", "dry_run=1"},
		{"the styles", "GET", "/ui/style.css", 200, "text/css; charset=utf-8", ":root"},
		{"the icon", "GET", "/ui/favicon.svg", 200, "image/svg+xml", "<svg"},
		{"HEAD", "HEAD", "/ui/", 200, "text/html; charset=utf-8", ""},
		{"no such file", "GET", "/ui/nope.js", 404, "text/plain; charset=utf-8", "not found"},
		{"a directory", "GET", "/ui/js/", 404, "text/plain; charset=utf-8", "not found"},
		{"a write", "POST", "/ui/", 405, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, e.admin+tt.path, nil)
			resp, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.code {
				t.Fatalf("%s %s = %d, want %d", tt.method, tt.path, resp.StatusCode, tt.code)
			}
			if tt.contentType != "" && resp.Header.Get("Content-Type") != tt.contentType {
				t.Errorf("Content-Type = %q, want %q", resp.Header.Get("Content-Type"), tt.contentType)
			}
			if !strings.Contains(string(body), tt.body) {
				t.Errorf("body does not contain %q:\n%.300s", tt.body, body)
			}
			if tt.code == 405 {
				return // the admin mux answers before the console
			}
			for h, want := range map[string]string{
				"Content-Security-Policy": console.ContentSecurityPolicy,
				"X-Content-Type-Options":  "nosniff",
				"Referrer-Policy":         "no-referrer",
			} {
				if got := resp.Header.Get(h); got != want {
					t.Errorf("%s = %q, want %q", h, got, want)
				}
			}
			if cookies := resp.Header.Values("Set-Cookie"); len(cookies) != 0 {
				t.Errorf("the console sets cookies: %v", cookies)
			}
		})
	}
	csp := console.ContentSecurityPolicy
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("the CSP lacks %q", want)
		}
	}
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "http:", "https:", "*"} {
		if strings.Contains(csp, bad) {
			t.Errorf("the CSP allows %q", bad)
		}
	}

	redirects := []struct{ path, to string }{{"/", "/ui/"}, {"/ui", "/ui/"}}
	for _, r := range redirects {
		resp, err := noRedirect.Get(e.admin + r.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); resp.StatusCode/100 != 3 || loc != r.to {
			t.Errorf("GET %s = %d to %q, want a redirect to %s", r.path, resp.StatusCode, loc, r.to)
		}
	}
	// A conditional GET gets 304, so a reload re-checks cheaply.
	resp, err := e.client.Get(e.admin + "/ui/js/app.js")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	req, _ := http.NewRequest("GET", e.admin+"/ui/js/app.js", nil)
	req.Header.Set("If-None-Match", resp.Header.Get("ETag"))
	resp, err = e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotModified || resp.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("conditional GET = %d (CSP %q), want 304 with the headers", resp.StatusCode, resp.Header.Get("Content-Security-Policy"))
	}
}

// TestWhoamiAndStats checks the two API routes the console added.
func TestWhoamiAndStats(t *testing.T) {
	e := startGateway(t, nil)
	who := func(token string) (int, map[string]any) {
		req, _ := http.NewRequest("GET", e.admin+"/api/v1/whoami", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	tests := []struct {
		name, token string
		code        int
		who, role   string
	}{
		{"admin", adminToken, 200, "default", "admin"},
		{"viewer", viewerToken, 200, "dashboard", "viewer"},
		{"no token", "", 401, "", ""},
		{"wrong token", "nope", 401, "", ""},
	}
	for _, tt := range tests {
		t.Run("whoami "+tt.name, func(t *testing.T) {
			code, out := who(tt.token)
			if code != tt.code || (code == 200 && (out["name"] != tt.who || out["role"] != tt.role)) {
				t.Errorf("whoami = %d %v, want %d {name %s, role %s}", code, out, tt.code, tt.who, tt.role)
			}
		})
	}

	// Traffic through the data plane shows in /api/v1/stats per group.
	for i := range 40 {
		e.get("/api/user/profile", "10001") // whitelisted: gray
		e.get("/shop/cart", string(rune('a'+i%26)))
		e.get("/elsewhere", "1") // no rule claims it
	}
	// The current second counts once it is over: poll until every request
	// is in the window.
	var got map[string]map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, out := e.api("GET", "/api/v1/stats?window=30s", nil)
		if code != 200 {
			t.Fatalf("GET /api/v1/stats = %d %v", code, out)
		}
		if out["window_s"] != 30.0 || out["bucket_s"] != 1.0 {
			t.Errorf("stats window_s %v bucket_s %v, want 30 and 1", out["window_s"], out["bucket_s"])
		}
		got = map[string]map[string]any{}
		total := 0.0
		for _, s := range out["series"].([]any) {
			m := s.(map[string]any)
			got[m["rule"].(string)+"/"+m["group"].(string)] = m
			total += m["requests"].(float64)
		}
		if total == 120 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	gray := got["user_center_v2/gray"]
	if gray == nil || gray["requests"] != 40.0 || gray["errors"] != 0.0 || gray["error_rate"] != 0.0 || !(gray["p99_ms"].(float64) > 0) {
		t.Errorf("user_center_v2/gray = %v, want 40 requests, no errors, a p99", gray)
	}
	if a, b := got["checkout_button/A"], got["checkout_button/B"]; a == nil || b == nil || a["requests"].(float64)+b["requests"].(float64) != 40 {
		t.Errorf("checkout_button A %v, B %v: want 40 requests between them", a, b)
	}
	if d := got["/default"]; d == nil || d["requests"] != 40.0 {
		t.Errorf("unclaimed traffic = %v, want 40 requests", d)
	}
	trend, _ := gray["trend"].([]any)
	sum := 0.0
	for _, n := range trend {
		sum += n.(float64)
	}
	if len(trend) != 60 || sum != 40 || trend[59].(float64)+trend[58].(float64)+trend[57].(float64)+trend[56].(float64)+trend[55].(float64) == 0 {
		t.Errorf("gray trend = %v, want 60 points summing to the 40 requests, ending with the last seconds'", trend)
	}

	// A deleted rule's series go at the next snapshot build.
	if code, out := e.api("DELETE", "/api/v1/rules/checkout_button", nil); code != 200 {
		t.Fatalf("DELETE checkout_button = %d %v", code, out)
	}
	_, out := e.api("GET", "/api/v1/stats?window=30s", nil)
	for _, s := range out["series"].([]any) {
		if r := s.(map[string]any)["rule"]; r == "checkout_button" {
			t.Errorf("after DELETE, stats still list %v", s)
		}
	}

	for _, bad := range []string{"abc", "0s", "1h", "-5s"} {
		code, out := e.api("GET", "/api/v1/stats?window="+bad, nil)
		details, _ := out["details"].([]any)
		if code != 400 || len(details) != 1 || details[0].(map[string]any)["path"] != "window" {
			t.Errorf("stats?window=%s = %d %v, want 400 naming window", bad, code, out)
		}
	}
}

// TestNoMarkupSinks reads the console's scripts: no string is ever parsed
// as HTML or code, and nothing is styled inline. (The CSP enforces the
// same in the browser; this names the line.)
func TestNoMarkupSinks(t *testing.T) {
	sinks := regexp.MustCompile(`\.innerHTML|\.outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setAttribute\(\s*['"](style|on)|\.style\s*=|javascript:|https?://(?:[^w]|w[^w]|ww[^w])`)
	root := "assets"
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n++
		for i, line := range strings.Split(string(body), "\n") {
			if strings.HasSuffix(p, ".js") && sinks.MatchString(line) {
				t.Errorf("%s:%d: %s", p, i+1, strings.TrimSpace(line))
			}
			if strings.HasSuffix(p, ".html") && (strings.Contains(line, "style=") || strings.Contains(line, "<style") ||
				(strings.Contains(line, "<script") && !strings.Contains(line, "src="))) {
				t.Errorf("%s:%d: inline script or style: %s", p, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil || n < 5 {
		t.Fatalf("read %d asset files: %v", n, err)
	}
}
