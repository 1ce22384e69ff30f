package proxy

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/upstream"
)

// maxPooledBody is the largest replay buffer a pooled exchange keeps; a
// route with a larger FallbackBodyBytes allocates its buffer per request.
const maxPooledBody = router.DefaultFallbackBodyBytes

// admit applies the route's policy before anything is sent upstream: the
// rate limit, the declared body size, the response header timeout, and,
// for a request that may fall back to stable, the buffering of its body.
// With router.NoPolicy and no fallback it is a handful of comparisons.
func (p *Proxy) admit(ctx *fasthttp.RequestCtx, ex *exchange) error {
	pol := ex.d.Policy
	if pol == nil {
		pol = router.NoPolicy
	}
	ex.pol = pol
	ex.headerTimeout = ex.opts.ResponseHeaderTimeout
	if pol.UpstreamTimeout > 0 {
		ex.headerTimeout = pol.UpstreamTimeout
	}
	if pol.Limiter != nil {
		// ex.d.Identity.Value may alias a request buffer; the Limiter
		// clones an identity when it keeps one as a map key.
		if ok, retry := pol.Limiter.Allow(ex.d.Identity.Value); !ok {
			ex.retryAfter = retry
			return errRateLimited
		}
	}
	if m := pol.MaxBodyBytes; m > 0 {
		cl := ctx.Request.Header.ContentLength()
		if int64(cl) > m || (ctx.RequestBodyStream() == nil && int64(len(ctx.Request.Body())) > m) {
			return errBodyTooLarge
		}
	}
	if ex.d.Stable != nil && ex.d.Stable != ex.d.Target {
		return ex.prepareReplay(ctx)
	}
	return nil
}

