package admin

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/strict"
)

// Viewer is how the data plane sees a request that arrived from the TCP
// peer: proxy.(*Proxy).View. Explain decides through it, so that trust, the
// client address behind trusted proxies, the normalised path and the
// decoded cookies and query are exactly those of live traffic; there is no
// second implementation of "how a request is seen" to drift from the first.
type Viewer func(req *fasthttp.Request, peer netip.Addr) attr.Request

// ExplainRequest describes a request to explain. Path is the request
// target as a client sends it (it may be percent-encoded, contain dot
// segments or a query); Cookies and Query hold decoded values, which are
// encoded the way a browser would send them. RemoteAddr is the TCP peer:
// with X-Forwarded-For among the headers, the client address is resolved
// through trusted_proxies as for live traffic.
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

// Explain runs the live decision code on a described request, with a
// trace. The request is written out as HTTP/1.1 bytes and parsed by
// fasthttp's own parser, as the data plane's listener parses what it
// receives, and view (the data plane's Viewer) sees it; the decision comes
// from the same indexed candidates as live traffic. Explain never asks a
// breaker for a probe: it only reads the breaker's state.
func Explain(snap *router.Snapshot, view Viewer, req ExplainRequest) (ExplainDecision, router.Trace, error) {
	raw, peer, err := rawRequest(req)
	if err != nil {
		return ExplainDecision{}, router.Trace{}, err
	}
	// A new request, never released: the decision and the trace alias its
	// buffers, and the answer is encoded after Explain returns.
	fr := new(fasthttp.Request)
	if err := fr.Read(bufio.NewReader(bytes.NewReader(raw))); err != nil {
		return ExplainDecision{}, router.Trace{}, strict.Errorf("", "the described request does not parse as HTTP: %v", err)
	}
	var tr router.Trace
	d := snap.Decide(view(fr, peer), &tr)
	out := ExplainDecision{Route: d.Route, Rule: d.Rule, Group: d.Group, Tag: d.Tag, Degraded: d.Degraded, UserID: d.Identity.Value, Source: d.Identity.Source, Reject: d.Reject}
	if d.Target != nil {
		out.Target = d.Target.Name
	}
	return out, tr, nil
}

// explainHost is the Host of an explained request that names none: a name
// no route can be for (RFC 6761 reserves .invalid), so that the request is
// routed as one for any host, as live HTTP/1.1 requests always have a Host
// (a target starting with "//" would otherwise be read as an authority).
const explainHost = "explain.invalid"

// rawRequest writes req out as the bytes of an HTTP/1.1 request without a
// body, and parses its remote address. Every problem is named by its field.
func rawRequest(req ExplainRequest) ([]byte, netip.Addr, error) {
	var errs []error
	method := req.Method
	if method == "" {
		method = fasthttp.MethodGet
	}
	if !attr.ValidToken(method) {
		errs = append(errs, strict.Errorf("method", "must be an HTTP method token, got %q", method))
	}
	target := req.Path
	if target == "" {
		target = "/"
	}
	if !strings.HasPrefix(target, "/") || strings.ContainsFunc(target, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		errs = append(errs, strict.Errorf("path", "must be a request target starting with \"/\", without spaces or control characters, got %q", target))
	}
	if len(req.Query) > 0 {
		sep := "?"
		if strings.Contains(target, "?") {
			sep = "&"
		}
		var q strings.Builder
		for _, k := range sortedKeys(req.Query) {
			q.WriteString(sep)
			q.WriteString(url.QueryEscape(k))
			q.WriteByte('=')
			q.WriteString(url.QueryEscape(req.Query[k]))
			sep = "&"
		}
		target += q.String()
	}
	host := req.Host
	var lines []string
	for _, k := range sortedKeys(req.Headers) {
		v := req.Headers[k]
		path := fmt.Sprintf("headers[%q]", k)
		switch {
		case !attr.ValidToken(k):
			errs = append(errs, strict.Errorf(path, "invalid header name"))
			continue
		case !attr.ValidFieldValue(v):
			errs = append(errs, strict.Errorf(path, "invalid value %q: control characters are not allowed", v))
			continue
		case strings.EqualFold(k, fasthttp.HeaderContentLength), strings.EqualFold(k, fasthttp.HeaderTransferEncoding):
			errs = append(errs, strict.Errorf(path, "an explained request has no body"))
			continue
		case strings.EqualFold(k, fasthttp.HeaderHost):
			if host == "" {
				host = v
			}
			continue
		}
		lines = append(lines, k+": "+v)
	}
	if host == "" {
		host = explainHost
	}
	if !attr.ValidFieldValue(host) || strings.ContainsAny(host, " \t") {
		errs = append(errs, strict.Errorf("host", "invalid host %q", host))
	}
	if len(req.Cookies) > 0 {
		var c strings.Builder
		for i, k := range sortedKeys(req.Cookies) {
			if !attr.ValidToken(k) {
				errs = append(errs, strict.Errorf(fmt.Sprintf("cookies[%q]", k), "invalid cookie name"))
				continue
			}
			if i > 0 {
				c.WriteString("; ")
			}
			c.WriteString(k)
			c.WriteByte('=')
			c.WriteString(url.QueryEscape(req.Cookies[k]))
		}
		lines = append(lines, fasthttp.HeaderCookie+": "+c.String())
	}
	var peer netip.Addr
	if s := req.RemoteAddr; s != "" {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			peer = ap.Addr().Unmap()
		} else if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
			peer = a.Unmap()
		} else {
			errs = append(errs, strict.Errorf("remote_addr", "must be an IP address or IP:port, got %q", s))
		}
	}
	if len(errs) > 0 {
		return nil, netip.Addr{}, errors.Join(errs...)
	}
	var b bytes.Buffer
	b.WriteString(method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\n")
	for _, l := range lines {
		b.WriteString(l + "\r\n")
	}
	b.WriteString("\r\n")
	return b.Bytes(), peer, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (s *Server) explain(w http.ResponseWriter, r *http.Request, _ principal) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var req ExplainRequest
	if err := decodeStrict(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid explain request", strict.Fields(err))
		return
	}
	snap := s.opts.Router.Load()
	d, tr, err := Explain(snap, s.opts.View, req)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid explain request", strict.Fields(err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"revision": snap.Revision, "decision": d, "trace": tr})
}
