package listener

import (
	"bytes"
	"strconv"
	"unsafe"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"
)

// Error is a request the guard refused: the status the client is answered
// with (400, 431 or 505) and why. Once a connection has produced an Error,
// every later read of it returns the same Error.
type Error struct {
	Status int
	Reason string
}

func (e *Error) Error() string { return e.Reason }

// The guard's refusals.
var (
	errBareLF        = &Error{400, "line not terminated by CRLF (bare LF)"}
	errBareCR        = &Error{400, "bare CR in the message head"}
	errRequestLine   = &Error{400, "malformed request line"}
	errMethod        = &Error{400, "invalid method in the request line"}
	errTarget        = &Error{400, "invalid request target"}
	errEmptyHost     = &Error{400, "empty host in the request target"}
	errHashAuthority = &Error{400, "'#' in the request target's authority"}
	errBadEscape     = &Error{400, "invalid percent-encoding in the request target"}
	errScheme        = &Error{400, "request target in absolute form with a scheme other than http or https"}
	errTargetHost    = &Error{400, "invalid host in the request target"}
	errVersion       = &Error{400, "malformed HTTP version"}
	errUnsupported   = &Error{505, "HTTP version not supported (HTTP/1.0 and HTTP/1.1 are)"}
	errObsFold       = &Error{400, "obsolete line folding in the header"}
	errNoColon       = &Error{400, "header line without a colon"}
	errFieldName     = &Error{400, "invalid header field name"}
	errNameSpace     = &Error{400, "whitespace between a header field name and its colon"}
	errFieldValue    = &Error{400, "invalid header field value"}
	errNoHost        = &Error{400, "missing Host header"}
	errTwoHosts      = &Error{400, "more than one Host header"}
	errBadHost       = &Error{400, "invalid Host header"}
	errCLAndTE       = &Error{400, "both Content-Length and Transfer-Encoding"}
	errTwoCL         = &Error{400, "more than one Content-Length"}
	errBadCL         = &Error{400, "invalid Content-Length"}
	errTECoding      = &Error{400, "Transfer-Encoding other than chunked"}
	errTETab         = &Error{400, "a tab around the Transfer-Encoding value"}
	errConnection    = &Error{400, "a Connection field that is not a list of tokens"}
	errTE10          = &Error{400, "Transfer-Encoding in an HTTP/1.0 request"}
	errChunkSize     = &Error{400, "invalid chunk size"}
	errChunkExt      = &Error{400, "invalid chunk extension"}
	errChunkEnd      = &Error{400, "chunk data not followed by CRLF"}
	errChunkLine     = &Error{400, "chunk size line too long"}
	errHeadTooLarge  = &Error{431, "request header fields too large"}
	errUnknownMethod = &Error{400, "unknown method"}
	errEmptyLine     = &Error{400, "empty line before the request line"}
	errExpectation   = &Error{417, "unsupported expectation (only 100-continue is)"}
	errTrailerField  = &Error{400, "a field that may not be sent as a trailer"}
	errTrailerLarge  = &Error{431, "request trailer fields too large"}
)

// maxChunkLine bounds a chunk-size line, extensions included.
const maxChunkLine = 4096

// maxChunkSizeDigits is the most hex digits a chunk size may have: what
// fasthttp's chunk parser reads on 64-bit platforms. Go and llhttp take 16;
// a 16-digit size is refused rather than parsed differently.
const maxChunkSizeDigits = 15

type state uint8

const (
	stStart     state = iota // before a request line; empty lines are skipped
	stHead                   // header field lines
	stBody                   // the rest of a Content-Length body
	stChunkSize              // a chunk-size line
	stChunkData              // the rest of a chunk's data
	stChunkCR                // the CR after chunk data
	stChunkLF                // the LF after chunk data
	stTrailer                // trailer field lines
	stTunnel                 // after a WebSocket handshake or CONNECT: not HTTP any more
	stFailed
)

