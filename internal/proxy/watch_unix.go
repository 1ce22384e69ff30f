//go:build linux || darwin || freebsd

package proxy

import (
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// watch starts a goroutine that waits for the client connection to become
// readable and peeks at it: a reset means the client has gone, and the
// upstream wait is cancelled (499). A zero-byte read (FIN) does not: it is
// also what a client that half-closes after its last request sends, and
// such a client is owed its answer (RFC 9112 section 9.6 leaves the read
// side open); a client that closed both ways is then found when the answer
// is written. Pending bytes (a pipelined request) end the watch without a
// verdict too, since they cannot be told apart from a hang-up without
// consuming them. fasthttp reads nothing from the connection while the
// handler runs, so peeking does not disturb it. The wait is bounded by the
// read deadline set through ctx, which fasthttp resets after the handler.
// It reports whether a watcher started.
func (ex *exchange) watch(ctx *fasthttp.RequestCtx, up net.Conn) bool {
	sc, ok := ctx.Conn().(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	// The header read deadline is still armed; clear it so the watcher
	// waits as long as the upstream may take.
	if err := ctx.SetReadDeadline(time.Time{}); err != nil {
		return false
	}
	ex.mu.Lock()
	ex.upConn = up
	ex.mu.Unlock()
	ex.gone = false
	go ex.watchClient(rc)
	return true
}

func (ex *exchange) watchClient(rc syscall.RawConn) {
	// A connection closed under the watcher (Shutdown past its deadline)
	// is as gone as one the client closed; unwatch ends the wait with a
	// deadline error instead.
	if err := rc.Read(ex.peekFn); errors.Is(err, net.ErrClosed) {
		ex.gone = true
	}
	if ex.gone {
		ex.cancel()
	}
	ex.watchDone <- struct{}{}
}

// unwatch stops the watcher by expiring the client read deadline and waits
// for it, so that ex.canceled is settled when it returns.
func (ex *exchange) unwatch(ctx *fasthttp.RequestCtx) {
	_ = ctx.SetReadDeadline(aLongTimeAgo)
	<-ex.watchDone
	ex.mu.Lock()
	ex.upConn = nil
	ex.mu.Unlock()
}

// peek is the syscall.RawConn read callback: false means "not ready, wait".
func (ex *exchange) peek(fd uintptr) bool {
	_, _, err := syscall.Recvfrom(int(fd), ex.peekBuf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch {
	case err == syscall.EAGAIN || err == syscall.EINTR:
		return false
	case err != nil:
		ex.gone = true // reset
	}
	return true // bytes, or a half-close: no verdict
}
