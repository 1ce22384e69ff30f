package tracing

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// records is a slog.Handler that keeps every record, with the attributes
// of its logger (With) and of the call, flattened by key.
type records struct {
	mu    sync.Mutex
	got   []record
	attrs []slog.Attr
	root  *records
}

type record struct {
	level slog.Level
	msg   string
	attrs map[string]any
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }

func (h *records) Handle(_ context.Context, r slog.Record) error {
	rec := record{level: r.Level, msg: r.Message, attrs: map[string]any{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.Any()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.Any()
		return true
	})
	root := h.root
	root.mu.Lock()
	defer root.mu.Unlock()
	root.got = append(root.got, rec)
	return nil
}

func (h *records) WithAttrs(as []slog.Attr) slog.Handler {
	return &records{attrs: append(append([]slog.Attr(nil), h.attrs...), as...), root: h.root}
}

func (h *records) WithGroup(string) slog.Handler { return h }

func (h *records) all() []record {
	h.root.mu.Lock()
	defer h.root.mu.Unlock()
	return append([]record(nil), h.root.got...)
}

// TestExportFailuresAreLogged drives the real OTLP/HTTP exporter against
// a collector that refuses exports, then accepts them again. Failures
// used to go to otel's global error handler (the standard library's log,
// at INFO, no component, one line per batch) while Options.Logger was
// never used; now the gateway's logger gets one warning when exports start
// failing, at most one a minute while they go on, each naming the spans
// lost, and one line when the collector is back, and ForceFlush still
// reports a failed export.
func TestExportFailuresAreLogged(t *testing.T) {
	rcv := newReceiver(t, "/v1/traces")
	var down atomic.Bool
	down.Store(true)
	// 400 is not retried by the exporter, so a failed export fails at
	// once; the receiver decodes the others.
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "collector down", http.StatusBadRequest)
			return
		}
		rcv.srv.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)

	h := &records{}
	h.root = h
	// A batch timeout longer than the test: only ForceFlush exports, so
	// each flush is one export of the spans ended before it.
	tr, err := New(Options{Endpoint: front.URL, SampleRatio: 1, BatchTimeout: time.Hour, Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	tr.exp.mu.Lock()
	tr.exp.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	tr.exp.mu.Unlock()
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	spans := func(n int) {
		for range n {
			sp := tr.Start(headers{}, &ServerRequest{Method: "GET", Path: "/x"})
			sp.End(200, "")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	warnings := func() []record {
		var out []record
		for _, r := range h.all() {
			if r.level == slog.LevelWarn {
				out = append(out, r)
			}
		}
		return out
	}

	spans(3)
	if err := tr.ForceFlush(ctx); err == nil {
		t.Fatal("ForceFlush with the collector refusing exports = nil, want an error")
	}
	w := warnings()
	if len(w) != 1 {
		t.Fatalf("after one failed export: %d warnings, want 1: %+v", len(w), h.all())
	}
	if w[0].attrs["component"] != "tracing" || w[0].attrs["endpoint"] != front.URL+TracesPath || w[0].attrs["spans_dropped"] != int64(3) || w[0].attrs["error"] == nil {
		t.Errorf("warning = %q %v, want component tracing, endpoint %s, spans_dropped 3 and the error", w[0].msg, w[0].attrs, front.URL+TracesPath)
	}

	// A collector still down within the minute is not logged again.
	spans(2)
	if err := tr.ForceFlush(ctx); err == nil {
		t.Fatal("second ForceFlush = nil, want an error")
	}
	if w := warnings(); len(w) != 1 {
		t.Fatalf("a second failure within %v: %d warnings, want 1", exportLogEvery, len(w))
	}
	// A minute on, it is, with the spans lost since the first line.
	advance(exportLogEvery)
	spans(1)
	if err := tr.ForceFlush(ctx); err == nil {
		t.Fatal("third ForceFlush = nil, want an error")
	}
	if w := warnings(); len(w) != 2 || w[1].attrs["spans_dropped"] != int64(3) {
		t.Fatalf("after %v of failures: warnings %+v, want a second one with spans_dropped 3", exportLogEvery, w)
	}

	// Back: one line, and the span reaches the collector.
	down.Store(false)
	spans(1)
	if err := tr.ForceFlush(ctx); err != nil {
		t.Fatalf("ForceFlush with the collector back = %v, want nil", err)
	}
	var back []record
	for _, r := range h.all() {
		if r.msg == "exporting spans again" {
			back = append(back, r)
		}
	}
	if len(back) != 1 || back[0].attrs["spans_dropped"] != int64(0) {
		t.Errorf("recovery lines = %+v, want one with spans_dropped 0", back)
	}
	if got, bad := rcv.got(); len(got) != 1 || len(bad) != 0 {
		t.Errorf("receiver got %d spans (bad %v), want the 1 sent after the recovery", len(got), bad)
	}
	if w := warnings(); len(w) != 2 {
		t.Errorf("warnings after the recovery = %d, want still 2", len(w))
	}
}
