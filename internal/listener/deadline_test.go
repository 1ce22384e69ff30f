package listener

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// connPair accepts one loopback connection through Wrap and returns the
// server side (a *Conn) and the client side.
func connPair(t *testing.T, cfg *Config) (*Conn, net.Conn) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ln := Wrap(raw, func() *Config { return cfg }, nil, nil)
	client, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*Conn), client
}

// readErr reads once from c and reports how long the read took and its
// error.
func readErr(c net.Conn) (time.Duration, error) {
	start := time.Now()
	var b [64]byte
	_, err := c.Read(b[:])
	return time.Since(start), err
}

// sendThrough writes msg from the client and reads all of it through c.
func sendThrough(t *testing.T, c *Conn, client net.Conn, msg string) {
	t.Helper()
	if _, err := client.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	var b [256]byte
	for got := 0; got < len(msg); {
		n, err := c.Read(b[:])
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
}

// setRead asks c for the read deadline at.
func setRead(t *testing.T, c *Conn, at time.Time) {
	t.Helper()
	if err := c.SetReadDeadline(at); err != nil {
		t.Fatal(err)
	}
}

// armIn asks c for a read deadline after from now and arms it, as a read
// that waits under it would.
func armIn(t *testing.T, c *Conn, after time.Duration) {
	t.Helper()
	setRead(t, c, time.Now().Add(after))
	if err := c.armRead(); err != nil {
		t.Fatal(err)
	}
}

func TestLazyReadDeadline(t *testing.T) {
	const d = 150 * time.Millisecond
	tests := []struct {
		name string
		run  func(t *testing.T, c *Conn, client net.Conn)
	}{
		{"a future deadline is armed by the read that waits", func(t *testing.T, c *Conn, _ net.Conn) {
			setRead(t, c, time.Now().Add(d))
			if n := c.arms.Load(); n != 0 {
				t.Fatalf("SetReadDeadline armed %d timers before any read", n)
			}
			took, err := readErr(c)
			if !errors.Is(err, os.ErrDeadlineExceeded) || took < d*7/8 || took > 10*d {
				t.Fatalf("read ended after %v with %v; want a timeout after about %v", took, err, d)
			}
		}},
		{"renewing within an eighth keeps the armed timer", func(t *testing.T, c *Conn, client net.Conn) {
			long := time.Minute
			for i := range 50 {
				setRead(t, c, time.Now().Add(long))
				// The head deadline the codec sets after the first byte
				// is never armed when no read waits under it.
				setRead(t, c, time.Now().Add(d))
				setRead(t, c, time.Now().Add(long))
				if _, err := client.Write([]byte("x")); err != nil {
					t.Fatal(err)
				}
				var b [1]byte
				if _, err := c.Read(b[:]); err != nil {
					t.Fatalf("read %d: %v", i, err)
				}
			}
			if n := c.arms.Load(); n != 1 {
				t.Fatalf("%d timers armed for 50 renewals of a one-minute deadline; want 1", n)
			}
		}},
		{"a sooner deadline is armed, never kept late", func(t *testing.T, c *Conn, _ net.Conn) {
			armIn(t, c, time.Minute)
			setRead(t, c, time.Now().Add(d))
			took, err := readErr(c)
			if !errors.Is(err, os.ErrDeadlineExceeded) || took > 10*d {
				t.Fatalf("read ended after %v with %v; want a timeout after about %v", took, err, d)
			}
		}},
		{"a later deadline beyond the tolerance is armed", func(t *testing.T, c *Conn, client net.Conn) {
			armIn(t, c, d)
			setRead(t, c, time.Now().Add(4*d))
			go func() {
				time.Sleep(2 * d)
				_, _ = client.Write([]byte("late"))
			}()
			if took, err := readErr(c); err != nil {
				t.Fatalf("read failed after %v with %v; the deadline was moved to %v", took, err, 4*d)
			}
		}},
		{"a past deadline set from another goroutine ends a blocked read", func(t *testing.T, c *Conn, _ net.Conn) {
			setRead(t, c, time.Now().Add(time.Minute))
			go func() {
				time.Sleep(d)
				_ = c.SetReadDeadline(time.Unix(1, 0))
			}()
			took, err := readErr(c)
			if !errors.Is(err, os.ErrDeadlineExceeded) || took > 10*d {
				t.Fatalf("read ended after %v with %v; want a timeout soon after the cancel", took, err)
			}
		}},
		{"a cancel racing the read that arms wins", func(t *testing.T, c *Conn, _ net.Conn) {
			for i := range 200 {
				setRead(t, c, time.Now().Add(time.Minute))
				go func() { _ = c.SetDeadline(time.Unix(1, 0)) }()
				took, err := readErr(c)
				if !errors.Is(err, os.ErrDeadlineExceeded) || took > 5*time.Second {
					t.Fatalf("try %d: read ended after %v with %v; want the cancel's timeout", i, took, err)
				}
			}
		}},
		{"clearing the deadline applies at once to a raw reader", func(t *testing.T, c *Conn, client net.Conn) {
			armIn(t, c, d)
			setRead(t, c, time.Time{})
			rc, err := c.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				time.Sleep(3 * d)
				_, _ = client.Write([]byte("x"))
			}()
			var rerr error
			err = rc.Read(func(fd uintptr) bool {
				var b [1]byte
				_, _, e := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
				if e == syscall.EAGAIN {
					return false
				}
				rerr = e
				return true
			})
			if err != nil || rerr != nil {
				t.Fatalf("raw wait: %v, %v; the cleared deadline still cut it", err, rerr)
			}
		}},
		{"the body deadline is kept from the config", func(t *testing.T, c *Conn, client net.Conn) {
			msg := "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nab"
			sendThrough(t, c, client, msg)
			took, err := readErr(c)
			if !errors.Is(err, os.ErrDeadlineExceeded) || took < d*7/8 || took > 10*d {
				t.Fatalf("body read ended after %v with %v; want the %v body timeout", took, err, d)
			}
		}},
		{"an interrupt ends a body read, before or while it waits, until resumed", func(t *testing.T, c *Conn, client net.Conn) {
			// The body read deadline is asked for anew by every Read, so
			// a past deadline set just before a Read would be undone by
			// it; an Interrupt is not.
			msg := "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nab"
			sendThrough(t, c, client, msg)
			var b [256]byte
			c.config = func() *Config { return &Config{MaxHeaderBytes: 8 << 10, BodyReadTimeout: time.Minute} }
			if err := c.Interrupt(); err != nil {
				t.Fatal(err)
			}
			if took, err := readErr(c); !errors.Is(err, os.ErrDeadlineExceeded) || took > 10*d {
				t.Fatalf("a read after Interrupt ended after %v with %v; want a timeout at once", took, err)
			}
			c.Resume()
			setRead(t, c, time.Now().Add(time.Minute))
			go func() {
				time.Sleep(d)
				_ = c.Interrupt()
			}()
			if took, err := readErr(c); !errors.Is(err, os.ErrDeadlineExceeded) || took > 10*d {
				t.Fatalf("a waiting read ended after %v with %v; want a timeout soon after Interrupt", took, err)
			}
			c.Resume()
			setRead(t, c, time.Now().Add(time.Minute))
			if _, err := client.Write([]byte("cd")); err != nil {
				t.Fatal(err)
			}
			if n, err := c.Read(b[:]); err != nil || string(b[:n]) != "cd" {
				t.Fatalf("read after Resume: %q, %v", b[:n], err)
			}
		}},
		{"a read after Resume is not cut by the interrupt it outlived", func(t *testing.T, c *Conn, client net.Conn) {
			// The interrupting goroutine may still be recording the past
			// deadline it set when the read it ended has returned, been
			// resumed and reads again; that read must not take the
			// recorded minute for what is armed. (CI saw it time out.)
			msg := "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n"
			sendThrough(t, c, client, msg)
			c.config = func() *Config { return &Config{MaxHeaderBytes: 8 << 10, BodyReadTimeout: time.Minute} }
			var b [8]byte
			for i := range 2000 {
				setRead(t, c, time.Now().Add(time.Minute))
				done := make(chan struct{})
				go func() { _ = c.Interrupt(); close(done) }()
				if took, err := readErr(c); !errors.Is(err, os.ErrDeadlineExceeded) || took > 5*time.Second {
					t.Fatalf("try %d: read ended after %v with %v; want the interrupt's timeout", i, took, err)
				}
				c.Resume()
				if _, err := client.Write([]byte("x")); err != nil {
					t.Fatal(err)
				}
				if n, err := c.Read(b[:]); err != nil || string(b[:n]) != "x" {
					t.Fatalf("try %d: read after Resume: %q, %v", i, b[:n], err)
				}
				<-done
			}
		}},
		{"an interrupt racing the body read wins", func(t *testing.T, c *Conn, client net.Conn) {
			msg := "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n"
			sendThrough(t, c, client, msg)
			c.config = func() *Config { return &Config{MaxHeaderBytes: 8 << 10, BodyReadTimeout: time.Minute} }
			for i := range 200 {
				c.Resume()
				go func() { _ = c.Interrupt() }()
				took, err := readErr(c)
				if !errors.Is(err, os.ErrDeadlineExceeded) || took > 5*time.Second {
					t.Fatalf("try %d: read ended after %v with %v; want the interrupt's timeout", i, took, err)
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, client := connPair(t, &Config{MaxHeaderBytes: 8 << 10, BodyReadTimeout: d})
			tt.run(t, c, client)
		})
	}
}

func TestConnPeer(t *testing.T) {
	c, client := connPair(t, &Config{MaxHeaderBytes: 8 << 10})
	want := client.LocalAddr().(*net.TCPAddr).AddrPort().Addr()
	if got := c.Peer(); got != want {
		t.Fatalf("Peer() = %v, want %v", got, want)
	}
}

func TestKeeps(t *testing.T) {
	const want, tol = 1000, 100
	for _, tt := range []struct {
		armed int64
		keep  bool
	}{
		{0, false},         // nothing armed
		{want, true},       // exactly what is asked
		{want - tol, true}, // the earliest it may be
		{want - tol - 1, false},
		{want + 1, false}, // later than asked: never kept
	} {
		if got := Keeps(tt.armed, want, tol); got != tt.keep {
			t.Errorf("Keeps(%d, %d, %d) = %v, want %v", tt.armed, want, tol, got, tt.keep)
		}
	}
	if Keeps(want, 0, tol) {
		t.Error("an armed deadline was kept where none is asked")
	}
}

func TestWriteDeadlineCancel(t *testing.T) {
	past := time.Unix(1, 0)
	tests := []struct {
		name string
		run  func(t *testing.T, c *Conn)
	}{
		{"a past write deadline fails later writes, whatever the write timeout", func(t *testing.T, c *Conn) {
			if _, err := c.Write([]byte("a")); err != nil {
				t.Fatal(err)
			}
			if err := c.SetWriteDeadline(past); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if _, err := c.Write([]byte("b")); !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("write %d after the cancel: %v; want a timeout", i, err)
				}
			}
			if err := c.SetWriteDeadline(time.Time{}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write([]byte("c")); err != nil {
				t.Fatalf("write after the deadline was cleared: %v", err)
			}
		}},
		{"a cancel racing a write that re-arms wins", func(t *testing.T, c *Conn) {
			// The write timeout is so short that nearly every write
			// re-arms its deadline, and the cancel comes at any moment of
			// that; no write that starts after it may succeed.
			for i := range 2000 {
				if err := c.SetWriteDeadline(time.Time{}); err != nil {
					t.Fatal(err)
				}
				var canceled atomic.Bool
				done := make(chan struct{})
				go func() {
					_ = c.SetWriteDeadline(past)
					canceled.Store(true)
					close(done)
				}()
				for {
					after := canceled.Load()
					_, err := c.Write([]byte("x"))
					if err != nil {
						if !errors.Is(err, os.ErrDeadlineExceeded) {
							t.Fatalf("try %d: %v; want the cancel's timeout", i, err)
						}
						break
					}
					if after {
						t.Fatalf("try %d: a write that began after the cancel succeeded", i)
					}
				}
				<-done
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, client := connPair(t, &Config{MaxHeaderBytes: 8 << 10, WriteTimeout: time.Millisecond})
			go func() { _, _ = io.Copy(io.Discard, client) }()
			tt.run(t, c)
		})
	}
}

// TestWriteDeadlineArmedOnlyToWait: a write that does not have to wait
// for the client arms no write deadline (and reads no clock); one that
// waits gets WriteTimeout from when it starts waiting, and has it taken
// off once it is done, so later writes that do not wait are on the fast
// path again; a write whose client never reads fails on it.
func TestWriteDeadlineArmedOnlyToWait(t *testing.T) {
	const timeout = 300 * time.Millisecond
	cfg := &Config{MaxHeaderBytes: 8 << 10, WriteTimeout: timeout}
	big := make([]byte, 32<<20) // more than loopback's buffers hold

	t.Run("waits, then done", func(t *testing.T) {
		c, client := connPair(t, cfg)
		if c.sock == nil {
			t.Skip("raw socket calls are not supported here")
		}
		if _, err := c.Write([]byte("a")); err != nil {
			t.Fatal(err)
		}
		if d := c.wdl.Load(); d != 0 {
			t.Fatalf("a write that did not wait armed a deadline (%d)", d)
		}
		done := make(chan error, 1)
		go func() {
			_, err := c.Write(big)
			done <- err
		}()
		give := time.Now().Add(5 * time.Second)
		for c.wdl.Load() == 0 {
			if time.Now().After(give) {
				t.Fatal("a write waiting for the client armed no deadline")
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(timeout / 3) // the client reads late, but in time
		go func() { _, _ = io.Copy(io.Discard, client) }()
		if err := <-done; err != nil {
			t.Fatalf("the waiting write: %v", err)
		}
		if d := c.wdl.Load(); d != 0 {
			t.Fatalf("the deadline stayed armed (%d) after the write that waited", d)
		}
		time.Sleep(2 * timeout) // past when that deadline would have ended
		if _, err := c.Write([]byte("b")); err != nil {
			t.Fatalf("a write after the timeout, that does not wait: %v", err)
		}
	})
	t.Run("client never reads", func(t *testing.T) {
		c, _ := connPair(t, cfg)
		start := time.Now()
		_, err := c.Write(big)
		took := time.Since(start)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a write to a client that never reads: %v; want a timeout", err)
		}
		if took < timeout || took > timeout+3*time.Second {
			t.Fatalf("it failed after %v; want about %v", took, timeout)
		}
	})
}

// TestIdleWaitCountsFromAnswered: the keep-alive wait counts from the time
// the handler said it answered (Answered), without a clock read, unless a
// write had to wait for the client since; then it counts from its own
// start. The time is used once.
func TestIdleWaitCountsFromAnswered(t *testing.T) {
	const idle = 500 * time.Millisecond
	cfg := &Config{MaxHeaderBytes: 8 << 10, IdleTimeout: idle, WriteTimeout: 10 * time.Second}
	const req = "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
	request := func(t *testing.T, c *Conn, client net.Conn) {
		t.Helper()
		if _, err := io.WriteString(client, req); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(req))
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
	}
	longAgo := time.Now().Add(-time.Minute).UnixNano()

	t.Run("answered a minute ago", func(t *testing.T) {
		c, client := connPair(t, cfg)
		request(t, c, client)
		c.Answered(longAgo)
		if took, err := readErr(c); !errors.Is(err, os.ErrDeadlineExceeded) || took > idle/2 {
			t.Fatalf("the wait after an answer a minute ago: %v after %v; want a timeout at once", err, took)
		}
	})
	t.Run("answered now", func(t *testing.T) {
		c, client := connPair(t, cfg)
		request(t, c, client)
		c.Answered(time.Now().UnixNano())
		if took, err := readErr(c); !errors.Is(err, os.ErrDeadlineExceeded) || took < idle*3/4 {
			t.Fatalf("the wait after an answer now: %v after %v; want a timeout after about %v", err, took, idle)
		}
	})
	t.Run("a write waited since", func(t *testing.T) {
		c, client := connPair(t, cfg)
		if c.sock == nil {
			t.Skip("raw socket calls are not supported here")
		}
		request(t, c, client)
		c.Answered(longAgo)
		go func() {
			time.Sleep(100 * time.Millisecond) // the client reads late
			_, _ = io.Copy(io.Discard, client)
		}()
		if _, err := c.Write(make([]byte, 32<<20)); err != nil {
			t.Fatal(err)
		}
		if !c.sock.WriteWaited() {
			t.Fatal("the write did not wait; the case is not tested")
		}
		if took, err := readErr(c); !errors.Is(err, os.ErrDeadlineExceeded) || took < idle*3/4 {
			t.Fatalf("the wait after a write that waited: %v after %v; want a timeout after about %v, from its own start", err, took, idle)
		}
	})
}

// TestConnHandsOneRequestAtATime: requests that arrive together (one
// write, pipelined) are handed to the parser one per Read, the next from
// what the last read kept, without a system call; a refusal in a later
// one comes when it is read, after the earlier ones. fasthttp flushes its
// answers only when it holds no further request, so this is what puts
// every earlier answer on the wire before the next request's handler
// runs (an interim response is then written in order).
func TestConnHandsOneRequestAtATime(t *testing.T) {
	get := "GET /a HTTP/1.1\r\nHost: a\r\n\r\n"
	post := "POST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc"
	bad := "GET /c HTTP/1.1\nHost: a\r\n\r\n"
	c, client := connPair(t, &Config{MaxHeaderBytes: 4096})
	if _, err := io.WriteString(client, get+post+get+bad); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	var got string
	for len(got) < len(get+post) {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += string(buf[:n])
		if len(got) <= len(get) && !strings.HasPrefix(get, got) {
			t.Fatalf("the first reads hand over %q, want %q first", got, get)
		}
	}
	if got != get+post {
		t.Fatalf("the reads handed over %q, want the first request, then the second: %q", got, get+post)
	}
	if !c.midRequest.Load() {
		t.Error("with the next request kept, the connection is not mid-request (a close would not linger)")
	}
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != get {
		t.Fatalf("the third request: %q, %v; want it whole, from what was kept", buf[:n], err)
	}
	var gerr *Error
	for i := 0; i < 3 && !errors.As(err, &gerr); i++ {
		_, err = c.Read(buf)
	}
	if gerr == nil || gerr.Status != 400 {
		t.Fatalf("the fourth request: %v, want the Guard's 400", err)
	}
}

// TestConnKeptTunnelBytes: a WebSocket handshake pipelined behind a
// request, with its first frames in the same write, is handed over from
// what the first read kept, and the frames only once the tunnel opens.
func TestConnKeptTunnelBytes(t *testing.T) {
	get := "GET /a HTTP/1.1\r\nHost: a\r\n\r\n"
	ws := "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
	frames := "\x81\x05hello"
	c, client := connPair(t, &Config{MaxHeaderBytes: 4096})
	if _, err := io.WriteString(client, get+ws+frames); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	var got []string
	for _, want := range []string{get, ws} {
		var part string
		for len(part) < len(want) {
			n, err := c.Read(buf)
			if err != nil {
				t.Fatalf("after %q: %v", got, err)
			}
			part += string(buf[:n])
		}
		got = append(got, part)
	}
	if got[0] != get || got[1] != ws {
		t.Fatalf("the reads handed over %q, want the request, then the handshake", got)
	}
	if n, err := c.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("before the tunnel opens: %q, %v; want io.EOF", buf[:n], err)
	}
	c.OpenTunnel()
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != frames {
		t.Fatalf("the tunnel's first bytes: %q, %v; want %q", buf[:n], err, frames)
	}
}
