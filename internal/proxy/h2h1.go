package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/graygate/graygate/internal/upstream"
)

// An HTTP/2 client's request without a body to an http1 pool (the common
// GET) does not go through net/http's Transport, whose two goroutines per
// connection and channel hand-offs were about a third of the HTTP/2
// codec's CPU. It goes over the HTTP/1.1 codec's pooled connections to the
// instance (Proxy.client: the same pools, the same check of an idle
// connection before it is reused, the same bound on stale ones), and is
// written and read on the stream's own goroutine with net/http's
// Request.Write and ReadResponse. A request with a body keeps the
// Transport, which sends the body while it waits for the answer (an
// upstream may answer before it has read the body), as do a request that
// declares trailers and CONNECT. Either way the answer's head gets the
// HTTP/1.1 codec's framing checks (framing.go): one framed two ways closes
// its connection after the answer, and a chunked body whose first line
// the parser refuses is a 502 (sendH1 here, headConn on the Transport's
// connections).
//
// The deadlines are the call's, as for the Transport: the header timer
// and the client's cancellation end the call's context, and ending it
// sets a past deadline on the connection (context.AfterFunc), which stops
// a blocked write or read. The body's idle timeout (readIdle) ends the
// context the same way. A connection goes back to the pool only when its
// body was read to the end, it may be kept (no Connection: close) and
// nothing followed the response; else it is closed.

// fastH1 reports whether out goes over roundTripH1.
func fastH1(pool *upstream.Pool, out *http.Request) bool {
	return pool.Protocol == upstream.HTTP1 && out.Body == nil && out.Trailer == nil && out.Method != http.MethodConnect
}

// roundTripH1 sends out (without a body) on a pooled connection of the
// instance and reads the response header. A reused connection that turns
// out to be stale (closed or reset before any answer) is dropped and the
// request, if its method is safe, goes on another one, as in the HTTP/1.1
// codec's send.
func (s *stream) roundTripH1(out *http.Request, call *netCall) (*http.Response, error) {
	now := s.wallStart()
	uc := s.uc // taken for the attempt by holdFor10
	safe := safeMethod(s2b(out.Method))
	stale, retries := 0, 0
	for {
		c, err := s.p.getChecked(uc, &stale, now, !safe || stale > 0)
		if err != nil {
			return nil, err
		}
		reused := c.Reused()
		resp, err := s.sendH1(uc, c, c.Conn(), out, call)
		if err == nil {
			return resp, nil
		}
		var se *staleError
		if reused && safe && errors.As(err, &se) && call.ctx.Err() == nil {
			if retries++; retries <= maxStaleConns {
				stale++
				continue
			}
		}
		return nil, err
	}
}

