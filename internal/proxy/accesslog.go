package proxy

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// accessLog writes one JSON line per request through log/slog's JSON
// handler into an asyncWriter.
type accessLog struct {
	logger *slog.Logger
	w      *asyncWriter
}

func newAccessLog(out io.Writer, queue int, flushEvery time.Duration) *accessLog {
	w := newAsyncWriter(out, queue, flushEvery)
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{
		// An access line is a record, not a message: drop level and msg.
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && (a.Key == slog.LevelKey || a.Key == slog.MessageKey) {
				return slog.Attr{}
			}
			return a
		},
	})
	return &accessLog{logger: slog.New(h), w: w}
}

// record logs ex. The strings passed alias the exchange's buffers; the JSON
// handler has encoded them into its own buffer by the time LogAttrs returns.
func (a *accessLog) record(ex *exchange, elapsed time.Duration) {
	upstreamAddr, pool, intended := "", "", ""
	if ex.inst != nil {
		upstreamAddr = ex.inst.Addr
	}
	if ex.d.Target != nil {
		pool = ex.d.Target.Name
	}
	if ex.d.Intended != nil {
		intended = ex.d.Intended.Name
	}
	a.logger.LogAttrs(context.Background(), slog.LevelInfo, "",
		slog.String("method", b2s(ex.method)),
		slog.String("path", b2s(ex.path)),
		slog.Int("status", ex.status),
		slog.String("upstream", upstreamAddr),
		slog.String("pool", pool),
		slog.String("rule", ex.d.Rule),
		slog.String("group", ex.d.Group),
		slog.String("degraded", ex.d.Degraded),
		slog.String("intended_upstream", intended),
		slog.String("identity_source", ex.d.Identity.Source),
		slog.Float64("latency_ms", float64(elapsed)/float64(time.Millisecond)),
		slog.Int64("bytes", ex.bytesOut),
	)
}

func (a *accessLog) close(ctx context.Context) error { return a.w.Close(ctx) }

// asyncWriter decouples request goroutines from a possibly slow io.Writer.
// Write appends p to a shared buffer under a mutex and returns; it never
// blocks on the output and never wakes another goroutine for a single line.
// One goroutine swaps the buffer out and writes it every flushEvery, or
// sooner when the buffer is half full, so a busy gateway writes the log in
// large batches instead of handing every line to another goroutine (an
// earlier channel-per-line design cost a goroutine wake-up per request and
// doubled the in-process request latency). When the buffer is full (queue
// lines of about 512 bytes), lines are dropped and counted. It is safe for
// concurrent use.
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
	half := len(a.buf) >= a.limit/2
	a.mu.Unlock()
	if half {
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