// Guard checks the bytes a client sends, as they arrive, against the
// message framing of RFC 9112, strictly: it is what makes the data plane
// refuse every request that another HTTP parser on either side of the
// gateway could frame differently (request smuggling), and every request
// that Go's net/http server or llhttp in strict mode would refuse.
//
// It follows each request through its request line, header fields, body
// (by Content-Length, or by the chunked coding, chunk by chunk, trailers
// included) and on to the next request, so that pipelined requests are
// checked at their real boundaries; it never scans body bytes. What it
// refuses:
//   - a line ending in a bare LF, or a bare CR anywhere in a head, a chunk
//     line or a trailer (RFC 9112 section 2.2);
//   - a request line that is not method SP request-target SP HTTP-version,
//     with a token method, a target of visible ASCII and a well-formed
//     version; a version other than HTTP/1.0 or HTTP/1.1 is 505 (this
//     includes HTTP/0.9, HTTP/2.0 and the "PRI * HTTP/2.0" preface);
//   - an http or https target in absolute form with an empty host
//     ("http:///p", "http://:80/p"), which RFC 9110 section 4.2.1 has a
//     recipient reject as invalid, as nginx does;
//   - a target in absolute form whose authority holds a '#'
//     ("http://a#b/p"), which Go's server refuses (see targetAuthority);
//   - a target in absolute form whose scheme is not http or https, or
//     whose host is not a valid uri-host[:port] with a port of digits:
//     the authority, not the Host header, is the host the request goes
//     upstream with;
//   - a '%' before the target's query not followed by two hex digits,
//     which Go's server refuses (badEscape);
//   - obs-fold, a line without a colon, a field name that is not a token
//     or is followed by whitespace, a field value with control characters;
//   - Host missing (HTTP/1.1), repeated or not a valid uri-host[:port];
//   - Content-Length repeated, not all digits, over 18 digits (leading
//     zeros included: every value then fits an int64), or together with
//     Transfer-Encoding; Transfer-Encoding other than exactly "chunked"
//     (a tab beside it included), repeated, or in HTTP/1.0;
//   - a Connection field that is not a comma-separated list of tokens,
//     whose "close" parsers would read differently;
//   - a chunk size that is not 1 to 15 hex digits, an extension that is not
//     ;token[=token|quoted-string] without whitespace, chunk data not
//     followed by CRLF;
//   - a head or trailer section over MaxHeaderBytes (431).
//
// A Guard is used by one connection's reader and is not safe for
// concurrent use.
type Guard struct {
	state   state
	maxHead int
	carry   []byte // a line split over reads
	headLen int    // bytes of the current head or trailer section so far
	remain  int64  // body or chunk bytes left

	// Facts of the head being read.
	http10    bool
	connect   bool
	hosts     int
	host      []byte
	cls       int
	cl        int64
	tes       int
	chunked   bool
	upgradeWS bool
	connUpg   bool
	expect    bool // an expectation other than 100-continue
	post      bool
	afterPOST bool // the last request was a POST: empty lines may follow it
	requests  uint64

	// reqLine holds the method and target (at most maxLineTarget bytes of
	// it) of the latest request line, and lineOf the head it began,
	// counting from 1: the access log of a head refused after its line
	// names them (RefusedLine).
	reqLine []byte
	lineOf  uint64

	failedIn     uint64 // heads read when the Guard refused
	failedInBody bool   // and the refusal was in a body
	placeholder  bool   // and before any request line byte
}

// NewGuard returns a Guard for a connection's first request. maxHead
// bounds the request line plus header fields, and the trailer section.
func NewGuard(maxHead int) *Guard {
	g := &Guard{}
	g.Reset(maxHead)
	return g
}

// Reset prepares g for a new connection.
func (g *Guard) Reset(maxHead int) {
	carry, reqLine := g.carry[:0], g.reqLine[:0]
	*g = Guard{maxHead: maxHead, carry: carry, reqLine: reqLine}
}

// InBody reports whether the current request's head has been read and its
// body has not ended yet.
func (g *Guard) InBody() bool {
	switch g.state {
	case stBody, stChunkSize, stChunkData, stChunkCR, stChunkLF, stTrailer:
		return true
	}
	return false
}

// MidRequest reports whether part of a request has been read and not all
// of it: its head or its body is still to come, or the Guard refused it
// (the client may still be sending what follows). Tunnels are not.
func (g *Guard) MidRequest() bool {
	switch g.state {
	case stStart:
		return len(g.carry) > 0
	case stTunnel:
		return false
	}
	return true
}