// sendH1 is one attempt of roundTripH1 on the connection c.
func (s *stream) sendH1(uc *upstreamClient, c upstreamConn, conn net.Conn, out *http.Request, call *netCall) (*http.Response, error) {
	stop := context.AfterFunc(call.ctx, func() { _ = conn.SetDeadline(aLongTimeAgo) })
	var br *bufio.Reader
	fail := func(err error) (*http.Response, error) {
		stop()
		if br != nil {
			uc.hc.ReleaseReader(br)
		}
		c.Release(false)
		return nil, err
	}
	var wdl time.Time
	if d := s.opts.UpstreamWriteTimeout; d > 0 {
		wdl = time.Now().Add(d)
	}
	// The HTTP/1.1 codec sets its own deadlines on every exchange; these
	// are this one's: the write's bound, and no read deadline but the
	// call's.
	if err := conn.SetWriteDeadline(wdl); err != nil {
		return fail(fmt.Errorf("sending request to %s: %w", uc.addr, err))
	}
	if err := conn.SetReadDeadline(time.Time{}); err != nil {
		return fail(fmt.Errorf("sending request to %s: %w", uc.addr, err))
	}
	bw := uc.hc.AcquireWriter(conn)
	err := out.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	uc.hc.ReleaseWriter(bw)
	if err != nil {
		if isTimeout(err) && call.ctx.Err() == nil {
			s.timeout = timeoutUpstreamWrite
			return fail(fmt.Errorf("sending request to %s: %w", uc.addr, err))
		}
		return fail(&staleError{fmt.Errorf("sending request to %s: %w", uc.addr, err)})
	}
	br = uc.hc.AcquireReader(conn)
	if _, err := br.Peek(1); err != nil {
		// No answer at all: closed or reset (stale, on a reused
		// connection), or the call ended (netError tells which).
		return fail(&staleError{fmt.Errorf("reading response header from %s: %w", uc.addr, err)})
	}
	resp, conflict, err := readResponseH1(br, out, s.interim)
	if err != nil {
		return fail(fmt.Errorf("reading response header from %s: %w", uc.addr, err))
	}
	if conflict {
		// Framed two ways: relayed as net/http framed it (chunked, its
		// Content-Length removed), on a connection closed after it, as
		// the HTTP/1.1 codec does (readHead).
		s.p.violation(violationFramingConflict)
	}
	after, _ := br.Peek(br.Buffered())
	if err := checkFirstChunkNet(resp, after); err != nil {
		return fail(fmt.Errorf("%w from %s: %w", errBadChunk, uc.addr, err))
	}
	b := &h1Body{r: resp.Body, br: br, c: c, uc: uc, stop: stop, keep: !resp.Close && !conflict}
	if resp.Body == http.NoBody {
		b.finish(true) // nothing more on the wire: the connection goes back now
		return resp, nil
	}
	resp.Body = b
	return resp, nil
}

// errResponseHeaderTooLarge is an upstream response header that does not
// fit in the connection's reader (MaxResponseHeaderBytes).
var errResponseHeaderTooLarge = errors.New("upstream response header too large")

// errSwitchedProtocols is a 101 answer to a request that asked for no
// upgrade (an HTTP/2 client cannot).
var errSwitchedProtocols = errors.New("upstream switched protocols unasked")

// interim forwards an upstream's interim (1xx) response to the HTTP/2
// client (RFC 9110 section 15.2), as the HTTP/1.1 codec does: its fields
// but the hop-by-hop ones and the gateway's own go out in an
// informational HEADERS frame, and are removed again so that the final
// response does not carry them. 100 Continue is the gateway's business
// (the client's Expect) and is not forwarded. It is the
// Got1xxResponse of the Transport's calls too, which put no bound of
// their own on the interim responses they hand to the hook: like the
// HTTP/1.1 transport (finishHeader) it allows maxInterimResponses per
// attempt, 100 Continue included, and past them the upstream is broken
// (errTooManyInterim fails the round trip: 502, a breaker failure).
func (s *stream) interim(code int, h textproto.MIMEHeader) error {
	if s.n1xx++; s.n1xx > maxInterimResponses {
		return errTooManyInterim
	}
	if code == http.StatusContinue {
		return nil
	}
	out := s.w.Header()
	var added []string
	s.netConnTokens(http.Header(h))
	defer func() {
		clear(s.tokens)
		s.tokens = s.tokens[:0]
	}()
	for k, vs := range h {
		if _, had := out[k]; had || s.dropResponseField(s2b(k)) || k == "Content-Length" || k == "Transfer-Encoding" {
			continue
		}
		out[k] = vs
		added = append(added, k)
	}
	s.w.WriteHeader(code)
	for _, k := range added {
		delete(out, k)
	}
	return nil
}

// unrelayableStatus returns the error for a response that no client may
// be given, and closes its body: a status outside 100..599
// (errInvalidStatus), 101 (errSwitchedProtocols) on a path that carries no
// upgrade, or a header field name that is not a token (errBadFieldName,
// as checkFinal). It returns nil for any other.
func unrelayableStatus(resp *http.Response) error {
	var err error
	switch {
	case !validStatus(resp.StatusCode):
		err = invalidStatus(resp.StatusCode)
	case resp.StatusCode == http.StatusSwitchingProtocols:
		err = errSwitchedProtocols
	default:
		for k := range resp.Header {
			if !httpguts.ValidHeaderFieldName(k) {
				err = fmt.Errorf("%w: %q", errBadFieldName, k)
				break
			}
		}
		if err == nil {
			return nil
		}
	}
	_ = resp.Body.Close()
	return err
}

