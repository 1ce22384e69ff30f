package proxy

import (
	"bytes"
	"strings"

	"github.com/valyala/fasthttp"
)

// Header names the gateway reads or writes.
const (
	hdrXForwardedFor   = "X-Forwarded-For"
	hdrXForwardedProto = "X-Forwarded-Proto"
	hdrXForwardedHost  = "X-Forwarded-Host"
	hdrForwarded       = "Forwarded"
	hdrXRealIP         = "X-Real-Ip"
	hdrGrayTag         = "X-Gray-Tag"
	hdrGrayRule        = "X-Gray-Rule"
	hdrGrayGroup       = "X-Gray-Group"
	hdrGrayDegraded    = "X-Gray-Degraded"
)

// isHopByHop reports whether k is one of the hop-by-hop headers of RFC 9110
// section 7.6.1 (plus the non-standard Proxy-Connection and Keep-Alive that
// net/http also strips). They describe one connection and must not be
// forwarded in either direction.
func isHopByHop(k []byte) bool {
	s := b2s(k)
	switch len(s) {
	case 2:
		return strings.EqualFold(s, "Te")
	case 7:
		return strings.EqualFold(s, "Trailer") || strings.EqualFold(s, "Upgrade")
	case 10:
		return strings.EqualFold(s, "Connection") || strings.EqualFold(s, "Keep-Alive")
	case 16:
		return strings.EqualFold(s, "Proxy-Connection")
	case 17:
		return strings.EqualFold(s, "Transfer-Encoding")
	case 18:
		return strings.EqualFold(s, "Proxy-Authenticate")
	case 19:
		return strings.EqualFold(s, "Proxy-Authorization")
	}
	return false
}

// appendConnTokens appends the comma-separated tokens of Connection header
// values to dst. The tokens alias vals.
func appendConnTokens(dst [][]byte, vals [][]byte) [][]byte {
	for _, v := range vals {
		for len(v) > 0 {
			tok := v
			if i := bytes.IndexByte(v, ','); i >= 0 {
				tok, v = v[:i], v[i+1:]
			} else {
				v = nil
			}
			if tok = trimOWS(tok); len(tok) > 0 {
				dst = append(dst, tok)
			}
		}
	}
	return dst
}

// isConnToken reports whether header k is named in the Connection header,
// which makes it hop-by-hop as well.
func isConnToken(k string, tokens [][]byte) bool {
	for _, t := range tokens {
		if strings.EqualFold(k, b2s(t)) {
			return true
		}
	}
	return false
}

var slash = []byte("/")

func eqFold(b []byte, s string) bool { return strings.EqualFold(b2s(b), s) }

