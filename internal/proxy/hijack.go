package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/internal/listener"
)

// respondHijacked writes the rest of the response on the hijacked client
// connection instead of through fasthttp's response writer, in the two
// cases that writer cannot do:
//
//   - interim (1xx) responses, which must reach the client before the final
//     one (RFC 9110 section 15.2) and as soon as they arrive, while fasthttp
//     only writes a response once the handler has returned: those an
//     HTTP/1.1 upstream sends (finishHeader) and those an h2 or h2c
//     upstream's transport reports (forwardNet), on a client connection
//     that is not a listener's (see inPlace; on a listener's, the handler
//     writes them itself and the connection is kept). A hijack handler
//     runs after fasthttp has flushed the answers to earlier pipelined
//     requests, so the order on the connection stays right;
//   - a body of unknown length to an HTTP/1.0 client, which cannot read the
//     chunked coding fasthttp would use: the body is delimited by closing
//     the connection (RFC 9112 section 6.3).
//
// fasthttp closes the connection when the hijack handler returns, so a
// response that had interim responses ends its connection (the client
// reconnects for the next request). The exchange now belongs to the hijack
// handler, which finishes it. fasthttp keeps ctx valid until then.
func (p *Proxy) respondHijacked(ctx *fasthttp.RequestCtx, ex *exchange) {
	ex.streaming, ex.hijacked = true, true
	ex.respOut = &ctx.Response.Header
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		// Shutdown waits for the response, and closes it at its deadline.
		h := &hijackedResponse{c: c}
		if !ex.p.hijacks.add(h) {
			h.close()
		}
		ex.hj = h
		err := ex.writeHijacked(ctx, c)
		ex.p.hijacks.remove(h)
		if err != nil && ex.upErr == nil && ex.writeErr == nil {
			ex.upErr = err
		}
		ex.streaming = false
		ex.releaseUpstream(ex.upEOF || (!ex.resp.IsBodyStream() && err == nil))
		ex.endNet()
		ex.finish()
	})
}