// h1Version refuses a response read from an HTTP/1 connection whose
// version is not HTTP/1.0 or 1.1, as readHead does for fasthttp's reader:
// net/http's takes any HTTP/x.y.
func h1Version(resp *http.Response) error {
	if resp.ProtoMajor == 1 && resp.ProtoMinor <= 1 {
		return nil
	}
	return fmt.Errorf("%w %q", errResponseVersion, resp.Proto)
}

// readResponseH1 reads the final response to req from br: interim (1xx)
// responses, up to maxInterimResponses, are handed to interim (when not
// nil) and skipped; each header must fit in br (headerFits). conflict
// reports a final response framed two ways (framingConflict), whose
// connection must not be reused: net/http's reader frames it as RFC 9112
// says (chunked wins, and its Content-Length is removed) but leaves the
// connection open.
func readResponseH1(br *bufio.Reader, req *http.Request, interim func(int, textproto.MIMEHeader) error) (resp *http.Response, conflict bool, err error) {
	for i := 0; ; i++ {
		if err := headerFits(br); err != nil {
			return nil, false, err
		}
		// The head is all in br (headerFits), so reading it does not
		// refill br: head still holds it afterwards.
		buf, _ := br.Peek(br.Buffered())
		head := buf[:headEnd(buf)]
		closeColons(head) // in br's buffer, before net/http reads it
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return nil, false, err
		}
		if err := h1Version(resp); err != nil {
			_ = resp.Body.Close()
			return nil, false, err
		}
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols || !validStatus(resp.StatusCode):
			return nil, false, unrelayableStatus(resp)
		case resp.StatusCode >= 200:
			var facts headFacts
			facts.read(head)
			if err := facts.apply(resp); err != nil {
				_ = resp.Body.Close()
				return nil, false, err
			}
			chunked := len(resp.TransferEncoding) > 0
			http11 := resp.ProtoAtLeast(1, 1)
			return resp, (chunked || !http11) && framingConflict(head, chunked, http11), nil
		}
		if i >= maxInterimResponses {
			return nil, false, errTooManyInterim
		}
		if interim != nil {
			if err := interim(resp.StatusCode, textproto.MIMEHeader(resp.Header)); err != nil {
				return nil, false, err
			}
		}
	}
}

// headerFits waits until br holds the end of a response header (an empty
// line, CRLF or bare LF) and fails when the header would not fit in br's
// buffer, the bound net/http's Transport puts on it with
// MaxResponseHeaderBytes.
func headerFits(br *bufio.Reader) error {
	return bufferUntil(br, errResponseHeaderTooLarge, lfCRLF, lfLF)
}

// bufferUntil waits until br holds one of ends, each byte scanned once. It
// returns full when br's buffer fills first, and the read error when the
// connection ends or fails first.
func bufferUntil(br *bufio.Reader, full error, ends ...[]byte) error {
	overlap := 0
	for _, e := range ends {
		overlap = max(overlap, len(e)-1)
	}
	scanned := 0
	for {
		b, _ := br.Peek(br.Buffered())
		rest := b[max(scanned-overlap, 0):]
		for _, e := range ends {
			if bytes.Contains(rest, e) {
				return nil
			}
		}
		scanned = len(b)
		if len(b) >= br.Size() {
			return full
		}
		if _, err := br.Peek(len(b) + 1); err != nil { // more, or the end
			return err
		}
	}
}

// h1Body is the response body of roundTripH1: net/http's reader of the
// body, and the connection it reads from, released at the end.
type h1Body struct {
	r    io.ReadCloser
	br   *bufio.Reader
	c    upstreamConn
	uc   *upstreamClient
	stop func() bool
	keep bool
	done bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.finish(true)
	}
	return n, err
}

// Close ends a body that was not read to its end: its connection is
// closed.
func (b *h1Body) Close() error {
	if !b.done {
		b.finish(false)
	}
	return nil
}

