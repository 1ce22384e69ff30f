package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/testserve"
	"github.com/graygate/graygate/internal/upstream"
)

// agreeShape is what an HTTP/1.1 request and an HTTP/2 request can both
// say: a method, a target in origin or asterisk form, header fields (Host
// among them, as the request had it) and a body. The transfer framing
// (Content-Length, Transfer-Encoding, chunks), the version and the
// connection-specific fields have no HTTP/2 form, and are not in it.
type agreeShape struct {
	method, target string
	fields         [][2]string // name as sent, value without its OWS
	body           []byte
}

// connectionSpecific are the fields RFC 9113 section 8.2.2 does not allow
// in an HTTP/2 request, and the framing fields; a shape drops them.
var connectionSpecific = []string{"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "content-length"}

// shapeOf reads the first request of a corpus case as a shape: false if
// its head has no end, its request line is not three parts, its target is
// in absolute or authority form, or a line is folded or has no colon
// (the HTTP/1.1 listener's own framing rules, which have no HTTP/2 form).
// The body is llhttp's reading of the first message, if it read one.
func shapeOf(c llhttpCase, raw []byte) (agreeShape, bool) {
	head, _, ok := bytes.Cut(raw, []byte("\r\n\r\n"))
	if !ok {
		return agreeShape{}, false
	}
	lines := strings.Split(string(head), "\r\n")
	parts := strings.Split(lines[0], " ")
	if len(parts) != 3 || parts[0] == "" || !(strings.HasPrefix(parts[1], "/") || parts[1] == "*") {
		return agreeShape{}, false
	}
	s := agreeShape{method: parts[0], target: parts[1]}
	for _, l := range lines[1:] {
		name, value, ok := strings.Cut(l, ":")
		if !ok || l == "" || l[0] == ' ' || l[0] == '\t' {
			return agreeShape{}, false
		}
		if slices.Contains(connectionSpecific, strings.ToLower(name)) {
			continue
		}
		s.fields = append(s.fields, [2]string{name, strings.Trim(value, " \t")})
	}
	if m := c.LLHTTP.Messages; len(m) > 0 {
		b, err := octets(m[0].Body)
		if err != nil {
			return agreeShape{}, false
		}
		s.body = b
	}
	return s, true
}

// h1 writes the shape as an HTTP/1.1 request, with a Content-Length for
// its body and tag as one more field.
func (s agreeShape) h1(tag string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\n", s.method, s.target)
	for _, f := range s.fields {
		fmt.Fprintf(&b, "%s: %s\r\n", f[0], f[1])
	}
	fmt.Fprintf(&b, "X-Case: %s\r\n", tag)
	if len(s.body) > 0 {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(s.body))
	}
	b.WriteString("\r\n")
	b.Write(s.body)
	return b.Bytes()
}

// h2 gives the shape's HTTP/2 header fields: the pseudo-header fields
// without :authority (Host stays a host field, as many as the request
// had, which x/net/http2's server takes for :authority), then the fields
// with lower-case names, tag, and a content-length for the body.
func (s agreeShape) h2(tag string) [][2]string {
	f := [][2]string{{":method", s.method}, {":scheme", "http"}, {":path", s.target}}
	for _, kv := range s.fields {
		f = append(f, [2]string{strings.ToLower(kv[0]), kv[1]})
	}
	f = append(f, [2]string{"x-case", tag})
	if len(s.body) > 0 {
		f = append(f, [2]string{"content-length", strconv.Itoa(len(s.body))})
	}
	return f
}

// agreeSeen is a request as the upstream read it: the method, target,
// Host, body, and the fields but the ones the gateway makes per request
// or per protocol (X-Request-Id, Via) and the framing.
type agreeSeen struct {
	tag    string // the request's X-Case
	line   string
	fields []string
	body   string
}

func (a agreeSeen) String() string {
	return fmt.Sprintf("%s\n\t%s\n\tbody %q", a.line, strings.Join(a.fields, "\n\t"), a.body)
}

