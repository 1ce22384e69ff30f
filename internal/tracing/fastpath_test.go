package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// byteSink is a TextMapCarrier and a ByteSetter that copies what it is
// given, as the data plane's header sink does.
type byteSink struct{ fields []string }

func (b *byteSink) SetBytes(k string, v []byte) { b.fields = append(b.fields, k+": "+string(v)) }
func (b *byteSink) Set(k, v string)             { b.fields = append(b.fields, k+": "+v) }
func (b *byteSink) Get(string) string           { return "" }
func (b *byteSink) Keys() []string              { return nil }

// noAllocSink is byteSink without the copy, for counting allocations.
type noAllocSink struct{ n int }

func (b *noAllocSink) SetBytes(_ string, v []byte) { b.n += len(v) }
func (b *noAllocSink) Set(_, v string)             { b.n += len(v) }
func (b *noAllocSink) Get(string) string           { return "" }
func (b *noAllocSink) Keys() []string              { return nil }

// TestFastPathMatchesSDK starts each kind of span through Start and,
// beside it, through a plain SDK provider with the same sampler
// (ParentBased(TraceIDRatioBased)): the span's identity and recording,
// and the traceparent and tracestate Inject writes, must be what the SDK
// and propagation.TraceContext make of the same request. Only the ids
// the SDK draws at random (the span id, a new trace's id) differ.
func TestFastPathMatchesSDK(t *testing.T) {
	const tp = "00-" + parentTrace + "-" + parentSpan
	tests := []struct {
		name  string
		ratio float64
		in    headers
	}{
		{"no parent, not sampled", 0, headers{}},
		{"unsampled parent", 1, headers{"traceparent": tp + "-00"}},
		{"unsampled parent with tracestate", 1, headers{"traceparent": tp + "-00", "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"}},
		{"unsampled parent, other flags", 1, headers{"traceparent": tp + "-02"}},
		{"a tracestate without a traceparent", 0, headers{"tracestate": "congo=t61rcWkgMzE"}},
		{"a malformed traceparent", 0, headers{"traceparent": "00-zz-" + parentSpan + "-01"}},
		{"an all-zero trace id", 0, headers{"traceparent": "00-00000000000000000000000000000000-" + parentSpan + "-01"}},
		{"sampled parent", 0, headers{"traceparent": tp + "-01", "tracestate": "congo=t61rcWkgMzE"}},
		{"no parent, sampled", 1, headers{}},
	}
	req := &ServerRequest{Method: "GET", Path: "/"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := New(Options{SampleRatio: tt.ratio, Exporter: discard{}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
			ref := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(tt.ratio))))
			t.Cleanup(func() { _ = ref.Shutdown(context.Background()) })

			sp := tr.Start(tt.in, req)
			defer sp.End(200, "")
			rctx := propagation.TraceContext{}.Extract(context.Background(), carrier{tt.in})
			_, rspan := ref.Tracer("ref").Start(rctx, "GET", trace.WithSpanKind(trace.SpanKindServer))
			defer rspan.End()

			got, want := sp.SpanContext(), rspan.SpanContext()
			if !got.IsValid() || got.IsRemote() {
				t.Fatalf("span context %+v: want a valid local one", got)
			}
			if sp.Recording() != rspan.IsRecording() || got.TraceFlags() != want.TraceFlags() ||
				got.TraceState().String() != want.TraceState().String() {
				t.Errorf("recording %v flags %v tracestate %q; the SDK's: %v %v %q", sp.Recording(), got.TraceFlags(),
					got.TraceState().String(), rspan.IsRecording(), want.TraceFlags(), want.TraceState().String())
			}
			if parent := trace.SpanContextFromContext(rctx); parent.IsValid() {
				if got.TraceID() != parent.TraceID() || got.SpanID() == parent.SpanID() {
					t.Errorf("trace %s span %s: want the parent's trace %s and a span id of its own", got.TraceID(), got.SpanID(), parent.TraceID())
				}
			} else if got.TraceID() == want.TraceID() {
				t.Errorf("a new trace reused trace id %s", got.TraceID())
			}

			// What Inject writes, through a plain setter and a
			// ByteSetter, is what TraceContext writes for that span.
			wantOut := headers{}
			propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), got), carrier{wantOut})
			plain := headers{}
			sp.Inject(plain)
			if len(plain) != len(wantOut) || plain["traceparent"] != wantOut["traceparent"] || plain["tracestate"] != wantOut["tracestate"] {
				t.Errorf("Inject wrote %v, want %v", plain, wantOut)
			}
			var bs byteSink
			sp.Inject(&bs)
			var wantFields []string
			if ts := wantOut["tracestate"]; ts != "" {
				wantFields = append(wantFields, "tracestate: "+ts)
			}
			wantFields = append(wantFields, "traceparent: "+wantOut["traceparent"])
			if len(bs.fields) != len(wantFields) {
				t.Fatalf("Inject into a ByteSetter wrote %q, want %q", bs.fields, wantFields)
			}
			for i := range wantFields {
				if bs.fields[i] != wantFields[i] {
					t.Errorf("Inject into a ByteSetter wrote %q, want %q", bs.fields, wantFields)
				}
			}
		})
	}
}

// TestNewTraceSamplingIsTheSDKs: a new trace is sampled exactly when the
// SDK's ratio sampler samples its trace id, so the SDK, given the ids
// Start drew, reaches the decision Start made (were it to draw ids of its
// own, a ratio of 0.5 would record a quarter of the traces, as
// TestParentBasedSampling's share would show).
func TestNewTraceSamplingIsTheSDKs(t *testing.T) {
	tr, err := New(Options{SampleRatio: 0.5, Exporter: discard{}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	root := sdktrace.TraceIDRatioBased(0.5)
	recorded := 0
	for range 2000 {
		sp := tr.Start(headers{}, &ServerRequest{Method: "GET", Path: "/"})
		sc := sp.SpanContext()
		want := root.ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: sc.TraceID()}).Decision == sdktrace.RecordAndSample
		if sp.Recording() != want || sc.IsSampled() != want {
			t.Fatalf("trace %s: recording %v sampled %v, the ratio sampler says %v", sc.TraceID(), sp.Recording(), sc.IsSampled(), want)
		}
		if sp.Recording() {
			recorded++
		}
		sp.End(200, "")
	}
	if recorded < 900 || recorded > 1100 {
		t.Errorf("%d of 2000 new traces recorded at a ratio of 0.5", recorded)
	}
}

// TestUnsampledSpanAllocs: a request without a traceparent whose new trace
// is not sampled costs no allocation, Inject included.
func TestUnsampledSpanAllocs(t *testing.T) {
	tr, err := New(Options{SampleRatio: 0, Exporter: discard{}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	req := &ServerRequest{Method: "GET", Path: "/api/user/profile"}
	in, out := carrier{headers{}}, &noAllocSink{}
	var sp Span
	if a := testing.AllocsPerRun(200, func() {
		sp = tr.Start(in, req)
		sp.Decided("user_v2", "gray", "gray", "")
		sp.Inject(out)
		sp.End(200, "")
	}); a != 0 {
		t.Errorf("an unsampled span allocates %v times", a)
	}
	if out.n == 0 {
		t.Error("nothing was injected")
	}
}
