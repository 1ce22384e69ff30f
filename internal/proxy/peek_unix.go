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
// last exchange) nor touches the poller's readiness.
func (u *upstreamTCP) peekIdle() error {
	var perr error
	err := u.raw.Control(func(fd uintptr) {
		var b [1]byte
		for {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
			case err != nil:
				perr = os.NewSyscallError("recvfrom", err)
			case n == 0:
				perr = errIdleClosed
			default:
				perr = errStrayBytes
			}
			return
		}
	})
	if err != nil {
		return err
	}
	return perr
}
