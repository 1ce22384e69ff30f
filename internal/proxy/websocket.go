package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/internal/listener"
)

// maxUpgradeRefusalBody bounds the body of a non-101 answer to an upgrade,
// which is read into memory to be relayed.
const maxUpgradeRefusalBody = 1 << 20

// isWebSocketUpgrade reports a WebSocket handshake (RFC 6455 section 4.1):
// "Connection: upgrade" and "Upgrade: websocket". Other upgrades (h2c) are
// proxied as plain requests, their Upgrade header stripped as hop-by-hop.
func isWebSocketUpgrade(h *fasthttp.RequestHeader) bool {
	if !h.ConnectionUpgrade() {
		return false
	}
	for _, v := range h.PeekAll(fasthttp.HeaderUpgrade) {
		for _, tok := range appendListTokens(nil, [][]byte{v}) {
			if eqFold(tok, "websocket") {
				return true
			}
		}
	}
	return false
}

// upgradesToWebSocket reports whether a 101's Upgrade names WebSocket, or
// is absent (the handshake's answer is then taken as WebSocket's, the only
// protocol asked for).
func upgradesToWebSocket(h *fasthttp.ResponseHeader) bool {
	vals := h.PeekAll(fasthttp.HeaderUpgrade)
	if len(vals) == 0 {
		return true
	}
	for _, tok := range appendListTokens(nil, vals) {
		if !eqFold(tok, "websocket") {
			return false
		}
	}
	return true
}

// errWrongUpgrade is a 101 to a protocol the client did not ask for.
var errWrongUpgrade = errors.New("upstream switched to a protocol the client did not ask for")

// serveUpgrade proxies a WebSocket handshake on a dedicated connection:
// write the request (the gateway's headers plus the Upgrade and Connection
// that hop-by-hop removal took out, as net/http does; see buildRequest),
// read the answer, and on 101 hijack the client connection and copy bytes
// both ways until either side closes (a client's half-close is passed on,
// and the upstream's answer relayed until it closes too). Any other answer
// is relayed as a normal response, and the client connection is closed
// after it: the listener reads nothing that follows a handshake that was
// not accepted. It returns true when a tunnel now owns the exchange, and an
// error, with nothing written to the client, when no answer could be read;
// the caller then answers or falls back to stable like for any request. The
// handshake's outcome (until the answer's header) is what the breaker
// records.
func (p *Proxy) serveUpgrade(ctx *fasthttp.RequestCtx, ex *exchange) (bool, error) {
	var start time.Time
	if ex.d.Breaker != nil {
		start = p.now()
	}
	up, err := p.dial(ex.inst.Addr, ex.uc.tls)
	if err != nil {
		ex.recordOutcome(start, err)
		return false, err
	}
	_ = up.SetDeadline(time.Now().Add(ex.headerTimeout))
	ex.sent = true
	_, err = up.Write(ex.head)
	br := bufio.NewReaderSize(up, ex.opts.MaxResponseHeaderBytes)
	out := &ctx.Response
	if err == nil {
		if _, err = br.Peek(1); err == nil {
			ex.respStarted = true
			err = ex.readHeadFrom(&out.Header, br)
		}
	}
	status := out.Header.StatusCode()
	ex.status = status
	if err == nil {
		err = checkFinal(&out.Header)
	}
	if err == nil && status == fasthttp.StatusSwitchingProtocols && !upgradesToWebSocket(&out.Header) {
		// RFC 9110 section 7.8: a server switches only to a protocol the
		// client named; the client asked for WebSocket alone.
		err = fmt.Errorf("%w: %q, asked for websocket", errWrongUpgrade, out.Header.Peek(fasthttp.HeaderUpgrade))
	}
	if err == nil && status != fasthttp.StatusSwitchingProtocols && b2s(ex.method) != fasthttp.MethodHead && hasBody(status) {
		ex.resp.Header.SetStatusCode(status)
		ex.resp.Header.SetContentLength(out.Header.ContentLength())
		err = ex.resp.ReadBody(br, maxUpgradeRefusalBody)
	}
	if err == nil {
		err = up.SetDeadline(time.Time{})
	}
	ex.recordOutcome(start, err)
	if err != nil {
		_ = up.Close()
		return false, err
	}

	if status != fasthttp.StatusSwitchingProtocols {
		_ = up.Close()
		ex.filterResponseHeader(&out.Header)
		ex.setDecisionHeaders(&out.Header)
		ex.addVia(&out.Header)
		ensureDate(&out.Header)
		out.SetBody(ex.resp.Body())
		out.Header.SetConnectionClose()
		ex.bytesOut = int64(len(ex.resp.Body()))
		return false, nil
	}

	// The 101 is written by the tunnel on the hijacked connection rather
	// than by fasthttp. Without HijackSetNoResponse fasthttp skips the hijack
	// handler in several cases (a failed response write, Connection: close,
	// shutdown), and the tunnel, which owns the exchange and the upstream
	// connection, would never clean up; with it, only a connection that
	// already failed skips it (and Shutdown still closes the tunnel). The
	// header is rendered now, while ctx is valid.
	upg := append([]byte(nil), out.Header.Peek(fasthttp.HeaderUpgrade)...)
	ex.filterResponseHeader(&out.Header)
	out.Header.Set(fasthttp.HeaderConnection, "Upgrade")
	if len(upg) > 0 {
		out.Header.SetBytesV(fasthttp.HeaderUpgrade, upg)
	} else {
		out.Header.Set(fasthttp.HeaderUpgrade, "websocket")
	}
	ex.setDecisionHeaders(&out.Header)
	ex.addVia(&out.Header)
	head := out.Header.AppendBytes(nil)
	out.Reset()
	ex.streaming = true

	if lc, ok := ctx.Conn().(*listener.Conn); ok {
		lc.OpenTunnel()
	}
	t := &tunnel{ex: ex, up: up, upR: br, head: head}
	if !p.hijacks.add(t) {
		// Shutdown has closed the tunnels already: this one, whose
		// handshake was under way, is closed as it opens.
		t.close()
	}
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(t.run)
	return true, nil
}

