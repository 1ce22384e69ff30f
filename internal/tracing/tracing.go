// Package tracing is graygate's OpenTelemetry tracing: the tracer provider,
// sampling, W3C propagation and the gray color in baggage.
//
// # Off costs a nil check
//
// New returns a *Tracer; without a tracing config the gateway has none,
// and the data plane's whole cost is `if t != nil`. Nothing in this
// package is global: the provider is never installed as otel's global one,
// so nothing else in the process starts spans through it.
//
// # The provider
//
// Spans are exported over OTLP/HTTP (protobuf) by otlptracehttp to
// <otlp_endpoint>/v1/traces: otlp_endpoint is the collector's base URL, as
// the OTLP spec's OTEL_EXPORTER_OTLP_ENDPOINT is, and because
// WithEndpointURL posts to the URL as given, New appends "/v1/traces"
// itself. The exporter has its own http.Client. A BatchSpanProcessor sends
// spans in the background and drops them when its queue is full, so a
// slow collector never slows requests. Export failures go to
// Options.Logger (component=tracing), a warning when they start and at
// most one a minute after, and a line when exports work again, rather
// than to otel's process-wide error handler, which printed one unscoped
// INFO line per failed batch (loggedExporter). Sampling is parent-based
// (sdktrace.ParentBased): a request whose traceparent says sampled is
// sampled, one that says not sampled is not, and a request without one
// starts a trace that TraceIDRatioBased(sample_ratio) samples.
//
// # An unsampled span costs no SDK call
//
// At sample_ratio 0.01, 99 requests in 100 are not recorded, yet each
// still propagates a traceparent naming graygate's span. Start decides
// sampling itself before it calls the SDK, with the SDK's own functions
// and inputs: the W3C traceparent is read by propagation.TraceContext,
// a new trace's ids come from the generator the provider is given (idGen,
// math/rand/v2 as the SDK's default one), and the decision for a new
// trace is sdktrace.TraceIDRatioBased's ShouldSample on that trace id. A
// sampled span is then started through the SDK with those same ids
// (handed to idGen in the context), so the SDK's ParentBased sampler
// reaches the same decision; an unsampled one is only its SpanContext
// (the parent's trace id, flags and tracestate with a new span id, as
// the SDK's non-recording span has), and Inject formats its traceparent
// into the span itself. A request without a traceparent costs no
// allocation (TestUnsampledSpanAllocs), and the two paths are checked
// against each other (TestFastPathMatchesSDK).
//
// # Per request (the data plane's contract)
//
//  1. Request phase, after the request is framed: sp := t.Start(inbound,
//     describer). It extracts W3C traceparent and tracestate
//     (propagation.TraceContext) and starts the server span; a span it
//     records gets the HTTP semantic-convention attributes of the
//     ServerRequest the describer fills in (a *ServerRequest is one).
//  2. After the decision (and again after a fallback changed it):
//     sp.Decided(rule, group, upstream pool, degraded).
//  3. Upstream request filter: sp.Inject(outgoing) sets traceparent (with
//     graygate's span as the parent, sampled or not: propagation works
//     even for spans that are not recorded) and tracestate, replacing
//     the client's. Baggage is separate and always on (AppendBaggage).
//  4. Logging phase: sp.End(status, failure) with the status sent to the
//     client and, when the gateway itself failed the request, a short
//     reason ("timeout", "connect", "no_instance"): 5xx or a failure make
//     the span's status Error.
//
// # Baggage: the gray color
//
// The request going upstream carries baggage gray.tag=<tag> beside
// X-Gray-Tag (AppendBaggage), so that services which propagate W3C baggage
// carry the color through the whole call chain without code changes. An
// inbound gray.tag is always removed first: from a trusted peer under
// trust_gray_tag the router has honoured it like X-Gray-Tag (GrayTag) and
// it comes back as the decision's tag; from anyone else it is dropped, as
// an untrusted X-Gray-Tag is. Every other member passes through byte for
// byte, in order. otel's baggage.Baggage is not used for that rewrite
// because it holds members in a map (it reorders them), re-encodes their
// values, and rejects the whole header when one member is malformed; it
// is used to decode and encode the gray.tag member itself.
package tracing

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// TracesPath is appended to the collector's base URL (OTLP/HTTP).
const TracesPath = "/v1/traces"

