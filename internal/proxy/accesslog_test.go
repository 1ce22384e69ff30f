package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/identity"
)

// syncBuffer is a bytes.Buffer safe for the writer goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestAccessLog(t *testing.T) {
	backend, _ := echoBackend(t, "gray")
	var out syncBuffer
	p, addr := startProxy(t, Options{AccessLog: &out}, staticDecider{
		Rule: "r1", Group: "gray", Degraded: "rollback", Target: poolOf("gray", addrOf(backend)),
		Identity: identity.ID{Value: "u", Source: "header:X-User-Id"},
	})
	c := httpClient(t)
	resp, err := c.Get("http://" + addr + "/a/b?secret=1")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n folded\r\n\r\n")
	rawExchange(t, addr, "GET", "POST /dup HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("access log has %d lines, want 3:\n%s", len(lines), out.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatalf("line %q: %v", lines[0], err)
	}
	want := map[string]any{
		"method": "GET", "path": "/a/b", "status": float64(200), "upstream": addrOf(backend), "pool": "gray",
		"rule": "r1", "group": "gray", "degraded": "rollback", "intended_upstream": "", "identity_source": "header:X-User-Id",
		"bytes": float64(n), "request_id": resp.Header.Get("X-Request-Id"),
	}
	for k, v := range want {
		if rec[k] != v {
			t.Errorf("%s = %v, want %v", k, rec[k], v)
		}
	}
	if ms, ok := rec["latency_ms"].(float64); !ok || ms <= 0 {
		t.Errorf("latency_ms = %v, want a positive number", rec["latency_ms"])
	}
	if _, err := time.Parse(time.RFC3339Nano, rec["time"].(string)); err != nil {
		t.Errorf("time = %v: %v", rec["time"], err)
	}
	for _, k := range []string{"level", "msg"} {
		if _, ok := rec[k]; ok {
			t.Errorf("line has %q, want only the access fields", k)
		}
	}
	if len(rec) != len(want)+2 {
		t.Errorf("line has %d fields, want %d: %s", len(rec), len(want)+2, lines[0])
	}
	// Rejected by the gateway (obs-fold) and by fasthttp's parser (two
	// Content-Lengths, answered through the Server's ErrorHandler).
	for _, line := range lines[1:] {
		rec = nil
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["status"] != float64(http.StatusBadRequest) {
			t.Errorf("rejected request logged as %s (%v), want status 400", line, err)
		}
		if id, _ := rec["request_id"].(string); len(id) != 32 {
			t.Errorf("rejected request logged with request_id %q, want a generated one", id)
		}
	}
}

// blockingWriter blocks every Write until released.
type blockingWriter struct {
	release chan struct{}
	n       int
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	<-b.release
	b.n += len(p)
	return len(p), nil
}

func TestAsyncWriterNeverBlocks(t *testing.T) {
	bw := &blockingWriter{release: make(chan struct{})}
	w := newAsyncWriter(bw, 4, time.Hour)
	line := []byte(strings.Repeat("x", 100) + "\n")
	start := time.Now()
	// The bufio.Writer holds 64 KiB before it writes through, so fill that
	// and the queue several times over; none of it may wait for bw.
	for range 2000 {
		if n, err := w.Write(line); n != len(line) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("2000 writes took %v against a stuck writer", d)
	}
	if w.dropped.Load() == 0 {
		t.Error("no line dropped although the writer is stuck")
	}
	close(bw.release)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	written := uint64(bw.n / len(line))
	if written+w.dropped.Load() != 2000 {
		t.Errorf("written %d + dropped %d != 2000", written, w.dropped.Load())
	}
	if n, _ := w.Write(line); n != len(line) || w.dropped.Load() == 0 {
		t.Error("Write after Close must be accepted and counted as dropped")
	}
}

