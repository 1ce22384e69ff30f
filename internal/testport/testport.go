// Package testport picks loopback ports for the real services that tests
// start (etcd, Redis, Prometheus) and restart on the same port.
//
// A port the kernel hands out for 127.0.0.1:0 comes from the ephemeral
// range (ip_local_port_range), which is also where every outgoing
// connection on the machine gets its local port. While a test has its
// server stopped, a connection of another test running in parallel may
// take that port, and the restart fails with "address already in use"
// (CI saw it for an etcd peer port). Pick returns a free port below the
// ephemeral range instead, where the kernel never assigns ports by itself.
package testport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// span is how many ports below the ephemeral range Pick chooses from.
const span = 12000

var (
	mu     sync.Mutex
	handed = map[int]bool{} // ports Pick returned in this process
)

// Pick returns a port on 127.0.0.1 that is free now, lies outside the
// kernel's ephemeral range, and was not returned before in this process
// (tests that start servers in parallel never share one); on systems where
// the range cannot be read it falls back to a port the kernel picks.
func Pick() (int, error) {
	low, ok := ephemeralLow()
	if !ok || low-span < 1024 {
		return kernelPort()
	}
	mu.Lock()
	defer mu.Unlock()
	for range 200 {
		port := low - span + rand.IntN(span)
		if handed[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // in use; try another
		}
		l.Close()
		handed[port] = true
		return port, nil
	}
	return 0, errors.New("no free port below the ephemeral range after 200 tries")
}

// ephemeralLow is the first port of Linux's ephemeral range.
func ephemeralLow() (int, bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, false
	}
	low, err := strconv.Atoi(f[0])
	return low, err == nil
}

func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
