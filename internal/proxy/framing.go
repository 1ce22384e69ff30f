package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/http/httputil"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"
)

// An http1 upstream's response head is parsed by fasthttp (readHead), the
// project's HTTP/1.1 parser, with three things done around it that
// fasthttp v1.78.0 does not do for a client.
//
// Bare LF. RFC 9112 section 2.2 lets a recipient take a single LF for the
// end of a line in the head, and net/http's client and nginx do: an
// upstream that writes "HTTP/1.1 200 OK\nContent-Length: 2\n\nok" is
// answered by them. fasthttp's parser takes a bare LF at the end of the
// status line and of a field line too, but only ends the head at an empty
// line once it has seen a CRLFCRLF somewhere in what it has read (a
// server-side defence: a front end that only knows CRLFCRLF must not
// frame the request differently). An upstream that never sends one left
// the gateway waiting for it until ResponseHeaderTimeout (504), or, with
// a body larger than the read buffer, failing with a header "too large"
// (502); and one whose body happened to contain a CRLFCRLF was parsed.
// fasthttp has no option for it, so the head is first read up to its
// empty line (bufferHead, as fasthttp would frame it: leading empty lines
// skipped, then up to the first empty line, CRLF or LF), and a head that
// fasthttp could not end by itself is handed to it with its line ends
// made CRLF (readBareLF). That is only a copy with different line ends:
// fasthttp still parses and validates every field, and the head's length
// on the wire, which frames what follows, is the one the empty line
// gives, as for net/http. The message forwarded to the client is written
// by fasthttp, with CRLF. The rewrite only runs for such a head; a head
// that came whole with its CRLFCRLF (all of them in practice) is parsed
// straight from the connection's reader, as before.
//
// Folds. A head with a field value continued on the next line (obs-fold,
// RFC 9112 section 5.2) goes to fasthttp as the same copy (readBareLF;
// foldedHeadEnd finds such a head by the byte after each of its LFs):
// fasthttp joins folds over the bytes it reads, so a head it refused read
// differently the second time; and a folded Content-Length is joined in
// the copy first, as fasthttp kept an empty continuation's space in it
// and refused the head.
//
// Chunked lines are not relaxed: errata 7633 of RFC 9112 excludes a bare
// LF from the chunked coding's lines, net/http refuses one, and so does
// fasthttp's chunk parser; see checkFirstChunk, and checkFirstChunkNet
// for an answer that net/http's reader relays.
//
// Conflicting framing. RFC 9112 section 6.3: when a message has both
// Content-Length and Transfer-Encoding, the Transfer-Encoding overrides
// the Content-Length, and the message "ought to be handled as an error"
// (it is how response splitting and request smuggling look); an
// intermediary that forwards it must remove the Content-Length first.
// Section 6.1: an HTTP/1.0 message with a Transfer-Encoding has faulty
// framing, and the connection is closed after it. fasthttp frames such a
// response as those sections say (chunked wins; Transfer-Encoding is
// ignored in HTTP/1.0) and keeps no Content-Length in the header it
// parsed, but it keeps the connection alive. The gateway forwards the
// response as framed, and closes the connection after it (framingConflict,
// counted as violationFramingConflict), as it does one that carried bytes
// past its answer. An HTTP/2 client's request to an http1 pool is
// answered through net/http's reader, which frames such a response the
// same way and pools its connection too: the gateway checks the head
// itself there as well, where it reads it (sendH1) and where net/http's
// Transport does (headConn).

// errBadChunk is a chunked response body whose first chunk line the
// gateway's parser refuses (checkFirstChunk).
var errBadChunk = errors.New("upstream sent a malformed chunk")

// errHeadMismatch is a head whose end fasthttp's parser, given the
// CRLF-terminated copy readBareLF made, did not put at its empty line.
var errHeadMismatch = errors.New("upstream response head could not be framed")

// lfLF and lfCRLF are the two forms of the empty line that ends a head
// after a line's LF.
var (
	lfLF   = []byte("\n\n")
	lfCRLF = []byte("\n\r\n")
)