func TestAsyncWriterFlushesPeriodically(t *testing.T) {
	var out syncBuffer
	w := newAsyncWriter(&out, 16, 20*time.Millisecond)
	defer w.Close(context.Background())
	_, _ = w.Write([]byte("line\n"))
	deadline := time.Now().Add(5 * time.Second)
	for out.String() != "line\n" {
		if time.Now().After(deadline) {
			t.Fatalf("line not flushed; buffer %q", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAsyncWriterFlushesInSmallBatches checks that the writer hands its
// output over once flushBytes are buffered, well before half its limit and
// without waiting for its interval.
func TestAsyncWriterFlushesInSmallBatches(t *testing.T) {
	var out syncBuffer
	w := newAsyncWriter(&out, 8*flushBytes/512, time.Hour) // half the limit: 4*flushBytes
	defer w.Close(context.Background())
	line := append(bytes.Repeat([]byte("x"), 511), '\n')
	n := flushBytes/len(line) + 8
	for range n {
		_, _ = w.Write(line)
	}
	// The first flushBytes go out at once. The lines after them may wait
	// for the interval: whether the writer took them with the first batch
	// depends on when it ran.
	deadline := time.Now().Add(5 * time.Second)
	for len(out.String()) < flushBytes {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes written of %d buffered, with an hour to the next interval", len(out.String()), n*len(line))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := len(out.String()); got%len(line) != 0 || got > n*len(line) {
		t.Errorf("%d bytes written: not whole lines of what was buffered", got)
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", `q"uote\back`, "ctl\x00\x01\x1f\n\r\t", "用户\u2028\u2029", "bad\xff\xfe utf8", "<&>", "/eight/b\\ytes/at/a/time", "/eight/b\"ytes/x\x01yz/0123456\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		enc := appendJSONString(nil, s)
		var got string
		if err := json.Unmarshal(enc, &got); err != nil {
			t.Fatalf("appendJSONString(%q) = %s, not JSON: %v", s, enc, err)
		}
		ref, _ := json.Marshal(s)
		var want string
		_ = json.Unmarshal(ref, &want)
		if got != want {
			t.Fatalf("appendJSONString(%q) decodes to %q, encoding/json to %q", s, got, want)
		}
	})
}

// TestAccessLogTimeFormats checks the hand-formatted time and latency
// against the standard library's formatting of the same values.
func TestAccessLogTimeFormats(t *testing.T) {
	var a accessLog
	tokyo := time.FixedZone("JST", 9*3600)
	base := time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC)
	for _, tm := range []time.Time{
		base,
		base.Add(1),
		base.Add(120 * time.Millisecond),
		base.Add(999999999),
		base.Add(time.Second), // the next second, and the next day
		base.Add(time.Second + 5000),
		base.In(tokyo),        // same second, another zone
		base.Add(3).In(tokyo), //
		time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Date(12345, 1, 1, 0, 0, 0, 1, time.UTC), // a year the cache does not take
	} {
		got := string(a.appendTime(nil, tm))
		if want := tm.Format(time.RFC3339Nano); got != want {
			t.Errorf("appendTime(%v) = %q, want %q", tm, got, want)
		}
	}
	for _, d := range []time.Duration{0, 1, 999, 1000, 123456, time.Millisecond, 1234567, 3*time.Second + 7, -1500, 90 * time.Minute} {
		got := string(appendMillis(nil, d))
		if want := strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64); got != want {
			t.Errorf("appendMillis(%d) = %q, want %q", d, got, want)
		}
	}
}

// TestShutdownLogsCutRequests: a request still waiting for a slow upstream
// when Shutdown's deadline passes is cut off, and still gets its access
// log line (it used to be written after the log had closed, and lost).
func TestShutdownLogsCutRequests(t *testing.T) {
	up := stallBackend(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, br) // never answers; the cleanup closes c
	})
	var out syncBuffer
	p, addr := startProxy(t, Options{AccessLog: &out}, staticDecider{Rule: "r1", Group: "stable", Target: poolOf("stable", up)})
	c := dialRaw(t, addr)
	fmt.Fprint(c, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
	deadline := time.Now().Add(5 * time.Second)
	for p.live.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(2 * watchDelay) // waiting for the answer
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = p.Shutdown(ctx)
	if !strings.Contains(out.String(), `"path":"/slow"`) {
		t.Errorf("access log after a shutdown that cut a request:\n%s\nwant a line for /slow", out.String())
	}
}

// TestAccessLogError: an answer the gateway made itself is logged with
// what its body said, through the real listener: a refused head (the
// Guard's reasons, fasthttp's parser), an upstream that refuses
// connections; an upstream's own answer, an error status included, has
// no error field.
func TestAccessLogError(t *testing.T) {
	backend, _ := echoBackend(t, "stable")
	tests := []struct {
		name, target, method, raw string
		status                    int
		want                      string // the error field; "" for none
	}{
		{"served", addrOf(backend), "GET", "GET /ok HTTP/1.1\r\nHost: a\r\n\r\n", 200, ""},
		{"obs-fold", addrOf(backend), "GET", "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n folded\r\n\r\n", 400, "bad request: "},
		{"unsupported version", addrOf(backend), "GET", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505, ""},
		{"empty host in the target", addrOf(backend), "GET", "GET http://:80/p HTTP/1.1\r\nHost: a\r\n\r\n", 400, "bad request: empty host in the request target"},
		{"bad chunk size", addrOf(backend), "POST", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n-0x0\r\n\r\n", 400, "bad request: "},
		{"two Content-Lengths", addrOf(backend), "POST", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400, "bad request"},
		{"upstream refuses", refusedAddr(t), "GET", "GET /x HTTP/1.1\r\nHost: a\r\n\r\n", 502, `upstream "stable" unreachable`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out syncBuffer
			p, addr := startProxy(t, Options{AccessLog: &out}, staticDecider{Rule: "r1", Group: "stable", Target: poolOf("stable", tt.target)})
			resp, body := rawExchange(t, addr, tt.method, tt.raw)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d (body %q)", resp.StatusCode, tt.status, body)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := p.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			var rec map[string]any
			if err := json.Unmarshal([]byte(strings.TrimSpace(out.String())), &rec); err != nil {
				t.Fatalf("access log %q: %v", out.String(), err)
			}
			got, has := rec["error"].(string)
			if tt.status == 200 {
				if _, ok := rec["error"]; ok {
					t.Fatalf("a served request logged error %v", rec["error"])
				}
				return
			}
			// The field says what the body said, without the prefix and
			// the request id, and never an instance address.
			said, _, _ := strings.Cut(strings.TrimPrefix(body, "graygate: "), " (request id ")
			if !has || got != said || !strings.HasPrefix(got, tt.want) {
				t.Fatalf("error = %q (present %v); the body said %q, want it, beginning %q", got, has, body, tt.want)
			}
			if strings.Contains(got, tt.target) {
				t.Fatalf("error %q names the instance %s", got, tt.target)
			}
		})
	}
}

// TestPlain8 checks the eight-bytes-at-a-time test of appendJSONString
// against a byte-by-byte one: every byte value at every position of a
// plain word, and words of bytes drawn from around each boundary.
func TestPlain8(t *testing.T) {
	plain := func(c byte) bool { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\' }
	word := func(b [8]byte) uint64 { return binary.LittleEndian.Uint64(b[:]) }
	for pos := range 8 {
		for v := range 256 {
			b := [8]byte{'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'}
			b[pos] = byte(v)
			if got, want := plain8(word(b)), plain(byte(v)); got != want {
				t.Fatalf("plain8(%q) = %v, want %v", b[:], got, want)
			}
		}
	}
	edges := []byte{0x00, 0x01, 0x1f, 0x20, 0x21, '"' - 1, '"', '"' + 1, '\\' - 1, '\\', '\\' + 1, 0x7e, 0x7f, 0x80, 0x81, 0xa2, 0xdc, 0xfe, 0xff}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		var b [8]byte
		want := true
		for i := range b {
			b[i] = edges[rng.IntN(len(edges))]
			if rng.IntN(3) == 0 {
				b[i] = 'a'
			}
			want = want && plain(b[i])
		}
		if got := plain8(word(b)); got != want {
			t.Fatalf("plain8(%q) = %v, want %v", b[:], got, want)
		}
	}
}