// Tunnel reports whether the connection has stopped carrying HTTP/1.1
// requests (a WebSocket handshake or CONNECT was read).
func (g *Guard) Tunnel() bool { return g.state == stTunnel }

// Between reports whether the Guard has read one or more whole requests
// and nothing of the next: the connection is waiting for its client's next
// request.
func (g *Guard) Between() bool {
	return g.state == stStart && g.requests > 0 && len(g.carry) == 0
}

// Requests returns how many request heads have been read completely.
func (g *Guard) Requests() uint64 { return g.requests }

// fail records where the Guard refused, then stops it.
func (g *Guard) fail() {
	g.failedIn, g.failedInBody = g.requests, g.InBody()
	g.placeholder = g.state == stStart
	g.state = stFailed
}

// maxLineTarget bounds the part of a request target RefusedLine keeps.
const maxLineTarget = 1024

// RefusedLine returns the method and request target (its first
// maxLineTarget bytes) of the head the Guard refused, when the refusal
// came after a valid request line: what the access log names for the
// 400, 431 or 505.
func (g *Guard) RefusedLine() (method, target []byte, ok bool) {
	if g.state != stFailed || g.failedInBody || g.lineOf != g.failedIn+1 {
		return nil, nil, false
	}
	method, target, _ = bytes.Cut(g.reqLine, []byte{' '})
	return method, target, true
}

// Placeholder reports whether the refused request was refused before any
// of its request line was handed over: then the caller must hand the
// parser one placeholder byte in place of the refused one, or the parser,
// seeing at most the empty lines it ignores, would close the connection
// without the answer the client is owed.
func (g *Guard) Placeholder() bool { return g.state == stFailed && g.placeholder }

// FailedInBody reports whether the Guard refused the body of the n-th
// request of the connection (counting from 1), as opposed to a head, or
// nothing.
func (g *Guard) FailedInBody(n uint64) bool {
	return g.state == stFailed && g.failedInBody && g.failedIn == n
}

// Scan checks the next bytes of the connection. It returns how many of
// them may be handed to the HTTP parser, and an Error when the rest must
// not. Without an Error, fewer than len(p) means the rest follows the head
// of a tunnel (see Tunnel) and is not HTTP. After an error, the bytes
// handed over never complete the refused head or line, so the parser asks
// for more and gets the Error: a request that was refused is never seen
// whole by anything behind the guard. Earlier requests on the connection
// are unaffected.
func (g *Guard) Scan(p []byte) (int, *Error) { return g.scan(p, false) }

// ScanRequest is Scan, except that it stops where a request ends when
// bytes follow it (the next request, pipelined), and returns how many came
// before: the caller hands those to the parser and keeps the rest, to
// scan once the parser asks for more. A parser that never holds the next
// request's bytes while it answers one has written that answer out
// before it reads on (see Conn.Read).
func (g *Guard) ScanRequest(p []byte) (int, *Error) { return g.scan(p, true) }