// bufferHead waits until br holds a whole response head (or as much of
// one as fits: fasthttp's Read then reports it too large). It returns the
// head's length when fasthttp's parser could not find the head's end by
// itself, that is when no CRLFCRLF is in br (see above), and 0 when it
// can: the head is then read with fasthttp's Read. Each byte is scanned
// for an empty line once. A read error is returned as fasthttp's Read
// returns one, wrapped, so that what it wraps (a timeout, EOF, a reset)
// can still be told.
func bufferHead(br *bufio.Reader) (lfEnd int, err error) {
	scanned := 0
	for {
		b, _ := br.Peek(br.Buffered())
		rest := b[max(scanned-2, 0):]
		if bytes.Contains(rest, lfLF) || bytes.Contains(rest, lfCRLF) {
			if end := headEnd(b); end > 0 {
				if bytes.Contains(b, crlfCRLF) {
					return 0, nil
				}
				return end, nil
			}
		}
		scanned = len(b)
		if len(b) >= br.Size() {
			return 0, nil
		}
		if _, err := br.Peek(len(b) + 1); err != nil {
			return 0, fmt.Errorf("error when reading response headers: %w", err)
		}
	}
}

// headEnd returns the length of the response head at the start of b, up
// to and including the empty line that ends it, or 0 when b does not hold
// all of it. Like fasthttp's parser, it skips empty lines before the
// status line, and takes LF or CRLF for the end of a line.
func headEnd(b []byte) int {
	end, _ := scanHead(b)
	return end
}

// foldedHeadEnd returns headEnd(b) when a line of the head after its
// status line starts with SP or HTAB (an obs-fold, or a first field line
// that starts with whitespace), and 0 otherwise. It looks at nothing past
// the head.
func foldedHeadEnd(b []byte) int {
	if end, folded := scanHead(b); folded {
		return end
	}
	return 0
}

// scanHead is headEnd, and whether a line after the status line starts
// with SP or HTAB, found in the same pass: it looks at the first byte
// after each LF of the head, which tells an empty line, and a fold, from
// a field line.
func scanHead(b []byte) (end int, folded bool) {
	i := 0
	for { // empty lines before the status line
		if i < len(b) && b[i] == '\n' {
			i++
		} else if i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n' {
			i += 2
		} else {
			break
		}
	}
	for {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return 0, false
		}
		i += j + 1 // the start of the next line
		if i == len(b) {
			return 0, false
		}
		switch b[i] {
		case ' ', '\t':
			folded = true
		case '\n':
			return i + 1, folded
		case '\r':
			if i+1 < len(b) && b[i+1] == '\n' {
				return i + 2, folded
			}
		}
	}
}

// readHeadFrom reads the next response head from br into out, however
// much of it br holds yet: bufferHead, then readHead.
func (ex *exchange) readHeadFrom(out *fasthttp.ResponseHeader, br *bufio.Reader) error {
	lfEnd, err := bufferHead(br)
	if err != nil {
		return err
	}
	return ex.readHead(out, br, lfEnd)
}

// readHead reads into out the response head at the start of br, which br
// holds whole (bufferHead, or finalHeadBuffered on the common path),
// unless it does not fit (fasthttp's Read then says so): with fasthttp's
// Read, or readBareLF when lfEnd (bufferHead's) is not 0. Then a head
// that frames its message two ways (framingConflict) is marked to close
// the upstream connection after the response (filterResponseHeader
// notes it; the client's connection is not closed for it), and counted.
// That check reads the head's bytes only for a chunked or HTTP/1.0 answer.
// Since the whole head is in br, fasthttp's Read does not refill br, and
// raw still holds the head afterwards.
func (ex *exchange) readHead(out *fasthttp.ResponseHeader, br *bufio.Reader, lfEnd int) error {
	raw, _ := br.Peek(br.Buffered())
	if len(raw) > 0 && (raw[0] == '\r' || raw[0] == '\n') {
		// fasthttp skips empty lines before a status line; net/http does
		// not, and an empty line there is most often the end of bytes
		// an upstream sent after its previous answer (found by
		// FuzzUpstreamAgainstNetHTTP).
		return errLeadingEmptyLine
	}
	// A head with a folded field goes to fasthttp as a copy
	// (foldedHeadEnd, readBareLF), so that fasthttp, which joins folds
	// over the bytes it reads, leaves raw as it came. A head fasthttp
	// refuses is read again, after a rewrite in place, only when the
	// rewrite changed it, so that no other head is read twice.
	// fasthttp's Read starts from an empty header and keeps its settings
	// (no default Content-Type); Reset would not.
	if lfEnd == 0 {
		lfEnd = foldedHeadEnd(raw)
	}
	err := readHeadOnce(out, br, raw, lfEnd)
	if err != nil && errors.Is(err, fasthttp.ErrBadTrailer) && closeEmptyTrailerElements(raw) {
		err = readHeadOnce(out, br, raw, lfEnd)
	}
	if err != nil {
		return err
	}
	if err := checkZeroStatus(raw); err != nil {
		return err
	}
	if m := out.StatusMessage(); len(m) > 0 && !httpguts.ValidHeaderFieldValue(b2s(m)) {
		// A reason phrase is HTAB, SP, VCHAR and obs-text (RFC 9112
		// section 4), what a field value may hold. fasthttp keeps any
		// byte but CR and LF there, and the phrase went into the HTTP/1.1
		// client's status line as it came ("200 O\x01K"): the client
		// gets the standard phrase instead.
		out.SetStatusMessage(nil)
	}
	http11 := out.IsHTTP11()
	if !http11 && string(out.Protocol()) != "HTTP/1.0" {
		// fasthttp takes any HTTP/x.y and frames all but 1.1 as 1.0 does,
		// ignoring Transfer-Encoding; an answer on an HTTP/1.1 connection
		// is HTTP/1.0 or 1.1 (found by FuzzUpstreamAgainstNetHTTP).
		return fmt.Errorf("%w %q", errResponseVersion, out.Protocol())
	}
	if uc := ex.uc; uc != nil && uc.http10.Load() == http11 {
		uc.http10.Store(!http11) // for Expect: see upstreamClient.http10
	}
	if chunked := out.ContentLength() == -1; chunked || !http11 {
		if n := len(raw) - br.Buffered(); n > 0 && n <= len(raw) && framingConflict(raw[:n], chunked, http11) {
			ex.p.violation(violationFramingConflict)
			out.SetConnectionClose()
		}
	}
	return nil
}

