package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/graygate/graygate/internal/certs/certstest"
	"github.com/graygate/graygate/internal/config"
)

// testService is grpc-go's interop TestService, answering with its name:
// UnaryCall in Username (and the X-Gray-Tag and x-user-id it saw in
// Hostname and ServerId), the streaming calls in their payloads.
type testService struct {
	testpb.UnimplementedTestServiceServer
	name string
	// unavailable makes UnaryCall answer UNAVAILABLE.
	unavailable atomic.Bool
	// started counts UnaryCalls that reached the handler, by x-call-id.
	mu      sync.Mutex
	started map[string]bool
	// canceled is signalled when a streaming call's context ends early.
	canceled chan struct{}
}

func (s *testService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if id := md.Get("x-call-id"); len(id) > 0 {
		s.mu.Lock()
		s.started[id[0]] = true
		s.mu.Unlock()
	}
	if d := md.Get("x-sleep"); len(d) > 0 {
		wait, _ := time.ParseDuration(d[0])
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if s.unavailable.Load() {
		return nil, status.Error(codes.Unavailable, s.name+" is failing")
	}
	if c := req.GetResponseStatus(); c != nil && c.Code != 0 {
		return nil, status.Error(codes.Code(c.Code), c.Message)
	}
	first := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-backend", s.name))
	return &testpb.SimpleResponse{Username: s.name, Hostname: first("x-gray-tag"), ServerId: first("x-user-id"),
		Payload: &testpb.Payload{Body: make([]byte, req.GetResponseSize())}}, nil
}

// EmptyCall answers with its name in the x-backend header.
func (s *testService) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-backend", s.name))
	return &testpb.Empty{}, nil
}

// StreamingOutputCall sends one response per ResponseParameters, each
// payload the server's name repeated to the asked size, pausing
// IntervalUs between them.
func (s *testService) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, stream testpb.TestService_StreamingOutputCallServer) error {
	for _, p := range req.GetResponseParameters() {
		if us := p.GetIntervalUs(); us > 0 {
			select {
			case <-time.After(time.Duration(us) * time.Microsecond):
			case <-stream.Context().Done():
				select {
				case s.canceled <- struct{}{}:
				default:
				}
				return stream.Context().Err()
			}
		}
		body := []byte(strings.Repeat(s.name, int(p.GetSize())/len(s.name)+1)[:p.GetSize()])
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: body}}); err != nil {
			return err
		}
	}
	return nil
}

// StreamingInputCall adds up the payload sizes it received.
func (s *testService) StreamingInputCall(stream testpb.TestService_StreamingInputCallServer) error {
	total := 0
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			_ = stream.SetHeader(metadata.Pairs("x-backend", s.name))
			return stream.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(total)})
		}
		if err != nil {
			return err
		}
		total += len(req.GetPayload().GetBody())
	}
}

// FullDuplexCall answers every request at once with a payload of the asked
// size naming the server: ping-pong.
func (s *testService) FullDuplexCall(stream testpb.TestService_FullDuplexCallServer) error {
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if c := req.GetResponseStatus(); c != nil && c.Code != 0 {
			return status.Error(codes.Code(c.Code), c.Message)
		}
		for _, p := range req.GetResponseParameters() {
			body := []byte(fmt.Sprintf("%s:%d", s.name, p.GetSize()))
			if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: body}}); err != nil {
				return err
			}
		}
	}
}

// grpcBackend serves a testService on a loopback port, with HTTP/2 in
// clear (what protocol: h2c speaks), until the test ends or kill.
type grpcBackend struct {
	svc  *testService
	srv  *grpc.Server
	addr string
}

func startGRPCBackend(t *testing.T, name string) *grpcBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svc := &testService{name: name, started: map[string]bool{}, canceled: make(chan struct{}, 16)}
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, svc)
	go srv.Serve(ln) //nolint:errcheck // returns on Stop
	t.Cleanup(srv.Stop)
	return &grpcBackend{svc: svc, srv: srv, addr: ln.Addr().String()}
}

// grpcEnv is a gateway serving h2c on its cleartext listener and HTTP/2
// over TLS, in front of the gRPC backends stable and gray.
type grpcEnv struct {
	stable, gray   *grpcBackend
	gw             *Gateway
	clear, tlsAddr string
	ca             *certstest.CA
}