// finish releases the connection: back to the pool after the whole body,
// when it may be kept, nothing followed the response and the call's
// cancellation did not touch it (stop reports it never ran); else closed.
func (b *h1Body) finish(eof bool) {
	b.done = true
	reuse := eof && b.keep && b.br.Buffered() == 0 && b.stop()
	if !reuse {
		b.stop()
	}
	b.uc.hc.ReleaseReader(b.br)
	b.c.Release(reuse)
}

// headConn is a connection of the Transport that carries an HTTP/2
// client's request with a body to an http1 pool. net/http's reader frames
// a response with both Content-Length and Transfer-Encoding: chunked, or
// an HTTP/1.0 one with Transfer-Encoding, as RFC 9112 says, and then pools
// the connection, and it reads the body's first chunk line only when the
// body is read, after the client has its 200; neither can be told from
// the response it returns. So the connection looks at each final response
// head before the Transport reads it (arm, on the trace's GotConn, which
// comes before the request is written), as readResponseH1 does on the
// HTTP/1.1 codec's connections: a head framed two ways gets a
// "Connection: close" field after its status line, so that the Transport
// closes the connection after the response (resp.Close) instead of
// pooling it, and what came with the head is kept for checkFirstChunkNet.
// Nothing else of the bytes is changed, and net/http still parses all of
// them. A final head that comes whole in one read (all of them in
// practice) is looked at in place; one in parts is held back until its
// end, up to max bytes, past which it is handed over as it is, for the
// Transport to refuse (MaxResponseHeaderBytes). Interim (1xx) heads are
// handed over as they come, so that they reach the client at once.
type headConn struct {
	net.Conn
	max int
	mu  sync.Mutex
	// armed: the final head of the response to the request under way has
	// not been looked at yet.
	armed bool
	// conflict and after are what that head showed: framed two ways, and,
	// chunked, the bytes that came with it after it, up to the end of the
	// first line or maxChunkLine.
	conflict bool
	after    []byte
	facts    headFacts
	// look holds what was read of a head that is not all there yet;
	// pending what was read and may be handed to the Transport; err the
	// error of a read whose bytes were held, for when both are empty.
	look    []byte
	pending []byte
	err     error
	// body is the request body the Transport sends on c (arm), whose read
	// is given up if c closes first (upBody.connClosed): the Transport
	// waits for that read before it returns the round trip's failure, and
	// never closes the body meanwhile.
	body *upBody
}

// maxChunkLine bounds what headConn keeps after a head: net/http's chunk
// parser refuses a longer line anyway.
const maxChunkLine = 4096

// hdrConnClose is the field a head framed two ways gets (see headConn).
var hdrConnClose = []byte("Connection: close\r\n")

// arm readies c for the response to a request about to be written on it,
// with body (nil: none the Transport could wait on).
func (c *headConn) arm(body *upBody) {
	c.mu.Lock()
	c.armed, c.conflict, c.after = true, false, c.after[:0]
	c.facts = headFacts{conn: c.facts.conn[:0]}
	c.body = body
	c.mu.Unlock()
}

// carried forgets body, which its request is done with, unless c carries
// another by now: an idle connection does not keep a stream's body.
func (c *headConn) carried(body *upBody) {
	c.mu.Lock()
	if c.body == body {
		c.body = nil
	}
	c.mu.Unlock()
}

// Close closes the connection, and gives up a read of the body it carries
// (see body).
func (c *headConn) Close() error {
	err := c.Conn.Close()
	c.mu.Lock()
	b := c.body
	c.body = nil
	c.mu.Unlock()
	if b != nil {
		b.connClosed()
	}
	return err
}

// seen returns what the last response's head showed (see headConn and
// headFacts). The Transport has read the head when RoundTrip returns, so
// has c.
func (c *headConn) seen() (conflict bool, after []byte, facts headFacts) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.facts
	f.conn = slices.Clone(f.conn)
	return c.conflict, c.after, f
}

