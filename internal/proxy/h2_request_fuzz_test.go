package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/testserve"
)

// validHost is the fuzz oracle's own Host check: net/url's, and at most
// one colon outside brackets.
func validHost(h string) bool {
	u, err := url.Parse("http://" + h + "/")
	return err == nil && u.Host == h && h != "" && (strings.HasPrefix(h, "[") || strings.Count(h, ":") <= 1)
}

// FuzzH2RequestLine sends HTTP/2 requests with any :method, :path,
// :authority and content-length through the real h2c listener to an http1
// pool, and checks what the pool gets: every request that reaches it must
// be one that Go's HTTP/1.1 server reads as sent, with a request line of
// three parts, a token method, a visible-ASCII target and a valid Host.
// The gateway writes that request line itself from fields x/net/http2's
// server checks less strictly than the HTTP/1.1 listener does (spaces in
// a method or a query, a malformed host or content-length all got
// through once). x/net/http2's server may refuse the request itself (a
// reset stream); that is fine.
func FuzzH2RequestLine(f *testing.F) {
	for _, s := range [][4]string{
		{"GET", "/p", "a", ""},
		{"GE T", "/p", "a", ""},
		{"GET /admin HTTP/1.1 X", "/p", "a", ""},
		{"GET", "/p?x HTTP/1.1 X", "a", ""},
		{"GET", "/p?\xc3\xa9", "a", ""},
		{"POST", "/p", "a:x", "3"},
		{"POST", "/p", "a:80:80", "3"},
		{"POST", "/p", "a", "abc"},
		{"POST", "/p", "a", "3\n3"},
		{"get", "/p#f?q", "[::1]:80", "0"},
		{"OPTIONS", "*", "a", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	bad := make(chan string, 16)
	up := testserve.Conns(f, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			var head bytes.Buffer
			head.WriteString(line)
			for {
				l, err := br.ReadString('\n')
				if err != nil {
					return
				}
				head.WriteString(l)
				if l == "\r\n" {
					break
				}
			}
			raw := head.String()
			req, err := http.ReadRequest(bufio.NewReader(&head))
			switch {
			case err != nil:
				bad <- fmt.Sprintf("Go's server refuses %q: %v", raw, err)
			case strings.Count(strings.TrimSuffix(line, "\r\n"), " ") != 2:
				bad <- fmt.Sprintf("request line %q is not three parts", line)
			case strings.ContainsFunc(req.RequestURI, func(r rune) bool { return r <= ' ' || r >= 0x7f }):
				bad <- fmt.Sprintf("target %q is not visible ASCII", req.RequestURI)
			case !validHost(req.Host):
				bad <- fmt.Sprintf("Host %q does not parse", req.Host)
			}
			if err != nil {
				return
			}
			if _, err := io.Copy(io.Discard, req.Body); err != nil {
				return
			}
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	_, addr := startProxyWith(f, Options{}, staticDecider{Group: "stable", Target: poolOf("stable", up)}, listener.Protocols{H2C: true})
	f.Fuzz(func(t *testing.T, method, path, authority, cl string) {
		fields := [][2]string{{":method", method}, {":scheme", "http"}, {":authority", authority}, {":path", path}}
		var body []byte
		if cl != "" {
			for _, v := range strings.Split(cl, "\n") {
				fields = append(fields, [2]string{"content-length", v})
			}
			body = []byte("abc")
		}
		_, _, _ = h2Exchange(t, addr, fields, body)
		select {
		case msg := <-bad:
			t.Fatalf(":method %q :path %q :authority %q content-length %q: %s", method, path, authority, cl, msg)
		default:
		}
	})
}
