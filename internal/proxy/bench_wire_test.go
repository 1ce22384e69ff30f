package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/graygate/graygate/internal/mirror"
	"github.com/graygate/graygate/internal/tracing"
)

// BenchmarkTracing is BenchmarkProxy/plain's request path with tracing
// off (the hot path unchanged: 0 allocations) and with a tracer at
// sample_ratio 0.01 (new traces, 1% sampled, exported to a no-op
// exporter through the batch processor), so that the two can be compared
// in one run: go test -run '^$' -bench BenchmarkTracing -count 6.
func BenchmarkTracing(b *testing.B) {
	backend := fasthttpBackend(b)
	d := staticDecider{Rule: "r1", Group: "stable", Tag: "stable", Target: poolOf("stable", backend)}
	onDone := func(*Done) {}
	b.Run("off", func(b *testing.B) {
		_, addr := startProxy(b, Options{OnDone: onDone}, d)
		benchRequests(b, addr)
	})
	b.Run("ratio_0.01", func(b *testing.B) {
		tr, err := tracing.New(tracing.Options{SampleRatio: 0.01, Exporter: tracetest.NewNoopExporter()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
		_, addr := startProxy(b, Options{OnDone: onDone, Tracer: tr}, d)
		benchRequests(b, addr)
	})
}

// BenchmarkMirrorSlowTarget reports the primary's p99 latency
// (p99-µs/op) without a mirror and with every request mirrored to a
// target that sleeps 2 s before answering (one worker, a queue of 4: the
// copies beyond it are dropped). The two should be within noise: the
// mirror is fire and forget.
func BenchmarkMirrorSlowTarget(b *testing.B) {
	backend := fasthttpBackend(b)
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(2 * time.Second):
		case <-release:
		}
		_, _ = io.WriteString(w, "slow")
	}))
	b.Cleanup(slow.Close)
	b.Cleanup(func() { close(release) })
	set, sp := newMirror(b, "slow", poolOf("candidate", addrOf(slow)), nil, 1<<10, mirror.Options{Workers: 1, Queue: 4})
	for _, tt := range []struct {
		name string
		d    staticDecider
	}{
		{"no_mirror", staticDecider{Group: "default", Target: poolOf("stable", backend)}},
		{"slow_mirror", staticDecider{Group: "default", Target: poolOf("stable", backend), Mirror: sp}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			_, addr := startProxy(b, Options{Mirrors: set}, tt.d)
			do := itemsRequester(b, addr)
			var lat []time.Duration
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				do()
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs/op")
		})
	}
}
