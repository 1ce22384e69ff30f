package proxy

import (
	"bufio"
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
// Write copies p into a pooled buffer and queues it without blocking; if the
// queue is full the line is dropped and counted. One goroutine drains the
// queue into a bufio.Writer, flushed every flushEvery and on Close. It is
// safe for concurrent use.
type asyncWriter struct {
	out        *bufio.Writer
	queue      chan *[]byte
	free       sync.Pool
	flushEvery time.Duration

	dropped atomic.Uint64
	closed  atomic.Bool
	stop    chan struct{}
	done    chan struct{}
	err     error // first write error, read after done
}

func newAsyncWriter(out io.Writer, queue int, flushEvery time.Duration) *asyncWriter {
	a := &asyncWriter{
		out:        bufio.NewWriterSize(out, 64<<10),
		queue:      make(chan *[]byte, queue),
		flushEvery: flushEvery,
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	go a.run()
	return a
}

// Write queues a copy of p. It never blocks and never fails: a line that
// cannot be queued, or arrives after Close, is dropped and counted.
func (a *asyncWriter) Write(p []byte) (int, error) {
	if a.closed.Load() {
		a.dropped.Add(1)
		return len(p), nil
	}
	bp, _ := a.free.Get().(*[]byte)
	if bp == nil {
		b := make([]byte, 0, 512)
		bp = &b
	}
	*bp = append((*bp)[:0], p...)
	select {
	case a.queue <- bp:
	default:
		a.dropped.Add(1)
		a.free.Put(bp)
	}
	return len(p), nil
}

func (a *asyncWriter) run() {
	defer close(a.done)
	tick := time.NewTicker(a.flushEvery)
	defer tick.Stop()
	for {
		select {
		case bp := <-a.queue:
			a.write(bp)
		case <-tick.C:
			a.flush()
		case <-a.stop:
			for {
				select {
				case bp := <-a.queue:
					a.write(bp)
				default:
					a.flush()
					return
				}
			}
		}
	}
}

// write buffers one line. bufio.Writer errors are sticky, so after the
// first failure every line is lost; those are counted as dropped.
func (a *asyncWriter) write(bp *[]byte) {
	if _, err := a.out.Write(*bp); err != nil {
		a.dropped.Add(1)
		if a.err == nil {
			a.err = err
		}
	}
	a.free.Put(bp)
}

func (a *asyncWriter) flush() {
	if err := a.out.Flush(); err != nil && a.err == nil {
		a.err = err
	}
}

// Close drains the queue, flushes, and stops the goroutine, waiting at most
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