func (c *headConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 && len(c.look) == 0 {
		c.mu.Unlock()
		n, err := c.Conn.Read(p)
		c.mu.Lock()
		// The Transport reads an idle connection all along, so a
		// response's first bytes may come to a read begun before arm:
		// whether to look at them is asked once they are there.
		if !c.armed || n == 0 || c.whole(p[:n]) {
			return n, err
		}
		c.look, c.err = append(c.look[:0], p[:n]...), err
	}
	for len(c.pending) == 0 && c.armed {
		c.sort()
		if len(c.pending) > 0 || !c.armed {
			break
		}
		if c.err != nil || len(c.look) > c.max {
			// Broken off, or too large: the Transport says so.
			c.pending, c.look, c.armed = append(c.pending, c.look...), c.look[:0], false
			break
		}
		c.look = slices.Grow(c.look, 4096)
		c.mu.Unlock()
		m, err := c.Conn.Read(c.look[len(c.look):cap(c.look)])
		c.mu.Lock()
		c.look, c.err = c.look[:len(c.look)+m], err
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	var err error
	if len(c.pending) == 0 && len(c.look) == 0 {
		err, c.err = c.err, nil
	}
	return n, err
}

// whole looks at b, what one read brought, when the final head is all in
// it and needs no change: it reports whether b may go to the Transport as
// it is.
func (c *headConn) whole(b []byte) bool {
	start, end := finalHead(b)
	if end == 0 || start > 0 || c.examine(b[start:end], b[end:]) {
		// Interim heads before the final one are looked at one by one
		// (sort).
		return false
	}
	c.armed = false
	return true
}

// sort moves from look to pending the interim heads that are there whole,
// and the final head once it is, with what follows it, changed if it is
// framed two ways.
func (c *headConn) sort() {
	for c.armed {
		e := headEnd(c.look)
		if e == 0 {
			return
		}
		head := c.look[:e]
		if interimHead(head) {
			if v := statusLine(head); !h1StatusLine(v) {
				// net/http takes any HTTP/x.y for an interim
				// answer, and would relay it; the HTTP/1.1 codec
				// refuses it (readHead), and so does the attempt.
				v, _, _ = bytes.Cut(v, []byte(" "))
				c.err = fmt.Errorf("%w %q", errResponseVersion, v)
				c.look, c.armed = c.look[:0], false
				return
			}
			c.pending, c.look = append(c.pending, head...), c.look[e:]
			continue
		}
		c.armed = false
		at := 0
		if c.examine(head, c.look[e:]) {
			// The field goes last, before the empty line that ends
			// the head. After the status line, it took a field line
			// that starts with whitespace (which net/http refuses
			// there, as the HTTP/1.1 codec does) for its own
			// continuation, and the head was relayed.
			at = e - 1
			if head[at-1] == '\r' && head[at-2] == '\n' {
				at-- // the empty line is CRLF
			}
			c.pending = append(append(c.pending, c.look[:at]...), hdrConnClose...)
		}
		c.pending, c.look = append(c.pending, c.look[at:]...), c.look[:0]
	}
}

// examine notes what the final head shows (see headConn), rest being what
// came after it, and reports whether it is framed two ways. net/http
// takes an HTTP/1.1 answer with any Transfer-Encoding for chunked (or
// refuses it), and ignores the field in HTTP/1.0.
func (c *headConn) examine(head, rest []byte) bool {
	http10 := bytes.HasPrefix(statusLine(head), []byte("HTTP/1.0"))
	chunked := !http10 && hasField(head, "transfer-encoding")
	c.after = c.after[:0]
	if chunked {
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			rest = rest[:i+1]
		}
		c.after = append(c.after, rest[:min(len(rest), maxChunkLine)]...)
	}
	c.conflict = framingConflict(head, chunked, !http10)
	c.facts.read(head)
	closeColons(head) // in the bytes the Transport is handed
	return c.conflict
}

// finalHead returns where the final response head in b starts and ends,
// after the interim ones before it; end is 0 when b does not hold all of
// it.
func finalHead(b []byte) (start, end int) {
	for {
		e := headEnd(b[start:])
		if e == 0 {
			return 0, 0
		}
		if !interimHead(b[start : start+e]) {
			return start, start + e
		}
		start += e
	}
}

