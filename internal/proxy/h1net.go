package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
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
	// start is when the attempt began, for the breaker's latency (zero
	// without a breaker).
	start time.Time

	// For an HTTP/1.1 client, the round trip runs on a goroutine of its
	// own (roundTrip), so that the interim responses its transport reports
	// (got1xx) can be forwarded while the answer is awaited, as
	// respondHijacked does those of an HTTP/1.1 upstream; wake is nil
	// otherwise. The two goroutines share what follows wake, under mu.
	wake chan struct{} // signalled when an interim response or the answer came
	mu   sync.Mutex
	got  []netInterim // interim responses reported and not yet taken
	n1xx int          // interim responses reported, 100 Continue included
	// answered: the round trip returned upResp (until it is taken) and upErr.
	answered bool
	upResp   *http.Response
	upErr    error
}

// netInterim is an interim (1xx) response the transport reported.
type netInterim struct {
	code int
	h    http.Header
}

// errWebSocketH2 refuses a WebSocket handshake to an HTTP/2 pool, which
// would need RFC 8441's extended CONNECT.
var errWebSocketH2 = errors.New("a WebSocket upgrade cannot be forwarded to an HTTP/2 upstream")

// forwardNet is forward's attempt on an h2 or h2c pool: the request, with
// the fields the policy keeps and adds, goes through the pool's net/http
// transport, and the answer is relayed (netAnswer). An error means
// nothing has been written to the client. For an HTTP/1.1 client the
// round trip runs on its own goroutine: an interim response that comes
// before the answer hands the rest of the exchange to respondHijacked,
// which forwards it and those that follow, and then the answer.
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
	// The fields as they came, in order, as buildRequest sends them to an
	// http1 pool: fasthttp's All holds some (Content-Type) once, so a
	// repeated one reached an h2 pool once and an http1 pool as sent.
	// A request fasthttp did not parse (a handler test's) has no wire
	// bytes to re-read.
	fields := in.All()
	if len(in.RawHeaders()) > 0 {
		fields = in.AllInOrder()
	}
	for k, v := range fields {
		if ex.keepRequestHeader(k, trusted) {
			h.Add(string(k), string(v))
		}
	}
	host := zoneless(clientHost(in))
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
		URL:    upstreamURL(scheme, ex.inst.Addr, u),
		Header: h, Host: string(host),
	}
	if ex.d.UpstreamHost || len(host) == 0 {
		out.Host = ex.inst.Addr
	}
	ex.setBodyKind(ctx, false)
	switch ex.bodyKind {
	case bodyBuffered:
		held := ex.sendBody
		if ex.buffered {
			// The flow's pooled buffer, which the transport may read
			// after the exchange ended (bodyLoan).
			nu.att.loan = ex.loanBody()
		} else {
			// fasthttp's, in a server that does not stream bodies:
			// valid only until the handler returns, which the
			// transport may outlive.
			held = bytes.Clone(held)
		}
		out.Body = nu.att.loan.lend(held, call)
		out.ContentLength = int64(len(held))
		nu.att.held = holding(held)
		if ex.bufferedTrailers(ctx) {
			// The trailer fields came with the body, which has ended:
			// they are filled in now.
			var fill func()
			out.Trailer, fill = requestTrailer(in, ex.announcedTrailers(in), ex.keepRequestTrailer)
			fill()
		}
	case bodyFixed, bodyChunked:
		nu.att.body = &upBody{src: ex.aheadBody(ctx), call: call, keep: ex.keepForResume(),
			count: bodyCount{size: ex.reqBody.size, max: ex.pol.MaxBodyBytes}}
		out.Body = nu.att.body
		out.ContentLength = ex.reqBody.size
		if ex.bodyKind == bodyChunked {
			out.Trailer, nu.att.body.onEnd = requestTrailer(in, ex.announcedTrailers(in), ex.keepRequestTrailer)
		}
	default:
		call.arm()
	}
	if out.Body != nil {
		out.GetBody = nu.att.getBody
	}
	trace := &httptrace.ClientTrace{}
	if in.IsHTTP11() {
		// RFC 9110 section 15.2: a proxy forwards interim responses, but
		// never to an HTTP/1.0 client (whose transport skips them).
		trace.Got1xxResponse = nu.got1xx
		nu.wake = make(chan struct{}, 1)
	}
	out = out.WithContext(nu.att.trace(call.ctx, trace))
	ex.netOut = out

	if ex.d.Breaker != nil {
		nu.start = p.now()
	}
	ex.sent = true
	rt := p.netTransport(pool)
	if nu.wake == nil {
		resp, err := rt.RoundTrip(out)
		return ex.netAnswer(ctx, resp, err)
	}
	go nu.roundTrip(rt, out)
	if nu.wait(true) {
		if lc := inPlace(ctx); lc != nil {
			// Interim responses came first: they are forwarded as they
			// come, and the answer goes on through fasthttp, which keeps
			// the connection.
			ex.respStarted = true
			if err := ex.forwardNetInterim(lc); err != nil {
				err = fmt.Errorf("%w: forwarding an interim response: %w", errClientGone, err)
				ex.endNet()
				ex.recordOutcome(nu.start, err)
				return false, err
			}
			resp, err := nu.take()
			return ex.netAnswer(ctx, resp, err)
		}
		// Interim responses came first: respondHijacked forwards them,
		// once fasthttp has flushed the answers to earlier pipelined
		// requests, and then the answer. The breaker's outcome is the
		// answer's (netAnswer); should the exchange end before it (the
		// client went away while interim responses were forwarded), it
		// is recorded when the exchange ends, as the breaker must hear
		// of every request it let through.
		if ex.d.Breaker != nil {
			ex.brkLatency = max(p.now().Sub(nu.start), 0)
			ex.brkPending = true
		}
		ex.respStarted = true
		ex.takeInterim()
		p.respondHijacked(ctx, ex)
		return true, nil
	}
	resp, err := nu.take()
	return ex.netAnswer(ctx, resp, err)
}

