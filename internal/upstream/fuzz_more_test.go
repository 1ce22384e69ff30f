package upstream

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseAddress: a target from a rule, the config or the registry is
// either refused with an error that quotes it, or becomes an instance
// the dialer can reach in form: host:port with a non-empty host free of
// spaces, control characters and slashes, and a port of 1..65535.
func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{"127.0.0.1:8080", "[::1]:9000", "http://svc", "https://svc:8443", "https://svc:8443/", "http://svc/path",
		"h:0", "h:65536", "h:+1", ":80", "a b:1", "http://u@h:1", "http://h:1#x", "http://[::1]", "svc", "", "http://h:1?x", "ftp://h:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		inst, err := ParseAddress(s)
		if err != nil {
			if s != "" && !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Fatalf("ParseAddress(%q): %v does not quote the address", s, err)
			}
			return
		}
		host, port, err := net.SplitHostPort(inst.Addr)
		if err != nil {
			t.Fatalf("ParseAddress(%q) = %q: not host:port: %v", s, inst.Addr, err)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			t.Fatalf("ParseAddress(%q) = %q: port %q", s, inst.Addr, port)
		}
		if host == "" || strings.ContainsAny(host, " /\\") {
			t.Fatalf("ParseAddress(%q) = %q: host %q", s, inst.Addr, host)
		}
		for i := 0; i < len(host); i++ {
			if host[i] < ' ' || host[i] == 0x7f {
				t.Fatalf("ParseAddress(%q) = %q: a control character in the host", s, inst.Addr)
			}
		}
		if inst.TLS && !strings.HasPrefix(s, "https://") {
			t.Fatalf("ParseAddress(%q): TLS without https://", s)
		}
	})
}
