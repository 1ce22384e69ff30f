package proxy

import (
	"bytes"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/tracing"
)

// The tracing phases of the flow (package tracing's data plane contract)
// and the gray color in W3C baggage. With Options.Tracer nil the span
// phases cost a test of f.traced; the baggage rewrite runs tracing on or
// off, and only for a request that has a baggage field or a tag.

// Header names of the W3C trace context (https://www.w3.org/TR/trace-context/)
// and baggage (https://www.w3.org/TR/baggage/), spelled as the gateway
// writes them.
const (
	hdrBaggage     = "Baggage"
	hdrTraceparent = "Traceparent"
	hdrTracestate  = "Tracestate"
)

// spanHeaders is the client's request as the tracer reads it
// (tracing.HeaderGetter): the trace context from its header (in), the
// rest through the codec's attr.Request view (v), the one way a request
// is seen. It is set only while Start runs.
type spanHeaders struct {
	v  attr.Request
	in inHeader
}

// Get returns every field named name, joined with commas: several
// tracestate fields are one list (W3C Trace Context section 3.3.1.1), and
// several traceparent fields make a value that does not parse, so that a
// new trace starts, as the specification's test suite requires. Only the
// traceparent may alias the request's buffers (it is parsed into the
// span context's ids); anything else is copied, since the tracer keeps
// what it extracts (the tracestate) after the request is gone.
func (h *spanHeaders) Get(name string) string {
	vals := h.in.PeekAll(name)
	switch {
	case len(vals) == 0:
		return ""
	case len(vals) == 1 && name == "traceparent":
		return b2s(vals[0])
	case len(vals) == 1:
		return string(vals[0])
	}
	return string(bytes.Join(vals, comma))
}

var comma = []byte(",")

// Set and Keys make spanHeaders a propagation.TextMapCarrier, which the
// tracer then uses without wrapping it (an allocation per request).
// Extraction only reads.
func (h *spanHeaders) Set(string, string) {}

// Keys is not used by the W3C propagators.
func (h *spanHeaders) Keys() []string { return nil }

// spanSink is the decorate phase's fieldSink as the tracer writes into it
// (tracing.HeaderSetter). It is set only while Inject runs.
type spanSink struct{ s fieldSink }

func (h *spanSink) Set(k, v string) { h.SetBytes(k, s2b(v)) }

// SetBytes makes spanSink a tracing.ByteSetter: addField copies the value
// into the head, so the tracer may format it in a buffer of its own.
func (h *spanSink) SetBytes(k string, v []byte) {
	switch k { // otel's names are lower case; the head's are canonical
	case "traceparent":
		k = hdrTraceparent
	case "tracestate":
		k = hdrTracestate
	}
	h.s.addField(s2b(k), v)
}

// Get and Keys make spanSink a propagation.TextMapCarrier (see
// spanHeaders); injection only writes.
func (h *spanSink) Get(string) string { return "" }

// Keys is not used by the W3C propagators.
func (h *spanSink) Keys() []string { return nil }

// startSpan starts the request's server span, after the decision, from
// the view v the decision was made on (valid only during the call): the
// inbound traceparent and tracestate, then the decision (spanDecided).
// The tracer asks for the HTTP semantic-convention attributes (Describe)
// only when it records the span.
func (f *flow) startSpan(t *tracing.Tracer, v attr.Request, in inHeader) {
	f.spanIn.v, f.spanIn.in = v, in
	f.span = t.Start(&f.spanIn, f)
	f.spanIn.v, f.spanIn.in = nil, nil
	f.traced = true
	f.spanDecided()
}

// Describe is the request as a recorded span describes it
// (tracing.Describer), read from the view startSpan is given. Its strings
// alias the request; the tracer copies them.
func (f *flow) Describe(r *tracing.ServerRequest) {
	v := f.spanIn.v
	version, tls := f.c.protocol()
	*r = tracing.ServerRequest{Method: v.Method(), Path: v.Path(), Scheme: "http", ProtocolVersion: version}
	if tls {
		r.Scheme = "https"
	}
	r.ServerAddress, r.ServerPort = splitHostPort(v.Host(), tls)
	if ip := v.ClientIP(); ip.IsValid() {
		f.spanBuf = ip.AppendTo(f.spanBuf[:0])
		r.ClientAddress = b2s(f.spanBuf)
	}
	r.UserAgent, _ = v.Header("User-Agent")
}

