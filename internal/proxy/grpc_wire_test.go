package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/testserve"
	"github.com/graygate/graygate/internal/upstream"
)

// grpcService is grpc-go's interop TestService as the tests of this file
// need it: UnaryCall answers with the server's name in Username, or with
// the status the request asks for (a trailers-only answer);
// FullDuplexCall sends its initial metadata (x-session) before it reads
// anything, then answers every message.
type grpcService struct {
	testpb.UnimplementedTestServiceServer
	name string
}

func (s *grpcService) UnaryCall(_ context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if st := req.GetResponseStatus(); st.GetCode() != 0 {
		return nil, status.Error(codes.Code(st.GetCode()), st.GetMessage())
	}
	return &testpb.SimpleResponse{Username: s.name}, nil
}

func (s *grpcService) FullDuplexCall(stream testpb.TestService_FullDuplexCallServer) error {
	if err := stream.SendHeader(metadata.Pairs("x-session", s.name)); err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte(s.name)}}); err != nil {
			return err
		}
	}
}

// grpcPool serves a grpcService named name over h2c on loopback until the
// test ends, and returns an h2c pool of it.
func grpcPool(t testing.TB, name string) *upstream.Pool {
	t.Helper()
	ln := listenLoopback(t)
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, &grpcService{name: name})
	go srv.Serve(ln) //nolint:errcheck // returns on Stop
	t.Cleanup(srv.Stop)
	pool := poolOf(name, ln.Addr().String())
	pool.Protocol = upstream.H2C
	return pool
}

// grpcClient is a gRPC client of the gateway's h2c listener at addr.
func grpcClient(t testing.TB, addr string) testpb.TestServiceClient {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

// TestH2StreamHeaderFlushed: the header of a streamed answer reaches an
// HTTP/2 client when the upstream sends it, not with the first body
// bytes. A gRPC client that waits for a bidirectional call's initial
// metadata before it sends gets it (with the decision headers), and an
// event stream's header is not held back until its first event, as on
// HTTP/1.1. A trailers-only gRPC answer stays one: its status reaches
// the client.
func TestH2StreamHeaderFlushed(t *testing.T) {
	t.Run("grpc initial metadata", func(t *testing.T) {
		pool := grpcPool(t, "stable")
		_, addr := startProxyWith(t, Options{}, staticDecider(router.Decision{Rule: "r", Group: "stable", Target: pool}), listener.Protocols{H2C: true})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		client := grpcClient(t, addr)
		var tr metadata.MD
		_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.NotFound), Message: "no such order"}}, grpc.Trailer(&tr))
		if status.Code(err) != codes.NotFound || status.Convert(err).Message() != "no such order" || len(tr.Get("x-request-id")) != 1 {
			t.Fatalf("trailers-only answer: %v (trailers %v), want NotFound \"no such order\" with x-request-id", err, tr)
		}
		stream, err := client.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		md, err := stream.Header()
		if err != nil || ctx.Err() != nil {
			t.Fatalf("Header: %v (context %v)", err, ctx.Err())
		}
		if got := md.Get("x-session"); len(got) != 1 || got[0] != "stable" || len(md.Get("x-gray-rule")) != 1 || len(md.Get("x-request-id")) != 1 {
			t.Fatalf("initial metadata %v, want x-session stable with x-gray-rule and x-request-id", md)
		}
		if err := stream.Send(&testpb.StreamingOutputCallRequest{}); err != nil {
			t.Fatal(err)
		}
		if m, err := stream.Recv(); err != nil || string(m.GetPayload().GetBody()) != "stable" {
			t.Fatalf("Recv: %v, %v", m, err)
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != io.EOF {
			t.Fatalf("end of the call: %v, want io.EOF", err)
		}
	})
	t.Run("event stream", func(t *testing.T) {
		release := make(chan struct{})
		b := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			_, _ = io.WriteString(w, "data: first\n\n")
		}))
		defer close(release)
		for _, proto := range []upstream.Protocol{upstream.HTTP1, upstream.H2C} {
			pool := poolOf("events", addrOf(b))
			pool.Protocol = proto
			_, addr := startProxyWith(t, Options{}, staticDecider(router.Decision{Rule: "r", Group: "g", Target: pool}), listener.Protocols{H2C: true})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/events", nil)
			resp, err := h2cClient(t).Do(req)
			if err != nil {
				cancel()
				t.Fatalf("upstream %v: no header before the first event: %v", proto, err)
			}
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Gray-Rule") != "r" || resp.Header.Get("X-Request-Id") == "" {
				t.Errorf("upstream %v: %d with %v, want 200 with the decision headers", proto, resp.StatusCode, resp.Header)
			}
			resp.Body.Close()
			cancel()
		}
	})
}

