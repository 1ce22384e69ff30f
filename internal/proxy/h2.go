package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"

	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/mirror"
	"github.com/graygate/graygate/internal/upstream"
)

// The HTTP/2 codec: golang.org/x/net/http2's server, one ServeConn per
// connection that listener.Split hands over (ALPN h2 on TLS, the preface
// on h2c), with a net/http Handler that runs the same flow as the HTTP/1.1
// codec (policy.go) over a stream. See nethttp.go for how it forwards.

// h2Gen is the HTTP/2 server of one generation of options: connections
// keep the one they started with, new ones take the newest (Reconfigure).
type h2Gen struct {
	srv  *http2.Server
	base *http.Server
	// conns counts the connections it serves, under h2State.mu.
	conns int
}

// h2State is what the codec keeps across connections. gens holds the
// current server and every older one that still serves a connection:
// Shutdown must reach those connections through the server they run on
// (base.Shutdown), and an older one is dropped once its last connection
// ends, so that reloads do not pile up servers nothing uses.
type h2State struct {
	cur   atomic.Pointer[h2Gen]
	mu    sync.Mutex
	gens  []*h2Gen
	conns map[net.Conn]struct{}
	idle  chan struct{} // signalled when a connection ends during Shutdown
}

// dropIdle removes g from gens when it is not the current server and
// serves no connection; under mu.
func (st *h2State) dropIdle(g *h2Gen) {
	if g.conns > 0 || g == st.cur.Load() {
		return
	}
	if i := slices.Index(st.gens, g); i >= 0 {
		st.gens = slices.Delete(st.gens, i, i+1)
	}
}

// connInfo is what a stream knows of its connection.
type connInfo struct {
	tls bool
	// late: the connection came once Shutdown had begun (ServeH2), and
	// streamed, set only then, says whether a stream has begun on it.
	late     bool
	streamed atomic.Bool
}

type connInfoKey struct{}

// newH2Gen builds the HTTP/2 server for o.
func (p *Proxy) newH2Gen(o *Options) *h2Gen {
	base := &http.Server{
		Handler:           http.HandlerFunc(p.serveH2),
		MaxHeaderBytes:    o.MaxHeaderBytes,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		// The HTTP/2 server logs a client's protocol errors; they are the
		// client's, so at debug level.
		ErrorLog: slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	srv := &http2.Server{
		IdleTimeout:      o.IdleTimeout,
		WriteByteTimeout: o.WriteTimeout,
		ReadIdleTimeout:  o.IdleTimeout,
		PingTimeout:      15 * time.Second,
		// Room for a few gRPC calls in flight per connection and a
		// window that a streaming upload does not stall on.
		MaxConcurrentStreams:         250,
		MaxUploadBufferPerStream:     1 << 20,
		MaxUploadBufferPerConnection: 4 << 20,
	}
	// ConfigureServer registers the graceful shutdown of the connections
	// ServeConn serves with base.Shutdown: GOAWAY, then close when idle.
	_ = http2.ConfigureServer(base, srv)
	return &h2Gen{srv: srv, base: base}
}

// ServeH2 serves one HTTP/2 connection until it ends; listener.Split
// calls it on the connection's goroutine, after TLS with ALPN h2 or
// after it saw the h2c preface (which the connection hands out again).
// Every stream is proxied by the same policy as an HTTP/1.1 request.
func (p *Proxy) ServeH2(c net.Conn) {
	st := &p.h2
	st.mu.Lock()
	if st.conns == nil {
		st.conns = map[net.Conn]struct{}{}
	}
	st.conns[c] = struct{}{}
	gen := st.cur.Load()
	gen.conns++
	st.mu.Unlock()
	defer func() {
		st.mu.Lock()
		delete(st.conns, c)
		gen.conns--
		st.dropIdle(gen)
		if st.idle != nil {
			select {
			case st.idle <- struct{}{}:
			default:
			}
		}
		st.mu.Unlock()
	}()
	_, isTLS := c.(*tls.Conn)
	info := &connInfo{tls: isTLS, late: p.closing.Load()}
	if info.late {
		// Handed on after Shutdown began: the listener took it from the
		// kernel before it closed, and its TLS handshake or h2c preface
		// ended after shutdownH2 sent its GOAWAYs. Its streams are
		// served, and each answer asks for a GOAWAY (writeFinal); one
		// that has opened none within the head timeout gets it then.
		t := time.AfterFunc(p.lcfg.Load().HeaderTimeout, func() {
			if !info.streamed.Load() {
				_ = gen.base.Shutdown(context.Background())
			}
		})
		defer t.Stop()
	}
	ctx := context.WithValue(context.Background(), connInfoKey{}, info)
	gen.srv.ServeConn(c, &http2.ServeConnOpts{Context: ctx, BaseConfig: gen.base, Handler: gen.base.Handler})
}

// reconfigureH2 makes new HTTP/2 connections use o. The server they used
// so far goes on serving its connections, and is dropped with the last.
func (p *Proxy) reconfigureH2(o *Options) {
	g := p.newH2Gen(o)
	st := &p.h2
	st.mu.Lock()
	prev := st.cur.Load()
	st.gens = append(st.gens, g)
	st.cur.Store(g)
	if prev != nil {
		st.dropIdle(prev)
	}
	st.mu.Unlock()
}

// drainH2 sends a graceful GOAWAY on every HTTP/2 connection: clients
// open their next connection elsewhere, streams in flight finish, and the
// connection closes once it has none (http2.ConfigureServer registered
// that shutdown with base, whose Shutdown returns at once here: it has no
// listener and tracks no connection).
func (p *Proxy) drainH2() {
	st := &p.h2
	st.mu.Lock()
	gens := slices.Clone(st.gens)
	st.mu.Unlock()
	for _, g := range gens {
		_ = g.base.Shutdown(context.Background())
	}
}

// writeFinal writes the final answer's header. During the drain it asks
// the HTTP/2 server for a graceful GOAWAY after it ("Connection: close"
// on a handler's header means that to golang.org/x/net/http2, which sends
// no such field), so that a connection opened during the drain is not
// kept either.
func (s *stream) writeFinal(status int) {
	if s.p.draining.Load() {
		s.w.Header().Set("Connection", "close")
	}
	s.w.WriteHeader(status)
}

// shutdownH2 sends GOAWAY on every HTTP/2 connection, waits until ctx
// ends for them to finish their streams, then closes what is left.
func (p *Proxy) shutdownH2(ctx context.Context) error {
	st := &p.h2
	st.mu.Lock()
	st.idle = make(chan struct{}, 1)
	gens := slices.Clone(st.gens) // dropIdle edits st.gens in place
	st.mu.Unlock()
	for _, g := range gens {
		// No listener and no tracked connection: it returns at once,
		// having started the graceful shutdown of every connection.
		_ = g.base.Shutdown(ctx)
	}
	for {
		st.mu.Lock()
		n := len(st.conns)
		st.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-st.idle:
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			p.closeH2Conns()
			return ctx.Err()
		}
	}
}