// readHeadOnce is one read of the head at the start of br (raw, which
// holds it) into out: with fasthttp's Read, or readBareLF when lfEnd is
// not 0. On an error, br is not advanced.
func readHeadOnce(out *fasthttp.ResponseHeader, br *bufio.Reader, raw []byte, lfEnd int) error {
	if lfEnd > 0 {
		return readBareLF(out, br, raw[:lfEnd])
	}
	return out.Read(br)
}

// closeEmptyTrailerElements turns, in place, each comma that ends an
// empty or blank list element of a Trailer field in head, a response
// head that ends in an empty line, into a space, and reports whether it
// turned one. RFC 9110 section 5.6.1.2 has a recipient ignore empty list
// elements ("Trailer: , X-T", "X-T,,X-U"), and net/http's reader does,
// so an HTTP/2 client got such an answer; fasthttp's parser refuses the
// head, and an HTTP/1.1 client got 502 (found by
// TestH2AnswersAgreeWithHTTP1 on a wider set of answers). fasthttp
// already takes an empty element after the last comma. A folded Trailer
// field's continuation lines are its value too: the fold is a space, so
// an element may end on the next line ("X-T,\r\n ,X-U"; found by
// TestH2AnswersAgreeWithHTTP1 on a wider set of answers). The head keeps
// its length, and nothing else in it changes.
func closeEmptyTrailerElements(head []byte) bool {
	turned := false
	// Whether the line is in a Trailer field's value, and whether its
	// element so far is empty.
	trailer, empty := false, true
	_, rest, _ := bytes.Cut(head, []byte("\n")) // after the status line
	for len(rest) > 0 {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		if len(line) == 0 || line[0] == '\r' {
			break // the empty line: the head's end
		}
		from := 0
		if line[0] != ' ' && line[0] != '\t' {
			c := bytes.IndexByte(line, ':')
			trailer, empty = c == len("Trailer") && eqFold(line[:c], "trailer"), true
			from = c + 1
		}
		if !trailer {
			continue
		}
		for i := from; i < len(line); i++ {
			switch line[i] {
			case ',':
				if empty {
					line[i] = ' '
					turned = true
				}
				empty = true
			case ' ', '\t', '\r':
			default:
				empty = false
			}
		}
	}
	return turned
}

// errLeadingEmptyLine is a response that starts with an empty line, not
// its status line.
var errLeadingEmptyLine = errors.New("upstream sent an empty line before its status line")

// errResponseVersion is a response whose version is neither HTTP/1.0 nor
// HTTP/1.1.
var errResponseVersion = errors.New("upstream sent an unsupported HTTP version")