// Span attribute keys of graygate's own decision.
const (
	AttrRule     = attribute.Key("graygate.rule")
	AttrGroup    = attribute.Key("graygate.group")
	AttrUpstream = attribute.Key("graygate.upstream")
	// AttrDegraded is true when the request was served somewhere other
	// than its rule's choice; AttrDegradedReason then says why
	// ("rollback", "breaker", "fallback"), as X-Gray-Degraded does.
	AttrDegraded       = attribute.Key("graygate.degraded")
	AttrDegradedReason = attribute.Key("graygate.degraded_reason")
)

// Options configure New.
type Options struct {
	// Endpoint is the collector's base URL ("http://127.0.0.1:4318").
	Endpoint string
	// SampleRatio is the share of new traces sampled, 0..1.
	SampleRatio float64
	// ServiceName and ServiceVersion are resource attributes.
	ServiceName, ServiceVersion string
	// BatchTimeout is how long spans wait to be exported (default 5s).
	BatchTimeout time.Duration
	// ExportTimeout bounds one export (default 10s).
	ExportTimeout time.Duration
	// Exporter replaces the OTLP/HTTP exporter (tests, benchmarks).
	Exporter sdktrace.SpanExporter
	// Logger receives export failures (a warning when the collector
	// cannot be reached, then at most one a minute) and the recovery,
	// scoped with component=tracing. Default: slog.Default(), which
	// main sets.
	Logger *slog.Logger
}

// Tracer starts graygate's server spans. It is safe for concurrent use.
// A nil *Tracer is tracing off; the data plane checks for nil and calls
// nothing.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	exp      *loggedExporter
	tc       propagation.TraceContext
	// root decides a new trace's sampling: the ratio sampler that the
	// provider's ParentBased sampler delegates to for roots.
	root sdktrace.Sampler
}

// New builds the tracer provider and its exporter. It does not contact the
// collector: exports happen in the background.
func New(o Options) (*Tracer, error) {
	if o.SampleRatio < 0 || o.SampleRatio > 1 {
		return nil, fmt.Errorf("tracing: sample ratio must be 0..1, got %v", o.SampleRatio)
	}
	if o.ServiceName == "" {
		o.ServiceName = "graygate"
	}
	if o.BatchTimeout <= 0 {
		o.BatchTimeout = 5 * time.Second
	}
	if o.ExportTimeout <= 0 {
		o.ExportTimeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	log := o.Logger.With("component", "tracing")
	exp := o.Exporter
	if exp == nil {
		url, err := TracesURL(o.Endpoint)
		if err != nil {
			return nil, err
		}
		exp, err = otlptracehttp.New(context.Background(),
			otlptracehttp.WithEndpointURL(url),
			otlptracehttp.WithHTTPClient(&http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute}}),
			otlptracehttp.WithTimeout(o.ExportTimeout))
		if err != nil {
			return nil, fmt.Errorf("tracing: build the OTLP/HTTP exporter for %s: %w", url, err)
		}
		log = log.With("endpoint", url)
	}
	lexp := &loggedExporter{SpanExporter: exp, log: log, now: time.Now}
	attrs := []attribute.KeyValue{semconv.ServiceName(o.ServiceName)}
	if o.ServiceVersion != "" {
		attrs = append(attrs, semconv.ServiceVersion(o.ServiceVersion))
	}
	root := sdktrace.TraceIDRatioBased(o.SampleRatio)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.ParentBased(root)),
		sdktrace.WithIDGenerator(idGen{}),
		sdktrace.WithBatcher(lexp, sdktrace.WithBatchTimeout(o.BatchTimeout), sdktrace.WithExportTimeout(o.ExportTimeout)),
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL, attrs...)),
	)
	return &Tracer{provider: tp, tracer: tp.Tracer("github.com/graygate/graygate"), exp: lexp, root: root}, nil
}

