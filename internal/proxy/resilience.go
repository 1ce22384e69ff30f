package proxy

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/identity"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/upstream"
)

// maxPooledBody is the largest replay buffer a pooled exchange keeps; a
// route with a larger FallbackBodyBytes allocates its buffer per request.
const maxPooledBody = router.DefaultFallbackBodyBytes

// admit is the HTTP/1.1 codec's call of the admit phase: the declared
// length, and the body stream (nil when fasthttp holds the body in memory).
func (p *Proxy) admit(ctx *fasthttp.RequestCtx, ex *exchange) error {
	src := ctx.RequestBodyStream()
	inMemory := int64(-1)
	if src == nil {
		inMemory = int64(len(ctx.Request.Body()))
	}
	return ex.admit(int64(ctx.Request.Header.ContentLength()), inMemory, src)
}

// admit applies the route's policy before anything is sent upstream: the
// rate limit, the declared body size, the response header timeout, and,
// for a request that may fall back to stable or is mirrored, the
// buffering of its body.
// cl is the declared length (-1: unknown, -2 or 0: no body), inMemory the
// length of a body the codec already holds whole (-1: it streams from
// src). With router.NoPolicy and no fallback it is a handful of
// comparisons.
func (f *flow) admit(cl, inMemory int64, src io.Reader) error {
	pol := f.d.Policy
	if pol == nil {
		pol = router.NoPolicy
	}
	f.pol = pol
	f.headerTimeout = f.opts.ResponseHeaderTimeout
	if pol.UpstreamTimeout > 0 {
		f.headerTimeout = pol.UpstreamTimeout
	}
	if pol.Limiter != nil {
		// f.d.Identity.Value may alias a request buffer; the Limiter
		// clones an identity when it keeps one as a map key.
		key := f.d.Identity.Value
		if f.d.Identity.Issued {
			// A client that kept no anonymous cookie is issued a new id,
			// with a full bucket, on every request: its address is what
			// it cannot drop, and its key is the one anonymous: ip gives.
			f.limKey = identity.AppendAddressID(f.limKey[:0], f.client, f.d.Identity.IPv6Prefix)
			key = b2s(f.limKey)
		}
		if ok, retry := pol.Limiter.Allow(key); !ok {
			f.retryAfter = retry
			return errRateLimited
		}
	}
	if m := pol.MaxBodyBytes; m > 0 {
		if cl > m || (src == nil && inMemory > m) {
			return errBodyTooLarge
		}
	}
	replay := f.d.Stable != nil && f.d.Stable != f.d.Target
	if replay || f.mirror == mirrorOn {
		err := f.prepareReplay(cl, src, replay)
		f.mirrorBody(cl, inMemory)
		return err
	}
	return nil
}

// prepareReplay decides whether the request could be sent to stable after
// its gray target fails, and buffers its body if that is what it takes.
// Only a body the gateway holds can be sent twice: no body; a body already
// in memory (src nil: a server without StreamRequestBody); a body whose
// Content-Length is at most Policy.FallbackBodyBytes, read here before the
// gray target is contacted; or a chunked body that turns out to fit. A
// chunked body that does not fit is streamed on, what was read first
// included, and the request is not replayable; nor is a larger declared
// body, which is not read here at all. A mirrored request's copy needs its
// body held the same way: the limit is then at least the mirror's max_body
// (without replay, only that).
func (f *flow) prepareReplay(cl int64, src io.Reader, replay bool) error {
	if cl == 0 || cl == -2 || src == nil {
		f.replayable = true
		return nil
	}
	var limit int64
	if replay {
		if limit = f.pol.FallbackBodyBytes; limit <= 0 {
			limit = router.DefaultFallbackBodyBytes
		}
	}
	limit = max(limit, f.mirrorBodyLimit())
	if cl > limit {
		return nil
	}
	rb := &f.reqBody
	rb.src, rb.size, rb.n, rb.max = src, cl, 0, f.pol.MaxBodyBytes
	var err error
	if cl > 0 {
		if int64(cap(f.body)) < cl {
			f.body = make([]byte, cl)
		}
		f.body = f.body[:cl]
		_, err = io.ReadFull(rb, f.body)
		if err == nil && f.trailers {
			err = readEnd(rb)
		}
	} else {
		f.body, err = readUpTo(rb, f.body[:0], int(limit)+1)
		if err == nil && int64(len(f.body)) > limit {
			rb.pre, rb.read = f.body, false // pre holds what was read; the rest is unread
			return nil
		}
	}
	if err := f.bodyFailure(err); err != nil {
		return err
	}
	f.buffered, f.replayable = true, true
	return nil
}