// requestTrailer returns the trailer a chunked request announced (keys,
// the names in its Trailer header), to send after the body as the
// transport does with http.Request.Trailer, and the function that fills
// in the values when the body has ended: fasthttp parses the trailer
// section into the request header then, on the goroutine reading the
// body, which is the transport's, before it returns the body's end.
// Fields the request did not announce are not sent, as writeBody does for
// an HTTP/1.1 pool, nor those keep refuses. Without an announcement it
// returns nil and no function.
func requestTrailer(in *fasthttp.RequestHeader, keys [][]byte, keep func([]byte) bool) (http.Header, func()) {
	tr := make(http.Header, len(keys))
	for _, k := range keys {
		if keep(k) {
			tr[http.CanonicalHeaderKey(string(k))] = nil
		}
	}
	if len(tr) == 0 {
		return nil, nil
	}
	return tr, func() {
		for k := range tr {
			var vs []string
			for _, v := range in.PeekAll(k) {
				vs = append(vs, string(v))
			}
			tr[k] = vs
		}
	}
}

// netAnswer relays the answer of forwardNet's round trip (resp, or err)
// into the client's response: its header, with the fields the policy
// removes and adds, and its body. A body with a Content-Length of at most
// maxInlineBody bytes is read whole first (readNetInline), as an HTTP/1.1
// upstream's is (prepareBody), so that one that breaks off is answered
// 502 (a stall 504) and not with a header that promised more; any other
// streams, as netRespBody. It returns true when the body streams, in
// which case netRespBody finishes the exchange, and an error when the
// request failed with nothing of the answer written to the client. It
// runs on the handler's goroutine, or on respondHijacked's after an
// interim response.
func (ex *exchange) netAnswer(ctx *fasthttp.RequestCtx, resp *http.Response, err error) (bool, error) {
	nu := ex.net
	call := nu.att.call
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
		var de *dialError
		if unsent || !ex.sent && errors.As(err, &de) {
			// Nothing of the body was sent (a stream refused unprocessed,
			// or no connection): the next instance, or stable, gets it
			// whole, what the transport read first included.
			ex.resumeRefused(nu.att.body)
		}
		ex.endNet()
		if ex.clientErr != nil && isBadBody(ctx, ex.clientErr) {
			err = errors.Join(errBadRequestBody, err)
		}
		ex.recordOutcome(nu.start, err)
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
		ex.brkLatency = max(ex.p.now().Sub(nu.start), 0)
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
	ex.completed = true // what completeHeader does has been done
	if nu.att.body != nil && !nu.att.body.ended() {
		// The upstream answered before the upload ended: what is left of
		// it is not read, so the connection cannot carry another request.
		ctx.SetConnectionClose()
	}
	if ctx.IsHead() || !hasBody(resp.StatusCode) {
		if hasBody(resp.StatusCode) {
			// A HEAD's answer, which fasthttp would send with
			// "Content-Length: 0" left alone.
			setBodilessLength(&o.Header, int(resp.ContentLength), ctx.Request.Header.IsHTTP11())
		}
		o.SkipBody = true
		ex.respEnded = true
		ex.endNet()
		return false, nil
	}
	size := int(resp.ContentLength)
	if size < 0 || len(resp.Trailer) > 0 || isEventStream(o.Header.ContentType()) {
		if !ctx.Request.Header.IsHTTP11() && !ex.hijacked {
			// fasthttp would send the stream chunked, which an HTTP/1.0
			// client cannot decode (RFC 9112 section 6.1), nor take the
			// trailers from: respondHijacked writes it with the length
			// the upstream gave, if any, or else delimited by closing
			// the connection (RFC 9112 section 6.3), as respond does an
			// http1 pool's. (A length of -1 would add a
			// Transfer-Encoding field to the header, and -2 keeps the
			// Content-Length the header may have by default.)
			if size < 0 {
				o.Header.Del(fasthttp.HeaderContentLength)
				size = -2
			}
			o.Header.SetContentLength(size)
			ex.streaming = true
			ex.upBody = &netRespBody{ex: ex, length: -1}
			ex.p.respondHijacked(ctx, ex)
			return true, nil
		}
		// Chunked, flushed as it comes; the only framing that can carry
		// the trailers an upstream announced.
		size = -1
		o.ImmediateHeaderFlush = true
	} else if size <= maxInlineBody {
		b, err := ex.readNetInline(resp.Body, size)
		if err != nil {
			ex.brkPending = false
			ex.endNet()
			ex.recordOutcome(nu.start, err)
			return false, err
		}
		o.SetBody(b)
		ex.teeBody(b)
		ex.bytesOut = int64(len(b))
		ex.upEOF, ex.respEnded = true, true
		ex.endNet()
		return false, nil
	} else if err := ex.firstNetBytes(resp, size); err != nil {
		ex.brkPending = false
		ex.endNet()
		ex.recordOutcome(nu.start, err)
		return false, err
	} else {
		// The header goes out before the body, so that a body that
		// breaks off reaches the client as a header and a cut body (see
		// respond).
		o.ImmediateHeaderFlush = true
	}
	ex.streaming = true
	ex.respOut = &o.Header
	body := &netRespBody{ex: ex, length: int64(size)}
	if ex.hijacked {
		// respondHijacked writes the body itself; one set on ctx would
		// be closed when fasthttp resets ctx, after the exchange ended.
		o.Header.SetContentLength(size)
		ex.upBody = body
		return true, nil
	}
	o.SetBodyStream(body, size)
	return true, nil
}

