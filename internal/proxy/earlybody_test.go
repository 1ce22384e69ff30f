package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/testserve"
	"github.com/graygate/graygate/internal/upstream"
)

// earlyAnswerH2 is an h2c upstream that answers every request as soon as
// its HEADERS arrive, before it has read any of the body: 200 "ok" with
// a Content-Length. The stream's flow-control window starts small, so
// the client's transport is still writing the body when the answer comes,
// and the answer grants a large window at once: the transport's body
// writer then goes on reading the body on its own goroutine while the
// gateway relays the answer and ends the request. Each request's body is
// one byte repeated (X-Fill); a DATA frame carrying any other byte is a
// body that went out with another request's bytes, and is reported on
// bad.
func earlyAnswerH2(t *testing.T) (addr string, bad func() error) {
	t.Helper()
	var mu sync.Mutex
	var first error
	report := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = err
		}
	}
	addr = testserve.Conns(t, func(c net.Conn) {
		fr := rawH2Server(c, 60*time.Second, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1024})
		if fr == nil {
			return
		}
		fill := map[uint32]byte{}
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
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
			case *http2.MetaHeadersFrame:
				for _, hf := range f.RegularFields() {
					if hf.Name == "x-fill" && len(hf.Value) == 1 {
						fill[f.StreamID] = hf.Value[0]
					}
				}
				hb.Reset()
				_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
				_ = enc.WriteField(hpack.HeaderField{Name: "content-length", Value: "2"})
				_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: hb.Bytes(), EndHeaders: true})
				_ = fr.WriteData(f.StreamID, true, []byte("ok"))
				_ = fr.WriteWindowUpdate(f.StreamID, 1<<20)
			case *http2.DataFrame:
				want, ok := fill[f.StreamID]
				for _, b := range f.Data() {
					if ok && b != want {
						report(fmt.Errorf("stream %d: body byte %q in a body of %q", f.StreamID, b, want))
						break
					}
				}
				if n := len(f.Data()); n > 0 {
					_ = fr.WriteWindowUpdate(0, uint32(n))
				}
			}
		}
	})
	return addr, func() error {
		mu.Lock()
		defer mu.Unlock()
		return first
	}
}

// earlyAnswerH1 is earlyAnswerH2 for HTTP/1.1: it answers each request as
// soon as its head has come, then reads the body and checks that it is
// one byte repeated (X-Fill), and goes on with the connection.
func earlyAnswerH1(t *testing.T) (addr string, bad func() error) {
	t.Helper()
	var mu sync.Mutex
	var first error
	addr = testserve.Conns(t, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(60 * time.Second))
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return
			}
			if want := req.Header.Get("X-Fill"); len(want) == 1 && len(bytes.Trim(body, want)) > 0 {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("a body of %q carried other bytes", want)
				}
				mu.Unlock()
			}
		}
	})
	return addr, func() error {
		mu.Lock()
		defer mu.Unlock()
		return first
	}
}

// TestEarlyAnswerBodyNotReused: a request body the gateway buffers at
// admit (for a replay on stable) lives in the flow's pooled buffer; so
// does the start of a body of unknown length that turned out larger than
// the replay limit, which is then sent first and the rest streamed. An
// upstream that answers before it has read the body ends the request
// while the transport may still read the body: the HTTP/2 transport's
// body writer runs on a goroutine of its own and goes on until it notices
// the stream is over, and net/http's HTTP/1 transport writes the body on
// its connection's write loop. The next request must not get that buffer
// and fill it while the transport reads it (the race detector sees the
// two goroutines touch it unordered; on the wire, the upstream would get
// another request's bytes as this one's body). Every combination of
// client (HTTP/1.1, HTTP/2) and pool (h2c, http1) is driven, many times,
// with a different body byte each time; the HTTP/1.1 codec's own http1
// path writes the body on the request's goroutine, and is here as a
// regression test.
func TestEarlyAnswerBodyNotReused(t *testing.T) {
	h2Addr, h2Bad := earlyAnswerH2(t)
	h1Addr, h1Bad := earlyAnswerH1(t)
	stableBackend, _ := echoBackend(t, "stable")
	pools := map[upstream.Protocol]*upstream.Pool{
		upstream.H2C:   poolOf("gray", h2Addr),
		upstream.HTTP1: poolOf("gray", h1Addr),
	}
	pools[upstream.H2C].Protocol = upstream.H2C
	bads := map[upstream.Protocol]func() error{upstream.H2C: h2Bad, upstream.HTTP1: h1Bad}
	const rounds = 40
	bodies := []struct {
		name string
		size int64
		cl   int64
	}{
		{"buffered", 60000, 60000},     // under the default replay limit, 64 KiB
		{"over the limit", 100000, -1}, // of unknown length
	}
	for _, proto := range []upstream.Protocol{upstream.H2C, upstream.HTTP1} {
		route := &grayRoute{gray: pools[proto], stable: poolOf("stable", addrOf(stableBackend))}
		_, addr := startProxyWith(t, Options{}, route, listener.Protocols{H2C: true})
		clients := map[string]*http.Client{"http/1.1": httpClient(t), "h2c": h2cClient(t)}
		for _, cl := range []string{"http/1.1", "h2c"} {
			for _, b := range bodies {
				t.Run(cl+" to "+proto.String()+", "+b.name, func(t *testing.T) {
					for i := range rounds {
						fill := byte('a' + i%26)
						req, _ := http.NewRequest("POST", "http://"+addr+"/upload", io.NopCloser(bytes.NewReader(bytes.Repeat([]byte{fill}, int(b.size)))))
						req.Header.Set("X-Fill", string(fill))
						req.ContentLength = b.cl
						resp, err := clients[cl].Do(req)
						if err != nil {
							t.Fatalf("round %d: %v", i, err)
						}
						body, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusOK || string(body) != "ok" || resp.Header.Get("X-Gray-Group") != "gray" {
							t.Fatalf("round %d: %d %q from group %q, want gray's 200 \"ok\"", i, resp.StatusCode, body, resp.Header.Get("X-Gray-Group"))
						}
					}
					if err := bads[proto](); err != nil {
						t.Error(err)
					}
				})
			}
		}
	}
}

