// Package rawio reads and writes a connected, non-blocking TCP socket
// through the runtime's network poller, making the read and write system
// calls without the scheduler's system-call bookkeeping.
//
// net.TCPConn's Read and Write go through syscall.Read and syscall.Write,
// which bracket the call with the runtime's entersyscall and exitsyscall,
// so that a thread blocked in the kernel can give its processor to another
// goroutine. A read or write on a socket in non-blocking mode (every socket
// the net package makes is one) never blocks: it returns EAGAIN instead,
// and the wait happens in the poller. The bracket buys nothing there, and
// it costs: BenchmarkReadWrite (one small write and the read that takes
// it, on one CPU) takes about 8.0 µs through net.TCPConn and 6.5 µs
// through Conn on the project's benchmark machine. The data plane makes
// about five such calls per request. gVisor's netstack makes its
// non-blocking socket calls the same way, for the same reason.
//
// The calls are recv(2) and send(2) (recvfrom and sendto with no address),
// not read(2) and write(2): on a connected TCP socket they move the same
// bytes, but the kernel goes straight to the socket rather than through
// the file layer, as nginx's reads do. In the pinned benchmark that was
// about 2% of the gateway's CPU per request. Writes pass MSG_NOSIGNAL, so
// a write to a peer that reset the connection fails with EPIPE without
// raising SIGPIPE.
//
// A Conn keeps net.Conn's behaviour: it reads and writes through
// syscall.RawConn, whose Read and Write hold the descriptor's read or write
// lock, honour the deadlines set on the connection, and wait in the poller
// on EAGAIN; errors are *net.OpError values as net.Conn returns them, and a
// read of zero bytes at the end of the stream is io.EOF.
package rawio

import (
	"io"
	"net"
	"os"
	"syscall"
)

// Conn reads and writes one TCP connection. One goroutine may read while
// another writes, as net.Conn allows; reads must not run concurrently with
// each other, nor writes with each other.
type Conn struct {
	tc *net.TCPConn
	rc syscall.RawConn

	// The read and write in flight, for the RawConn callbacks, which are
	// method values made once so that a call allocates nothing.
	rbuf, wbuf      []byte
	rn, wn          int
	rerr, werr      error
	readFn, writeFn func(uintptr) bool

	// onWriteWait (nil: none) runs when a Write first finds the send
	// buffer full, before it waits in the poller; waited records that it
	// ran in the last Write (see OnWriteWait).
	onWriteWait func() error
	waited      bool
}

// OnWriteWait sets f to run when a Write first finds the socket's send
// buffer full, before it waits in the poller: at most once per Write, on
// the writing goroutine, while the Write holds the descriptor's write lock
// (so f may set the connection's deadlines, but not write). A Write that
// never has to wait never calls it: a caller can arm a write deadline
// there only when one can matter, instead of reading the clock before
// every Write. An error from f ends the Write with it. WriteWaited
// reports whether the last Write called f.
func (c *Conn) OnWriteWait(f func() error) { c.onWriteWait = f }

// WriteWaited reports whether the last Write found the send buffer full
// and called the OnWriteWait function.
func (c *Conn) WriteWaited() bool { return c.waited }

// New returns a Conn over tc, or nil where raw socket calls are not
// available (then tc's own Read and Write are the ones to use).
func New(tc *net.TCPConn) *Conn {
	if !supported {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	c := &Conn{tc: tc, rc: rc}
	c.readFn, c.writeFn = c.readOnce, c.writeSome
	return c
}

// Read reads into p, waiting in the poller until the socket is readable,
// under the connection's read deadline.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rbuf, c.rn, c.rerr = p, 0, nil
	err := c.rc.Read(c.readFn)
	n, rerr := c.rn, c.rerr
	c.rbuf, c.rerr = nil, nil
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case rerr != nil:
		return 0, c.opError("read", rerr)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readOnce is the RawConn read callback: one read, false (wait) on EAGAIN.
func (c *Conn) readOnce(fd uintptr) bool {
	for {
		n, err := read(fd, c.rbuf)
		switch err {
		case 0:
			c.rn = n
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.rerr = os.NewSyscallError("read", err)
		return true
	}
}

// Write writes all of p, waiting in the poller while the socket's send
// buffer is full, under the connection's write deadline.
func (c *Conn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.wbuf, c.wn, c.werr, c.waited = p, 0, nil, false
	err := c.rc.Write(c.writeFn)
	n, werr := c.wn, c.werr
	c.wbuf, c.werr = nil, nil
	switch {
	case werr != nil:
		return n, c.opError("write", werr)
	case err != nil:
		return n, c.opError("write", err)
	}
	return n, nil
}

// writeSome is the RawConn write callback: it writes until all is out,
// false (wait) on EAGAIN.
func (c *Conn) writeSome(fd uintptr) bool {
	for c.wn < len(c.wbuf) {
		n, err := write(fd, c.wbuf[c.wn:])
		switch err {
		case 0:
			c.wn += n
		case syscall.EINTR:
		case syscall.EAGAIN:
			if c.onWriteWait != nil && !c.waited {
				c.waited = true
				if err := c.onWriteWait(); err != nil {
					c.werr = err
					return true
				}
			}
			return false
		default:
			c.werr = os.NewSyscallError("write", err)
			return true
		}
	}
	return true
}

// opError wraps err as net.Conn's Read and Write do. An error from the
// RawConn itself (a deadline, a closed connection) is already a
// *net.OpError; it is given op and the connection's addresses.
func (c *Conn) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.tc.LocalAddr(), Addr: c.tc.RemoteAddr(), Err: err}
}