// readNetInline reads the whole body of size bytes (at most
// maxInlineBody) of an h2 or h2c upstream's answer into the exchange's
// copy buffer, each read bounded by the read timeout, as readInline does
// an HTTP/1.1 upstream's (see readWhole).
func (ex *exchange) readNetInline(body io.Reader, size int) ([]byte, error) {
	idle := newReadIdle(ex.opts.UpstreamReadTimeout, ex.net.att.call)
	defer idle.stop()
	return ex.readWhole(body, ex.copyBuf()[:size], size, size, &ex.net.att, idle, nil)
}

// firstNetBytes waits for the first bytes of a body of size bytes, too
// long to read whole, before anything of the answer goes to the client,
// as prepareBody does an HTTP/1.1 upstream's: fasthttp would send nothing
// before them anyway, and an upstream that breaks off (or stalls) before
// any gets the client a 502 (504) rather than no answer at all. The bytes
// read are the first that resp.Body gives.
func (ex *exchange) firstNetBytes(resp *http.Response, size int) error {
	idle := newReadIdle(ex.opts.UpstreamReadTimeout, ex.net.att.call)
	defer idle.stop()
	hb := &readAheadBody{ReadCloser: resp.Body}
	b, err := ex.readWhole(resp.Body, hb.buf[:], 1, size, &ex.net.att, idle, nil)
	if err != nil {
		return err
	}
	hb.held, resp.Body = b, hb
	return nil
}

