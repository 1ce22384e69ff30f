package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestIdentityMaxLength sends identities over identity.max_length (256
// bytes by default) through the real listener, in each place an identity
// comes from: each gets a 400 that says which and how long, is counted in
// graygate_identity_rejected_total, and reaches neither the rate limiter
// (the route's single token is still there afterwards) nor the upstream.
// A 256-byte id is served; explain reports the refusal too.
func TestIdentityMaxLength(t *testing.T) {
	var hits atomic.Int64
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "counted")
	}))
	defer be.Close()
	// max_header_bytes is raised so that the 16 KiB header reaches the
	// identity check (at the default, 16 KiB, fasthttp answers 431 first).
	e := start(t, `
default_upstream: counted
proxy: {max_header_bytes: 65536}
upstreams:
  counted: {instances: [{addr: "`+strings.TrimPrefix(be.URL, "http://")+`"}]}
limits:
  rate_limit: {rps: 0.001, burst: 1}
`, "")
	addr := strings.TrimPrefix(e.data, "http://")
	long := func(n int) string { return strings.Repeat("u", n) }
	tests := []struct {
		name, head string
		want       string
	}{
		{"16 KiB X-User-Id", "X-User-Id: " + long(16384) + "\r\n",
			`graygate: identity "X-User-Id" is 16384 bytes, over identity.max_length 256`},
		{"long cookie", "Cookie: theme=dark; user_id=" + url.QueryEscape("用户"+long(300)) + "\r\n",
			`graygate: identity cookie "user_id" is 306 bytes, over identity.max_length 256`},
		{"long anonymous cookie", "Cookie: gg_uid=" + long(257) + "\r\n",
			`graygate: identity cookie "gg_uid" is 257 bytes, over identity.max_length 256`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := rawGet(t, addr, "/api/x", tt.head)
			if status != 400 || withoutRequestID(body) != tt.want+"\n" {
				t.Errorf("got %d %q, want 400 %q", status, body, tt.want)
			}
		})
	}
	t.Run("long query id", func(t *testing.T) {
		status, body := rawGet(t, addr, "/api/x?a=1&user_id="+long(1000), "")
		if want := `graygate: identity query "user_id" is 1000 bytes, over identity.max_length 256` + "\n"; status != 400 || withoutRequestID(body) != want {
			t.Errorf("got %d %q, want 400 %q", status, body, want)
		}
	})
	if n := hits.Load(); n != 0 {
		t.Fatalf("the upstream saw %d refused requests", n)
	}
	// The route's only token is still there: none of the refused requests
	// reached the limiter.
	if status, body := rawGet(t, addr, "/api/x", "X-User-Id: "+long(256)+"\r\n"); status != 200 || body != "counted" {
		t.Errorf("a 256-byte id: %d %q, want 200", status, body)
	}
	if status, _ := rawGet(t, addr, "/api/x", "X-User-Id: u\r\n"); status != 429 {
		t.Errorf("the second request: %d, want 429 (the limit is on)", status)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("the upstream saw %d requests, want 1", n)
	}

	resp, err := e.client.Get(e.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `graygate_identity_rejected_total{reason="too_long"} 4`; !strings.Contains(string(m), want+"\n") {
		t.Errorf("/metrics lacks %q", want)
	}

	code, ex := e.api("POST", "/api/v1/explain", map[string]any{"path": "/api/x", "headers": map[string]string{"X-User-Id": long(300)}})
	d, _ := ex["decision"].(map[string]any)
	tr, _ := ex["trace"].(map[string]any)
	want := `identity "X-User-Id" is 300 bytes, over identity.max_length 256`
	if code != 200 || d["reject"] != want || !strings.Contains(fmt.Sprint(tr["reason"]), want) {
		t.Errorf("explain = %d, decision %v, trace reason %q; want the refusal", code, d, tr["reason"])
	}
}

// rawGet sends one GET with extra header lines on a new connection and
// returns the status and body.
func rawGet(t *testing.T, addr, target, head string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET "+target+" HTTP/1.1\r\nHost: example.com\r\n"+head+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s body: %v", target, err)
	}
	return resp.StatusCode, string(b)
}

// requestIDSuffix is what the gateway appends to its own error bodies.
var requestIDSuffix = regexp.MustCompile(` \(request id [0-9a-f]{32}\)\n$`)

// withoutRequestID removes the request id from an error body.
func withoutRequestID(body string) string {
	return requestIDSuffix.ReplaceAllString(body, "\n")
}
