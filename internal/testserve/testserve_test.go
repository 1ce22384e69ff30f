package testserve

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestConns: each connection gets the handler, and at the end of the test
// a handler still blocked on its connection is released (its connection
// closed) and waited for.
func TestConns(t *testing.T) {
	released := make(chan struct{})
	var client net.Conn // closed only after the check below
	defer func() {
		if client != nil {
			client.Close()
		}
	}()
	t.Run("serve", func(t *testing.T) {
		addr := Conns(t, func(c net.Conn) {
			if _, err := io.WriteString(c, "hi"); err != nil {
				return
			}
			_, _ = io.ReadAll(c) // blocks until cleanup closes c
			close(released)
		})
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		client = c
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 2)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hi" {
			t.Fatalf("%q %v", buf, err)
		}
	})
	// The subtest's cleanup has run: the handler must have returned.
	select {
	case <-released:
	default:
		t.Fatal("the handler was still running after its test ended")
	}
}
