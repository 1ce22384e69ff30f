package proxy

import (
	"bufio"
	"net/netip"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/internal/identity"
	"github.com/graygate/graygate/internal/router"
)

func parsedCtx(t testing.TB, raw string) *fasthttp.RequestCtx {
	t.Helper()
	ctx := new(fasthttp.RequestCtx)
	if err := ctx.Request.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatalf("parsing %q: %v", raw, err)
	}
	return ctx
}

func TestViewCookie(t *testing.T) {
	tests := []struct {
		name   string
		header string
		cookie string
		want   string
		wantOK bool
	}{
		{"plain", "a=1; uid=abc", "uid", "abc", true},
		{"first wins", "uid=1; uid=2", "uid", "1", true},
		{"plus is space", "uid=a+b", "uid", "a b", true},
		{"percent", "uid=%41%2f%2F", "uid", "A//", true},
		{"bad percent kept", "uid=100%+%zz%4", "uid", "100% %zz%4", true},
		{"spaces trimmed", "  a = 1 ;  uid =  x  ", "uid", "x", true},
		{"no value", "flag; uid=1", "flag", "", true},
		{"empty value", "uid=", "uid", "", true},
		{"quotes kept", `uid="q"`, "uid", `"q"`, true},
		{"name is exact", "UID=1", "uid", "", false},
		{"missing", "a=1", "uid", "", false},
		{"prefix is not a match", "uidx=1", "uid", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := &view{req: &parsedCtx(t, "GET / HTTP/1.1\r\nHost: a\r\nCookie: "+tt.header+"\r\n\r\n").Request}
			got, ok := v.Cookie(tt.cookie)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Cookie(%q) in %q = %q, %v; want %q, %v", tt.cookie, tt.header, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestViewCookieDecodedValuesStayValid(t *testing.T) {
	v := &view{req: &parsedCtx(t, "GET / HTTP/1.1\r\nHost: a\r\nCookie: a=%31+1; b=%32+2\r\n\r\n").Request}
	a, _ := v.Cookie("a")
	for range 100 { // grow the decode buffer past its first allocation
		v.Cookie("b")
	}
	if a != "1 1" {
		t.Errorf("first decoded value changed to %q after more decoding", a)
	}
}

// TestViewAllocs: the attribute view must not allocate.
func TestViewAllocs(t *testing.T) {
	ctx := parsedCtx(t, "GET /a/%7Eb?q=x+y&f HTTP/1.1\r\nHost: h\r\nX-User-Id: u\r\nCookie: s=1; uid=x%20y\r\n\r\n")
	v := &view{req: &ctx.Request, ip: netip.MustParseAddr("10.0.0.1")}
	var sink int
	allocs := testing.AllocsPerRun(200, func() {
		v.dec = v.dec[:0]
		a, _ := v.Header("X-User-Id")
		b, _ := v.Header("X-Missing")
		c, _ := v.Cookie("uid")
		d, _ := v.Cookie("s")
		e, _ := v.Query("q")
		f, _ := v.Query("f")
		sink += len(v.Method()) + len(v.Host()) + len(v.Path()) + len(a) + len(b) + len(c) + len(d) + len(e) + len(f)
		if v.ClientIP().IsValid() {
			sink++
		}
	})
	if allocs != 0 {
		t.Errorf("view allocates %.1f times per request, want 0", allocs)
	}
	if sink == 0 {
		t.Fatal("view returned nothing")
	}
}

func TestClientIP(t *testing.T) {
	trusted := func(prefixes ...string) func(netip.Addr) bool {
		o := Options{}
		for _, p := range prefixes {
			o.TrustedProxies = append(o.TrustedProxies, netip.MustParsePrefix(p))
		}
		o = o.withDefaults()
		return (&exchange{flow: flow{opts: &o}}).trusted
	}
	tests := []struct {
		name    string
		peer    string
		trusted []string
		xff     []string
		want    string
	}{
		{"untrusted peer ignores XFF", "1.1.1.1", nil, []string{"9.9.9.9"}, "1.1.1.1"},
		{"trusted peer, one hop", "10.0.0.1", []string{"10.0.0.0/8"}, []string{"9.9.9.9"}, "9.9.9.9"},
		{"skip trusted hops from the right", "10.0.0.1", []string{"10.0.0.0/8"}, []string{"7.7.7.7, 9.9.9.9, 10.0.0.2"}, "9.9.9.9"},
		{"values across headers", "10.0.0.1", []string{"10.0.0.0/8"}, []string{"7.7.7.7", "10.1.1.1 , 10.2.2.2"}, "7.7.7.7"},
		{"all trusted: leftmost", "10.0.0.1", []string{"10.0.0.0/8"}, []string{"10.3.3.3, 10.2.2.2"}, "10.3.3.3"},
		{"no XFF: the peer", "10.0.0.1", []string{"10.0.0.0/8"}, nil, "10.0.0.1"},
		{"empty items skipped", "10.0.0.1", []string{"10.0.0.0/8"}, []string{" , 8.8.8.8,,"}, "8.8.8.8"},
		{"garbage stops at last good", "10.0.0.1", []string{"10.0.0.0/8"}, []string{"8.8.8.8, junk, 10.9.9.9"}, "10.9.9.9"},
		{"garbage right after the peer", "10.0.0.1", []string{"10.0.0.0/8"}, []string{"8.8.8.8, junk"}, "10.0.0.1"},
		{"ports and brackets", "10.0.0.1", []string{"10.0.0.0/8"}, []string{"[2001:db8::1]:443, 10.0.0.5:80"}, "2001:db8::1"},
		{"bracketed v6 without port", "10.0.0.1", []string{"10.0.0.0/8"}, []string{"[2001:db8::2]"}, "2001:db8::2"},
		{"v4-mapped in XFF", "10.0.0.1", []string{"10.0.0.0/8"}, []string{"::ffff:8.8.4.4"}, "8.8.4.4"},
		{"v4-mapped trusted prefix", "10.0.0.1", []string{"::ffff:10.0.0.0/104"}, []string{"8.8.8.8"}, "8.8.8.8"},
		{"v6 peer", "2001:db8::9", []string{"2001:db8::/32"}, []string{"5.5.5.5"}, "5.5.5.5"},
		// A zone names a link of the proxy that wrote it, nothing of ours:
		// it is dropped, so the address matches CIDRs (netip.Prefix never
		// contains a zoned address) and is one client, whatever the zone.
		{"zoned v6 in XFF", "10.0.0.1", []string{"10.0.0.0/8"}, []string{"fe80::1%eth0"}, "fe80::1"},
		{"zoned v6 with a port", "10.0.0.1", []string{"10.0.0.0/8"}, []string{"[fe80::2%eth1]:8080"}, "fe80::2"},
		{"trusted zoned hop skipped", "10.0.0.1", []string{"10.0.0.0/8", "fe80::/10"}, []string{"9.9.9.9, fe80::3%eth0"}, "9.9.9.9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var xff [][]byte
			for _, v := range tt.xff {
				xff = append(xff, []byte(v))
			}
			got := clientIP(netip.MustParseAddr(tt.peer), trusted(tt.trusted...), xff)
			if got != netip.MustParseAddr(tt.want) {
				t.Errorf("clientIP(%s, %q) = %s, want %s", tt.peer, tt.xff, got, tt.want)
			}
		})
	}
}

// TestKeepDecisionCopies: strings a router took from the request must
// survive the request buffers being reused.
func TestKeepDecisionCopies(t *testing.T) {
	buf := []byte("user-1|tag-1")
	d := router.Decision{
		Rule: "r", Tag: b2s(buf[7:]),
		Identity: identity.ID{Value: b2s(buf[:6]), Source: "header:X-User-Id"},
	}
	ex := (&Proxy{}).newExchange()
	ex.d = d
	ex.keepDecision()
	copy(buf, "XXXXXXXXXXXX")
	if ex.d.Identity.Value != "user-1" || ex.d.Tag != "tag-1" || ex.d.Rule != "r" {
		t.Errorf("kept decision = %+v after the source buffer changed", ex.d)
	}
}
