package proxy

import (
	"bytes"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// FuzzCookie: the cookie lookup never panics, aliases values with nothing
// to decode, and decodes exactly as url.QueryUnescape (which is PHP's
// urldecode) wherever that accepts the value.
func FuzzCookie(f *testing.F) {
	f.Add("a=1; uid=x+y%20z", "uid")
	f.Add("uid=%zz%4", "uid")
	f.Add(";;=;uid", "uid")
	f.Add("uid=%E4%BD%A0", "uid")
	f.Fuzz(func(t *testing.T, header, name string) {
		raw, ok := findCookie([]byte(header), name)
		if !ok {
			return
		}
		var v view
		got := v.decode(raw)
		if !bytes.ContainsAny(raw, "%+") && got != string(raw) {
			t.Fatalf("decode(%q) = %q, want it unchanged", raw, got)
		}
		if want, err := url.QueryUnescape(string(raw)); err == nil && got != want {
			t.Fatalf("decode(%q) = %q, url.QueryUnescape = %q", raw, got, want)
		}
	})
}

// FuzzClientIP: the X-Forwarded-For walk never panics and answers either
// the peer or an address that appears in the header.
func FuzzClientIP(f *testing.F) {
	f.Add("1.2.3.4, 10.0.0.1", "10.0.0.9")
	f.Add("[::1]:80,,junk, 10.1.1.1", "10.0.0.9")
	f.Add("", "127.0.0.1")
	o := Options{TrustedProxies: []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.0/8"),
	}}.withDefaults()
	trusted := (&exchange{flow: flow{opts: &o}}).trusted
	f.Fuzz(func(t *testing.T, xff, peerS string) {
		peer, err := netip.ParseAddr(peerS)
		if err != nil {
			return
		}
		peer = peer.Unmap()
		got := clientIP(peer, trusted, [][]byte{[]byte(xff)})
		if got == peer {
			return
		}
		for _, item := range strings.Split(xff, ",") {
			if a, ok := parseForwardedAddr([]byte(strings.Trim(item, " \t"))); ok && a == got {
				return
			}
		}
		t.Fatalf("clientIP(%s, %q) = %s, which is neither the peer nor in the header", peer, xff, got)
	})
}