// TestH2AgreesWithHTTP1: the two listeners are one gateway. Every request
// shape that HTTP/1.1 and HTTP/2 can both carry (agreeShape), taken from
// the generated corpus of TestHTTP1AgainstLLHTTP (its targets, methods,
// Host lines and fields, mutated byte by byte), is sent once over each,
// through the real listener, and both must come to the same end: refused
// by both (HTTP/2 may refuse with a reset stream, from x/net/http2's
// server, where the HTTP/1.1 listener answers 400), or forwarded by both
// as the same request (method, target, Host, fields and body) with the
// same answer. Three differences are known and kept, and such shapes are
// counted, not compared: a method that is a token but not one llhttp
// knows (lower-case "get", "QUERYX") is refused over HTTP/1.1 and
// forwarded over HTTP/2, where the gateway writes the request line
// itself; 100-continue among other expectations (continueAmongOthers);
// and a path that starts with "//" and holds a byte net/url escapes
// (escapedSlashPath).
//
// This is how ":path: *" with GET, an Expect other than 100-continue and
// a request with no host were found going upstream over HTTP/2 while the
// HTTP/1.1 listener refused them.
func TestH2AgreesWithHTTP1(t *testing.T) {
	cases := loadLLHTTPCases(t)
	seen := make(chan agreeSeen, 4)
	// The http1 upstream answers 100 Continue to an Expect, as Go's
	// server does when its handler reads the body, and then 200 with "ok"
	// (no body to a HEAD). Its deadline bounds each request, as a
	// server's idle timeout does: one set once, when a connection the
	// gateway kept for the whole run was accepted, closed it under a
	// request now and then (a 502 for a method not sent twice) once the
	// run took longer than the deadline, as a wide corpus does.
	h1 := testserve.Conns(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			_ = c.SetDeadline(time.Now().Add(vectorDeadline))
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
				_, _ = io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
			}
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return
			}
			seen <- agreeSeenOf(req, body)
			answer := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
			if req.Method == http.MethodHead {
				answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"
			}
			if _, err := io.WriteString(c, answer); err != nil {
				return
			}
		}
	})
	h2c := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		seen <- agreeSeenOf(r, body)
		_, _ = io.WriteString(w, "ok")
	}))
	for _, pool := range []struct {
		name  string
		addr  string
		proto upstream.Protocol
	}{{"http1 pool", h1, upstream.HTTP1}, {"h2c pool", addrOf(h2c), upstream.H2C}} {
		t.Run(pool.name, func(t *testing.T) {
			p := poolOf("stable", pool.addr)
			p.Protocol = pool.proto
			agreeOnShapes(t, cases, p, seen)
		})
	}
}

// agreeSeenOf is what an upstream got: the request and its body.
func agreeSeenOf(req *http.Request, body []byte) agreeSeen {
	var fields []string
	for k, vv := range req.Header {
		switch k {
		case "X-Request-Id", "Via", "Content-Length", "X-Case", "Expect":
			continue
		}
		if k == "User-Agent" {
			// Go's Request.Write, which writes the HTTP/2 listener's
			// request to an http1 pool, sends the first of a repeated
			// User-Agent (not a list field: RFC 9110 section 10.1.5).
			vv = vv[:1]
		}
		for _, v := range vv {
			fields = append(fields, k+": "+v)
		}
	}
	slices.Sort(fields)
	return agreeSeen{tag: req.Header.Get("X-Case"), line: req.Method + " " + req.RequestURI + " Host=" + req.Host, fields: fields, body: string(body)}
}