// checkZeroStatus refuses a status line (at the start of head, which
// fasthttp has parsed) with the status code "000". fasthttp requires
// three digits but keeps 0 as its zero value and reads it as 200, which
// checkFinal cannot tell from a real 200 (found by
// FuzzUpstreamAgainstNetHTTP).
func checkZeroStatus(head []byte) error {
	if sp := bytes.IndexByte(head, ' '); sp >= 0 && len(head) >= sp+4 && string(head[sp+1:sp+4]) == "000" {
		return invalidStatus(0)
	}
	return nil
}

// readBareLF parses head, a response head some of whose lines end in a
// bare LF or continue a field's value on the next line (see above and
// foldedHeadEnd), into out: fasthttp reads a copy whose lines all end in
// CRLF, and head is then discarded from br. The copy's buffers are
// ensureDate's, pooled.
//
// fasthttp joins an obs-fold as net/http's reader does (the line and its
// continuations, trimmed of SP and HTAB, with a space before each
// continuation; RFC 9112 section 5.2 has a proxy replace an obs-fold with
// SP before it interprets the value), and refuses what net/http refuses
// ("0\n :", "Transfer-Encoding: chunked\r\n \r\n"), but over the bytes
// it reads: given the head itself, a head it refused read differently the
// second time (closeEmptyTrailerElements), so it is given the copy. One
// fold is joined in the copy before fasthttp sees it: a Content-Length's.
// fasthttp kept an empty continuation's space in the length and refused
// it ("5\r\n \r\n"), where net/http trims it and reads 5, also after a
// name with whitespace before its colon ("Content-Length : 5"); an HTTP/2
// client got the answer an HTTP/1.1 client got as a 502 (found by
// TestH2AnswersAgreeWithHTTP1 on a wider set of answers). On one line,
// the length's spaces are fasthttp's to trim.
func readBareLF(out *fasthttp.ResponseHeader, br *bufio.Reader, head []byte) error {
	rt := dateRoundTrips.Get().(*dateRoundTrip)
	rt.raw = rt.raw[:0]
	length := false // the line before was a Content-Length field line, or continued one
	for line := range bytes.Lines(head) {
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if length && len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
			rt.raw = append(append(rt.raw[:len(rt.raw)-2], ' '), bytes.Trim(line, " \t")...)
			rt.raw = append(rt.raw, '\r', '\n')
			continue
		}
		// The name may have whitespace before its colon, which a proxy
		// removes from a response (RFC 9112 section 5.1), as fasthttp
		// and net/http do ("Content-Length : 5" and an empty
		// continuation: found by TestH2AnswersAgreeWithHTTP1, seed 211).
		c := bytes.IndexByte(line, ':')
		length = c >= 0 && eqFold(bytes.TrimRight(line[:c], " \t"), "content-length")
		rt.raw = append(append(rt.raw, line...), '\r', '\n')
	}
	copyBR := rt.reader()
	err := out.Read(copyBR)
	if err == nil && copyBR.Buffered() > 0 {
		// fasthttp ended the head before its empty line: the two framings
		// differ, and neither is trusted.
		err = errHeadMismatch
	}
	rt.release()
	if err != nil {
		return err
	}
	_, err = br.Discard(len(head))
	return err
}

// framingConflict reports whether head, a response head as it came,
// frames its message two ways: chunked (as parsed) with a Content-Length
// field too (RFC 9112 section 6.3), or HTTP/1.0 with a Transfer-Encoding
// field (section 6.1).
func framingConflict(head []byte, chunked, http11 bool) bool {
	if chunked && hasField(head, "content-length") {
		return true
	}
	return !http11 && hasField(head, "transfer-encoding")
}

// hasField reports whether head has a field line named name (lower case),
// in any case, with or without whitespace before the colon (which
// fasthttp takes and drops). The status line and continuation lines are
// not field lines.
func hasField(head []byte, name string) bool {
	for range fieldValues(head, name, false) {
		return true
	}
	return false
}