// closeH2Conns closes every HTTP/2 connection.
func (p *Proxy) closeH2Conns() {
	st := &p.h2
	st.mu.Lock()
	defer st.mu.Unlock()
	for c := range st.conns {
		_ = c.Close()
	}
}

// H2Conns returns how many HTTP/2 connections are open.
func (p *Proxy) H2Conns() int {
	p.h2.mu.Lock()
	defer p.h2.mu.Unlock()
	return len(p.h2.conns)
}

// stream is the HTTP/2 codec's state of one request, pooled: its flow and
// the net/http request and response.
type stream struct {
	flow
	view netView
	in   netIn
	w    http.ResponseWriter
	r    *http.Request
	rc   *http.ResponseController
	info *connInfo
	// cbody is the client's body, made per request: a transport may still
	// read it after the stream is pooled again.
	cbody *clientBody
	// trailer is the upstream request's Trailer (keptTrailer), made per
	// request as cbody is.
	trailer http.Header
	buf     []byte
	// host parses the request's host as the HTTP/1.1 codec's fasthttp
	// parses a Host (see serve).
	host fasthttp.URI

	// att is the attempt under way: its net/http call and the body it
	// reads. Both may be touched by a transport goroutine after the
	// handler returned, so they are made per attempt, never pooled.
	att netAttempt
	// pending is the body of the next attempt, kept from the failed one
	// (replayOK); replayed says replayOK made the request replayable, so
	// that each later attempt's body is checked again.
	pending  io.ReadCloser
	replayed bool
	// deadline is the end of a gRPC call its grpc-timeout sets (zero:
	// none), which every attempt's call ends at (newNetCallUntil).
	deadline time.Time
	// bodyEnd is when the transport read the end of the request body.
	bodyEnd atomic.Int64
	// out is the request last sent upstream (sentRequest).
	out *http.Request
	// n1xx counts the interim responses of the attempt (interim), on
	// the goroutine of the transport's hook while the round trip runs.
	n1xx int
	// uc is the client of the attempt's instance when its pool is http1
	// (holdFor10), whose connections roundTripH1 uses and whose version
	// the answer updates; to10: that instance last answered over
	// HTTP/1.0, as holdFor10 found it.
	uc   *upstreamClient
	to10 bool
}

func (p *Proxy) newStream() *stream {
	s := &stream{}
	s.p = p
	s.c = s
	s.reqBody.f = &s.flow
	return s
}

// badBody implements codec. An HTTP/2 body is framed by the protocol: what
// fails reading it is the client, unless the stream ended short of its
// declared content-length (isShortDeclaredBody).
func (s *stream) badBody(err error) bool { return isShortDeclaredBody(err) }

// badContentLength checks a stream's content-length fields as the
// HTTP/1.1 listener checks Content-Length (one field, all digits), and
// says what is wrong, or "". x/net/http2's server reads the first field
// only and takes one it cannot parse for 0: a malformed one reached the
// upstream as a request with an empty body, while the client's stream
// was reset when its DATA came.
func badContentLength(vv []string) string {
	switch {
	case len(vv) == 0:
		return ""
	case len(vv) > 1:
		return "more than one Content-Length"
	}
	// ParseUint in base 10 takes digits only: no sign, space or "_".
	if _, err := strconv.ParseUint(vv[0], 10, 63); err != nil {
		return "invalid Content-Length"
	}
	return ""
}

// isShortDeclaredBody reports the error x/net/http2's server gives the
// body of a stream that ended before the length its content-length
// declared: a malformed request (RFC 9113 section 8.1.1), whose client
// still waits for the answer, not one that went away. The server has no
// sentinel for it; its text is pinned by TestH2ShortDeclaredBody.
func isShortDeclaredBody(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "request declared a Content-Length of ")
}

// protocol implements codec.
func (s *stream) protocol() (string, bool) { return "2", s.info.tls }

// sentRequest implements codec: the net/http request of the last attempt.
func (s *stream) sentRequest() mirror.Request { return sentNetRequest(s.out) }

// serveH2 is the Handler of every HTTP/2 stream.
func (p *Proxy) serveH2(w http.ResponseWriter, r *http.Request) {
	s := p.streams.Get().(*stream)
	s.begin(p)
	s.proto = "h2"
	s.w, s.r = w, r
	s.rc = http.NewResponseController(w)
	s.info, _ = r.Context().Value(connInfoKey{}).(*connInfo)
	if s.info == nil {
		s.info = &connInfo{tls: r.TLS != nil}
	}
	if s.info.late {
		s.info.streamed.Store(true)
	}
	abort := s.serve()
	if s.cbody != nil {
		s.cbody.end()
	}
	s.finish()
	s.resetStream()
	p.streams.Put(s)
	if abort {
		// The response cannot be completed: reset the stream, so that the
		// client does not take what it got for the whole answer.
		panic(http.ErrAbortHandler)
	}
}

// rootPath is the request target the stream's host is parsed with.
var rootPath = []byte("/")

// visibleTarget reports whether a :path is visible ASCII only, as the
// HTTP/1.1 listener requires of a request target. (serve also refuses
// the asterisk form on any method but OPTIONS, as RFC 9112 section 3.2.4
// and that listener do: x/net/http2's server passes ":path: *" with any
// method, and "GET * HTTP/1.1" went to an http1 pool.) Go's server takes
// spaces and bytes past ASCII in the query (it escapes them in the path
// only), and a query goes into an http1 pool's request line as it is:
// "/p?x HTTP/1.1 X" made the line "GET /p?x HTTP/1.1 X HTTP/1.1".
func visibleTarget(t string) bool { return t != "" && visibleASCII(t) }

