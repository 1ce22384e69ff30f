package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/certs/certstest"
	"github.com/graygate/graygate/internal/identity"
	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/testport"
	"github.com/graygate/graygate/internal/testserve"
	"github.com/graygate/graygate/internal/upstream"
)

// gatewayTLS is a test CA and a server certificate for the gateway.
type gatewayTLS struct {
	ca   *certstest.CA
	conf *tls.Config
}

func newGatewayTLS(t testing.TB) gatewayTLS {
	t.Helper()
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "gw")
	pair := ca.Server("gw.pem", "gw.key", "gw.test", "127.0.0.1")
	cert := pair.TLSCertificate(t)
	return gatewayTLS{ca: ca, conf: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}}
}

// startProxyWith serves a new Proxy with prot on a loopback port.
func startProxyWith(t testing.TB, opts Options, d Decider, prot listener.Protocols) (*Proxy, string) {
	t.Helper()
	ln := listenLoopback(t)
	p := New(opts, d, nil)
	done := make(chan error, 1)
	go func() { done <- p.ServeWith(ln, prot) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("ServeWith did not return after Shutdown")
		}
	})
	return p, ln.Addr().String()
}

// h2cClient speaks HTTP/2 with prior knowledge.
func h2cClient(t testing.TB) *http.Client {
	tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// h2Client speaks HTTP/2 over TLS, trusting pool.
func h2Client(t testing.TB, pool *x509.CertPool) *http.Client {
	tr := &http2.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "gw.test"}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// h2cBackend is an echo backend that speaks HTTP/1.1 and h2c.
func h2cBackend(t testing.TB, name string) *httptest.Server {
	return h2cServer(t, echoHandler(name))
}

// h2cServer serves h on loopback over HTTP/1.1 and h2c (prior knowledge)
// until the test ends.
func h2cServer(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// h2Backend is an echo backend that speaks HTTP/2 over TLS.
func h2Backend(t testing.TB, name string) *httptest.Server {
	srv := httptest.NewUnstartedServer(echoHandler(name))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func echoHandler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		e := echo{Name: name, Method: r.Method, Host: r.Host, URI: r.RequestURI, Header: r.Header,
			BodyLen: int64(len(body)), Body: string(body), TE: r.TransferEncoding, CL: r.ContentLength}
		w.Header().Set("X-Backend", name)
		w.Header().Set("X-Proto", r.Proto)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Connection", "X-Hop")
		w.Header().Set("X-Hop", "hop-by-hop")
		w.Header().Set("X-Gray-Group", "forged")
		w.Header().Set("Trailer", "X-Sum")
		_ = json.NewEncoder(w).Encode(e)
		w.Header().Set("X-Sum", fmt.Sprint(len(body)))
	})
}

func decodeEcho(t testing.TB, resp *http.Response) echo {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var e echo
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("decoding %q: %v", b, err)
	}
	return e
}

