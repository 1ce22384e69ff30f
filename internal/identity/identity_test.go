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
	none := NewResolver(Config{Sources: []Source{}, Anonymous: "ip"}, nil)
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
		{"header whitespace is not the id", def, map[string]string{"X-User-Id": " \t42 "}, nil, nil, "42", "header:X-User-Id", false},
		{"blank header falls through", def, map[string]string{"X-User-Id": "  "}, map[string]string{"user_id": "c"}, nil, "c", "cookie:user_id", false},
		{"cookie and query spaces are kept", def, nil, nil, map[string]string{"user_id": " q "}, " q ", "query:user_id", false},
		{"non-ascii", def, map[string]string{"X-User-Id": "用户42"}, nil, nil, "用户42", "header:X-User-Id", false},
		{"returning anonymous", def, nil, map[string]string{"gg_uid": "abc"}, nil, "abc", SourceAnonymousCookie, false},
		{"new anonymous", def, nil, nil, nil, strings.Repeat("ab", 16), SourceAnonymousCookie, true},
		{"custom order", custom, map[string]string{"X-Account": "acct", "X-User-Id": "ignored"}, nil, map[string]string{"uid": ""}, "acct", "header:X-Account", false},
		{"ip fallback", custom, nil, nil, nil, "ip_203.0.113.9", SourceAnonymousIP, false},
		{"no sources (sources: [])", none, map[string]string{"X-User-Id": "h"}, map[string]string{"user_id": "c"}, map[string]string{"user_id": "q"}, "ip_203.0.113.9", SourceAnonymousIP, false},
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
		{Config{MaxLength: -1}, `identity.max_length: must be 1..4096 bytes (0 is the default, 256), got -1`},
		{Config{MaxLength: 1 << 20}, `identity.max_length: must be 1..4096 bytes (0 is the default, 256), got 1048576`},
		{Config{IPv6Prefix: 20}, `identity.ipv6_prefix: must be 32..128 bits (0 is the default, 128: the whole address), got 20`},
		{Config{IPv6Prefix: 129}, `identity.ipv6_prefix: must be 32..128 bits (0 is the default, 128: the whole address), got 129`},
		{Config{IPv6Prefix: -1}, `identity.ipv6_prefix: must be 32..128 bits (0 is the default, 128: the whole address), got -1`},
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

