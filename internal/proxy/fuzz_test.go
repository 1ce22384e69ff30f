package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
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

// FuzzReadResponseH1: whatever an upstream sends, the HTTP/2 codec's
// HTTP/1.1 response reader (h2h1.go) never panics or hangs and answers a
// final response only (no 1xx); TestH2ToHTTP1Shapes checks the header
// bound through the real listener.
func FuzzReadResponseH1(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	f.Add([]byte("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n2\r\nok\r\n0\r\nX: y\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 101 Switching Protocols\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", 600) + "\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(in), 512)
		req, _ := http.NewRequest("GET", "http://up.test/", nil)
		resp, _, err := readResponseH1(br, req, nil)
		if err != nil {
			return
		}
		if resp.StatusCode < 200 && resp.StatusCode >= 100 {
			t.Fatalf("an interim %d taken for the answer", resp.StatusCode)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	})
}

// FuzzHeaderWithoutDate: headerWithoutDate may only say "no Date" of a
// buffered upstream header that fasthttp parses as a final response
// without a Date (or refuses); anything else must be left to ensureDate.
func FuzzHeaderWithoutDate(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nDate: Mon, 01 Jan 2001 00:00:00 GMT\r\n\r\n",
		"HTTP/1.1 200 OK\r\ndAtE: x\r\n\r\n",
		"HTTP/1.1 200 OK\r\nDate : x\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-Date: x\r\nDates: y\r\n\r\n",
		"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\r\n date: folded\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(b), 4096)
		_, _ = br.Peek(min(len(b), 4096))
		if !headerWithoutDate(br) {
			return
		}
		var h fasthttp.ResponseHeader
		if err := h.Read(bufio.NewReader(bytes.NewReader(b))); err != nil {
			return
		}
		if d := h.Peek(fasthttp.HeaderDate); len(d) > 0 || isInterim(h.StatusCode()) {
			t.Fatalf("headerWithoutDate(%q) is true, but fasthttp reads status %d with Date %q", b, h.StatusCode(), d)
		}
	})
}

// errMoreWanted is what moreReader returns once its bytes are read.
var errMoreWanted = errors.New("read past the buffered bytes")

// moreReader yields b, then errMoreWanted, as an upstream connection whose
// next bytes have not arrived (its read deadline) would.
type moreReader struct{ b []byte }

func (r *moreReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, errMoreWanted
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// FuzzFinalHeadBuffered: finalHeadBuffered may only say a buffered
// upstream header is whole and final when fasthttp reads it without asking
// for more bytes, and finds no interim status (or refuses it); anything
// else is read under the full header timeout.
func FuzzFinalHeadBuffered(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\n",
		"HTTP/1.1 200 OK\r\nContent-Le",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
		"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
		"HTTP/1.1 200 OK\r\nX: a\r\n\r\n\r\n\r\n",
		"HTTP/1.1 204 No Content\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		br := bufio.NewReaderSize(&moreReader{b: b}, 4096)
		_, _ = br.Peek(min(len(b), 4096))
		if !finalHeadBuffered(br) {
			return
		}
		var h fasthttp.ResponseHeader
		err := h.Read(bufio.NewReader(&moreReader{b: b[:br.Buffered()]}))
		if err != nil && strings.Contains(err.Error(), errMoreWanted.Error()) {
			t.Fatalf("finalHeadBuffered(%q) is true, but fasthttp wants more: %v", b, err)
		}
		if err == nil && isInterim(h.StatusCode()) {
			t.Fatalf("finalHeadBuffered(%q) is true, but fasthttp reads interim status %d", b, h.StatusCode())
		}
	})
}
