//go:build linux || darwin || freebsd

package proxy

import (
	"bytes"
	"io"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// watchUpstream starts, while a streamed request body is sent on a plain
// TCP connection, a goroutine that waits for the upstream to become
// readable and peeks at it. The upstream closing (FIN) or resetting the
// connection, or sending a final answer, while the body is still on its
// way ends the client's pending body read at once: its read deadline is
// moved to the past, and writeBody then reports what the upstream did
// (upstreamSpoke). So a paused upload (a client that sent a first part and
// waits for an answer before it sends more) is answered, with the early
// answer or a 502, without waiting for the client to send more or for
// client_read_timeout. An interim (1xx) answer ends the watch without a
// verdict: the body goes on. It reports whether a watcher started;
// unwatchUpstream stops it.
func (ex *exchange) watchUpstream(ctx *fasthttp.RequestCtx, up *upstreamTCP) bool {
	if up == nil || up.raw == nil {
		return false
	}
	// Whatever read deadline an earlier request left armed would end the
	// watch; the body may take as long as the client takes.
	if err := up.SetReadDeadline(time.Time{}); err != nil {
		return false
	}
	ex.upSaw = nil
	ex.upSpoke.Store(false)
	go ex.watchUp(ctx, up.raw)
	return true
}

// upPartialTries bounds the looks at an answer whose status line came in
// part, a millisecond apart.
const upPartialTries = 20

func (ex *exchange) watchUp(ctx *fasthttp.RequestCtx, raw syscall.RawConn) {
	defer func() { ex.upWatchDone <- struct{}{} }()
	for tries := 0; ; tries++ {
		if err := raw.Read(ex.upPeekFn); err != nil {
			return // stopped by unwatchUpstream, or the connection closed
		}
		b := ex.upPeekBuf[:ex.upPeekN]
		var saw error
		switch {
		case ex.upPeekErr != nil:
			saw = ex.upPeekErr // a reset
		case len(b) == 0:
			saw = io.EOF
		case len(b) <= len("HTTP/1.1 ") && bytes.HasPrefix(httpSlash, b[:min(len(b), len(httpSlash))]) && tries < upPartialTries:
			// The status line came in part: look again shortly.
			time.Sleep(time.Millisecond)
			continue
		case statusClass(b) == '1':
			return // an interim answer: no verdict
		}
		ex.upSaw = saw
		ex.upSpoke.Store(true)
		if lc := clientConn(ctx); lc != nil {
			_ = lc.Interrupt()
		} else {
			_ = ctx.SetReadDeadline(aLongTimeAgo)
		}
		return
	}
}

// upPeek is watchUp's syscall.RawConn read callback: false means "not
// ready, wait".
func (ex *exchange) upPeek(fd uintptr) bool {
	n, _, err := syscall.Recvfrom(int(fd), ex.upPeekBuf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	if err == syscall.EAGAIN || err == syscall.EINTR {
		return false
	}
	ex.upPeekN, ex.upPeekErr = max(n, 0), err
	return true
}

// unwatchUpstream stops the watcher by expiring the upstream's read
// deadline, and waits for it. Whoever reads from up next sets its own
// deadline (up's recorded one is now in the past, which none keeps). A
// verdict that came as the body ended (sent is true) leaves the client
// connection as it was: the answer is read as any other.
func (ex *exchange) unwatchUpstream(ctx *fasthttp.RequestCtx, up *upstreamTCP, sent bool) {
	_ = up.SetReadDeadline(aLongTimeAgo)
	<-ex.upWatchDone
	if sent && ex.upSpoke.Load() {
		if lc := clientConn(ctx); lc != nil {
			lc.Resume()
		}
	}
}