// bodyFailure maps a failure to read the client's body (err, or what
// reqBody recorded) to the error the request is answered with: 413 past
// the body limit, 400 for a malformed body, 408 for a stalled client, 499
// for one that went away. nil when nothing failed.
func (f *flow) bodyFailure(err error) error {
	switch {
	case f.tooLarge:
		return errBodyTooLarge
	case f.clientErr != nil && f.c.badBody(f.clientErr):
		return fmt.Errorf("%w: %w", errBadRequestBody, f.clientErr)
	case f.clientErr != nil && isTimeout(f.clientErr):
		f.timeout = timeoutClientRead
		return fmt.Errorf("%w: %w", errRequestTimeout, f.clientErr)
	case f.clientErr != nil:
		return fmt.Errorf("%w: reading request body: %w", errClientGone, f.clientErr)
	case err != nil:
		return fmt.Errorf("%w: reading request body: %w", errClientGone, err)
	}
	return nil
}

// http10BodyBytes bounds the body of undeclared length that holdForHTTP10
// reads whole: 1 MiB, nginx's default client_max_body_size.
const http10BodyBytes = 1 << 20

// holdForHTTP10 reads whole, for an instance whose last answer came over
// HTTP/1.0, a request body of undeclared length (chunked over HTTP/1.1,
// without a content-length over HTTP/2), src being the client's body,
// so that it goes with a Content-Length: RFC 9112 section 6.1 has a
// client send Transfer-Encoding only to a server it knows handles
// HTTP/1.1, and an HTTP/1.0 server reads the chunk lines as the body, or
// no body at all. nginx does the same for such an upstream (it buffers
// the body whatever proxy_request_buffering says). What prepareReplay
// read already is kept. The body's trailer fields, if any, are not sent:
// HTTP/1.0 has nowhere to put them. A body longer than http10BodyBytes
// is refused with 411 Length Required (errLengthRequired): sent with a
// Content-Length, it streams.
func (f *flow) holdForHTTP10(src io.Reader) error {
	if f.buffered || src == nil {
		return nil
	}
	rb := &f.reqBody
	body := rb.pre // what prepareReplay read of it, if it read any
	if body == nil {
		rb.src, rb.size, rb.n, rb.max, rb.read = src, -1, 0, f.pol.MaxBodyBytes, false
		body = f.body[:0]
	}
	rb.pre = nil
	body, err := readUpTo(rb, body, http10BodyBytes+1)
	f.body = body
	if err := f.bodyFailure(err); err != nil {
		return err
	}
	if len(body) > http10BodyBytes {
		return errLengthRequired
	}
	f.buffered, f.replayable = true, true
	return nil
}

// readEnd reads the end of a body whose declared length has been read: an
// HTTP/2 client's trailer fields, which come after its last DATA frame,
// are filled in by the read that returns io.EOF. A byte more than declared
// is refused by x/net/http2's server before it gets here.
func readEnd(r io.Reader) error {
	var b [1]byte
	switch _, err := io.ReadFull(r, b[:]); err {
	case io.EOF:
		return nil
	case nil:
		return errors.New("request body longer than its content-length")
	default:
		return err
	}
}