// refusingGray is the h2c pool "gray" of one server that processes
// nothing: it answers every request's HEADERS with RST_STREAM
// REFUSED_STREAM, or, with goAway, with a GOAWAY that leaves the stream
// out. It counts the requests it saw.
func refusingGray(t testing.TB, goAway bool) (*upstream.Pool, *atomic.Int64) {
	t.Helper()
	var seen atomic.Int64
	addr := testserve.Conns(t, func(c net.Conn) {
		fr := rawH2Server(c, 30*time.Second)
		if fr == nil {
			return
		}
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck()
				}
			case *http2.MetaHeadersFrame:
				seen.Add(1)
				if goAway {
					// As a draining server does, it reads on
					// until the client closes.
					_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
					continue
				}
				_ = fr.WriteRSTStream(f.StreamID, http2.ErrCodeRefusedStream)
			}
		}
	})
	gray := poolOf("gray", addr)
	gray.Protocol = upstream.H2C
	return gray, &seen
}

// TestH2RefusedStreamFallsBack: a gray h2c instance that refuses every
// stream unprocessed (REFUSED_STREAM while it sheds load, a GOAWAY that
// leaves the stream out while it drains) is tried once more at once, then
// the call goes to stable with its body, as the README promises for "a
// stream the server refused unread". The HTTP/2 transport alone would ask
// the same instance again and again, backing off up to 32 s, and hold the
// call until its deadline. Without a stable target the gRPC client gets
// UNAVAILABLE at once, not its deadline; a GET is answered by stable too.
func TestH2RefusedStreamFallsBack(t *testing.T) {
	stable := grpcPool(t, "stable")
	for _, goAway := range []bool{false, true} {
		name := map[bool]string{false: "REFUSED_STREAM", true: "GOAWAY"}[goAway]
		t.Run(name, func(t *testing.T) {
			gray, seen := refusingGray(t, goAway)
			fallback := true
			d := deciderFunc(func(attr.Request) router.Decision {
				dec := router.Decision{Rule: "g", Group: "gray", Target: gray}
				if fallback {
					dec.Stable = stable
				}
				return dec
			})
			_, gw := startProxyWith(t, Options{}, d, listener.Protocols{H2C: true})
			c := grpcClient(t, gw)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var hdr metadata.MD
			resp, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("body")}}, grpc.Header(&hdr))
			if err != nil || resp.GetUsername() != "stable" {
				t.Fatalf("UnaryCall: %v from %q, want stable's answer", err, resp.GetUsername())
			}
			if got := hdr.Get("x-gray-degraded"); len(got) != 1 || got[0] != "fallback" {
				t.Errorf("x-gray-degraded %v, want fallback", got)
			}
			if n := seen.Load(); n < 1 || n > 2 {
				t.Errorf("gray saw the call %d times, want at most 2", n)
			}

			fallback = false
			var tr metadata.MD
			_, err = c.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Trailer(&tr))
			if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), `upstream "gray"`) || len(tr.Get("x-request-id")) != 1 {
				t.Fatalf("UnaryCall without stable: %v (trailers %v), want UNAVAILABLE naming the pool, with its request id", err, tr)
			}

			// A GET has no body for the transport to ask for again; it
			// goes to stable too (after the transport's first back-off).
			fallback = true
			echo := h2cBackend(t, "echo")
			stable := poolOf("stable", addrOf(echo))
			d2 := staticDecider(router.Decision{Rule: "g", Group: "gray", Target: gray, Stable: stable})
			_, gw2 := startProxyWith(t, Options{}, d2, listener.Protocols{H2C: true})
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+gw2+"/x", nil)
			r, err := h2cClient(t).Do(req)
			if err != nil {
				t.Fatalf("GET: %v", err)
			}
			if e := decodeEcho(t, r); e.Name != "echo" || r.Header.Get("X-Gray-Degraded") != "fallback" {
				t.Errorf("GET answered by %q (degraded %q), want stable's echo, fallback", e.Name, r.Header.Get("X-Gray-Degraded"))
			}
		})
	}
}