func (g *Guard) scan(p []byte, one bool) (int, *Error) {
	i := 0
	for i < len(p) {
		switch g.state {
		case stFailed:
			return 0, errRequestLine
		case stTunnel:
			// The bytes after a tunnel's head are not the parser's.
			return i, nil
		case stBody, stChunkData:
			n := int64(len(p) - i)
			if n > g.remain {
				n = g.remain
			}
			g.remain -= n
			i += int(n)
			if g.remain == 0 {
				if g.state == stBody {
					g.endMessage()
				} else {
					g.state = stChunkCR
				}
			}
		case stChunkCR, stChunkLF:
			want := byte('\r')
			if g.state == stChunkLF {
				want = '\n'
			}
			if p[i] != want {
				g.fail()
				return i, errChunkEnd
			}
			i++
			if g.state == stChunkCR {
				g.state = stChunkLF
			} else {
				g.state = stChunkSize
			}
		default:
			if one && g.state == stStart && i > 0 {
				return i, nil // a request ended, and the next one begins
			}
			if n := len(g.carry); n > 0 && g.carry[n-1] == '\r' && p[i] != '\n' {
				g.fail()
				return i, errBareCR
			}
			j := bytes.IndexByte(p[i:], '\n')
			if j < 0 {
				// A CR with a byte after it that is not LF is bare: no need
				// to wait for the line's end.
				if k := bytes.IndexByte(p[i:], '\r'); k >= 0 && k < len(p)-i-1 {
					g.fail()
					return i + k, errBareCR
				}
				if err := g.keep(p[i:]); err != nil {
					// Too long: hand over what fits, never the rest.
					g.fail()
					return i, err
				}
				// A body's line is refused as soon as it cannot become a
				// valid one, not at its end: a client that sent "x=y" as
				// a chunk, or "," as a trailer field, and then waits or
				// half-closes gets its 400 before anything goes upstream
				// (the handler asks BodyRefused first).
				if g.state == stChunkSize && badChunkSizeStart(g.carry) {
					g.fail()
					return i, errChunkSize
				}
				if g.state == stTrailer && badFieldStart(g.carry) {
					g.fail()
					return i, errFieldName
				}
				return len(p), nil
			}
			line := p[i : i+j]
			if len(g.carry) > 0 {
				if err := g.keep(line); err != nil {
					g.fail()
					return i, err
				}
				line = g.carry
			} else if err := g.count(len(line) + 1); err != nil {
				g.fail()
				return i, err
			}
			if err := g.line(line); err != nil {
				g.fail()
				// Up to, not including, the line's LF: the parser can
				// never complete the refused line.
				return i + j, err
			}
			g.carry = g.carry[:0]
			i += j + 1
		}
	}
	return len(p), nil
}

// keep adds part of a line that continues in the next read to the carry.
func (g *Guard) keep(b []byte) *Error {
	if err := g.count(len(b)); err != nil {
		return err
	}
	g.carry = append(g.carry, b...)
	return nil
}

// count adds n bytes to the current section and enforces its limit.
func (g *Guard) count(n int) *Error {
	g.headLen += n
	switch g.state {
	case stStart, stHead:
		if g.headLen > g.maxHead {
			return errHeadTooLarge
		}
	case stTrailer:
		if g.headLen > g.maxHead {
			return errTrailerLarge
		}
	case stChunkSize:
		if g.headLen > maxChunkLine {
			return errChunkLine
		}
	}
	return nil
}

// line handles one complete line, without its LF.
func (g *Guard) line(l []byte) *Error {
	if len(l) == 0 || l[len(l)-1] != '\r' {
		return errBareLF
	}
	l = l[:len(l)-1]
	if bytes.IndexByte(l, '\r') >= 0 {
		return errBareCR
	}
	switch g.state {
	case stStart:
		if len(l) == 0 {
			// RFC 9112 section 2.2 lets a server ignore empty lines before
			// a request line. Go's server refuses them except after a
			// POST (old clients sent a CRLF after its body), and the
			// stricter of Go and llhttp wins.
			if !g.afterPOST {
				return errEmptyLine
			}
			g.headLen = 0
			return nil
		}
		g.afterPOST = false
		return g.requestLine(l)
	case stHead:
		if len(l) == 0 {
			return g.endHead()
		}
		return g.field(l, true)
	case stTrailer:
		if len(l) == 0 {
			g.endMessage()
			return nil
		}
		return g.field(l, false)
	case stChunkSize:
		return g.chunkSize(l)
	}
	return errRequestLine
}

