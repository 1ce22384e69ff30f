package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/listener"
)

// vectorDir holds the HTTP/1.1 request vectors transcribed from public test
// suites; its README says where each file comes from and how a case reads.
const vectorDir = "testdata/http1"

// vectorFile is one transcribed suite.
type vectorFile struct {
	Source  json.RawMessage `json:"source"`
	Cases   []vectorCase    `json:"cases"`
	Skipped []struct {
		SourceRef string `json:"source_ref"`
		Why       string `json:"why"`
	} `json:"skipped"`
}

// vectorCase is one request (or several pipelined requests) and what the
// gateway must do with it.
type vectorCase struct {
	Name      string        `json:"name"`
	SourceRef string        `json:"source_ref"`
	Raw       string        `json:"raw"`
	Repeat    *vectorRepeat `json:"repeat"`
	Adapted   string        `json:"adapted"`
	Want      vectorWant    `json:"want"`
	Why       string        `json:"why"`
}

// vectorRepeat replaces the one occurrence of At in Raw by Count copies of
// Text, for heads too long to write out.
type vectorRepeat struct {
	At    string `json:"at"`
	Text  string `json:"text"`
	Count int    `json:"count"`
}

// vectorWant is the expected outcome. Count responses come back, in order;
// all but the last are 200 from the upstream. The last is Status (or one of
// OrStatus): 200 from the upstream when Forward is set, otherwise the
// gateway's own rejection, after which the connection is closed and the
// upstream has received nothing of that request.
type vectorWant struct {
	Forward        bool     `json:"forward"`
	Status         int      `json:"status"`
	OrStatus       []int    `json:"or_status"`
	Count          int      `json:"count"`
	UpstreamBody   *string  `json:"upstream_body"`
	UpstreamAbsent []string `json:"upstream_absent"`
	Close          bool     `json:"close"`
}

// rejectStatuses are the answers a case may expect from the gateway itself.
var rejectStatuses = []int{
	http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusExpectationFailed,
	http.StatusRequestHeaderFieldsTooLarge, http.StatusHTTPVersionNotSupported,
}

// bytes returns the request bytes: each character of Raw stands for the
// byte of the same value (U+0000..U+00FF, so that JSON can carry any octet),
// with Repeat expanded.
func (c vectorCase) bytes() ([]byte, error) {
	raw := c.Raw
	if r := c.Repeat; r != nil {
		if strings.Count(raw, r.At) != 1 || r.Count <= 0 || r.Text == "" {
			return nil, fmt.Errorf("repeat: marker %q must occur once in raw, with text and a positive count", r.At)
		}
		raw = strings.Replace(raw, r.At, strings.Repeat(r.Text, r.Count), 1)
	}
	out, err := octets(raw)
	if err != nil {
		return nil, fmt.Errorf("raw: %w", err)
	}
	return out, nil
}

// octets turns a string whose every character stands for one byte
// (U+0000..U+00FF, as the vector files write bytes) into those bytes.
func octets(s string) ([]byte, error) {
	out := make([]byte, 0, len(s))
	for i, r := range s {
		if r > 0xff {
			return nil, fmt.Errorf("character %U at byte %d is not in U+0000..U+00FF", r, i)
		}
		out = append(out, byte(r))
	}
	return out, nil
}

// check reports a case that is not well-formed, naming the field.
func (c vectorCase) check() error {
	var errs []error
	if c.Name == "" || c.SourceRef == "" || c.Raw == "" || c.Why == "" {
		errs = append(errs, errors.New("name, source_ref, raw and why are required"))
	}
	if _, err := c.bytes(); err != nil {
		errs = append(errs, err)
	}
	w := c.Want
	if w.Count < 0 {
		errs = append(errs, fmt.Errorf("want.count: must be at least 1, got %d", w.Count))
	}
	if w.Forward {
		if w.Status != http.StatusOK || len(w.OrStatus) > 0 {
			errs = append(errs, fmt.Errorf("want.status: a forwarded request gets the upstream's 200, got %d", w.Status))
		}
	} else {
		for _, s := range append([]int{w.Status}, w.OrStatus...) {
			if !slices.Contains(rejectStatuses, s) {
				errs = append(errs, fmt.Errorf("want.status: a rejection is one of %v, got %d", rejectStatuses, s))
			}
		}
		if w.UpstreamBody != nil || len(w.UpstreamAbsent) > 0 {
			errs = append(errs, errors.New("want.upstream_body, want.upstream_absent: only for forwarded requests"))
		}
	}
	return errors.Join(errs...)
}

// responses is how many responses the case expects.
func (w vectorWant) responses() int { return max(w.Count, 1) }

// forwarded is how many requests of the case reach the upstream.
func (w vectorWant) forwarded() int {
	if w.Forward {
		return w.responses()
	}
	return w.responses() - 1
}

