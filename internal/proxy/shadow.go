package proxy

import (
	"bytes"
	"iter"
	"net/http"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/mirror"
)

// The shadow phases of the flow: what the data plane does for a request
// whose decision has a Mirror (router.Decision.Mirror), as package mirror
// asks of it. Each runs only for such a request; for every other one the
// whole cost is the test of f.mirror.

// The mirror states of a flow.
const (
	mirrorOff  = iota // no copy: no Mirror on the decision, no set, gRPC or a WebSocket
	mirrorOn          // a copy goes to the set once the primary has answered
	mirrorDrop        // the body is not held (over max_body, or streamed): the copy is handed over to be counted as dropped
)

// keepMirror decides, after the decision, whether the request seen
// through v is mirrored: the decision asks for it and mirroring is on. A
// gRPC call is not (its body is a stream of messages the gateway never
// waits for, and the mirror's transport speaks HTTP/1.1), nor is a
// WebSocket handshake, nor a request that is itself a copy (it carries
// X-Gray-Mirror: a mirror target behind a graygate, or one pointed back
// at it, never makes copies of copies).
func (f *flow) keepMirror(v attr.Request) {
	if f.d.Mirror == nil || f.opts.Mirrors == nil || f.grpc || f.upgrade {
		return
	}
	if _, copied := v.Header(mirror.MirrorHeader); copied {
		return
	}
	f.mirror = mirrorOn
}

// mirrorBody is the admit phase's part: whether the request body the copy
// needs is held. It is when the request has none, or when it was buffered
// (prepareReplay, with the mirror's max_body as a limit) and fits in
// max_body; otherwise the copy is dropped (mirror.Request.BodyTruncated),
// and nothing more is kept for it.
func (f *flow) mirrorBody(cl, inMemory int64) {
	if f.mirror != mirrorOn {
		return
	}
	switch {
	case cl == 0 || cl == -2 || inMemory == 0:
	case f.buffered && int64(len(f.body)) <= f.d.Mirror.MaxBody:
	default:
		f.mirror = mirrorDrop
	}
}

// mirrorBodyLimit is how much of a request body the copy needs the gateway
// to hold, 0 when it needs none.
func (f *flow) mirrorBodyLimit() int64 {
	if f.mirror != mirrorOn {
		return 0
	}
	return f.d.Mirror.MaxBody
}

// keepMirrorResponse is the response phase's part: it copies, into memory
// the copy will own, the status and the header fields of the upstream's
// answer as they arrived, before the gateway removes the hop-by-hop ones
// and adds its own (X-Gray-*, Via), so that the diff compares the primary's
// answer with the mirror's as both upstreams sent them.
//
// For a copy that will be dropped (mirrorDrop) only the status is kept:
// the drop is counted only when the primary was answered, as a copy is
// sent only then.
func (f *flow) keepMirrorResponse(status int, fields iter.Seq2[[]byte, []byte]) {
	if f.mirror == mirrorOff {
		return
	}
	f.mresp = mirror.Response{Status: status}
	f.respEnded = false
	if f.mirror == mirrorOn {
		f.mresp.Header = copyFields(nil, fields)
	}
}

// teeBody copies what passes of the upstream's response body, up to the
// set's MaxResponseBody, for the diff. It is a copy as the bytes go by:
// the client is never made to wait for it.
func (f *flow) teeBody(p []byte) {
	if f.mirror != mirrorOn || f.mresp.BodyTruncated || len(p) == 0 {
		return
	}
	limit := f.opts.Mirrors.MaxResponseBody()
	room := limit - int64(len(f.mresp.Body))
	if int64(len(p)) > room {
		p, f.mresp.BodyTruncated = p[:max(room, 0)], true
	}
	if f.mresp.Body == nil {
		f.mresp.Body = make([]byte, 0, min(limit, max(int64(len(p)), 4<<10)))
	}
	f.mresp.Body = append(f.mresp.Body, p...)
}