func (g *Guard) requestLine(l []byte) *Error {
	sp := bytes.IndexByte(l, ' ')
	if sp <= 0 {
		return errRequestLine
	}
	method := l[:sp]
	if !httpguts.ValidHeaderFieldName(b2s(method)) {
		return errMethod
	}
	if !knownMethod(method) {
		return errUnknownMethod
	}
	rest := l[sp+1:]
	sp = bytes.IndexByte(rest, ' ')
	if sp < 0 {
		// "GET /" is an HTTP/0.9 simple request.
		return errRequestLine
	}
	target, version := rest[:sp], rest[sp+1:]
	if len(target) == 0 {
		return errTarget
	}
	for _, c := range target {
		if c <= ' ' || c >= 0x7f {
			return errTarget
		}
	}
	if badEscape(target) {
		return errBadEscape
	}
	if target[0] != '/' {
		if scheme, auth, ok := targetAuthority(target); ok {
			if bytes.IndexByte(auth, '#') >= 0 {
				return errHashAuthority
			}
			if !eqFold(scheme, "http") && !eqFold(scheme, "https") {
				return errScheme
			}
			hostport := auth
			if j := bytes.LastIndexByte(auth, '@'); j >= 0 {
				hostport = auth[j+1:] // after the userinfo
			}
			if emptyHost(hostport) {
				return errEmptyHost
			}
			// The authority, not the Host header, is the host the
			// request goes with (RFC 9112 section 3.2.2), so it must be
			// as valid as a Host header.
			if !httpguts.ValidHostHeader(b2s(hostport)) || !digitsPort(hostport) {
				return errTargetHost
			}
		}
	}
	g.reqLine = append(append(append(g.reqLine[:0], method...), ' '), target[:min(len(target), maxLineTarget)]...)
	g.lineOf = g.requests + 1
	if len(version) != 8 || string(version[:5]) != "HTTP/" || !isDigit(version[5]) || version[6] != '.' || !isDigit(version[7]) {
		return errVersion
	}
	switch string(version[5:]) {
	case "1.1":
		g.http10 = false
	case "1.0":
		g.http10 = true
	default:
		return errUnsupported
	}
	if string(method) == "PRI" {
		// PRI is only the HTTP/2 preface, refused above by its version.
		return errUnknownMethod
	}
	g.connect = string(method) == "CONNECT"
	g.post = string(method) == "POST"
	g.hosts, g.host, g.cls, g.cl, g.tes, g.chunked, g.upgradeWS, g.connUpg, g.expect = 0, g.host[:0], 0, 0, 0, false, false, false, false
	g.state = stHead
	return nil
}

// field checks a header or trailer field line. In a head it also notes
// the fields that frame the message.
func (g *Guard) field(l []byte, head bool) *Error {
	if l[0] == ' ' || l[0] == '\t' {
		return errObsFold
	}
	colon := bytes.IndexByte(l, ':')
	if colon < 0 {
		return errNoColon
	}
	if colon == 0 {
		return errFieldName
	}
	name := l[:colon]
	if c := name[len(name)-1]; c == ' ' || c == '\t' {
		return errNameSpace
	}
	if !httpguts.ValidHeaderFieldName(b2s(name)) {
		return errFieldName
	}
	value := trimOWS(l[colon+1:])
	if !httpguts.ValidHeaderFieldValue(b2s(value)) {
		return errFieldValue
	}
	if !head {
		if BadTrailer(name) {
			return errTrailerField
		}
		return nil
	}
	switch len(name) {
	case 4:
		if eqFold(name, "host") {
			g.hosts++
			g.host = append(g.host[:0], value...)
		}
	case 7:
		if eqFold(name, "upgrade") && hasToken(value, "websocket") {
			g.upgradeWS = true
		}
	case 6:
		if eqFold(name, "expect") && !eqFold(value, "100-continue") {
			g.expect = true
		}
	case 10:
		if eqFold(name, "connection") {
			if !tokenList(value) {
				// Whether the connection closes after this request
				// frames what follows it, and parsers read a malformed
				// list differently: Go's server and nginx find "close"
				// in "/ close", llhttp and fasthttp do not.
				return errConnection
			}
			if hasToken(value, "upgrade") {
				g.connUpg = true
			}
		}
	case 14:
		if eqFold(name, "content-length") {
			g.cls++
			if len(value) == 0 || len(value) > 18 {
				return errBadCL
			}
			for _, c := range value {
				if !isDigit(c) {
					return errBadCL
				}
			}
			n, _ := strconv.ParseInt(b2s(value), 10, 64)
			g.cl = n
		}
	case 17:
		if eqFold(name, "transfer-encoding") {
			g.tes++
			if !eqFold(value, "chunked") {
				return errTECoding
			}
			if bytes.IndexByte(l[colon+1:], '\t') >= 0 {
				// Optional whitespace, but nginx refuses a tab on either
				// side (501: it takes only spaces for whitespace there),
				// llhttp 9.3 one after, and PortSwigger's desync
				// permutations try both: the field that frames a body is
				// taken in one form only.
				return errTETab
			}
			g.chunked = true
		}
	}
	return nil
}