// fieldValues yields the value of each field line of head named name, as
// hasField finds them, without the whitespace around it; with folded,
// then each continuation line (obs-fold) after it too. Both readers join
// a folded value into one, so a continuation of Connection names
// hop-by-hop fields as well ("Connection: close\r\n x-secret": headFacts
// took "close" alone, and X-Secret went on to an HTTP/2 client).
func fieldValues(head []byte, name string, folded bool) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		in := false // the line before was one of name's, and folded
		i := bytes.IndexByte(head, '\n')
		for i >= 0 {
			head = head[i+1:]
			line := head
			if j := bytes.IndexByte(line, '\n'); j >= 0 {
				line = line[:j]
			}
			switch {
			case in && len(line) > 0 && (line[0] == ' ' || line[0] == '\t'):
				if !yield(bytes.Trim(line, " \t\r")) {
					return
				}
			case len(line) > len(name) && line[0]|0x20 == name[0] && eqFold(line[:len(name)], name):
				rest := bytes.TrimLeft(line[len(name):], " \t")
				named := len(rest) > 0 && rest[0] == ':'
				in = folded && named
				if named && !yield(bytes.Trim(rest[1:], " \t\r")) {
					return
				}
			default:
				in = false
			}
			i = bytes.IndexByte(head, '\n')
		}
	}
}

// checkFirstChunk refuses a chunked response body whose first chunk line,
// already in br with the header, fasthttp's chunk parser refuses: the
// body would break off at its first byte, after the client had been sent
// a 200. Found now, nothing has been sent, and the client gets a 502; the
// upstream connection is closed. A line of hex digits and CRLF, the usual
// one, is taken as it is; any other (an extension, whitespace, a bare LF)
// is given to fasthttp's parser, on a copy: the stream the body is then
// relayed through parses it again, in the same way, so the two cannot
// disagree. Whitespace before a chunk extension's ";" (RFC 9112 section
// 7.1.1 allows it) is refused by fasthttp, as by net/http, and a bare LF
// by both and errata 7633; neither can be configured otherwise, and
// rewriting a chunked body on the fly would mean a chunk parser of the
// gateway's own, where a difference from the upstream's or the client's
// is what request smuggling is made of. A line that comes later, or a
// malformed one further into the body, cuts the answer off when it is
// read: the header has gone out by then.
func (ex *exchange) checkFirstChunk(br *bufio.Reader) error {
	b, _ := br.Peek(br.Buffered())
	line := unusualChunkLine(b)
	if line == nil {
		return nil
	}
	rt := dateRoundTrips.Get().(*dateRoundTrip)
	// The line, and an empty trailer section in case it is the last
	// chunk's: the stream then reads that, and nothing past the line.
	rt.raw = append(append(rt.raw[:0], line...), '\r', '\n')
	r := &ex.resp
	r.Header.SetContentLength(-1)
	r.StreamBody = true
	err := r.ReadBody(rt.reader(), 0)
	if err == nil {
		// A read into no room parses the chunk line (and, after the last
		// chunk, the trailer section) and reads no data.
		_, err = r.BodyStream().Read(nil)
		if err == io.EOF {
			err = nil
		}
	}
	_ = r.CloseBodyStream()
	rt.release()
	if err != nil {
		return fmt.Errorf("%w from %s: %w", errBadChunk, ex.inst.Addr, err)
	}
	return nil
}

// unusualChunkLine returns the first line of the chunked body at the
// start of b, its LF included, when it is all in b and is not the usual
// one (hex digits and CRLF, which every parser takes as it is); else nil.
func unusualChunkLine(b []byte) []byte {
	n := 0
	for n < len(b) && n < 7 && isHex(b[n]) {
		n++
	}
	if n > 0 && len(b) >= n+2 && b[n] == '\r' && b[n+1] == '\n' {
		return nil
	}
	end := bytes.IndexByte(b, '\n')
	if end < 0 {
		return nil
	}
	return b[:end+1]
}

// checkFirstChunkNet is checkFirstChunk for an answer, resp, that
// net/http's reader relays (an HTTP/2 client's, from an http1 pool): b is
// what came after the head with it, and the line is given to net/http's
// chunk parser, the one the body is then read with. It refuses the same
// lines as fasthttp's (a bare LF, whitespace before ";"), for the same
// reasons. An answer that is not chunked, or has no body, passes.
func checkFirstChunkNet(resp *http.Response, b []byte) error {
	if len(resp.TransferEncoding) == 0 || resp.Body == http.NoBody {
		return nil
	}
	line := unusualChunkLine(b)
	if line == nil {
		return nil
	}
	rt := dateRoundTrips.Get().(*dateRoundTrip)
	rt.raw = append(rt.raw[:0], line...)
	// A read into no room parses the chunk line and reads no data; the
	// last chunk's line reads as the end (io.EOF), its trailer section
	// being net/http's body's business.
	_, err := httputil.NewChunkedReader(rt.reader()).Read(nil)
	rt.release()
	if err == io.EOF {
		err = nil
	}
	return err
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c|0x20 && c|0x20 <= 'f'
}
