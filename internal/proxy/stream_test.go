package proxy

import (
	"bufio"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// pattern is an endless deterministic byte stream, so that a large body
// can be produced and checked without holding it. It repeats a table whose
// length is prime, so that a lost or repeated buffer-sized piece of the
// stream changes the checksum.
type pattern struct{ off int }

const patternPeriod = 65521

var patternTable = sync.OnceValue(func() []byte {
	b := make([]byte, patternPeriod)
	for i := range b {
		b[i] = byte(i*7 + i>>11)
	}
	return b
})

func (p *pattern) Read(b []byte) (int, error) {
	tab := patternTable()
	n := 0
	for n < len(b) {
		c := copy(b[n:], tab[p.off:])
		n += c
		p.off = (p.off + c) % patternPeriod
	}
	return n, nil
}

var patternCRCs sync.Map // int64 → uint32

func patternCRC(n int64) uint32 {
	if v, ok := patternCRCs.Load(n); ok {
		return v.(uint32)
	}
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, io.LimitReader(&pattern{}, n)); err != nil {
		panic(err)
	}
	patternCRCs.Store(n, h.Sum32())
	return h.Sum32()
}

// allocDuring reports how many bytes the whole process allocated while f
// ran. A 100 MiB body buffered anywhere (in the proxy, fasthttp, or the
// test's own client or backend) shows up here as at least 100 MiB, so a
// small delta proves the body was streamed end to end.
func allocDuring(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

const bigBody = 100 << 20

func TestStreamLargeUpload(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := crc32.NewIEEE()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%d %08x", n, h.Sum32())
	}))
	defer backend.Close()
	_, addr := startProxy(t, Options{}, staticDecider{Group: "stable", Target: poolOf("stable", addrOf(backend))})
	c := httpClient(t)
	want := fmt.Sprintf("%d %08x", bigBody, patternCRC(bigBody))

	var got string
	alloc := allocDuring(func() {
		req, _ := http.NewRequest("POST", "http://"+addr+"/upload", io.LimitReader(&pattern{}, bigBody))
		req.ContentLength = bigBody
		resp, err := c.Do(req)
		if err != nil {
			t.Errorf("upload: %v", err)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got = string(b)
	})
	if got != want {
		t.Fatalf("backend received %q, want %q", got, want)
	}
	if alloc > bigBody/4 {
		t.Errorf("allocated %d MiB while streaming a %d MiB upload; the body was buffered", alloc>>20, bigBody>>20)
	}
	t.Logf("allocated %.1f MiB for a %d MiB upload", float64(alloc)/(1<<20), bigBody>>20)
}

func TestStreamLargeDownload(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(bigBody))
		_, _ = io.CopyBuffer(w, io.LimitReader(&pattern{}, bigBody), make([]byte, 32<<10))
	}))
	defer backend.Close()
	_, addr := startProxy(t, Options{}, staticDecider{Group: "stable", Target: poolOf("stable", addrOf(backend))})
	c := httpClient(t)

	var n int64
	var sum uint32
	var cl int64
	alloc := allocDuring(func() {
		resp, err := c.Get("http://" + addr + "/download")
		if err != nil {
			t.Errorf("download: %v", err)
			return
		}
		defer resp.Body.Close()
		cl = resp.ContentLength
		h := crc32.NewIEEE()
		n, err = io.Copy(h, resp.Body)
		if err != nil {
			t.Errorf("reading download: %v", err)
		}
		sum = h.Sum32()
	})
	if cl != bigBody {
		t.Errorf("Content-Length = %d, want %d", cl, bigBody)
	}
	if n != bigBody || sum != patternCRC(bigBody) {
		t.Fatalf("received %d bytes crc %08x, want %d bytes crc %08x", n, sum, bigBody, patternCRC(bigBody))
	}
	if alloc > bigBody/4 {
		t.Errorf("allocated %d MiB while streaming a %d MiB download; the body was buffered", alloc>>20, bigBody>>20)
	}
	t.Logf("allocated %.1f MiB for a %d MiB download", float64(alloc)/(1<<20), bigBody>>20)
}

