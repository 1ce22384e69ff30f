package listener

import (
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestAcceptOutOfDescriptors: a listener whose process has run out of
// file descriptors keeps accepting once they are free again, as net/http's
// server does; before, the first EMFILE stopped the server for good while
// the process stayed up. A real socket, with the process's descriptor
// limit lowered until the pending connection cannot be taken.
func TestAcceptOutOfDescriptors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := &Config{MaxHeaderBytes: 4096}
	wl := Wrap(ln, func() *Config { return cfg }, nil, nil)
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Skip(err)
	}
	// The limit is on descriptor numbers: below the lowest free one, no
	// descriptor is left for the accepted connection.
	probe, err := os.Open(os.DevNull)
	if err != nil {
		t.Skip(err)
	}
	free := probe.Fd()
	probe.Close()
	low := old
	low.Cur = uint64(free)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skip(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer restore()

	type result struct {
		c   net.Conn
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := wl.Accept()
		got <- result{c, err}
	}()
	select {
	case r := <-got:
		restore()
		if r.err != nil {
			t.Fatalf("Accept with no descriptor left = %v; want it to wait", r.err)
		}
		r.c.Close()
		t.Fatal("the pending connection was accepted with no descriptor below the limit: the test did not run out of descriptors")
	case <-time.After(300 * time.Millisecond):
	}
	restore()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("Accept after descriptors came back = %v", r.err)
		}
		r.c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not take the pending connection once descriptors came back")
	}
}
