package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/internal/upstream"
)

// StatusClientClosedRequest is nginx's 499: the client went away before the
// response. It is never written to the client (it is gone) but it is what the
// access log and OnDone record.
const StatusClientClosedRequest = 499

// Refusals by the route's policy, answered through fail like transport
// failures so that there is one mapping to a status.
var (
	// errRateLimited: the route's rate limit has no token (429); the wait
	// until the next one is in exchange.retryAfter.
	errRateLimited = errors.New("rate limit exceeded")
	// errBodyTooLarge: the request body is over Policy.MaxBodyBytes (413).
	errBodyTooLarge = errors.New("request body too large")
	// errLengthRequired: a body of undeclared length, for an instance
	// that speaks HTTP/1.0, is too long to be held to count it (411; see
	// holdForHTTP10).
	errLengthRequired = errors.New("length required")
	// errGateFull: the pool's concurrency cap is reached (503).
	errGateFull = errors.New("upstream at its concurrency cap")
)

// The reasons of Done.Refused.
const (
	RefusedRateLimit      = "rate_limit"
	RefusedConcurrencyCap = "concurrency_cap"
	RefusedBodyTooLarge   = "body_too_large"
)

// refusal is Done.Refused for a failure: the route's policy refusals,
// else "".
func refusal(err error) string {
	switch {
	case errors.Is(err, errRateLimited):
		return RefusedRateLimit
	case errors.Is(err, errGateFull):
		return RefusedConcurrencyCap
	case errors.Is(err, errBodyTooLarge):
		return RefusedBodyTooLarge
	}
	return ""
}

// classify is the one mapping from a forwarding failure to a status, after
// net/http's ReverseProxy: client gone → 499, no instance or no free
// connection → 503, timeout (dial, pool wait or response header) → 504, any
// other transport failure → 502. A client too slow to send its body is the
// client's fault: 408. The route's policy adds 429 (rate limit), 413 (body
// size) and 503 (the pool's concurrency cap). reason completes the sentence
// `graygate: upstream "<pool>" (<addr>) <reason>`.
func classify(err error) (status int, reason string) {
	var de *dialError
	switch {
	case errors.Is(err, errBadRequestBody):
		return fasthttp.StatusBadRequest, "refused: malformed request body"
	case errors.Is(err, errClientGone):
		return StatusClientClosedRequest, "abandoned: client closed the request"
	case errors.Is(err, errRequestTimeout):
		return fasthttp.StatusRequestTimeout, "abandoned: request body timed out"
	case errors.Is(err, errRateLimited):
		return fasthttp.StatusTooManyRequests, "refused: rate limit exceeded"
	case errors.Is(err, errBodyTooLarge):
		return fasthttp.StatusRequestEntityTooLarge, "refused: request body too large"
	case errors.Is(err, errLengthRequired):
		return fasthttp.StatusLengthRequired, "speaks HTTP/1.0: a request body over 1 MiB needs a Content-Length"
	case errors.Is(err, errGateFull):
		return fasthttp.StatusServiceUnavailable, "is at its concurrency cap"
	case errors.Is(err, upstream.ErrNoInstance):
		return fasthttp.StatusServiceUnavailable, "has no available instance"
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return fasthttp.StatusServiceUnavailable, "has no free connection"
	case errors.As(err, &de) && isTimeout(err):
		return fasthttp.StatusGatewayTimeout, "timed out connecting"
	case isTimeout(err):
		return fasthttp.StatusGatewayTimeout, "timed out"
	case errors.As(err, &de):
		return fasthttp.StatusBadGateway, "unreachable"
	}
	return fasthttp.StatusBadGateway, "failed"
}

// failureType is the short reason, for the server span's error.type, of
// a request the gateway failed itself (a 5xx of its own): "timeout",
// "unreachable", "no_instance", "no_free_connection", "concurrency_cap" or
// "upstream_failed", after classify. The client's own faults and the
// route's refusals (4xx, 499) are not failures of the gateway: "".
func failureType(status int, err error) string {
	var de *dialError
	switch {
	case status < 500:
		return ""
	case errors.Is(err, errGateFull):
		return "concurrency_cap"
	case errors.Is(err, upstream.ErrNoInstance):
		return "no_instance"
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return "no_free_connection"
	case isTimeout(err):
		return "timeout"
	case errors.As(err, &de):
		return "unreachable"
	}
	return "upstream_failed"
}

