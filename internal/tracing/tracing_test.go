package tracing

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// receiver is an OTLP/HTTP collector on 127.0.0.1: it decodes every
// protobuf export posted to path.
type receiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
	res   []*commonpb.KeyValue
	bad   []string
}

func newReceiver(t *testing.T, path string) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		if req.Method != "POST" || req.URL.Path != path || req.Header.Get("Content-Type") != "application/x-protobuf" {
			r.bad = append(r.bad, req.Method+" "+req.URL.Path+" "+req.Header.Get("Content-Type"))
			w.WriteHeader(404)
			return
		}
		var ex coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &ex); err != nil {
			r.bad = append(r.bad, "undecodable: "+err.Error())
			w.WriteHeader(400)
			return
		}
		for _, rs := range ex.ResourceSpans {
			r.res = rs.Resource.Attributes
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) got() ([]*tracepb.Span, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...), append([]string(nil), r.bad...)
}

// headers is a map-backed HeaderGetter and HeaderSetter.
type headers map[string]string

func (h headers) Get(k string) string { return h[strings.ToLower(k)] }
func (h headers) Set(k, v string)     { h[strings.ToLower(k)] = v }

func attrs(kvs []*commonpb.KeyValue) map[string]any {
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

func newTracer(t *testing.T, endpoint string, ratio float64) *Tracer {
	t.Helper()
	tr, err := New(Options{Endpoint: endpoint, SampleRatio: ratio, ServiceName: "graygate-test", ServiceVersion: "v9", BatchTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr
}

const (
	parentTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentSpan  = "00f067aa0ba902b7"
)

// TestExportThroughOTLP: spans reach an OTLP/HTTP receiver at
// <otlp_endpoint>/v1/traces, as protobuf, with the inbound traceparent's
// span as their parent, graygate's and the HTTP attributes, and the status
// of the outcome; the outgoing traceparent names graygate's span.
func TestExportThroughOTLP(t *testing.T) {
	rcv := newReceiver(t, "/collector/v1/traces")
	tr := newTracer(t, rcv.srv.URL+"/collector/", 0) // ratio 0: only sampled parents are traced

	in := headers{"traceparent": "00-" + parentTrace + "-" + parentSpan + "-01", "tracestate": "vendor=abc,other=1"}
	sp := tr.Start(in, &ServerRequest{Method: "GET", Path: "/api/user/profile", Scheme: "http", ServerAddress: "shop.example", ServerPort: 8080,
		ProtocolVersion: "1.1", ClientAddress: "10.1.2.3", UserAgent: "curl/8"})
	sp.Decided("user_v2", "gray", "gray-pool", "")
	out := headers{}
	sp.Inject(out)
	sp.End(200, "")

	failed := tr.Start(headers{"traceparent": "00-" + parentTrace + "-" + parentSpan + "-01"}, &ServerRequest{Method: "BREW", Path: "/pot", Scheme: "https"})
	failed.Decided("user_v2", "stable", "stable-pool", "fallback")
	failed.End(502, "connect")
	client := tr.Start(headers{"traceparent": "00-" + parentTrace + "-" + parentSpan + "-01"}, &ServerRequest{Method: "GET", Path: "/missing"})
	client.End(404, "")

	if err := tr.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var spans []*tracepb.Span
	deadline := time.Now().Add(10 * time.Second)
	for {
		var bad []string
		spans, bad = rcv.got()
		if len(bad) > 0 {
			t.Fatalf("the receiver got %v", bad)
		}
		if len(spans) == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(spans) != 3 {
		t.Fatalf("received %d spans, want 3", len(spans))
	}
	if ra := attrs(rcv.res); ra["service.name"] != "graygate-test" || ra["service.version"] != "v9" {
		t.Errorf("resource = %v", ra)
	}
	byPath := map[string]*tracepb.Span{}
	for _, s := range spans {
		byPath[attrs(s.Attributes)["url.path"].(string)] = s
		if hex.EncodeToString(s.TraceId) != parentTrace || hex.EncodeToString(s.ParentSpanId) != parentSpan {
			t.Errorf("span %s: trace %x parent %x, want the inbound traceparent's", s.Name, s.TraceId, s.ParentSpanId)
		}
		if s.Kind != tracepb.Span_SPAN_KIND_SERVER {
			t.Errorf("span %s kind = %v", s.Name, s.Kind)
		}
	}
	ok := byPath["/api/user/profile"]
	want := map[string]any{
		"graygate.rule": "user_v2", "graygate.group": "gray", "graygate.upstream": "gray-pool", "graygate.degraded": false,
		"http.request.method": "GET", "url.path": "/api/user/profile", "url.scheme": "http", "server.address": "shop.example",
		"server.port": int64(8080), "network.protocol.name": "http", "network.protocol.version": "1.1", "client.address": "10.1.2.3",
		"user_agent.original": "curl/8", "http.response.status_code": int64(200),
	}
	got := attrs(ok.Attributes)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("attribute %s = %v, want %v", k, got[k], v)
		}
	}
	if ok.Name != "GET" || ok.Status.GetCode() != tracepb.Status_STATUS_CODE_UNSET {
		t.Errorf("span %q status %v", ok.Name, ok.Status)
	}
	if wantTP := "00-" + parentTrace + "-" + hex.EncodeToString(ok.SpanId) + "-01"; out["traceparent"] != wantTP {
		t.Errorf("outgoing traceparent = %q, want %q (graygate's span as the parent)", out["traceparent"], wantTP)
	}
	if out["tracestate"] != "vendor=abc,other=1" {
		t.Errorf("outgoing tracestate = %q", out["tracestate"])
	}

	bad := byPath["/pot"]
	ba := attrs(bad.Attributes)
	if bad.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || ba["error.type"] != "connect" || ba["http.response.status_code"] != int64(502) {
		t.Errorf("failed span: status %v attributes %v", bad.Status, ba)
	}
	if bad.Name != "HTTP" || ba["http.request.method"] != "_OTHER" || ba["http.request.method_original"] != "BREW" {
		t.Errorf("an unknown method: name %q attributes %v", bad.Name, ba)
	}
	if ba["graygate.degraded"] != true || ba["graygate.degraded_reason"] != "fallback" {
		t.Errorf("degraded attributes %v", ba)
	}
	if nf := byPath["/missing"]; nf.Status.GetCode() != tracepb.Status_STATUS_CODE_UNSET {
		t.Errorf("a 404 made the server span %v", nf.Status)
	}
}

// TestParentBasedSampling: a sampled parent is always sampled, an
// unsampled one never, and new traces follow the ratio; traceparent is
// propagated in every case.
func TestParentBasedSampling(t *testing.T) {
	rcv := newReceiver(t, "/v1/traces")
	tests := []struct {
		name        string
		ratio       float64
		traceparent string
		want        float64 // share sampled
	}{
		{"sampled parent, ratio 0", 0, "00-" + parentTrace + "-" + parentSpan + "-01", 1},
		{"unsampled parent, ratio 1", 1, "00-" + parentTrace + "-" + parentSpan + "-00", 0},
		{"no parent, ratio 1", 1, "", 1},
		{"no parent, ratio 0", 0, "", 0},
		{"no parent, ratio 0.5", 0.5, "", 0.5},
		{"a malformed traceparent is a new trace", 1, "00-zz-" + parentSpan + "-01", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTracer(t, rcv.srv.URL, tt.ratio)
			const n = 2000
			sampled := 0
			for range n {
				in := headers{}
				if tt.traceparent != "" {
					in["traceparent"] = tt.traceparent
				}
				sp := tr.Start(in, &ServerRequest{Method: "GET", Path: "/"})
				out := headers{}
				sp.Inject(out)
				sc := sp.SpanContext()
				if sc.IsSampled() {
					sampled++
				}
				if sc.IsSampled() != sp.Recording() {
					t.Fatal("a sampled span is not recorded, or the reverse")
				}
				flags := "-00"
				if sc.IsSampled() {
					flags = "-01"
				}
				if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + flags; out["traceparent"] != want {
					t.Fatalf("traceparent = %q, want %q", out["traceparent"], want)
				}
				if strings.HasPrefix(tt.traceparent, "00-"+parentTrace) {
					if sc.TraceID().String() != parentTrace {
						t.Fatalf("the trace id of the parent is lost: %s", sc.TraceID())
					}
				}
				sp.End(200, "")
			}
			share := float64(sampled) / n
			if share < tt.want-0.05 || share > tt.want+0.05 {
				t.Errorf("sampled %.3f, want %.2f", share, tt.want)
			}
		})
	}
}

func TestTracesURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"},
		{"http://127.0.0.1:4318/", "http://127.0.0.1:4318/v1/traces"},
		{"https://otel.example/base", "https://otel.example/base/v1/traces"},
	}
	for _, tt := range tests {
		if got, err := TracesURL(tt.in); err != nil || got != tt.want {
			t.Errorf("TracesURL(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	if _, err := TracesURL("127.0.0.1:4318"); err == nil {
		t.Error("an endpoint without a scheme is accepted")
	}
	if _, err := New(Options{Endpoint: "http://h:1", SampleRatio: 2}); err == nil {
		t.Error("a ratio of 2 is accepted")
	}
}
