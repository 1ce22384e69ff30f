package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/graygate/graygate/internal/testport"
)

// TestErrorBodyNamesNoLiteralAddress checks that a client's error answer
// never shows an instance address when a target is given as a bare
// address (default_upstream: "10.0.0.7:8080", as the seed configs write
// it): such a pool is named by its address, so its name is left out of the
// body too. A named pool is still named. (A rule's gray and stable both
// fail: a gray target's failure falls back to stable.) The answers come
// through the real listener.
func TestErrorBodyNamesNoLiteralAddress(t *testing.T) {
	deadDefault, deadGray, deadStable, deadNamed := testport.Refused(t), testport.Refused(t), testport.Refused(t), testport.Refused(t)
	e := start(t, `
default_upstream: "`+deadDefault+`"
upstreams:
  stable: {instances: [{addr: "{{stable}}"}]}
  down:   {instances: [{addr: "`+deadNamed+`"}]}
rules:
  - {key: lit, type: gray, gray_percent: 100, conditions: {path_prefix: ["/lit/"]}, targets: {gray: "`+deadGray+`", stable: "`+deadStable+`"}}
  - {key: named, type: gray, gray_percent: 100, conditions: {path_prefix: ["/named/"]}, targets: {gray: down, stable: down}}
`, "")
	tests := []struct {
		path  string
		addrs []string
		want  string
	}{
		{"/other", []string{deadDefault}, "graygate: upstream unreachable"},
		{"/lit/a", []string{deadGray, deadStable}, "graygate: upstream unreachable"},
		{"/named/a", []string{deadNamed}, `graygate: upstream "down" unreachable`},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest("GET", e.data+tt.path, nil)
		req.Header.Set("X-User-Id", "u1")
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", tt.path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body, id := string(b), resp.Header.Get("X-Request-Id")
		if resp.StatusCode != http.StatusBadGateway || !strings.HasPrefix(body, tt.want+" (request id ") {
			t.Errorf("GET %s: %d %q, want 502 %q with the request id", tt.path, resp.StatusCode, body, tt.want)
		}
		if id == "" || !strings.Contains(body, id) {
			t.Errorf("GET %s: body %q does not show X-Request-Id %q", tt.path, body, id)
		}
		for _, addr := range tt.addrs {
			_, port, _ := strings.Cut(addr, ":")
			if strings.Contains(body, "127.0.0.1") || strings.Contains(body, port) {
				t.Errorf("GET %s: body %q names the instance address %s", tt.path, body, addr)
			}
		}
	}
}
