package proxy

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"

	"github.com/graygate/graygate/internal/upstream"
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
	hdrRequestID       = "X-Request-Id"
	hdrVia             = "Via"
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
// values to dst. The tokens alias vals. Whitespace inside an element
// separates tokens too: a token holds none, and a folded line
// ("Connection: x-hop\r\n keep-alive", which both readers join with a
// space) names each word hop-by-hop, so a field the upstream meant to keep
// to its hop is not passed on. (The HTTP/1.1 codec took fasthttp's
// "x-hop keep-alive" for one token, and X-Hop reached an HTTP/1.1 client
// alone: found by TestH2AnswersAgreeWithHTTP1 on a wider set of
// answers.) A request's Connection field is a list of tokens, or the
// listener has refused it.
func appendConnTokens(dst [][]byte, vals [][]byte) [][]byte {
	return appendTokens(dst, vals, true)
}

// appendListTokens appends the comma-separated elements of list values
// (Upgrade, TE) to dst, without the whitespace around them. The elements
// alias vals.
func appendListTokens(dst [][]byte, vals [][]byte) [][]byte {
	return appendTokens(dst, vals, false)
}

// appendTokens appends the elements of vals separated by commas, and with
// words by whitespace too, to dst.
func appendTokens(dst [][]byte, vals [][]byte, words bool) [][]byte {
	for _, v := range vals {
		start, end := -1, 0 // the element so far, v[start:end]
		for i := 0; i <= len(v); i++ {
			c := byte(',')
			if i < len(v) {
				c = v[i]
			}
			switch {
			case c == ',' || words && (c == ' ' || c == '\t'):
				if start >= 0 {
					dst = append(dst, v[start:end])
					start = -1
				}
			case c == ' ' || c == '\t':
			default:
				if start < 0 {
					start = i
				}
				end = i + 1
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

func eqFold(b []byte, s string) bool { return len(b) == len(s) && strings.EqualFold(b2s(b), s) }

// buildRequest prepares the request sent upstream from the client's: its
// head, as bytes in ex.head, and how its body is sent (ex.bodyKind). The
// header is copied from the wire bytes in arrival order, so that what the
// upstream receives is what the client sent (fasthttp would otherwise
// re-serialise cookies and reorder special headers), minus what a proxy
// must remove. Hop-by-hop headers, including those named in Connection,
// are dropped during the copy, i.e. before the gateway adds its own
// headers, so a client cannot use Connection to strip X-Forwarded-For or
// X-Gray-Tag. The framing is the gateway's: Content-Length for a body of
// known size, chunked (with the client's trailer fields) otherwise.
func (p *Proxy) buildRequest(ctx *fasthttp.RequestCtx, ex *exchange, trusted, ws bool) {
	in := &ctx.Request.Header
	// An attempt on an h2 or h2c pool before this one (forwardNet) has
	// ended; this one is the HTTP/1.1 transport's.
	ex.net, ex.netOut = nil, nil
	ex.setBodyKind(ctx, ws)
	uri := ex.originForm(in.RequestURI())
	h := append(ex.head[:0], in.Method()...)
	h = append(h, ' ')
	h = append(h, uri...)
	ex.head = append(h, " HTTP/1.1\r\n"...)

	host := zoneless(clientHost(in))
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

	ex.addForwarded(ex, in, host, ctx.IsTLS() || isTLSConn(ctx.Conn()), trusted)
	if ws {
		ex.head = append(ex.head, "Connection: Upgrade\r\nUpgrade: websocket\r\n"...)
	}

	// The framing: fasthttp's (no Content-Length for GET and HEAD without a
	// body, "Content-Length: 0" for any other method without one).
	switch ex.bodyKind {
	case bodyNone:
		if m := in.Method(); !ws && !bytes.Equal(m, s2b(fasthttp.MethodGet)) && !bytes.Equal(m, s2b(fasthttp.MethodHead)) {
			ex.head = append(ex.head, "Content-Length: 0\r\n"...)
		}
	case bodyBuffered:
		if ex.chunkBuffered = ex.bufferedTrailers(ctx); ex.chunkBuffered {
			// A chunked body held for a replay, whose trailer fields
			// came with it: it goes chunked, as it came, so that they
			// go too (writeBuffered).
			ex.head = append(ex.head, "Transfer-Encoding: chunked\r\n"...)
			ex.appendTrailerField(in)
			break
		}
		ex.head = strconv.AppendInt(append(ex.head, "Content-Length: "...), int64(len(ex.sendBody)), 10)
		ex.head = append(ex.head, "\r\n"...)
	case bodyFixed:
		ex.head = strconv.AppendInt(append(ex.head, "Content-Length: "...), ex.reqBody.size, 10)
		ex.head = append(ex.head, "\r\n"...)
	case bodyChunked:
		ex.head = append(ex.head, "Transfer-Encoding: chunked\r\n"...)
		ex.appendTrailerField(in)
	}
	if ex.bodyKind == bodyFixed || ex.bodyKind == bodyChunked {
		if ctx.Request.MayContinue() && !ex.uc.http10.Load() {
			// The upstream may refuse the body before it is sent; the
			// gateway waits for its 100 (see awaitContinue). An
			// instance that last answered over HTTP/1.0 would not send
			// one, and would wait for the body while the gateway waits
			// for its answer: it gets the body at once, as RFC 9110
			// section 10.1.1 lets a proxy that knows the next server is
			// HTTP/1.0 do.
			ex.expect = true
			ex.head = append(ex.head, "Expect: 100-continue\r\n"...)
		}
	}
	ex.head = append(ex.head, "\r\n"...)
}

// announcedTrailers returns the trailer field names the request's Trailer
// field announced: the first ex.announced of fasthttp's trailer keys, to
// which it adds the names of unannounced fields when the body has ended.
func (ex *exchange) announcedTrailers(in *fasthttp.RequestHeader) [][]byte {
	keys := in.PeekTrailerKeys()
	return keys[:min(ex.announced, len(keys))]
}

// appendTrailerField adds to the upstream request's head the Trailer field
// of a chunked body: the announced names that keepRequestTrailer keeps.
func (ex *exchange) appendTrailerField(in *fasthttp.RequestHeader) {
	n := 0
	for _, k := range ex.announcedTrailers(in) {
		if !ex.keepRequestTrailer(k) {
			continue
		}
		if n == 0 {
			ex.head = append(ex.head, "Trailer: "...)
		} else {
			ex.head = append(ex.head, ", "...)
		}
		ex.head = append(ex.head, k...)
		n++
	}
	if n > 0 {
		ex.head = append(ex.head, "\r\n"...)
	}
}

// bufferedTrailers reports whether a body held whole (bodyBuffered) came
// chunked with trailer fields the upstream is to get: announced, kept by
// keepRequestTrailer, and arrived (fasthttp parsed the trailer section
// into the header when the body ended). Sent with a Content-Length, it
// would lose them.
func (ex *exchange) bufferedTrailers(ctx *fasthttp.RequestCtx) bool {
	in := &ctx.Request.Header
	if in.ContentLength() != -1 || (ex.uc != nil && ex.uc.http10.Load()) {
		// Not chunked; or for HTTP/1.0, which has no trailer section
		// (holdForHTTP10).
		return false
	}
	for _, k := range ex.announcedTrailers(in) {
		if ex.keepRequestTrailer(k) && len(in.PeekAll(b2s(k))) > 0 {
			return true
		}
	}
	return false
}

// addForwarded is the decorate phase's own fields, added after the
// client's (keepRequestHeader): X-Forwarded-For (a trusted peer's list,
// unless it named the header in Connection, with the peer appended;
// otherwise just the peer), X-Forwarded-Proto ("https" when the client
// came over TLS) and X-Forwarded-Host unless a trusted peer sent them,
// the coloring X-Gray-Tag, the baggage carrying it and the trace context
// (addTraceFields), X-Request-Id and Via. in is the client's header, host
// its Host (or :authority).
func (f *flow) addForwarded(sink fieldSink, in inHeader, host []byte, tls, trusted bool) {
	buf := f.scratch[:0]
	if trusted && !isConnToken(hdrXForwardedFor, f.tokens) {
		for _, v := range in.PeekAll(hdrXForwardedFor) {
			if v = trimOWS(v); len(v) > 0 {
				buf = append(buf, v...)
				buf = append(buf, ", "...)
			}
		}
	}
	if f.peer.IsValid() {
		buf = f.peer.AppendTo(buf)
	} else if len(buf) > 0 {
		buf = buf[:len(buf)-2]
	}
	if len(buf) > 0 {
		sink.addField(s2b(hdrXForwardedFor), buf)
	}
	f.scratch = buf[:0]
	if !f.sawProto {
		if tls {
			sink.addField(s2b(hdrXForwardedProto), s2b("https"))
		} else {
			sink.addField(s2b(hdrXForwardedProto), s2b("http"))
		}
	}
	if !f.sawHost && len(host) > 0 {
		sink.addField(s2b(hdrXForwardedHost), host)
	}
	if f.d.Tag != "" {
		sink.addField(s2b(hdrGrayTag), s2b(f.d.Tag))
	}
	f.addTraceFields(sink, in)
	sink.addField(s2b(hdrRequestID), f.reqID)
	if !f.opts.NoVia {
		v := viaValue
		if f.proto == "h2" {
			v = viaValue2
		} else if version, _ := f.c.protocol(); version == "1.0" {
			v = viaValue10
		}
		sink.addField(s2b(hdrVia), s2b(v))
	}
}

// viaValue is the gateway's Via entry (RFC 9110 section 7.6.3) for a
// message it received over HTTP/1.1, viaValue2 over HTTP/2, viaValue10
// over HTTP/1.0: the received-protocol is the sender's version.
const (
	viaValue   = "1.1 graygate"
	viaValue2  = "2 graygate"
	viaValue10 = "1.0 graygate"
)

// addField implements fieldSink: one header line of the upstream request's
// head.
func (ex *exchange) addField(k, v []byte) { ex.addHeader(k, v) }

// addHeader adds one header line to the upstream request's head.
func (ex *exchange) addHeader(k, v []byte) {
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

// setBodyKind decides how the upstream request's body is sent. A body
// buffered for a replay (prepareReplay) is sent from the buffer, with
// Content-Length; otherwise the client's body is streamed as it arrives,
// with its Content-Length, or chunked, and a chunked one is cut off with
// errBodyTooLarge past Policy.MaxBodyBytes.
func (ex *exchange) setBodyKind(ctx *fasthttp.RequestCtx, ws bool) {
	ex.bodyKind, ex.sendBody = bodyNone, nil
	switch cl := ctx.Request.Header.ContentLength(); {
	case ws:
		// A WebSocket handshake has no body.
	case ex.buffered:
		ex.bodyKind, ex.sendBody = bodyBuffered, ex.body
	case ex.reqBody.pre != nil:
		// A chunked body that outgrew the replay buffer, or a body an
		// HTTP/2 upstream refused unprocessed (resumeRefused): what was
		// read, then the rest of the stream.
		ex.bodyKind = bodyChunked
		if ex.reqBody.size >= 0 {
			ex.bodyKind = bodyFixed
		}
	case cl == 0 || cl == -2:
		// No body.
	default:
		if s := ctx.RequestBodyStream(); s != nil {
			ex.reqBody.src, ex.reqBody.size, ex.reqBody.n, ex.reqBody.read = s, int64(cl), 0, false
			ex.reqBody.max = ex.pol.MaxBodyBytes
			ex.bodyKind = bodyFixed
			if cl < 0 {
				ex.bodyKind = bodyChunked
			}
		} else {
			// The handler runs in a server without StreamRequestBody; the
			// body is in memory and valid until the handler returns, which
			// is longer than the round trip.
			ex.bodyKind, ex.sendBody = bodyBuffered, ctx.Request.Body()
		}
	}
}

// keepRequestHeader is the decorate phase's verdict on one client header
// field: whether it is copied to the upstream request. It notes the
// X-Forwarded-Proto / -Host it keeps, and a baggage field, which
// addTraceFields rewrites. f.tokens must hold the tokens of the
// client's Connection header.
func (f *flow) keepRequestHeader(k []byte, trusted bool) bool {
	switch {
	case isHopByHop(k), isConnToken(b2s(k), f.tokens):
		return false
	case !f.opts.AllowUnderscoresInHeaders && bytes.IndexByte(k, '_') >= 0:
		// "Transfer_Encoding" would be Transfer-Encoding to an upstream
		// that folds "_" into "-" (nginx's ignore_invalid_headers).
		return false
	case eqFold(k, fasthttp.HeaderHost),
		eqFold(k, fasthttp.HeaderContentLength), // framing is set from the body
		eqFold(k, fasthttp.HeaderExpect),        // the gateway answers 100-continue and sends its own
		eqFold(k, hdrGrayTag),                   // the router decided; only d.Tag is sent
		eqFold(k, hdrRequestID),                 // the gateway's, kept from a trusted peer
		eqFold(k, hdrXForwardedFor):             // rebuilt by buildRequest
		return false
	case eqFold(k, hdrXForwardedProto):
		if !trusted {
			return false
		}
		f.sawProto = true
	case eqFold(k, hdrXForwardedHost):
		if !trusted {
			return false
		}
		f.sawHost = true
	case eqFold(k, hdrForwarded), eqFold(k, hdrXRealIP):
		return trusted
	case eqFold(k, hdrBaggage):
		// Rebuilt by addTraceFields, without an inbound gray.tag.
		f.sawBaggage = true
		return false
	case f.traced && (eqFold(k, hdrTraceparent) || eqFold(k, hdrTracestate)):
		// Replaced by graygate's span (addTraceFields); with tracing off
		// they pass through.
		return false
	}
	return true
}

// originForm turns the request target into origin-form ("/path?query"),
// which is what an upstream expects from a gateway. An absolute-form target
// ("http://host/path", RFC 9112 section 3.2.2) loses its scheme and
// authority; the authority has already become the Host.
//
// A fragment ("#..."), which a request target may not carry but Go's
// server and llhttp accept, is dropped, as nginx drops it: the decision
// parsed the target as a URI, without it, and the upstream must see the
// same path and query ("/p#x?user_id=1" is /p with no query to the
// decision, and was "/p#x" with user_id=1 to a Go upstream).
func (ex *exchange) originForm(uri []byte) []byte {
	if i := bytes.IndexByte(uri, '#'); i >= 0 {
		uri = uri[:i]
	}
	_, rest, ok := absoluteForm(uri)
	switch {
	case !ok:
		return uri
	case len(rest) == 0:
		return slash
	case rest[0] == '/':
		return rest
	}
	ex.scratch = append(append(ex.scratch[:0], '/'), rest...)
	return ex.scratch
}

// absoluteForm splits a request target in absolute form
// ("http://u@a:80/p?q") into its authority, userinfo included, and what
// follows it, from the first '/', '?' or '#' (nothing if there is none);
// ok is false for a target in any other form.
func absoluteForm(uri []byte) (auth, rest []byte, ok bool) {
	if len(uri) == 0 || uri[0] == '/' {
		return nil, nil, false
	}
	i := bytes.Index(uri, colonSlashSlash)
	if i < 0 {
		return nil, nil, false
	}
	auth = uri[i+3:]
	if j := bytes.IndexAny(auth, "/?#"); j >= 0 {
		return auth[:j], auth[j:], true
	}
	return auth, nil, true
}

// pathTarget re-reads u, which fasthttp parsed from target, when target is
// an origin-form path that starts with "//" and holds "://". fasthttp's
// URI parser takes such a target for a network-path reference,
// "//authority/path": "GET //evil.test://x/admin" was routed with the host
// "evil.test:" and the path /x/admin, while the upstream got the target as
// it came and the client's Host. A request target that starts with "/" is
// a path (RFC 9112 §3.2.1; its segments may be empty and hold ':'), as
// Go's server, llhttp and nginx read it; so u gets host as its host and
// the whole target before '?' as its path. Any other target is fasthttp's
// own reading, which this leaves as it is. target may carry a fragment
// (originForm drops it on the way out). u keeps the scheme its first
// parse gave it.
func pathTarget(u *fasthttp.URI, host, target []byte) {
	if len(target) < 2 || target[0] != '/' || target[1] != '/' || !bytes.Contains(target, colonSlashSlash) {
		return
	}
	if i := bytes.IndexByte(target, '#'); i >= 0 {
		target = target[:i]
	}
	path, query, _ := bytes.Cut(target, question)
	https := string(u.Scheme()) == "https"
	// The host is parsed (and checked) as for any origin-form request.
	_ = u.Parse(host, slash)
	u.SetPathBytes(path)
	u.SetQueryStringBytes(query)
	if https {
		u.SetSchemeBytes(schemeHTTPS)
	}
}

var (
	colonSlashSlash = []byte("://")
	question        = []byte("?")
	schemeHTTPS     = []byte("https")
)

// filterResponseHeader removes from the upstream's response header, which
// was read straight into the client's response, what must not reach the
// client (dropResponseField, and the reported metric fields), keeping the
// announced trailer fields: the trailers themselves are forwarded after a
// chunked body. The upstream's wish to close its connection is noted for
// releaseUpstream and does not close the client's. The framing is set by
// respond.
func (ex *exchange) filterResponseHeader(h *fasthttp.ResponseHeader) {
	ex.upClose = ex.upClose || h.ConnectionClose()
	h.ResetConnectionClose()
	if !h.IsHTTP11() {
		ex.upHTTP10 = true
		h.SetProtocol(strHTTP11)
	}
	ex.tokens = appendConnTokens(ex.tokens[:0], h.PeekAll(fasthttp.HeaderConnection))
	if len(h.PeekTrailerKeys()) > 0 {
		ex.filterTrailerKeys(h)
	}
	del := ex.scratch[:0]
	for k := range h.All() {
		if eqFold(k, fasthttp.HeaderTrailer) || eqFold(k, fasthttp.HeaderContentLength) {
			continue
		}
		if ex.dropResponseField(k) {
			del = append(append(del, k...), 0)
		}
	}
	clear(ex.tokens)
	ex.tokens = ex.tokens[:0]
	del = ex.takeReported(h, h.StatusCode(), del)
	for len(del) > 0 {
		i := bytes.IndexByte(del, 0)
		h.DelBytes(del[:i])
		del = del[i+1:]
	}
	ex.scratch = ex.scratch[:0]
}

// filterTrailerKeys removes from the trailer fields an upstream's header
// announces those that dropTrailerField refuses, and those its Connection
// field names (ex.tokens). Announced, a name would also take the
// gateway's own field of that name into the trailer section: fasthttp
// files a value set under an announced name there.
func (ex *exchange) filterTrailerKeys(h *fasthttp.ResponseHeader) {
	keep := ex.scratch[:0]
	dropped := false
	for _, k := range h.PeekTrailerKeys() {
		if ex.dropTrailerField(k) {
			dropped = true
			continue
		}
		if len(keep) > 0 {
			keep = append(keep, ", "...)
		}
		keep = append(keep, k...)
	}
	if dropped {
		if len(keep) == 0 {
			h.Del(fasthttp.HeaderTrailer)
		} else {
			_ = h.SetTrailerBytes(keep)
		}
	}
	ex.scratch = keep[:0]
}

// dropTrailerField is the response phase's verdict on one trailer field
// of an upstream's answer, on every path (forwardTrailers, netRespBody,
// stream.respond): the fields dropResponseField removes from a header
// (hop-by-hop, the decision headers, X-Request-Id), the gateway's Via,
// the reported metric fields (takeReported), and a name with "_" unless
// allowed. The gateway's own fields are in its header, and an upstream
// must not add to them, or stand in for them, at the end of the answer.
// Fields the header's Connection field names are refused too while
// f.tokens holds them (filterTrailerKeys); a trailer section that arrives
// later is checked without them.
//
// A name that is not a token is dropped too. fasthttp never yields one,
// but net/http's HTTP/1.1 reader takes "X T" and "X-T " (an HTTP/2
// client's answer from an http1 pool), and x/net/http2's server, which
// skips a field it cannot encode, writes no frame at all for a trailer
// section left with none: the stream never ended. (That reader refuses a
// value the server could not encode, controls and DEL, itself.)
func (f *flow) dropTrailerField(k []byte) bool {
	return f.dropResponseField(k) || eqFold(k, hdrVia) ||
		(!f.opts.AllowUnderscoresInHeaders && hasUnderscore(k)) || f.reportedField(k) ||
		!httpguts.ValidHeaderFieldName(b2s(k))
}

// keepRequestTrailer reports whether a request's trailer field named k
// goes upstream: not one whose name holds "_" (unless
// allow_underscores_in_headers), as for the header fields
// (keepRequestHeader). The listener has refused the fields that may not
// be trailers at all.
func (f *flow) keepRequestTrailer(k []byte) bool {
	return f.opts.AllowUnderscoresInHeaders || !hasUnderscore(k)
}

// dropNetTrailer is dropTrailerField for a trailer that net/http's or
// x/net's reader gave (an h2 or h2c pool's, or an http1 pool's to an
// HTTP/2 client): also one announced that never came, which both readers
// list with no value. Handed on to x/net/http2's server, it would make
// that server owe the client a trailer section it then writes as nothing:
// no frame, so no end of the stream.
func (f *flow) dropNetTrailer(k string, vs []string) bool {
	return len(vs) == 0 || f.dropTrailerField(s2b(k))
}

// reportedField reports whether k is a field takeReported removes.
func (f *flow) reportedField(k []byte) bool {
	for _, n := range f.reportedNames() {
		if eqFold(k, n) {
			return true
		}
	}
	return false
}

// reportedNames names the fields any rule reads metrics from
// (Decision.Strip, which holds the Report's; without it, the Report's).
func (f *flow) reportedNames() []string {
	if s := f.d.Strip; s != nil {
		return s.Headers
	} else if r := f.d.Report; r != nil {
		return r.Headers
	}
	return nil
}

// dropResponseField is the response phase's verdict on one upstream
// response header field: hop-by-hop fields and those named in the
// upstream's Connection header (f.tokens) are removed, and so are the
// decision headers an upstream tried to set (X-Gray-Rule, X-Gray-Group
// and X-Gray-Degraded are the gateway's to say), and X-Request-Id: the
// gateway adds its own to every answer, and an upstream that echoes the
// id (many frameworks do) would give the client two or three.
func (f *flow) dropResponseField(k []byte) bool {
	return isHopByHop(k) || isConnToken(b2s(k), f.tokens) ||
		eqFold(k, hdrGrayRule) || eqFold(k, hdrGrayGroup) || eqFold(k, hdrGrayDegraded) || eqFold(k, hdrRequestID)
}

// takeReported keeps, for a final response, the values of the fields the
// upstream reports metrics in (Decision.Report) and appends the names of
// every field any rule reads metrics from (Decision.Strip, which holds
// the Report's; without it, the Report's), each followed by a 0 byte, to
// del, for the caller to remove: the client never sees them, whether the
// request was claimed or not.
func (f *flow) takeReported(h fields, status int, del []byte) []byte {
	r := f.d.Report
	if r != nil && len(r.Headers) > 0 && isFinal(status) {
		f.captureReported(h, r.Headers)
	}
	for _, n := range f.reportedNames() {
		del = append(append(del, n...), 0)
	}
	return del
}

var strHTTP11 = []byte("HTTP/1.1")

// isFinal reports whether a response status is a final one.
func isFinal(status int) bool { return !isInterim(status) }

// captureReported keeps the values of the response headers the upstream
// reports metrics in (Decision.Report), for OnDone, copied into one
// buffer of the flow; the caller removes the headers.
func (f *flow) captureReported(h fields, names []string) {
	buf := f.reportBuf[:0]
	var ends [maxReported]int
	n := min(len(names), maxReported)
	for i := range n {
		if v := h.Peek(names[i]); v != nil {
			buf = append(buf, v...)
			ends[i] = len(buf)
		} else {
			ends[i] = -1
		}
	}
	f.reportBuf = buf
	f.reported = f.reported[:0]
	start := 0
	for i := range n {
		if ends[i] < 0 {
			f.reported = append(f.reported, nil)
			continue
		}
		f.reported = append(f.reported, buf[start:ends[i]:ends[i]])
		start = ends[i]
	}
}

// maxReported bounds the report headers read per response.
const maxReported = 16

// addVia adds the gateway's Via entry to a forwarded response, naming
// the protocol the response came in with from the upstream.
func (f *flow) addVia(h fields) {
	if !f.opts.NoVia {
		v := viaValue
		if t := f.d.Target; t != nil && t.Protocol != upstream.HTTP1 {
			v = viaValue2
		} else if f.upHTTP10 {
			v = viaValue10
		}
		h.AddBytesKV(s2b(hdrVia), s2b(v))
	}
}

// ensureDate gives a forwarded response a Date when the upstream sent none
// (RFC 9110 section 6.6.1: a proxy that forwards a response without one
// adds it). fasthttp only adds its own Date to a header that has not been
// told to leave it out, which only a fresh header is, and it drops a Date
// set by hand; so the header is moved into a fresh one through its wire
// form. Upstreams nearly always send a Date; for those that don't, the
// buffers of the round trip are pooled, so it allocates nothing.
func ensureDate(h *fasthttp.ResponseHeader) {
	if len(h.Peek(fasthttp.HeaderDate)) > 0 {
		return
	}
	rt := dateRoundTrips.Get().(*dateRoundTrip)
	rt.raw = h.AppendBytes(rt.raw[:0])
	br := rt.reader()
	rt.fresh.Reset()
	// A fresh header would add a default Content-Type too.
	rt.fresh.SetNoDefaultContentType(true)
	// Parsing also infers framing: a header without a length would come
	// back delimited by the close (Connection: close), which a header
	// whose body length is set later (the HTTP/2 upstream path) must not.
	closing, length := h.ConnectionClose(), h.ContentLength()
	if err := rt.fresh.Read(br); err == nil {
		rt.fresh.CopyTo(h)
		h.SetContentLength(length)
		if !closing {
			h.ResetConnectionClose()
		}
	}
	rt.fresh.Reset()
	rt.release()
}

// headerWithoutDate reports whether br holds a whole response header whose
// status is final (not 1xx) and that has no Date field. It errs towards
// false: a header that is not all buffered, or a line that might be a Date
// (any case, whitespace before the colon), is left to ensureDate.
func headerWithoutDate(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	if len(b) < len("HTTP/1.1 200\r\n\r\n") || b[9] == '1' {
		return false
	}
	i := bytes.IndexByte(b, '\n')
	for i >= 0 {
		b = b[i+1:]
		switch {
		case len(b) == 0:
			return false // the rest of the header has not arrived
		case b[0] == '\n' || (b[0] == '\r' && len(b) > 1 && b[1] == '\n'):
			return true // the end of the header
		case len(b) >= 5 && b[0]|0x20 == 'd' && b[1]|0x20 == 'a' && b[2]|0x20 == 't' && b[3]|0x20 == 'e' &&
			(b[4] == ':' || b[4] == ' ' || b[4] == '\t'):
			return false
		}
		i = bytes.IndexByte(b, '\n')
	}
	return false
}

// dateRoundTrip is what ensureDate needs to move a header through its wire
// form: the wire bytes, a reader over them and the fresh header. readBareLF
// and checkFirstChunk use its bytes and reader to give fasthttp's parsers a
// rewritten copy.
type dateRoundTrip struct {
	raw   []byte
	rd    bytes.Reader
	br    *bufio.Reader
	fresh fasthttp.ResponseHeader
}

// reader returns rt.br reading rt.raw, which it buffers whole: fasthttp's
// parsers want the whole head in the reader.
func (rt *dateRoundTrip) reader() *bufio.Reader {
	rt.rd.Reset(rt.raw)
	if rt.br.Size() < len(rt.raw) {
		rt.br = bufio.NewReaderSize(nil, len(rt.raw))
	}
	rt.br.Reset(&rt.rd)
	return rt.br
}

// release puts rt back in the pool, unless its buffers grew unusually
// large.
func (rt *dateRoundTrip) release() {
	rt.br.Reset(nil)
	if cap(rt.raw) <= maxPooledDateHeader && rt.br.Size() <= maxPooledDateHeader {
		dateRoundTrips.Put(rt)
	}
}

// maxPooledDateHeader keeps an unusually large header's buffer out of the
// pool.
const maxPooledDateHeader = 64 << 10

var dateRoundTrips = sync.Pool{New: func() any {
	return &dateRoundTrip{br: bufio.NewReaderSize(nil, 4096)}
}}

// setDecisionHeaders adds the decision headers to a fasthttp response
// (see flow.decisionHeaders), with fasthttp's name normalizing off: the
// names are already canonical.
func (ex *exchange) setDecisionHeaders(h *fasthttp.ResponseHeader) {
	if !h.DisableNormalizing() {
		defer h.EnableNormalizing()
	}
	ex.decisionHeaders(h)
}

// decisionHeaders adds the decision headers and, for a freshly issued
// anonymous identity, its cookie. They go on every response the gateway
// sends after routing, error responses included: X-Gray-Rule,
// X-Gray-Group, X-Gray-Degraded, X-Request-Id (on HTTP/2, and so as gRPC
// response metadata, too).
func (f *flow) decisionHeaders(h fields) {
	d := &f.d
	// Appended, not set: h is either fresh or the upstream's header
	// without these (dropResponseField), so there is nothing to replace.
	if d.Rule != "" {
		h.AddBytesKV(s2b(hdrGrayRule), s2b(d.Rule))
	}
	if d.Group != "" {
		h.AddBytesKV(s2b(hdrGrayGroup), s2b(d.Group))
	}
	if d.Degraded != "" {
		h.AddBytesKV(s2b(hdrGrayDegraded), s2b(d.Degraded))
	}
	if len(f.reqID) > 0 {
		h.AddBytesKV(s2b(hdrRequestID), f.reqID)
	}
	if d.Identity.Issued && d.Identity.Cookie != "" {
		c := append(f.scratch[:0], d.Identity.Cookie...)
		c = append(c, '=')
		c = append(c, d.Identity.Value...)
		c = append(c, "; Path=/; Max-Age=31536000; HttpOnly; SameSite=Lax"...)
		h.AddBytesKV(s2b(fasthttp.HeaderSetCookie), c)
		f.scratch = c[:0]
	}
}

// clientHost is the host a request is for, as the client wrote it: the
// authority of a target in absolute form (without its userinfo), else the
// Host field. It is what goes upstream in Host and X-Forwarded-Host, as
// the HTTP/2 listener sends its :authority. fasthttp's ctx.Host() is its
// URI's host, percent-decoded: "issu%8261.com" went upstream as a byte
// past ASCII, and "[::1%25en0]" as "[::1%en0]". The listener has checked
// both forms (requestLine, and Go's ValidHostHeader).
func clientHost(in *fasthttp.RequestHeader) []byte {
	if auth, _, ok := absoluteForm(in.RequestURI()); ok {
		if j := bytes.LastIndexByte(auth, '@'); j >= 0 {
			auth = auth[j+1:]
		}
		return auth
	}
	return in.Host()
}

// zoneless removes an IPv6 zone from a host ("[fe80::1%25en0]:80", which
// Go's server and the listener take, as RFC 6874 writes it in a URI). A
// zone only means something on the client's own host, and RFC 6874
// section 4 has an intermediary remove it from what it sends on: the
// upstream's Host and X-Forwarded-Host carry "[fe80::1]:80", over either
// listener (Go's transport removes it from the Host it writes; the
// HTTP/1.1 codec sent it decoded, "[fe80::1%en0]:80", not a valid host).
// Any other host is returned as it is, without a copy.
func zoneless(host []byte) []byte {
	if len(host) == 0 || host[0] != '[' {
		return host
	}
	i := bytes.IndexByte(host, '%')
	if i < 0 {
		return host
	}
	j := bytes.IndexByte(host[i:], ']')
	if j < 0 {
		return host
	}
	return append(host[:i:i], host[i+j:]...)
}
