package listener

import (
	"strings"
	"testing"
)

// scanAll feeds in to a fresh Guard in pieces of at most step bytes and
// returns how many bytes it handed over, the error, and the requests read.
func scanAll(in string, step int) (int, *Error, uint64) {
	return scanPieces(in, step, false)
}

// scanPieces is scanAll, with ScanRequest when one is set: the bytes after
// a request's end are scanned again, as Conn.Read hands them over later.
func scanPieces(in string, step int, one bool) (int, *Error, uint64) {
	g := NewGuard(16 << 10)
	total := 0
	b := []byte(in)
	for len(b) > 0 {
		n := min(step, len(b))
		var good int
		var err *Error
		if one {
			good, err = g.ScanRequest(b[:n])
		} else {
			good, err = g.Scan(b[:n])
		}
		total += good
		if err != nil {
			return total, err, g.Requests()
		}
		if good < n && (!one || g.Tunnel()) {
			return total, nil, g.Requests() // a tunnel
		}
		b = b[good:]
	}
	return total, nil, g.Requests()
}

func TestGuard(t *testing.T) {
	const get = "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
	tests := []struct {
		name     string
		in       string
		status   int // 0: accepted
		requests uint64
	}{
		{"simple", get, 0, 1},
		{"pipelined", get + get + get, 0, 3},
		{"leading empty line", "\r\n" + get, 400, 0},
		{"empty lines after a POST", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx\r\n\r\n" + get, 0, 2},
		{"empty line after a PUT", "PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx\r\n" + get, 400, 1},
		{"webdav method", "PROPFIND / HTTP/1.1\r\nHost: a\r\n\r\n", 0, 1},
		{"unknown method", "MKCOLA / HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"rtsp method", "ANNOUNCE / HTTP/1.0\r\n\r\n", 400, 0},
		{"pri over http/1.1", "PRI / HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"expect 100-continue", "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\nx", 0, 1},
		{"unknown expectation", "POST / HTTP/1.1\r\nHost: a\r\nExpect: a-pony\r\nContent-Length: 0\r\n\r\n", 417, 0},
		{"unknown expectation in http/1.0", "POST / HTTP/1.0\r\nExpect: a-pony\r\nContent-Length: 0\r\n\r\n", 417, 0},
		{"empty host before an unknown expectation", "GET / HTTP/1.1\r\nHost: \r\nExpect: a-pony\r\n\r\n", 400, 0},
		{"host without a port's digits before an unknown expectation", "GET / HTTP/1.1\r\nHost: :a\r\nExpect: a-pony\r\n\r\n", 400, 0},
		{"host with two ports before an unknown expectation", "GET / HTTP/1.1\r\nHost: a:80:80\r\nExpect: a-pony\r\n\r\n", 400, 0},
		{"host with a port and an unknown expectation", "GET / HTTP/1.1\r\nHost: a:80\r\nExpect: a-pony\r\n\r\n", 417, 0},
		{"empty host in http/1.0", "GET / HTTP/1.0\r\nHost:\r\n\r\n", 400, 0},
		{"100-continue in http/1.0 ignored", "POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n", 0, 1},
		{"bare CR before the body", "PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\rabc", 400, 0},
		{"forbidden trailer", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nContent-Length: 5\r\n\r\n", 400, 1},
		{"15-digit chunk size", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n000000000000001\r\nx\r\n0\r\n\r\n", 0, 1},
		{"16-digit chunk size", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0000000000000001\r\nx\r\n0\r\n\r\n", 400, 1},
		{"http/1.0 without host", "GET / HTTP/1.0\r\n\r\n", 0, 1},
		{"content-length body", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello" + get, 0, 2},
		{"chunked body", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + get, 0, 2},
		{"chunked with trailer", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n" + get, 0, 2},
		{"chunk extension", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b;c;d=\"q\\\"x\"\r\nhello\r\n0\r\n\r\n", 0, 1},
		{"uppercase hex", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n", 0, 1},
		{"body that looks like a request", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 16\r\n\r\nGET / HTTP/1.1\n\n" + get, 0, 2},
		{"host with port", "GET / HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", 0, 1},
		{"absolute form", "GET http://example.com/p HTTP/1.1\r\nHost: a\r\n\r\n", 0, 1},
		{"absolute form, empty host", "GET http:///p HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"absolute form, empty host with a port", "GET HTTP://:80/p HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"absolute form, empty host after userinfo", "GET https://u:p@?q HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"absolute form, ip literal", "GET http://[::1]:80/p HTTP/1.1\r\nHost: a\r\n\r\n", 0, 1},
		{"absolute form, '#' in the authority", "GET http://a#b/p HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"absolute form, only a '#' after the host", "GET http://0000000000#0000 HTTP/1.0\r\n\r\n", 400, 0},
		{"absolute form, '#' in the userinfo", "GET http://u#x@a/p HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"absolute form, another scheme, '#' in the authority", "GET ftp://a#b HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"absolute form, fragment after the path", "GET http://a/p#x HTTP/1.1\r\nHost: a\r\n\r\n", 0, 1},
		{"absolute form, '#' in the query", "GET http://a?x#y HTTP/1.1\r\nHost: a\r\n\r\n", 0, 1},
		{"origin form, fragment", "GET /p#http://x HTTP/1.1\r\nHost: a\r\n\r\n", 0, 1},
		{"escape", "GET /a%20b%2F HTTP/1.1\r\nHost: a\r\n\r\n", 0, 1},
		{"escape not hex", "GET /a%zz HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"escape cut short", "GET /a%2 HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"escape alone", "GET /% HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"escape before the query", "GET /a%?b HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"escape in a fragment", "GET /a#%zz HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"escape in the query is not checked", "GET /a?b=%zz&c=% HTTP/1.1\r\nHost: a\r\n\r\n", 0, 1},
		{"absolute form, escape in the path", "GET http://a/%zz HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"absolute form, escape in the userinfo", "GET http://u%zz@a/p HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"absolute form, userinfo", "GET http://u:p@a/p HTTP/1.1\r\nHost: a\r\n\r\n", 0, 1},
		{"absolute form, upper-case scheme", "GET HTTPS://a/p HTTP/1.1\r\nHost: a\r\n\r\n", 0, 1},
		{"absolute form, ftp", "GET ftp://a/p HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"absolute form, digit in the scheme", "GET ht1p://a/p HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"absolute form, quote in the host", "GET http://a\"b/p HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"absolute form, brace in the host", "GET http://a{b}:80 HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"absolute form, bad port", "GET http://a:8x/p HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"absolute form, empty port", "GET http://a:/p HTTP/1.1\r\nHost: a\r\n\r\n", 0, 1},
		{"absolute form, ip literal and bad port", "GET http://[::1]x/p HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"origin form holding an empty authority", "GET /http:///p HTTP/1.1\r\nHost: a\r\n\r\n", 0, 1},
		{"ipv6 host", "GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", 0, 1},
		{"absolute form", "GET http://a/x HTTP/1.1\r\nHost: a\r\n\r\n", 0, 1},
		{"options asterisk", "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", 0, 1},

		{"bare LF in request line", "GET / HTTP/1.1\nHost: a\r\n\r\n", 400, 0},
		{"bare LF in header", "GET / HTTP/1.1\r\nHost: a\n\r\n", 400, 0},
		{"bare LF blank line", "GET / HTTP/1.1\r\nHost: a\r\n\n", 400, 0},
		{"bare CR in header value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", 400, 0},
		{"bare CR in request line", "GET /\r HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"http/0.9 version", "GET / HTTP/0.9\r\nHost: a\r\n\r\n", 505, 0},
		{"http/2.0", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505, 0},
		{"http/3.0", "GET / HTTP/3.0\r\nHost: a\r\n\r\n", 505, 0},
		{"h2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, 0},
		{"no version", "GET /\r\n\r\n", 400, 0},
		{"lowercase version", "GET / http/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"double space", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"trailing space", "GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 400, 0},
		{"bad method", "G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"control char in target", "GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", 400, 0},
		{"space before colon", "GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n", 400, 0},
		{"space in name", "GET / HTTP/1.1\r\nHost: a\r\nTransfer Encoding: chunked\r\n\r\n", 400, 0},
		{"no colon", "GET / HTTP/1.1\r\nHost: a\r\nBogus\r\n\r\n", 400, 0},
		{"empty name", "GET / HTTP/1.1\r\nHost: a\r\n: x\r\n\r\n", 400, 0},
		{"nul in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n", 400, 0},
		{"missing host", "GET / HTTP/1.1\r\n\r\n", 400, 0},
		{"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, 0},
		{"invalid host", "GET / HTTP/1.1\r\nHost: \xff\r\n\r\n", 400, 0},
		{"host with space", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400, 0},
		{"cl and te", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, 0},
		{"two cl", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", 400, 0},
		{"cl list", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\nhello", 400, 0},
		{"cl plus", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello", 400, 0},
		{"cl hex", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\nhello", 400, 0},
		{"cl overflow", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n", 400, 0},
		{"te identity", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n", 400, 0},
		{"te list", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 400, 0},
		{"te xchunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n", 400, 0},
		{"te twice", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400, 0},
		{"te with a tab after", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\t\r\n\r\n0\r\n\r\n", 400, 0},
		{"te with a tab before", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n", 400, 0},
		{"te with spaces around", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:  chunked  \r\n\r\n0\r\n\r\n", 0, 1},
		{"connection not a token list", "GET / HTTP/1.1\r\nHost: a\r\nConnection: / close\r\n\r\n" + get, 400, 0},
		{"connection with a quote", "GET / HTTP/1.1\r\nHost: a\r\nConnection: \" close\r\n\r\n", 400, 0},
		{"connection with a semicolon", "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive; close\r\n\r\n", 400, 0},
		{"connection list", "GET / HTTP/1.1\r\nHost: a\r\nConnection: close, token, upgrade, , keep-alive\r\n\r\n", 0, 1},
		{"connection empty", "GET / HTTP/1.1\r\nHost: a\r\nConnection:\r\n\r\n", 0, 1},
		{"te in http/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, 0},
		{"chunk size underscore", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0_2e\r\n\r\n", 400, 1},
		{"chunk size negative", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n-0x0\r\n\r\n", 400, 1},
		{"chunk size 0x", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n", 400, 1},
		{"chunk size letter", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nZ\r\n\r\n", 400, 1},
		{"chunk size leading space", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n 5\r\nhello\r\n0\r\n\r\n", 400, 1},
		{"chunk size trailing space", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n", 400, 1},
		{"chunk size bare LF", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", 400, 1},
		{"chunk size bare CR", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\rhello\r\n0\r\n\r\n", 400, 1},
		{"chunk size overflow", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\n", 400, 1},
		{"chunk data without CRLF", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloX\r\n0\r\n\r\n", 400, 1},
		{"chunk data with LF only", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\n0\r\n\r\n", 400, 1},
		{"chunk ext space", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5 ;a=b\r\nhello\r\n0\r\n\r\n", 400, 1},
		{"chunk ext bad quote", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;a=\"b\r\nhello\r\n0\r\n\r\n", 400, 1},
		{"empty chunk size", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\r\n", 400, 1},
		// A chunk-size line is refused as soon as it cannot become valid,
		// before its end arrives (a client may send no more).
		{"unended chunk size, not hex", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nx=y", 400, 1},
		{"unended chunk size, junk after digits", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3x", 400, 1},
		{"unended chunk size, too many digits", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0000000000000001", 400, 1},
		{"unended chunk size, second chunk", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n-1", 400, 1},
		{"unended chunk size, digits so far", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3f", 0, 1},
		{"unended chunk size, extension so far", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;a=", 0, 1},
		{"unended trailer, not a token", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n,", 400, 1},
		{"unended trailer, space in the name", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX Y", 400, 1},
		{"unended trailer, no name", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n:", 400, 1},
		{"unended trailer, a field so far", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: 1", 0, 1},
		{"unended trailer, its name so far", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T", 0, 1},
		{"unended trailer, the end's CR", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r", 0, 1},
		{"unended chunk size, its CR", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r", 0, 1},
		{"trailer obs-fold", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: a\r\n b\r\n\r\n", 400, 1},
		{"trailer bare LF", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: a\n\r\n", 400, 1},
		{"second request bad", get + "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505, 1},
		{"head too large", "GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("a", 17<<10) + "\r\n\r\n", 431, 0},
		{"head too large without newline", "GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("a", 17<<10), 431, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The verdict must not depend on how the bytes arrive, nor on
			// whether they are handed over one request at a time.
			for _, one := range []bool{false, true} {
				for _, step := range []int{len(tt.in), 1, 2, 3, 7, 64} {
					n, err, reqs := scanPieces(tt.in, step, one)
					status := 0
					if err != nil {
						status = err.Status
					}
					if status != tt.status || reqs != tt.requests {
						t.Fatalf("in pieces of %d (one request a scan: %v): status %d after %d requests (%d bytes handed over), want %d after %d", step, one, status, reqs, n, tt.status, tt.requests)
					}
					if err == nil && n != len(tt.in) {
						t.Fatalf("in pieces of %d (one request a scan: %v): handed over %d of %d bytes", step, one, n, len(tt.in))
					}
				}
			}
		})
	}
}

// TestGuardScanRequest: ScanRequest stops where a request ends when bytes
// follow, and the rest, scanned again, gives the next request; a tunnel's
// bytes still stop it at the head.
func TestGuardScanRequest(t *testing.T) {
	get := "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
	post := "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc"
	chunked := "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n"
	ws := "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
	for _, tt := range []struct {
		name  string
		in    string
		parts []string // what each ScanRequest hands over
	}{
		{"one request", get, []string{get}},
		{"three pipelined", get + post + get, []string{get, post, get}},
		{"a chunked one between", get + chunked + get, []string{get, chunked, get}},
		{"the next in part", get + "GET /x HT", []string{get, "GET /x HT"}},
		{"a tunnel's bytes", ws + "\x81\x05hello", []string{ws}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewGuard(16 << 10)
			b := []byte(tt.in)
			var got []string
			for len(b) > 0 {
				n, err := g.ScanRequest(b)
				if err != nil {
					t.Fatalf("after %q: %v", got, err)
				}
				got = append(got, string(b[:n]))
				if g.Tunnel() {
					break
				}
				b = b[n:]
			}
			if strings.Join(got, "|") != strings.Join(tt.parts, "|") {
				t.Errorf("handed over %q, want %q", got, tt.parts)
			}
		})
	}
}

// TestGuardNeverCompletesRefusedHead checks what Scan hands over after a
// refusal: never the LF that would complete the refused line, so the
// parser behind it can't read the refused request whole.
func TestGuardNeverCompletesRefusedHead(t *testing.T) {
	tests := []string{
		"GET / HTTP/1.1\nHost: a\r\n\r\n",
		"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.1\r\n\r\n",
	}
	for _, in := range tests {
		n, err, _ := scanAll(in, len(in))
		if err == nil {
			t.Fatalf("%q accepted", in)
		}
		handed := in[:n]
		if strings.Contains(handed, "\n\r\n") || strings.Contains(handed, "\n\n") || strings.HasSuffix(handed, "\n") {
			t.Errorf("%q: handed over %q, which may complete the head", in, handed)
		}
		if n == 0 {
			t.Errorf("%q: handed over nothing; the parser would not answer", in)
		}
	}
}

func TestGuardTunnel(t *testing.T) {
	ws := "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n"
	frames := "\x81\x05hello"
	g := NewGuard(16 << 10)
	n, err := g.Scan([]byte(ws + frames))
	if err != nil || n != len(ws) || !g.Tunnel() {
		t.Fatalf("Scan = %d, %v, tunnel %v; want %d, nil, true", n, err, g.Tunnel(), len(ws))
	}
	g = NewGuard(16 << 10)
	n, err = g.Scan([]byte("CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\nxyz"))
	if err != nil || !g.Tunnel() || n != len("CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n") {
		t.Fatalf("CONNECT: Scan = %d, %v, tunnel %v", n, err, g.Tunnel())
	}
	// An Upgrade to anything but websocket is an ordinary request.
	g = NewGuard(16 << 10)
	h2c := "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
	if n, err := g.Scan([]byte(h2c + h2c)); err != nil || n != 2*len(h2c) || g.Tunnel() {
		t.Fatalf("h2c upgrade: Scan = %d, %v, tunnel %v", n, err, g.Tunnel())
	}
}

// FuzzGuard checks that Scan never panics and that its verdict does not
// depend on how the input is split into reads.
func FuzzGuard(f *testing.F) {
	seeds := []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;x=\"y\"\r\nhello\r\n0\r\nT: 1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.0\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\nxx",
	}
	for _, s := range seeds {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		if len(in) > 1<<16 {
			return
		}
		s := int(step%31) + 1
		n1, e1, r1 := scanAll(string(in), len(in)+1)
		for _, one := range []bool{false, true} {
			n2, e2, r2 := scanPieces(string(in), s, one)
			if (e1 == nil) != (e2 == nil) || r1 != r2 || (e1 != nil && e1.Status != e2.Status) {
				t.Fatalf("split %d (one request a scan: %v) changes the verdict: (%d, %v, %d) vs (%d, %v, %d)", s, one, n1, e1, r1, n2, e2, r2)
			}
			if e1 == nil && n1 != n2 {
				t.Fatalf("split %d (one request a scan: %v) hands over %d bytes, whole %d", s, one, n2, n1)
			}
		}
	})
}

// FuzzGuardFraming: whatever header block the Guard accepts has
// unambiguous framing, judged here by plain substring tests rather than by
// re-running the Guard's line walk.
func FuzzGuardFraming(f *testing.F) {
	for _, s := range []string{
		"Host: a\r\n\r\n",
		"Host: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n",
		"Host: a\r\nTransfer-Encoding: identity\r\n\r\n",
		"Host: a\r\nX-A: 1\r\n X-B: 2\r\n\r\n",
		"Host: a\r\nX-A: 1\nTransfer-Encoding: chunked\r\n\r\n",
		"Host: a\r\nTransfer Encoding: chunked\r\n\r\n",
		"Host: a\r\ntransfer-encoding:chunked\r\n\r\nContent-Length: 1\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		in := append([]byte("GET / HTTP/1.1\r\n"), raw...)
		end := strings.Index(string(in), "\r\n\r\n")
		if end < 0 {
			return
		}
		block := in[:end+4]
		g := NewGuard(16 << 10)
		if _, err := g.Scan(block); err != nil || g.Requests() != 1 {
			return
		}
		if strings.Count(string(block), "\n") != strings.Count(string(block), "\r\n") {
			t.Fatalf("accepted a bare LF in %q", block)
		}
		if strings.Count(string(block), "\r") != strings.Count(string(block), "\r\n") {
			t.Fatalf("accepted a bare CR in %q", block)
		}
		if strings.Contains(string(block), "\n ") || strings.Contains(string(block), "\n\t") {
			t.Fatalf("accepted a folded line in %q", block)
		}
		lower := strings.ToLower(string(block))
		if strings.Contains(lower, "\ncontent-length:") && strings.Contains(lower, "\ntransfer-encoding:") {
			t.Fatalf("accepted Content-Length with Transfer-Encoding in %q", block)
		}
		if strings.Count(lower, "\nhost:") != 1 {
			t.Fatalf("accepted %d Host fields in %q", strings.Count(lower, "\nhost:"), block)
		}
	})
}

// TestGuardBetween checks that Between holds only when whole requests have
// been read and nothing of the next, whatever the framing of the last, and
// that MidRequest (a close must linger) holds when part of a request has
// been read, or a refused one may still be arriving, and not in a tunnel.
func TestGuardBetween(t *testing.T) {
	get := "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
	tests := []struct {
		name      string
		in        string
		want, mid bool
	}{
		{"nothing read yet", "", false, false},
		{"half a request line", "GET / HT", false, true},
		{"a head without its end", "GET / HTTP/1.1\r\nHost: a\r\n", false, true},
		{"one whole GET", get, true, false},
		{"two whole GETs", get + get, true, false},
		{"a GET and part of the next", get + "GET /b", false, true},
		{"a POST before its body", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n", false, true},
		{"a POST with part of its body", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nab", false, true},
		{"a whole POST", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc", true, false},
		{"a chunked POST before its last chunk", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", false, true},
		{"a whole chunked POST", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", true, false},
		{"a WebSocket handshake (a tunnel follows)", "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", false, false},
		{"a refused request", "GET / HTTP/1.1\nHost: a\r\n\r\n", false, true},
		{"a refused version", "POST / HTTP/2.0\r\nHost: a\r\nContent-Length: 3\r\n\r\n", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewGuard(16 << 10)
			g.Scan([]byte(tt.in))
			if got := g.Between(); got != tt.want {
				t.Fatalf("after %q: Between() = %v, want %v", tt.in, got, tt.want)
			}
			if got := g.MidRequest(); got != tt.mid {
				t.Fatalf("after %q: MidRequest() = %v, want %v", tt.in, got, tt.mid)
			}
		})
	}
}

// TestGuardRefusedLine: the method and target of a head refused after its
// request line are kept for the access log; a refusal before the line (or
// of a later request whose line was bad) names no earlier request's.
func TestGuardRefusedLine(t *testing.T) {
	for _, tt := range []struct {
		name, in       string
		method, target string
		ok             bool
	}{
		{"a bad field", "GET /a?q HTTP/1.1\r\nBad Name: x\r\n\r\n", "GET", "/a?q", true},
		{"the second of two", "GET /a HTTP/1.1\r\nHost: a\r\n\r\nPOST /b HTTP/1.1\r\nHost: \xff\r\n\r\n", "POST", "/b", true},
		{"a bad method after a good request", "GET /a HTTP/1.1\r\nHost: a\r\n\r\nG\x01T /b HTTP/1.1\r\n\r\n", "", "", false},
		{"a bad version", "GET /v HTTP/3.0\r\n\r\n", "GET", "/v", true},
		{"nothing refused", "GET /a HTTP/1.1\r\nHost: a\r\n\r\n", "", "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewGuard(8 << 10)
			_, _ = g.Scan([]byte(tt.in))
			m, target, ok := g.RefusedLine()
			if ok != tt.ok || string(m) != tt.method || string(target) != tt.target {
				t.Errorf("RefusedLine() = %q %q %v, want %q %q %v", m, target, ok, tt.method, tt.target, tt.ok)
			}
		})
	}
}