// TestH1RefusedStreamFallsBack is TestH2RefusedStreamFallsBack for an
// HTTP/1.1 client of an h2c pool, through the real listener: a GET and a
// POST are answered by stable, promptly (the HTTP/2 transport alone held
// the GET until the response header timeout and answered the POST 502,
// "define Request.GetBody"); an upload larger than fallback_body_bytes
// that the gray instance refused while it streamed goes to stable whole,
// what was read of it first; without stable the answer is a prompt 502
// naming the pool. Stable is an http1 pool in one case and an h2c pool
// in the other: both resume the body.
func TestH1RefusedStreamFallsBack(t *testing.T) {
	const headerTimeout = 8 * time.Second
	for _, goAway := range []bool{false, true} {
		name := map[bool]string{false: "REFUSED_STREAM", true: "GOAWAY"}[goAway]
		t.Run(name, func(t *testing.T) {
			gray, seen := refusingGray(t, goAway)
			stable := poolOf("stable", addrOf(h2cBackend(t, "stable")))
			if goAway {
				stable.Protocol = upstream.H2C
			}
			var noStable atomic.Bool
			d := deciderFunc(func(attr.Request) router.Decision {
				dec := router.Decision{Rule: "g", Group: "gray", Target: gray, Stable: stable}
				if noStable.Load() {
					dec.Stable = nil
				}
				return dec
			})
			_, gw := startProxyWith(t, Options{ResponseHeaderTimeout: headerTimeout}, d, listener.Protocols{H2C: true})
			c := httpClient(t)
			for _, method := range []string{"GET", "POST"} {
				body := map[string]string{"POST": "payload"}[method]
				start := time.Now()
				req, _ := http.NewRequest(method, "http://"+gw+"/x", strings.NewReader(body))
				resp, e := getEcho(t, c, req)
				if took := time.Since(start); took > headerTimeout/2 {
					t.Errorf("%s answered after %v, want well under the %v header timeout", method, took, headerTimeout)
				}
				if resp.StatusCode != 200 || e.Name != "stable" || e.Body != body || resp.Header.Get("X-Gray-Degraded") != "fallback" {
					t.Errorf("%s: %d from %q, body %q, degraded %q; want stable's answer to the whole request, fallback",
						method, resp.StatusCode, e.Name, e.Body, resp.Header.Get("X-Gray-Degraded"))
				}
			}

			// An upload over fallback_body_bytes is streamed, not held:
			// the client sends the 8 KiB fasthttp reads before the
			// handler runs, and nothing more until gray refused twice,
			// which it does while the transport waits on the client's
			// body (the read is given up, see upBody).
			const size, first = 200 << 10, 8 << 10
			big := bytes.Repeat([]byte("0123456789abcdef"), size/16)
			conn := dialBounded(t, gw, 20*time.Second)
			defer conn.Close()
			waitSeen := func(n int64) {
				t.Helper()
				deadline := time.Now().Add(10 * time.Second)
				for seen.Load() < n {
					if time.Now().After(deadline) {
						t.Fatalf("gray saw %d requests, want %d", seen.Load(), n)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			before := seen.Load()
			fmt.Fprintf(conn, "POST /big HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", size, big[:first])
			waitSeen(before + 2)
			_, _ = conn.Write(big[first:])
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("upload: %v", err)
			}
			if e := decodeEcho(t, resp); resp.StatusCode != 200 || e.Name != "stable" || e.Body != string(big) || resp.Header.Get("X-Gray-Degraded") != "fallback" {
				t.Errorf("upload: %d from %q with %d bytes (whole: %v), degraded %q; want stable's answer to all %d bytes, fallback",
					resp.StatusCode, e.Name, len(e.Body), e.Body == string(big), resp.Header.Get("X-Gray-Degraded"), size)
			}

			noStable.Store(true)
			for _, method := range []string{"GET", "POST"} {
				start := time.Now()
				code, body := fetch(t, c, method, "http://"+gw+"/x", map[string]string{"POST": "payload"}[method])
				if took := time.Since(start); took > headerTimeout/2 {
					t.Errorf("%s without stable answered after %v, want well under the %v header timeout", method, took, headerTimeout)
				}
				if code != http.StatusBadGateway || !strings.Contains(body, `upstream "gray"`) {
					t.Errorf("%s without stable: %d %q, want 502 naming the pool", method, code, body)
				}
			}
		})
	}
}

// TestGRPCBodyLimitMidCall: a bidirectional call whose client sends more
// than the route's max_body_bytes after the answer began is ended with
// RESOURCE_EXHAUSTED and the gateway's message, as before the answer, and
// recorded as the gateway's 413; not as UNAVAILABLE "upstream broke off",
// a failure of the upstream.
func TestGRPCBodyLimitMidCall(t *testing.T) {
	pool := grpcPool(t, "stable")
	rec := newDoneRecorder()
	d := staticDecider(router.Decision{Rule: "r", Group: "stable", Target: pool, Policy: &router.Policy{MaxBodyBytes: 1000}})
	_, addr := startProxyWith(t, Options{OnDone: rec.onDone}, d, listener.Protocols{H2C: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := grpcClient(t, addr).FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got error
	for i := 0; got == nil && i < 20; i++ {
		if err := stream.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: make([]byte, 300)}}); err != nil && err != io.EOF {
			t.Fatalf("Send %d: %v", i, err)
		}
		_, got = stream.Recv()
	}
	if status.Code(got) != codes.ResourceExhausted || !strings.Contains(status.Convert(got).Message(), "request body larger than 1000 bytes (request id ") {
		t.Fatalf("the call ended with %v, want RESOURCE_EXHAUSTED naming the limit and the request id", got)
	}
	if c := rec.next(t, 10*time.Second); c.status != http.StatusRequestEntityTooLarge {
		t.Errorf("recorded status %d, want 413", c.status)
	}
}

// resettingGray is the h2c pool "gray" of one server that resets every
// stream with code, at its HEADERS or, with afterData, once the first
// DATA frame of it came (the client's first message, after which a
// bidirectional call waits for an answer before it sends more). It
// counts the streams it reset.
func resettingGray(t testing.TB, code http2.ErrCode, afterData bool) (*upstream.Pool, *atomic.Int64) {
	t.Helper()
	var reset atomic.Int64
	addr := testserve.Conns(t, func(c net.Conn) {
		fr := rawH2Server(c, 30*time.Second)
		if fr == nil {
			return
		}
		done := map[uint32]bool{}
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			id := f.Header().StreamID
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck()
				}
				continue
			case *http2.MetaHeadersFrame:
				if afterData {
					continue
				}
			case *http2.DataFrame:
				if !afterData || len(f.Data()) == 0 {
					continue
				}
			default:
				continue
			}
			if !done[id] {
				done[id] = true
				reset.Add(1)
				_ = fr.WriteRSTStream(id, code)
			}
		}
	})
	gray := poolOf("gray", addr)
	gray.Protocol = upstream.H2C
	return gray, &reset
}

