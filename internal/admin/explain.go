package admin

import (
	"net/http"
	"net/netip"
	"strings"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/strict"
)

// ExplainRequest describes a request to explain.
type ExplainRequest struct {
	Method     string            `json:"method,omitempty"`
	Host       string            `json:"host,omitempty"`
	Path       string            `json:"path,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	Cookies    map[string]string `json:"cookies,omitempty"`
	Query      map[string]string `json:"query,omitempty"`
	RemoteAddr string            `json:"remote_addr,omitempty"`
}

// ExplainDecision is the decision part of an explain answer.
type ExplainDecision struct {
	Route    string `json:"route"`
	Rule     string `json:"rule"`
	Group    string `json:"group"`
	Target   string `json:"target"`
	Tag      string `json:"tag,omitempty"`
	Degraded string `json:"degraded,omitempty"`
	UserID   string `json:"user_id"`
	Source   string `json:"identity_source"`
	// Reject is the 400 the data plane would answer instead of routing
	// (an identity over identity.max_length).
	Reject string `json:"reject,omitempty"`
}

// Explain runs the live decision code on a described request, with a trace.
func Explain(snap *router.Snapshot, req ExplainRequest) (ExplainDecision, router.Trace, error) {
	m := &attr.Map{MethodV: req.Method, HostV: req.Host, PathV: req.Path, Headers: req.Headers, Cookies: req.Cookies, Queries: req.Query}
	if m.MethodV == "" {
		m.MethodV = "GET"
	}
	if m.PathV == "" {
		m.PathV = "/"
	}
	if m.HostV == "" {
		if h, ok := m.Header("Host"); ok {
			m.HostV = h
		}
	}
	if req.RemoteAddr != "" {
		s := req.RemoteAddr
		if ap, err := netip.ParseAddrPort(s); err == nil {
			m.IP = ap.Addr().Unmap()
		} else if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
			m.IP = a.Unmap()
		} else {
			return ExplainDecision{}, router.Trace{}, strict.Errorf("remote_addr", "must be an IP address or IP:port, got %q", s)
		}
	}
	var tr router.Trace
	d := snap.Decide(m, &tr)
	out := ExplainDecision{Route: d.Route, Rule: d.Rule, Group: d.Group, Tag: d.Tag, Degraded: d.Degraded, UserID: d.Identity.Value, Source: d.Identity.Source, Reject: d.Reject}
	if d.Target != nil {
		out.Target = d.Target.Name
	}
	return out, tr, nil
}

func (s *Server) explain(w http.ResponseWriter, r *http.Request, _ principal) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var req ExplainRequest
	if err := strict.Decode(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid explain request", strict.Fields(err))
		return
	}
	snap := s.opts.Router.Load()
	d, tr, err := Explain(snap, req)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid explain request", strict.Fields(err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"revision": snap.Revision, "decision": d, "trace": tr})
}
