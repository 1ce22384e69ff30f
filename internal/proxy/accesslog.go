package proxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// accessLog writes one JSON line per request into an asyncWriter. The line
// is encoded by hand into a pooled buffer rather than through
// slog.JSONHandler: under load the handler (attribute slices, a mutex, its
// own clock read) cost about 8% of the gateway's CPU, and the record has a
// fixed shape. appendJSONString's output decodes to what encoding/json's
// does for the same string, which a fuzz test checks.
type accessLog struct {
	out  io.Writer // what w writes to
	w    *asyncWriter
	bufs sync.Pool
	// second caches the formatted date and time of the latest second seen
	// (see appendTime).
	second atomic.Pointer[formattedSecond]
}

// formattedSecond is one second's "2006-01-02T15:04:05" and zone suffix.
type formattedSecond struct {
	unix   int64
	offset int
	date   []byte // up to the seconds
	zone   []byte // "Z" or "+08:00"
}

// appendTime appends t as time.RFC3339Nano does. The date, time of day and
// zone are formatted once per second and reused; only the fraction is
// formatted for every line.
func (a *accessLog) appendTime(b []byte, t time.Time) []byte {
	_, offset := t.Zone()
	sec := t.Unix()
	f := a.second.Load()
	if f == nil || f.unix != sec || f.offset != offset {
		full := t.Truncate(time.Second).AppendFormat(nil, time.RFC3339)
		i := len("2006-01-02T15:04:05")
		if len(full) < i || full[i-3] != ':' {
			// A year outside 0000-9999: no caching.
			return t.AppendFormat(b, time.RFC3339Nano)
		}
		f = &formattedSecond{unix: sec, offset: offset, date: full[:i], zone: full[i:]}
		a.second.Store(f)
	}
	b = append(b, f.date...)
	b = appendFraction(b, t.Nanosecond(), 9)
	return append(b, f.zone...)
}

// appendFraction appends v, a fraction of 10^digits (digits at most 9), as
// "." and its digits without trailing zeros, or nothing if v is 0.
func appendFraction(b []byte, v, digits int) []byte {
	if v == 0 {
		return b
	}
	var frac [10]byte
	frac[0] = '.'
	for i := digits; i >= 1; i-- {
		frac[i] = byte('0' + v%10)
		v /= 10
	}
	n := digits + 1
	for frac[n-1] == '0' {
		n--
	}
	return append(b, frac[:n]...)
}

// appendMillis appends d in milliseconds, with up to six decimals and no
// trailing zeros: the shortest decimal form of float64(d)/1e6 for any
// duration a request can take.
func appendMillis(b []byte, d time.Duration) []byte {
	if d < 0 {
		b = append(b, '-')
		d = -d
	}
	b = strconv.AppendInt(b, int64(d/time.Millisecond), 10)
	return appendFraction(b, int(d%time.Millisecond), 6)
}

func newAccessLog(out io.Writer, queue int, flushEvery time.Duration) *accessLog {
	return &accessLog{out: out, w: newAsyncWriter(out, queue, flushEvery)}
}

// record logs ex, which ended at end after elapsed. The strings read alias
// the exchange's buffers; they are copied into the line before it returns.
func (a *accessLog) record(f *flow, end time.Time, elapsed time.Duration) {
	upstreamAddr, pool, intended := "", "", ""
	if f.inst != nil {
		upstreamAddr = f.inst.Addr
	}
	if f.d.Target != nil {
		pool = f.d.Target.Name
	}
	if f.d.Intended != nil {
		intended = f.d.Intended.Name
	}
	bp, _ := a.bufs.Get().(*[]byte)
	if bp == nil {
		b := make([]byte, 0, 512)
		bp = &b
	}
	b := append((*bp)[:0], `{"time":"`...)
	b = a.appendTime(b, end)
	b = append(b, `","method":`...)
	b = appendJSONString(b, b2s(f.method))
	b = append(b, `,"path":`...)
	b = appendJSONString(b, b2s(f.path))
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(f.status), 10)
	b = append(b, `,"upstream":`...)
	b = appendJSONString(b, upstreamAddr)
	b = append(b, `,"pool":`...)
	b = appendJSONString(b, pool)
	b = append(b, `,"rule":`...)
	b = appendJSONString(b, f.d.Rule)
	b = append(b, `,"group":`...)
	b = appendJSONString(b, f.d.Group)
	b = append(b, `,"degraded":`...)
	b = appendJSONString(b, f.d.Degraded)
	b = append(b, `,"intended_upstream":`...)
	b = appendJSONString(b, intended)
	b = append(b, `,"identity_source":`...)
	b = appendJSONString(b, f.d.Identity.Source)
	b = append(b, `,"latency_ms":`...)
	b = appendMillis(b, elapsed)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, f.bytesOut, 10)
	b = append(b, `,"request_id":`...)
	b = appendJSONString(b, b2s(f.reqID))
	if f.timeout != "" {
		b = append(b, `,"timeout":`...)
		b = appendJSONString(b, f.timeout)
	}
	if len(f.errMsg) > 0 {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, b2s(f.errMsg))
	}
	if f.proto != "" {
		b = append(b, `,"proto":`...)
		b = appendJSONString(b, f.proto)
	}
	if f.grpcStatus >= 0 {
		b = append(b, `,"grpc_status":`...)
		b = strconv.AppendInt(b, int64(f.grpcStatus), 10)
	}
	b = append(b, "}\n"...)
	_, _ = a.w.Write(b)
	*bp = b
	a.bufs.Put(bp)
}