// TestH2Paths drives every client protocol against every upstream
// protocol through the real listeners and checks that the same policy
// applied: the forwarded fields, the decision headers, the hop-by-hop
// removal both ways, Via, and trailers.
func TestH2Paths(t *testing.T) {
	gw := newGatewayTLS(t)
	h1 := h2cBackend(t, "h1") // HTTP/1.1 unless asked for h2c
	h2c := h2cBackend(t, "h2c")
	h2 := h2Backend(t, "h2")
	h2roots := x509.NewCertPool()
	h2roots.AddCert(h2.Certificate())

	pools := map[string]*upstream.Pool{
		"http1": poolOf("h1", addrOf(h1)),
		"h2c":   poolOf("h2c", addrOf(h2c)),
		"h2":    poolOf("h2", addrOf(h2)),
	}
	pools["h2c"].Protocol = upstream.H2C
	pools["h2"].Protocol = upstream.H2
	pools["h2"].TLS = &tls.Config{RootCAs: h2roots, ServerName: "example.com"}
	pools["h2"].TLSKey = "test"
	d := deciderFunc(func(r attr.Request) router.Decision {
		p := pools[strings.Trim(r.Path(), "/")]
		return router.Decision{Rule: "r", Group: "gray", Tag: "gray-tag", Target: p}
	})

	_, tlsAddr := startProxyWith(t, Options{}, d, listener.Protocols{TLS: gw.conf})
	_, clearAddr := startProxyWith(t, Options{}, d, listener.Protocols{H2C: true})

	clients := []struct {
		name, base, proto, xfp string
		c                      *http.Client
	}{
		{"h2 over tls", "https://" + tlsAddr, "HTTP/2.0", "https", h2Client(t, gw.ca.Pool)},
		{"h2c", "http://" + clearAddr, "HTTP/2.0", "http", h2cClient(t)},
		{"http/1.1 over tls", "https://" + tlsAddr, "HTTP/1.1", "https", &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: gw.ca.Pool, ServerName: "gw.test"}}}},
		{"http/1.1", "http://" + clearAddr, "HTTP/1.1", "http", httpClient(t)},
	}
	for _, cl := range clients {
		for _, up := range []string{"http1", "h2c", "h2"} {
			t.Run(cl.name+" to "+up, func(t *testing.T) {
				req, _ := http.NewRequest("POST", cl.base+"/"+up+"?q=1", strings.NewReader("hello"))
				req.Header.Set("X-Gray-Tag", "forged")
				req.Header.Set("X-Forwarded-For", "10.9.9.9")
				req.Header.Set("Te", "trailers")
				resp, err := cl.c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				if resp.Proto != cl.proto {
					t.Errorf("client spoke %s, want %s", resp.Proto, cl.proto)
				}
				e := decodeEcho(t, resp)
				if resp.StatusCode != 200 || e.Name != pools[up].Instances[0].Addr && e.Name != map[string]string{"http1": "h1", "h2c": "h2c", "h2": "h2"}[up] {
					t.Fatalf("status %d from %q", resp.StatusCode, e.Name)
				}
				wantUp := map[string]string{"http1": "HTTP/1.1", "h2c": "HTTP/2.0", "h2": "HTTP/2.0"}[up]
				if got := resp.Header.Get("X-Proto"); got != wantUp {
					t.Errorf("upstream spoke %s, want %s", got, wantUp)
				}
				checks := []struct{ what, got, want string }{
					{"body", e.Body, "hello"},
					{"uri", e.URI, "/" + up + "?q=1"},
					{"X-Gray-Tag", e.Header.Get("X-Gray-Tag"), "gray-tag"},
					{"X-Forwarded-For", e.Header.Get("X-Forwarded-For"), "127.0.0.1"},
					{"X-Forwarded-Proto", e.Header.Get("X-Forwarded-Proto"), cl.xfp},
					{"X-Request-Id up", e.Header.Get("X-Request-Id"), resp.Header.Get("X-Request-Id")},
					{"X-Gray-Rule", resp.Header.Get("X-Gray-Rule"), "r"},
					{"X-Gray-Group", strings.Join(resp.Header.Values("X-Gray-Group"), ","), "gray"},
					// HTTP/2 has no Connection header: an h2 upstream
					// cannot name a field hop-by-hop.
					{"X-Hop", resp.Header.Get("X-Hop"), map[string]string{"http1": ""}[up] + map[string]string{"h2c": "hop-by-hop", "h2": "hop-by-hop"}[up]},
					{"trailer", resp.Trailer.Get("X-Sum"), "5"},
				}
				for _, c := range checks {
					if c.got != c.want {
						t.Errorf("%s = %q, want %q", c.what, c.got, c.want)
					}
				}
				if resp.Header.Get("X-Request-Id") == "" {
					t.Error("no X-Request-Id on the response")
				}
				viaUp := "1.1 graygate"
				if cl.proto == "HTTP/2.0" {
					viaUp = "2 graygate"
				}
				if got := e.Header.Get("Via"); got != viaUp {
					t.Errorf("Via upstream = %q, want %q", got, viaUp)
				}
				if up != "http1" && e.Header.Get("Te") != "trailers" {
					t.Errorf("TE upstream = %q, want trailers", e.Header.Get("Te"))
				}
			})
		}
	}
}

// TestH2FallBack: an HTTP/2 request to a gray pool whose instance refuses
// connections is answered by stable, marked as degraded; with no stable it
// gets the error mapping, gRPC-shaped for a gRPC client.
func TestH2FallBack(t *testing.T) {
	stable := h2cBackend(t, "stable")
	deadAddr := testport.Refused(t)
	gray, st := poolOf("gray", deadAddr), poolOf("stable", addrOf(stable))
	fallback := true
	d := deciderFunc(func(r attr.Request) router.Decision {
		dec := router.Decision{Rule: "g", Group: "gray", Target: gray, Tag: "gray", StableTag: "stable"}
		if fallback {
			dec.Stable = st
		} else {
			// An anonymous visitor: the answer also sets the id's cookie,
			// which is built where the error body was (scratch).
			dec.Identity = identity.ID{Value: "0123456789abcdef0123456789abcdef", Source: identity.SourceAnonymousCookie, Issued: true, Cookie: "gg_uid"}
		}
		return dec
	})
	_, addr := startProxyWith(t, Options{}, d, listener.Protocols{H2C: true})
	c := h2cClient(t)
	resp, err := c.Post("http://"+addr+"/x", "text/plain", strings.NewReader("body"))
	if err != nil {
		t.Fatal(err)
	}
	e := decodeEcho(t, resp)
	if e.Name != "stable" || resp.Header.Get("X-Gray-Degraded") != "fallback" || resp.Header.Get("X-Gray-Group") != "stable" || e.Body != "body" {
		t.Errorf("fallback answered by %q (degraded %q, group %q, body %q)", e.Name, resp.Header.Get("X-Gray-Degraded"), resp.Header.Get("X-Gray-Group"), e.Body)
	}
	if got := e.Header.Get("X-Gray-Tag"); got != "stable" {
		t.Errorf("the replay carries X-Gray-Tag %q, want stable's", got)
	}

	fallback = false
	resp, err = c.Get("http://" + addr + "/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.HasPrefix(string(body), `graygate: upstream "gray" unreachable (request id `) ||
		!strings.HasPrefix(resp.Header.Get("Set-Cookie"), "gg_uid=0123456789abcdef0123456789abcdef;") {
		t.Errorf("no fallback: %d %q (Set-Cookie %q), want 502 naming the pool, and the cookie", resp.StatusCode, body, resp.Header.Get("Set-Cookie"))
	}

	req, _ := http.NewRequest("POST", "http://"+addr+"/pkg.Svc/Call", strings.NewReader("\x00\x00\x00\x00\x00"))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "14" || len(body) != 0 ||
		!strings.Contains(resp.Header.Get("Grpc-Message"), `upstream "gray" unreachable`) || resp.Header.Get("X-Gray-Group") != "gray" {
		t.Errorf("gRPC error: %d grpc-status %q grpc-message %q group %q body %q; want a trailers-only UNAVAILABLE with the decision headers",
			resp.StatusCode, resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message"), resp.Header.Get("X-Gray-Group"), body)
	}
}

// TestH1OverTLSGuarded: the listener's Guard stands in front of HTTP/1.1
// over TLS as in clear.
func TestH1OverTLSGuarded(t *testing.T) {
	gw := newGatewayTLS(t)
	backend, n := echoBackend(t, "stable")
	_, addr := startProxyWith(t, Options{}, staticDecider{Target: poolOf("stable", addrOf(backend))}, listener.Protocols{TLS: gw.conf})
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: gw.ca.Pool, ServerName: "gw.test", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "both Content-Length and Transfer-Encoding") || n.Load() != 0 {
		t.Errorf("smuggling attempt over TLS: %d %q, backend saw %d requests", resp.StatusCode, body, n.Load())
	}
}

// TestH2StalledReaderIsBounded: an HTTP/2 client that gives a stream no
// flow-control window (SETTINGS_INITIAL_WINDOW_SIZE 0, no WINDOW_UPDATE)
// never lets a byte of the body out; nothing waits on the socket, so the
// connection's write timeout cannot see it. The stream's write deadline
// (WriteTimeout, client_write_timeout) resets the stream instead of
// holding it, and its upstream connection, for as long as the client
// likes.
func TestH2StalledReaderIsBounded(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 4<<20)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(big) }))
	t.Cleanup(backend.Close)
	const wto = 300 * time.Millisecond
	d := staticDecider{Group: "stable", Target: poolOf("stable", addrOf(backend))}
	_, addr := startProxyWith(t, Options{WriteTimeout: wto}, d, listener.Protocols{H2C: true})
	c := dialBounded(t, addr, 10*time.Second)
	defer c.Close()
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "stall.test"}, {":path", "/big"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	start := time.Now()
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no RST_STREAM after %v: %v", time.Since(start), err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = fr.WritePing(true, f.Data)
			}
		case *http2.DataFrame:
			if len(f.Data()) > 0 {
				t.Fatalf("DATA with no window: %d bytes", len(f.Data()))
			}
		case *http2.RSTStreamFrame:
			if took := time.Since(start); f.StreamID != 1 || took < wto {
				t.Errorf("RST_STREAM on stream %d after %v, want stream 1 after the %v write timeout", f.StreamID, took, wto)
			}
			return
		}
	}
}

