package gateway

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// dataConns opens n client connections to the data plane, one after the
// other, each sending one keep-alive request, and keeps them open. It
// returns how many were answered and the connections (the caller closes
// them). A connection the cap closed reads EOF or a reset, no answer.
func dataConns(t *testing.T, e *env, n int) (answered int, conns []net.Conn) {
	t.Helper()
	addr := strings.TrimPrefix(e.data, "http://")
	for range n {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatalf("dial the data plane: %v", err)
		}
		conns = append(conns, c)
		c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: cap.test\r\n\r\n")); err != nil {
			continue // closed by the cap before the write
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err == nil && strings.HasPrefix(line, "HTTP/1.1 200") {
			answered++
		} else if err == nil {
			t.Errorf("a connection over the cap got %q, want it closed without an answer", line)
		}
		c.SetDeadline(time.Time{})
	}
	return answered, conns
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

// waitClientConns waits until /metrics says n client connections are
// open, after closing the harness client's idle ones.
func waitClientConns(t *testing.T, e *env, n float64) {
	t.Helper()
	e.client.CloseIdleConnections()
	waitFor(t, fmt.Sprintf("graygate_client_connections to be %v", n), 5*time.Second, func() bool {
		return metricValue(metricsText(t, e), "graygate_client_connections") == n
	})
}

// TestClientConnectionCap: with proxy.max_client_connections: 4, four
// client connections are served and held open, and the next ones are
// closed at once, without an answer, counted in
// graygate_client_connections_refused_total, while the admin API answers.
// A connection that closes frees its place for a new one, and once all
// are closed the gauge is back at 0. Through the real listener.
func TestClientConnectionCap(t *testing.T) {
	e := start(t, baseConfig+"proxy: {max_client_connections: 4}\n", "")
	waitClientConns(t, e, 0)
	answered, conns := dataConns(t, e, 7)
	defer closeAll(conns)
	if answered != 4 {
		t.Errorf("%d of 7 connections were answered, want the cap's 4", answered)
	}
	m := metricsText(t, e)
	if open, refused := metricValue(m, "graygate_client_connections"), metricValue(m, "graygate_client_connections_refused_total"); open != 4 || refused != 3 {
		t.Errorf("graygate_client_connections %v, refused_total %v; want 4 and 3", open, refused)
	}
	if code, out := e.api("GET", "/api/v1/status", nil); code != 200 {
		t.Errorf("the admin API at the cap: %d %v", code, out)
	}

	// Two close: two new ones are served, and the next is refused again.
	conns[0].Close()
	conns[1].Close()
	waitClientConns(t, e, 2)
	answered, more := dataConns(t, e, 3)
	defer closeAll(more)
	if answered != 2 {
		t.Errorf("after two closed, %d of 3 new connections were answered, want 2", answered)
	}
	closeAll(conns)
	closeAll(more)
	waitClientConns(t, e, 0)
}
