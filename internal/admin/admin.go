// Package admin serves graygate's admin API on net/http: rules with
// versions, history and revert, one-click rollback, explain, status, and
// experiment results and events. Every /api route needs a bearer token;
// tokens are named and carry a role ("admin" may write, "viewer" may only
// read, "events" may only post experiment events, for application
// backends). Errors are JSON objects that list every problem with its
// path, as the rule and config decoders report them.
package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/graygate/graygate/internal/experiment"
	"github.com/graygate/graygate/internal/mirror"
	"github.com/graygate/graygate/internal/notify"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/rulekey"
	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/strict"
	"github.com/graygate/graygate/internal/traffic"
)

// MaxBody is the largest request body the admin API reads.
const MaxBody = 1 << 20

// Roles.
const (
	RoleAdmin  = "admin"
	RoleViewer = "viewer"
	// RoleEvents may post experiment events (POST /api/v1/events) and
	// nothing else: the token to give application backends.
	RoleEvents = "events"
)

// Token is a named bearer token.
type Token struct {
	Name  string
	Value string
	Role  string
}

// Options wires the admin API to the rest of the gateway.
type Options struct {
	Store  store.Store
	Router *router.Router
	// View is how the data plane sees a request (proxy.(*Proxy).View).
	// Explain decides through it, so that what it reports is what live
	// traffic gets; without it POST /api/v1/explain is not routed.
	View Viewer
	// Compile validates and compiles one rule against the current config.
	Compile func(r rule.Rule) (*rule.Compiled, error)
	// Vet, when set, checks a rule that compiles against the outside
	// services it names (a rollout's Prometheus parses its queries), for
	// a PUT and its dry run; what it finds refuses the write as invalid.
	Vet func(ctx context.Context, r rule.Rule) []strict.FieldError
	// Commit makes one write serve: it checks that the state change leads
	// to compiles and serves under the current config, runs write (the
	// store call, which returns the new store revision) and returns once
	// the new rules serve. An error wrapping ErrWouldNotServe means nothing
	// was written; one wrapping ErrNotServing means the store has the
	// change but it does not serve; any other error is write's. A nil
	// write only checks.
	Commit func(ctx context.Context, change Change, write func(ctx context.Context) (revision int64, err error)) error
	// Status returns the gateway's status document.
	Status func() any
	// Ready reports whether the gateway should receive traffic.
	Ready func() error
	// Metrics serves /metrics; nil leaves it unrouted.
	Metrics http.Handler
	// Traffic feeds GET /api/v1/stats; nil leaves it unrouted.
	Traffic *traffic.Set
	// Notify tells the webhooks about a committed rollback or resume
	// (gateway.Gateway.Notify); it must not block. Nil sends nothing.
	Notify func(notify.Event)
	// Mirrors feeds GET /api/v1/rules/{key}/diff; nil leaves it unrouted.
	Mirrors *mirror.Set
	// Rollout serves the rollout routes; nil leaves them unrouted.
	Rollout RolloutControl
	// Experiments serves GET /api/v1/experiments/{key}/results and POST
	// /api/v1/events; nil leaves them unrouted.
	Experiments *experiment.Recorder
	Tokens      []Token
	Logger      *slog.Logger
}

// Change describes a write for Options.Commit to check before it is made.
type Change struct {
	// Key is the rule written, or "" for the global rollback switch.
	Key string
	// Rule is the rule JSON a put or a revert stores; nil otherwise.
	Rule json.RawMessage
	// Delete removes the rule.
	Delete bool
	// RolledBack, when set, is the new rollback state of Key, or of every
	// rule when Key is "".
	RolledBack *bool
}

// Errors of Options.Commit.
var (
	// ErrWouldNotServe: the change would not serve under the current
	// config and rules, and nothing was written.
	ErrWouldNotServe = errors.New("the change would not serve; nothing was changed")
	// ErrNotServing: the store has the change, but the gateway does not
	// serve it.
	ErrNotServing = errors.New("the change is stored but does not serve")
)