// agreeOnShapes sends the shapes of cases over both protocols to a
// gateway in front of pool, whose upstream reports on seen, and checks
// that the two come to the same end (TestH2AgreesWithHTTP1).
func agreeOnShapes(t *testing.T, cases []llhttpCase, pool *upstream.Pool, seen chan agreeSeen) {
	_, addr := startProxyWith(t, Options{}, staticDecider{Group: "stable", Target: pool}, listener.Protocols{H2C: true})

	// next is what the upstream got for the request tagged tag, if
	// anything: a forwarded request has reached it before its answer came
	// back, and a refused one never does.
	next := func(tag string) (agreeSeen, bool) {
		select {
		case s := <-seen:
			if s.tag != tag {
				t.Fatalf("the upstream got request %q late, while %q was asked", s.tag, tag)
			}
			return s, true
		default:
			return agreeSeen{}, false
		}
	}
	var compared, bothRefused, bothForwarded, ownMethods, expectLists, slashPaths int
	seenShapes := map[string]bool{}
	for i, c := range cases {
		raw, err := c.bytes()
		if err != nil {
			t.Fatalf("cases[%d].raw: %v", i, err)
		}
		s, ok := shapeOf(c, raw)
		if !ok {
			continue
		}
		key := fmt.Sprintf("%q", s)
		if seenShapes[key] {
			continue
		}
		seenShapes[key] = true

		conn := dialBounded(t, addr, vectorDeadline)
		_ = conn.(*net.TCPConn).SetLinger(0)
		tag1, tag2 := strconv.Itoa(i)+"-1", strconv.Itoa(i)+"-2"
		_, _ = conn.Write(s.h1(tag1))
		_ = conn.(*net.TCPConn).CloseWrite()
		st1, body1 := 0, []byte(nil)
		if resp, err := readFinalResponse(bufio.NewReader(conn), s.method); err == nil {
			st1 = resp.StatusCode
			body1, _ = io.ReadAll(resp.Body)
		}
		conn.Close()
		up1, fwd1 := next(tag1)

		st2, _, err2 := h2Exchange(t, addr, s.h2(tag2), bodyOrNil(s.body))
		up2, fwd2 := next(tag2)
		if err2 != nil {
			st2 = 0 // a reset stream: refused by x/net/http2's server
		}
		if s.method == http.MethodOptions && s.target == "*" {
			// Go's server answers "OPTIONS *" itself, without calling
			// the handler (an h2c pool's upstream does): its 200 is the
			// upstream's, as the gateway answers none itself.
			fwd1 = fwd1 || st1 == http.StatusOK
			fwd2 = fwd2 || st2 == http.StatusOK
		}

		if !fwd1 && st1 == http.StatusBadRequest && bytes.Contains(body1, []byte("unknown method")) {
			ownMethods++
			continue
		}
		if !fwd1 && fwd2 && st1 == http.StatusExpectationFailed && s.continueAmongOthers() {
			expectLists++
			continue
		}
		compared++
		where := fmt.Sprintf("case %d (from %s; %s)\nHTTP/1.1 bytes: %q\nHTTP/2 fields: %q", i, c.From, c.Mutation, s.h1(tag1), s.h2(tag2))
		switch {
		case fwd1 != fwd2:
			t.Errorf("%s\nforwarded over HTTP/1.1: %v (answer %d); over HTTP/2: %v (answer %d, %v)\nupstream got: %v%v", where, fwd1, st1, fwd2, st2, err2, up1, up2)
		case fwd1:
			if up1.String() != up2.String() && s.escapedSlashPath() && strings.Join(up1.fields, "\n") == strings.Join(up2.fields, "\n") {
				slashPaths++
				break
			}
			bothForwarded++
			if up1.String() != up2.String() {
				t.Errorf("%s\nthe upstream got, over HTTP/1.1:\n%v\nover HTTP/2:\n%v", where, up1, up2)
			}
			if st1 != http.StatusOK || st2 != http.StatusOK {
				t.Errorf("%s\nforwarded, and answered %d over HTTP/1.1, %d over HTTP/2 (%v)", where, st1, st2, err2)
			}
		default:
			bothRefused++
			if st1 != st2 && st2 != 0 {
				t.Errorf("%s\nrefused with %d over HTTP/1.1, %d over HTTP/2", where, st1, st2)
			}
		}
	}
	if compared < 500 {
		t.Fatalf("only %d shapes compared, want at least 500", compared)
	}
	if bothForwarded < compared/4 {
		// Refused by both agrees too: a gateway that refused every
		// request would pass without this.
		t.Fatalf("only %d of %d shapes forwarded by both", bothForwarded, compared)
	}
	t.Logf("%d shapes compared: %d forwarded alike, %d refused by both; %d with a method only HTTP/2 takes, %d with 100-continue among other expectations, %d paths net/url escapes",
		compared, bothForwarded, bothRefused, ownMethods, expectLists, slashPaths)
}

// continueAmongOthers reports whether the shape's Expect fields hold
// 100-continue beside another expectation. x/net/http2's server meets the
// 100-continue and removes the whole field, the others with it, so the
// HTTP/2 listener never sees them; the HTTP/1.1 listener answers 417 to
// any expectation but 100-continue, and must, to be as strict as Go's
// server, which reads only the first Expect line ("Expect: a-pony" then
// "Expect: 100-continue" is 417 to Go). RFC 9110 section 10.1.1 lets a
// server answer 417 or not.
func (s agreeShape) continueAmongOthers() bool {
	cont, other := false, false
	for _, f := range s.fields {
		if !strings.EqualFold(f[0], "Expect") {
			continue
		}
		for m := range strings.SplitSeq(f[1], ",") {
			if strings.EqualFold(strings.TrimSpace(m), "100-continue") {
				cont = true
			} else {
				other = true
			}
		}
	}
	return cont && other
}

// escapedSlashPath reports whether the shape's target is a path that
// starts with "//" and holds a byte net/url escapes ('"', '\\'). The
// HTTP/2 listener's request goes upstream through net/url, which writes
// such a path its own way: upstreamURL sends any other path as it came,
// in URL.Opaque, but net/url would read an Opaque that starts with "//" as
// a URL's authority.
func (s agreeShape) escapedSlashPath() bool {
	path, _, _ := strings.Cut(s.target, "?")
	u, err := url.ParseRequestURI(s.target)
	return err == nil && strings.HasPrefix(path, "//") && u.RawPath != "" && u.EscapedPath() != u.RawPath
}

func bodyOrNil(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}
