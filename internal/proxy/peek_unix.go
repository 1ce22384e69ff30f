//go:build linux || darwin || freebsd

package proxy

import (
	"os"
	"syscall"
)

// peekIdle looks, without waiting, for anything that arrived on a pooled
// connection while it was idle: a close (errIdleClosed) or stray bytes
// (errStrayBytes). Either way the connection must not carry the request.
//
// It runs in RawConn.Control, not Read: Control neither checks the read
// deadline (a pooled connection may still carry an expired one from its
// last exchange) nor touches the poller's readiness. The callback is a
// method value kept on the connection (peekFn), and its result a field,
// so that a peek allocates nothing.
func (u *upstreamTCP) peekIdle() error {
	if u.peekFn == nil {
		u.peekFn = u.peekOnce
	}
	u.peekErr = nil
	if err := u.raw.Control(u.peekFn); err != nil {
		return err
	}
	return u.peekErr
}

// peekOnce is peekIdle's RawConn.Control callback, a method value made
// once per connection so that the check allocates nothing.
func (u *upstreamTCP) peekOnce(fd uintptr) {
	for {
		n, _, err := syscall.Recvfrom(int(fd), u.peekBuf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
		case err != nil:
			u.peekErr = os.NewSyscallError("recvfrom", err)
		case n == 0:
			u.peekErr = errIdleClosed
		default:
			u.peekErr = errStrayBytes
		}
		return
	}
}
