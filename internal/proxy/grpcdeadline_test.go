package proxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/upstream"
)

// grpcFrame is one gRPC message on the wire: uncompressed, its length,
// then msg.
func grpcFrame(msg string) []byte {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// TestGRPCDeadlineEndsCall: a gRPC call's grpc-timeout is the deadline of
// the whole call, as gRPC defines it, and the gateway ends the call when
// it passes, wherever the call is: the upstream's stream is cancelled and
// the client told DEADLINE_EXCEEDED, before the response header in a
// trailers-only answer (the gateway's 504), after it in the trailers (the
// upstream's 200, grpc-status 4). The header timer alone, which starts
// once the request has been sent whole, never bounded a call whose client
// streams on: it was held until the client gave up. The client here
// sends grpc-timeout but keeps no deadline of its own, as a client whose
// library does not enforce it; grpc-go's would end the call itself, and
// the gateway's doing so could not be told from it. The upstream ignores
// grpc-timeout too. The breaker counts a deadline that passed while the
// client was still sending as no failure of the upstream's (which waited
// for the rest of the request), one that passed once it had the whole
// request as a failure, and one mid-answer as grpc-status 4, which the
// default grpc_error_codes count.
func TestGRPCDeadlineEndsCall(t *testing.T) {
	const timeout, deadline = 300 * time.Millisecond, 10 * time.Second
	for _, tt := range []struct {
		name     string
		whole    bool // the client ends its request after one message
		header   bool // the upstream answers its header and a message at once
		recorded int  // the status the gateway records
		failed   uint64
	}{
		{"streaming, no answer", false, false, http.StatusGatewayTimeout, 0},
		{"streaming, answer streaming", false, true, http.StatusOK, 1},
		{"request sent whole, no answer", true, false, http.StatusGatewayTimeout, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ended := make(chan struct{})
			up := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer close(ended)
				if tt.header {
					w.Header().Set("Content-Type", "application/grpc")
					w.WriteHeader(http.StatusOK)
					_, _ = w.Write(grpcFrame("first"))
					http.NewResponseController(w).Flush()
				}
				// Read the request until the gateway cancels it: the
				// handler returns when the upstream's stream is reset.
				_, _ = io.Copy(io.Discard, r.Body)
				<-r.Context().Done()
			}))
			pool := poolOf("up", addrOf(up))
			pool.Protocol = upstream.H2C
			br, err := breaker.New(breaker.Config{}, breaker.Options{Name: "r/up"})
			if err != nil {
				t.Fatal(err)
			}
			rec := newDoneRecorder()
			d := staticDecider(router.Decision{Rule: "r", Group: "g", Target: pool, Breaker: br})
			_, gw := startProxyWith(t, Options{OnDone: rec.onDone}, d, listener.Protocols{H2C: true})

			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			var body io.Reader = bytes.NewReader(grpcFrame("hello"))
			if !tt.whole {
				pr, pw := io.Pipe()
				defer pw.Close()
				// The client's transport looks at its context only
				// between reads of the body: ending the body with it
				// bounds the test when the gateway hangs.
				context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
				go func() { _, _ = pw.Write(grpcFrame("hello")) }()
				body = pr
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+gw+"/grpc.testing.TestService/FullDuplexCall", body)
			req.Header.Set("Content-Type", "application/grpc")
			req.Header.Set("Te", "trailers")
			req.Header.Set("Grpc-Timeout", "300m")
			start := time.Now()
			resp, err := h2cClient(t).Do(req)
			if err != nil {
				t.Fatalf("after %v: %v; want DEADLINE_EXCEEDED from the gateway", time.Since(start), err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			took := time.Since(start)
			if err != nil {
				t.Fatalf("reading the answer: %v after %v", err, took)
			}
			if took < timeout || took > deadline/2 {
				t.Errorf("the call ended after %v, want at its %v deadline", took, timeout)
			}
			st, msg := resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
			if tt.header {
				st, msg = resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
				if !bytes.Equal(b, grpcFrame("first")) {
					t.Errorf("body %q, want the upstream's message", b)
				}
			}
			if resp.StatusCode != http.StatusOK || st != "4" || !strings.Contains(msg, "request id") {
				t.Fatalf("%d, grpc-status %q, grpc-message %q; want 200, DEADLINE_EXCEEDED (4) with the request id", resp.StatusCode, st, msg)
			}
			select {
			case <-ended:
			case <-time.After(deadline / 2):
				t.Fatal("the upstream's call was not cancelled")
			}
			if c := rec.next(t, deadline/2); c.status != tt.recorded {
				t.Errorf("recorded status %d, want %d", c.status, tt.recorded)
			}
			if w := br.Snapshot().Window; w.Requests != 1 || w.Failures != tt.failed {
				t.Errorf("breaker window: %d requests, %d failures; want 1, %d", w.Requests, w.Failures, tt.failed)
			}
		})
	}
}

// TestDeadlinePassedBeforeItsTimer: an upstream that ends a gRPC call at
// its deadline (grpc-go's server resets the stream, CANCEL) counts the
// grpc-timeout it was sent from when the request reached it, so the
// gateway's deadline has passed by then; but under load the gateway's
// timer can still be pending when the reset arrives. The call then ended
// as the upstream's failure, and the client was told CANCELLED, "upstream
// failed", where it must be told DEADLINE_EXCEEDED (a fresh-clone CI run
// of TestGRPCDeadlinesAndCancel, in internal/gateway, caught it). The
// deadline is now read from the clock as well as from the timer. A reset
// before the deadline stays the upstream's.
func TestDeadlinePassedBeforeItsTimer(t *testing.T) {
	reset := http2.StreamError{StreamID: 1, Code: http2.ErrCodeCancel}
	for _, tc := range []struct {
		name     string
		deadline time.Duration // from now; 0: none
		want     bool          // the call ended by its deadline
	}{
		{"passed, timer pending", -time.Millisecond, true},
		{"not yet", time.Hour, false},
		{"none", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call := newNetCall(context.Background(), 0)
			if tc.deadline != 0 {
				call.deadline = time.Now().Add(tc.deadline)
			}
			call.end() // as forward does before it reads the error
			f := flow{inst: &upstream.Instance{Addr: "127.0.0.1:1"}}
			err := f.netError(reset, call, context.Background())
			if got := errors.Is(err, errCallDeadline); got != tc.want || (f.timeout == timeoutGRPC) != tc.want {
				t.Errorf("netError = %v (timeout %v), want the call's deadline: %v", err, f.timeout, tc.want)
			}
			code := grpcCode(http.StatusGatewayTimeout, errors.Is(err, errCallDeadline))
			if tc.want && code != grpcDeadlineExceeded {
				t.Errorf("grpc code %d, want DEADLINE_EXCEEDED", code)
			}
		})
	}
}
