package proxy

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// maxDeferredWrite is the largest response write a clientConn holds back.
const maxDeferredWrite = 16 << 10

// clientListener wraps the data plane's listener so that its plain TCP
// connections are clientConns.
type clientListener struct{ net.Listener }

func (l clientListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c, nil
	}
	cc := &clientConn{TCPConn: tc, raw: raw}
	cc.readFn = cc.sendThenRead
	return cc, nil
}

// clientConn is a client connection that saves a system call per
// keep-alive request. After a response, fasthttp's server reads the next
// request; a plain read finds nothing yet (the client is still reading
// the response), fails with EAGAIN, and only then waits. Here, once the
// handler has marked a complete response (holdResponse), the write that
// carries it is held back and made by the next Read, from inside a
// RawConn read callback: the wait for the next request is armed before
// the response leaves (RawConn.Read resets the poller's readiness before
// calling back), so a request that comes at once is not missed, and the
// read that follows finds it.
//
// Only the one write that follows the mark is held back, and only if it is
// small. Streamed responses and hijacked connections (tunnels, which read
// and write at once) are never marked, and every handler and every Read
// starts by clearing the mark, so a held-back write is always followed by
// fasthttp's next read of the connection, or by its Close, which sends it.
type clientConn struct {
	*net.TCPConn
	raw syscall.RawConn

	deferOK   atomic.Bool // the next small write may be held back
	mu        sync.Mutex
	pending   []byte // a held-back write
	spare     []byte
	sending   []byte // the held-back write sendThenRead sends
	sent      bool
	sendErr   error
	readInto  []byte
	readN     int
	readErr   error
	readFn    func(uintptr) bool
	writeFail error // a held-back write that failed, reported by the next call
}

// holdResponse tells a clientConn whether the next write, the response a
// handler has just completed, may be held back (see clientConn). The
// handler says false when it starts, so that a mark left by a pipelined
// request's handler, whose response fasthttp buffered without writing,
// cannot hold back a streamed response or a tunnel's first write.
func holdResponse(c net.Conn, ok bool) {
	if cc, isCC := c.(*clientConn); isCC {
		cc.deferOK.Store(ok)
	}
}

func (c *clientConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.writeFail != nil {
		err := c.writeFail
		c.mu.Unlock()
		return 0, err
	}
	if c.deferOK.Swap(false) && len(c.pending) == 0 && len(p) <= maxDeferredWrite {
		c.pending = append(c.pending[:0], p...)
		c.mu.Unlock()
		return len(p), nil
	}
	if len(c.pending) > 0 {
		// A response held back and another write before any read (the
		// next of pipelined requests answered from fasthttp's buffer):
		// the held-back one goes first.
		err := c.flushLocked()
		if err != nil {
			c.mu.Unlock()
			return 0, err
		}
	}
	c.mu.Unlock()
	return c.TCPConn.Write(p)
}

// flushLocked sends the held-back write.
func (c *clientConn) flushLocked() error {
	_, err := c.TCPConn.Write(c.pending)
	c.pending = c.pending[:0]
	return err
}

func (c *clientConn) Read(p []byte) (int, error) {
	c.deferOK.Store(false)
	c.mu.Lock()
	if c.writeFail != nil {
		err := c.writeFail
		c.mu.Unlock()
		return 0, err
	}
	if len(c.pending) == 0 || len(p) == 0 {
		c.mu.Unlock()
		return c.TCPConn.Read(p)
	}
	c.sending, c.pending = c.pending, c.spare[:0]
	c.mu.Unlock()

	c.sent, c.sendErr, c.readInto, c.readN, c.readErr = false, nil, p, 0, nil
	err := c.raw.Read(c.readFn)
	if !c.sent && err != nil {
		// The wait ended before the callback ran (a deadline already past,
		// or the connection closed): send what was held back anyway.
		_, c.sendErr = c.TCPConn.Write(c.sending)
	}
	n, rerr, serr := c.readN, c.readErr, c.sendErr
	c.readInto = nil

	c.mu.Lock()
	c.spare, c.sending = c.sending[:0], nil
	if serr != nil {
		c.writeFail = serr
	}
	c.mu.Unlock()
	switch {
	case serr != nil:
		return 0, serr
	case err != nil:
		return 0, err
	}
	return n, rerr
}

// sendThenRead is Read's RawConn read callback: its first call sends the
// held-back write and asks to wait; the calls after a wait read.
func (c *clientConn) sendThenRead(fd uintptr) bool {
	if !c.sent {
		c.sent = true
		_, c.sendErr = c.TCPConn.Write(c.sending)
		return c.sendErr != nil
	}
	for {
		n, err := syscall.Read(int(fd), c.readInto)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return false
		case err != nil:
			c.readErr = os.NewSyscallError("read", err)
		case n == 0:
			c.readErr = io.EOF
		default:
			c.readN = n
		}
		return true
	}
}

// Close sends a held-back write, then closes the connection.
func (c *clientConn) Close() error {
	c.mu.Lock()
	if len(c.pending) > 0 && c.writeFail == nil {
		_ = c.flushLocked()
	}
	c.mu.Unlock()
	return c.TCPConn.Close()
}