// dropFragment removes a fragment from the :path, as originForm does for
// HTTP/1.1: the decision parses the target as a URI, without it, and the
// upstream must get the same path and query. Go's server keeps it in
// r.URL.Path ("/p#x?q=1" is the path "/p#x" and the query q=1), where
// the transport would send it escaped, as "/p%23x?q=1". It reports false
// if what is left is not a request target; Go's server has already
// refused a :path that does not start with "/", so that is not expected.
func dropFragment(r *http.Request) bool {
	i := strings.IndexByte(r.RequestURI, '#')
	if i < 0 {
		return true
	}
	r.RequestURI = r.RequestURI[:i]
	u, err := url.ParseRequestURI(r.RequestURI)
	if err != nil {
		return false
	}
	r.URL = u
	return true
}

// keptTrailer is the Trailer of r's upstream request: r.Trailer, or,
// when r announced a trailer field keepRequestTrailer refuses (a name
// with "_") or the empty name (see announcedTrailers), a map of the
// others, whose values in fills in when the body ends. x/net/http2's
// server writes r.Trailer's values on the goroutine that reads the body's
// end, in that read (its pipe's readFn): keptTrailer runs before anything
// reads the body, and in's hook after that read, on the same goroutine; a
// transport reads the map's values after the body it sends has ended,
// which is after in's.
func (s *stream) keptTrailer(r *http.Request, in *clientIn) http.Header {
	refused := false
	for k := range r.Trailer {
		if k == "" || !s.keepRequestTrailer(s2b(k)) {
			refused = true
			break
		}
	}
	if !refused {
		return r.Trailer
	}
	kept := make(http.Header, len(r.Trailer))
	for k := range r.Trailer {
		if k != "" && s.keepRequestTrailer(s2b(k)) {
			kept[k] = nil
		}
	}
	in.onEOF = func() {
		for k := range kept {
			kept[k] = r.Trailer[k]
		}
	}
	return kept
}

// announcedTrailers reports whether the names r's Trailer field announced
// (x/net/http2's server moves them into r.Trailer) are all field names a
// trailer section may carry, as the HTTP/1.1 listener requires of its
// Trailer field (fasthttp's parser answers 400 to "Trailer: h?ack" or
// "Trailer: Host"): x/net/http2's server takes any name but the three it
// drops itself (Content-Length, Transfer-Encoding and Trailer). The empty
// name is let through, and not forwarded (keptTrailer): it is what an
// empty Trailer field, which the HTTP/1.1 listener takes, becomes.
func announcedTrailers(t http.Header) bool {
	for k := range t {
		if k != "" && (!httpguts.ValidHeaderFieldName(k) || listener.BadTrailer(s2b(k))) {
			return false
		}
	}
	return true
}

func (s *stream) resetStream() {
	s.resetFlow()
	s.view.reset()
	s.in.h = nil
	clear(s.in.vals)
	s.in.vals = s.in.vals[:0]
	s.w, s.r, s.rc, s.info = nil, nil, nil, nil
	if s.att.body != nil {
		s.att.body.stop(false)
		if c := s.att.conn; c != nil {
			c.carried(s.att.body)
		}
	}
	s.cbody, s.trailer = nil, nil
	s.att, s.pending, s.replayed = netAttempt{}, nil, false
	s.deadline = time.Time{}
	s.bodyEnd.Store(0)
	s.out = nil
	s.n1xx, s.uc, s.to10 = 0, nil, false
}

// serve runs the flow's phases for the stream. It returns true when the
// stream must be reset rather than ended.
func (s *stream) serve() bool {
	r := s.r
	s.method = append(s.method[:0], r.Method...)
	s.peer = peerOf(r.RemoteAddr)
	trusted := s.trusted(s.peer)
	for k, vs := range r.Header {
		// A value with whitespace at an edge (" 7"), which RFC 9113
		// section 8.2.1 does not allow and x/net/http2's server passes,
		// goes upstream as the HTTP/1.1 listener sends "X-A:  7 ", and
		// as the decision reads it: without it. Not a content-length,
		// which x/net/http2's server has read already (" 3" as 0), and
		// which is refused below.
		if k != "Content-Length" {
			trimValues(vs)
		}
	}
	s.in.h = r.Header
	s.setRequestID(s.in.Peek(hdrRequestID), trusted)
	s.grpc = isGRPC(r.Header.Get("Content-Type"))
	target := visibleTarget(r.RequestURI) && (r.RequestURI != "*" || r.Method == http.MethodOptions) && dropFragment(r)
	s.view.see(r, s.peer, s.trusted, s.opts.AllowUnderscoresInHeaders)
	s.path = append(s.path[:0], s.view.Path()...)
	if !target {
		s.reject(http.StatusBadRequest, "bad request target")
		return false
	}
	if !httpguts.ValidHeaderFieldName(r.Method) {
		// A method is a token (RFC 9110 section 9.1), as the HTTP/1.1
		// listener requires. HPACK carries spaces and tabs, and
		// x/net/http2's server passes them: "GET /admin HTTP/1.1 X"
		// would make the request line an http1 pool gets.
		s.reject(http.StatusBadRequest, "invalid method")
		return false
	}
	if why := badContentLength(r.Header["Content-Length"]); why != "" {
		s.reject(http.StatusBadRequest, why)
		return false
	}
	if r.Method == http.MethodConnect {
		s.reject(http.StatusMethodNotAllowed, "CONNECT is not supported")
		return false
	}
	if r.Host == "" {
		// Neither :authority nor host, or an empty one: RFC 9113
		// section 8.3.1 has an http or https request carry one, and
		// RFC 9110 section 4.2.1 has a recipient reject an http URI
		// with an empty host. Such a request is malformed, and an
		// intermediary must not forward it (RFC 9113 section 8.1.1);
		// the HTTP/1.1 listener refuses a missing or empty Host alike.
		// x/net/http2's server passed it, and it went upstream with the
		// instance address for its host.
		s.reject(http.StatusBadRequest, "missing host")
		return false
	}
	if s.host.Parse(s2b(r.Host), rootPath) != nil {
		// The host must parse as the HTTP/1.1 codec's Host does
		// (fasthttp's, after net/url's): x/net/http2's server checks
		// only its characters, and passed "a:x" and "a:80:80". Parse
		// copies the host. It comes before the expectation, as in the
		// HTTP/1.1 listener: RFC 9112 section 3.2 requires the 400.
		s.reject(http.StatusBadRequest, "invalid host")
		return false
	}
	if len(r.Header["Expect"]) != 0 {
		// x/net/http2's server takes out an Expect that holds
		// 100-continue and meets it itself; what is left is an
		// expectation the gateway cannot meet (RFC 9110 section
		// 10.1.1). It is refused as the HTTP/1.1 listener refuses it,
		// not dropped on the way upstream as if it had been met.
		s.reject(http.StatusExpectationFailed, "unsupported expectation (only 100-continue is)")
		return false
	}
	if !announcedTrailers(r.Trailer) {
		s.reject(http.StatusBadRequest, "invalid Trailer field")
		return false
	}
	s.decide(&s.view, &s.in)
	if s.d.Reject != "" { // e.g. an identity over identity.max_length
		s.reject(http.StatusBadRequest, s.d.Reject)
		return false
	}
	if s.d.Target == nil {
		return s.fail(fmt.Errorf("no target: %w", upstream.ErrNoInstance))
	}
	cl := r.ContentLength
	if s.grpc {
		if v := r.Header.Get(hdrGRPCTimeout); v != "" {
			if d, ok := parseGRPCTimeout(v); ok {
				s.deadline = s.wallStart().Add(d) // a network deadline: the real clock
			}
		}
	}
	// A gRPC body is a stream of messages that may go on for as long as
	// the call: it is never waited for before the upstream is asked (see
	// upBody for how a gRPC call is still replayed on stable).
	var src io.Reader = http.NoBody
	if cl != 0 {
		var timeout time.Duration
		if !s.grpc {
			timeout = s.opts.ReadTimeout
		}
		s.cbody = newClientBody(r, s.rc, timeout)
		src = s.cbody
		// Trailers come after a body, so a request without one has
		// none (s.trailer stays nil): one that announced a trailer
		// field and whose HEADERS ended the stream made http2.Transport
		// leave the upstream stream open for trailers, and the upstream
		// waited for the body's end until a timeout.
		s.trailer = s.keptTrailer(r, &s.cbody.in)
		s.trailers = len(s.trailer) > 0
	}
	if s.grpc && cl != 0 {
		cl = -1
	}
	if err := s.admitStream(cl, src); err != nil {
		return s.fail(err)
	}
	for {
		resp, err := s.forward(trusted)
		if err == nil {
			return s.respond(resp)
		}
		s.replayOK()
		if !s.fallBackOK(err) {
			return s.fail(err)
		}
		s.fallBack(err)
	}
}

