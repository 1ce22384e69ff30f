package testport

import (
	"net"
	"strconv"
	"testing"
)

// TestPickIsFreeAndBelowTheEphemeralRange: the port can be listened on,
// and on Linux it lies below ip_local_port_range.
func TestPickIsFreeAndBelowTheEphemeralRange(t *testing.T) {
	low, linux := ephemeralLow()
	seen := map[int]bool{}
	for range 50 {
		port, err := Pick()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d picked twice", port)
		}
		seen[port] = true
		if linux && low-span >= 1024 && (port >= low || port < low-span) {
			t.Fatalf("port %d is not in [%d, %d)", port, low-span, low)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", port, err)
		}
		l.Close()
	}
}

// TestRefusedStaysDead: a connection to the address is refused, and while
// the test runs no listener can take its port.
func TestRefusedStaysDead(t *testing.T) {
	addr := Refused(t)
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("dial %s succeeded, want connection refused", addr)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatalf("listen on %s succeeded while Refused holds it", addr)
	}
}