// startGRPC runs a gateway with yaml ({{stable}} and {{gray}} replaced by
// the backends' addresses), TLS with a certificate for gw.test signed by
// a test CA, and h2c.
func startGRPC(t *testing.T, yaml string) *grpcEnv {
	t.Helper()
	e := &grpcEnv{stable: startGRPCBackend(t, "stable"), gray: startGRPCBackend(t, "gray")}
	dir := t.TempDir()
	e.ca = certstest.NewCA(t, dir, "gw")
	pair := e.ca.Server("gw.pem", "gw.key", "gw.test")
	yaml = strings.NewReplacer("{{stable}}", e.stable.addr, "{{gray}}", e.gray.addr).Replace(yaml)
	yaml += fmt.Sprintf("\nh2c: true\ntls_listen: \"127.0.0.1:0\"\ntls: {certificates: [{cert_file: %q, key_file: %q}]}\n", pair.CertFile, pair.KeyFile)
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	cfg.DataDir = t.TempDir()
	g, err := New(Options{Config: cfg, AdminToken: token, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	e.gw = g
	e.clear, e.tlsAddr, _ = serveTLS(t, g)
	return e
}

// client dials the gateway: over TLS with the test CA, or h2c.
func (e *grpcEnv) client(t *testing.T, overTLS bool) testpb.TestServiceClient {
	t.Helper()
	var cc *grpc.ClientConn
	var err error
	if overTLS {
		creds := credentials.NewTLS(&tls.Config{RootCAs: e.ca.Pool, ServerName: "gw.test"})
		cc, err = grpc.NewClient("passthrough:///"+e.tlsAddr, grpc.WithTransportCredentials(creds))
	} else {
		cc, err = grpc.NewClient("passthrough:///"+e.clear, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

const grpcConfig = `
default_upstream: stable
upstreams:
  stable: {protocol: h2c, instances: [{addr: "{{stable}}"}]}
  gray:   {protocol: h2c, instances: [{addr: "{{gray}}"}]}
rules:
  - key: grpc_gray
    type: gray
    gray_percent: 30
    conditions: {path_prefix: ["/grpc.testing.TestService/"]}
    targets: {gray: gray, stable: stable}
`

// isGray is the rule's decision for uid (xxh64 of key:uid below 3000).
func isGray(uid string) bool { return xxhash.Sum64String("grpc_gray:"+uid)%10000 < 3000 }

func userCtx(uid string, kv ...string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), append([]string{"x-user-id", uid}, kv...)...)
}

// TestGRPCGraySplit: real gRPC clients over TLS and h2c; 30% of users by
// x-user-id reach gray, every user exactly as the rule decides; the
// decision comes back as response metadata and the coloring reaches the
// upstream as metadata.
func TestGRPCGraySplit(t *testing.T) {
	e := startGRPC(t, grpcConfig)
	for _, overTLS := range []bool{true, false} {
		t.Run(fmt.Sprintf("tls=%v", overTLS), func(t *testing.T) {
			c := e.client(t, overTLS)
			const users = 600
			gray := 0
			for i := range users {
				uid := fmt.Sprintf("user-%d", i)
				var hdr metadata.MD
				ctx, cancel := context.WithTimeout(userCtx(uid), 10*time.Second)
				resp, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 10}, grpc.Header(&hdr))
				cancel()
				if err != nil {
					t.Fatalf("UnaryCall(%s): %v", uid, err)
				}
				// A user the gray rule does not claim falls through to the
				// default upstream (stable), uncolored.
				want, group, tag := "stable", "default", ""
				if isGray(uid) {
					want, group, tag = "gray", "gray", "gray"
					gray++
				}
				if resp.GetUsername() != want {
					t.Fatalf("user %s reached %s, the rule says %s", uid, resp.GetUsername(), want)
				}
				if g := hdr.Get("x-gray-group"); len(g) != 1 || g[0] != group {
					t.Fatalf("user %s: x-gray-group metadata %v, want [%s]", uid, g, group)
				}
				if r := strings.Join(hdr.Get("x-gray-rule"), ","); r != map[bool]string{true: "grpc_gray"}[isGray(uid)] {
					t.Fatalf("user %s: x-gray-rule metadata %q", uid, r)
				}
				if len(hdr.Get("x-request-id")) != 1 || len(hdr.Get("x-backend")) != 1 {
					t.Fatalf("user %s: metadata %v lacks x-request-id or the upstream's own", uid, hdr)
				}
				if resp.GetHostname() != tag || resp.GetServerId() != uid {
					t.Fatalf("upstream saw X-Gray-Tag %q and x-user-id %q, want %q and %q", resp.GetHostname(), resp.GetServerId(), tag, uid)
				}
				if len(resp.GetPayload().GetBody()) != 10 {
					t.Fatalf("payload of %d bytes, want 10", len(resp.GetPayload().GetBody()))
				}
			}
			if share := float64(gray) / users; share < 0.25 || share > 0.35 {
				t.Errorf("%d of %d users (%.1f%%) reached gray, want about 30%%", gray, users, 100*share)
			}
		})
	}
}

// TestGRPCStreaming: server, client and bidirectional streaming through
// the gateway, to the pool the user's decision names, trailers and all.
func TestGRPCStreaming(t *testing.T) {
	e := startGRPC(t, grpcConfig)
	grayUser, stableUser := "", ""
	for i := 0; grayUser == "" || stableUser == ""; i++ {
		if uid := fmt.Sprintf("u%d", i); isGray(uid) {
			grayUser = uid
		} else {
			stableUser = uid
		}
	}
	for _, overTLS := range []bool{true, false} {
		c := e.client(t, overTLS)
		for _, u := range []struct{ uid, want string }{{grayUser, "gray"}, {stableUser, "stable"}} {
			t.Run(fmt.Sprintf("tls=%v/%s", overTLS, u.want), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(userCtx(u.uid), 20*time.Second)
				defer cancel()

				// Server streaming: 20 messages of growing size, spaced out.
				var params []*testpb.ResponseParameters
				for i := 1; i <= 20; i++ {
					params = append(params, &testpb.ResponseParameters{Size: int32(i * 1000), IntervalUs: 2000})
				}
				ss, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: params})
				if err != nil {
					t.Fatal(err)
				}
				for i := 1; ; i++ {
					m, err := ss.Recv()
					if err == io.EOF {
						if i != 21 {
							t.Fatalf("server stream ended after %d messages, want 20", i-1)
						}
						break
					}
					if err != nil {
						t.Fatalf("server stream message %d: %v", i, err)
					}
					if b := m.GetPayload().GetBody(); len(b) != i*1000 || !strings.HasPrefix(string(b), u.want) {
						t.Fatalf("message %d: %d bytes %.10q, want %d from %s", i, len(b), b, i*1000, u.want)
					}
				}

				// Client streaming: 50 messages of 1 KiB.
				cs, err := c.StreamingInputCall(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for range 50 {
					if err := cs.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: make([]byte, 1024)}}); err != nil {
						t.Fatal(err)
					}
				}
				agg, err := cs.CloseAndRecv()
				if err != nil {
					t.Fatal(err)
				}
				hdr, _ := cs.Header()
				if agg.GetAggregatedPayloadSize() != 50*1024 || strings.Join(hdr.Get("x-backend"), "") != u.want {
					t.Fatalf("client stream: %d bytes from %v, want %d from %s", agg.GetAggregatedPayloadSize(), hdr.Get("x-backend"), 50*1024, u.want)
				}

				// Bidi ping-pong: each request is answered before the next
				// is sent, so the gateway must relay both ways at once.
				bs, err := c.FullDuplexCall(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for i := 1; i <= 30; i++ {
					if err := bs.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: int32(i)}}}); err != nil {
						t.Fatal(err)
					}
					m, err := bs.Recv()
					if err != nil {
						t.Fatalf("ping %d: %v", i, err)
					}
					if want := fmt.Sprintf("%s:%d", u.want, i); string(m.GetPayload().GetBody()) != want {
						t.Fatalf("pong %d = %q, want %q", i, m.GetPayload().GetBody(), want)
					}
				}
				// A status from the server mid-stream ends it, trailers
				// relayed.
				if err := bs.Send(&testpb.StreamingOutputCallRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.FailedPrecondition), Message: "stop here"}}); err != nil {
					t.Fatal(err)
				}
				if _, err := bs.Recv(); status.Code(err) != codes.FailedPrecondition || status.Convert(err).Message() != "stop here" {
					t.Fatalf("bidi end: %v, want FailedPrecondition \"stop here\"", err)
				}
			})
		}
	}
}

