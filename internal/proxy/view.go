package proxy

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/listener"
)

// view is the attr.Request over a fasthttp request: the one way a request
// is seen, by live traffic (serve) and by explain (View). Every string it
// returns aliases fasthttp's buffers or the view's own decode buffer, so it
// costs no allocation, and it is valid only while the request is: in serve
// the view lives in a pooled exchange and its req is cleared right after
// Decide.
type view struct {
	req *fasthttp.Request
	ip  netip.Addr
	// trusted says the TCP peer is in Options.TrustedProxies.
	trusted bool
	// noUnderscores hides header fields whose names hold "_", which the
	// request forwarded upstream will not carry (see seesHeader).
	noUnderscores bool
	// dec holds URL-decoded cookie values. It only grows during a request,
	// so strings handed out earlier stay intact.
	dec []byte
}

// see points v at req, received from the TCP peer, and resolves trust and
// the client address the one way the gateway does: the peer is trusted if
// trusted says so, and only then is X-Forwarded-For consulted (clientIP).
// Unless underscores, header fields whose names hold "_" are not seen.
func (v *view) see(req *fasthttp.Request, peer netip.Addr, trusted func(netip.Addr) bool, underscores bool) {
	v.req = req
	v.trusted = trusted(peer)
	v.noUnderscores = !underscores
	var xff [][]byte
	if v.trusted {
		xff = req.Header.PeekAll(hdrXForwardedFor)
	}
	v.ip = clientIP(peer, trusted, xff)
}

// View returns the attr.Request that the data plane decides on for req
// arriving from the TCP peer: the same view type, the same path (fasthttp's
// decoded and normalised one), cookie and query decoding, and trust and
// client address resolved from Options.TrustedProxies exactly as for a
// live request. Explain decides through it, so that an explained request is
// seen the way a live one is. The view aliases req: it is valid while req
// is not modified or released. View is safe for concurrent use.
func (p *Proxy) View(req *fasthttp.Request, peer netip.Addr) attr.Request {
	v := &view{}
	o := p.opts.Load()
	v.see(req, peer.Unmap(), o.isTrusted, o.AllowUnderscoresInHeaders)
	return v
}

func (v *view) Method() string { return b2s(v.req.Header.Method()) }

// Host is the request target's host: the authority of an absolute-form
// request line, else the Host header.
func (v *view) Host() string { return b2s(v.req.Host()) }

// Path is the decoded, dot-segment-normalised path without the query, the
// form rules match on; the upstream still receives the raw request target.
func (v *view) Path() string { return b2s(v.req.URI().Path()) }

// Header returns the first value of the named header.
func (v *view) Header(name string) (string, bool) { return v.line(name, false) }

// TrustedHeader returns the last line of the named header (see
// attr.Request).
func (v *view) TrustedHeader(name string) (string, bool) { return v.line(name, true) }

// line returns the first or the last line of the named header. PeekAll is
// used, not Peek, because it reports a present header with an empty value.
func (v *view) line(name string, last bool) (string, bool) {
	if !seesHeader(name, v.noUnderscores) {
		return "", false
	}
	vals := v.req.Header.PeekAll(name)
	if len(vals) == 0 {
		return "", false
	}
	if last {
		return b2s(vals[len(vals)-1]), true
	}
	return b2s(vals[0]), true
}

// seesHeader reports whether a view shows the header field name. A field
// whose name holds "_" is dropped from the request forwarded upstream
// unless Options.AllowUnderscoresInHeaders (an upstream that folds "_"
// into "-" would read it as another field), so the decision does not see
// it either, as nginx's ignore_invalid_headers hides it from routing too:
// a rule, an identity source or CEL that names one matches what the
// upstream is sent.
func seesHeader(name string, noUnderscores bool) bool {
	return !noUnderscores || strings.IndexByte(name, '_') < 0
}

// Cookie returns the first cookie with that exact name, decoded the way PHP
// decodes $_COOKIE values ("+" is a space, %XX a byte), which is what the
// applications behind the gateway see. The raw Cookie header is parsed here
// rather than through fasthttp's cookie jar, because collecting cookies
// makes fasthttp rewrite the header it would forward.
func (v *view) Cookie(name string) (string, bool) {
	for _, h := range v.req.Header.PeekAll(fasthttp.HeaderCookie) {
		if raw, ok := findCookie(h, name); ok {
			return v.decode(raw), true
		}
	}
	return "", false
}