// admitStream is the admit phase, with a gRPC body never buffered.
func (s *stream) admitStream(cl int64, src io.Reader) error {
	if !s.grpc {
		return s.admit(cl, -1, src)
	}
	// The rate limit and the body limit apply as to any request; the
	// replay of a gRPC call comes from upBody, not from a buffer filled
	// before the upstream is asked.
	stable := s.d.Stable
	s.d.Stable = nil
	err := s.admit(cl, -1, src)
	s.d.Stable = stable
	return err
}

// replayOK marks the request replayable when the body of the attempt that
// failed can be sent again although admit did not buffer it: upBody did
// not read it at all (a connection that failed), or read it whole and
// holds it (a gRPC call whose upstream then failed). The policy's
// fallBackOK decides the rest. The attempt after such a replay streams
// the body again, so its failure asks the same of its body: a third
// instance (nextInstance) or the fallback gets the body only if that
// attempt left it whole too.
func (s *stream) replayOK() {
	if s.att.body == nil || (s.replayable && !s.replayed) {
		return
	}
	b, ok := s.att.body.replay(nil)
	if !ok && !s.sent {
		// Nothing of the request was processed (netAttempt.refused):
		// what the transport read of the body is sent again, then the
		// rest.
		b, ok = resumeBody(s.att.body, nil)
	}
	s.replayable, s.replayed = ok, ok
	if ok {
		s.att.body = nil
		s.pending = b
	}
}

// forward makes one attempt on s.d.Target through the pool's net/http
// transport and returns its response, header read. An error means nothing
// has been written to the client.
func (s *stream) forward(trusted bool) (*http.Response, error) {
	if err := s.acquire(); err != nil {
		return nil, err
	}
	if err := s.pick(&s.in); err != nil {
		return nil, err
	}
	if err := s.holdFor10(); err != nil {
		return nil, err
	}
	resp, err := s.attempt(trusted)
	for tries := 1; err != nil && s.nextInstance(err, tries); tries++ {
		// The instance could not be connected to, so nothing was sent:
		// another instance of the pool is asked (see the HTTP/1.1
		// codec's forward), with the body as the fallback would send it
		// (replayOK), if it can be sent again.
		s.replayOK()
		if s.att.body != nil || s.toNextInstance() != nil {
			break
		}
		if err := s.holdFor10(); err != nil {
			return nil, err
		}
		resp, err = s.attempt(trusted)
	}
	return resp, err
}

// holdFor10 takes, for an instance of an http1 pool, its client (s.uc),
// and notes whether it last answered over HTTP/1.0 (s.to10); such an
// instance then has a body of unknown length read whole (holdForHTTP10),
// as the HTTP/1.1 codec's sendTo does: net/http's Transport would send it
// chunked. A body an attempt on a refused connection took up (s.pending,
// what it read and then the rest) is read whole the same way.
func (s *stream) holdFor10() error {
	s.uc, s.to10 = nil, false
	if s.d.Target.Protocol == upstream.HTTP1 {
		s.uc = s.p.client(s.inst, s.wallStart())
		s.to10 = s.uc.http10.Load()
	}
	if !s.to10 || s.grpc || s.cbody == nil || s.r.ContentLength >= 0 || s.buffered {
		return nil // s.buffered: held, and sent with its length (a pending replay too)
	}
	src := io.Reader(s.cbody)
	if s.pending != nil {
		src = s.pending
	}
	if err := s.holdForHTTP10(src); err != nil {
		return err
	}
	s.pending = nil // read whole: the attempt sends the held body
	return nil
}