// endHead decides how the body of the head just read is framed.
func (g *Guard) endHead() *Error {
	switch {
	case g.hosts > 1:
		return errTwoHosts
	case g.hosts == 0 && !g.http10:
		return errNoHost
	case g.hosts == 1 && (len(g.host) == 0 || !httpguts.ValidHostHeader(b2s(g.host))):
		// An empty Host is valid to Go's server (RFC 9112 section 3.2
		// allows one when the target has no authority), but fasthttp
		// refuses it, and a gateway that routes by host has none to
		// route by: refused here, before the checks that follow, so
		// that it is the same 400 with any other field (an unknown
		// Expect) as it is over HTTP/2.
		return errBadHost
	case g.tes > 0 && g.http10:
		return errTE10
	case g.tes > 1:
		return errTECoding
	case g.cls > 1:
		return errTwoCL
	case g.tes > 0 && g.cls > 0:
		return errCLAndTE
	case g.expect:
		// RFC 9110 section 10.1.1 lets a server answer 417, and Go's
		// server does, in HTTP/1.0 too. Only 100-continue is ignored in
		// an HTTP/1.0 request (the section's MUST), and it never sets
		// g.expect. A Host whose port is not one (":a", "a:80:80") is
		// refused later, by fasthttp's parse, with 400, which RFC 9112
		// section 3.2 requires: so that the 400 also comes first here,
		// as it does over HTTP/2 (found by TestH2AgreesWithHTTP1 on a
		// wide corpus), the same parse runs on this path, which is
		// refused anyway.
		if g.hosts == 1 && !hostParses(g.host) {
			return errBadHost
		}
		return errExpectation
	}
	g.requests++
	g.headLen = 0
	switch {
	case g.chunked:
		g.state = stChunkSize
	case g.cl > 0:
		g.state, g.remain = stBody, g.cl
	default:
		g.endMessage()
	}
	return nil
}

// hostParses reports whether host parses as fasthttp parses a Host
// (its port too, which httpguts.ValidHostHeader does not look at). It is
// kept out of endHead, whose path every request takes, as it needs a
// fasthttp.URI.
//
//go:noinline
func hostParses(host []byte) bool {
	var u fasthttp.URI
	return u.Parse(host, []byte("/")) == nil
}

// endMessage is called when a request's body has ended.
func (g *Guard) endMessage() {
	g.headLen = 0
	g.afterPOST = g.post
	if g.connect || (g.upgradeWS && g.connUpg) {
		// What follows is a tunnel's bytes, if the handshake succeeds; the
		// gateway closes the connection after any other answer.
		g.state = stTunnel
		return
	}
	g.state = stStart
}

func (g *Guard) chunkSize(l []byte) *Error {
	i := hexDigits(l)
	if i == 0 || i > maxChunkSizeDigits {
		return errChunkSize
	}
	var n uint64
	for _, c := range l[:i] {
		v, _ := unhex(c)
		n = n<<4 | uint64(v)
	}
	if err := chunkExt(l[i:]); err != nil {
		return err
	}
	g.headLen = 0
	if n == 0 {
		g.state = stTrailer
		return nil
	}
	g.state, g.remain = stChunkData, int64(n)
	return nil
}

// badChunkSizeStart reports whether b, the start of a chunk-size line
// whose end has not arrived, can no longer become a valid one: it does
// not start with a hex digit, has more of them than maxChunkSizeDigits,
// or has after them a byte that is neither the ";" of an extension nor
// the line's CR. (An extension is checked when its line ends.)
func badChunkSizeStart(b []byte) bool {
	i := hexDigits(b)
	switch {
	case len(b) == 0:
		return false
	case i == 0 || i > maxChunkSizeDigits:
		return true
	case i < len(b):
		return b[i] != ';' && b[i] != '\r'
	}
	return false
}

// hexDigits returns how many hex digits b starts with.
func hexDigits(b []byte) int {
	for i, c := range b {
		if _, ok := unhex(c); !ok {
			return i
		}
	}
	return len(b)
}

