package proxy

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/identity"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/testport"
)

// jsonLines decodes a buffer of JSON lines.
func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(s), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// TestDegradationRecords: every degraded request (breaker and rollback,
// decided by the router, and fallback, decided here) leaves a record with
// its reason, intended and actual targets in the access log and, whether
// or not the access log is on, in the proxy's logger (seed 004 §3.3.2).
func TestDegradationRecords(t *testing.T) {
	stable, _ := echoBackend(t, "stable")
	grayDown := testport.Refused(t)
	stablePool, grayPool := poolOf("stable", addrOf(stable)), poolOf("gray", grayDown)
	id := identity.ID{Value: "u1", Source: "header:X-User-Id"}
	tests := []struct {
		name         string
		d            router.Decision
		wantDegraded string
		wantReason   string
	}{
		{
			name:         "breaker",
			d:            router.Decision{Rule: "r1", Group: "stable", Target: stablePool, Stable: stablePool, Degraded: "breaker", Intended: grayPool, Identity: id},
			wantDegraded: "breaker", wantReason: "the gray target's circuit breaker is open",
		},
		{
			name:         "rollback",
			d:            router.Decision{Rule: "r1", Group: "stable", Target: stablePool, Stable: stablePool, Degraded: "rollback", Intended: grayPool, Identity: id},
			wantDegraded: "rollback", wantReason: "the rule is rolled back",
		},
		{
			name:         "fallback",
			d:            router.Decision{Rule: "r1", Group: "gray", Target: grayPool, Stable: stablePool, Identity: id},
			wantDegraded: "fallback", wantReason: `gray upstream "gray" (` + grayDown + `) unreachable before answering: `,
		},
	}
	for _, accessLogOn := range []bool{true, false} {
		for _, tt := range tests {
			name := tt.name
			if !accessLogOn {
				name += " without access log"
			}
			t.Run(name, func(t *testing.T) {
				var access, logged syncBuffer
				opts := Options{}
				if accessLogOn {
					opts.AccessLog = &access
				}
				logger := slog.New(slog.NewJSONHandler(&logged, nil))
				p := New(opts, staticDecider(tt.d), logger)
				ln := listenLoopback(t)
				served := make(chan error, 1)
				go func() { served <- p.Serve(ln) }()
				resp, _ := rawExchange(t, ln.Addr().String(), "GET", "GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
				if resp.StatusCode != 200 || resp.Header.Get("X-Gray-Degraded") != tt.wantDegraded {
					t.Errorf("response %d, X-Gray-Degraded %q; want 200, %q", resp.StatusCode, resp.Header.Get("X-Gray-Degraded"), tt.wantDegraded)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := p.Shutdown(ctx); err != nil {
					t.Fatal(err)
				}
				if err := <-served; err != nil {
					t.Fatal(err)
				}

				var rec map[string]any
				for _, m := range jsonLines(t, logged.String()) {
					if m["msg"] == "degraded request" {
						if rec != nil {
							t.Errorf("two degradation records for one request")
						}
						rec = m
					}
				}
				if rec == nil {
					t.Fatalf("no degradation record in the log:\n%s", logged.String())
				}
				want := map[string]any{
					"level": "INFO", "component": "proxy", "degraded": tt.wantDegraded, "rule": "r1",
					"intended": "gray", "actual": "stable", "upstream": addrOf(stable),
					"identity_source": "header:X-User-Id", "status": float64(200),
				}
				for k, v := range want {
					if rec[k] != v {
						t.Errorf("log record %s = %v, want %v", k, rec[k], v)
					}
				}
				if r, _ := rec["reason"].(string); !strings.HasPrefix(r, tt.wantReason) {
					t.Errorf("log record reason = %q, want it to start with %q", r, tt.wantReason)
				}

				if !accessLogOn {
					return
				}
				lines := jsonLines(t, access.String())
				if len(lines) != 1 {
					t.Fatalf("access log has %d lines, want 1", len(lines))
				}
				for k, v := range map[string]any{
					"degraded": tt.wantDegraded, "intended_upstream": "gray", "pool": "stable",
					"upstream": addrOf(stable), "group": "stable",
				} {
					if lines[0][k] != v {
						t.Errorf("access log %s = %v, want %v", k, lines[0][k], v)
					}
				}
			})
		}
	}
}

// blockingHandler is a slog handler whose Handle blocks until released.
type blockingHandler struct {
	release chan struct{}
	mu      sync.Mutex
	records []slog.Record
}

func (h *blockingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *blockingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *blockingHandler) WithGroup(string) slog.Handler            { return h }
func (h *blockingHandler) Handle(_ context.Context, r slog.Record) error {
	<-h.release
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r)
	return nil
}

// TestDegradationLogNeverBlocks: with a logger that does not return,
// degraded requests are still served at once; what does not fit in the
// queue is counted and summarised when the logger recovers.
func TestDegradationLogNeverBlocks(t *testing.T) {
	stable, _ := echoBackend(t, "stable")
	pool := poolOf("stable", addrOf(stable))
	h := &blockingHandler{release: make(chan struct{})}
	p := New(Options{}, staticDecider{Rule: "r1", Group: "stable", Target: pool, Degraded: "breaker", Intended: poolOf("gray", "127.0.0.1:1")}, slog.New(h))
	p.degrade.close(context.Background()) //nolint:errcheck // replaced by a small queue
	p.degrade = newDegradeLog(h, 4)
	ln := listenLoopback(t)
	served := make(chan error, 1)
	go func() { served <- p.Serve(ln) }()

	const n = 20
	c := httpClient(t)
	start := time.Now()
	for i := range n {
		resp, err := c.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("%d requests took %v with a stuck logger", n, d)
	}
	// A request is recorded before its response is sent, so all n are in:
	// one is with the handler (or not yet), 4 wait in the queue, the rest
	// are counted.
	dropped := p.DegradationLogDropped()
	if dropped != n-5 && dropped != n-4 {
		t.Errorf("%d records dropped, want %d (or %d if the writer had not started)", dropped, n-5, n-4)
	}
	close(h.release)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var individual int
	var summarised uint64
	for _, r := range h.records {
		switch r.Message {
		case "degraded request":
			individual++
		case "degraded requests not logged individually":
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "count" {
					summarised += a.Value.Uint64()
				}
				return true
			})
		}
	}
	if uint64(individual) != n-dropped || summarised != dropped {
		t.Errorf("%d records logged and %d summarised, want %d and %d", individual, summarised, n-dropped, dropped)
	}
}
