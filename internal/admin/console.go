package admin

import (
	"fmt"
	"net/http"
	"time"

	"github.com/graygate/graygate/internal/console"
	"github.com/graygate/graygate/internal/strict"
	"github.com/graygate/graygate/internal/traffic"
)

// routeConsole adds the operator console at /ui/ and the two API routes
// written for it: whoami (so the console shows a viewer no write control)
// and the live traffic windows. The console's files need no token: they
// are static, and every API call they make carries the operator's.
func (s *Server) routeConsole() {
	s.mux.Handle("GET /ui/", http.StripPrefix("/ui", console.New()))
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusFound)
	})
	s.handle("GET /api/v1/whoami", RoleViewer, s.whoami)
	if s.opts.Traffic != nil {
		s.handle("GET /api/v1/stats", RoleViewer, s.stats)
	}
}

func (s *Server) whoami(w http.ResponseWriter, r *http.Request, p principal) {
	writeJSON(w, http.StatusOK, map[string]string{"name": p.name, "role": p.role})
}

// trendSpan is how far back the per-second request counts of
// /api/v1/stats reach, for the console's sparklines.
const trendSpan = time.Minute

// statsSeries is one (rule, group) in GET /api/v1/stats.
type statsSeries struct {
	traffic.SeriesStats
	// Trend holds the requests of each bucket of the last trendSpan,
	// oldest first.
	Trend []uint64 `json:"trend"`
}

// stats answers GET /api/v1/stats?window=10s: per rule and group, the
// request rate, error rate and p99 latency over the window (default 10 s).
func (s *Server) stats(w http.ResponseWriter, r *http.Request, _ principal) {
	tr := s.opts.Traffic
	window := 10 * time.Second
	if v := r.URL.Query().Get("window"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < tr.Width() || d > tr.Span() {
			writeError(w, http.StatusBadRequest, "invalid stats request", []strict.FieldError{{Path: "window",
				Message: fmt.Sprintf("must be a duration from %v to %v, got %q", tr.Width(), tr.Span(), v)}})
			return
		}
		window = d
	}
	width := tr.Width()
	n := int(trendSpan / width)
	exp := tr.Export(trendSpan)
	type key struct{ rule, group string }
	trends := map[key][]uint64{}
	for _, sr := range exp.Series {
		counts := make([]uint64, n)
		for _, b := range sr.Buckets {
			// The last point is the last whole bucket, which ends at exp.End.
			if i := n - int((exp.End-b.Start)/exp.WidthMs); i >= 0 && i < n {
				counts[i] = b.Requests
			}
		}
		trends[key{sr.Rule, sr.Group}] = counts
	}
	out := []statsSeries{}
	for _, st := range tr.Windows(window) {
		t := trends[key{st.Rule, st.Group}]
		if t == nil {
			t = make([]uint64, n)
		}
		out = append(out, statsSeries{SeriesStats: st, Trend: t})
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"window_s": window.Seconds(), "bucket_s": width.Seconds(), "span_s": tr.Span().Seconds(),
		"latency": "p99_ms is the upper bound of a fixed log-spaced latency bucket: never below the true p99, at most 25% above it",
		"series":  out,
	})
}