// readUpTo appends from r to dst until EOF or until dst holds n bytes. EOF
// is not an error.
func readUpTo(r io.Reader, dst []byte, n int) ([]byte, error) {
	if cap(dst) < min(n, 4<<10) {
		dst = make([]byte, 0, min(n, 4<<10))
	}
	for len(dst) < n {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		m, err := r.Read(dst[len(dst):min(cap(dst), n)])
		dst = dst[:len(dst)+m]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// fallBackOK reports whether a failed attempt on a gray target may be
// followed by one on stable (seed 004 §3.3.2, result degradation): the
// request is replayable, stable is another pool, this was not already the
// fallback, and the request cannot have had an effect. That is: nothing
// was sent (no instance, connection refused, dial or TLS failure, no free
// connection), or, for an idempotent method only, the request was sent
// but no response byte came back (reset, closed, response header
// timeout). Failures of the client (gone, too slow, body too large) and
// the pool's concurrency cap never fall back.
func (f *flow) fallBackOK(err error) bool {
	if !f.replayable || f.fellBack || f.d.Stable == nil || f.d.Stable == f.d.Target {
		return false
	}
	switch {
	case errors.Is(err, errClientGone), errors.Is(err, errRequestTimeout),
		errors.Is(err, errBodyTooLarge), errors.Is(err, errGateFull), f.canceled,
		errors.Is(err, errBadRequestBody), errors.Is(err, errLengthRequired),
		errors.Is(err, errCallDeadline): // the call is over wherever it goes
		return false
	case errors.Is(err, upstream.ErrNoInstance), !f.sent:
		return true
	case f.respStarted:
		return false
	}
	return idempotentMethod(f.method)
}

// acquire readies an attempt on f.d.Target: it takes the pool's
// concurrency slot (full: errGateFull), and then, on the first attempt on
// a breaker-guarded target, asks the breaker (Decision.Guard). The order
// matters: a request refused by a rate limit (admit) or a full pool never
// reaches the breaker, so it cannot use up a half-open probe. A breaker
// that refuses degrades the decision to stable, and the attempt takes the
// stable pool's slot instead.
func (f *flow) acquire() error {
	if !f.takeGate() {
		return errGateFull
	}
	if f.d.Guard() {
		f.spanDecided()
		f.releaseGate()
		if f.d.Target == nil {
			return fmt.Errorf("the gray target's breaker is open and there is no stable target: %w", upstream.ErrNoInstance)
		}
		if !f.takeGate() {
			return errGateFull
		}
	}
	return nil
}

// takeGate takes a concurrency slot of f.d.Target's pool, if it has a cap.
func (f *flow) takeGate() bool {
	if g := f.d.Target.Gate; g != nil {
		if !g.Acquire() {
			return false
		}
		f.gate = g
	}
	return true
}

func (f *flow) releaseGate() {
	if f.gate != nil {
		f.gate.Release()
		f.gate = nil
	}
}

// fallBack turns the flow into an attempt on stable (Decision.FallBack):
// degraded "fallback", with the failed pool as Intended and the stable
// target's X-Gray-Tag; a gray rule's request becomes group stable, an
// experiment's keeps its group. The failed pool's concurrency slot is
// given back and its instance is told of the failure; the codec then
// rebuilds the upstream request for stable.
func (f *flow) fallBack(err error) {
	f.releaseGate()
	f.fellBack, f.fallbackErr = true, err
	if f.inst != nil {
		f.fallbackAddr = f.inst.Addr
	}
	f.reportUpstream(false)
	f.d.FallBack()
	f.spanDecided()
	f.inst = nil
	f.sent, f.respStarted = false, false
}

// fallBack is the flow's fallBack plus the HTTP/1.1 codec's own reset.
func (ex *exchange) fallBack(err error) {
	ex.flow.fallBack(err)
	ex.uc = nil
	ex.resp.Reset()
}

// recordOutcome reports the attempt on a breaker-guarded target to the
// breaker, once. start is when the attempt began (zero when it failed
// before any I/O, as when the pool has no instance); the latency runs from
// there to the response header or the failure, minus the time spent
// waiting for the client's streamed body. A client that went away or was
// too slow (499, 408), a body over the limit (413) and a gRPC deadline
// that passed while the client was still sending (errDeadlineSending) are
// not the upstream's failures: they are recorded as successes with the latency
// seen so far, which is a lower bound of the upstream's, so a target slow
// enough to drive clients away still shows in the p99.
func (f *flow) recordOutcome(start time.Time, err error) {
	b := f.d.Breaker
	if b == nil || f.recorded {
		return
	}
	f.recorded = true
	end := f.p.now()
	var latency time.Duration
	if !start.IsZero() {
		latency = max(end.Sub(start)-f.bodyWait, 0)
	}
	var failed bool
	switch {
	case err == nil:
		failed = b.IsErrorStatus(f.status) || b.IsErrorGRPC(f.grpcStatus)
	case errors.Is(err, errClientGone), errors.Is(err, errRequestTimeout), errors.Is(err, errBodyTooLarge),
		errors.Is(err, errDeadlineSending):
	default:
		failed = true
	}
	b.Record(f.d.Ticket, breaker.Outcome{Latency: latency, Failed: failed, End: end, Status: f.status, GRPCStatus: f.grpcStatus, Err: err})
}

// recordBody reports the outcome of a request whose response body streamed
// (see roundTrip), once the body has ended: the latency measured at the
// header, and a failure if the status is an error, the gRPC status (from
// the header of a trailers-only answer, or the trailers) is one the
// breaker counts (grpc_error_codes), or the upstream broke off or stalled
// mid-body. A client that stopped reading is not the
// upstream's failure.
func (f *flow) recordBody() {
	b := f.d.Breaker
	if b == nil || f.recorded {
		return
	}
	f.recorded = true
	failed := b.IsErrorStatus(f.status) || b.IsErrorGRPC(f.grpcStatus) || f.upErr != nil
	b.Record(f.d.Ticket, breaker.Outcome{Latency: f.brkLatency, Failed: failed, End: f.p.now(), Status: f.status, GRPCStatus: f.grpcStatus, Err: f.upErr})
}