// failure is the error phase: the status from classify for a request the
// gateway could not forward, and the one-line body of its answer, naming
// the upstream pool and the request id, or, for the client's own faults,
// the limit it broke. It never names an instance address, which is for the
// log: not even as the name of a pool given as a bare address. The body
// lives in f.scratch until the next use of it. Upstream failures are logged
// as warnings; refusals by policy and client faults, which a misbehaving
// client can produce at any rate, only at debug level. A client that went
// away (499) gets no body: the codec drops the connection or the stream,
// and 499 is only ever a log code.
func (f *flow) failure(err error) (status int, body []byte) {
	p := f.p
	status, reason := classify(err)
	poolName, addr := "", ""
	if f.d.Target != nil {
		poolName = f.d.Target.Name
	}
	if f.inst != nil {
		addr = f.inst.Addr
	}
	f.status = status
	f.failType = failureType(status, err)
	f.refusedBy = refusal(err)
	if status == StatusClientClosedRequest {
		f.errMsg = append(f.errMsg[:0], "client closed the request"...)
		if p.log.Enabled(context.Background(), slog.LevelDebug) {
			p.log.Debug("client went away", "upstream", addr, "rule", f.d.Rule, "request_id", b2s(f.reqID), "error", err)
		}
		return status, nil
	}
	switch {
	case status == fasthttp.StatusBadRequest:
		body = append(f.scratch[:0], "graygate: bad request: malformed request body"...)
	case status == fasthttp.StatusRequestTimeout:
		body = append(f.scratch[:0], "graygate: request timeout"...)
	case status == fasthttp.StatusTooManyRequests:
		body = append(f.scratch[:0], "graygate: too many requests"...)
	case status == fasthttp.StatusRequestEntityTooLarge:
		body = append(f.scratch[:0], "graygate: request body larger than "...)
		body = strconv.AppendInt(body, f.pol.MaxBodyBytes, 10)
		body = append(body, " bytes"...)
	case f.d.Target == nil:
		body = append(f.scratch[:0], "graygate: no upstream for this request"...)
	case f.d.Target.Literal:
		// The pool's name is its instance's address: for the log only.
		body = fmt.Appendf(f.scratch[:0], "graygate: upstream %s", reason)
	default:
		body = fmt.Appendf(f.scratch[:0], "graygate: upstream %q %s", poolName, reason)
	}
	f.errMsg = append(f.errMsg[:0], body[len(errPrefix):]...)
	body = append(append(append(body, " (request id "...), f.reqID...), ")"...)
	f.scratch = body[:0]
	switch {
	case status == fasthttp.StatusBadRequest, status == fasthttp.StatusRequestTimeout, status == fasthttp.StatusTooManyRequests,
		status == fasthttp.StatusRequestEntityTooLarge, status == fasthttp.StatusLengthRequired, errors.Is(err, errGateFull):
		if p.log.Enabled(context.Background(), slog.LevelDebug) {
			p.log.Debug("request refused", "status", status, "pool", poolName, "rule", f.d.Rule, "request_id", b2s(f.reqID), "error", err)
		}
	default:
		p.log.Warn("upstream request failed",
			"status", status, "pool", poolName, "upstream", addr, "rule", f.d.Rule, "request_id", b2s(f.reqID), "timeout", f.timeout, "error", err)
	}
	return status, body
}

// errorFields adds what every error answer of the gateway carries besides
// its body: the decision headers, and Retry-After on a 429.
func (f *flow) errorFields(h fields, status int) {
	f.decisionHeaders(h)
	if status == fasthttp.StatusTooManyRequests {
		f.scratch = appendRetryAfter(f.scratch[:0], f.retryAfter)
		h.AddBytesKV(s2b(fasthttp.HeaderRetryAfter), f.scratch)
		f.scratch = f.scratch[:0]
	}
}

// fail answers, on HTTP/1.1, a request the gateway could not forward
// (failure): text/plain with the decision headers; a client that went
// away has its connection closed, and a 400, 408 or 413 closes it after
// the answer, since what is left of the request cannot be trusted or is
// not worth reading.
func (p *Proxy) fail(ctx *fasthttp.RequestCtx, ex *exchange, err error) {
	status, body := ex.failure(err)
	if status == StatusClientClosedRequest {
		ctx.Response.Reset()
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(closeHijacked)
		return
	}
	ex.setFailure(&ctx.Response, status, body)
	switch status {
	case fasthttp.StatusBadRequest, fasthttp.StatusRequestTimeout, fasthttp.StatusRequestEntityTooLarge, fasthttp.StatusLengthRequired:
		ctx.SetConnectionClose()
	}
}

// setFailure makes resp the gateway's answer with status and body (as
// failure returns them): text/plain, the body and a newline, and what
// errorFields adds. The body is copied into resp before errorFields reuses
// ex.scratch, which body shares.
func (ex *exchange) setFailure(resp *fasthttp.Response, status int, body []byte) {
	resp.Reset()
	resp.SetStatusCode(status)
	resp.Header.SetContentType("text/plain; charset=utf-8")
	resp.SetBody(body)
	resp.AppendBody(newline)
	ex.bytesOut = int64(len(body) + 1)
	h := &resp.Header
	if !h.DisableNormalizing() {
		defer h.EnableNormalizing()
	}
	ex.errorFields(h, status)
}

var newline = []byte("\n")

// closeHijacked is the hijack handler of a request whose client went away:
// nothing is written, and fasthttp closes the connection once it returns.
func closeHijacked(net.Conn) {}

// appendRetryAfter appends the Retry-After value for a wait of d: whole
// seconds, rounded up, at least 1 (RFC 9110 section 10.2.3).
func appendRetryAfter(dst []byte, d time.Duration) []byte {
	secs := int64((d + time.Second - 1) / time.Second)
	return strconv.AppendInt(dst, max(secs, 1), 10)
}

// reject answers a request refused before routing (malformed or
// unsupported) and closes the connection, since what follows on it cannot
// be trusted to be framed the way we think.
func (p *Proxy) reject(ctx *fasthttp.RequestCtx, ex *exchange, status int, why string) {
	body := ex.rejection(status, why)
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBody(body)
	ctx.SetConnectionClose()
	ctx.Response.Header.SetBytesV(hdrRequestID, ex.reqID)
}

// errPrefix begins every error body the gateway writes.
const errPrefix = "graygate: "

// rejection is the answer to a request refused before routing: its body
// (in f.scratch), with the request id.
func (f *flow) rejection(status int, why string) []byte {
	f.errMsg = append(f.errMsg[:0], why...)
	body := append(append(append(f.scratch[:0], errPrefix...), why...), " (request id "...)
	body = append(append(body, f.reqID...), ")\n"...)
	f.scratch = body[:0]
	f.status = status
	f.bytesOut = int64(len(body))
	return body
}