// chunkExt checks *( ";" token [ "=" ( token / quoted-string ) ] ), the
// chunk-ext of RFC 9112 section 7.1.1 without the optional whitespace,
// which no sender needs and parsers disagree on.
func chunkExt(b []byte) *Error {
	for len(b) > 0 {
		if b[0] != ';' {
			return errChunkSize
		}
		b = b[1:]
		n := tokenLen(b)
		if n == 0 {
			return errChunkExt
		}
		b = b[n:]
		if len(b) == 0 || b[0] != '=' {
			continue
		}
		b = b[1:]
		if len(b) > 0 && b[0] == '"' {
			end := quotedLen(b)
			if end < 0 {
				return errChunkExt
			}
			b = b[end:]
			continue
		}
		n = tokenLen(b)
		if n == 0 {
			return errChunkExt
		}
		b = b[n:]
	}
	return nil
}

// badFieldStart reports whether b, the start of a trailer line whose end
// has not arrived, can no longer become a field line or the empty line
// that ends the section: a byte before the colon that is not a token
// character (a CR only as the empty line's first byte). A space or tab
// before the colon, or as the first byte, is refused here too, as at the
// line's end (obs-fold, whitespace before the colon).
func badFieldStart(b []byte) bool {
	if len(b) > 0 && b[0] == '\r' {
		return len(b) > 1
	}
	n := tokenLen(b)
	return n < len(b) && (b[n] != ':' || n == 0)
}

// tokenLen returns the length of the token at the start of b.
func tokenLen(b []byte) int {
	for i, c := range b {
		if !httpguts.IsTokenRune(rune(c)) {
			return i
		}
	}
	return len(b)
}

// quotedLen returns the length of the quoted-string at the start of b, or
// -1 if it is not one.
func quotedLen(b []byte) int {
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			i++
			if i >= len(b) || (b[i] < ' ' && b[i] != '\t') || b[i] == 0x7f {
				return -1
			}
		case (c < ' ' && c != '\t') || c == 0x7f:
			return -1
		}
	}
	return -1
}

// nextItem splits the first element off the comma-separated list v,
// without its optional whitespace; rest is nil after the last one.
func nextItem(v []byte) (item, rest []byte) {
	if i := bytes.IndexByte(v, ','); i >= 0 {
		return trimOWS(v[:i]), v[i+1:]
	}
	return trimOWS(v), nil
}

// tokenList reports whether v is a comma-separated list of tokens, with
// optional whitespace around each and empty elements allowed (RFC 9110
// section 5.6.1), as a Connection field must be.
func tokenList(v []byte) bool {
	for len(v) > 0 {
		var item []byte
		item, v = nextItem(v)
		if tokenLen(item) != len(item) {
			return false
		}
	}
	return true
}

// hasToken reports whether the comma-separated list v holds tok.
func hasToken(v []byte, tok string) bool {
	for len(v) > 0 {
		var item []byte
		item, v = nextItem(v)
		if eqFold(item, tok) {
			return true
		}
	}
	return false
}

// knownMethod reports whether m is one of the methods llhttp accepts in an
// HTTP/1.x request (llhttp src/llhttp/constants.ts, METHODS_HTTP at
// commit 01e105a): the base methods, WebDAV, Subversion, UPnP, CalDAV,
// PURGE, LINK, UNLINK, QUERY and SOURCE, and PRI, the HTTP/2 preface.
// Other tokens are refused, since llhttp refuses them and the stricter of
// Go and llhttp wins.
func knownMethod(m []byte) bool {
	switch string(m) {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
		"COPY", "LOCK", "MKCOL", "MOVE", "PROPFIND", "PROPPATCH", "SEARCH", "UNLOCK",
		"BIND", "REBIND", "UNBIND", "ACL",
		"REPORT", "MKACTIVITY", "CHECKOUT", "MERGE",
		"M-SEARCH", "NOTIFY", "SUBSCRIBE", "UNSUBSCRIBE",
		"MKCALENDAR", "PURGE", "LINK", "UNLINK", "QUERY", "SOURCE", "PRI":
		return true
	}
	return false
}