// Server is the admin API handler.
type Server struct {
	opts Options
	mux  *http.ServeMux
	// tokens is replaced whole by SetTokens; a request reads it once.
	tokens atomic.Pointer[[]hashedToken]
	log    *slog.Logger
}

type hashedToken struct {
	name, role string
	sum        [32]byte
}

// New builds the admin API.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, mux: http.NewServeMux(), log: opts.Logger.With("component", "admin")}
	s.SetTokens(opts.Tokens)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok\n")
	})
	s.mux.HandleFunc("GET /readyz", s.readyz)
	if opts.Metrics != nil {
		s.mux.Handle("GET /metrics", opts.Metrics)
	}
	s.handle("GET /api/v1/rules", RoleViewer, s.listRules)
	s.handle("GET /api/v1/rules/{key}", RoleViewer, s.getRule)
	s.handle("PUT /api/v1/rules/{key}", RoleAdmin, s.putRule)
	s.handle("DELETE /api/v1/rules/{key}", RoleAdmin, s.deleteRule)
	s.handle("GET /api/v1/rules/{key}/history", RoleViewer, s.history)
	if opts.Mirrors != nil {
		s.handle("GET /api/v1/rules/{key}/diff", RoleViewer, s.ruleDiff)
	}
	s.handle("POST /api/v1/rules/{key}/revert", RoleAdmin, s.revert)
	s.handle("POST /api/v1/rules/{key}/rollback", RoleAdmin, s.rollbackRule(true))
	s.handle("POST /api/v1/rules/{key}/resume", RoleAdmin, s.rollbackRule(false))
	s.handle("POST /api/v1/rollback", RoleAdmin, s.rollbackAll(true))
	s.handle("POST /api/v1/resume", RoleAdmin, s.rollbackAll(false))
	if opts.View != nil {
		s.handle("POST /api/v1/explain", RoleViewer, s.explain)
	}
	s.handle("GET /api/v1/status", RoleViewer, s.status)
	s.handle("GET /api/v1/layers", RoleViewer, s.layers)
	s.routeRollouts()
	if opts.Experiments != nil {
		s.handle("GET /api/v1/experiments/{key}/results", RoleViewer, s.experimentResults)
		s.handle("POST /api/v1/events", RoleEvents, s.postEvents)
	}
	s.routeConsole()
	s.mux.HandleFunc("/api/", s.noEndpoint)
	// Without it, ServeMux would redirect /api to /api/ with an HTML body.
	s.mux.HandleFunc("/api", s.noEndpoint)
	return s
}

// noEndpoint answers a path of the API that no route serves: 405 with
// Allow when the path is an endpoint's, 404 otherwise.
func (s *Server) noEndpoint(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authenticate(w, r); !ok {
		return
	}
	if allow := s.allowed(r); len(allow) > 0 {
		// RFC 9110 section 15.5.6: the path exists, the method does not.
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(allow, ", ")), nil)
		return
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path), nil)
}

// allowed returns the methods the API serves on r's path (none when the
// path is not one of its endpoints).
func (s *Server) allowed(r *http.Request) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" && pattern != "/api/" && !strings.HasPrefix(pattern, "/") {
			out = append(out, m)
		}
	}
	if slices.Contains(out, http.MethodGet) {
		out = append(out, http.MethodHead)
	}
	return out
}

// SetTokens replaces the accepted tokens, for a config reload: a token no
// longer listed gets 401 from the next request that arrives after
// SetTokens returns. It is safe for concurrent use with requests.
func (s *Server) SetTokens(tokens []Token) {
	hashed := make([]hashedToken, 0, len(tokens))
	for _, t := range tokens {
		hashed = append(hashed, hashedToken{name: t.Name, role: t.Role, sum: sha256.Sum256([]byte(t.Value))})
	}
	s.tokens.Store(&hashed)
}

