package proxy

import (
	"bytes"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// FuzzCheckHeaderBlock: whatever checkHeaderBlock accepts must be a header
// block with unambiguous framing, judged here by plain substring tests
// rather than by re-running the same line walk.
func FuzzCheckHeaderBlock(f *testing.F) {
	for _, s := range []string{
		"Host: a\r\n\r\n",
		"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n",
		"Transfer-Encoding: identity\r\n\r\n",
		"X-A: 1\r\n X-B: 2\r\n\r\n",
		"X-A: 1\nTransfer-Encoding: chunked\r\n\r\n",
		"Transfer Encoding: chunked\r\n\r\n",
		"transfer-encoding:chunked\r\n\r\nContent-Length: 1\r\n",
		"\r\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if checkHeaderBlock(raw) != nil {
			return
		}
		block := raw
		if bytes.HasPrefix(raw, []byte("\r\n")) {
			block = nil
		} else if i := bytes.Index(raw, []byte("\r\n\r\n")); i >= 0 {
			block = raw[:i+2]
		}
		if bytes.Count(block, []byte("\n")) != bytes.Count(block, []byte("\r\n")) {
			t.Fatalf("accepted a bare LF in %q", block)
		}
		if bytes.Contains(block, []byte("\n ")) || bytes.Contains(block, []byte("\n\t")) ||
			bytes.HasPrefix(block, []byte(" ")) || bytes.HasPrefix(block, []byte("\t")) {
			t.Fatalf("accepted a folded line in %q", block)
		}
		lower := "\n" + strings.ToLower(string(block))
		cl := strings.Contains(lower, "\ncontent-length:")
		te := strings.Contains(lower, "\ntransfer-encoding:")
		if cl && te {
			t.Fatalf("accepted Content-Length with Transfer-Encoding in %q", block)
		}
	})
}

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
	trusted := (&Proxy{opts: Options{TrustedProxies: []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.0/8"),
	}}.withDefaults()}).trusted
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