// Query returns the first query argument with that name, already decoded
// by fasthttp.
func (v *view) Query(name string) (string, bool) {
	args := v.req.URI().QueryArgs()
	if val := args.Peek(name); val != nil {
		return b2s(val), true
	}
	if args.Has(name) {
		return "", true
	}
	return "", false
}

func (v *view) ClientIP() netip.Addr { return v.ip }

// PeerTrusted reports whether the TCP peer is a trusted proxy.
func (v *view) PeerTrusted() bool { return v.trusted }

// decode aliases raw when there is nothing to decode, else appends the
// decoded value to the view's buffer.
func (v *view) decode(raw []byte) string {
	if bytes.IndexByte(raw, '%') < 0 && bytes.IndexByte(raw, '+') < 0 {
		return b2s(raw)
	}
	start := len(v.dec)
	v.dec = appendURLDecoded(v.dec, raw)
	return b2s(v.dec[start:])
}

// findCookie finds name in one Cookie header value ("a=1; b=2"). Pairs are
// split on ';', names and values are trimmed of spaces, and a pair without
// '=' is a name with an empty value, as in PHP.
func findCookie(h []byte, name string) ([]byte, bool) {
	for len(h) > 0 {
		pair := h
		if i := bytes.IndexByte(h, ';'); i >= 0 {
			pair, h = h[:i], h[i+1:]
		} else {
			h = nil
		}
		k, val := pair, []byte(nil)
		if i := bytes.IndexByte(pair, '='); i >= 0 {
			k, val = pair[:i], pair[i+1:]
		}
		if b2s(trimOWS(k)) == name {
			return trimOWS(val), true
		}
	}
	return nil, false
}

// appendURLDecoded is PHP's urldecode: '+' becomes a space and '%' followed
// by two hex digits the byte they spell; any other '%' is kept as it is.
func appendURLDecoded(dst, src []byte) []byte {
	for i := 0; i < len(src); i++ {
		switch c := src[i]; c {
		case '+':
			dst = append(dst, ' ')
		case '%':
			if i+2 < len(src) {
				hi, ok1 := unhex(src[i+1])
				lo, ok2 := unhex(src[i+2])
				if ok1 && ok2 {
					dst = append(dst, hi<<4|lo)
					i += 2
					continue
				}
			}
			dst = append(dst, c)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// peerAddr is the TCP peer of ctx, unmapped; invalid for non-IP transports.
func peerAddr(ctx *fasthttp.RequestCtx) netip.Addr {
	if c, ok := ctx.Conn().(*listener.Conn); ok {
		return c.Peer()
	}
	if a, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// clientIP resolves the client address. xff are the X-Forwarded-For header
// values in arrival order; they are consulted only when the peer is trusted.
// The walk goes from the right (the hop nearest to us) and stops at the
// first untrusted address. If every address is trusted, the leftmost one is
// the client. An unparsable entry ends the walk at the last good address,
// since whatever wrote it cannot be believed about anything further left.
func clientIP(peer netip.Addr, trusted func(netip.Addr) bool, xff [][]byte) netip.Addr {
	if !trusted(peer) {
		return peer
	}
	last := peer
	for i := len(xff) - 1; i >= 0; i-- {
		v := xff[i]
		for end := len(v); end > 0; {
			start := bytes.LastIndexByte(v[:end], ',') + 1
			item := trimOWS(v[start:end])
			end = start - 1
			if len(item) == 0 {
				continue
			}
			a, ok := parseForwardedAddr(item)
			if !ok {
				return last
			}
			last = a
			if !trusted(a) {
				return a
			}
		}
	}
	return last
}

// parseForwardedAddr accepts "1.2.3.4", "::1", "[::1]", "1.2.3.4:80" and
// "[::1]:80", the forms proxies write into X-Forwarded-For. An IPv6 zone
// ("fe80::1%eth0") is dropped: it names a link of the proxy that wrote it,
// and a zoned address is in no CIDR (netip.Prefix.Contains), so it would
// match no trusted_proxies entry and no ip: whitelist entry.
func parseForwardedAddr(b []byte) (netip.Addr, bool) {
	s := b2s(b)
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap().WithZone(""), true
		}
	}
	return netip.Addr{}, false
}

// b2s views b as a string without copying. The caller must not let the
// string outlive b's contents.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// s2b returns the bytes of s without copying them. They must not be
// modified: pass them only to functions that read or copy.
func s2b(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// trimOWS trims the optional whitespace of RFC 9110 (SP and HTAB).
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}