// buildRequest prepares the request sent upstream from the client's. The
// header is copied from the wire bytes in arrival order, so that what the
// upstream receives is what the client sent (fasthttp would otherwise
// re-serialise cookies and reorder special headers), minus what a proxy
// must remove. Hop-by-hop headers, including those named in Connection,
// are dropped during the copy, i.e. before the gateway adds its own
// headers, so a client cannot use Connection to strip X-Forwarded-For or
// X-Gray-Tag.
//
// A request without a body, the common case, is written straight into
// ex.head as bytes (ex.rawHead), the cheapest form to send. A request with a
// body, or a WebSocket handshake, is built in ex.req, whose writer frames
// and streams the body, with DisableSpecialHeader so that the header is
// sent as given.
func (p *Proxy) buildRequest(ctx *fasthttp.RequestCtx, ex *exchange, trusted, ws bool) {
	in := &ctx.Request.Header
	cl := in.ContentLength()
	ex.rawHead = !ws && !ex.buffered && ex.reqBody.pre == nil && (cl == 0 || cl == -2)
	uri := ex.originForm(in.RequestURI())
	if ex.rawHead {
		h := append(ex.head[:0], in.Method()...)
		h = append(h, ' ')
		h = append(h, uri...)
		ex.head = append(h, " HTTP/1.1\r\n"...)
	} else {
		out := &ex.req.Header
		out.DisableSpecialHeader()
		out.SetMethodBytes(in.Method())
		out.SetRequestURIBytes(uri)
	}

	host := ctx.Host()
	if ex.d.UpstreamHost || len(host) == 0 {
		ex.addHeader(s2b(fasthttp.HeaderHost), s2b(ex.inst.Addr))
	} else {
		ex.addHeader(s2b(fasthttp.HeaderHost), host)
	}

	ex.tokens = appendConnTokens(ex.tokens[:0], in.PeekAll(fasthttp.HeaderConnection))
	// AllInOrder re-reads the wire bytes. A request that fasthttp did not
	// parse (a handler test building its own RequestCtx) has none. The two
	// loops are spelled out so that neither iterator escapes to the heap.
	ex.sawProto, ex.sawHost = false, false
	if len(in.RawHeaders()) > 0 {
		for k, v := range in.AllInOrder() {
			if ex.keepRequestHeader(k, trusted) {
				ex.addHeader(k, v)
			}
		}
	} else {
		for k, v := range in.All() {
			if ex.keepRequestHeader(k, trusted) {
				// Not validated by the parser: no line breaks.
				ex.addHeader(k, bytes.Map(noLineBreaks, v))
			}
		}
	}

	// X-Forwarded-For: a trusted peer's list (unless it named the header in
	// Connection) with the peer appended; otherwise just the peer.
	buf := ex.scratch[:0]
	if trusted && !isConnToken(hdrXForwardedFor, ex.tokens) {
		for _, v := range in.PeekAll(hdrXForwardedFor) {
			if v = trimOWS(v); len(v) > 0 {
				buf = append(buf, v...)
				buf = append(buf, ", "...)
			}
		}
	}
	if ex.peer.IsValid() {
		buf = ex.peer.AppendTo(buf)
	} else if len(buf) > 0 {
		buf = buf[:len(buf)-2]
	}
	if len(buf) > 0 {
		ex.addHeader(s2b(hdrXForwardedFor), buf)
	}
	ex.scratch = buf[:0]
	if !ex.sawProto {
		if ctx.IsTLS() {
			ex.addHeader(s2b(hdrXForwardedProto), s2b("https"))
		} else {
			ex.addHeader(s2b(hdrXForwardedProto), s2b("http"))
		}
	}
	if !ex.sawHost && len(host) > 0 {
		ex.addHeader(s2b(hdrXForwardedHost), host)
	}
	if ex.d.Tag != "" {
		ex.addHeader(s2b(hdrGrayTag), s2b(ex.d.Tag))
	}

	if ex.rawHead {
		// fasthttp's framing: no Content-Length for GET and HEAD, and
		// "Content-Length: 0" for any other method without a body.
		if m := in.Method(); !bytes.Equal(m, s2b(fasthttp.MethodGet)) && !bytes.Equal(m, s2b(fasthttp.MethodHead)) {
			ex.head = append(ex.head, "Content-Length: 0\r\n"...)
		}
		ex.head = append(ex.head, "\r\n"...)
		return
	}
	ex.setBody(ctx)
}

// addHeader adds one header line to the upstream request being built.
func (ex *exchange) addHeader(k, v []byte) {
	if !ex.rawHead {
		ex.req.Header.AddBytesKV(k, v)
		return
	}
	h := append(ex.head, k...)
	h = append(h, ": "...)
	h = append(h, v...)
	ex.head = append(h, "\r\n"...)
}

// noLineBreaks is a bytes.Map function that turns CR and LF into spaces.
func noLineBreaks(r rune) rune {
	if r == '\r' || r == '\n' {
		return ' '
	}
	return r
}

// setBody gives the upstream request its body. fasthttp sets
// Content-Length or chunked framing from the size given here when the
// request is written. A body buffered for a replay (prepareReplay) is sent
// from the buffer, with Content-Length; otherwise the client's body is
// streamed, and a chunked one is cut off with errBodyTooLarge past
// Policy.MaxBodyBytes.
func (ex *exchange) setBody(ctx *fasthttp.RequestCtx) {
	switch cl := ctx.Request.Header.ContentLength(); {
	case ex.buffered:
		ex.req.SetBodyRaw(ex.body)
	case ex.reqBody.pre != nil:
		// A chunked body that outgrew the replay buffer: what was read,
		// then the rest of the stream.
		ex.req.SetBodyStream(&ex.reqBody, -1)
	case cl == 0 || cl == -2:
		// No body. A POST still gets "Content-Length: 0" from fasthttp.
	default:
		if s := ctx.RequestBodyStream(); s != nil {
			ex.reqBody.src, ex.reqBody.size, ex.reqBody.n = s, int64(cl), 0
			ex.reqBody.max = ex.pol.MaxBodyBytes
			ex.req.SetBodyStream(&ex.reqBody, cl)
		} else {
			// The handler runs in a server without StreamRequestBody; the
			// body is in memory and valid until the handler returns, which
			// is longer than the round trip.
			ex.req.SetBodyRaw(ctx.Request.Body())
		}
	}
}

