package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/upstream"
)

// netUpstream is the state of an HTTP/1.1 request forwarded to an h2 or
// h2c pool: the HTTP/1.1 codec talking to the net/http transport of
// nethttp.go, so that a gray release can move a service to HTTP/2 (or
// gRPC) behind clients that still speak HTTP/1.1.
type netUpstream struct {
	att  netAttempt
	resp *http.Response
	// stopBody ends the transport's reads of the client's body before the
	// exchange, and the connection fasthttp reads it from, are reused.
	stopBody func()
}

// errWebSocketH2 refuses a WebSocket handshake to an HTTP/2 pool, which
// would need RFC 8441's extended CONNECT.
var errWebSocketH2 = errors.New("a WebSocket upgrade cannot be forwarded to an HTTP/2 upstream")

// forwardNet is forward's attempt on an h2 or h2c pool: the request, with
// the fields the policy keeps and adds, goes through the pool's net/http
// transport; the answer is relayed as forwardNet's response body stream.
// An error means nothing has been written to the client.
func (p *Proxy) forwardNet(ctx *fasthttp.RequestCtx, ex *exchange, trusted, ws bool) (bool, error) {
	if ws {
		ex.recordOutcome(time.Time{}, errWebSocketH2)
		return false, errWebSocketH2
	}
	in := &ctx.Request.Header
	pool := ex.d.Target
	call := newNetCall(context.Background(), ex.headerTimeout)
	nu := &netUpstream{att: netAttempt{call: call, h2: true}}
	ex.net = nu

	h := make(http.Header, in.Len()+8)
	ex.tokens = appendConnTokens(ex.tokens[:0], in.PeekAll(fasthttp.HeaderConnection))
	ex.sawProto, ex.sawHost = false, false
	for k, v := range in.All() {
		if ex.keepRequestHeader(k, trusted) {
			h.Add(string(k), string(v))
		}
	}
	host := ctx.Host()
	ex.addForwarded(&netOut{h}, in, host, ctx.IsTLS() || isTLSConn(ctx.Conn()), trusted)
	clear(ex.tokens)
	ex.tokens = ex.tokens[:0]
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = []string{""}
	}
	for _, v := range in.PeekAll("Te") {
		if teTrailers([]string{string(v)}) {
			h["Te"] = []string{"trailers"}
		}
	}
	target := ex.originForm(in.RequestURI())
	u, err := url.ParseRequestURI(string(target))
	if err != nil {
		u = &url.URL{Path: string(ctx.Path())}
	}
	scheme := "http"
	if pool.Protocol == upstream.H2 {
		scheme = "https"
	}
	out := &http.Request{
		Method: string(in.Method()), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		URL:    &url.URL{Scheme: scheme, Host: ex.inst.Addr, Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery},
		Header: h, Host: string(host),
	}
	if ex.d.UpstreamHost || len(host) == 0 {
		out.Host = ex.inst.Addr
	}
	ex.setBodyKind(ctx, false)
	switch ex.bodyKind {
	case bodyBuffered:
		out.Body = &heldBody{r: newBytesReader(ex.sendBody), call: call}
		out.ContentLength = int64(len(ex.sendBody))
		nu.att.held = holding(ex.sendBody)
	case bodyFixed, bodyChunked:
		var src io.Reader = ex.reqBody.src
		if pre := ex.reqBody.pre; pre != nil {
			src = io.MultiReader(newBytesReader(pre), src)
		}
		nu.att.body = &upBody{src: src, call: call, keep: ex.keepForResume(),
			count: bodyCount{size: ex.reqBody.size, max: ex.pol.MaxBodyBytes}}
		out.Body = nu.att.body
		out.ContentLength = ex.reqBody.size
		conn := ctx.Conn()
		nu.stopBody = func() { _ = conn.SetReadDeadline(aLongTimeAgo) }
	default:
		call.arm()
	}
	if out.Body != nil {
		out.GetBody = nu.att.getBody
	}
	out = out.WithContext(nu.att.trace(call.ctx, &httptrace.ClientTrace{}))
	ex.netOut = out

	var start time.Time
	if ex.d.Breaker != nil {
		start = p.now()
	}
	ex.sent = true
	resp, err := p.netTransport(pool).RoundTrip(out)
	call.answered()
	if err == nil {
		err = unrelayableStatus(resp)
	}
	if nu.att.body != nil {
		nu.att.body.collect(&ex.flow)
	}
	if err != nil {
		var unsent bool
		err, unsent = ex.refused(&nu.att, err, ex.netError(err, call, context.Background()))
		if unsent {
			ex.resumeRefused(nu.att.body)
		}
		ex.endNet()
		if ex.clientErr != nil && isBadBody(ctx, ex.clientErr) {
			err = errors.Join(errBadRequestBody, err)
		}
		ex.recordOutcome(start, err)
		return false, err
	}
	ex.respStarted = true
	nu.resp = resp
	ex.status = resp.StatusCode
	if ex.mirror != mirrorOff {
		ex.keepMirrorResponse(resp.StatusCode, netFields(resp.Header))
	}
	ex.filterNetResponse(resp.Header, resp.StatusCode)
	if ex.d.Breaker != nil {
		ex.brkLatency = max(p.now().Sub(start), 0)
		ex.brkPending = true
	}

	o := &ctx.Response
	o.Header.SetStatusCode(resp.StatusCode)
	for k, vs := range resp.Header {
		if k == "Content-Length" {
			continue
		}
		for _, v := range vs {
			o.Header.Add(k, v)
		}
	}
	if _, ok := resp.Header["Content-Type"]; !ok {
		o.Header.SetNoDefaultContentType(true)
	}
	ex.setDecisionHeaders(&o.Header)
	ex.addVia(&o.Header)
	ensureDate(&o.Header)
	if nu.att.body != nil && !nu.att.body.ended() {
		// The upstream answered before the upload ended: what is left of
		// it is not read, so the connection cannot carry another request.
		ctx.SetConnectionClose()
	}
	if ctx.IsHead() || !hasBody(resp.StatusCode) {
		o.SkipBody = true
		ex.respEnded = true
		ex.endNet()
		return false, nil
	}
	size := int(resp.ContentLength)
	if size < 0 || len(resp.Trailer) > 0 || isEventStream(o.Header.ContentType()) {
		// Chunked, flushed as it comes; the only framing that can carry
		// the trailers an upstream announced.
		size = -1
		o.ImmediateHeaderFlush = true
	}
	ex.streaming = true
	ex.respOut = &o.Header
	o.SetBodyStream(&netRespBody{ex: ex}, size)
	return true, nil
}