// sendMirror is the finish phase's part, after OnDone: it hands the copy
// to the set, which queues it or drops it and returns at once. It is
// skipped when there is nothing to compare: the gateway answered itself
// (499, 502, 503, 504: no response was kept), or the primary's answer was
// not read to its end (a client that left, an upstream that broke off).
// The request is the one the codec sent upstream (codec.sentRequest); the
// set owns it and the response from here on.
func (f *flow) sendMirror() {
	if f.mirror == mirrorOff || !f.respEnded || f.mresp.Status == 0 {
		return
	}
	if f.mirror == mirrorDrop {
		// Counted as dropped by the set: the body was not held.
		f.opts.Mirrors.Mirror(f.d.Mirror, mirror.Request{BodyTruncated: true}, mirror.Response{})
		return
	}
	req := f.c.sentRequest()
	if f.buffered && len(f.body) > 0 {
		req.Body = bytes.Clone(f.body)
	}
	resp := f.mresp
	f.mresp = mirror.Response{}
	f.opts.Mirrors.Mirror(f.d.Mirror, req, resp)
}

// copyFields appends fields to dst as mirror.Headers whose strings share
// one new buffer: the set owns them. fields is iterated once (the order
// of a net/http header is not stable between two iterations).
func copyFields(dst []mirror.Header, fields iter.Seq2[[]byte, []byte]) []mirror.Header {
	var buf []byte
	var ends []int // the end of each name, then of its value, in buf
	for k, v := range fields {
		buf = append(buf, k...)
		ends = append(ends, len(buf))
		buf = append(buf, v...)
		ends = append(ends, len(buf))
	}
	s := b2s(buf) // buf is never written again
	start := 0
	for i := 0; i+1 < len(ends); i += 2 {
		dst = append(dst, mirror.Header{Name: s[start:ends[i]], Value: s[ends[i]:ends[i+1]]})
		start = ends[i+1]
	}
	return dst
}

// netFields iterates over a net/http header's fields.
func netFields(h http.Header) iter.Seq2[[]byte, []byte] {
	return func(yield func(k, v []byte) bool) {
		for k, vs := range h {
			for _, v := range vs {
				if !yield(s2b(k), s2b(v)) {
					return
				}
			}
		}
	}
}

// sentNetRequest is the copy of a request sent through a net/http
// transport: its request line, Host, header fields and the trailer fields
// sent after its body (net/http's strings are never reused, so they are
// shared). The copy is made once the primary answered: a body the
// mirror needs was held, and read to its end, so the trailer fields are
// filled in.
func sentNetRequest(out *http.Request) mirror.Request {
	if out == nil {
		return mirror.Request{}
	}
	r := mirror.Request{Method: out.Method, URI: out.URL.RequestURI(), Host: out.Host}
	r.Header = appendNetFields(r.Header, out.Header)
	r.Trailer = appendNetFields(nil, out.Trailer)
	return r
}

// appendNetFields appends h's fields to dst; a name without a value (an
// announced trailer field that did not come) is left out.
func appendNetFields(dst []mirror.Header, h http.Header) []mirror.Header {
	for k, vs := range h {
		for _, v := range vs {
			dst = append(dst, mirror.Header{Name: k, Value: v})
		}
	}
	return dst
}

// sentHead is the copy of a request whose head the HTTP/1.1 codec wrote
// (buildRequest): the request line, the Host and the other header lines,
// in one new string. The framing fields in it (Content-Length,
// Transfer-Encoding, Expect) are dropped by the set.
func sentHead(head []byte) mirror.Request {
	s := string(head)
	var r mirror.Request
	line, rest, _ := cutLine(s)
	method, line, _ := cutSpace(line)
	uri, _, _ := cutSpace(line)
	r.Method, r.URI = method, uri
	for rest != "" {
		line, rest, _ = cutLine(rest)
		if line == "" {
			break
		}
		k, v, ok := cutColon(line)
		if !ok {
			continue
		}
		if eqFold(s2b(k), "Host") {
			r.Host = v
			continue
		}
		r.Header = append(r.Header, mirror.Header{Name: k, Value: v})
	}
	return r
}

func cutLine(s string) (line, rest string, ok bool) {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '\r' && s[i+1] == '\n' {
			return s[:i], s[i+2:], true
		}
	}
	return s, "", false
}

func cutSpace(s string) (before, after string, ok bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// cutColon splits "Name: value" (the gateway writes exactly one space).
func cutColon(s string) (k, v string, ok bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			v = s[i+1:]
			if len(v) > 0 && v[0] == ' ' {
				v = v[1:]
			}
			return s[:i], v, true
		}
	}
	return s, "", false
}