// TestServerSentEvents checks that each event reaches the client while the
// upstream is still producing, and that a stream outliving
// ResponseHeaderTimeout is not cut: chunked, and with a Content-Length
// small enough that another body would be read whole before it is relayed.
func TestServerSentEvents(t *testing.T) {
	t.Run("chunked", func(t *testing.T) { testServerSentEvents(t, false) })
	t.Run("content-length", func(t *testing.T) { testServerSentEvents(t, true) })
}

func testServerSentEvents(t *testing.T, withLength bool) {
	const headerTimeout = 200 * time.Millisecond
	release := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		if withLength {
			w.Header().Set("Content-Length", strconv.Itoa(len("data: one\n\ndata: two\n\n")))
		}
		fl := w.(http.Flusher)
		fmt.Fprint(w, "data: one\n\n")
		fl.Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "data: two\n\n")
		fl.Flush()
	}))
	defer backend.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	_, addr := startProxy(t, Options{ResponseHeaderTimeout: headerTimeout}, staticDecider{
		Group: "stable", Target: poolOf("stable", addrOf(backend)),
	})
	c := httpClient(t)
	c.Timeout = 5 * time.Second
	resp, err := c.Get("http://" + addr + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	readEvent := func() string {
		var ev strings.Builder
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("reading event: %v (got %q)", err, ev.String())
			}
			if line == "\n" {
				return ev.String()
			}
			ev.WriteString(line)
		}
	}
	// The upstream is blocked on release: the first event can only arrive
	// here if the proxy flushed it on its own.
	if ev := readEvent(); ev != "data: one\n" {
		t.Fatalf("first event = %q", ev)
	}
	// Hold the stream open past the header timeout; it must survive.
	time.Sleep(2 * headerTimeout)
	close(release)
	if ev := readEvent(); ev != "data: two\n" {
		t.Fatalf("second event = %q", ev)
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Errorf("after the last event: %q, %v; want a clean end", rest, err)
	}
}

func TestHead(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", "stable")
		if r.Method == http.MethodHead {
			w.Header().Set("Content-Length", "1234")
			return
		}
		fmt.Fprint(w, "get-body")
	}))
	defer backend.Close()
	_, addr := startProxy(t, Options{}, staticDecider{Group: "stable", Target: poolOf("stable", addrOf(backend))})

	// HEAD then GET on one connection: if the proxy sent a body after the
	// HEAD response, the GET response would be misread.
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	fmt.Fprint(c, "HEAD /h HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodHead})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.ContentLength != 1234 || resp.Header.Get("X-Backend") != "stable" {
		t.Errorf("HEAD: status %d Content-Length %d X-Backend %q, want 200 1234 stable",
			resp.StatusCode, resp.ContentLength, resp.Header.Get("X-Backend"))
	}
	fmt.Fprint(c, "GET /h HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, err = http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "get-body" {
		t.Errorf("GET after HEAD: body %q, want %q", body, "get-body")
	}
}

