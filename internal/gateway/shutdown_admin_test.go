package gateway

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestShutdownStalledAdminRequest stops a gateway while an admin
// client is stalled in the middle of its request body and a slow data-plane
// request is in flight. The stalled admin request must not hold up the data
// plane: its listener closes once drain_delay has passed (not after
// shutdown_timeout), the slow request still gets its whole answer, and the
// stalled admin connection is closed when shutdown_timeout runs out.
func TestShutdownStalledAdminRequest(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		io.WriteString(w, "slow-done")
	}))
	defer slow.Close()
	defer close(release)
	const drain, timeout = 300 * time.Millisecond, 3 * time.Second
	e := start(t, baseConfig+`routes: [{name: slow, path_prefix: /slow/, upstream: "`+slow.Listener.Addr().String()+`"}]
lifecycle: {drain_delay: 300ms, shutdown_timeout: 3s}
`, "")
	dataAddr := strings.TrimPrefix(e.data, "http://")

	// An admin client that sent its head and part of its body, then stalls.
	held, err := net.Dial("tcp", strings.TrimPrefix(e.admin, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := io.WriteString(held, "PUT /api/v1/rules/stalled HTTP/1.1\r\nHost: admin\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"key\":"); err != nil {
		t.Fatal(err)
	}
	heldClosed := make(chan time.Time, 1)
	go func() {
		held.SetReadDeadline(time.Now().Add(15 * time.Second))
		io.Copy(io.Discard, held)
		heldClosed <- time.Now()
	}()

	// A slow request in flight across the stop.
	type result struct {
		status int
		body   string
		err    error
	}
	slowDone := make(chan result, 1)
	go func() {
		resp, err := e.client.Get(e.data + "/slow/x")
		if err != nil {
			slowDone <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		slowDone <- result{resp.StatusCode, string(b), err}
	}()
	time.Sleep(200 * time.Millisecond) // the slow request reaches the upstream

	stopped := time.Now()
	e.stop()
	e.stop = nil

	// The data listener closes after drain_delay, well before
	// shutdown_timeout.
	var refusedAfter time.Duration
	for {
		c, err := net.DialTimeout("tcp", dataAddr, time.Second)
		if err != nil {
			refusedAfter = time.Since(stopped)
			break
		}
		c.Close()
		if time.Since(stopped) > timeout+2*time.Second {
			t.Fatalf("the data plane still accepts connections %v after the stop", time.Since(stopped))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if refusedAfter > drain+time.Second {
		t.Errorf("the data listener closed %v after the stop, want about drain_delay (%v): a stalled admin request held it open", refusedAfter, drain)
	}

	// The slow request, still in flight, gets its whole answer.
	release <- struct{}{}
	select {
	case r := <-slowDone:
		if r.err != nil || r.status != 200 || r.body != "slow-done" {
			t.Errorf("slow request in flight at the stop = %d %q %v, want 200 slow-done", r.status, r.body, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the slow request did not finish")
	}

	// The stalled admin connection is closed once shutdown_timeout ran out,
	// and Serve returns.
	select {
	case at := <-heldClosed:
		if d := at.Sub(stopped); d > drain+timeout+2*time.Second {
			t.Errorf("the stalled admin connection was closed %v after the stop, want by drain_delay+shutdown_timeout", d)
		}
	case <-time.After(drain + timeout + 3*time.Second):
		t.Error("the stalled admin connection is still open after shutdown_timeout")
	}
	select {
	case <-e.done:
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
}