// spanDecided records the decision on the span: after Decide, and again
// when the breaker (Guard) or a fallback (FallBack) changed it.
func (f *flow) spanDecided() {
	if !f.traced {
		return
	}
	up := ""
	if f.d.Target != nil {
		up = f.d.Target.Name
	}
	f.span.Decided(f.d.Rule, f.d.Group, up, f.d.Degraded)
}

// endSpan is the finish phase's part: the span ends with the status the
// client was sent and, when the gateway failed the request itself, the
// short reason (failureType), or, when the upstream broke off the body
// it had started, "timeout" or "upstream_broke_off".
func (f *flow) endSpan() {
	if !f.traced {
		return
	}
	why := f.failType
	if why == "" && f.upErr != nil {
		why = "upstream_broke_off"
		if f.timeout == timeoutUpstreamRead {
			why = "timeout"
		}
	}
	f.span.End(f.status, why)
	f.traced, f.span = false, tracing.Span{}
}

// addTraceFields is the decorate phase's part, after X-Gray-Tag: the
// baggage with the gray color (always), and with tracing on the
// traceparent naming graygate's span as the parent, and the tracestate.
// The client's own fields were dropped by keepRequestHeader.
//
// The baggage is the client's (every field, in order, as one list),
// without any gray.tag member, followed by gray.tag=<the decision's tag>
// (tracing.AppendBaggage): an untrusted client's gray.tag never reaches a
// service that believes it, a trusted one's was honoured by the router
// (trust_gray_tag) and comes back as the tag, and the other members pass
// through untouched. An empty list sends no baggage field.
func (f *flow) addTraceFields(sink fieldSink, in inHeader) {
	if f.sawBaggage || f.d.Tag != "" {
		inbound := ""
		if f.sawBaggage {
			vals := in.PeekAll(hdrBaggage)
			if len(vals) == 1 {
				inbound = b2s(vals[0])
			} else {
				buf := f.bagIn[:0]
				for i, v := range vals {
					if i > 0 {
						buf = append(buf, ',')
					}
					buf = append(buf, v...)
				}
				f.bagIn = buf
				inbound = b2s(buf)
			}
		}
		f.bagOut = tracing.AppendBaggage(f.bagOut[:0], inbound, f.d.Tag)
		if len(f.bagOut) > 0 {
			sink.addField(s2b(hdrBaggage), f.bagOut)
		}
	}
	if f.traced {
		f.spanOut.s = sink
		f.span.Inject(&f.spanOut)
		f.spanOut.s = nil
	}
}

// splitHostPort splits a Host (or :authority) into the server.address and
// server.port of the semantic conventions; without a port, the scheme's.
// It does not allocate.
func splitHostPort(host string, tls bool) (string, int) {
	port := 80
	if tls {
		port = 443
	}
	i := len(host) - 1
	for i >= 0 && host[i] >= '0' && host[i] <= '9' {
		i--
	}
	if i < 0 || host[i] != ':' || i == len(host)-1 {
		return trimBrackets(host), port
	}
	h := host[:i]
	if len(h) > 0 && h[0] != '[' && countColons(h) > 0 {
		return host, port // a bare IPv6 address, no port
	}
	n := 0
	for _, c := range host[i+1:] {
		n = n*10 + int(c-'0')
		if n > 65535 {
			return trimBrackets(h), port
		}
	}
	return trimBrackets(h), n
}

// trimBrackets turns an IPv6 literal's "[::1]" into "::1".
func trimBrackets(h string) string {
	if len(h) >= 2 && h[0] == '[' && h[len(h)-1] == ']' {
		return h[1 : len(h)-1]
	}
	return h
}

func countColons(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			n++
		}
	}
	return n
}