// TestH1ClientKeepsAliveToH2Pool: an HTTP/1.1 client of an h2c pool keeps
// its connection, one request after another and pipelined, as toward an
// http1 pool (adding the Date took a header without a length for one
// delimited by the close).
func TestH1ClientKeepsAliveToH2Pool(t *testing.T) {
	b := h2cBackend(t, "h2c")
	pool := poolOf("h2c", addrOf(b))
	pool.Protocol = upstream.H2C
	_, addr := startProxyWith(t, Options{}, staticDecider{Group: "g", Target: pool}, listener.Protocols{H2C: true})
	c := dialBounded(t, addr, 5*time.Second)
	defer c.Close()
	br := bufio.NewReader(c)
	read := func(i int) {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Close || err != nil {
			t.Fatalf("answer %d: %d, close %v, body %v; want 200 on a kept connection", i, resp.StatusCode, resp.Close, err)
		}
	}
	for i := range 2 {
		fmt.Fprint(c, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
		read(i)
	}
	fmt.Fprint(c, "GET /x HTTP/1.1\r\nHost: a\r\n\r\nGET /y HTTP/1.1\r\nHost: a\r\n\r\n")
	read(2)
	read(3)
}

// TestH1ClientInterimFromH2Pool: an HTTP/1.1 client of an h2c pool gets
// the upstream's interim responses as it gets an http1 pool's
// (TestInterimResponses): each as soon as it is sent, before the final
// response, also behind a pipelined request; with its Link and without
// the gateway's own fields, which the final response has. The connection
// is kept after such a response, and a request pipelined behind it is
// answered, as after an http1 pool's (it closed, and the request behind
// went unanswered, found by a soak run with pipelining clients). An upstream
// that breaks off after a 103, or sends more than maxInterimResponses,
// gets the client the gateway's 502 after the interim responses it
// forwarded. An HTTP/1.0 client gets none.
func TestH1ClientInterimFromH2Pool(t *testing.T) {
	release := make(chan struct{}, 4)
	b := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		interim := func(code int, link string) {
			if link != "" {
				w.Header().Set("Link", link)
				w.Header().Set("X-Gray-Group", "forged")
			}
			w.WriteHeader(code)
			if r.Context().Err() != nil {
				// The gateway reset the stream (after too many interim
				// responses): WriteHeader returned without waiting for
				// its frame, which may still be reading the header map.
				// net/http cancels the context before it lets it return.
				panic(http.ErrAbortHandler)
			}
			w.Header().Del("Link")
			w.Header().Del("X-Gray-Group")
		}
		switch r.URL.Path {
		case "/hints":
			interim(http.StatusEarlyHints, "</a.css>; rel=preload")
			// The rest waits until the client has the 103.
			select {
			case <-release:
			case <-time.After(5 * time.Second):
			}
			interim(http.StatusProcessing, "")
		case "/hints-then-break":
			interim(http.StatusEarlyHints, "</a.css>; rel=preload")
			panic(http.ErrAbortHandler)
		case "/too-many":
			for range maxInterimResponses + 5 {
				interim(http.StatusEarlyHints, "</a.css>; rel=preload")
			}
		}
		_, _ = io.WriteString(w, "ok")
	}))
	pool := poolOf("h2c", addrOf(b))
	pool.Protocol = upstream.H2C
	_, addr := startProxy(t, Options{}, staticDecider{Group: "g", Target: pool})
	read := func(t *testing.T, br *bufio.Reader) (*http.Response, string) {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%d: reading the body: %v", resp.StatusCode, err)
		}
		return resp, string(body)
	}
	// answers reads the interim responses and the final answer, which
	// keeps the connection. It releases the held answer after a 103 with
	// the hint's Link and none of the gateway's fields, and returns the
	// statuses and the last answer.
	answers := func(t *testing.T, br *bufio.Reader) ([]int, *http.Response, string) {
		t.Helper()
		var got []int
		for {
			resp, body := read(t, br)
			got = append(got, resp.StatusCode)
			if resp.StatusCode == http.StatusEarlyHints {
				if l, g := resp.Header.Get("Link"), resp.Header.Get("X-Gray-Group"); l != "</a.css>; rel=preload" || g != "" {
					t.Errorf("103 with Link %q, X-Gray-Group %q; want the hint's Link and no X-Gray-Group", l, g)
				}
				select { // one held answer at most is waiting for it
				case release <- struct{}{}:
				default:
				}
			}
			if resp.StatusCode >= 200 {
				if resp.Close {
					t.Errorf("%d after interim responses with Connection: close; want the connection kept", resp.StatusCode)
				}
				return got, resp, body
			}
		}
	}
	drain := func() {
		for len(release) > 0 {
			<-release
		}
	}

	t.Run("before the final response", func(t *testing.T) {
		defer drain()
		c := dialRaw(t, addr)
		fmt.Fprint(c, "GET /hints HTTP/1.1\r\nHost: a\r\n\r\n")
		br := bufio.NewReader(c)
		got, resp, body := answers(t, br)
		if fmt.Sprint(got) != "[103 102 200]" || body != "ok" {
			t.Errorf("answers %v, final body %q; want [103 102 200] in that order, \"ok\"", got, body)
		}
		keptAfterInterim(t, c, br, "ok")
		if resp.Header.Get("Link") != "" || resp.Header.Get("X-Gray-Group") != "g" || resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("final answer with Link %q, X-Gray-Group %q, X-Request-Id %q; want no Link and the gateway's fields",
				resp.Header.Get("Link"), resp.Header.Get("X-Gray-Group"), resp.Header.Get("X-Request-Id"))
		}
	})
	t.Run("behind a pipelined request", func(t *testing.T) {
		defer drain()
		c := dialRaw(t, addr)
		fmt.Fprint(c, "GET /first HTTP/1.1\r\nHost: a\r\n\r\nGET /hints HTTP/1.1\r\nHost: a\r\n\r\nGET /third HTTP/1.1\r\nHost: a\r\n\r\n")
		br := bufio.NewReader(c)
		first, body := read(t, br)
		if first.StatusCode != 200 || body != "ok" || first.Close {
			t.Errorf("first answer %d %q, close %v; want 200 \"ok\" on a kept connection", first.StatusCode, body, first.Close)
		}
		if got, _, body := answers(t, br); fmt.Sprint(got) != "[103 102 200]" || body != "ok" {
			t.Errorf("then %v, final body %q; want [103 102 200], \"ok\"", got, body)
		}
		if third, body := read(t, br); third.StatusCode != 200 || body != "ok" {
			t.Errorf("the request pipelined behind: %d %q, want 200 \"ok\"", third.StatusCode, body)
		}
		keptAfterInterim(t, c, br, "ok")
	})
	t.Run("the upstream fails after them", func(t *testing.T) {
		for _, tt := range []struct {
			path string
			want int // interim responses before the 502
		}{
			{"/hints-then-break", 1},
			{"/too-many", maxInterimResponses},
		} {
			func() {
				defer drain()
				c := dialRaw(t, addr)
				fmt.Fprint(c, "GET "+tt.path+" HTTP/1.1\r\nHost: a\r\n\r\n")
				br := bufio.NewReader(c)
				got, resp, body := answers(t, br)
				keptAfterInterim(t, c, br, "ok")
				id := resp.Header.Get("X-Request-Id")
				if len(got) != tt.want+1 || resp.StatusCode != http.StatusBadGateway || id == "" || !strings.Contains(body, id) || resp.Header.Get("X-Gray-Group") != "g" {
					t.Errorf("%s: %d interim responses, then %d with X-Request-Id %q, body %q; want %d, then the gateway's 502 with its request id",
						tt.path, len(got)-1, resp.StatusCode, id, body, tt.want)
				}
			}()
		}
	})
	t.Run("none to an HTTP/1.0 client", func(t *testing.T) {
		defer drain()
		release <- struct{}{}
		c := dialRaw(t, addr)
		fmt.Fprint(c, "GET /hints HTTP/1.0\r\n\r\n")
		resp, body := read(t, bufio.NewReader(c))
		if resp.StatusCode != 200 || body != "ok" {
			t.Errorf("HTTP/1.0 client got %d %q first, want the final 200 \"ok\"", resp.StatusCode, body)
		}
	})
}

