package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/internal/listener"
)

// reqBody is the client's request body as the upstream request reads it.
// It remembers a failure to read it, which means the client broke off the
// upload (499), stalled for longer than Options.ReadTimeout (408) or sent
// a malformed body (400), as opposed to a failure to write it upstream
// (502). It also enforces Policy.MaxBodyBytes on bodies whose size was not
// declared, and can first hand out pre, the part of a chunked body read
// while trying to buffer it for a replay.
type reqBody struct {
	f    *flow
	src  io.Reader
	size int64 // Content-Length, or -1 for chunked
	n    int64 // bytes read from src
	max  int64 // Policy.MaxBodyBytes; 0 means no limit
	pre  []byte
	// read: an attempt has read the body (refusedUnread).
	read bool
}

func (b *reqBody) Read(p []byte) (int, error) {
	b.read = true
	if len(b.pre) > 0 {
		n := copy(p, b.pre)
		b.pre = b.pre[n:]
		return n, nil
	}
	n, err := b.src.Read(p)
	b.n += int64(n)
	switch {
	case b.max > 0 && b.n > b.max:
		// The upstream gets a truncated body and a closed connection;
		// the client gets 413.
		b.f.tooLarge = true
		return 0, errBodyTooLarge
	case err == io.EOF && b.size >= 0 && b.n < b.size:
		// fasthttp's server stream reports a connection closed mid-body
		// as a plain EOF (net/http's HTTP/2 body reports its own error).
		b.f.clientErr = io.ErrUnexpectedEOF
		return n, io.ErrUnexpectedEOF
	case err != nil && err != io.EOF:
		b.f.clientErr = err
	}
	return n, err
}

// isBadBody reports whether a failure to read a request body is the
// body's own fault (its chunked framing), found by the listener's Guard or
// by fasthttp's chunk parser, rather than the client going away.
func isBadBody(ctx *fasthttp.RequestCtx, err error) bool {
	if ctx == nil {
		return false
	}
	var gerr *listener.Error
	var brk fasthttp.ErrBrokenChunk
	return errors.As(err, &gerr) || errors.As(err, &brk) || bodyRefused(ctx) != nil
}

// clientConn returns the listener's connection under ctx, over TLS too,
// or nil.
func clientConn(ctx *fasthttp.RequestCtx) *listener.Conn {
	c := ctx.Conn()
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	lc, _ := c.(*listener.Conn)
	return lc
}

// bodyRefused returns the listener's refusal of this request's body, if
// the malformed part has already arrived.
func bodyRefused(ctx *fasthttp.RequestCtx) *listener.Error {
	if lc := clientConn(ctx); lc != nil {
		return lc.BodyRefused(ctx.ConnRequestNum())
	}
	return nil
}

// respBody is the upstream response body as fasthttp's server writes it to
// the client. fasthttp closes it, with the write error if any, after the last
// byte or when the response is dropped, and that is when the exchange ends:
// the upstream connection goes back and OnDone and the access log run.
// Every read first keeps the upstream's read deadline at
// Options.UpstreamReadTimeout from now, so an upstream that stalls
// mid-body is cut off.
type respBody struct {
	ex *exchange
}

func (b *respBody) Read(p []byte) (int, error) {
	ex := b.ex
	if ex.upErr != nil {
		// A failure is final. fasthttp's chunked writer reads again after
		// an error that came with data, and its chunk reader, which does
		// not keep its error, then reads the bytes past the flaw as more
		// chunks: "2\r\n0000\r\n" went out as a complete "00", though
		// net/http's client refuses it (TestMalformedFirstChunk). An end
		// (io.EOF) always comes with no data, and is not read past.
		return 0, ex.upErr
	}
	if err := ex.keepUpstreamReadDeadline(); err != nil {
		ex.upErr = err
		return 0, err
	}
	n, err := ex.upBody.Read(p)
	ex.bytesOut += int64(n)
	if ex.mirror == mirrorOn {
		ex.teeBody(p[:n])
	}
	switch {
	case err == io.EOF:
		ex.upEOF, ex.respEnded = true, true
		ex.forwardTrailers()
	case forbiddenTrailer(err):
		// The last chunk has been read: fasthttp refuses a trailer
		// section with a field RFC 9110 section 6.5.1 keeps out of
		// trailers (Content-Length, Host, Authorization...). The
		// section is read as net/http's client reads it, once it has
		// ended, and the body ends, not cut off; such fields are
		// dropped and the others relayed, as on the other paths (an
		// HTTP/2 client's, an h2 pool's).
		tr, serr := readTrailerSection(ex.br)
		if serr != nil {
			ex.upErr = fmt.Errorf("%w: %w", serr, err)
			if isTimeout(serr) {
				ex.timeout = timeoutUpstreamRead
			}
			return n, ex.upErr
		}
		ex.upEOF, ex.respEnded = true, true
		ex.p.log.Debug("upstream trailer fields that may not be trailers dropped", "upstream", ex.inst.Addr, "error", err)
		ex.forwardReadTrailers(tr)
		return n, io.EOF
	case err != nil:
		ex.upErr = err
		if isTimeout(err) {
			ex.timeout = timeoutUpstreamRead
		}
	}
	return n, err
}