// tunnel is one WebSocket connection pair.
type tunnel struct {
	ex   *exchange
	up   net.Conn
	upR  *bufio.Reader // holds any bytes the upstream sent after its 101
	head []byte

	mu     sync.Mutex
	client net.Conn
	closed bool
}

// run is the hijack handler. fasthttp closes the client connection after it
// returns. A tunnel closed by Shutdown before run starts copies nothing
// (the 101 goes out, and the connection is closed after it).
func (t *tunnel) run(c net.Conn) {
	t.mu.Lock()
	t.client = c
	closed := t.closed
	t.mu.Unlock()

	var n int64
	if _, err := c.Write(t.head); err == nil && !closed {
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, err := io.Copy(t.up, c)
			// The client half-closed (EOF, not an error): pass its end on
			// and keep relaying the upstream's answer until it ends too.
			// (nginx ends the tunnel here, and drops that answer.) The
			// upstream's end still ends the tunnel: a WebSocket server
			// closes the connection to end it (RFC 6455 section 7.1.1),
			// and a client that never closed would otherwise hold it.
			if err == nil && closeWrite(t.up) == nil {
				return
			}
			t.close()
		}()
		n, _ = io.Copy(c, t.upR)
		t.close()
		<-done
	}
	t.close()
	t.ex.p.hijacks.remove(t)
	t.ex.bytesOut = n
	t.ex.streaming = false
	t.ex.finish()
}

// closeWrite shuts down the writing side of c (a TCP or TLS connection to
// an upstream), if it can.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// close ends both copies: it closes the upstream connection and expires
// the client connection's deadline. (Closing fasthttp's hijacked connection
// is a no-op; fasthttp closes it itself once run returns.)
func (t *tunnel) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	t.closed = true
	_ = t.up.Close()
	if t.client != nil {
		_ = t.client.SetDeadline(aLongTimeAgo)
	}
}