// TestUpstreamTrailerLines: trailer sections an HTTP/1.1 upstream writes
// by hand, with names net/http's reader takes though they are not tokens,
// and trailers announced (a Trailer field) but not sent. Each answer
// reaches an HTTP/1.1 and an h2c client whole, and its stream ends: an
// "X T" trailer, and an announced trailer with no field (as Go's server
// writes when a handler announces one and never sets it), once left an
// h2c client waiting for an end that x/net/http2's server never wrote (a
// trailer section with no field it could encode). A field that is not a
// token is not passed on. A Trailer field with empty list elements is
// taken.
func TestUpstreamTrailerLines(t *testing.T) {
	tests := []struct {
		name, announce, lines string
		want                  map[string]string // trailer values either client gets
	}{
		{"space in the name", "", "X T: a\r\n", map[string]string{"X T": ""}},
		// RFC 9112 section 5.1: a proxy removes it; the HTTP/1.1 codec
		// did, and an h2c client lost the field.
		{"space before the colon", "", "X-T : a\r\nX-U  : b\r\n", map[string]string{"X-T": "a", "X-U": "b"}},
		{"space in the name, and a good one", "", "X T: a\r\nX-Ok: 1\r\n", map[string]string{"X T": "", "X-Ok": "1"}},
		{"obs-fold", "", "X-T: a\r\n b\r\n", map[string]string{"X-T": "a b"}},
		{"underscore", "", "X_T: 1\r\n", map[string]string{"X_T": ""}},
		{"announced, none sent", "X-T", "", map[string]string{"X-T": ""}},
		{"announced, another sent", "X-T", "X-U: 1\r\n", map[string]string{"X-T": "", "X-U": "1"}},
		{"announced, sent empty", "X-T", "X-T:\r\n", map[string]string{"X-T": ""}},
		// Empty list elements, which a recipient ignores (RFC 9110
		// section 5.6.1.2): fasthttp's parser refused the head, and an
		// HTTP/1.1 client got 502 where an h2c client got the answer.
		{"an empty element first", ", X-T", "X-T: 1\r\n", map[string]string{"X-T": "1"}},
		{"an empty element between", "X-T,,X-U", "X-T: 1\r\nX-U: 2\r\n", map[string]string{"X-T": "1", "X-U": "2"}},
		{"a blank element between, and one last", "X-T, \t,X-U, ", "X-U: 2\r\n", map[string]string{"X-U": "2"}},
		{"only commas", " , ,", "X-T: 1\r\n", map[string]string{"X-T": "1"}},
	}
	var reply atomic.Pointer[string]
	up := testserve.Conns(t, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
			_, _ = io.WriteString(c, *reply.Load())
		}
		_ = c.Close()
	})
	_, addr := startProxyWith(t, Options{}, staticDecider{Rule: "r", Group: "stable", Target: poolOf("stable", up)}, listener.Protocols{H2C: true})
	clients := map[string]*http.Client{"http/1.1": httpClient(t), "h2c": h2cClient(t)}
	for _, tt := range tests {
		for _, cl := range []string{"http/1.1", "h2c"} {
			t.Run(tt.name+" to "+cl, func(t *testing.T) {
				raw := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
				if tt.announce != "" {
					raw += "Trailer: " + tt.announce + "\r\n"
				}
				raw += "\r\n2\r\nok\r\n0\r\n" + tt.lines + "\r\n"
				reply.Store(&raw)
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/", nil)
				resp, err := clients[cl].Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || string(body) != "ok" {
					t.Fatalf("%d %q %v, want 200 \"ok\" and the end of the stream", resp.StatusCode, body, err)
				}
				if ct, ok := resp.Header["Content-Type"]; ok {
					// The upstream sent none (a head read twice
					// once got fasthttp's default).
					t.Errorf("Content-Type %q, want none", ct)
				}
				for k, want := range tt.want {
					if got := resp.Trailer.Values(k); strings.Join(got, ",") != want {
						t.Errorf("trailer %q = %q, want %q", k, got, want)
					}
				}
			})
		}
	}
}