// TestGRPCResetMidCall: a bidirectional call whose gray h2c stream is
// refused (REFUSED_STREAM) or reset while the client waits for an answer
// before it sends more is answered at once, not at its deadline. The
// HTTP/2 transport waits, before it returns a stream the server reset
// without an answer, for its writer to finish reading the request body,
// which here waits for the client's next message, that the client sends
// only after an answer: the body's read must give up when the transport
// closes the body. A refused stream was not processed: it is asked once
// more, then the call goes to stable with the message the client sent,
// and goes on there; without stable the client gets UNAVAILABLE naming
// the pool. A stream reset after the upstream read a message was
// processed and is not replayed: UNAVAILABLE, or CANCELLED for a
// CANCEL, as for any upstream reset before the answer.
func TestGRPCResetMidCall(t *testing.T) {
	const deadline = 10 * time.Second
	for _, tt := range []struct {
		name      string
		code      http2.ErrCode
		afterData bool
		stable    bool
		want      codes.Code // codes.OK: stable answers
	}{
		{"refused at once, to stable", http2.ErrCodeRefusedStream, false, true, codes.OK},
		{"refused after a message, to stable", http2.ErrCodeRefusedStream, true, true, codes.OK},
		{"refused after a message, no stable", http2.ErrCodeRefusedStream, true, false, codes.Unavailable},
		{"internal error after a message", http2.ErrCodeInternal, true, true, codes.Unavailable},
		{"cancel after a message", http2.ErrCodeCancel, true, false, codes.Canceled},
	} {
		t.Run(tt.name, func(t *testing.T) {
			gray, reset := resettingGray(t, tt.code, tt.afterData)
			d := router.Decision{Rule: "g", Group: "gray", Target: gray}
			if tt.stable {
				d.Stable = grpcPool(t, "stable")
			}
			_, gw := startProxyWith(t, Options{}, staticDecider(d), listener.Protocols{H2C: true})
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start := time.Now()
			stream, err := grpcClient(t, gw).FullDuplexCall(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := stream.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte("first")}}); err != nil {
				t.Fatalf("Send: %v", err)
			}
			m, err := stream.Recv()
			if took := time.Since(start); took > deadline/2 {
				t.Errorf("the call was answered after %v, want well before its %v deadline", took, deadline)
			}
			if tt.want != codes.OK {
				if status.Code(err) != tt.want || !strings.Contains(status.Convert(err).Message(), `upstream "gray"`) {
					t.Fatalf("Recv: %v, want %v naming the pool", err, tt.want)
				}
				if tt.stable && reset.Load() != 1 {
					t.Errorf("gray reset %d streams, want 1: a call gray processed is not sent again", reset.Load())
				}
				return
			}
			if err != nil || string(m.GetPayload().GetBody()) != "stable" {
				t.Fatalf("Recv: %v, %v; want stable's answer", m, err)
			}
			if md, _ := stream.Header(); len(md.Get("x-gray-degraded")) != 1 || md.Get("x-gray-degraded")[0] != "fallback" {
				t.Errorf("x-gray-degraded %v, want fallback", md.Get("x-gray-degraded"))
			}
			if n := reset.Load(); n < 1 || n > 2 {
				t.Errorf("gray refused the call %d times, want 1 or 2", n)
			}
			// The call goes on with stable.
			if err := stream.Send(&testpb.StreamingOutputCallRequest{}); err != nil {
				t.Fatalf("second Send: %v", err)
			}
			if m, err := stream.Recv(); err != nil || string(m.GetPayload().GetBody()) != "stable" {
				t.Fatalf("second Recv: %v, %v", m, err)
			}
			if err := stream.CloseSend(); err != nil {
				t.Fatal(err)
			}
			if _, err := stream.Recv(); err != io.EOF {
				t.Fatalf("end of the call: %v, want io.EOF", err)
			}
		})
	}
}

// rawH2Server starts the server side of an HTTP/2 connection by hand on c,
// for upstreams that misbehave on purpose: a deadline on c, the client's
// preface read, and our SETTINGS sent. It returns nil when c fails.
func rawH2Server(c net.Conn, timeout time.Duration, settings ...http2.Setting) *http2.Framer {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil {
		return nil
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if fr.WriteSettings(settings...) != nil {
		return nil
	}
	return fr
}