// writeHijacked writes what is left of the response to c: the interim
// responses received so far and those that follow, then the final
// response with its body.
func (ex *exchange) writeHijacked(ctx *fasthttp.RequestCtx, c net.Conn) error {
	out := &ctx.Response.Header
	if len(ex.interim) > 0 {
		if _, err := c.Write(ex.interim); err != nil {
			ex.writeErr = err
			return err
		}
		ex.interim = ex.interim[:0]
		ex.hijackedConn = c
		var err error
		if ex.net != nil {
			err = ex.awaitNetAnswer(ctx)
		} else {
			err = ex.readFinalHeader(ctx)
			if ex.brkPending {
				// The breaker's latency runs to the final header (or
				// the failure to read it), as on an h2 pool.
				ex.brkLatency = max(ex.p.now().Sub(ex.brkFrom)-ex.bodyWait, 0)
			}
		}
		if err != nil {
			if ex.writeErr != nil {
				// Forwarding an interim response failed: the client went
				// away (499), which is not the upstream's failure, and
				// there is no one to answer.
				ex.failure(fmt.Errorf("%w: %w", errClientGone, err))
				return err
			}
			if isTimeout(err) && ex.timeout == "" {
				ex.timeout = timeoutResponseHeader
			}
			// No final status has gone out: the client can still be told,
			// with the answer any failure gets (fail), and the connection
			// then closes.
			ex.writeFailure(c, fmt.Errorf("after an interim response: %w", err))
			return err
		}
	}
	ex.completeHeader(out)
	// fasthttp has added "Connection: keep-alive" for an HTTP/1.0 client
	// that asked to keep the connection; it ends with this response.
	out.Del(fasthttp.HeaderConnection)
	out.SetConnectionClose()
	// The body: held whole (whole), in the upstream's reader (ex.inline)
	// or in the response (an h2 or h2c upstream's, readNetInline), or
	// streamed (body), or none.
	var held []byte
	var body io.Reader
	whole := false
	switch {
	case ex.inline >= 0:
		held, _ = ex.br.Peek(ex.inline)
		ex.teeBody(held)
		ex.respEnded, whole = true, true
	case ex.resp.IsBodyStream():
		body = &ex.respBody
	case ex.net != nil && ex.upBody != nil:
		body = ex.upBody // netRespBody
	case ex.net != nil && !ctx.Response.SkipBody:
		held, whole = ctx.Response.Body(), true
	}
	chunked := false
	switch {
	case whole:
		out.SetContentLength(len(held))
	case body == nil:
		// No body; the header keeps what the upstream announced.
	case out.ContentLength() >= 0:
	case !ctx.Request.Header.IsHTTP11():
		out.SetContentLength(-2) // delimited by the close
	default:
		out.SetContentLength(-1)
		chunked = true
	}
	if err := ex.cutByShutdown(); err != nil {
		return err
	}
	head := out.AppendBytes(ex.scratch[:0])
	_, err := c.Write(head)
	ex.scratch = head[:0]
	if err != nil {
		ex.writeErr = err
		return err
	}
	switch {
	case whole:
		n, err := c.Write(held)
		ex.bytesOut = int64(n)
		if ex.inline >= 0 {
			_, _ = ex.br.Discard(ex.inline)
		}
		if err != nil {
			ex.writeErr = err
		}
		return err
	case body == nil || b2s(ex.method) == fasthttp.MethodHead:
		ex.respEnded = true
		return nil
	}
	bw := bufio.NewWriterSize(c, 32<<10)
	buf := ex.copyBuf()
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			werr := ex.cutByShutdown()
			if werr == nil && chunked {
				_, werr = bw.WriteString(strconv.FormatInt(int64(n), 16) + "\r\n")
			}
			if werr == nil {
				_, werr = bw.Write(buf[:n])
			}
			if werr == nil && chunked {
				_, werr = bw.WriteString("\r\n")
			}
			if werr == nil {
				werr = bw.Flush()
			}
			if werr != nil {
				ex.writeErr = werr
				return werr
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	if chunked {
		_, _ = bw.WriteString("0\r\n")
		_, _ = bw.Write(out.TrailerHeader())
	}
	if err := bw.Flush(); err != nil && !errors.Is(err, io.EOF) {
		ex.writeErr = err
		return err
	}
	return nil
}

// cutByShutdown returns errCutByShutdown, noted as the failure to write to
// the client, once Shutdown has cut the hijacked response at its
// deadline.
func (ex *exchange) cutByShutdown() error {
	if ex.hj == nil || !ex.hj.cut.Load() {
		return nil
	}
	ex.writeErr = errCutByShutdown
	return errCutByShutdown
}

// readFinalHeader reads, after the interim responses writeHijacked has
// forwarded, the final response header of an HTTP/1.1 upstream into the
// client's response (forwarding the interim responses that come first),
// under the route's header timeout counted from now, and prepares its
// body.
func (ex *exchange) readFinalHeader(ctx *fasthttp.RequestCtx) error {
	if err := ex.up.Conn().SetReadDeadline(time.Now().Add(ex.headerTimeout)); err != nil {
		return err
	}
	err := ex.readHeadFrom(&ctx.Response.Header, ex.br)
	if err == nil {
		err = ex.finishHeader(ctx, ex.up.Conn(), ex.br)
	}
	if err != nil || !ex.resp.IsBodyStream() {
		return err
	}
	if err := ex.up.Conn().SetReadDeadline(time.Time{}); err != nil {
		return err
	}
	ex.upBody = ex.resp.BodyStream()
	return nil
}

// writeInterim writes the interim responses read so far to the hijacked
// client connection.
func (ex *exchange) writeInterim() error {
	if ex.hijackedConn == nil {
		return nil
	}
	return ex.forwardInterim(ex.hijackedConn)
}

// forwardInterim writes the interim responses read so far to the client
// connection c. A failure to write is the client's (writeErr).
func (ex *exchange) forwardInterim(c net.Conn) error {
	if len(ex.interim) == 0 {
		return nil
	}
	_, err := c.Write(ex.interim)
	ex.interim = ex.interim[:0]
	if err != nil {
		ex.writeErr = err
	}
	return err
}

// inPlace returns the client connection when interim responses may be
// written to it from the handler, ahead of the answer fasthttp writes
// once the handler returns: a listener Conn hands fasthttp one request
// at a time, so every earlier answer has been written to it before this
// request's handler began (see listener.Conn). On any other connection
// it returns nil, and respondHijacked writes the response instead. Unlike
// clientConn it does not look under a *tls.Conn: the bytes must go through
// the TLS connection that fasthttp writes to.
func inPlace(ctx *fasthttp.RequestCtx) *listener.Conn {
	lc, _ := ctx.Conn().(*listener.Conn)
	return lc
}

// writeFailure writes to the hijacked connection c the gateway's answer to
// a request that failed (failure, with errorFields, as fail gives it),
// marked to close the connection.
func (ex *exchange) writeFailure(c net.Conn, err error) {
	status, body := ex.failure(err)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	ex.setFailure(resp, status, body)
	resp.SetConnectionClose()
	b := append(resp.Header.AppendBytes(ex.scratch[:0]), resp.Body()...)
	_, _ = c.Write(b)
	ex.scratch = b[:0]
}