// TestAnnouncedTrailerNotSent: a Go backend announces a trailer and never
// sets it (net/http then sends none on HTTP/1.1, and no trailer block on
// HTTP/2). Through an http1 and an h2c pool, both clients get the body
// and the end of it, without the trailer: an h2c client once waited for
// an end that never came, since both of Go's readers list an announced
// trailer with no value, and x/net/http2's server then wrote an empty
// trailer section, that is, nothing.
func TestAnnouncedTrailerNotSent(t *testing.T) {
	backend := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-T")
		_, _ = io.WriteString(w, "body")
	}))
	pools := map[string]*upstream.Pool{"http1": poolOf("h1", addrOf(backend)), "h2c": poolOf("h2c", addrOf(backend))}
	pools["h2c"].Protocol = upstream.H2C
	d := deciderFunc(func(r attr.Request) router.Decision {
		return router.Decision{Rule: "r", Group: "stable", Target: pools[strings.Trim(r.Path(), "/")]}
	})
	_, addr := startProxyWith(t, Options{}, d, listener.Protocols{H2C: true})
	clients := map[string]*http.Client{"http/1.1": httpClient(t), "h2c": h2cClient(t)}
	for _, cl := range []string{"http/1.1", "h2c"} {
		for _, up := range []string{"http1", "h2c"} {
			t.Run(cl+" from "+up, func(t *testing.T) {
				resp := fetchTrailed(t, clients[cl], "GET", "http://"+addr+"/"+up, "")
				if v := resp.Trailer.Values("X-T"); len(v) != 0 {
					t.Errorf("trailer X-T = %q, want none", v)
				}
			})
		}
	}
}