// TestHTTP10ClientOfH2Pool: an HTTP/1.0 client cannot read the chunked
// coding (RFC 9112 section 6.1), so a body of unknown length from an h2
// or h2c upstream reaches it delimited by the close of the connection
// (RFC 9112 section 6.3), as one from an http1 pool does: no
// Transfer-Encoding, no Content-Length, "Connection: close", the body
// intact, then the end of the connection. That holds for a body the
// upstream streams without a length, for one that announces trailers (an
// HTTP/1.1 client gets it chunked, the only framing that carries them),
// and for an event stream; a body with a length keeps it. An http1 pool
// (the same server over HTTP/1.1) is held to the same answer: the
// "Connection: keep-alive" fasthttp gives an HTTP/1.0 client that asked
// for it is not sent next to the close.
func TestHTTP10ClientOfH2Pool(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/trailers":
			w.Header().Set("Trailer", "X-Sum")
		case "/events":
			w.Header().Set("Content-Type", "text/event-stream")
		case "/sized":
			w.Header().Set("Content-Length", "20")
		}
		_, _ = io.WriteString(w, "first part;")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, "the rest")
		if r.URL.Path == "/sized" {
			_, _ = io.WriteString(w, ".")
		}
		w.Header().Set("X-Sum", "19")
	})
	h2c := h2cServer(t, handler)
	h2 := httptest.NewUnstartedServer(handler)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	t.Cleanup(h2.Close)
	roots := x509.NewCertPool()
	roots.AddCert(h2.Certificate())
	for _, proto := range []upstream.Protocol{upstream.H2C, upstream.H2, upstream.HTTP1} {
		pool := poolOf("gray", addrOf(h2c))
		pool.Protocol = proto
		if proto == upstream.H2 {
			pool = poolOf("gray", addrOf(h2))
			pool.Protocol = proto
			pool.TLS = &tls.Config{RootCAs: roots, ServerName: "example.com"}
			pool.TLSKey = "test"
		}
		_, addr := startProxy(t, Options{}, staticDecider{Group: "g", Target: pool})
		for _, path := range []string{"/stream", "/trailers", "/events", "/sized"} {
			t.Run(proto.String()+path, func(t *testing.T) {
				c := dialBounded(t, addr, 5*time.Second)
				defer c.Close()
				// Asked to keep the connection, the gateway still closes it
				// after a body of unknown length: that is its end.
				keep := "Connection: keep-alive\r\n"
				if path == "/sized" {
					keep = ""
				}
				fmt.Fprintf(c, "GET %s HTTP/1.0\r\n%s\r\n", path, keep)
				raw, err := io.ReadAll(c) // the answer, then the close
				if err != nil {
					t.Fatalf("reading to the close: %v (got %q)", err, raw)
				}
				head, body, ok := strings.Cut(string(raw), "\r\n\r\n")
				if !ok {
					t.Fatalf("no header in %q", raw)
				}
				resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(head+"\r\n\r\n")), nil)
				if err != nil {
					t.Fatalf("header %q: %v", head, err)
				}
				wantBody, wantCL := "first part;the rest", ""
				if path == "/sized" {
					wantBody, wantCL = "first part;the rest.", "20"
				}
				if resp.StatusCode != http.StatusOK || body != wantBody {
					t.Errorf("%d with body %q, want 200 with %q", resp.StatusCode, body, wantBody)
				}
				if te := resp.Header.Values("Transfer-Encoding"); len(te) != 0 || len(resp.TransferEncoding) != 0 {
					t.Errorf("Transfer-Encoding %q to an HTTP/1.0 client:\n%s", te, head)
				}
				if cl := resp.Header.Get("Content-Length"); cl != wantCL {
					t.Errorf("Content-Length %q, want %q:\n%s", cl, wantCL, head)
				}
				if n := strings.Count(strings.ToLower(head), "\r\nconnection:"); !resp.Close || n != 1 {
					t.Errorf("%d Connection fields, want one, close:\n%s", n, head)
				}
				for _, k := range []string{"X-Request-Id", "X-Gray-Group", "Via", "Date"} {
					if v := resp.Header.Values(k); len(v) != 1 {
						t.Errorf("%s: %q, want one", k, v)
					}
				}
			})
		}
	}
}