// readAheadBody is an answer's body whose first bytes were read ahead
// (held).
type readAheadBody struct {
	buf  [4096]byte
	held []byte
	io.ReadCloser
}

func (h *readAheadBody) Read(p []byte) (int, error) {
	if len(h.held) > 0 {
		n := copy(p, h.held)
		h.held = h.held[n:]
		return n, nil
	}
	return h.ReadCloser.Read(p)
}

// readWhole reads into buf at least want bytes of a net/http upstream's
// answer body of size bytes: all of it (want, size and len(buf) the same,
// at most maxInlineBody), or the first bytes of a longer one. Each read is
// bounded by idle (nil: the caller has no read timeout), and comes before
// anything of the answer goes to the client: the HTTP/1.1 codec's
// readNetInline and firstNetBytes, and the HTTP/2 codec's stream.respond.
// The client has been sent nothing, so a body that breaks off or stalls
// is the upstream's failure (brokeOff: 502, or 504 and read_timeout); one
// the transport cut because the client's upload failed or went over the
// route's limit is the client's (bodyFailure), as is a client whose
// request context (client, HTTP/2's stream; nil on HTTP/1.1) ended: it
// reset its stream (499). What was read is buf[:n].
func (f *flow) readWhole(body io.Reader, buf []byte, want, size int, att *netAttempt, idle *readIdle, client context.Context) ([]byte, error) {
	n := 0
	var err error
	for n < want && err == nil {
		if idle != nil {
			idle.keep()
		}
		var m int
		m, err = body.Read(buf[n:])
		n += m
	}
	if n >= want {
		return buf[:n], nil
	}
	if idle != nil && idle.fired() {
		err = context.Cause(att.call.ctx)
	}
	if client != nil {
		if cerr := client.Err(); cerr != nil {
			f.clientErr = cerr
			return nil, fmt.Errorf("%w: %w", errClientGone, cerr)
		}
	}
	if b := att.body; b != nil {
		b.collect(f)
	}
	if f.tooLarge || f.clientErr != nil {
		return nil, f.bodyFailure(err)
	}
	return nil, f.brokeOff(n, size, err)
}

// roundTrip makes the round trip of an HTTP/1.1 client's request on the
// goroutine forwardNet starts for it, and hands over its answer (take).
func (nu *netUpstream) roundTrip(rt http.RoundTripper, req *http.Request) {
	resp, err := rt.RoundTrip(req)
	nu.mu.Lock()
	nu.answered, nu.upResp, nu.upErr = true, resp, err
	nu.mu.Unlock()
	nu.signal()
}

// got1xx is the transport's Got1xxResponse for an HTTP/1.1 client's
// request, on the transport's goroutine: it queues the interim response
// for the exchange (takeInterim), which forwards it. Like the HTTP/1.1
// transport (finishHeader), it allows maxInterimResponses, and forwards
// neither 100 Continue (the gateway answered the client's Expect itself)
// nor 101, which is final, and not HTTP/2 (RFC 9113 section 8.6).
func (nu *netUpstream) got1xx(code int, h textproto.MIMEHeader) error {
	nu.mu.Lock()
	defer nu.mu.Unlock()
	if nu.n1xx >= maxInterimResponses {
		return errTooManyInterim
	}
	nu.n1xx++
	if isInterim(code) && code != http.StatusContinue {
		nu.got = append(nu.got, netInterim{code: code, h: http.Header(h)})
		nu.signal()
	}
	return nil
}

// signal wakes the exchange waiting for the round trip (wait,
// awaitNetAnswer).
func (nu *netUpstream) signal() {
	select {
	case nu.wake <- struct{}{}:
	default:
	}
}