// loadVectors reads every vector file, checking each case.
func loadVectors(t testing.TB) map[string]vectorFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(vectorDir, "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no vector files in %s: %v", vectorDir, err)
	}
	files := map[string]vectorFile{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		var f vectorFile
		if err := dec.Decode(&f); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		names := map[string]bool{}
		for i, c := range f.Cases {
			if err := c.check(); err != nil {
				t.Errorf("%s: cases[%d] (%q): %v", p, i, c.Name, err)
			}
			if names[c.Name] {
				t.Errorf("%s: cases[%d]: duplicate name %q", p, i, c.Name)
			}
			names[c.Name] = true
		}
		files[strings.TrimSuffix(filepath.Base(p), ".json")] = f
	}
	return files
}

// requestMethods returns the methods of the requests in raw, as far as
// net/http can read them, so that responses to HEAD are read without a body.
func requestMethods(raw []byte) []string {
	var methods []string
	br := bufio.NewReader(bytes.NewReader(raw))
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return methods
		}
		methods = append(methods, req.Method)
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return methods
		}
	}
}

// readFinalResponse reads the next final response, skipping 1xx interim
// responses other than 101 as a client does.
func readFinalResponse(br *bufio.Reader, method string) (*http.Response, error) {
	for {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
	}
}

// upstreamRequest is one request as the recording upstream parsed it.
type upstreamRequest struct {
	Method string
	Target string
	Header http.Header
	Body   []byte
}

// recordingUpstream is a raw TCP upstream that parses requests with
// net/http's reader, records each one, and answers 200 "ok". It counts every
// byte it receives and the bytes that made up complete requests, so that a
// test can tell a forwarded request from a partly forwarded one.
type recordingUpstream struct {
	ln net.Listener
	wg sync.WaitGroup

	mu       sync.Mutex
	open     map[net.Conn]struct{}
	received int64 // bytes read from all connections
	complete int64 // bytes of complete requests (head and body)
	reqs     []upstreamRequest
	errs     []string
	cutOff   []string // those of errs that are a body ending early (the gateway gave up on it)
}

func newRecordingUpstream() (*recordingUpstream, error) {
	ln, err := listenLocal()
	if err != nil {
		return nil, err
	}
	u := &recordingUpstream{ln: ln, open: map[net.Conn]struct{}{}}
	u.wg.Add(1)
	go u.accept()
	return u, nil
}

func (u *recordingUpstream) addr() string { return u.ln.Addr().String() }

func (u *recordingUpstream) accept() {
	defer u.wg.Done()
	for {
		c, err := u.ln.Accept()
		if err != nil {
			return
		}
		u.mu.Lock()
		u.open[c] = struct{}{}
		u.mu.Unlock()
		u.wg.Add(1)
		go u.serve(c)
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (u *recordingUpstream) serve(c net.Conn) {
	defer u.wg.Done()
	cr := &countingReader{r: c}
	br := bufio.NewReader(cr)
	var complete int64
	defer func() {
		c.Close()
		u.mu.Lock()
		delete(u.open, c)
		u.received += cr.n
		u.complete += complete
		u.mu.Unlock()
	}()
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				u.fail(fmt.Sprintf("reading a request: %v", err))
			}
			return
		}
		body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
		if err != nil {
			msg := fmt.Sprintf("reading the body of %s %s: %v", req.Method, req.RequestURI, err)
			u.fail(msg)
			if errors.Is(err, io.ErrUnexpectedEOF) {
				u.mu.Lock()
				u.cutOff = append(u.cutOff, msg)
				u.mu.Unlock()
			}
			return
		}
		complete = cr.n - int64(br.Buffered())
		h := req.Header.Clone()
		if req.Host != "" {
			h.Set("Host", req.Host)
		}
		u.mu.Lock()
		u.reqs = append(u.reqs, upstreamRequest{Method: req.Method, Target: req.RequestURI, Header: h, Body: body})
		u.mu.Unlock()
		resp := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n"
		if req.Method != http.MethodHead {
			resp += "ok"
		}
		if _, err := io.WriteString(c, resp); err != nil || req.Close {
			return
		}
	}
}

func (u *recordingUpstream) fail(msg string) {
	u.mu.Lock()
	u.errs = append(u.errs, msg)
	u.mu.Unlock()
}

// close stops accepting and waits, up to within, for the connections the
// gateway opened to be closed by it; then it closes the rest itself.
func (u *recordingUpstream) close(within time.Duration) {
	u.ln.Close()
	done := make(chan struct{})
	go func() { u.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(within):
	}
	u.mu.Lock()
	for c := range u.open {
		c.Close()
	}
	u.mu.Unlock()
	<-done
}

// gatewayUnderTest is a Proxy serving on a loopback port that sends every
// request to one upstream.
type gatewayUnderTest struct {
	p    *Proxy
	addr string
	done chan error
}

