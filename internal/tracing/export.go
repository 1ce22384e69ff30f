package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// exportLogEvery is how often, at most, a collector that keeps failing is
// logged again: once a minute says it is still down without a line per
// batch.
const exportLogEvery = time.Minute

// loggedExporter reports export failures through the gateway's logger.
//
// The batch span processor hands an exporter's error to otel.Handle, the
// process-wide otel error handler, which by default prints it with the
// standard library's log package: through main's default slog handler at
// INFO, without a component, once per failed batch (a line every
// BatchTimeout at low traffic, dozens a second at high), and never says
// when the collector is back. Setting otel's handler would be global
// state (see the package doc), so the exporter logs instead, to
// Options.Logger: a warning when exports start failing, then at most one
// every exportLogEvery with the spans lost since, and one line when an
// export works again. It returns nil to the processor so that otel.Handle
// does not print the failure a second time; Tracer.ForceFlush reports it.
//
// It is safe for concurrent use: the processor exports from its own
// goroutine and from ForceFlush and Shutdown.
type loggedExporter struct {
	sdktrace.SpanExporter
	log *slog.Logger
	now func() time.Time

	mu sync.Mutex
	// failing is set from a failed export until one succeeds.
	failing bool
	// lastLog is when the last warning was logged.
	lastLog time.Time
	// dropped counts the spans of failed exports since the last line
	// logged; failures counts failed exports since New, and lastErr is
	// the newest failure (for ForceFlush).
	dropped  int
	failures int64
	lastErr  error
}

func (e *loggedExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err == nil {
		if e.failing {
			e.log.Info("exporting spans again", "spans_dropped", e.dropped)
			e.failing, e.dropped = false, 0
		}
		return nil
	}
	e.failures++
	e.lastErr = err
	e.dropped += len(spans)
	if now := e.now(); !e.failing || now.Sub(e.lastLog) >= exportLogEvery {
		e.log.Warn("cannot export spans to the collector; dropping them", "error", err, "spans_dropped", e.dropped)
		e.lastLog, e.dropped = now, 0
	}
	e.failing = true
	return nil
}

// count returns how many exports have failed since New.
func (e *loggedExporter) count() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.failures
}

// failedSince returns an error naming the newest failure if an export
// failed after count returned n, else nil.
func (e *loggedExporter) failedSince(n int64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failures > n {
		return fmt.Errorf("tracing: %d span exports failed: %w", e.failures-n, e.lastErr)
	}
	return nil
}