// keepRequestHeader reports whether a client header is copied to the
// upstream request, and notes the X-Forwarded-Proto / -Host it keeps.
func (ex *exchange) keepRequestHeader(k []byte, trusted bool) bool {
	switch {
	case isHopByHop(k), isConnToken(b2s(k), ex.tokens):
		return false
	case eqFold(k, fasthttp.HeaderHost),
		eqFold(k, fasthttp.HeaderContentLength), // framing is set from the body
		eqFold(k, fasthttp.HeaderExpect),        // the gateway already answered 100-continue
		eqFold(k, hdrGrayTag),                   // the router decided; only d.Tag is sent
		eqFold(k, hdrXForwardedFor):             // rebuilt by buildRequest
		return false
	case eqFold(k, hdrXForwardedProto):
		if !trusted {
			return false
		}
		ex.sawProto = true
	case eqFold(k, hdrXForwardedHost):
		if !trusted {
			return false
		}
		ex.sawHost = true
	case eqFold(k, hdrForwarded), eqFold(k, hdrXRealIP):
		return trusted
	}
	return true
}

// originForm turns the request target into origin-form ("/path?query"),
// which is what an upstream expects from a gateway. An absolute-form target
// ("http://host/path", RFC 9112 section 3.2.2) loses its scheme and
// authority; the authority has already become the Host.
func (ex *exchange) originForm(uri []byte) []byte {
	if len(uri) == 0 || uri[0] == '/' || (len(uri) == 1 && uri[0] == '*') {
		return uri
	}
	i := bytes.Index(uri, []byte("://"))
	if i < 0 {
		return uri
	}
	rest := uri[i+3:]
	j := bytes.IndexAny(rest, "/?")
	switch {
	case j < 0:
		return slash
	case rest[j] == '/':
		return rest[j:]
	}
	ex.scratch = append(append(ex.scratch[:0], '/'), rest[j:]...)
	return ex.scratch
}

// copyResponseHeader copies the upstream response header to the client's,
// minus hop-by-hop headers, the framing (fasthttp sets it from the body
// stream) and any decision headers the upstream tried to set: X-Gray-Rule,
// X-Gray-Group and X-Gray-Degraded are the gateway's to say.
func (ex *exchange) copyResponseHeader(dst, src *fasthttp.ResponseHeader) {
	dst.SetStatusCode(src.StatusCode())
	if msg := src.StatusMessage(); len(msg) > 0 {
		dst.SetStatusMessage(msg)
	}
	ex.tokens = appendConnTokens(ex.tokens[:0], src.PeekAll(fasthttp.HeaderConnection))
	// src normalised the names when it parsed them; dst need not again.
	if !dst.DisableNormalizing() {
		defer dst.EnableNormalizing()
	}
	for k, v := range src.All() {
		switch {
		case isHopByHop(k), isConnToken(b2s(k), ex.tokens),
			eqFold(k, fasthttp.HeaderContentLength),
			eqFold(k, hdrGrayRule), eqFold(k, hdrGrayGroup), eqFold(k, hdrGrayDegraded):
			continue
		}
		dst.AddBytesKV(k, v)
	}
	clear(ex.tokens)
	ex.tokens = ex.tokens[:0]
}

// setDecisionHeaders adds the decision headers and, for a freshly issued
// anonymous identity, its cookie. They go on every response the gateway
// sends after routing, error responses included.
func (ex *exchange) setDecisionHeaders(h *fasthttp.ResponseHeader) {
	d := &ex.d
	// Appended, not set: h is either fresh or a copy of the upstream's
	// header without these (copyResponseHeader), so there is nothing to
	// replace, and the names are already in canonical form.
	if !h.DisableNormalizing() {
		defer h.EnableNormalizing()
	}
	if d.Rule != "" {
		h.AddBytesKV(s2b(hdrGrayRule), s2b(d.Rule))
	}
	if d.Group != "" {
		h.AddBytesKV(s2b(hdrGrayGroup), s2b(d.Group))
	}
	if d.Degraded != "" {
		h.AddBytesKV(s2b(hdrGrayDegraded), s2b(d.Degraded))
	}
	if d.Identity.Issued && d.Identity.Cookie != "" {
		c := append(ex.scratch[:0], d.Identity.Cookie...)
		c = append(c, '=')
		c = append(c, d.Identity.Value...)
		c = append(c, "; Path=/; Max-Age=31536000; HttpOnly; SameSite=Lax"...)
		h.AddBytesV(fasthttp.HeaderSetCookie, c)
		ex.scratch = c[:0]
	}
}