// TestGRPCDeadlinesAndCancel: grpc-timeout bounds the call both at the
// upstream and at the gateway; a client's cancel reaches the upstream; an
// upstream's status comes back as it is.
func TestGRPCDeadlinesAndCancel(t *testing.T) {
	e := startGRPC(t, grpcConfig)
	c := e.client(t, false)
	stableUser := ""
	for i := 0; stableUser == ""; i++ {
		if uid := fmt.Sprintf("u%d", i); !isGray(uid) {
			stableUser = uid
		}
	}
	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(userCtx(stableUser, "x-sleep", "5s"), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("slow call: %v, want DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("the deadline took %v to fire", d)
		}
	})
	t.Run("status", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(userCtx(stableUser), 10*time.Second)
		defer cancel()
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.NotFound), Message: "no such thing"}})
		if status.Code(err) != codes.NotFound || status.Convert(err).Message() != "no such thing" {
			t.Fatalf("UnaryCall: %v, want NotFound \"no such thing\"", err)
		}
	})
	t.Run("client cancel reaches the upstream", func(t *testing.T) {
		ctx, cancel := context.WithCancel(userCtx(stableUser))
		ss, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{
			{Size: 10}, {Size: 10, IntervalUs: 10_000_000},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ss.Recv(); err != nil {
			t.Fatal(err)
		}
		cancel()
		select {
		case <-e.stable.svc.canceled:
		case <-time.After(10 * time.Second):
			t.Fatal("the upstream's stream was not cancelled")
		}
	})
	t.Run("upstream gone is UNAVAILABLE from the gateway", func(t *testing.T) {
		e2 := startGRPC(t, strings.Replace(grpcConfig, `{addr: "{{stable}}"}`, `{addr: "127.0.0.1:1"}`, 1))
		c2 := e2.client(t, true)
		ctx, cancel := context.WithTimeout(userCtx(stableUser), 10*time.Second)
		defer cancel()
		// A trailers-only answer: gRPC hands its metadata over as
		// trailers.
		var tr metadata.MD
		_, err := c2.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Trailer(&tr))
		if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), `upstream "stable" unreachable`) {
			t.Fatalf("UnaryCall: %v, want UNAVAILABLE naming the pool", err)
		}
		if g := tr.Get("x-gray-group"); len(g) != 1 || g[0] != "default" || len(tr.Get("x-request-id")) != 1 {
			t.Errorf("the gateway's error carries metadata %v, want x-gray-group default and x-request-id", tr)
		}
	})
}