// TestBodilessAnswers: answers without a body, from an http1 and an h2c
// pool, to an HTTP/1.1 and an h2c client. A 204 or 304 that carries a
// Content-Length (as Go's HTTP/2 server sends it) used to reset an h2c
// client's stream from an h2c pool: the gateway read a body that x/net's
// transport fails every read of (and a 204's trailers, which come after
// an empty body, must still be read). A HEAD's answer from an h2c pool used to
// reach an HTTP/1.1 client as "Content-Length: 0", whatever the upstream
// said; it keeps the upstream's length, or with none is framed as the
// GET's answer would be (chunked), as from an http1 pool.
func TestBodilessAnswers(t *testing.T) {
	backend := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch path.Base(r.URL.Path) {
		case "204", "304":
			w.Header().Set("Content-Length", "5")
			w.WriteHeader(map[string]int{"204": 204, "304": 304}[path.Base(r.URL.Path)])
		case "204t":
			w.Header().Set(http.TrailerPrefix+"X-T", "t")
			w.WriteHeader(204)
		case "len":
			w.Header().Set("Content-Length", "10")
			_, _ = io.WriteString(w, "0123456789")
		case "stream":
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "abc")
		}
	}))
	pools := map[string]*upstream.Pool{"http1": poolOf("h1", addrOf(backend)), "h2c": poolOf("h2c", addrOf(backend))}
	pools["h2c"].Protocol = upstream.H2C
	d := deciderFunc(func(r attr.Request) router.Decision {
		return router.Decision{Rule: "r", Group: "stable", Target: pools[strings.Split(r.Path(), "/")[1]]}
	})
	_, addr := startProxyWith(t, Options{}, d, listener.Protocols{H2C: true})
	clients := map[string]*http.Client{"http/1.1": httpClient(t), "h2c": h2cClient(t)}
	tests := []struct {
		method, path string
		status       int
		length       int64 // as Go's client reads it
	}{
		{"GET", "204", 204, 0},
		{"GET", "304", 304, 0},
		{"GET", "204t", 204, -2}, // -2: Go's HTTP/2 client reads -1 when trailers follow, 0 elsewhere
		{"HEAD", "len", 200, 10},
		{"HEAD", "stream", 200, -1},
	}
	for _, tt := range tests {
		for _, cl := range []string{"http/1.1", "h2c"} {
			for _, up := range []string{"http1", "h2c"} {
				t.Run(tt.method+" "+tt.path+" to "+cl+" from "+up, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					defer cancel()
					req, _ := http.NewRequestWithContext(ctx, tt.method, "http://"+addr+"/"+up+"/"+tt.path, nil)
					resp, err := clients[cl].Do(req)
					if err != nil {
						t.Fatal(err)
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil || resp.StatusCode != tt.status || len(body) != 0 {
						t.Fatalf("%d %q %v, want %d with no body", resp.StatusCode, body, err, tt.status)
					}
					if tt.length != -2 && resp.ContentLength != tt.length {
						t.Errorf("length %d (Content-Length %q), want %d", resp.ContentLength, resp.Header.Values("Content-Length"), tt.length)
					}
					// Over HTTP/2 a 204 can end with trailers, which both
					// sides of an h2c pool carry.
					if tt.path == "204t" && cl == "h2c" && up == "h2c" && resp.Trailer.Get("X-T") != "t" {
						t.Errorf("trailers %v, want X-T: t", resp.Trailer)
					}
				})
			}
		}
	}
	// An HTTP/1.0 client is never sent chunked coding: a HEAD's answer
	// without a length has none, and the connection is not left waiting.
	for _, up := range []string{"http1", "h2c"} {
		t.Run("HTTP/1.0 HEAD stream from "+up, func(t *testing.T) {
			c := dialRaw(t, addr)
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			fmt.Fprintf(c, "HEAD /%s/stream HTTP/1.0\r\n\r\n", up)
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatalf("%v after %q", err, got)
			}
			head := strings.ToLower(string(got))
			if !strings.HasPrefix(head, "http/1.1 200 ") || strings.Contains(head, "transfer-encoding") || strings.Contains(head, "content-length") || !strings.HasSuffix(head, "\r\n\r\n") {
				t.Errorf("answer %q, want a 200 head with no length and no chunked coding, and no body", got)
			}
		})
	}
}

// fetchTrailed sends method to url on c, with body and TE: trailers, and
// reads the answer to its end (within 5 s), which must be 200 "body".
func fetchTrailed(t *testing.T, c *http.Client, method, url, body string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	req.Header.Set("Te", "trailers")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || string(got) != "body" {
		t.Fatalf("%d %q %v, want 200 \"body\" and the end of the stream", resp.StatusCode, got, err)
	}
	return resp
}