// attempt sends the request to the instance picked, s.inst, and returns
// the response, header read, as forward does.
func (s *stream) attempt(trusted bool) (*http.Response, error) {
	pool := s.d.Target
	call := newNetCallUntil(s.r.Context(), s.headerTimeout, s.deadline)
	s.att = netAttempt{call: call, h2: pool.Protocol != upstream.HTTP1}
	out := s.upstreamRequest(pool, trusted, call)
	s.out = out
	if out.Body == nil || out.Body == http.NoBody {
		call.arm()
	}
	var start time.Time
	if s.d.Breaker != nil {
		start = s.p.now()
	}
	s.sent = true
	s.n1xx = 0
	var resp *http.Response
	var err error
	if fastH1(pool, out) {
		resp, err = s.roundTripH1(out, call)
	} else {
		// Interim responses are forwarded as they come, through a gate
		// that closes when the round trip returns (interimGate).
		gate := &interimGate{s: s}
		out = out.WithContext(s.att.trace(out.Context(), &httptrace.ClientTrace{Got1xxResponse: gate.got1xx}))
		resp, err = s.p.netTransport(pool).RoundTrip(out)
		gate.shut()
		if err == nil && s.att.conn != nil {
			err = s.checkH1Head(resp)
		}
	}
	call.answered()
	if err == nil {
		err = unrelayableStatus(resp)
	}
	if s.att.body != nil {
		s.att.body.collect(&s.flow)
	}
	if err != nil {
		call.end()
		if errors.Is(err, errBadChunk) {
			// An answer came, if a broken one: as on HTTP/1.1, the
			// request is not sent again, to stable either.
			s.respStarted = true
		}
		err, _ = s.refused(&s.att, err, s.netError(err, call, s.r.Context()))
		if errors.Is(err, errCallDeadline) && s.att.body != nil && !s.att.body.ended() {
			// The client was still sending when its deadline passed:
			// the upstream may rightly have waited for the rest, so
			// neither the breaker nor passive health holds it against
			// the instance.
			err = fmt.Errorf("%w %w", err, errDeadlineSending)
			s.reportUpstream(true)
		}
		s.recordOutcome(start, err)
		return nil, err
	}
	s.respStarted = true
	s.status = resp.StatusCode
	s.upHTTP10 = resp.ProtoMajor == 1 && resp.ProtoMinor == 0
	if uc := s.uc; uc != nil && uc.http10.Load() != s.upHTTP10 {
		// For the next request's body (holdFor10), as readHead notes it
		// on the HTTP/1.1 codec's way.
		uc.http10.Store(s.upHTTP10)
	}
	if s.mirror != mirrorOff {
		s.keepMirrorResponse(resp.StatusCode, netFields(resp.Header))
	}
	s.filterNetResponse(resp.Header, resp.StatusCode)
	if s.d.Breaker != nil {
		// The outcome waits for the end of the body: a gRPC status comes
		// in the trailers. The latency is the header's, less the time the
		// client took to send its body.
		from := start
		if e := s.bodyEnd.Load(); e > from.UnixNano() {
			from = time.Unix(0, e)
		}
		s.brkLatency = max(s.p.now().Sub(from), 0)
		s.brkPending = true
	}
	return resp, nil
}

// checkH1Head does for an answer of the http1 Transport what sendH1 does
// for one it reads itself, from what its connection saw of the head
// (headConn): a version other than HTTP/1.0 and 1.1 fails the attempt
// (h1Version), a head framed two ways is counted (the connection closes
// after it), and a chunked body whose first line net/http's parser
// refuses fails the attempt before the client has a 200; closing the body
// unread closes the connection.
func (s *stream) checkH1Head(resp *http.Response) error {
	if err := h1Version(resp); err != nil {
		_ = resp.Body.Close()
		return err
	}
	conflict, after, facts := s.att.conn.seen()
	if err := facts.apply(resp); err != nil {
		_ = resp.Body.Close()
		return fmt.Errorf("%w from %s", err, s.inst.Addr)
	}
	if conflict {
		s.p.violation(violationFramingConflict)
	}
	if err := checkFirstChunkNet(resp, after); err != nil {
		_ = resp.Body.Close()
		return fmt.Errorf("%w from %s: %w", errBadChunk, s.inst.Addr, err)
	}
	return nil
}

// interimGate hands the interim responses a net/http transport reports to
// the stream (stream.interim) until the round trip returns. The transport
// calls its Got1xxResponse hook on a goroutine of its own (http2.Transport's
// read loop, net/http's persistConn), and RoundTrip returns as soon as the
// call's context ends (the response header timeout, the client gone)
// without waiting for a hook call under way, or stopping one that comes
// just after. Unguarded, the hook would then write an interim response to
// the ResponseWriter while the handler writes its error answer (two
// goroutines on one ResponseWriter and its header map), or after the
// stream has gone back to the pool (a nil ResponseWriter, or another
// request's). shut, called by the handler when RoundTrip returns and
// before it writes anything else, waits for a hook call under way and
// turns the later ones into errors (the transport then drops the call,
// which is over). One gate per attempt, so a late call can never reach a
// stream that serves another request by then.
type interimGate struct {
	mu sync.Mutex
	s  *stream // nil once shut
}

// got1xx is the transport's Got1xxResponse hook.
func (g *interimGate) got1xx(code int, h textproto.MIMEHeader) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.s == nil {
		return errInterimLate
	}
	return g.s.interim(code, h)
}

// shut closes the gate: after it returns, no hook call touches the stream.
func (g *interimGate) shut() {
	g.mu.Lock()
	g.s = nil
	g.mu.Unlock()
}

// errInterimLate refuses an interim response reported after the round trip
// returned.
var errInterimLate = errors.New("interim response after the call ended")

// upstreamRequest builds the request for the instance picked: the
// client's fields the policy keeps, the gateway's (addForwarded), the
// body, on the call's context.
func (s *stream) upstreamRequest(pool *upstream.Pool, trusted bool, call *netCall) *http.Request {
	r := s.r
	scheme := "http"
	if pool.Protocol == upstream.H2 || (pool.Protocol == upstream.HTTP1 && s.inst.TLS) {
		scheme = "https"
	}
	host := r.Host
	if z := zoneless(s2b(host)); len(z) != len(host) {
		host = string(z) // a copy only for a host with an IPv6 zone
	}
	if s.d.UpstreamHost || host == "" {
		host = s.inst.Addr
	}
	h := make(http.Header, len(r.Header)+8)
	s.netConnTokens(r.Header)
	s.sawProto, s.sawHost = false, false
	for k, vs := range r.Header {
		if s.keepRequestHeader(s2b(k), trusted) {
			h[k] = vs
		}
	}
	s.addForwarded(&netOut{h}, &s.in, s2b(host), s.info.tls, trusted)
	clear(s.tokens)
	s.tokens = s.tokens[:0]
	if pool.Protocol != upstream.HTTP1 && teTrailers(r.Header["Te"]) {
		// gRPC asks for trailers end to end (RFC 9113 section 8.2.2
		// allows exactly this value of TE).
		h["Te"] = []string{"trailers"}
	}
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = []string{""} // net/http would add its own
	}
	out := &http.Request{
		Method:     r.Method,
		URL:        upstreamURL(scheme, s.inst.Addr, r.URL),
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     h,
		Host:       host,
		Trailer:    s.trailer,
	}
	s.setBody(out, call)
	return out.WithContext(call.ctx)
}

