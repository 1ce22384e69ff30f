package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/graygate/graygate/internal/tracing"
)

type mapHeaders map[string]string

func (h mapHeaders) Get(k string) string { return h[strings.ToLower(k)] }

// TestTracingConfig: without a tracing section the gateway has no tracer
// (off); with one, its spans reach the collector at
// <otlp_endpoint>/v1/traces when the gateway stops, and a reload that
// changes the section says it needs a restart.
func TestTracingConfig(t *testing.T) {
	if e := start(t, baseConfig, ""); e.gw.Tracer() != nil {
		t.Fatal("tracing is on without a tracing section")
	}
	var spans atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ex coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/otlp/v1/traces" || proto.Unmarshal(body, &ex) != nil {
			w.WriteHeader(404)
			return
		}
		for _, rs := range ex.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				spans.Add(int64(len(ss.Spans)))
			}
		}
	}))
	defer collector.Close()
	cfg := baseConfig + "tracing: {otlp_endpoint: \"" + collector.URL + "/otlp\", sample_ratio: 1}\n"
	e := start(t, cfg, "")
	tr := e.gw.Tracer()
	if tr == nil {
		t.Fatal("no tracer with a tracing section")
	}
	sp := tr.Start(mapHeaders{}, &tracing.ServerRequest{Method: "GET", Path: "/"})
	sp.End(200, "")

	if err := e.reload(baseConfig + "tracing: {otlp_endpoint: \"" + collector.URL + "/otlp\", sample_ratio: 0.5}\n"); err != nil {
		t.Fatal(err)
	}
	if st := e.gw.Status(); st.LastResult != "ok; restart required: tracing" {
		t.Errorf("a changed tracing section: %q", st.LastResult)
	}
	e.shutdown()
	deadline := time.Now().Add(10 * time.Second)
	for spans.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the collector got %d spans, want 1", spans.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
