package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/upstream"
)

// lateHookTransport stands for an h2c pool's transport that gets no
// answer before the header timeout, and whose connection goroutine (as
// http2.Transport's read loop, or net/http's persistConn, can) hands the
// call's Got1xxResponse hook an interim response as the call ends: once
// at the moment the round trip returns, on a goroutine of its own, and
// once more when the test says, after the client has had its answer.
type lateHookTransport struct {
	wg     sync.WaitGroup
	late   chan func()
	panics chan any
}

func (lt *lateHookTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	trace := httptrace.ContextClientTrace(req.Context())
	<-req.Context().Done()
	call := func() {
		defer func() {
			if v := recover(); v != nil {
				lt.panics <- v
			}
		}()
		_ = trace.Got1xxResponse(http.StatusEarlyHints, textproto.MIMEHeader{"Link": {"</a.css>; rel=preload"}})
	}
	lt.wg.Add(1)
	go func() {
		defer lt.wg.Done()
		call()
	}()
	lt.late <- call
	return nil, context.Cause(req.Context())
}

func (lt *lateHookTransport) CloseIdleConnections() {}

// TestH2InterimAfterHeaderTimeout: an HTTP/2 client's request to an h2c
// pool whose response header timeout fires while the transport forwards
// an interim response through its hook. The hook runs on the transport's
// goroutine; the request's error answer (504) on the handler's. They must
// not touch the stream's ResponseWriter at once (under -race this is
// reported as a data race on its header), nor may the hook touch the
// stream after the answer, when it has gone back to the pool (it panicked
// on a nil ResponseWriter, or would write into another request's). The
// transport is a stand-in: a real upstream cannot time its interim
// response to the header timer reliably.
func TestH2InterimAfterHeaderTimeout(t *testing.T) {
	pool := poolOf("gray", "127.0.0.1:1") // never dialled
	pool.Protocol = upstream.H2C
	lt := &lateHookTransport{late: make(chan func(), 4), panics: make(chan any, 4)}
	p, addr := startProxyWith(t, Options{ResponseHeaderTimeout: 100 * time.Millisecond},
		staticDecider{Group: "gray", Target: pool}, listener.Protocols{H2C: true})
	p.nets.mu.Lock()
	p.nets.m = map[netKey]*netEntry{{proto: upstream.H2C}: {t: lt}}
	p.nets.mu.Unlock()
	c := h2cClient(t)
	for i := range 2 {
		resp, err := c.Get("http://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusGatewayTimeout {
			t.Errorf("request %d: %d, want 504", i, resp.StatusCode)
		}
		// The hook again, now that the stream has answered.
		(<-lt.late)()
		lt.wg.Wait()
		select {
		case v := <-lt.panics:
			t.Fatalf("request %d: the transport's hook panicked: %v", i, v)
		default:
		}
	}
}