// ServeHTTP implements http.Handler. A request that ServeMux would
// redirect to the canonical form of its path ("/api//v1/rules",
// "/api/v1/x/../rules", "/x/../api/v1/rules") is answered 404 in the API's
// JSON shape, naming the canonical path, when either path is the API's:
// an HTML body is no answer for an API client, and a client that follows
// a 307 or 308 sends a write again, to a path it did not name. The paths
// outside the API (the console, /healthz, /metrics) keep ServeMux's
// redirect, which is what a browser wants.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.EscapedPath() // what ServeMux cleans and matches
	if c := canonicalPath(p); c != p && (isAPIPath(p) || isAPIPath(c)) {
		if _, ok := s.authenticate(w, r); !ok {
			return
		}
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s is not a canonical path; use %s", r.Method, p, c), nil)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// canonicalPath is the escaped path p as ServeMux routes it: cleaned of
// empty, "." and ".." segments, keeping a trailing slash. An escaped
// slash or dot ("a%2F..%2Fb") is part of a segment, as it is for
// ServeMux, not a separator.
func canonicalPath(p string) string {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// isAPIPath reports whether the escaped path p is under /api.
func isAPIPath(p string) bool { return p == "/api" || strings.HasPrefix(p, "/api/") }

type principal struct{ name, role string }

func (s *Server) handle(pattern, role string, h func(http.ResponseWriter, *http.Request, principal)) {
	// Known when the route is added, not worked out per request.
	namesRule, history := strings.Contains(pattern, "/rules/{key}"), strings.HasSuffix(pattern, "/history")
	var params []string // the query parameters a change takes
	if role == RoleAdmin {
		params = []string{"reason"}
		if strings.HasPrefix(pattern, http.MethodPut+" ") {
			params = []string{"dry_run", "reason"}
		}
	}
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		p, ok := s.authenticate(w, r)
		if !ok {
			return
		}
		if !allowed(role, p.role) {
			msg := fmt.Sprintf("token %q has role %q, which may not change anything", p.name, p.role)
			if p.role == RoleEvents {
				msg = fmt.Sprintf("token %q has role %q, which may only POST /api/v1/events", p.name, p.role)
			}
			writeError(w, http.StatusForbidden, msg, nil)
			return
		}
		if namesRule && !validKeyInURL(w, r, history) {
			return
		}
		if params != nil {
			if err := checkQuery(r, params); err != nil {
				writeError(w, http.StatusBadRequest, "invalid query; nothing was changed", strict.Fields(err))
				return
			}
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
		h(w, r, p)
	})
}

// checkQuery reports every problem of a change's query: a parameter it
// does not take (a mistyped ?dryrun=1 would otherwise be ignored, and the
// change made for real), one given twice (?dry_run=1&dry_run=0), or a
// query that does not parse (URL.Query drops a malformed pair such as
// dry_run=%zz, so it too would be a write). params are the ones it takes.
func checkQuery(r *http.Request, params []string) error {
	if r.URL.RawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return strict.Errorf("", "malformed query %q: %v", r.URL.RawQuery, err)
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(q)) {
		switch {
		case !slices.Contains(params, name):
			errs = append(errs, strict.Errorf(name, "unknown query parameter: %s %s takes %s", r.Method, r.Pattern[strings.IndexByte(r.Pattern, ' ')+1:], strings.Join(params, " and ")))
		case len(q[name]) > 1:
			errs = append(errs, strict.Errorf(name, "is given %d times; give it once", len(q[name])))
		}
	}
	return errors.Join(errs...)
}

// validKeyInURL checks the rule key in r's URL, and answers 400 with
// details naming key when it is malformed. It is the one answer for a
// malformed key on every endpoint that names a rule (GET, PUT, DELETE,
// history, diff, revert, rollback, resume, rollout), given before the
// endpoint looks at anything else. history admits store.GlobalKey: the
// global rollback flag has a history too.
func validKeyInURL(w http.ResponseWriter, r *http.Request, history bool) bool {
	key := r.PathValue("key")
	if rule.ValidKey(key) || history && key == store.GlobalKey {
		return true
	}
	writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid rule key %q in the URL", key),
		[]strict.FieldError{{Path: "key", Message: fmt.Sprintf("invalid key %q in the URL: must match %s", key, rulekey.Pattern)}})
	return false
}