// keepForResume is how much of a streamed body the transport's reads
// hold (upBody.keep), to send it again after the upstream refused it
// unprocessed (netAttempt.getBody, resumeRefused): Policy.FallbackBodyBytes,
// as for an HTTP/2 client's body.
func (ex *exchange) keepForResume() int {
	if k := ex.pol.FallbackBodyBytes; k > 0 {
		return int(k)
	}
	return int(router.DefaultFallbackBodyBytes)
}

// resumeRefused makes the streamed body b of an attempt the upstream refused
// unprocessed (netAttempt.refused) the next attempt's, if b holds all it
// read (upBody.unread): what it read goes first (reqBody.pre), then what
// is left of the client's body, and the request may fall back. b may
// have started with the previous pre, which either it holds whole, or is
// still to be sent whole.
func (ex *exchange) resumeRefused(b *upBody) {
	if ex.replayable || b == nil {
		return
	}
	held, ok := b.unread()
	if !ok {
		return
	}
	rb := &ex.reqBody
	if len(held) >= len(rb.pre) {
		rb.pre = held
	}
	rb.n = int64(len(rb.pre))
	ex.replayable = true
}

// endNet ends the net/http call of ex: the transport stops reading the
// client's body, and the call's context is canceled.
func (ex *exchange) endNet() {
	nu := ex.net
	if nu == nil {
		return
	}
	if nu.att.body != nil {
		nu.att.body.stop(nu.stopBody)
	}
	nu.att.call.end()
	if nu.resp != nil {
		_ = nu.resp.Body.Close()
	}
}

// netRespBody is an HTTP/2 upstream's response body as fasthttp writes it
// to the HTTP/1.1 client; when fasthttp closes it, the exchange ends.
// Trailers are forwarded after a chunked body, as forwardTrailers does for
// an HTTP/1.1 upstream.
type netRespBody struct{ ex *exchange }

func (b *netRespBody) Read(p []byte) (int, error) {
	ex := b.ex
	n, err := ex.net.resp.Body.Read(p)
	ex.bytesOut += int64(n)
	if ex.mirror == mirrorOn {
		ex.teeBody(p[:n])
	}
	switch {
	case err == io.EOF:
		ex.upEOF, ex.respEnded = true, true
		tr := ex.net.resp.Trailer
		ex.noteGRPCStatus(tr)
		for k, vs := range tr {
			if len(vs) == 0 || ex.dropTrailerField(s2b(k)) {
				continue
			}
			// A name fasthttp refuses as a trailer (RFC 9110 section
			// 6.5.1) would be set in the header, which is gone.
			if ex.respOut.AddTrailer(k) == nil {
				ex.respOut.Set(k, vs[0])
			}
		}
	case err != nil:
		ex.upErr = err
	}
	return n, err
}

// CloseWithError implements fasthttp.ReadCloserWithError.
func (b *netRespBody) CloseWithError(werr error) error {
	ex := b.ex
	if !ex.streaming {
		return nil
	}
	ex.streaming = false
	ex.endNet()
	switch {
	case ex.upErr != nil:
		ex.p.log.Warn("upstream body broke off", "upstream", ex.inst.Addr, "bytes", ex.bytesOut, "error", ex.upErr)
	case werr != nil && !errors.Is(werr, io.EOF):
		ex.writeErr = werr
		if isTimeout(werr) {
			ex.timeout = timeoutClientWrite
		}
	}
	ex.finish()
	return nil
}