// TestTrailersFiltered: an upstream cannot forge the gateway's fields in
// its trailers (the decision headers, X-Request-Id, Via, a reported
// metric field) nor relay hop-by-hop ones, on every path: HTTP/1.1 and
// HTTP/2 clients, http1 and h2c pools, through the real listener. It
// announces some of them (an HTTP/1.1 client saw the gateway's own
// X-Gray-Rule moved into the trailers and overwritten) and sends others
// unannounced; its own trailer field comes through.
func TestTrailersFiltered(t *testing.T) {
	forged := []string{"X-Gray-Rule", "X-Gray-Group", "X-Gray-Degraded", "X-Request-Id", "Via", "X-Gray-Metric-Revenue", "Upgrade", "X_Sum"}
	backend := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Trailer", "X-Gray-Rule, X-Request-Id, Via, X-Gray-Metric-Revenue, X-Sum")
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "body")
		for _, k := range forged[:4] {
			w.Header().Set(k, "forged")
		}
		w.Header().Set("Via", "1.1 forged")
		w.Header().Set("X-Gray-Metric-Revenue", "12.5")
		w.Header().Set(http.TrailerPrefix+"X-Gray-Group", "forged")
		w.Header().Set(http.TrailerPrefix+"X-Gray-Degraded", "forged")
		w.Header().Set(http.TrailerPrefix+"Upgrade", "forged")
		w.Header().Set(http.TrailerPrefix+"X_Sum", "forged")
		w.Header().Set("X-Sum", "4")
	}))
	pools := map[string]*upstream.Pool{"http1": poolOf("h1", addrOf(backend)), "h2c": poolOf("h2c", addrOf(backend))}
	pools["h2c"].Protocol = upstream.H2C
	d := deciderFunc(func(r attr.Request) router.Decision {
		return router.Decision{Rule: "r", Group: "gray", Target: pools[strings.Trim(r.Path(), "/")],
			Report: &router.Report{Headers: []string{"X-Gray-Metric-Revenue"}}}
	})
	_, addr := startProxyWith(t, Options{}, d, listener.Protocols{H2C: true})
	clients := map[string]*http.Client{"http/1.1": httpClient(t), "h2c": h2cClient(t)}
	for _, cl := range []string{"http/1.1", "h2c"} {
		for _, up := range []string{"http1", "h2c"} {
			for _, method := range []string{"GET", "POST"} {
				t.Run(cl+" from "+up+" "+method, func(t *testing.T) {
					resp := fetchTrailed(t, clients[cl], method, "http://"+addr+"/"+up, map[string]string{"POST": "up"}[method])
					for _, k := range forged {
						if v, ok := resp.Trailer[http.CanonicalHeaderKey(k)]; ok {
							t.Errorf("trailer %s announced or relayed: %q", k, v)
						}
					}
					if got := resp.Trailer.Get("X-Sum"); got != "4" {
						t.Errorf("trailer X-Sum = %q, want 4", got)
					}
					checks := []struct{ what, got, want string }{
						{"X-Gray-Rule", strings.Join(resp.Header.Values("X-Gray-Rule"), ","), "r"},
						{"X-Gray-Group", strings.Join(resp.Header.Values("X-Gray-Group"), ","), "gray"},
						{"X-Gray-Degraded", strings.Join(resp.Header.Values("X-Gray-Degraded"), ","), ""},
						{"X-Request-Id count", fmt.Sprint(len(resp.Header.Values("X-Request-Id"))), "1"},
						{"Via count", fmt.Sprint(len(resp.Header.Values("Via"))), "1"},
						{"X-Gray-Metric-Revenue", resp.Header.Get("X-Gray-Metric-Revenue"), ""},
					}
					for _, c := range checks {
						if c.got != c.want {
							t.Errorf("header %s = %q, want %q", c.what, c.got, c.want)
						}
					}
				})
			}
		}
	}
}

// TestH2ServersPrunedOnReload: every reload that changes
// client_write_timeout builds a new HTTP/2 server for the connections
// that come after it, and one that no connection uses any more is
// dropped, so a gateway reloaded many times keeps only the current one
// and those its open connections still use. A connection keeps its
// server for as long as it lives: an answer streaming on it across five
// reloads completes, and the connection serves another request. A new
// connection gets the current server.
func TestH2ServersPrunedOnReload(t *testing.T) {
	release := make(chan struct{})
	up := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, "done")
	}))
	opts := Options{WriteTimeout: time.Second}
	p, addr := startProxyWith(t, opts, staticDecider{Group: "g", Target: poolOf("up", addrOf(up))}, listener.Protocols{H2C: true})
	gens := func() int {
		p.h2.mu.Lock()
		defer p.h2.mu.Unlock()
		return len(p.h2.gens)
	}
	old := h2cClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/hold", nil)
	held, err := old.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Body.Close()
	for i := 2; i <= 6; i++ {
		opts.WriteTimeout = time.Duration(i) * time.Second
		if restart := p.Reconfigure(opts); len(restart) != 0 {
			t.Fatalf("Reconfigure: restart required for %v", restart)
		}
	}
	if n := gens(); n != 2 {
		t.Errorf("after 5 reloads with a connection open on the first server: %d HTTP/2 servers kept, want 2 (that one and the current)", n)
	}
	close(release)
	if b, err := io.ReadAll(held.Body); err != nil || string(b) != "done" {
		t.Fatalf("the answer streaming across the reloads: %q, %v; want \"done\"", b, err)
	}
	if code, body := fetch(t, old, "GET", "http://"+addr+"/again", ""); code != 200 || body != "done" {
		t.Errorf("a request on the connection of the first server: %d %q", code, body)
	}
	if code, body := fetch(t, h2cClient(t), "GET", "http://"+addr+"/new", ""); code != 200 || body != "done" {
		t.Errorf("a request on a new connection: %d %q", code, body)
	}
	if got := p.h2.cur.Load().srv.WriteByteTimeout; got != 6*time.Second {
		t.Errorf("the current server's write timeout is %v, want the last reload's 6s", got)
	}
	old.CloseIdleConnections()
	waitFor(t, 5*time.Second, "the first server to be dropped once its connection closed", func() bool { return gens() == 1 })
}

