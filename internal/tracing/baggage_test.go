package tracing

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func TestAppendBaggage(t *testing.T) {
	tests := []struct {
		name, inbound, tag, want string
	}{
		{"nothing", "", "", ""},
		{"tag only", "", "gray", "gray.tag=gray"},
		{"other members kept byte for byte, in order", "userId=alice,serverNode=DF%2028;p=1, isProduction=false", "v2.1",
			"userId=alice,serverNode=DF%2028;p=1,isProduction=false,gray.tag=v2.1"},
		{"an inbound gray.tag is replaced", "a=1,gray.tag=gray,b=2", "stable", "a=1,b=2,gray.tag=stable"},
		{"an inbound gray.tag is stripped without a tag", "gray.tag=gray;prop, a=1", "", "a=1"},
		{"spaces around the key", "a=1, gray.tag = gray ,b=2", "", "a=1,b=2"},
		{"empty members dropped", "a=1,,b=2,", "", "a=1,b=2"},
		{"a malformed member elsewhere is left alone", "a=1,not valid,b", "x", "a=1,not valid,b,gray.tag=x"},
		{"a key that only starts like ours", "gray.tags=1,gray.tag2=2", "", "gray.tags=1,gray.tag2=2"},
		{"a tag that needs encoding", "", "灰度 v2", "gray.tag=" + mustMember(t, "灰度 v2")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(AppendBaggage([]byte("x:"), tt.inbound, tt.tag))
			if got != "x:"+tt.want {
				t.Errorf("AppendBaggage(%q, %q) = %q, want %q", tt.inbound, tt.tag, strings.TrimPrefix(got, "x:"), tt.want)
			}
			if tt.tag != "" {
				if v, ok := GrayTag(tt.want); !ok || v != tt.tag {
					t.Errorf("GrayTag of the result = %q, %v; want %q", v, ok, tt.tag)
				}
			}
		})
	}
}

func mustMember(t *testing.T, v string) string {
	m, err := baggage.NewMemberRaw("gray.tag", v)
	if err != nil {
		t.Fatal(err)
	}
	_, enc, _ := strings.Cut(m.String(), "=")
	return enc
}

func TestGrayTag(t *testing.T) {
	tests := []struct {
		header, want string
		ok           bool
	}{
		{"gray.tag=gray", "gray", true},
		{"userId=alice, gray.tag = v2.1;ttl=3, x=1", "v2.1", true},
		{"gray.tag=%E7%81%B0%E5%BA%A6", "灰度", true},
		{"broken member,gray.tag=gray", "gray", true},
		{"gray.tag=", "", false},
		{"gray.tag=a b", "", false},
		{"gray.tags=x", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		if got, ok := GrayTag(tt.header); got != tt.want || ok != tt.ok {
			t.Errorf("GrayTag(%q) = %q, %v; want %q, %v", tt.header, got, ok, tt.want, tt.ok)
		}
	}
}

// FuzzBaggage: baggage headers come from clients; reading and rewriting
// them never panics, the rewrite never carries an inbound gray.tag, and
// it carries the tag it was given.
func FuzzBaggage(f *testing.F) {
	f.Add("a=1,gray.tag=gray;p", "stable")
	f.Add(",,=,gray.tag=%zz", "")
	f.Add("k=v", "灰度")
	f.Fuzz(func(t *testing.T, inbound, tag string) {
		_, _ = GrayTag(inbound)
		out := string(AppendBaggage(nil, inbound, tag))
		for _, m := range strings.Split(out, ",") {
			if memberKey(m) == GrayTagKey && tag == "" {
				t.Fatalf("AppendBaggage(%q, \"\") = %q keeps a gray.tag", inbound, out)
			}
		}
		if tag != "" && !strings.Contains(tag, ",") {
			if _, err := baggage.NewMemberRaw(GrayTagKey, tag); err == nil {
				if v, ok := GrayTag(out); !ok || v != tag {
					t.Fatalf("AppendBaggage(%q, %q) = %q, whose gray.tag is %q", inbound, tag, out, v)
				}
			}
		}
	})
}

// discard is an exporter that drops everything, for benchmarks.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkOff is the data plane's cost with tracing off: a nil check, and
// the baggage rewrite of a request that has none.
func BenchmarkOff(b *testing.B) {
	var tr *Tracer
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		if tr != nil {
			b.Fatal("on")
		}
		buf = AppendBaggage(buf[:0], "", "gray")
	}
}

// BenchmarkBaggageRewrite rewrites a client's baggage with three members.
func BenchmarkBaggageRewrite(b *testing.B) {
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendBaggage(buf[:0], "userId=alice,gray.tag=gray,serverNode=DF%2028", "stable")
	}
}

// carrier is headers as a propagation.TextMapCarrier.
type carrier struct{ headers }

func (carrier) Keys() []string { return nil }

func benchSpan(b *testing.B, ratio float64, in headers) {
	tr, err := New(Options{SampleRatio: ratio, Exporter: discard{}})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	req := &ServerRequest{Method: "GET", Path: "/api/user/profile", Scheme: "http", ServerAddress: "shop", ProtocolVersion: "1.1", ClientAddress: "10.0.0.1"}
	// As the data plane's are, the request's headers are TextMapCarriers,
	// and the outgoing ones a ByteSetter that copies.
	out, inc := &noAllocSink{}, carrier{in}
	var sp Span // as the data plane's, in a longer-lived value
	b.ReportAllocs()
	for b.Loop() {
		sp = tr.Start(inc, req)
		sp.Decided("user_v2", "gray", "gray", "")
		sp.Inject(out)
		sp.End(200, "")
	}
}

// BenchmarkSpanUnsampled is a request whose span is not sampled (the
// common case at sample_ratio 0.01): traceparent is still propagated.
func BenchmarkSpanUnsampled(b *testing.B) { benchSpan(b, 0, headers{}) }

// BenchmarkSpanUnsampledParent continues a trace its caller did not sample.
func BenchmarkSpanUnsampledParent(b *testing.B) {
	benchSpan(b, 1, headers{"traceparent": "00-" + parentTrace + "-" + parentSpan + "-00"})
}

// BenchmarkSpanSampled records and exports every span.
func BenchmarkSpanSampled(b *testing.B) {
	benchSpan(b, 1, headers{"traceparent": "00-" + parentTrace + "-" + parentSpan + "-01"})
}

func TestAppendBaggageAllocs(t *testing.T) {
	buf := make([]byte, 0, 256)
	if a := testing.AllocsPerRun(100, func() { buf = AppendBaggage(buf[:0], "a=1,gray.tag=x,b=2", "gray") }); a != 0 {
		t.Errorf("AppendBaggage allocates %v times", a)
	}
	if a := testing.AllocsPerRun(100, func() { GrayTag("a=1,b=2") }); a != 0 {
		t.Errorf("GrayTag without the member allocates %v times", a)
	}
}