// prepareReplay decides whether the request could be sent to stable after
// its gray target fails, and buffers its body if that is what it takes.
// Only a body the gateway holds can be sent twice: no body; a body already
// in memory (a server without StreamRequestBody); a body whose
// Content-Length is at most Policy.FallbackBodyBytes, read here before the
// gray target is contacted; or a chunked body that turns out to fit. A
// chunked body that does not fit is streamed on, what was read first
// included, and the request is not replayable; nor is a larger declared
// body, which is not read here at all.
func (ex *exchange) prepareReplay(ctx *fasthttp.RequestCtx) error {
	cl := ctx.Request.Header.ContentLength()
	if cl == 0 || cl == -2 {
		ex.replayable = true
		return nil
	}
	src := ctx.RequestBodyStream()
	if src == nil {
		ex.replayable = true
		return nil
	}
	limit := ex.pol.FallbackBodyBytes
	if limit <= 0 {
		limit = router.DefaultFallbackBodyBytes
	}
	if int64(cl) > limit {
		return nil
	}
	rb := &ex.reqBody
	rb.src, rb.size, rb.n, rb.max = src, int64(cl), 0, ex.pol.MaxBodyBytes
	var err error
	if cl > 0 {
		if cap(ex.body) < cl {
			ex.body = make([]byte, cl)
		}
		ex.body = ex.body[:cl]
		_, err = io.ReadFull(rb, ex.body)
	} else {
		ex.body, err = readUpTo(rb, ex.body[:0], int(limit)+1)
		if err == nil && int64(len(ex.body)) > limit {
			rb.pre = ex.body
			return nil
		}
	}
	switch {
	case ex.tooLarge:
		return errBodyTooLarge
	case ex.clientErr != nil && isBadBody(ctx, ex.clientErr):
		return fmt.Errorf("%w: %w", errBadRequestBody, ex.clientErr)
	case ex.clientErr != nil && isTimeout(ex.clientErr):
		ex.timeout = timeoutClientRead
		return fmt.Errorf("%w: %w", errRequestTimeout, ex.clientErr)
	case ex.clientErr != nil:
		return fmt.Errorf("%w: reading request body: %w", errClientGone, ex.clientErr)
	case err != nil:
		return fmt.Errorf("%w: reading request body: %w", errClientGone, err)
	}
	ex.buffered, ex.replayable = true, true
	return nil
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
func (ex *exchange) fallBackOK(err error) bool {
	if !ex.replayable || ex.fellBack || ex.d.Stable == nil || ex.d.Stable == ex.d.Target {
		return false
	}
	switch {
	case errors.Is(err, errClientGone), errors.Is(err, errRequestTimeout),
		errors.Is(err, errBodyTooLarge), errors.Is(err, errGateFull), ex.canceled:
		return false
	case errors.Is(err, upstream.ErrNoInstance), !ex.sent:
		return true
	case ex.respStarted:
		return false
	}
	return idempotentMethod(ex.method)
}

// acquire readies an attempt on ex.d.Target: it takes the pool's
// concurrency slot (full: errGateFull), and then, on the first attempt on
// a breaker-guarded target, asks the breaker (Decision.Guard). The order
// matters: a request refused by a rate limit (admit) or a full pool never
// reaches the breaker, so it cannot use up a half-open probe. A breaker
// that refuses degrades the decision to stable, and the attempt takes the
// stable pool's slot instead.
func (ex *exchange) acquire() error {
	if !ex.takeGate() {
		return errGateFull
	}
	if ex.d.Guard() {
		ex.releaseGate()
		if ex.d.Target == nil {
			return fmt.Errorf("the gray target's breaker is open and there is no stable target: %w", upstream.ErrNoInstance)
		}
		if !ex.takeGate() {
			return errGateFull
		}
	}
	return nil
}

// takeGate takes a concurrency slot of ex.d.Target's pool, if it has a cap.
func (ex *exchange) takeGate() bool {
	if g := ex.d.Target.Gate; g != nil {
		if !g.Acquire() {
			return false
		}
		ex.gate = g
	}
	return true
}

func (ex *exchange) releaseGate() {
	if ex.gate != nil {
		ex.gate.Release()
		ex.gate = nil
	}
}

// fallBack turns the exchange into an attempt on stable (Decision.FallBack):
// degraded "fallback", with the failed pool as Intended and the stable
// target's X-Gray-Tag; a gray rule's request becomes group stable, an
// experiment's keeps its group. The failed pool's concurrency slot is
// given back and the upstream request is rebuilt for stable.
func (ex *exchange) fallBack(err error) {
	ex.releaseGate()
	ex.fellBack, ex.fallbackErr = true, err
	if ex.inst != nil {
		ex.fallbackAddr = ex.inst.Addr
	}
	ex.reportUpstream(false)
	ex.d.FallBack()
	ex.inst, ex.uc = nil, nil
	ex.resp.Reset()
	ex.sent, ex.respStarted = false, false
}

// recordOutcome reports the attempt on a breaker-guarded target to the
// breaker, once. start is when the attempt began (zero when it failed
// before any I/O, as when the pool has no instance); the latency runs from
// there to the response header or the failure, minus the time spent
// waiting for the client's streamed body. A client that went away or was
// too slow (499, 408) and a body over the limit (413) are not the
// upstream's failures: they are recorded as successes with the latency
// seen so far, which is a lower bound of the upstream's, so a target slow
// enough to drive clients away still shows in the p99.
func (ex *exchange) recordOutcome(start time.Time, err error) {
	b := ex.d.Breaker
	if b == nil || ex.recorded {
		return
	}
	ex.recorded = true
	end := ex.p.now()
	var latency time.Duration
	if !start.IsZero() {
		latency = max(end.Sub(start)-ex.bodyWait, 0)
	}
	var failed bool
	switch {
	case err == nil:
		failed = b.IsErrorStatus(ex.status)
	case errors.Is(err, errClientGone), errors.Is(err, errRequestTimeout), errors.Is(err, errBodyTooLarge):
	default:
		failed = true
	}
	b.Record(ex.d.Ticket, breaker.Outcome{Latency: latency, Failed: failed, End: end})
}

// recordBody reports the outcome of a request whose response body streamed
// (see roundTrip), once the body has ended: the latency measured at the
// header, and a failure if the status is an error or the upstream broke
// off or stalled mid-body. A client that stopped reading is not the
// upstream's failure.
func (ex *exchange) recordBody() {
	b := ex.d.Breaker
	if b == nil || ex.recorded {
		return
	}
	ex.recorded = true
	failed := b.IsErrorStatus(ex.status) || ex.upErr != nil
	b.Record(ex.d.Ticket, breaker.Outcome{Latency: ex.brkLatency, Failed: failed, End: ex.p.now()})
}