// TestFoldedValueHasNoEdgeSpace: an obs-fold that ends in a blank line
// ("X-A:  a\r\n \r\n") leaves net/http's reader a value with a space at
// its end ("a "), which x/net/http2's server wrote as it was, though an
// HTTP/2 field value may not end (or start) with whitespace (RFC 9113
// section 8.2.1) and a client that checks refuses it. Each client gets
// "a", as an HTTP/1.1 client did, in the header and in the trailers, for
// a GET and a POST (the HTTP/2 listener's two ways to an http1 pool).
func TestFoldedValueHasNoEdgeSpace(t *testing.T) {
	up := testserve.Conns(t, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err == nil {
			_, _ = io.Copy(io.Discard, req.Body)
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nX-A:  a  \r\n \r\nX-B: b\r\n\t\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\nConnection: close\r\n\r\n"+
				"2\r\nok\r\n0\r\nX-T: t\r\n \r\n\r\n")
		}
		_ = c.Close()
	})
	_, addr := startProxyWith(t, Options{}, staticDecider{Rule: "r", Group: "stable", Target: poolOf("stable", up)}, listener.Protocols{H2C: true})
	askEveryWay(t, "http://"+addr+"/", func(way string, resp *http.Response, b []byte, err error) {
		if err != nil || string(b) != "ok" {
			t.Fatalf("%s: %d %q %v", way, resp.StatusCode, b, err)
		}
		got := []string{resp.Header.Get("X-A"), resp.Header.Get("X-B"), resp.Trailer.Get("X-T")}
		if want := []string{"a", "b", "t"}; !slices.Equal(got, want) {
			t.Errorf("%s: X-A, X-B and the trailer X-T are %q, want %q", way, got, want)
		}
	})
}

// askEveryWay asks for url as an HTTP/1.1 and as an h2c client, with a GET
// and a POST with a body (the HTTP/2 listener's two ways to an http1
// pool: its own exchange and net/http's Transport), and hands check each
// answer, its body read whole (err is that read's), and which way it was
// ("POST from h2c"). A request that gets no answer fails the test.
func askEveryWay(t *testing.T, url string, check func(way string, resp *http.Response, body []byte, err error)) {
	t.Helper()
	clients := map[string]*http.Client{"http/1.1": httpClient(t), "h2c": h2cClient(t)}
	for _, cl := range []string{"http/1.1", "h2c"} {
		for _, method := range []string{"GET", "POST"} {
			var body io.Reader
			if method == "POST" {
				body = strings.NewReader("upload")
			}
			way := method + " from " + cl
			req, _ := http.NewRequest(method, url, body)
			resp, err := clients[cl].Do(req)
			if err != nil {
				t.Fatalf("%s: %v", way, err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			check(way, resp, b, err)
		}
	}
}

// TestFoldedConnectionField: a Connection field folded over two lines
// names the fields of both lines hop-by-hop, for an HTTP/1.1 and an h2c
// client, on a GET and a POST (the HTTP/2 listener's two ways to an http1
// pool). "x-hop\r\n keep-alive" passed X-Hop to an HTTP/1.1 client, whose
// codec took the joined value for one token; "close\r\n x-secret" passed
// X-Secret to an HTTP/2 client, whose way read the field's first line
// alone (found by TestH2AnswersAgreeWithHTTP1 on a wider set of
// answers).
func TestFoldedConnectionField(t *testing.T) {
	var reply atomic.Pointer[string]
	// Each request on the connection is answered, until the gateway
	// closes it (it does after "close"): a connection closed after an
	// answer that did not say so could be taken from the pool for the
	// next request before its close is seen.
	up := rawBackend(t, func(_ *http.Request, w *bufio.Writer) { _, _ = w.WriteString(*reply.Load()) })
	_, addr := startProxyWith(t, Options{}, staticDecider{Rule: "r", Group: "stable", Target: poolOf("stable", up)}, listener.Protocols{H2C: true})
	for _, conn := range []string{"x-hop\r\n keep-alive", "keep-alive\n\tx-hop", "close\r\n x-hop", "close x-hop", "x-hop\r\n  "} {
		raw := "HTTP/1.1 200 OK\r\nConnection: " + conn + "\r\nX-Hop: 1\r\nX-Kept: 2\r\nContent-Length: 2\r\n\r\nok"
		reply.Store(&raw)
		askEveryWay(t, "http://"+addr+"/", func(way string, resp *http.Response, b []byte, err error) {
			if resp.StatusCode != 200 || string(b) != "ok" {
				t.Fatalf("%q, %s: %d %q %v", conn, way, resp.StatusCode, b, err)
			}
			if v, ok := resp.Header["X-Hop"]; ok || resp.Header.Get("X-Kept") != "2" {
				t.Errorf("%q, %s: X-Hop %q (want none), X-Kept %q (want 2)", conn, way, v, resp.Header.Get("X-Kept"))
			}
		})
	}
}
