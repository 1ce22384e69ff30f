package proxy

import (
	"errors"
	"fmt"

	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/internal/upstream"
)

// StatusClientClosedRequest is nginx's 499: the client went away before the
// response. It is never written to the client (it is gone) but it is what the
// access log and OnDone record.
const StatusClientClosedRequest = 499

// classify is the one mapping from a forwarding failure to a status, after
// net/http's ReverseProxy: client gone → 499, no instance or no free
// connection → 503, timeout (dial, pool wait or response header) → 504, any
// other transport failure → 502. A client too slow to send its body is the
// client's fault: 408. reason completes the sentence
// `graygate: upstream "<pool>" (<addr>) <reason>`.
func classify(err error) (status int, reason string) {
	var de *dialError
	switch {
	case errors.Is(err, errClientGone):
		return StatusClientClosedRequest, "abandoned: client closed the request"
	case errors.Is(err, errRequestTimeout):
		return fasthttp.StatusRequestTimeout, "abandoned: request body timed out"
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

// fail answers a request the gateway could not forward: the status from
// classify, a one-line body naming the upstream, and the decision headers.
func (p *Proxy) fail(ctx *fasthttp.RequestCtx, ex *exchange, err error) {
	status, reason := classify(err)
	poolName, addr := "", ""
	if ex.d.Target != nil {
		poolName = ex.d.Target.Name
	}
	if ex.inst != nil {
		addr = ex.inst.Addr
	}
	var body []byte
	switch {
	case status == fasthttp.StatusRequestTimeout:
		body = fmt.Appendf(ex.scratch[:0], "graygate: request timeout\n")
	case ex.d.Target == nil:
		body = fmt.Appendf(ex.scratch[:0], "graygate: no upstream for this request\n")
	case addr == "":
		body = fmt.Appendf(ex.scratch[:0], "graygate: upstream %q %s\n", poolName, reason)
	default:
		body = fmt.Appendf(ex.scratch[:0], "graygate: upstream %q (%s) %s\n", poolName, addr, reason)
	}
	ex.scratch = body[:0]

	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ex.setDecisionHeaders(&ctx.Response.Header)
	ex.status = status
	if status == StatusClientClosedRequest || status == fasthttp.StatusRequestTimeout {
		// What is left of the request on the connection cannot be trusted.
		ctx.SetConnectionClose()
	}
	if status == StatusClientClosedRequest {
		p.log.Debug("client went away", "upstream", addr, "rule", ex.d.Rule, "error", err)
		return
	}
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBody(body)
	ex.bytesOut = int64(len(body))
	p.log.Warn("upstream request failed",
		"status", status, "pool", poolName, "upstream", addr, "rule", ex.d.Rule, "error", err)
}

// reject answers a request refused before routing (malformed or
// unsupported) and closes the connection, since what follows on it cannot
// be trusted to be framed the way we think.
func (p *Proxy) reject(ctx *fasthttp.RequestCtx, ex *exchange, status int, why string) {
	body := append(append(append(ex.scratch[:0], "graygate: "...), why...), '\n')
	ex.scratch = body[:0]
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBody(body)
	ctx.SetConnectionClose()
	ex.status = status
	ex.bytesOut = int64(len(body))
}
