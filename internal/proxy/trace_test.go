package proxy

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/testport"
	"github.com/graygate/graygate/internal/tracing"
)

// otlpReceiver is an OTLP/HTTP collector on 127.0.0.1 that decodes the
// protobuf exports posted to /v1/traces.
type otlpReceiver struct {
	url   string
	mu    sync.Mutex
	spans []*tracepb.Span
	bad   []string
}

func newOTLPReceiver(t testing.TB) *otlpReceiver {
	r := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		var ex coltracepb.ExportTraceServiceRequest
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			r.bad = append(r.bad, req.Method+" "+req.URL.Path)
			w.WriteHeader(http.StatusNotFound)
			return
		}
		if err := proto.Unmarshal(body, &ex); err != nil {
			r.bad = append(r.bad, err.Error())
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		for _, rs := range ex.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

// waitSpans waits until the receiver holds n spans and returns them.
func (r *otlpReceiver) waitSpans(t testing.TB, tr *tracing.Tracer, n int) []*tracepb.Span {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_ = tr.ForceFlush(context.Background())
		r.mu.Lock()
		spans, bad := append([]*tracepb.Span(nil), r.spans...), append([]string(nil), r.bad...)
		r.mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("the receiver got %v", bad)
		}
		if len(spans) >= n || time.Now().After(deadline) {
			if len(spans) != n {
				t.Fatalf("the receiver got %d spans, want %d", len(spans), n)
			}
			return spans
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func spanAttrs(kvs []*commonpb.KeyValue) map[string]any {
	out := map[string]any{}
	for _, kv := range kvs {
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			out[kv.Key] = v.IntValue
		case *commonpb.AnyValue_BoolValue:
			out[kv.Key] = v.BoolValue
		}
	}
	return out
}

// traceBackend answers 200 and reports the trace context and baggage it
// was sent in X-Seen-* response headers.
func traceBackend(t testing.TB) *httptest.Server {
	return h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen-Traceparent", strings.Join(r.Header.Values("Traceparent"), "|"))
		w.Header().Set("X-Seen-Tracestate", strings.Join(r.Header.Values("Tracestate"), "|"))
		w.Header().Set("X-Seen-Baggage", strings.Join(r.Header.Values("Baggage"), "|"))
		_, _ = io.WriteString(w, "ok")
	}))
}

