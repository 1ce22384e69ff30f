// Package testserve serves raw TCP connections to tests: the backends
// that answer with exact bytes, stall, reset or break off, which no HTTP
// server library would write. Every connection a listener accepts runs a
// handler on its own goroutine until the test ends; then the listener and
// every connection still open are closed, and the handlers are waited for,
// so none outlives its test.
package testserve

import (
	"net"
	"sync"
	"testing"
)

// Conns listens on a loopback port the kernel picks, serves each
// connection with handle (On), and returns the address.
func Conns(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	On(t, ln, handle)
	return ln.Addr().String()
}

// On serves each connection ln accepts with handle, on a goroutine of its
// own, until the test ends: then it closes ln and every connection still
// open, and waits for the handlers. A connection is closed when its
// handler returns. ln may be any listener (TLS, or one that wraps TCP).
func On(t testing.TB, ln net.Listener, handle func(net.Conn)) {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					c.Close()
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
				}()
				handle(c)
			}()
		}
	}()
}