// interimHead reports whether head is a 1xx response's other than 101,
// which net/http takes as final.
func interimHead(head []byte) bool {
	_, code, _ := bytes.Cut(statusLine(head), []byte(" "))
	if len(code) < 3 {
		return false
	}
	status, err := strconv.Atoi(string(code[:3]))
	return err == nil && isInterim(status)
}

// h1StatusLine reports whether a status line is of HTTP/1.1 or 1.0, the
// versions readHead takes.
func h1StatusLine(line []byte) bool {
	return bytes.HasPrefix(line, []byte("HTTP/1.1 ")) || bytes.HasPrefix(line, []byte("HTTP/1.0 "))
}

// statusLine returns the first line of head that is not empty, without
// its line end.
func statusLine(head []byte) []byte {
	head = bytes.TrimLeft(head, "\r\n")
	if i := bytes.IndexByte(head, '\n'); i >= 0 {
		head = head[:i]
	}
	return bytes.TrimSuffix(head, []byte("\r"))
}

// headFacts is what a final response head says that net/http's reading of
// it hides, for the HTTP/2 listener's way to an http1 pool to answer as
// the HTTP/1.1 codec does. Two things the HTTP/1.1 codec refuses (a 502)
// and net/http takes: more than one Content-Length line (net/http takes
// repeated equal ones for one), and a Trailer field that is not a list of
// field names (judged in apply, on net/http's reading, which has joined a
// folded line as fasthttp does). And its Connection values: net/http
// drops the whole field when it holds "close", and with it the names of
// the hop-by-hop fields it lists, which then went through to an HTTP/2
// client ("Connection: close, X-Secret" passed X-Secret on).
type headFacts struct {
	lengths int
	conn    []string
}

// The heads headFacts refuses.
var (
	errRepeatedLength = errors.New("upstream response has more than one Content-Length")
	errBadTrailer     = errors.New("upstream response has a Trailer field that is not a list of field names")
)

// read notes what head shows.
func (f *headFacts) read(head []byte) {
	f.lengths, f.conn = 0, f.conn[:0]
	for range fieldValues(head, "content-length", false) {
		f.lengths++
	}
	for v := range fieldValues(head, "connection", true) {
		f.conn = append(f.conn, string(v))
	}
}

// apply refuses resp for what its head showed, or gives it back the
// Connection values net/http took out, for filterNetResponse to act on.
func (f *headFacts) apply(resp *http.Response) error {
	if f.lengths > 1 {
		return errRepeatedLength
	}
	// net/http takes the Trailer field of a chunked answer out into
	// resp.Trailer's keys, and leaves that of any other.
	for k := range resp.Trailer {
		if !httpguts.ValidHeaderFieldName(k) {
			return errBadTrailer
		}
	}
	for _, v := range resp.Header["Trailer"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.Trim(name, " \t"); name != "" && !httpguts.ValidHeaderFieldName(name) {
				return errBadTrailer
			}
		}
	}
	if len(f.conn) > 0 {
		resp.Header["Connection"] = slices.Clone(f.conn)
	}
	return nil
}

// closeColons removes, in place, the spaces between a field name and its
// colon in head, a response head ("X-A : 1"), as RFC 9112 section 5.1 has
// a proxy do before it forwards a response. The HTTP/1.1 codec's parser
// (fasthttp) drops them; net/http refuses the line, so the HTTP/2
// listener's client got a 502 where an HTTP/1.1 client got the answer (a
// tab there is refused by both: 502). The spaces move after the colon,
// where they are optional whitespace every parser drops, so the head
// keeps its length and the bytes after it stay where they are. The
// status line and continuation lines (which start with whitespace) are
// left alone.
func closeColons(head []byte) {
	_, rest, _ := bytes.Cut(head, []byte("\n")) // after the status line
	for len(rest) > 0 {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		if len(line) == 0 || line[0] == ' ' || line[0] == '\t' {
			continue
		}
		c := bytes.IndexByte(line, ':')
		n := c
		for n > 0 && line[n-1] == ' ' {
			n--
		}
		if n > 0 && n < c {
			copy(line[n+1:c+1], line[n:c])
			line[n] = ':'
		}
	}
}