// setBody gives out its body: none, the body buffered at admit, the
// replay of the previous attempt's (pending), or the client's, streamed
// through a new upBody.
func (s *stream) setBody(out *http.Request, call *netCall) {
	switch {
	case s.pending != nil:
		out.Body, s.pending = s.pending, nil
		out.ContentLength = s.r.ContentLength
		switch b := out.Body.(type) {
		case *upBody:
			s.att.body = b
		case *heldBody:
			b.call = call
			out.ContentLength = int64(b.r.Len())
		}
		if s.grpc {
			out.ContentLength = -1
		}
	case s.buffered:
		// The flow's pooled buffer, which the transport may read after
		// the stream ended (bodyLoan).
		s.att.loan = s.loanBody()
		out.Body = s.att.loan.lend(s.body0(), call)
		out.ContentLength = int64(len(s.flow.body))
		s.att.held = holding(s.body0())
	case s.r.ContentLength == 0:
		out.Body = nil
		return
	default:
		if pre := s.reqBody.pre; pre != nil {
			// pre is the start of the flow's buffer (prepareReplay).
			// The stream stops the transport's reads of upBody without
			// waiting for one under way (it may wait on the client),
			// so the buffer goes with the body and is not pooled
			// again (see bodyLoan).
			s.cbody.unread(pre)
			s.reqBody.pre, s.flow.body = nil, nil
		}
		keep := s.pol.FallbackBodyBytes
		if keep <= 0 {
			keep = 64 << 10
		}
		s.att.body = &upBody{src: s.cbody, call: call, keep: int(keep),
			count: bodyCount{size: s.r.ContentLength, max: s.pol.MaxBodyBytes}}
		out.Body = s.att.body
		out.ContentLength = s.r.ContentLength
		if s.grpc {
			out.ContentLength = -1
		}
	}
	switch {
	case s.att.h2 || len(out.Trailer) == 0:
	case s.to10:
		// HTTP/1.0 has no trailer section: the body goes with its
		// length, without them (holdForHTTP10).
		out.Trailer = nil
	default:
		// net/http's Transport sends trailer fields only after a
		// chunked body: to an http1 pool, a body that came with a
		// content-length, or that the gateway holds, goes chunked when
		// the client announced trailer fields, so that they go too.
		out.ContentLength = -1
	}
	if ub, ok := out.Body.(*upBody); ok {
		ub.mu.Lock()
		ub.call, ub.onEnd = call, s.markBodyEnd
		ub.mu.Unlock()
	}
	out.GetBody = s.att.getBody
}

// markBodyEnd notes when the request body ended, for the breaker's latency.
func (s *stream) markBodyEnd() { s.bodyEnd.Store(time.Now().UnixNano()) }

func (s *stream) body0() []byte { return s.flow.body }