// readTrailerSection reads the trailer section at the start of br, which
// fasthttp's parser left unread when it refused it, as net/http's client
// does: a CRLF CRLF must come within br's buffer ("suspiciously long
// trailer" otherwise) and the read timeout, and the fields up to the
// first empty line must be well-formed (textproto.Reader.ReadMIMEHeader,
// which also takes bare LF line ends). A section that is cut short, never
// ends or holds a malformed field is a body that broke off.
func readTrailerSection(br *bufio.Reader) (textproto.MIMEHeader, error) {
	if err := bufferUntil(br, errTrailerTooLong, crlfCRLF); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("%w: %w", errBadTrailerSection, err)
	}
	b, _ := br.Peek(br.Buffered())
	src := bytes.NewReader(b)
	r := bufio.NewReader(src)
	tr, err := textproto.NewReader(r).ReadMIMEHeader()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadTrailerSection, err)
	}
	_, _ = br.Discard(len(b) - src.Len() - r.Buffered())
	return tr, nil
}

// forwardReadTrailers hands to the client's response, which fasthttp
// writes after the last chunk, the fields of a trailer section
// readTrailerSection read: not those that may not be
// trailers (RFC 9110 section 6.5.1, listener.BadTrailer), nor those
// dropTrailerField drops from every answer's trailers, nor empty ones.
func (ex *exchange) forwardReadTrailers(tr textproto.MIMEHeader) {
	if ex.respOut == nil {
		return
	}
	for k, vs := range tr {
		// The spaces before a line's colon ("X-T : 1") are in the name
		// net/http's reader gives; they go, as on the other paths (the
		// HTTP/2 listener's respond, closeColons).
		k = strings.TrimRight(k, " ")
		if listener.BadTrailer(s2b(k)) || ex.dropTrailerField(s2b(k)) {
			continue
		}
		for _, v := range vs {
			if v == "" {
				continue
			}
			if !containsFold(ex.respOut.PeekTrailerKeys(), s2b(k)) && ex.respOut.AddTrailer(k) != nil {
				break
			}
			ex.respOut.Add(k, v)
		}
	}
}

// errBadTrailerSection is an upstream trailer section that does not end
// well: cut short, over the buffer, or malformed.
var errBadTrailerSection = errors.New("malformed trailer section")

// errTrailerTooLong is a trailer section with no end within the buffer.
var errTrailerTooLong = errors.New("no end within the read buffer")

// forbiddenTrailer reports whether err is fasthttp's refusal of a trailer
// section for a field that may not be a trailer. fasthttp parses the
// section only after the last chunk, and says so in its message alone (no
// sentinel error): TestForbiddenTrailerDiscarded pins the wording.
func forbiddenTrailer(err error) bool {
	return err != nil && strings.Contains(err.Error(), "forbidden trailer key ")
}

// keepUpstreamReadDeadline keeps the read deadline of the upstream
// connection at UpstreamReadTimeout from now, moving it only when it is off
// by more than an eighth of the timeout.
func (ex *exchange) keepUpstreamReadDeadline() error {
	d := ex.opts.UpstreamReadTimeout
	want := time.Now().Add(d).UnixNano()
	if listener.Keeps(ex.upRDL, want, int64(d/8)) {
		return nil
	}
	ex.upRDL = want
	return ex.up.Conn().SetReadDeadline(time.Unix(0, want))
}

// forwardTrailers hands the trailer fields that ended a chunked upstream
// body to the client's response, which fasthttp writes after the last
// chunk, but those dropTrailerField refuses. The response header has been
// written by then, so a trailer the upstream did not announce is added to
// the trailer section only.
func (ex *exchange) forwardTrailers() {
	if ex.respOut == nil {
		return
	}
	for _, k := range ex.resp.Header.PeekTrailerKeys() {
		if ex.dropTrailerField(k) {
			continue
		}
		v := ex.resp.Header.PeekBytes(k)
		if len(v) == 0 {
			continue
		}
		if !containsFold(ex.respOut.PeekTrailerKeys(), k) {
			_ = ex.respOut.AddTrailerBytes(k)
		}
		ex.respOut.SetBytesKV(k, v)
	}
}

func containsFold(list [][]byte, k []byte) bool {
	for _, x := range list {
		if eqFold(x, b2s(k)) {
			return true
		}
	}
	return false
}

func hasUnderscore(b []byte) bool {
	for _, c := range b {
		if c == '_' {
			return true
		}
	}
	return false
}

// CloseWithError implements fasthttp.ReadCloserWithError.
func (b *respBody) CloseWithError(werr error) error {
	ex := b.ex
	if !ex.streaming {
		return nil
	}
	ex.streaming = false
	ex.releaseUpstream(ex.upEOF)
	switch {
	case ex.upErr != nil:
		ex.p.log.Warn("upstream body broke off",
			"upstream", ex.inst.Addr, "bytes", ex.bytesOut, "timeout", ex.timeout, "error", ex.upErr)
	case werr != nil && !errors.Is(werr, io.EOF):
		ex.writeErr = werr
		if isTimeout(werr) {
			ex.timeout = timeoutClientWrite
		}
		ex.p.log.Debug("client write failed", "upstream", ex.inst.Addr, "bytes", ex.bytesOut, "error", werr)
	}
	ex.finish()
	return nil
}

// isTLSConn reports whether a client connection is a TLS one (a
// listener.Conn that terminated TLS).
func isTLSConn(c net.Conn) bool {
	t, ok := c.(interface{ TLS() bool })
	return ok && t.TLS()
}