// BadTrailer reports a field that may not be sent in a trailer section
// (RFC 9110 section 6.5.1: fields that frame or route the message, or
// that a recipient needs before the content), the same list fasthttp's
// parser refuses, in a trailer section and in a Trailer field alike. The
// HTTP/2 listener refuses a Trailer field that names one with it.
func BadTrailer(name []byte) bool {
	switch len(name) {
	case 2:
		return eqFold(name, "te")
	case 4:
		return eqFold(name, "host")
	case 5:
		return eqFold(name, "range")
	case 6:
		return eqFold(name, "expect") || eqFold(name, "cookie")
	case 7:
		return eqFold(name, "trailer")
	case 8:
		return eqFold(name, "location")
	case 10:
		return eqFold(name, "connection") || eqFold(name, "keep-alive") || eqFold(name, "set-cookie")
	case 12:
		return eqFold(name, "content-type") || eqFold(name, "max-forwards")
	case 13:
		return eqFold(name, "authorization") || eqFold(name, "content-range")
	case 14:
		return eqFold(name, "content-length")
	case 16:
		return eqFold(name, "content-encoding") || eqFold(name, "proxy-connection") || eqFold(name, "www-authenticate")
	case 17:
		return eqFold(name, "transfer-encoding")
	case 18:
		return eqFold(name, "proxy-authenticate")
	case 19:
		return eqFold(name, "proxy-authorization")
	}
	return false
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// targetAuthority splits target, not in origin form, into the scheme and
// the authority of a "scheme://" URI, the authority ending at the first
// '/' or '?', as Go's server reads a request URI; ok is false for a target
// that is no such URI (left to the parser).
//
// A request target carries no fragment (RFC 9112 section 3.2), so a '#'
// before that end is part of the authority, where it may not stand (RFC
// 3986 section 3.2): Go's server answers 400, while a URI parser that
// ends the authority at the '#' routed "http://a#b/p" to the host a with
// the path "/". A '#' after the authority is a fragment that Go's server
// and llhttp accept, and the gateway drops (originForm).
func targetAuthority(target []byte) (scheme, auth []byte, ok bool) {
	i := bytes.Index(target, []byte("://"))
	if i < 0 {
		return nil, nil, false
	}
	auth = target[i+3:]
	if j := bytes.IndexAny(auth, "/?"); j >= 0 {
		auth = auth[:j]
	}
	return target[:i], auth, true
}

// badEscape reports whether target has, before its query, a '%' not
// followed by two hex digits: Go's server refuses such a target (its URL
// parser checks the escapes of the path, userinfo and host, not of the
// query), as nginx does a path it has to decode.
func badEscape(target []byte) bool {
	if q := bytes.IndexByte(target, '?'); q >= 0 {
		target = target[:q]
	}
	for {
		i := bytes.IndexByte(target, '%')
		if i < 0 {
			return false
		}
		if i+2 >= len(target) {
			return true
		}
		if _, ok := unhex(target[i+1]); !ok {
			return true
		}
		if _, ok := unhex(target[i+2]); !ok {
			return true
		}
		target = target[i+3:]
	}
}

// digitsPort reports whether the host[:port] hostport has a port of
// digits only, or none (an empty one after the colon included), as Go's
// URL parser requires of a request target's authority.
func digitsPort(hostport []byte) bool {
	if len(hostport) > 0 && hostport[0] == '[' {
		end := bytes.IndexByte(hostport, ']')
		if end < 0 {
			return false
		}
		hostport = hostport[end+1:]
		if len(hostport) == 0 {
			return true
		}
		if hostport[0] != ':' {
			return false
		}
	}
	i := bytes.LastIndexByte(hostport, ':')
	if i < 0 {
		return true
	}
	for _, c := range hostport[i+1:] {
		if !isDigit(c) {
			return false
		}
	}
	return true
}

// emptyHost reports whether hostport, the host[:port] of an http or
// https target's authority (after any userinfo, with no '#'), names no
// host: "http:///p", "http://:80/p", "http://user@/p".
func emptyHost(hostport []byte) bool {
	if len(hostport) > 0 && hostport[0] == '[' {
		return false // an IP literal; digitsPort and the parser check it
	}
	if j := bytes.LastIndexByte(hostport, ':'); j >= 0 {
		hostport = hostport[:j]
	}
	return len(hostport) == 0
}

func eqFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// trimOWS trims the optional whitespace of RFC 9110 (SP and HTAB).
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// b2s views b as a string without copying, for the checks that take one.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