// respond relays the upstream's response: its header with the decision
// headers and Via, its body as it arrives (flushed at once for gRPC, event
// streams and bodies of unknown length), and its trailers. A body of at
// most maxInlineBody bytes is read whole first (readWhole), as the
// HTTP/1.1 codec does (readInline, readNetInline), so that an upstream
// that breaks off (or stalls) within it gets the client the gateway's 502
// (504) rather than a header that promised more and a reset stream. It
// returns true when the stream must be reset: the upstream broke off
// mid-body.
func (s *stream) respond(resp *http.Response) (abort bool) {
	defer resp.Body.Close()
	defer s.att.call.end()
	var idle *readIdle
	if !s.grpc && s.opts.UpstreamReadTimeout > 0 {
		idle = newReadIdle(s.opts.UpstreamReadTimeout, s.att.call)
		defer idle.stop()
	}
	// held is the body read whole, or the first bytes of a longer one
	// with a length, in s.buf; the first pass of the copy below sends it.
	// x/net/http2's server sends nothing of the answer before its body's
	// first bytes, so waiting for them costs the client nothing, and an
	// upstream that breaks off (or stalls) before any gets the client the
	// gateway's 502 (504) rather than a reset stream.
	var held []byte
	if s.readsAhead(resp) {
		if s.buf == nil {
			s.buf = make([]byte, 32<<10)
		}
		size := int(resp.ContentLength)
		buf, want := s.buf, 1
		if size <= maxInlineBody {
			buf, want = s.buf[:size], size
		}
		b, err := s.readWhole(resp.Body, buf, want, size, &s.att, idle, s.r.Context())
		if err != nil {
			// Nothing of the answer has gone out: the client is told,
			// as for any failure before the answer.
			return s.fail(err)
		}
		held = b
	}
	w := s.w
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = vs
	}
	if _, ok := h["Content-Type"]; !ok {
		h["Content-Type"] = nil // net/http would guess one from the body
	}
	if !hasBody(resp.StatusCode) {
		// A 204 may not have one (RFC 9110 section 8.6), and a 304's
		// makes Go's HTTP/2 client expect a body; the HTTP/1.1 codec
		// (fasthttp) never writes either.
		delete(h, "Content-Length")
	}
	out := netOut{h}
	s.decisionHeaders(&out)
	s.addVia(&out)
	s.writeFinal(resp.StatusCode)
	if s.r.Method == http.MethodHead {
		s.respEnded = true
		return false
	}
	flush := s.grpc || resp.ContentLength < 0 || isEventStream(s2b(resp.Header.Get("Content-Type")))
	if flush && resp.ContentLength != 0 && s.grpcStatus < 0 {
		// The header goes out now, as the HTTP/1.1 codec sends it, not
		// with the first body bytes: a gRPC server may send its initial
		// metadata and then wait for the client's first message (which
		// a client that reads the header first never sends), and an
		// event stream's first event may come much later. Not an answer
		// that ended with its header (length 0; a gRPC trailers-only
		// answer, whose grpc-status is in it): it must stay one HEADERS
		// frame that ends the stream, or gRPC clients find no trailers.
		_ = s.rc.Flush()
	}
	if s.buf == nil {
		s.buf = make([]byte, 32<<10)
	}
	// The stream's write deadline bounds each write by WriteTimeout
	// (client_write_timeout) as on HTTP/1.1. The connection's
	// WriteByteTimeout does not: a stream the client gives no flow-control
	// window has nothing waiting on the socket, and would hold its
	// upstream connection for as long as the client likes. The deadline
	// is moved only when it has drifted by an eighth of the timeout
	// (listener.Keeps, as for the HTTP/1.1 connections).
	wto := s.opts.WriteTimeout
	var wdl time.Time
	for {
		var n int
		var err error
		if held != nil {
			n, held = len(held), nil
		} else {
			if idle != nil {
				idle.keep()
			}
			n, err = resp.Body.Read(s.buf)
		}
		if n > 0 {
			if s.mirror == mirrorOn {
				s.teeBody(s.buf[:n])
			}
			if wto > 0 {
				if want := time.Now().Add(wto); !listener.Keeps(listener.UnixNano(wdl), want.UnixNano(), int64(wto/8)) {
					wdl = want
					_ = s.rc.SetWriteDeadline(wdl)
				}
			}
			if _, werr := w.Write(s.buf[:n]); werr != nil {
				s.writeErr = werr
				if wto > 0 && !time.Now().Before(wdl) {
					s.timeout = timeoutClientWrite
				}
				s.p.log.Debug("client write failed", "upstream", s.inst.Addr, "bytes", s.bytesOut, "error", werr)
				return false
			}
			s.bytesOut += int64(n)
			// A part of a body with a length goes out at once too when
			// more of it is still to come and the upstream had no more
			// ready (the read did not fill the buffer): x/net/http2's
			// writer would hold it until 4 KiB had come, so a slow
			// upstream's first bytes reached the client only with later
			// ones. The last part goes out with the stream's end.
			if flush || n < len(s.buf) && s.bytesOut < resp.ContentLength {
				_ = s.rc.Flush()
			}
		}
		if err == io.EOF || err != nil && !hasBody(resp.StatusCode) {
			// A 204 or 304 has no body, and ends with its header or its
			// trailers (read now: an HTTP/2 upstream's come after an
			// empty body). One that carries a Content-Length has a body
			// that fails every read (x/net/http2's missingBody), which
			// must not reset the client's stream.
			s.respEnded = true
			break
		}
		if err != nil {
			if idle != nil && idle.fired() {
				s.timeout = timeoutUpstreamRead
			}
			if s.r.Context().Err() != nil {
				s.clientErr = s.r.Context().Err()
				return false // the client reset the stream; so is the upstream's
			}
			if s.grpc && s.att.call.deadlinePassed() {
				return s.deadlineMidAnswer(h)
			}
			if s.att.body != nil {
				s.att.body.collect(&s.flow)
			}
			if s.tooLarge {
				// The client's body went over the route's limit while the
				// answer streamed (a bidirectional call): the transport
				// cut the upstream's stream. That is the client's fault,
				// as it is before the answer (413, RESOURCE_EXHAUSTED),
				// never the upstream's.
				return s.tooLargeMidAnswer(h)
			}
			s.upErr = err
			s.p.log.Warn("upstream body broke off", "upstream", s.inst.Addr, "bytes", s.bytesOut, "timeout", s.timeout, "error", err)
			if s.grpc {
				// The header went out; a gRPC client is told in the trailers.
				code, msg := grpcUnavailable, "upstream broke off the call"
				var se http2.StreamError
				if errors.As(err, &se) && se.Code == http2.ErrCodeCancel {
					code, msg = grpcCancelled, "upstream cancelled the call"
				}
				h.Set(http.TrailerPrefix+hdrGRPCStatus, strconv.Itoa(code))
				h.Set(http.TrailerPrefix+hdrGRPCMessage, msg)
				s.grpcStatus = code
				return false
			}
			// What was relayed goes out before the reset (x/net/http2's
			// server would drop its buffer, header included), so the
			// client sees the answer cut off, as on HTTP/1.1.
			_ = s.rc.Flush()
			return true
		}
	}
	for k, vs := range resp.Trailer {
		// net/http's reader takes the spaces before a trailer line's
		// colon ("X-T : 1") into the name, which then is no token;
		// the HTTP/1.1 codec removes them, as RFC 9112 section 5.1 has
		// a proxy do, and relays the field (closeColons does the same
		// for a head).
		k = strings.TrimRight(k, " ")
		if s.dropNetTrailer(k, vs) {
			continue
		}
		trimValues(vs)
		h[http.TrailerPrefix+k] = append(h[http.TrailerPrefix+k], vs...)
	}
	s.noteGRPCStatus(resp.Trailer)
	return false
}

// readsAhead reports whether respond reads resp's body, whole (at most
// maxInlineBody bytes) or its first bytes, before the header goes out: a
// body with a Content-Length, but not a gRPC call's or an event stream's,
// whose messages and events are relayed as they come whatever their
// length.
func (s *stream) readsAhead(resp *http.Response) bool {
	return resp.ContentLength > 0 && !s.grpc &&
		s.r.Method != http.MethodHead && hasBody(resp.StatusCode) &&
		!isEventStream(s2b(resp.Header.Get("Content-Type")))
}

// tooLargeMidAnswer ends an answer whose request body went over the
// route's limit after the answer began. The breaker hears the upstream's
// outcome so far, a success (as for a client that went away); the access
// log the gateway's 413. A gRPC client gets RESOURCE_EXHAUSTED in the
// trailers with the gateway's message; any other has its stream reset
// (it returns true), as the answer cannot be completed.
func (s *stream) tooLargeMidAnswer(h http.Header) (abort bool) {
	if s.brkPending {
		s.brkPending = false
		s.recordBody()
	}
	status, msg := s.failure(errBodyTooLarge)
	if !s.grpc {
		return true
	}
	code := grpcCode(status, false)
	h.Set(http.TrailerPrefix+hdrGRPCStatus, strconv.Itoa(code))
	h.Set(http.TrailerPrefix+hdrGRPCMessage, string(appendGRPCMessage(nil, msg)))
	s.grpcStatus = code
	return false
}

