package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/testserve"
	"github.com/graygate/graygate/internal/upstream"
)

// staticDecider always returns the same decision.
type staticDecider router.Decision

func (s staticDecider) DecideInto(_ attr.Request, d *router.Decision) { *d = router.Decision(s) }

type deciderFunc func(attr.Request) router.Decision

func (f deciderFunc) DecideInto(r attr.Request, d *router.Decision) { *d = f(r) }

// echo is what echoBackend answers: the request as the backend saw it.
type echo struct {
	Name    string      `json:"name"`
	Method  string      `json:"method"`
	Host    string      `json:"host"`
	URI     string      `json:"uri"`
	Header  http.Header `json:"header"`
	BodyLen int64       `json:"body_len"`
	Body    string      `json:"body"`
	TE      []string    `json:"te"`
	CL      int64       `json:"cl"`
}

// echoBackend starts a backend that answers with an echo naming itself and
// sets X-Backend to its name. It counts the requests it saw.
func echoBackend(t testing.TB, name string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		rest, _ := io.Copy(io.Discard, r.Body)
		e := echo{
			Name: name, Method: r.Method, Host: r.Host, URI: r.RequestURI, Header: r.Header,
			BodyLen: int64(len(body)) + rest, Body: string(body), TE: r.TransferEncoding, CL: r.ContentLength,
		}
		w.Header().Set("X-Backend", name)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(e)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// addrOf is the host:port of a test server.
func addrOf(srv *httptest.Server) string { return srv.Listener.Addr().String() }

func poolOf(name string, addrs ...string) *upstream.Pool {
	insts := make([]*upstream.Instance, len(addrs))
	for i, a := range addrs {
		insts[i] = &upstream.Instance{Addr: a}
	}
	return upstream.NewPool(name, insts)
}

// listenLoopback listens on a free loopback port.
func listenLoopback(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// startProxy serves a new Proxy on a loopback port and shuts it down when
// the test ends.
func startProxy(t testing.TB, opts Options, d Decider) (*Proxy, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startProxyOn(t, ln, opts, d)
}

// startProxyOn serves a new Proxy on ln and shuts it down when the test
// ends.
func startProxyOn(t testing.TB, ln net.Listener, opts Options, d Decider) (*Proxy, string) {
	t.Helper()
	p := New(opts, d, nil)
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Shutdown")
		}
	})
	return p, ln.Addr().String()
}

// httpClient is a client with its own transport (no DefaultClient).
func httpClient(t testing.TB) *http.Client {
	tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// fetch sends method url on c, with body unless it is "", and returns the
// status and the whole body; a transport error fails the test.
func fetch(t testing.TB, c *http.Client, method, url, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func getEcho(t testing.TB, c *http.Client, req *http.Request) (*http.Response, echo) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	var e echo
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("decoding echo %q: %v", body, err)
		}
	}
	return resp, e
}

func newReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }

// dialBounded opens a raw client connection to addr whose reads and
// writes give up after within, so a test that hangs fails instead. The
// caller closes it.
func dialBounded(t testing.TB, addr string, within time.Duration) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(within))
	return c
}

// rawExchange writes raw bytes to addr and reads one response. method tells
// http.ReadResponse whether a body follows (HEAD has none).
func rawExchange(t testing.TB, addr, method, raw string) (*http.Response, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatalf("write: %v", err)
	}
	br := bufio.NewReader(c)
	var resp *http.Response
	for {
		resp, err = http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("read response to %q: %v", raw, err)
		}
		// Skip interim responses (100 Continue), as a client does.
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, string(body)
}

// rawBackend is a backend that parses requests with net/http's reader and
// answers with whatever respond writes to the connection, for tests that
// need exact control of the response bytes.
func rawBackend(t testing.TB, respond func(req *http.Request, w *bufio.Writer)) string {
	t.Helper()
	return testserve.Conns(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		bw := bufio.NewWriter(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			respond(req, bw)
			if bw.Flush() != nil {
				return
			}
		}
	})
}

// doneRecorder collects OnDone calls.
type doneRecorder struct {
	ch chan doneCall
}

type doneCall struct {
	rule, group, tag, idValue  string
	degraded, target, intended string // pool names
	status                     int
	bytes                      int64
	elapsed                    time.Duration
}

func newDoneRecorder() *doneRecorder { return &doneRecorder{ch: make(chan doneCall, 1024)} }

func (r *doneRecorder) onDone(done *Done) {
	d, status, elapsed, bytesOut := done.Decision, done.Status, done.Elapsed, done.BytesOut
	c := doneCall{
		rule: strings.Clone(d.Rule), group: strings.Clone(d.Group), tag: strings.Clone(d.Tag),
		idValue: strings.Clone(d.Identity.Value), degraded: d.Degraded, status: status, bytes: bytesOut, elapsed: elapsed,
	}
	if d.Target != nil {
		c.target = d.Target.Name
	}
	if d.Intended != nil {
		c.intended = d.Intended.Name
	}
	select {
	case r.ch <- c:
	default:
	}
}

func (r *doneRecorder) next(t testing.TB, within time.Duration) doneCall {
	t.Helper()
	select {
	case c := <-r.ch:
		return c
	case <-time.After(within):
		t.Fatalf("no OnDone call within %v", within)
		return doneCall{}
	}
}

// errBody checks that an error body the gateway wrote ends with the
// request's id, as X-Request-Id says it, and returns the body without it.
func errBody(t testing.TB, resp *http.Response, body string) string {
	t.Helper()
	id := resp.Header.Get("X-Request-Id")
	suffix := " (request id " + id + ")\n"
	if id == "" || !strings.HasSuffix(body, suffix) {
		t.Errorf("error body %q does not end with its request id %q", body, id)
		return body
	}
	return strings.TrimSuffix(body, suffix) + "\n"
}

// dropExchange ends an exchange a test built by hand (getExchange) and
// never served, so that Shutdown does not wait for it to finish.
func dropExchange(p *Proxy, ex *exchange) {
	ex.reset()
	p.live.Add(-1)
}