// TracesURL returns where spans go for a collector base URL: the URL with
// "/v1/traces" appended to its path.
func TracesURL(endpoint string) (string, error) {
	if !strings.HasPrefix(endpoint, "http://") && !strings.HasPrefix(endpoint, "https://") {
		return "", fmt.Errorf("tracing: otlp_endpoint must be an http:// or https:// URL, got %q", endpoint)
	}
	return strings.TrimRight(endpoint, "/") + TracesPath, nil
}

// ForceFlush exports every finished span now. It fails if an export
// failed meanwhile (the exporter logs failures rather than handing them
// to the processor; see loggedExporter).
func (t *Tracer) ForceFlush(ctx context.Context) error {
	n := t.exp.count()
	if err := t.provider.ForceFlush(ctx); err != nil {
		return err
	}
	return t.exp.failedSince(n)
}

// Shutdown exports what is left and stops the provider; spans started
// afterwards are not recorded.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if err := t.provider.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("tracing: shut the tracer provider down: %w", err)
	}
	return nil
}

// HeaderGetter reads a request header by name, case-insensitively; the
// fasthttp and net/http codecs each adapt their request to it. It returns
// "" for a missing header.
type HeaderGetter interface{ Get(name string) string }

// HeaderSetter sets (replaces) an outgoing request header.
type HeaderSetter interface{ Set(name, value string) }

// getCarrier and setCarrier adapt them to propagation.TextMapCarrier. A
// getter or setter that is a TextMapCarrier already (the data plane's
// are) is used as it is: wrapping it would allocate on every request.
type getCarrier struct{ h HeaderGetter }

func (c getCarrier) Get(k string) string { return c.h.Get(k) }
func (getCarrier) Set(string, string)    {}
func (getCarrier) Keys() []string        { return nil }

type setCarrier struct{ h HeaderSetter }

func (setCarrier) Get(string) string { return "" }
func (c setCarrier) Set(k, v string) { c.h.Set(k, v) }
func (setCarrier) Keys() []string    { return nil }

// ServerRequest is what the server span records about a request (HTTP
// semantic conventions). Strings may alias request buffers: they are
// copied only when the span is recorded.
type ServerRequest struct {
	// Method is the request method; Path the URL path (no query).
	Method, Path string
	// Scheme is "http" or "https".
	Scheme string
	// ServerAddress and ServerPort are the host the client asked for
	// (Host without the port, and the port).
	ServerAddress string
	ServerPort    int
	// ProtocolVersion is "1.0", "1.1" or "2".
	ProtocolVersion string
	// ClientAddress is the client after trusted-proxy resolution.
	ClientAddress string
	// UserAgent is the User-Agent header.
	UserAgent string
}

// Describer fills in the ServerRequest a span records. Start calls it
// only for a span it records, so that describing a request costs nothing
// for the others; a *ServerRequest describes itself.
type Describer interface {
	Describe(r *ServerRequest)
}

// Describe copies s into r: a ServerRequest is its own Describer.
func (s *ServerRequest) Describe(r *ServerRequest) { *r = *s }

// Span is one request's server span. It is a value the data plane keeps
// for the request (by address: Inject writes into it); the zero Span
// (tracing off) is never used. A recorded span has span (the SDK's) and
// ctx; an unrecorded one only sc, its identity.
type Span struct {
	ctx  context.Context
	span trace.Span
	sc   trace.SpanContext
	// tp holds the traceparent Inject formats for an unrecorded span.
	tp [traceparentLen]byte
}

