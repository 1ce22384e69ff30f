package proxy

import (
	"bytes"
	"errors"
	"strings"
)

// Request framing that fasthttp v1.78.0 parses without complaint but that a
// proxy must refuse, because a server or proxy on either side of us could
// read the same bytes as a different request (RFC 9112 sections 5.2, 6.1,
// 6.3 and 11.2). See the package doc for what fasthttp itself rejects.
var (
	errObsFold   = errors.New("obsolete line folding in header")
	errBareLF    = errors.New("header line not terminated by CRLF")
	errNameSpace = errors.New("whitespace in header field name")
	errNoColon   = errors.New("header line without colon")
	errCLAndTE   = errors.New("both Content-Length and Transfer-Encoding")
	errTECoding  = errors.New("transfer coding other than chunked")
)

// checkHeaderBlock checks the raw header block of a request, exactly as it
// came off the wire (fasthttp's RequestHeader.RawHeaders, which fasthttp
// keeps unfolded). It returns nil or one of the errors above.
//
// What it adds to fasthttp:
//   - obs-fold: fasthttp joins a continuation line into the previous value;
//     RFC 9112 section 5.2 lets a server reject instead, and a proxy must not
//     forward a header another parser may split differently.
//   - bare LF line endings: fasthttp accepts them; a front end that only
//     splits on CRLF would see one header where fasthttp sees two.
//   - whitespace inside a field name ("Transfer Encoding: chunked"):
//     fasthttp keeps it as an uncanonicalised name; it is not a token.
//   - Content-Length together with Transfer-Encoding: fasthttp lets
//     Transfer-Encoding win and only closes the connection afterwards; we
//     answer 400 (RFC 9112 section 6.3 allows either, and 400 is what a
//     proxy that cannot trust its peer should do).
//   - Transfer-Encoding: identity: fasthttp ignores it and reads no body, so
//     the body would be parsed as the next request.
func checkHeaderBlock(raw []byte) error {
	var cl, te bool
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
			if len(line) == 0 || line[len(line)-1] != '\r' {
				return errBareLF
			}
			line = line[:len(line)-1]
		} else {
			raw = nil
		}
		if len(line) == 0 {
			break // the blank line that ends the block
		}
		if line[0] == ' ' || line[0] == '\t' {
			return errObsFold
		}
		colon := bytes.IndexByte(line, ':')
		if colon < 0 {
			return errNoColon
		}
		name := line[:colon]
		if bytes.IndexByte(name, ' ') >= 0 || bytes.IndexByte(name, '\t') >= 0 {
			return errNameSpace
		}
		switch {
		case strings.EqualFold(b2s(name), "Content-Length"):
			cl = true
		case strings.EqualFold(b2s(name), "Transfer-Encoding"):
			te = true
			if !strings.EqualFold(b2s(trimOWS(line[colon+1:])), "chunked") {
				return errTECoding
			}
		}
	}
	if cl && te {
		return errCLAndTE
	}
	return nil
}
