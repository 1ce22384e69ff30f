package proxy

import (
	"strings"
	"testing"
	"time"
)

func TestParseGRPCTimeout(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"100m", 100 * time.Millisecond, true},
		{"1S", time.Second, true},
		{"2M", 2 * time.Minute, true},
		{"1H", time.Hour, true},
		{"500u", 500 * time.Microsecond, true},
		{"99999999n", 99999999, true},
		{"123456789S", 0, false}, // nine digits: more than the spec's eight
		{"10", 0, false},
		{"m", 0, false},
		{"-1S", 0, false},
		{"1s", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseGRPCTimeout(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseGRPCTimeout(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestGRPCMessageEncoding(t *testing.T) {
	got := string(appendGRPCMessage(nil, []byte("upstream \"a\" 100% down\n用")))
	if want := `upstream "a" 100%25 down%0A%E7%94%A8`; got != want {
		t.Errorf("appendGRPCMessage = %q, want %q", got, want)
	}
}

// FuzzGRPCHeaders: the gRPC fields the gateway reads from clients and
// upstreams never panic, and a timeout that parses is non-negative.
func FuzzGRPCHeaders(f *testing.F) {
	for _, s := range []string{"1S", "100m", "99999999H", "", "x", "14", "-1", "application/grpc+proto"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d, ok := parseGRPCTimeout(s); ok && d < 0 {
			t.Fatalf("parseGRPCTimeout(%q) = %v", s, d)
		}
		if c := parseGRPCStatus(s); c < -1 || c > 16 {
			t.Fatalf("parseGRPCStatus(%q) = %d", s, c)
		}
		_ = isGRPC(s)
		msg := appendGRPCMessage(nil, []byte(s))
		for _, c := range msg {
			if c < 0x20 || c > 0x7e {
				t.Fatalf("grpc-message %q has a byte outside printable ASCII", msg)
			}
		}
		if strings.Contains(s, "%") && !strings.Contains(string(msg), "%25") {
			t.Fatalf("grpc-message %q does not escape %%", msg)
		}
	})
}