// TestGRPCBreaker: a gray server that answers UNAVAILABLE opens the gray
// rule's breaker, and gray users are then served by stable.
func TestGRPCBreaker(t *testing.T) {
	e := startGRPC(t, grpcConfig+`
breaker: {window: 10s, min_requests: 10, error_rate: 50, open_for: 1m}
`)
	e.gray.svc.unavailable.Store(true)
	c := e.client(t, false)
	var grayUsers []string
	for i := 0; len(grayUsers) < 40; i++ {
		if uid := fmt.Sprintf("g%d", i); isGray(uid) {
			grayUsers = append(grayUsers, uid)
		}
	}
	failures, degraded := 0, 0
	for _, uid := range grayUsers {
		var hdr metadata.MD
		ctx, cancel := context.WithTimeout(userCtx(uid), 10*time.Second)
		resp, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&hdr))
		cancel()
		switch {
		case status.Code(err) == codes.Unavailable && strings.Contains(status.Convert(err).Message(), "gray is failing"):
			failures++
			if degraded > 0 {
				t.Fatalf("user %s reached the failing gray after the breaker opened", uid)
			}
		case err != nil:
			t.Fatalf("UnaryCall(%s): %v", uid, err)
		case resp.GetUsername() == "stable" && strings.Join(hdr.Get("x-gray-degraded"), "") == "breaker":
			degraded++
			if resp.GetHostname() != "stable" {
				t.Errorf("a request degraded to stable carries X-Gray-Tag %q", resp.GetHostname())
			}
		default:
			t.Fatalf("user %s: answered by %s with metadata %v", uid, resp.GetUsername(), hdr)
		}
	}
	if failures < 10 || degraded == 0 {
		t.Fatalf("%d UNAVAILABLE answers, then %d degraded to stable; want the breaker to open after its min_requests", failures, degraded)
	}
	if s := breakerStates(e.gw); s != "open" {
		t.Errorf("breaker state %q, want open", s)
	}
}

func breakerStates(g *Gateway) string {
	var out []string
	for _, b := range g.Status().Breakers {
		out = append(out, b.State.String())
	}
	return strings.Join(out, ",")
}

