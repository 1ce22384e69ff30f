package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/graygate/graygate/internal/router"
)

// DefaultDegradationLogQueue is how many degraded requests may wait for the
// logger before they are only counted.
const DefaultDegradationLogQueue = 1024

// degradeLog records every degraded request (breaker, rollback, fallback)
// through the proxy's slog logger, as seed 004 §3.3.2 asks ("降级后的结果应记录
// 日志，用于事后分析和灰度效果评估，避免数据丢失"), whether or not the access log
// is on.
//
// The logger's handler may be slow or synchronous (stderr, a file), and a
// tripped breaker turns every gray request into a degraded one, so the
// request never calls it: it queues a small value, without allocating, and
// one goroutine hands the records to the handler, each with the time the
// request ended. When the queue is full a record is counted instead of
// queued, and once the queue has drained the goroutine logs one summary
// with the count ("degraded requests not logged individually"), so a burst
// is never silently lost; DegradationLogDropped exposes the total. The
// access log, when on, has a line for every request with the same fields.
type degradeLog struct {
	h       slog.Handler
	queue   chan degradeRecord
	dropped atomic.Uint64
	closed  atomic.Bool
	stop    chan struct{}
	done    chan struct{}
}

// degradeRecord is what the writer goroutine needs of a degraded request.
// Its strings come from the decision and the pools (immutable snapshot
// values), never from the request's buffers, so it outlives the exchange.
type degradeRecord struct {
	at                               time.Time
	degraded, rule, group, source    string
	intended, actual, addr, grayAddr string
	experiment                       bool
	status                           int
	cause                            error // the gray failure, for a fallback
}

func newDegradeLog(h slog.Handler, queue int) *degradeLog {
	d := &degradeLog{
		h:     h,
		queue: make(chan degradeRecord, queue),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go d.run()
	return d
}

// record queues ex's degradation. It never blocks.
func (d *degradeLog) record(f *flow, at time.Time) {
	if !d.h.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	if d.closed.Load() {
		d.dropped.Add(1)
		return
	}
	r := degradeRecord{
		at: at, degraded: f.d.Degraded, rule: f.d.Rule, group: f.d.Group, source: f.d.Identity.Source,
		grayAddr: f.fallbackAddr, status: f.status, cause: f.fallbackErr, experiment: f.d.Experiment != "",
	}
	if f.d.Intended != nil {
		r.intended = f.d.Intended.Name
	}
	if f.d.Target != nil {
		r.actual = f.d.Target.Name
	}
	if f.inst != nil {
		r.addr = f.inst.Addr
	}
	select {
	case d.queue <- r:
	default:
		d.dropped.Add(1)
	}
}

func (d *degradeLog) run() {
	defer close(d.done)
	var reported uint64
	for {
		select {
		case r := <-d.queue:
			d.write(r)
			if len(d.queue) == 0 {
				reported = d.reportDropped(reported)
			}
		case <-d.stop:
			for {
				select {
				case r := <-d.queue:
					d.write(r)
				default:
					d.reportDropped(reported)
					return
				}
			}
		}
	}
}

func (d *degradeLog) write(r degradeRecord) {
	rec := slog.NewRecord(r.at, slog.LevelInfo, "degraded request", 0)
	rec.AddAttrs(
		slog.String("degraded", r.degraded),
		slog.String("reason", r.reason()),
		slog.String("rule", r.rule),
		slog.String("group", r.group),
		slog.String("intended", r.intended),
		slog.String("actual", r.actual),
		slog.String("upstream", r.addr),
		slog.String("identity_source", r.source),
		slog.Int("status", r.status),
	)
	_ = d.h.Handle(context.Background(), rec)
}

// reason says why the request was degraded, for people reading the log.
// It is built here, off the request path.
func (r *degradeRecord) reason() string {
	switch r.degraded {
	case router.DegradedBreaker:
		return "the gray target's circuit breaker is open"
	case router.DegradedRollback:
		return "the rule is rolled back"
	case router.DegradedFallback:
		_, why := classify(r.cause)
		if r.experiment {
			// An experiment group's own upstream failed; the control
			// group's answered, and the request stays in its group.
			if r.grayAddr == "" {
				return fmt.Sprintf("group %q upstream %q %s before answering: %v", r.group, r.intended, why, r.cause)
			}
			return fmt.Sprintf("group %q upstream %q (%s) %s before answering: %v", r.group, r.intended, r.grayAddr, why, r.cause)
		}
		if r.grayAddr == "" {
			return fmt.Sprintf("gray upstream %q %s before answering: %v", r.intended, why, r.cause)
		}
		return fmt.Sprintf("gray upstream %q (%s) %s before answering: %v", r.intended, r.grayAddr, why, r.cause)
	}
	return r.degraded
}

// reportDropped logs the records dropped since the last report and returns
// the new total reported.
func (d *degradeLog) reportDropped(reported uint64) uint64 {
	n := d.dropped.Load()
	if n == reported {
		return n
	}
	rec := slog.NewRecord(time.Now(), slog.LevelWarn, "degraded requests not logged individually", 0)
	rec.AddAttrs(slog.Uint64("count", n-reported), slog.Uint64("total", n))
	_ = d.h.Handle(context.Background(), rec)
	return n
}

// close stops the goroutine after it has logged what is queued, waiting at
// most until ctx is done.
func (d *degradeLog) close(ctx context.Context) error {
	if !d.closed.Swap(true) {
		close(d.stop)
	}
	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