// allowed reports whether a token of role may use a route that needs
// route: admin routes take admin tokens, viewer routes admin and viewer
// tokens, the events route admin and events tokens.
func allowed(route, role string) bool {
	switch route {
	case RoleAdmin:
		return role == RoleAdmin
	case RoleViewer:
		return role == RoleAdmin || role == RoleViewer
	case RoleEvents:
		return role == RoleAdmin || role == RoleEvents
	}
	return false
}

// authenticate checks the bearer token in constant time against every
// configured token. Tokens are never read from the query string.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (principal, bool) {
	tokens := *s.tokens.Load()
	if len(tokens) == 0 {
		writeError(w, http.StatusUnauthorized, "no admin token is configured: start graygate with --admin-token or GRAYGATE_ADMIN_TOKEN", nil)
		return principal{}, false
	}
	auth := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="graygate"`)
		writeError(w, http.StatusUnauthorized, "missing bearer token: send Authorization: Bearer <token>", nil)
		return principal{}, false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	var found *hashedToken
	for i := range tokens {
		if subtle.ConstantTimeCompare(sum[:], tokens[i].sum[:]) == 1 && found == nil {
			found = &tokens[i]
		}
	}
	if found == nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="graygate", error="invalid_token"`)
		writeError(w, http.StatusUnauthorized, "invalid bearer token", nil)
		return principal{}, false
	}
	return principal{name: found.name, role: found.role}, true
}

// errorBody is the JSON shape of every error.
type errorBody struct {
	Error   string              `json:"error"`
	Details []strict.FieldError `json:"details,omitempty"`
}

func writeError(w http.ResponseWriter, code int, msg string, details []strict.FieldError) {
	writeJSON(w, code, errorBody{Error: msg, Details: details})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// readBody reads the request body, answering 413 when it is over MaxBody.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is over %d bytes", MaxBody), nil)
			return nil, false
		}
		writeError(w, http.StatusBadRequest, "read body: "+err.Error(), nil)
		return nil, false
	}
	return b, true
}

// optionalBody decodes a change's optional JSON body into req, strictly
// (an unknown field is a 400 naming it). An empty body leaves req as it
// is. It answers the request itself, with what in the message and
// nothing changed, and returns false when the body is bad.
func optionalBody(w http.ResponseWriter, r *http.Request, what string, req any) bool {
	body, ok := readBody(w, r)
	if !ok {
		return false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return true
	}
	if err := decodeStrict(body, req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid request; %s was not changed", what), strict.Fields(err))
		return false
	}
	return true
}

// storeError maps store errors to HTTP answers.
func storeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, err.Error(), nil)
	case errors.Is(err, store.ErrConflict):
		writeError(w, http.StatusConflict, err.Error(), nil)
	case errors.Is(err, store.ErrInvalid):
		writeError(w, http.StatusBadRequest, err.Error(), nil)
	case errors.Is(err, store.ErrUnconfirmed):
		writeError(w, http.StatusServiceUnavailable, "the rule store did not confirm the change, so it may or may not have been applied: read the rule (or its history) back before you retry: "+err.Error(), nil)
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, store.ErrClosed):
		writeError(w, http.StatusServiceUnavailable, "the rule store is unavailable, so nothing was changed; the rules that were serving keep serving: "+err.Error(), nil)
	default:
		writeError(w, http.StatusInternalServerError, err.Error(), nil)
	}
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.opts.Ready != nil {
		if err := s.opts.Ready(); err != nil {
			writeError(w, http.StatusServiceUnavailable, err.Error(), nil)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "ready\n")
}

func (s *Server) status(w http.ResponseWriter, r *http.Request, _ principal) {
	writeJSON(w, http.StatusOK, s.opts.Status())
}