// TestGRPCKillGrayUnderLoad: while clients keep making unary calls, the
// gray server is killed. A call that had started on gray may fail (it was
// lost with the server); every call that had not, because it began after
// the kill, is answered (by stable, through the fallback and then the
// breaker), and no call fails with anything but UNAVAILABLE.
func TestGRPCKillGrayUnderLoad(t *testing.T) {
	e := startGRPC(t, grpcConfig+`
breaker: {window: 10s, min_requests: 20, error_rate: 50, open_for: 1m}
`)
	c := e.client(t, false)
	var (
		mu       sync.Mutex
		killedAt time.Time
		calls    atomic.Int64
		failed   []string
		late     []string
	)
	var killed atomic.Bool
	stop := underLoad(8, func(w, n int) {
		uid := fmt.Sprintf("k%d-%d", w, n%50)
		id := fmt.Sprintf("%d-%d", w, n)
		began := time.Now()
		ctx, cancel := context.WithTimeout(userCtx(uid, "x-call-id", id), 10*time.Second)
		defer cancel()
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
		calls.Add(1)
		if err == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if status.Code(err) != codes.Unavailable {
			failed = append(failed, fmt.Sprintf("call %s: %v", id, err))
			return
		}
		if killed.Load() && began.After(killedAt) {
			late = append(late, fmt.Sprintf("call %s began %v after the kill: %v", id, began.Sub(killedAt), err))
			return
		}
		e.gray.svc.mu.Lock()
		onGray := e.gray.svc.started[id]
		e.gray.svc.mu.Unlock()
		if !onGray && isGray(uid) {
			// Written to gray's connection as it died, never read by gray:
			// lost in flight with the server, like those it had read.
			failed = append(failed, fmt.Sprintf("call %s (not seen by gray) during the kill: %v", id, err))
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for calls.Load() < 400 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	e.gray.srv.Stop()
	mu.Lock()
	killedAt = time.Now()
	killed.Store(true)
	mu.Unlock()
	before := calls.Load()
	for calls.Load() < before+600 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if calls.Load() < before+600 {
		t.Fatalf("only %d calls after the kill", calls.Load()-before)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(late) > 0 {
		t.Errorf("%d calls that began after gray was killed failed: %v", len(late), late[:min(len(late), 5)])
	}
	for _, f := range failed {
		t.Log(f)
	}
	if n := len(failed); n > 8 {
		// At most the calls in flight at the kill: one per worker.
		t.Errorf("%d calls failed around the kill, more than the 8 that could be in flight", n)
	}
}

// TestGRPCRulesByMethod: rules match gRPC by path_prefix on the method's
// path and by CEL on request.grpc.service and request.grpc.method.
func TestGRPCRulesByMethod(t *testing.T) {
	e := startGRPC(t, `
default_upstream: stable
upstreams:
  stable: {protocol: h2c, instances: [{addr: "{{stable}}"}]}
  gray:   {protocol: h2c, instances: [{addr: "{{gray}}"}]}
rules:
  - {key: empty_gray, type: gray, gray_percent: 100, conditions: {path_prefix: ["/grpc.testing.TestService/EmptyCall"]}, targets: {gray: gray, stable: stable}}
  - key: input_gray
    type: gray
    gray_percent: 100
    when: "request.grpc.service == 'grpc.testing.TestService' && request.grpc.method == 'StreamingInputCall'"
    targets: {gray: gray, stable: stable}
`)
	c := e.client(t, false)
	ctx, cancel := context.WithTimeout(userCtx("u1"), 10*time.Second)
	defer cancel()
	var hdr metadata.MD
	if _, err := c.EmptyCall(ctx, &testpb.Empty{}, grpc.Header(&hdr)); err != nil || strings.Join(hdr.Get("x-backend"), "") != "gray" || strings.Join(hdr.Get("x-gray-rule"), "") != "empty_gray" {
		t.Errorf("EmptyCall: %v, metadata %v; want gray by rule empty_gray", err, hdr)
	}
	resp, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&hdr))
	if err != nil || resp.GetUsername() != "stable" || len(hdr.Get("x-gray-rule")) != 0 {
		t.Errorf("UnaryCall: %v from %q, metadata %v; want stable, no rule", err, resp.GetUsername(), hdr)
	}
	cs, err := c.StreamingInputCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	hdr, _ = cs.Header()
	if strings.Join(hdr.Get("x-backend"), "") != "gray" || strings.Join(hdr.Get("x-gray-rule"), "") != "input_gray" {
		t.Errorf("StreamingInputCall metadata %v; want gray by rule input_gray (CEL on request.grpc)", hdr)
	}
}