// TestTracingThroughTheListener: through the real listener, over HTTP/1.1
// and HTTP/2, each request gets one server span exported over OTLP/HTTP:
// a sampled inbound traceparent's span is its parent (same trace id), the
// upstream gets a traceparent naming graygate's span and the client's
// tracestate, and the span carries the decision (graygate.rule, group,
// upstream, degraded), the HTTP semantic-convention attributes and the
// status; an unsampled inbound trace exports nothing yet propagates (same
// trace id, a new parent, flags 00); a request without a traceparent
// starts a trace (ratio 1: sampled); a failure of the gateway's own sets
// the span's status to Error with error.type. The baggage goes up with the
// tag, the client's gray.tag stripped.
func TestTracingThroughTheListener(t *testing.T) {
	const (
		inTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		inSpan  = "00f067aa0ba902b7"
	)
	backend := traceBackend(t)
	deadAddr := testport.Refused(t)
	for _, h2 := range []bool{false, true} {
		proto := map[bool]string{false: "1.1", true: "2"}[h2]
		t.Run("HTTP/"+proto, func(t *testing.T) {
			rcv := newOTLPReceiver(t)
			tr, err := tracing.New(tracing.Options{Endpoint: rcv.url, SampleRatio: 1, BatchTimeout: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
			good, bad := poolOf("gray", addrOf(backend)), poolOf("broken", deadAddr)
			d := deciderFunc(func(r attr.Request) router.Decision {
				if r.Path() == "/fail" {
					return router.Decision{Rule: "r1", Group: "gray", Tag: "gray", Target: bad}
				}
				return router.Decision{Rule: "r1", Group: "gray", Tag: "gray", Target: good}
			})
			_, addr := startProxyWith(t, Options{Tracer: tr}, d, listener.Protocols{H2C: true})
			c := clientFor(t, h2)
			do := func(path string, hdr ...string) *http.Response {
				req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
				req.Host = "shop.test:8443"
				req.Header.Set("User-Agent", "trace-test/1")
				for i := 0; i+1 < len(hdr); i += 2 {
					req.Header.Add(hdr[i], hdr[i+1])
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp
			}
			sampled := do("/sampled?q=1", "Traceparent", "00-"+inTrace+"-"+inSpan+"-01", "Tracestate", "vendor=abc", "Baggage", "k=v, gray.tag=forged")
			unsampled := do("/unsampled", "Traceparent", "00-"+inTrace+"-"+inSpan+"-00")
			fresh := do("/fresh")
			failed := do("/fail", "Traceparent", "00-"+inTrace+"-"+inSpan+"-01")
			if failed.StatusCode != http.StatusBadGateway {
				t.Fatalf("/fail = %d, want 502", failed.StatusCode)
			}
			// Two tracestate fields are one list; two traceparent fields
			// are invalid, and a new trace starts (W3C trace-context test
			// suite: test_tracestate_multiple_headers_different_keys,
			// test_traceparent_duplicated).
			states := do("/states", "Traceparent", "00-"+inTrace+"-"+inSpan+"-01", "Tracestate", "a=1", "Tracestate", "b=2")
			dup := do("/dup", "Traceparent", "00-"+inTrace+"-"+inSpan+"-01", "Traceparent", "00-"+inTrace+"-"+inSpan+"-01")
			spans := rcv.waitSpans(t, tr, 5) // the unsampled one is not exported
			byPath := map[string]*tracepb.Span{}
			for _, s := range spans {
				p, _ := spanAttrs(s.Attributes)["url.path"].(string)
				byPath[p] = s
			}

			// The sampled child of the client's span.
			s := byPath["/sampled"]
			if s == nil {
				t.Fatalf("no span for /sampled in %v", spans)
			}
			if hex.EncodeToString(s.TraceId) != inTrace || hex.EncodeToString(s.ParentSpanId) != inSpan || s.Kind != tracepb.Span_SPAN_KIND_SERVER || s.Name != "GET" {
				t.Errorf("span trace %x parent %x kind %v name %q, want trace %s, parent %s, a GET server span", s.TraceId, s.ParentSpanId, s.Kind, s.Name, inTrace, inSpan)
			}
			if got, want := sampled.Header.Get("X-Seen-Traceparent"), fmt.Sprintf("00-%s-%x-01", inTrace, s.SpanId); got != want {
				t.Errorf("upstream traceparent %q, want %q (graygate's span as the parent)", got, want)
			}
			if got := sampled.Header.Get("X-Seen-Tracestate"); got != "vendor=abc" {
				t.Errorf("upstream tracestate %q", got)
			}
			if got := sampled.Header.Get("X-Seen-Baggage"); got != "k=v,gray.tag=gray" {
				t.Errorf("upstream baggage %q, want k=v,gray.tag=gray", got)
			}
			want := map[string]any{
				"graygate.rule": "r1", "graygate.group": "gray", "graygate.upstream": "gray", "graygate.degraded": false,
				"http.request.method": "GET", "url.path": "/sampled", "url.scheme": "http", "server.address": "shop.test",
				"server.port": int64(8443), "network.protocol.version": proto, "client.address": "127.0.0.1",
				"user_agent.original": "trace-test/1", "http.response.status_code": int64(200),
			}
			got := spanAttrs(s.Attributes)
			for k, v := range want {
				if got[k] != v {
					t.Errorf("attribute %s = %v, want %v", k, got[k], v)
				}
			}
			if s.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
				t.Errorf("a 200's span status %v", s.Status)
			}

			// Unsampled: propagated, not exported.
			tp := strings.Split(unsampled.Header.Get("X-Seen-Traceparent"), "-")
			if len(tp) != 4 || tp[1] != inTrace || tp[2] == inSpan || tp[3] != "00" {
				t.Errorf("unsampled upstream traceparent %q, want trace %s, a new parent, flags 00", unsampled.Header.Get("X-Seen-Traceparent"), inTrace)
			}
			if byPath["/unsampled"] != nil {
				t.Error("an unsampled trace's span was exported")
			}

			// A new trace.
			f := byPath["/fresh"]
			if f == nil || len(f.ParentSpanId) != 0 {
				t.Fatalf("span for /fresh %v: want a root span", f)
			}
			if got, want := fresh.Header.Get("X-Seen-Traceparent"), fmt.Sprintf("00-%x-%x-01", f.TraceId, f.SpanId); got != want {
				t.Errorf("upstream traceparent %q, want %q", got, want)
			}

			if got := states.Header.Get("X-Seen-Tracestate"); got != "a=1,b=2" {
				t.Errorf("two tracestate fields: upstream tracestate %q, want a=1,b=2", got)
			}
			// The exported span's trace_state is read after the request's
			// buffers have been reused.
			if st := byPath["/states"]; st == nil || st.TraceState != "a=1,b=2" || hex.EncodeToString(st.TraceId) != inTrace {
				t.Errorf("two tracestate fields: span trace %x, trace_state %q; want trace %s with trace_state a=1,b=2", st.GetTraceId(), st.GetTraceState(), inTrace)
			}
			if d := byPath["/dup"]; d == nil || hex.EncodeToString(d.TraceId) == inTrace || len(d.ParentSpanId) != 0 {
				t.Errorf("two traceparent fields: span trace %x, parent %x; want a new root trace", d.GetTraceId(), d.GetParentSpanId())
			}
			if got := dup.Header.Get("X-Seen-Traceparent"); strings.Contains(got, inTrace) {
				t.Errorf("two traceparent fields: upstream traceparent %q continues the client's trace", got)
			}

			// The gateway's own failure.
			e := byPath["/fail"]
			if e == nil {
				t.Fatal("no span for /fail")
			}
			ea := spanAttrs(e.Attributes)
			if e.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || ea["error.type"] != "unreachable" || ea["http.response.status_code"] != int64(502) ||
				ea["graygate.upstream"] != "broken" {
				t.Errorf("failed span status %v attributes %v, want Error, error.type unreachable, 502", e.Status, ea)
			}
		})
	}
}

// TestUnsampledTracingAllocs: with a tracer whose new traces are never
// sampled (the 99% of sample_ratio 0.01), a request through the real
// listener still sends a valid traceparent upstream and costs the process
// no allocation per request (client, proxy and backend together, as
// BenchmarkTracing measures: a stray background allocation is tolerated
// by the bound, a per-request one is not).
func TestUnsampledTracingAllocs(t *testing.T) {
	var seen sync.Map
	ln := listenLoopback(t)
	s := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if tp := ctx.Request.Header.Peek("Traceparent"); len(tp) > 0 {
			if _, ok := seen.Load("tp"); !ok {
				seen.Store("tp", string(tp))
			}
		}
		ctx.SetBodyString("hello, world")
	}}
	go s.Serve(ln) //nolint:errcheck // returns on Shutdown
	t.Cleanup(func() { _ = s.Shutdown() })
	tr, err := tracing.New(tracing.Options{SampleRatio: 0, Exporter: tracetest.NewNoopExporter()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	d := staticDecider{Rule: "r1", Group: "stable", Tag: "stable", Target: poolOf("stable", ln.Addr().String())}
	_, addr := startProxy(t, Options{Tracer: tr}, d)
	do := itemsRequester(t, addr)
	for range 50 { // warm the pools
		do()
	}
	if a := testing.AllocsPerRun(500, do); a > 0.1 && !raceEnabled {
		t.Errorf("an unsampled traced request allocates %.2f times", a)
	}
	tp, _ := seen.Load("tp")
	parts := strings.Split(fmt.Sprint(tp), "-")
	if len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 || len(parts[2]) != 16 || parts[3] != "00" {
		t.Errorf("upstream traceparent %q, want an unsampled version 00 one", tp)
	}
}