// deadlineMidAnswer ends a gRPC call whose deadline passed after the
// answer began: the upstream call was cancelled (newNetCallUntil), and the
// client is told DEADLINE_EXCEEDED in the trailers, as the upstream itself
// would have, had it kept the grpc-timeout it was sent. The breaker and
// passive health judge it so too: by grpc_error_codes, not as a break-off.
func (s *stream) deadlineMidAnswer(h http.Header) (abort bool) {
	s.timeout = timeoutGRPC
	s.errMsg = append(s.errMsg[:0], "the call's deadline (grpc-timeout) passed"...)
	msg := fmt.Appendf(nil, errPrefix+"%s (request id %s)", s.errMsg, s.reqID)
	h.Set(http.TrailerPrefix+hdrGRPCStatus, strconv.Itoa(grpcDeadlineExceeded))
	h.Set(http.TrailerPrefix+hdrGRPCMessage, string(appendGRPCMessage(nil, msg)))
	s.grpcStatus = grpcDeadlineExceeded
	s.p.log.Debug("call deadline passed mid-answer", "upstream", s.inst.Addr, "bytes", s.bytesOut)
	return false
}

// fail answers a request the gateway could not forward (failure): for a
// gRPC client a gRPC answer, HTTP 200 with grpc-status and grpc-message
// and no body (a trailers-only response), else text/plain with the
// status; both with the decision headers. A client that went away gets
// nothing, and fail returns true: the stream is reset, if it is not gone
// already (returning without an answer would have net/http's server end
// it with an empty 200).
func (s *stream) fail(err error) (abort bool) {
	status, body := s.failure(err)
	if status == StatusClientClosedRequest {
		return true
	}
	h := s.w.Header()
	if s.grpc {
		code := grpcCode(status, errors.Is(err, errCallDeadline))
		var se http2.StreamError
		if errors.As(err, &se) && se.Code == http2.ErrCodeCancel {
			code = grpcCancelled
		}
		s.grpcAnswer(code, body, status)
		return false
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	// body shares s.scratch, which errorFields reuses (the cookie,
	// Retry-After): it is copied first, as the HTTP/1.1 codec's fail does.
	body = append([]byte(nil), body...)
	s.errorFields(&netOut{h}, status)
	s.writeFinal(status)
	n, _ := s.w.Write(body)
	m, _ := s.w.Write(newline)
	s.bytesOut = int64(n + m)
	return false
}

// grpcAnswer writes a trailers-only gRPC answer with code and msg; status
// is the HTTP status the gateway records for it.
func (s *stream) grpcAnswer(code int, msg []byte, status int) {
	h := s.w.Header()
	enc := appendGRPCMessage(nil, msg)
	h.Set("Content-Type", "application/grpc")
	h.Set(hdrGRPCStatus, strconv.Itoa(code))
	h.Set(hdrGRPCMessage, string(enc))
	s.errorFields(&netOut{h}, status)
	s.grpcStatus = code
	s.writeFinal(http.StatusOK)
}

// reject answers a request refused before routing.
func (s *stream) reject(status int, why string) {
	body := s.rejection(status, why)
	if s.grpc {
		s.grpcAnswer(grpcCode(status, false), body[:len(body)-1], status)
		s.bytesOut = 0
		return
	}
	h := s.w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set(hdrRequestID, string(s.reqID))
	s.writeFinal(status)
	_, _ = s.w.Write(body)
}

// teTrailers reports whether a TE header asks for trailers.
func teTrailers(vals []string) bool {
	for _, v := range vals {
		for _, tok := range appendListTokens(nil, [][]byte{s2b(v)}) {
			if eqFold(tok, "trailers") {
				return true
			}
		}
	}
	return false
}

// clientBody is the client's HTTP/2 request body: a readAhead (see
// upBody) of the stream's body as clientIn reads it.
type clientBody struct {
	readAhead
	in clientIn
}

func newClientBody(r *http.Request, rc *http.ResponseController, timeout time.Duration) *clientBody {
	b := &clientBody{in: clientIn{r: r, rc: rc, timeout: timeout}}
	b.src = &b.in
	return b
}

// end is called as the handler returns (see clientIn).
func (b *clientBody) end() { b.in.end() }

// clientIn reads the stream's body with the client read timeout
// (Options.ReadTimeout) kept from each read, as the HTTP/1.1 listener
// does. A gRPC stream is not timed (timeout 0): a client may rightly send
// nothing for long within its call's deadline. readAhead makes one read
// at a time, on whichever goroutine reads.
type clientIn struct {
	r       *http.Request
	rc      *http.ResponseController
	timeout time.Duration
	last    int64 // the deadline last set, Unix nanoseconds
	// The Transport may still read the body after the handler returned
	// (the upstream answered before the upload ended); the stream's
	// ResponseWriter must not be touched then. end marks that, under mu.
	mu    sync.Mutex
	ended bool
	// onEOF, if set, runs once, on the goroutine that reads the body's
	// end (keptTrailer).
	onEOF func()
}

func (c *clientIn) Read(p []byte) (int, error) {
	n, err := c.read(p)
	if err == io.EOF && c.onEOF != nil {
		c.onEOF()
		c.onEOF = nil
	}
	return n, err
}

func (c *clientIn) read(p []byte) (int, error) {
	if d := c.timeout; d > 0 {
		now := time.Now()
		want := now.Add(d).UnixNano()
		if c.last == 0 || want-c.last > int64(d/8) {
			c.last = want
			c.mu.Lock()
			if !c.ended {
				_ = c.rc.SetReadDeadline(time.Unix(0, want))
			}
			c.mu.Unlock()
		}
	}
	return c.r.Body.Read(p)
}

// end is called as the handler returns: the ResponseWriter is left alone
// from then on.
func (c *clientIn) end() {
	c.mu.Lock()
	c.ended = true
	c.mu.Unlock()
}

// readIdle cancels a call whose response body goes silent for longer than
// Options.UpstreamReadTimeout.
type readIdle struct {
	d      time.Duration
	t      *time.Timer
	last   time.Time
	expire atomic.Bool
}

func newReadIdle(d time.Duration, call *netCall) *readIdle {
	ri := &readIdle{d: d, last: time.Now()}
	ri.t = time.AfterFunc(d, func() {
		ri.expire.Store(true)
		call.cancel(&timeoutError{"upstream body read timed out"})
	})
	return ri
}

// keep moves the timer to d from now when it is off by more than d/8.
func (ri *readIdle) keep() {
	now := time.Now()
	if now.Sub(ri.last) > ri.d/8 {
		ri.last = now
		ri.t.Reset(ri.d)
	}
}

// restart runs the timer d from now, after a stop.
func (ri *readIdle) restart() { ri.t.Reset(ri.d) }

func (ri *readIdle) fired() bool { return ri.expire.Load() }
func (ri *readIdle) stop()       { ri.t.Stop() }