// wait waits for the round trip's answer, or, with interim, for an
// interim response if one comes first, and reports whether one is queued
// (takeInterim has it).
func (nu *netUpstream) wait(interim bool) (queued bool) {
	for {
		nu.mu.Lock()
		queued, answered := len(nu.got) > 0, nu.answered
		nu.mu.Unlock()
		if answered || (interim && queued) {
			return queued
		}
		<-nu.wake
	}
}

// take returns the round trip's answer, which has come.
func (nu *netUpstream) take() (*http.Response, error) {
	nu.mu.Lock()
	defer nu.mu.Unlock()
	resp, err := nu.upResp, nu.upErr
	nu.upResp = nil
	return resp, err
}

// takeInterim appends the interim responses the transport reported so far
// to ex.interim, in the HTTP/1.1 form respondHijacked writes, without the
// fields the policy removes from any response header (filterNetResponse:
// hop-by-hop fields and the gateway's own); it reports whether the answer
// has come too.
func (ex *exchange) takeInterim() (answered bool) {
	nu := ex.net
	nu.mu.Lock()
	got := nu.got
	nu.got = nil
	answered = nu.answered
	nu.mu.Unlock()
	for _, r := range got {
		ex.filterNetResponse(r.h, r.code)
		w := bytes.NewBuffer(ex.interim)
		fmt.Fprintf(w, "HTTP/1.1 %d %s\r\n", r.code, http.StatusText(r.code))
		_ = r.h.Write(w)
		w.WriteString("\r\n")
		ex.interim = w.Bytes()
	}
	return answered
}

// awaitNetAnswer is respondHijacked's wait for the answer to a request to
// an h2 or h2c pool whose first interim responses it has forwarded: those
// that follow are forwarded as they come, and the answer is taken
// (netAnswer) under the route's header timeout, counted from now, as
// for an HTTP/1.1 upstream.
func (ex *exchange) awaitNetAnswer(ctx *fasthttp.RequestCtx) error {
	nu := ex.net
	nu.att.call.rearm()
	for !ex.takeInterim() {
		if err := ex.writeInterim(); err != nil {
			return err
		}
		<-nu.wake
	}
	if err := ex.writeInterim(); err != nil {
		return err
	}
	resp, err := nu.take()
	_, err = ex.netAnswer(ctx, resp, err)
	return err
}

