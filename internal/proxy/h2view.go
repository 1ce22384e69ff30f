package proxy

import (
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"

	"github.com/valyala/fasthttp"
)

// netView is the attr.Request over a net/http request from the HTTP/2
// codec. It sees a request the way view sees an HTTP/1.1 one, with the
// same helpers: the path and the query are those of fasthttp's URI parser
// (decoded, dot segments resolved, the same normalisation as for
// HTTP/1.1), cookies are found and PHP-decoded by findCookie and
// appendURLDecoded, and trust and the client address come from clientIP.
// Header names are looked up case-insensitively, as HTTP/2 sends them in
// lower case. A test decides the same requests through both views and
// compares every attribute. Its strings alias the request or the view's
// buffers; it is valid while the request is.
type netView struct {
	req     *http.Request
	uri     fasthttp.URI
	ip      netip.Addr
	trusted bool
	// noUnderscores: see view.
	noUnderscores bool
	dec           []byte
	xff           [][]byte
}

// see points v at req from the TCP peer.
func (v *netView) see(req *http.Request, peer netip.Addr, trusted func(netip.Addr) bool, underscores bool) {
	v.req = req
	v.noUnderscores = !underscores
	v.uri.Reset()
	v.uri.DisablePathNormalizing = false
	// With the host given, as the HTTP/1.1 codec parses it, a :path that
	// starts with "//" is a path: without, "//zzz/x" would be the
	// authority zzz and the path /x, routed unlike its HTTP/1.1 twin.
	_ = v.uri.Parse(s2b(req.Host), s2b(req.RequestURI))
	pathTarget(&v.uri, s2b(req.Host), s2b(req.RequestURI))
	v.trusted = trusted(peer)
	v.xff = v.xff[:0]
	if v.trusted {
		for _, x := range req.Header[hdrXForwardedFor] {
			v.xff = append(v.xff, s2b(x))
		}
	}
	v.ip = clientIP(peer, trusted, v.xff)
}

func (v *netView) reset() {
	v.req, v.ip, v.trusted, v.dec = nil, netip.Addr{}, false, v.dec[:0]
	clear(v.xff)
	v.xff = v.xff[:0]
}

func (v *netView) Method() string { return v.req.Method }

// Host is the :authority (or Host) the client named.
func (v *netView) Host() string { return v.req.Host }

// Path is the decoded, dot-segment-normalised path without the query.
func (v *netView) Path() string { return b2s(v.uri.Path()) }

// Header returns the first value of the named header.
func (v *netView) Header(name string) (string, bool) { return v.line(name, false) }

// TrustedHeader returns the last line of the named header (see
// attr.Request).
func (v *netView) TrustedHeader(name string) (string, bool) { return v.line(name, true) }

// line returns the first or the last line of the named header, without
// the whitespace around it: that is not part of a field value (RFC 9110
// section 5.5); the HTTP/1.1 parser drops it, Go's HTTP/2 server hands it
// over, and a header condition or user id must not differ between the
// two.
func (v *netView) line(name string, last bool) (string, bool) {
	if !seesHeader(name, v.noUnderscores) {
		return "", false
	}
	vals := v.req.Header[textproto.CanonicalMIMEHeaderKey(name)]
	if len(vals) == 0 {
		return "", false
	}
	i := 0
	if last {
		i = len(vals) - 1
	}
	return strings.Trim(vals[i], " \t"), true
}

// Cookie returns the first cookie with that exact name, decoded as PHP
// does (see view.Cookie). HTTP/2 may split cookies over several fields;
// each is searched in order.
func (v *netView) Cookie(name string) (string, bool) {
	for _, h := range v.req.Header["Cookie"] {
		if raw, ok := findCookie(s2b(h), name); ok {
			return v.decode(raw), true
		}
	}
	return "", false
}

// Query returns the first query argument with that name, decoded.
func (v *netView) Query(name string) (string, bool) {
	args := v.uri.QueryArgs()
	if val := args.Peek(name); val != nil {
		return b2s(val), true
	}
	if args.Has(name) {
		return "", true
	}
	return "", false
}

func (v *netView) ClientIP() netip.Addr { return v.ip }

// PeerTrusted reports whether the TCP peer is a trusted proxy.
func (v *netView) PeerTrusted() bool { return v.trusted }

func (v *netView) decode(raw []byte) string {
	if !needsDecode(raw) {
		return b2s(raw)
	}
	start := len(v.dec)
	v.dec = appendURLDecoded(v.dec, raw)
	return b2s(v.dec[start:])
}

func needsDecode(raw []byte) bool {
	for _, c := range raw {
		if c == '%' || c == '+' {
			return true
		}
	}
	return false
}

// peerOf parses a net/http RemoteAddr ("1.2.3.4:5678", "[::1]:80").
func peerOf(remote string) netip.Addr {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}