// traceparentLen is the length of a version 00 traceparent:
// "00-" 32 hex "-" 16 hex "-" 2 hex.
const traceparentLen = 55

// serverKind is the start option of every span graygate starts, made once.
var serverKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// knownMethods are the methods the semantic conventions name; any other is
// recorded as "_OTHER" with http.request.method_original.
var knownMethods = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "QUERY"}

// Start extracts the inbound trace context (W3C traceparent, tracestate)
// from in and starts the server span: a child of the inbound span when
// there is one, else the root of a new trace. Its sampling is parent-based.
func (t *Tracer) Start(in HeaderGetter, d Describer) Span {
	var c propagation.TextMapCarrier
	if tc, ok := in.(propagation.TextMapCarrier); ok {
		c = tc
	} else {
		c = getCarrier{in}
	}
	ctx := context.Background()
	var psc trace.SpanContext
	if c.Get(hdrTraceparent) != "" {
		ctx = t.tc.Extract(ctx, c)
		psc = trace.SpanContextFromContext(ctx)
	}
	if psc.IsValid() {
		if !psc.IsSampled() {
			// ParentBased: a parent that was not sampled makes a child
			// that is not; the SDK's non-recording span has the parent's
			// trace id, flags and tracestate and a span id of its own.
			return Span{sc: psc.WithSpanID(newSpanID()).WithRemote(false)}
		}
	} else {
		tid, sid := newIDs()
		if t.root.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: tid}).Decision == sdktrace.Drop {
			return Span{sc: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})}
		}
		ctx = context.WithValue(ctx, presetKey{}, &presetIDs{tid, sid})
	}
	var req ServerRequest
	r := &req
	d.Describe(r)
	// The name and the method are the constants of knownMethods, never
	// r.Method itself, which may alias a request buffer.
	name, method := "HTTP", "_OTHER"
	for _, m := range knownMethods {
		if m == r.Method {
			name, method = m, m
			break
		}
	}
	ctx, span := t.tracer.Start(ctx, name, serverKind...)
	if span.IsRecording() {
		// A recorded span keeps its attributes until it is exported,
		// long after the request's buffers were reused: copy them.
		attrs := make([]attribute.KeyValue, 0, 10)
		attrs = append(attrs, semconv.HTTPRequestMethodKey.String(method), semconv.URLPath(strings.Clone(r.Path)),
			semconv.URLScheme(strings.Clone(r.Scheme)), semconv.NetworkProtocolName("http"))
		if method == "_OTHER" {
			attrs = append(attrs, semconv.HTTPRequestMethodOriginal(strings.Clone(r.Method)))
		}
		if r.ServerAddress != "" {
			attrs = append(attrs, semconv.ServerAddress(strings.Clone(r.ServerAddress)))
		}
		if r.ServerPort > 0 {
			attrs = append(attrs, semconv.ServerPort(r.ServerPort))
		}
		if r.ProtocolVersion != "" {
			attrs = append(attrs, semconv.NetworkProtocolVersion(strings.Clone(r.ProtocolVersion)))
		}
		if r.ClientAddress != "" {
			attrs = append(attrs, semconv.ClientAddress(strings.Clone(r.ClientAddress)))
		}
		if r.UserAgent != "" {
			attrs = append(attrs, semconv.UserAgentOriginal(strings.Clone(r.UserAgent)))
		}
		span.SetAttributes(attrs...)
	}
	return Span{ctx: ctx, span: span}
}

// Recording reports whether the span is sampled and recorded; when it is
// not, Decided and End do nothing.
func (s *Span) Recording() bool { return s.span != nil && s.span.IsRecording() }

// SpanContext returns the span's identity (trace id, span id, flags).
func (s *Span) SpanContext() trace.SpanContext {
	if s.span != nil {
		return s.span.SpanContext()
	}
	return s.sc
}

