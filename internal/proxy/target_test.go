package proxy

import (
	"net/http"
	"testing"
)

// TestTargetChecks sends request targets and framing fields that Go's
// server, llhttp or nginx refuse, or read differently, through the real
// listener: each gets 400 and the upstream nothing. Before, an
// absolute-form target's authority went upstream as the Host header
// unchecked ("http://a\"b/x" arrived as Host: a"b, which no Host header
// could carry), a path with a broken percent-escape was forwarded (Go's
// server and nginx answer 400), any scheme was taken for http, a tab
// beside "chunked" was taken as optional whitespace, and a Connection
// field that is not a list of tokens ("/ close") was read as keep-alive,
// where Go's server and nginx read it as close: whether the pipelined
// request after it is one. The accepted neighbours go through, with the
// host and target the upstream must get.
func TestTargetChecks(t *testing.T) {
	tests := []struct {
		name       string
		in         string
		want       int
		wantHost   string
		wantTarget string
	}{
		{name: "quote in the authority", in: "GET http://a\"b/x HTTP/1.1\r\nHost: a\r\n\r\n", want: 400},
		{name: "bad port in the authority", in: "GET http://a:8x/x HTTP/1.1\r\nHost: a\r\n\r\n", want: 400},
		{name: "bad escape in the userinfo", in: "GET http://u%zz@b/x HTTP/1.1\r\nHost: a\r\n\r\n", want: 400},
		{name: "ftp scheme", in: "GET ftp://b/x HTTP/1.1\r\nHost: a\r\n\r\n", want: 400},
		{name: "bad escape in the path", in: "GET /x%zz HTTP/1.1\r\nHost: a\r\n\r\n", want: 400},
		{name: "escape cut short", in: "GET /x% HTTP/1.1\r\nHost: a\r\n\r\n", want: 400},
		{name: "connection not a token list", in: "GET /x HTTP/1.1\r\nHost: a\r\nConnection: / close\r\n\r\nGET /y HTTP/1.1\r\nHost: a\r\n\r\n", want: 400},
		{name: "tab after chunked", in: "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\t\r\n\r\n1\r\nz\r\n0\r\n\r\n", want: 400},

		{name: "absolute form", in: "GET http://b:81/x HTTP/1.1\r\nHost: a\r\n\r\n", want: 200, wantHost: "b:81", wantTarget: "/x"},
		{name: "absolute form with userinfo", in: "GET HTTP://u:p@b/x HTTP/1.1\r\nHost: a\r\n\r\n", want: 200, wantHost: "b", wantTarget: "/x"},
		{name: "good escapes", in: "GET /x%20y%2F HTTP/1.1\r\nHost: a\r\n\r\n", want: 200, wantHost: "a", wantTarget: "/x%20y%2F"},
		{name: "escape in the query", in: "GET /x?q=%zz HTTP/1.1\r\nHost: a\r\n\r\n", want: 200, wantHost: "a", wantTarget: "/x?q=%zz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, rec := answerThroughGateway(t, Options{}, tt.in, false, http.MethodGet)
			if status != tt.want {
				t.Errorf("status %d, want %d", status, tt.want)
			}
			if tt.want != http.StatusOK {
				if rec.received != 0 {
					t.Errorf("the upstream received %d bytes; want none", rec.received)
				}
				return
			}
			if len(rec.reqs) != 1 {
				t.Fatalf("the upstream got %d requests, want 1 (%v)", len(rec.reqs), rec.errs)
			}
			if r := rec.reqs[0]; r.Header.Get("Host") != tt.wantHost || r.Target != tt.wantTarget {
				t.Errorf("the upstream got Host %q and target %q, want %q and %q", r.Header.Get("Host"), r.Target, tt.wantHost, tt.wantTarget)
			}
		})
	}
}