// listenLocal listens on 127.0.0.1:0, waiting (up to 30 s) while the
// kernel has no port left to bind. FuzzAgainstNetHTTP starts a gateway and
// an upstream, and opens a few connections, for each input; each
// connection leaves a TIME_WAIT for a minute on the side that closed
// first, and at a thousand inputs a second they filled the ephemeral port
// range until a listener could not bind ("bind: address already in use"
// after a minute of fuzzing). Waiting lets the oldest expire.
func listenLocal() (net.Listener, error) {
	give := time.Now().Add(30 * time.Second)
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(give) {
			return ln, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func startGateway(opts Options, upstreamAddr string) (*gatewayUnderTest, error) {
	return startGatewayOver(nil, opts, upstreamAddr)
}

// vectorTLS has a vector test's gateway terminate TLS (server) and its
// connection to it speak TLS (client).
type vectorTLS struct{ server, client *tls.Config }

// startGatewayOver is startGateway on a listener that terminates TLS with
// vt.server, or on a cleartext one when vt is nil.
func startGatewayOver(vt *vectorTLS, opts Options, upstreamAddr string) (*gatewayUnderTest, error) {
	ln, err := listenLocal()
	if err != nil {
		return nil, err
	}
	p := New(opts, staticDecider{Rule: "r", Group: "stable", Target: poolOf("stable", upstreamAddr)}, nil)
	g := &gatewayUnderTest{p: p, addr: ln.Addr().String(), done: make(chan error, 1)}
	if vt == nil {
		go func() { g.done <- p.Serve(ln) }()
	} else {
		go func() { g.done <- p.ServeWith(ln, listener.Protocols{TLS: vt.server}) }()
	}
	return g, nil
}

// stop shuts the gateway down and waits for Serve to return.
func (g *gatewayUnderTest) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := g.p.Shutdown(ctx)
	select {
	case serr := <-g.done:
		return errors.Join(err, serr)
	case <-time.After(5 * time.Second):
		return errors.Join(err, errors.New("Serve did not return after Shutdown"))
	}
}

// upstreamRecord is what a recording upstream received, and how stopping
// the gateway in front of it went.
type upstreamRecord struct {
	reqs     []upstreamRequest
	received int64 // bytes read from all connections
	complete int64 // bytes of complete requests
	errs     []string
	cutOff   []string // those of errs that are a body ending early
	stopErr  error
}

// throughGateway starts a recording upstream and a gateway with opts in
// front of it, dials the gateway over real TCP and runs talk on that
// connection, whose deadline is deadline from now. It then closes the
// connection, stops both, and returns what the upstream recorded; err is
// a failure to set up.
func throughGateway(opts Options, deadline time.Duration, talk func(conn net.Conn)) (rec upstreamRecord, err error) {
	return throughGatewayOver(nil, opts, deadline, talk)
}

// throughGatewayOver is throughGateway over TLS when vt is not nil: the
// connection talk gets has shaken hands with the gateway.
func throughGatewayOver(vt *vectorTLS, opts Options, deadline time.Duration, talk func(conn net.Conn)) (rec upstreamRecord, err error) {
	up, err := newRecordingUpstream()
	if err != nil {
		return rec, err
	}
	g, err := startGatewayOver(vt, opts, up.addr())
	if err != nil {
		up.close(time.Second)
		return rec, err
	}
	defer func() {
		rec.stopErr = g.stop()
		up.close(2 * time.Second)
		up.mu.Lock()
		rec.reqs, rec.received, rec.complete, rec.errs, rec.cutOff = up.reqs, up.received, up.complete, up.errs, up.cutOff
		up.mu.Unlock()
	}()
	var conn net.Conn
	if vt == nil {
		conn, err = net.DialTimeout("tcp", g.addr, 10*time.Second)
	} else {
		conn, err = tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", g.addr, vt.client)
	}
	if err != nil {
		return rec, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(deadline))
	talk(conn)
	return rec, nil
}

// answerThroughGateway writes in to a gateway of its own (see
// throughGateway), half-closes after it if halfClose, and reads one final
// answer to a request with method. It returns the answer's status and
// what the upstream received; no answer, or a gateway that does not stop,
// fails t.
func answerThroughGateway(t *testing.T, opts Options, in string, halfClose bool, method string) (int, upstreamRecord) {
	t.Helper()
	var resp *http.Response
	var rerr error
	rec, err := throughGateway(opts, 5*time.Second, func(conn net.Conn) {
		if _, rerr = conn.Write([]byte(in)); rerr != nil {
			return
		}
		if halfClose {
			_ = conn.(*net.TCPConn).CloseWrite()
		}
		resp, rerr = readFinalResponse(bufio.NewReader(conn), method)
	})
	if err != nil {
		t.Fatal(err)
	}
	if rec.stopErr != nil {
		t.Errorf("stopping the gateway: %v", rec.stopErr)
	}
	if rerr != nil {
		t.Fatalf("no answer: %v", rerr)
	}
	resp.Body.Close()
	return resp.StatusCode, rec
}

// runBounded runs fn(i) for i in [0, n) on at most limit goroutines and
// returns when all are done.
func runBounded(n, limit int, fn func(i int)) {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(i)
		}()
	}
	wg.Wait()
}