// Decided records graygate's decision: the claiming rule ("" for none),
// the group, the upstream pool, and the degradation ("" when the rule's
// choice served the request). It may be called again when a fallback
// changes the decision; the last call wins.
func (s *Span) Decided(rule, group, upstream, degraded string) {
	if !s.Recording() {
		return
	}
	s.span.SetAttributes(AttrRule.String(rule), AttrGroup.String(group), AttrUpstream.String(upstream), AttrDegraded.Bool(degraded != ""))
	if degraded != "" {
		s.span.SetAttributes(AttrDegradedReason.String(degraded))
	}
}

// Inject sets traceparent (graygate's span as the parent; flags say
// whether it is sampled) and tracestate (the inbound one, when there was
// one) on the outgoing request. For an unrecorded span and a ByteSetter
// it does not allocate without a tracestate.
func (s *Span) Inject(out HeaderSetter) {
	if s.span == nil {
		s.injectUnrecorded(out)
		return
	}
	if c, ok := out.(propagation.TextMapCarrier); ok {
		propagation.TraceContext{}.Inject(s.ctx, c)
		return
	}
	propagation.TraceContext{}.Inject(s.ctx, setCarrier{out})
}

// ByteSetter is a HeaderSetter that copies the value during the call,
// as the data plane's does; Inject then hands it the traceparent it
// formatted in the span rather than a string made for it.
type ByteSetter interface {
	SetBytes(name string, value []byte)
}

// injectUnrecorded is propagation.TraceContext's Inject for an
// unrecorded span: the same fields, in the same order, with the same
// value (TestFastPathMatchesSDK), formatted into s.tp.
func (s *Span) injectUnrecorded(out HeaderSetter) {
	if !s.sc.IsValid() {
		return
	}
	if ts := s.sc.TraceState().String(); ts != "" {
		out.Set(hdrTracestate, ts)
	}
	b := s.tp[:0]
	b = append(b, "00-"...)
	tid, sid := s.sc.TraceID(), s.sc.SpanID()
	b = hex.AppendEncode(b, tid[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, sid[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, []byte{byte(s.sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))})
	if bs, ok := out.(ByteSetter); ok {
		bs.SetBytes(hdrTraceparent, b)
		return
	}
	out.Set(hdrTraceparent, string(b))
}

// The W3C trace context headers as propagation.TraceContext names them.
const (
	hdrTraceparent = "traceparent"
	hdrTracestate  = "tracestate"
)

// idGen is the provider's IDGenerator: random ids from math/rand/v2 (as
// the SDK's default generator), except for a span Start has already
// given ids to (presetIDs in the context), which keeps them.
type idGen struct{}

type presetKey struct{}

type presetIDs struct {
	tid trace.TraceID
	sid trace.SpanID
}

func (idGen) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if p, ok := ctx.Value(presetKey{}).(*presetIDs); ok {
		return p.tid, p.sid
	}
	return newIDs()
}

func (idGen) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return newSpanID() }

// newIDs returns a random non-zero trace id and span id.
func newIDs() (trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.NativeEndian.PutUint64(tid[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, newSpanID()
}

// newSpanID returns a random non-zero span id.
func newSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.NativeEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}

// End ends the span with the status code sent to the client. A 5xx, or a
// failure of the gateway's own (a short reason such as "timeout"), makes
// the span's status Error with error.type set (the reason, else the status
// code), as the HTTP semantic conventions say for server spans; a 4xx
// leaves it unset.
func (s *Span) End(status int, failure string) {
	if s.span == nil {
		return
	}
	if s.span.IsRecording() {
		if status > 0 {
			s.span.SetAttributes(semconv.HTTPResponseStatusCode(status))
		}
		if status >= 500 || failure != "" {
			et := failure
			if et == "" {
				et = strconv.Itoa(status)
			}
			s.span.SetAttributes(semconv.ErrorTypeKey.String(et))
			s.span.SetStatus(codes.Error, et)
		}
	}
	s.span.End()
}
