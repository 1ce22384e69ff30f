package upstream

import (
	"strings"
	"testing"
)

func TestParseAddress(t *testing.T) {
	tests := []struct {
		in, addr string
		tls      bool
		err      string
	}{
		{"127.0.0.1:8080", "127.0.0.1:8080", false, ""},
		{"[::1]:80", "[::1]:80", false, ""},
		{"http://example.com", "example.com:80", false, ""},
		{"https://example.com", "example.com:443", true, ""},
		{"http://example.com:81/", "example.com:81", false, ""},
		{"example.com", "", false, "want host:port"},
		{"http://example.com/path", "", false, "only scheme://host[:port]"},
		{"ftp://x:1", "", false, "scheme must be http or https"},
		{"h:0", "", false, "port must be 1..65535"},
		{":80", "", false, "empty host"},
		{"", "", false, "empty address"},
		// URLs get the checks host:port gets (graygate validate used to
		// accept these, and every request to them failed at the dial).
		{"http://127.0.0.1:99999", "", false, "port must be 1..65535"},
		{"http://127.0.0.1:0", "", false, "port must be 1..65535"},
		{"https://:8443", "", false, "empty host"},
		{"http://h:8080#frag", "", false, "only scheme://host[:port]"},
		{"http://h:8080?", "", false, "only scheme://host[:port]"},
		{"a b:80", "", false, `host "a b" has a space`},
		{"a/b:80", "", false, `host "a/b" has a space`},
		{"h:+80", "", false, "port must be 1..65535"},
		{"http://[::1]:8080", "[::1]:8080", false, ""},
		{"https://[::1]", "[::1]:443", true, ""},
		{"http://h:/", "h:80", false, ""},
		// Found by FuzzParseAddress: accepted as "]:80", which no dialer
		// can parse.
		{"http://]", "", false, "stray bracket"},
		{"http://a]b:80", "", false, "stray bracket"},
	}
	for _, tt := range tests {
		in, err := ParseAddress(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseAddress(%q) error = %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || in.Addr != tt.addr || in.TLS != tt.tls {
			t.Errorf("ParseAddress(%q) = %+v, %v", tt.in, in, err)
		}
	}
}

func TestPoolAndRegistry(t *testing.T) {
	p := NewPool("p", []*Instance{{Addr: "a:1"}, {Addr: "b:1"}})
	seen := map[string]int{}
	for i := 0; i < 10; i++ {
		in, _ := p.Pick()
		seen[in.Addr]++
	}
	if seen["a:1"] != 5 || seen["b:1"] != 5 {
		t.Errorf("round robin = %v", seen)
	}
	if _, err := NewPool("empty", nil).Pick(); err == nil || !strings.Contains(err.Error(), `pool "empty"`) {
		t.Errorf("empty pool: %v", err)
	}
	r := NewRegistry(map[string]*Pool{"p": p})
	if got, _ := r.Resolve("p"); got != p {
		t.Error("named pool not resolved")
	}
	l1, _ := r.Resolve("127.0.0.1:9")
	r2 := r.WithNamed(nil)
	l2, _ := r2.Resolve("127.0.0.1:9")
	if l1 != l2 {
		t.Error("literal pools must be shared across registries")
	}
	if _, err := r2.Resolve("p"); err == nil {
		t.Error("r2 must not know p")
	}
}