func TestChunked(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := crc32.NewIEEE()
		n, _ := io.Copy(h, r.Body)
		// Two flushed writes and no Content-Length: net/http answers chunked.
		fmt.Fprintf(w, "te=%s n=%d crc=%08x;", strings.Join(r.TransferEncoding, ","), n, h.Sum32())
		w.(http.Flusher).Flush()
		fmt.Fprint(w, "end")
	}))
	defer backend.Close()
	_, addr := startProxy(t, Options{}, staticDecider{Group: "stable", Target: poolOf("stable", addrOf(backend))})

	t.Run("raw chunked request", func(t *testing.T) {
		resp, body := rawExchange(t, addr, "POST", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"+
			"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
		want := fmt.Sprintf("te=chunked n=11 crc=%08x;end", crc32.ChecksumIEEE([]byte("hello world")))
		if body != want {
			t.Errorf("body = %q, want %q", body, want)
		}
		if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
			t.Errorf("response Transfer-Encoding = %q, want chunked", resp.TransferEncoding)
		}
	})
	t.Run("HTTP/1.0 client gets the body unchunked", func(t *testing.T) {
		resp, body := rawExchange(t, addr, "GET", "GET / HTTP/1.0\r\nHost: a\r\n\r\n")
		if len(resp.TransferEncoding) != 0 || !strings.HasSuffix(body, ";end") {
			t.Errorf("Transfer-Encoding %q body %q, want no coding and the whole body", resp.TransferEncoding, body)
		}
		// The gateway's own fields once each (the hijacked writer that
		// delimits the body by the close added them a second time).
		for _, k := range []string{"Via", "X-Request-Id", "X-Gray-Group", "Date"} {
			if v := resp.Header.Values(k); len(v) != 1 {
				t.Errorf("%s: %q, want one", k, v)
			}
		}
	})
	t.Run("HTTP/1.0 HEAD gets no Transfer-Encoding", func(t *testing.T) {
		// An upstream that answers HEAD with the chunked coding its GET
		// would have.
		u := newRawUpstream(t, map[string]string{"/": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"}, nil)
		_, addr := startProxy(t, Options{}, staticDecider{Group: "stable", Target: poolOf("raw", u.ln.Addr().String())})
		for _, version := range []string{"1.0", "1.1"} {
			c := dialBounded(t, addr, 10*time.Second)
			fmt.Fprintf(c, "HEAD / HTTP/%s\r\nHost: a\r\nConnection: close\r\n\r\n", version)
			head, _ := io.ReadAll(c) // the answer, then the close
			c.Close()
			te := strings.Contains(strings.ToLower(string(head)), "transfer-encoding: chunked")
			if !strings.HasPrefix(string(head), "HTTP/1.1 200 ") || te != (version == "1.1") {
				t.Errorf("answer to an HTTP/%s HEAD:\n%s\nwant 200, with the upstream's chunked coding only for HTTP/1.1 (RFC 9112 section 6.1)", version, head)
			}
		}
	})
	t.Run("streamed body of unknown length", func(t *testing.T) {
		const n = 3 << 20
		req, _ := http.NewRequest("POST", "http://"+addr+"/", io.NopCloser(io.LimitReader(&pattern{}, n)))
		req.ContentLength = -1
		resp, err := httpClient(t).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		want := fmt.Sprintf("te=chunked n=%d crc=%08x;end", n, patternCRC(n))
		if string(body) != want {
			t.Errorf("body = %q, want %q", body, want)
		}
	})
}

// TestSlowUploadIsAnswered: a body that takes longer than watchDelay to
// arrive, chunked or with a length. The response-header wait must count
// from when the whole request has been written upstream, and the request's
// last bytes must reach the upstream however long the upload took.
func TestSlowUploadIsAnswered(t *testing.T) {
	backend, _ := echoBackend(t, "stable")
	_, addr := startProxy(t, Options{}, staticDecider{Group: "stable", Target: poolOf("stable", addrOf(backend))})
	for _, tt := range []struct{ name, head, first, rest string }{
		{"chunked", "Transfer-Encoding: chunked", "5\r\nhello\r\n", "6\r\n world\r\n0\r\n\r\n"},
		{"with a length", "Content-Length: 11", "hello", " world"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := dialBounded(t, addr, 10*time.Second)
			defer c.Close()
			fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: a\r\n%s\r\n\r\n%s", tt.head, tt.first)
			time.Sleep(4 * watchDelay)
			fmt.Fprint(c, tt.rest)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer to a slow upload: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || !strings.Contains(string(body), `"body":"hello world"`) {
				t.Fatalf("answer %d %s", resp.StatusCode, body)
			}
		})
	}
}
