package identity

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/graygate/graygate/internal/attr"
)

func TestResolveOrder(t *testing.T) {
	def := NewResolver(Config{}, bytes.NewReader(bytes.Repeat([]byte{0xab}, 64)))
	custom := NewResolver(Config{Sources: []Source{{Query: "uid"}, {Header: "x-account"}}, Anonymous: "ip"}, nil)
	ip := netip.MustParseAddr("203.0.113.9")
	tests := []struct {
		name                string
		r                   *Resolver
		headers, cookies, q map[string]string
		want, source        string
		issued              bool
	}{
		{"header first", def, map[string]string{"X-User-Id": "h"}, map[string]string{"user_id": "c"}, map[string]string{"user_id": "q"}, "h", "header:X-User-Id", false},
		{"header case-insensitive", def, map[string]string{"x-user-id": "h"}, nil, nil, "h", "header:X-User-Id", false},
		{"cookie second", def, map[string]string{"X-User-Id": ""}, map[string]string{"user_id": "c"}, map[string]string{"user_id": "q"}, "c", "cookie:user_id", false},
		{"query third", def, nil, nil, map[string]string{"user_id": "q"}, "q", "query:user_id", false},
		{"non-ascii", def, map[string]string{"X-User-Id": "用户42"}, nil, nil, "用户42", "header:X-User-Id", false},
		{"returning anonymous", def, nil, map[string]string{"gg_uid": "abc"}, nil, "abc", SourceAnonymousCookie, false},
		{"new anonymous", def, nil, nil, nil, strings.Repeat("ab", 16), SourceAnonymousCookie, true},
		{"custom order", custom, map[string]string{"X-Account": "acct", "X-User-Id": "ignored"}, nil, map[string]string{"uid": ""}, "acct", "header:X-Account", false},
		{"ip fallback", custom, nil, nil, nil, "ip_203.0.113.9", SourceAnonymousIP, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := tt.r.Resolve(&attr.Map{Headers: tt.headers, Cookies: tt.cookies, Queries: tt.q, IP: ip})
			if id.Value != tt.want || id.Source != tt.source || id.Issued != tt.issued {
				t.Errorf("Resolve = %+v, want %q from %q (issued %v)", id, tt.want, tt.source, tt.issued)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		c    Config
		want string
	}{
		{Config{Sources: []Source{{Header: "X-User-Id", Cookie: "u"}}}, "identity.sources[0]: set exactly one"},
		{Config{Sources: []Source{{}}}, "identity.sources[0]: set exactly one"},
		{Config{Sources: []Source{{Header: "bad header"}}}, `identity.sources[0].header: invalid header name "bad header"`},
		{Config{Anonymous: "random"}, `identity.anonymous: must be "cookie" or "ip", got "random"`},
		{Config{AnonymousCookie: "a;b"}, `identity.anonymous_cookie: invalid cookie name "a;b"`},
	}
	for _, tt := range tests {
		err := tt.c.Validate("identity")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tt.c, err, tt.want)
		}
	}
	if err := (&Config{Sources: DefaultSources, Anonymous: "ip"}).Validate("identity"); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
}

func TestResolveKnownUserDoesNotAllocate(t *testing.T) {
	r := NewResolver(Config{}, nil)
	m := &attr.Map{Headers: map[string]string{"X-User-Id": "42"}}
	if a := testing.AllocsPerRun(100, func() { r.Resolve(m) }); a != 0 {
		t.Errorf("Resolve allocates %v times", a)
	}
}

func FuzzResolve(f *testing.F) {
	f.Add("42", "c", "q", "gg", "10.0.0.1")
	f.Add("", "", "", "", "::1")
	f.Add("", "用户", "", "", "")
	f.Fuzz(func(t *testing.T, h, c, q, anon, ip string) {
		addr, _ := netip.ParseAddr(ip)
		m := &attr.Map{
			Headers: map[string]string{"X-User-Id": h},
			Cookies: map[string]string{"user_id": c, "gg_uid": anon},
			Queries: map[string]string{"user_id": q},
			IP:      addr,
		}
		for _, r := range []*Resolver{NewResolver(Config{}, nil), NewResolver(Config{Anonymous: "ip"}, nil)} {
			id := r.Resolve(m)
			if id.Value == "" || id.Source == "" {
				t.Fatalf("Resolve(%q,%q,%q,%q) = %+v: empty", h, c, q, anon, id)
			}
		}
	})
}