// TestAddressID: the id of a client known by its address. An IPv6
// address is cut to identity.ipv6_prefix bits (all 128 by default), so
// that the addresses of one /64 are one client; an IPv4 address, mapped
// or not, is whole whatever the prefix.
func TestAddressID(t *testing.T) {
	tests := []struct {
		addr string
		bits uint8
		want string
	}{
		{"203.0.113.9", 128, "ip_203.0.113.9"},
		{"203.0.113.9", 64, "ip_203.0.113.9"},
		{"::ffff:203.0.113.9", 64, "ip_::ffff:203.0.113.9"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", 128, "ip_2001:db8:1:2:aaaa:bbbb:cccc:dddd"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", 0, "ip_2001:db8:1:2:aaaa:bbbb:cccc:dddd"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", 64, "ip_2001:db8:1:2::/64"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", 56, "ip_2001:db8:1::/56"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", 127, "ip_2001:db8:1:2:aaaa:bbbb:cccc:dddc/127"},
		{"fe80::1%eth0", 64, "ip_fe80::/64"},
		{"", 64, "ip_unknown"},
	}
	for _, tt := range tests {
		var ip netip.Addr
		if tt.addr != "" {
			ip = netip.MustParseAddr(tt.addr)
		}
		if got := string(AppendAddressID(nil, ip, tt.bits)); got != tt.want {
			t.Errorf("AppendAddressID(%s, %d) = %q, want %q", tt.addr, tt.bits, got, tt.want)
		}
	}
	// The resolver's anonymous: ip id, and the prefix it hands the data
	// plane for an issued id's rate-limit key.
	r := NewResolver(Config{Sources: []Source{}, Anonymous: "ip", IPv6Prefix: 64}, nil)
	id := r.Resolve(&attr.Map{IP: netip.MustParseAddr("2001:db8:1:2::77")})
	if id.Value != "ip_2001:db8:1:2::/64" || id.Source != SourceAnonymousIP || id.IPv6Prefix != 64 {
		t.Errorf("anonymous: ip with ipv6_prefix 64 = %+v", id)
	}
	issued := NewResolver(Config{IPv6Prefix: 48}, bytes.NewReader(bytes.Repeat([]byte{1}, 64))).Resolve(&attr.Map{})
	if !issued.Issued || issued.IPv6Prefix != 48 {
		t.Errorf("an issued id = %+v, want Issued and IPv6Prefix 48", issued)
	}
	if c := (Config{}).Effective(); c.IPv6Prefix != 128 {
		t.Errorf("the default ipv6_prefix is %d, want 128", c.IPv6Prefix)
	}
}

// TestMaxLength: a value over max_length is refused wherever it comes
// from, with a message naming the source and both lengths; one of exactly
// max_length bytes is accepted, and ids the gateway makes are never
// refused.
func TestMaxLength(t *testing.T) {
	def := NewResolver(Config{}, bytes.NewReader(bytes.Repeat([]byte{1}, 64)))
	small := NewResolver(Config{MaxLength: 4, Anonymous: "ip"}, nil)
	x := strings.Repeat
	tests := []struct {
		name                string
		r                   *Resolver
		headers, cookies, q map[string]string
		wantValue, source   string
		wantRefused         string // the message, "" if accepted
	}{
		{"header at the limit", def, map[string]string{"X-User-Id": x("a", 256)}, nil, nil, x("a", 256), "header:X-User-Id", ""},
		{"header over it", def, map[string]string{"X-User-Id": x("a", 16384)}, nil, nil, "", "header:X-User-Id",
			`identity "X-User-Id" is 16384 bytes, over identity.max_length 256`},
		{"a long header is refused, not skipped for the cookie", def, map[string]string{"X-User-Id": x("a", 257)}, map[string]string{"user_id": "c"}, nil, "", "header:X-User-Id",
			`identity "X-User-Id" is 257 bytes, over identity.max_length 256`},
		{"cookie over it", def, nil, map[string]string{"user_id": x("用", 100)}, nil, "", "cookie:user_id",
			`identity cookie "user_id" is 300 bytes, over identity.max_length 256`},
		{"query over it", def, nil, nil, map[string]string{"user_id": x("q", 1000)}, "", "query:user_id",
			`identity query "user_id" is 1000 bytes, over identity.max_length 256`},
		{"anonymous cookie over it", def, nil, map[string]string{"gg_uid": x("g", 300)}, nil, "", SourceAnonymousCookie,
			`identity cookie "gg_uid" is 300 bytes, over identity.max_length 256`},
		{"custom limit", small, map[string]string{"X-User-Id": "12345"}, nil, nil, "", "header:X-User-Id",
			`identity "X-User-Id" is 5 bytes, over identity.max_length 4`},
		{"custom limit, at it", small, map[string]string{"X-User-Id": "1234"}, nil, nil, "1234", "header:X-User-Id", ""},
		{"made ids are never refused", small, nil, nil, nil, "ip_203.0.113.9", SourceAnonymousIP, ""},
		{"issued ids are never refused", NewResolver(Config{MaxLength: 4}, bytes.NewReader(bytes.Repeat([]byte{1}, 64))), nil, nil, nil, x("01", 16), SourceAnonymousCookie, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := tt.r.Resolve(&attr.Map{Headers: tt.headers, Cookies: tt.cookies, Queries: tt.q, IP: netip.MustParseAddr("203.0.113.9")})
			msg := ""
			if id.Refused != nil {
				msg = id.Refused.Message
				if id.Refused.Reason != ReasonTooLong {
					t.Errorf("reason %q, want %q", id.Refused.Reason, ReasonTooLong)
				}
			}
			if id.Value != tt.wantValue || id.Source != tt.source || msg != tt.wantRefused {
				t.Errorf("Resolve = %.40q from %q refused %q; want %.40q from %q refused %q", id.Value, id.Source, msg, tt.wantValue, tt.source, tt.wantRefused)
			}
		})
	}
	if id := def.Claim(x("s", 256)); id.Refused != nil || id.Source != SourceJWT || len(id.Value) != 256 {
		t.Errorf("Claim(256 bytes) = %+v", id)
	}
	if id := def.Claim(x("s", 300)); id.Refused == nil || id.Value != "" ||
		id.Refused.Message != `identity claim of the verified token is 300 bytes, over identity.max_length 256` {
		t.Errorf("Claim(300 bytes) = %+v", id)
	}
	if def.MaxLength() != DefaultMaxLength || small.MaxLength() != 4 {
		t.Errorf("MaxLength = %d, %d", def.MaxLength(), small.MaxLength())
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
	f.Add(strings.Repeat("x", 300), "", "", "", "")
	f.Add("", "", "", strings.Repeat("g", 257), "")
	f.Add(" \t42 ", "", "", "", "")
	f.Add("", "", "", "", "2001:db8:1:2::ff")
	f.Add("", "", "", "", "fe80::1%eth0")
	f.Fuzz(func(t *testing.T, h, c, q, anon, ip string) {
		addr, _ := netip.ParseAddr(ip)
		m := &attr.Map{
			Headers: map[string]string{"X-User-Id": h},
			Cookies: map[string]string{"user_id": c, "gg_uid": anon},
			Queries: map[string]string{"user_id": q},
			IP:      addr,
		}
		v6 := NewResolver(Config{Sources: []Source{}, Anonymous: "ip", IPv6Prefix: 64}, nil)
		if id := v6.Resolve(m); addr.IsValid() {
			// The same client whatever its address's last 64 bits.
			other := addr
			if addr.Is6() && !addr.Is4In6() {
				b := addr.As16()
				b[15] ^= 0xff
				other = netip.AddrFrom16(b).WithZone(addr.Zone())
			}
			if again := v6.Resolve(&attr.Map{IP: other}); again.Value != id.Value || !strings.HasPrefix(id.Value, "ip_") {
				t.Fatalf("ipv6_prefix 64: %s is %q, %s is %q", addr, id.Value, other, again.Value)
			}
		}
		for _, r := range []*Resolver{NewResolver(Config{}, nil), NewResolver(Config{Anonymous: "ip", MaxLength: 3}, nil)} {
			id := r.Resolve(m)
			if id.Source == "" || (id.Value == "") == (id.Refused == nil) {
				t.Fatalf("Resolve(%q,%q,%q,%q) = %+v: want a value or a refusal", h, c, q, anon, id)
			}
			if id.Source == "header:X-User-Id" && strings.Trim(id.Value, " \t") != id.Value {
				t.Fatalf("Resolve(%q) = %q: a header value keeps its surrounding whitespace", h, id.Value)
			}
			if len(id.Value) > r.MaxLength() && !strings.HasPrefix(id.Source, "anonymous") {
				t.Fatalf("Resolve(%q,%q,%q,%q) = %d bytes from %s, over %d", h, c, q, anon, len(id.Value), id.Source, r.MaxLength())
			}
		}
	})
}