// appendJSONString appends s as a JSON string: quotes, backslashes,
// control characters, U+2028 and U+2029 are escaped, and each invalid UTF-8
// byte becomes U+FFFD, as encoding/json does.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	i := 0
	// Eight bytes at a time while none of them needs a look: most of a
	// line's strings (paths, names, ids) are plain ASCII.
	for i+8 <= len(s) && plain8(binary.LittleEndian.Uint64(s2b(s[i:]))) {
		i += 8
	}
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, `\u202`...)
			b = append(b, hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// plain8 reports whether each of the eight bytes in x is printable ASCII
// other than '"' and '\\': none is below 0x20, none is 0x80 or above,
// and none is a quote or a backslash. (Each test is the exact "has a byte
// that is zero" bit trick; an answer of false only sends the bytes to the
// byte-by-byte loop.)
func plain8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	below := (x - 0x20*ones) & ^x & highs
	q := x ^ ('"' * ones)
	quote := (q - ones) & ^q & highs
	bs := x ^ ('\\' * ones)
	backslash := (bs - ones) & ^bs & highs
	return (x&highs | below | quote | backslash) == 0
}

func (a *accessLog) close(ctx context.Context) error { return a.w.Close(ctx) }

// asyncWriter decouples request goroutines from a possibly slow io.Writer.
// Write appends p to a shared buffer under a mutex and returns; it never
// blocks on the output and never wakes another goroutine for a single line.
// One goroutine swaps the buffer out and writes it every flushEvery, or
// sooner when it holds flushBytes (or half its limit, if that is less), so
// a busy gateway writes the log in batches instead of handing every line to
// another goroutine (an earlier channel-per-line design cost a goroutine
// wake-up per request and doubled the in-process request latency). Batches
// stay small enough that one write does not hold up requests: a 1 MiB write
// took the only CPU of a pinned gateway for about half a millisecond, which
// showed in its p99. When the buffer is full (queue lines of about 512
// bytes), lines are dropped and counted. It is safe for concurrent use.
type asyncWriter struct {
	out        io.Writer
	limit      int
	flushEvery time.Duration

	mu    sync.Mutex
	buf   []byte // lines waiting to be written
	spare []byte
	kick  chan struct{} // wakes the writer early; capacity 1

	dropped atomic.Uint64
	closed  atomic.Bool
	stop    chan struct{}
	done    chan struct{}
	err     error // first write error, read after done
}

// flushBytes is how much the asyncWriter buffers before it writes, at most:
// about 250 access log lines.
const flushBytes = 64 << 10

func newAsyncWriter(out io.Writer, queue int, flushEvery time.Duration) *asyncWriter {
	a := &asyncWriter{
		out:        out,
		limit:      max(queue, 1) * 512,
		flushEvery: flushEvery,
		kick:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	go a.run()
	return a
}

// Write buffers a copy of p. It never blocks on the output and never fails:
// a line that does not fit, or arrives after Close, is dropped and counted.
func (a *asyncWriter) Write(p []byte) (int, error) {
	if a.closed.Load() {
		a.dropped.Add(1)
		return len(p), nil
	}
	a.mu.Lock()
	if len(a.buf)+len(p) > a.limit {
		a.mu.Unlock()
		a.dropped.Add(1)
		return len(p), nil
	}
	a.buf = append(a.buf, p...)
	full := len(a.buf) >= min(a.limit/2, flushBytes)
	a.mu.Unlock()
	if full {
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

func (a *asyncWriter) run() {
	defer close(a.done)
	tick := time.NewTicker(a.flushEvery)
	defer tick.Stop()
	for {
		select {
		case <-a.kick:
		case <-tick.C:
		case <-a.stop:
			a.drain()
			return
		}
		a.drain()
	}
}

// drain writes out what is buffered. Write errors are counted as dropped
// lines, and the first one is kept for Close.
func (a *asyncWriter) drain() {
	a.mu.Lock()
	b := a.buf
	a.buf, a.spare = a.spare[:0], nil
	a.mu.Unlock()
	if len(b) > 0 {
		if _, err := a.out.Write(b); err != nil {
			a.dropped.Add(uint64(bytes.Count(b, []byte{'\n'})))
			if a.err == nil {
				a.err = err
			}
		}
	}
	a.mu.Lock()
	if a.spare == nil && cap(b) <= 4*a.limit {
		a.spare = b[:0]
	}
	a.mu.Unlock()
}

// Close writes what is buffered and stops the goroutine, waiting at most
// until ctx is done. It returns the first write error.
func (a *asyncWriter) Close(ctx context.Context) error {
	if !a.closed.Swap(true) {
		close(a.stop)
	}
	select {
	case <-a.done:
		return a.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