// forwardNetInterim writes to the client connection c the interim
// responses of a request to an h2 or h2c pool as they come, until the
// answer has come; the answer is then waited for under the route's header
// timeout from the first of them, as awaitNetAnswer waits.
func (ex *exchange) forwardNetInterim(c net.Conn) error {
	nu := ex.net
	nu.att.call.rearm()
	for !ex.takeInterim() {
		if err := ex.forwardInterim(c); err != nil {
			return err
		}
		<-nu.wake
	}
	return ex.forwardInterim(c)
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
// read (upBody.unread): what it read goes first (reqBody.pre, never nil,
// so that setBodyKind keeps the source), then what is left of the
// client's body (reqBody.src, the readAhead b read: what its reads given
// up brought, then the connection), and the request may fall back.
func (ex *exchange) resumeRefused(b *upBody) {
	if ex.replayable || b == nil {
		return
	}
	held, ok := b.unread()
	if !ok {
		return
	}
	rb := &ex.reqBody
	rb.pre = holding(held)
	rb.n = int64(len(rb.pre))
	ex.replayable = true
}

// aheadBody returns the client's streamed body as the transport of an h2
// or h2c pool reads it: a readAhead of fasthttp's body stream, made on the
// first such attempt and read by every later one, whichever transport
// (see upBody for why a read must be given up). What was read of the body
// before (reqBody.pre) is handed out first. The exchange settles it as it
// ends (finish): a read given up may still wait on the connection, which
// the listener's expired deadline ends.
func (ex *exchange) aheadBody(ctx *fasthttp.RequestCtx) *readAhead {
	rb := &ex.reqBody
	if ex.ahead == nil {
		conn := ctx.Conn()
		ex.ahead = &readAhead{src: rb.src, wake: func() { _ = conn.SetReadDeadline(aLongTimeAgo) }}
	}
	rb.src = ex.ahead
	// pre may be the flow's buffer: the exchange's reads of it end
	// before the buffer is pooled again (endNet stops the body, waiting).
	ex.ahead.unread(rb.pre)
	rb.pre = nil
	return ex.ahead
}

// endNet ends the net/http call of ex: the transport stops reading the
// client's body, and the call's context is canceled.
func (ex *exchange) endNet() {
	nu := ex.net
	if nu == nil {
		return
	}
	if nu.wake != nil {
		// An exchange that ends after interim responses (the client
		// went away) may not have its answer yet: the call is canceled,
		// and its round trip waited for, which then returns at once, so
		// that the transport is done with the attempt's body (getBody)
		// before it is stopped. An answer not taken is closed.
		nu.att.call.end()
		nu.wait(false)
		if resp, _ := nu.take(); resp != nil {
			_ = resp.Body.Close()
		}
	}
	if nu.att.body != nil {
		nu.att.body.stop(true)
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
// netRespBody streams an h2 or h2c upstream's answer body to an HTTP/1.1
// client. Each read of it waits at most read_timeout for the upstream
// (idle): the timer runs only while a read waits, not while the client is
// written to, which client_write_timeout bounds.
type netRespBody struct {
	ex   *exchange
	idle *readIdle
	// length is the body's length as the client's answer frames it, or
	// -1 when it is not framed by one (chunked, or ended by the close).
	length int64
}

func (b *netRespBody) Read(p []byte) (int, error) {
	ex := b.ex
	if d := ex.opts.UpstreamReadTimeout; d > 0 {
		if b.idle == nil {
			b.idle = newReadIdle(d, ex.net.att.call)
		} else {
			b.idle.restart()
		}
	}
	n, err := ex.net.resp.Body.Read(p)
	if b.idle != nil {
		b.idle.stop()
		if err != nil && err != io.EOF && b.idle.fired() && ex.timeout == "" {
			ex.timeout = timeoutUpstreamRead
		}
	}
	ex.bytesOut += int64(n)
	if ex.mirror == mirrorOn {
		ex.teeBody(p[:n])
	}
	if err != nil && err != io.EOF && b.length >= 0 && ex.bytesOut == b.length {
		// Every byte of a body the client's answer frames by its length
		// has come, and it failed only after its last one (an h2 upstream
		// that resets its stream just then): the body is whole, and the
		// client's answer ends well, on a connection that stays open, as
		// through nginx. fasthttp reads once more past the length to check
		// for an overrun; as a failure that closed the client's connection
		// after a complete answer, which a keep-alive client then sent its
		// next request on. (A chunked answer's end is the client's only
		// sign that the body is whole: a failure stays one.)
		ex.p.log.Debug("upstream body failed after its last byte", "upstream", ex.inst.Addr, "bytes", ex.bytesOut, "error", err)
		err = io.EOF
	}
	switch {
	case err == io.EOF:
		ex.upEOF, ex.respEnded = true, true
		tr := ex.net.resp.Trailer
		ex.noteGRPCStatus(tr)
		for k, vs := range tr {
			if ex.dropNetTrailer(k, vs) {
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

// upstreamURL is the URL of a request to the instance at addr with u's
// path and query, as the client sent them ("/p?" keeps its "?"). net/url
// writes a path as its own escaping of it unless the path came in that
// form: a byte it would escape itself ('"', '\', '<', '{', '|' and others
// that a request target may carry) was escaped on the way, so "/a\"b"
// reached the upstream as "/a%22b" from an HTTP/2 client and as sent from
// an HTTP/1.1 one. Such a path goes out unchanged, in Opaque; one that
// starts with "//" cannot (net/url would make it a scheme-relative URL)
// and keeps net/url's form.
func upstreamURL(scheme, addr string, u *url.URL) *url.URL {
	out := &url.URL{Scheme: scheme, Host: addr, Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery, ForceQuery: u.ForceQuery}
	if u.RawPath != "" && !strings.HasPrefix(u.RawPath, "//") && u.EscapedPath() != u.RawPath {
		out.Opaque = u.RawPath
	}
	return out
}
