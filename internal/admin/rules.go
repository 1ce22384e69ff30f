package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/strict"
)

// readOnlyFields are the metadata fields GET adds to a rule; PUT accepts
// and ignores them so that a GET body can be edited and PUT back.
var readOnlyFields = []string{"version", "revision", "updated_at", "updated_by", "rolled_back", "reason"}

// ruleView merges a stored entry's rule JSON with its metadata.
func ruleView(e store.Entry, rolledBackAll bool) map[string]any {
	m := map[string]any{}
	_ = json.Unmarshal(e.Rule, &m)
	m["key"] = e.Key
	m["version"] = e.Version
	m["revision"] = e.Revision
	m["updated_at"] = e.UpdatedAt.UTC().Format(time.RFC3339Nano)
	m["updated_by"] = e.UpdatedBy
	if e.Reason != "" {
		m["reason"] = e.Reason
	}
	m["rolled_back"] = e.RolledBack || rolledBackAll
	return m
}

func (s *Server) listRules(w http.ResponseWriter, r *http.Request, _ principal) {
	st, err := s.opts.Store.Load(r.Context())
	if err != nil {
		storeError(w, err)
		return
	}
	out := make([]map[string]any, 0, len(st.Rules))
	for _, e := range st.Rules {
		out = append(out, ruleView(e, st.RolledBack))
	}
	writeJSON(w, http.StatusOK, map[string]any{"revision": st.Revision, "rolled_back": st.RolledBack, "rules": out})
}

// writeRule answers with rule key as it stands in st, or 404.
func writeRule(w http.ResponseWriter, st store.State, key string) {
	for _, e := range st.Rules {
		if e.Key == key {
			writeEntry(w, http.StatusOK, e, st.RolledBack)
			return
		}
	}
	// Worded as the store words it, for DELETE, rollback and resume.
	storeError(w, fmt.Errorf("rule %q: %w", key, store.ErrNotFound))
}

// writeEntry answers with one rule and its version as the ETag, so that a
// client may send it back as If-Match (RFC 9110 section 8.8.3), as it
// would to any HTTP API that does compare-and-set.
func writeEntry(w http.ResponseWriter, code int, e store.Entry, rolledBackAll bool) {
	w.Header().Set("ETag", strconv.Quote(strconv.FormatInt(e.Version, 10)))
	writeJSON(w, code, ruleView(e, rolledBackAll))
}

func (s *Server) getRule(w http.ResponseWriter, r *http.Request, _ principal) {
	key := r.PathValue("key")
	st, err := s.opts.Store.Load(r.Context())
	if err != nil {
		storeError(w, err)
		return
	}
	writeRule(w, st, key)
}

// parseIfMatch reads If-Match: a version number, optionally quoted, or "*".
func parseIfMatch(r *http.Request) (int64, error) {
	h := strings.TrimSpace(r.Header.Get("If-Match"))
	if h == "" || h == "*" {
		return store.AnyVersion, nil
	}
	h = strings.Trim(strings.TrimPrefix(h, "W/"), `"`)
	v, err := strconv.ParseInt(h, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("If-Match must be a rule version number, got %q", r.Header.Get("If-Match"))
	}
	return v, nil
}

// ifMatchAny reports If-Match: *, which holds for any version of a rule
// that exists.
func ifMatchAny(r *http.Request) bool { return strings.TrimSpace(r.Header.Get("If-Match")) == "*" }

// StripMetadata deletes from a rule object the read-only metadata fields
// GET adds to it (readOnlyFields), so that a rule fetched, edited and sent
// back is judged as the rule it is, and returns its reason field, with an
// error naming reason if that is not a string. graygate validate strips a
// rule file with it too, so that it passes the files PUT takes.
func StripMetadata(obj map[string]json.RawMessage) (reason string, err error) {
	if raw, ok := obj["reason"]; ok {
		if json.Unmarshal(raw, &reason) != nil {
			err = strict.Errorf("reason", "expected a string, got %s", raw)
		}
	}
	for _, f := range readOnlyFields {
		delete(obj, f)
	}
	return reason, err
}

// decodeRuleBody strips read-only metadata fields, takes the reason field
// out, and strictly decodes the rest as a rule.
func decodeRuleBody(body []byte, key string) (rule.Rule, string, error) {
	var generic map[string]json.RawMessage
	if err := json.Unmarshal(body, &generic); err != nil {
		// Let the strict decoder produce the precise message.
		_, derr := rule.Decode(body)
		if derr == nil {
			derr = &strict.FieldError{Message: "a rule must be a JSON object"}
		}
		return rule.Rule{}, "", derr
	}
	if generic == nil {
		// The body was the JSON literal null, which decodes into a nil
		// map without an error (and the key below cannot be set in one).
		return rule.Rule{}, "", &strict.FieldError{Message: "a rule must be a JSON object, got null"}
	}
	// A bad reason or key, or a key given twice, is reported with whatever
	// else is wrong, and the rest is still decoded (under the URL's key),
	// so that it is checked as it is, not reported as missing.
	errs := []error{strict.DuplicateKeys(body)}
	reason, err := StripMetadata(generic)
	errs = append(errs, err)
	if raw, ok := generic["key"]; ok {
		var k string
		switch err := json.Unmarshal(raw, &k); {
		case err != nil:
			errs = append(errs, strict.Errorf("key", "expected a string, got %s", raw))
		case k != "" && k != key:
			errs = append(errs, strict.Errorf("key", "%q does not match the key in the URL %q", k, key))
		}
	}
	generic["key"], _ = json.Marshal(key)
	clean, _ := json.Marshal(generic)
	r, err := rule.Decode(clean)
	err = errors.Join(append(errs, err)...)
	if r.Rollout != nil {
		// The gateway writes rollout.status; a GET body PUT back carries
		// one, which is dropped here and replaced by the stored one.
		r.Rollout.Status = nil
	}
	return r, reason, err
}

// parseDryRun reads the dry_run query parameter: absent is false, and a
// present one must be a boolean ("1", "true", "0", "false", ...). Any other
// value is an error rather than a write: an operator who meant a dry run
// must never change what is served by a typo.
func parseDryRun(r *http.Request) (bool, error) {
	q := r.URL.Query()
	if !q.Has("dry_run") {
		return false, nil
	}
	v := q.Get("dry_run")
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, strict.Errorf("dry_run", "must be true or false (1 or 0), got %q", v)
	}
	return b, nil
}

// hasField reports whether the JSON object body has the field name (a
// strictly decoded body is an object).
func hasField(body []byte, name string) bool {
	var obj map[string]json.RawMessage
	_ = json.Unmarshal(body, &obj)
	raw, ok := obj[name]
	return ok && string(raw) != "null"
}

// MaxReasonBytes bounds a change's reason, which every version of the
// rule keeps (history, diff, notifications): a longer one is refused.
const MaxReasonBytes = 1024

// reasonOK returns the reason a change is made for: the X-Change-Reason
// header, else the body's reason field (bodyReason), else the reason
// query parameter. One over MaxReasonBytes is answered 400, naming reason
// and what was not changed, and ok is false.
func reasonOK(w http.ResponseWriter, r *http.Request, bodyReason, what string) (reason string, ok bool) {
	reason = bodyReason
	if h := r.Header.Get("X-Change-Reason"); h != "" {
		reason = h
	} else if reason == "" {
		reason = r.URL.Query().Get("reason")
	}
	if len(reason) > MaxReasonBytes {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid reason; %s was not changed", what),
			[]strict.FieldError{{Path: "reason", Message: fmt.Sprintf("is %d bytes long; the limit is %d", len(reason), MaxReasonBytes)}})
		return "", false
	}
	return reason, true
}

func (s *Server) putRule(w http.ResponseWriter, r *http.Request, p principal) {
	key := r.PathValue("key") // valid: handle checked it
	ifVersion, err := parseIfMatch(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error()+"; nothing was changed", nil)
		return
	}
	dryRun, err := parseDryRun(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid query; rule %q was not changed", key), strict.Fields(err))
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	rl, reason, err := decodeRuleBody(body, key)
	if rl.Rollout != nil {
		if cerr := s.carryStatus(r.Context(), key, &rl); cerr != nil {
			storeError(w, cerr)
			return
		}
	}
	if err == nil {
		_, err = s.opts.Compile(rl)
	} else {
		err = strict.Merge(err, rl.Validate())
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid rule %q; nothing was changed", key), strict.Fields(err))
		return
	}
	if s.opts.Vet != nil {
		if fes := s.opts.Vet(r.Context(), rl); len(fes) > 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid rule %q; nothing was changed", key), fes)
			return
		}
	}
	canonical, _ := json.Marshal(rl)
	change := Change{Key: key, Rule: canonical}
	if ifMatchAny(r) || dryRun && ifVersion != store.AnyVersion {
		// If-Match: * holds only for a rule that exists (RFC 9110 section
		// 13.1.1), and a dry run answers what the write would: both read
		// the current version. A real write then puts on that version, so
		// a rule deleted meanwhile is still a conflict.
		e, _, gerr := s.storedRule(r.Context(), key)
		if gerr != nil {
			storeError(w, gerr)
			return
		}
		cur := e.Version // 0: the rule does not exist
		if ifMatchAny(r) {
			if cur == 0 {
				writeError(w, http.StatusConflict, fmt.Sprintf("rule %q does not exist (If-Match: *); nothing was changed", key), nil)
				return
			}
			ifVersion = cur
		}
		if dryRun && ifVersion != cur {
			writeError(w, http.StatusConflict, fmt.Sprintf("rule %q is at version %d, not %d (If-Match); nothing was changed", key, cur, ifVersion), nil)
			return
		}
	}
	if dryRun {
		if err := s.opts.Commit(r.Context(), change, nil); err != nil {
			s.commitError(w, fmt.Sprintf("rule %q", key), "", err)
			return
		}
		var view map[string]any
		_ = json.Unmarshal(canonical, &view)
		writeJSON(w, http.StatusOK, map[string]any{"dry_run": true, "valid": true, "rule": view, "priority": rl.EffectivePriority()})
		return
	}
	reason, ok = reasonOK(w, r, reason, fmt.Sprintf("rule %q", key))
	if !ok {
		return
	}
	meta := store.Meta{By: p.name, Reason: reason}
	var e store.Entry
	err = s.opts.Commit(r.Context(), change, func(ctx context.Context) (int64, error) {
		var err error
		if rl.Rollout != nil {
			e, err = s.putRollout(ctx, key, rl, ifVersion, meta)
		} else {
			e, err = s.opts.Store.Put(ctx, key, canonical, ifVersion, meta)
		}
		return e.Revision, err
	})
	if err != nil {
		s.commitError(w, fmt.Sprintf("rule %q", key), fmt.Sprintf("as version %d", e.Version), err)
		return
	}
	code := http.StatusOK
	if e.Version == 1 {
		code = http.StatusCreated
	}
	writeEntry(w, code, e, false)
}

func (s *Server) deleteRule(w http.ResponseWriter, r *http.Request, p principal) {
	key := r.PathValue("key")
	ifVersion, err := parseIfMatch(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error()+"; nothing was changed", nil)
		return
	}
	// The reason may come in a body, as for every other change.
	var req struct {
		Reason string `json:"reason,omitempty"`
	}
	if !optionalBody(w, r, fmt.Sprintf("rule %q", key), &req) {
		return
	}
	reason, ok := reasonOK(w, r, req.Reason, fmt.Sprintf("rule %q", key))
	if !ok {
		return
	}
	var ch store.Change
	err = s.opts.Commit(r.Context(), Change{Key: key, Delete: true}, func(ctx context.Context) (int64, error) {
		var err error
		ch, err = s.opts.Store.Delete(ctx, key, ifVersion, store.Meta{By: p.name, Reason: reason})
		return ch.Revision, err
	})
	if err != nil {
		s.commitError(w, fmt.Sprintf("the deletion of rule %q", key), "", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"deleted": key, "version": ch.Version, "revision": ch.Revision})
}

// historyItem is one version in GET .../history.
type historyItem struct {
	Version    int64           `json:"version"`
	Revision   int64           `json:"revision"`
	Op         string          `json:"op"`
	At         time.Time       `json:"at"`
	By         string          `json:"by"`
	Reason     string          `json:"reason,omitempty"`
	RolledBack bool            `json:"rolled_back"`
	Diff       []DiffLine      `json:"diff"`
	Before     json.RawMessage `json:"before,omitempty"`
	After      json.RawMessage `json:"after,omitempty"`
}

// maxHistoryPage bounds the history's limit parameter. It is no less than
// store.MaxHistoryLimit, so that the answer without limit (the whole
// retained history, as the README promises and the CLI and the console
// expect) is never larger than the largest page.
const maxHistoryPage = 1000

// historyPage reads the history's paging parameters: limit (1 to
// maxHistoryPage; 0 when absent: everything) and before (a version:
// only older ones; 0 when absent).
func historyPage(r *http.Request) (limit int, before int64, err error) {
	q := r.URL.Query()
	var errs []error
	if q.Has("limit") {
		v := q.Get("limit")
		n, perr := strconv.Atoi(v)
		if perr != nil || n < 1 || n > maxHistoryPage {
			errs = append(errs, strict.Errorf("limit", "must be a whole number from 1 to %d, got %q", maxHistoryPage, v))
		}
		limit = n
	}
	if q.Has("before") {
		v := q.Get("before")
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n < 1 {
			errs = append(errs, strict.Errorf("before", "must be a version number >= 1, got %q", v))
		}
		before = n
	}
	return limit, before, errors.Join(errs...)
}

// history serves a rule's retained changes, newest first. With limit, at
// most that many, and when older ones remain, next_before says where the
// next page starts (?before=next_before); with before, only versions
// older than it. Without either, the whole retained history, as always:
// at most store.MaxHistoryLimit versions.
func (s *Server) history(w http.ResponseWriter, r *http.Request, _ principal) {
	key := r.PathValue("key")
	limit, before, err := historyPage(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid query for the history of %q", key), strict.Fields(err))
		return
	}
	hs, err := s.opts.Store.History(r.Context(), key)
	if err != nil {
		storeError(w, err)
		return
	}
	if len(hs) == 0 {
		writeError(w, http.StatusNotFound, fmt.Sprintf("rule %q has no history", key), nil)
		return
	}
	if before > 0 {
		// Newest first, and a key's versions only grow, so the older
		// versions are a tail: a subslice, not a second copy of what may
		// be a long history (up to store.MaxHistoryLimit versions).
		hs = hs[sort.Search(len(hs), func(i int) bool { return hs[i].Version < before }):]
	}
	body := map[string]any{"key": key}
	if limit > 0 && len(hs) > limit {
		hs = hs[:limit]
		body["next_before"] = hs[limit-1].Version
	}
	out := make([]historyItem, 0, len(hs))
	for _, c := range hs {
		out = append(out, historyItem{
			Version: c.Version, Revision: c.Revision, Op: c.Op, At: c.At, By: c.By, Reason: c.Reason,
			RolledBack: c.RolledBackAfter, Diff: Diff(c.Before, c.After), Before: c.Before, After: c.After,
		})
	}
	body["history"] = out
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) revert(w http.ResponseWriter, r *http.Request, p principal) {
	key := r.PathValue("key")
	// If-Match makes the revert conditional on the rule's current version,
	// as for PUT: an operator reverting what they saw must not overwrite
	// what someone else wrote since, nor bring back a rule deleted since.
	ifVersion, err := parseIfMatch(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error()+"; nothing was changed", nil)
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var req struct {
		Version int64  `json:"version"`
		Reason  string `json:"reason,omitempty"`
	}
	if err := decodeStrict(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid revert request; nothing was changed", strict.Fields(err))
		return
	}
	if req.Version < 1 {
		msg := fmt.Sprintf("must be a version number >= 1, got %d", req.Version)
		if !hasField(body, "version") {
			msg = `is required: the version to revert to, e.g. {"version": 3} (GET .../history lists them)`
		}
		writeError(w, http.StatusBadRequest, "invalid revert request; nothing was changed", []strict.FieldError{{Path: "version", Message: msg}})
		return
	}
	hs, err := s.opts.Store.History(r.Context(), key)
	if err != nil {
		storeError(w, err)
		return
	}
	var target json.RawMessage
	found := false
	for _, c := range hs {
		if c.Version == req.Version {
			found, target = true, c.After
			break
		}
	}
	if !found {
		writeError(w, http.StatusNotFound, fmt.Sprintf("rule %q has no version %d in its history", key, req.Version), nil)
		return
	}
	if target == nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("version %d of rule %q is a deletion, so there is nothing to revert to; nothing was changed (DELETE the rule instead)", req.Version, key), nil)
		return
	}
	rl, err := rule.Decode(target)
	if err == nil {
		_, err = s.opts.Compile(rl)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("version %d of rule %q no longer compiles against the current config; nothing was changed", req.Version, key), strict.Fields(err))
		return
	}
	if ifMatchAny(r) {
		// If-Match: * holds only for a rule that exists (RFC 9110 section
		// 13.1.1); the write then puts on the version read here.
		cur, _, gerr := s.storedRule(r.Context(), key)
		if gerr != nil {
			storeError(w, gerr)
			return
		}
		if cur.Version == 0 {
			writeError(w, http.StatusConflict, fmt.Sprintf("rule %q does not exist (If-Match: *); nothing was changed", key), nil)
			return
		}
		ifVersion = cur.Version
	}
	reason, ok := reasonOK(w, r, req.Reason, fmt.Sprintf("rule %q", key))
	if !ok {
		return
	}
	if reason == "" {
		reason = fmt.Sprintf("revert to version %d", req.Version)
	}
	meta := store.Meta{By: p.name, Reason: reason, Op: "revert"}
	var e store.Entry
	err = s.opts.Commit(r.Context(), Change{Key: key, Rule: target}, func(ctx context.Context) (int64, error) {
		var err error
		if rl.Rollout != nil {
			e, err = s.putRollout(ctx, key, rl, ifVersion, meta)
		} else {
			e, err = s.opts.Store.Put(ctx, key, target, ifVersion, meta)
		}
		return e.Revision, err
	})
	if err != nil {
		s.commitError(w, fmt.Sprintf("the revert of rule %q to version %d", key, req.Version), fmt.Sprintf("as version %d", e.Version), err)
		return
	}
	writeEntry(w, http.StatusOK, e, false)
}

func (s *Server) rollbackRule(on bool) func(http.ResponseWriter, *http.Request, principal) {
	return func(w http.ResponseWriter, r *http.Request, p principal) {
		key := r.PathValue("key")
		s.setRollback(w, r, p, key, on)
	}
}

func (s *Server) rollbackAll(on bool) func(http.ResponseWriter, *http.Request, principal) {
	return func(w http.ResponseWriter, r *http.Request, p principal) {
		s.setRollback(w, r, p, "", on)
	}
}

func (s *Server) setRollback(w http.ResponseWriter, r *http.Request, p principal, key string, on bool) {
	// If-Match makes a rule's rollback or resume conditional on its version,
	// as for PUT; the global flag has no version.
	ifVersion, err := parseIfMatch(r)
	if err == nil && key == "" && ifVersion != store.AnyVersion {
		err = fmt.Errorf("If-Match: the global rollback flag has no version, got %q", r.Header.Get("If-Match"))
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error()+"; nothing was changed", nil)
		return
	}
	var req struct {
		Reason string `json:"reason,omitempty"`
	}
	if !optionalBody(w, r, "the rollback state", &req) {
		return
	}
	var st store.State
	what := "the rollback"
	if !on {
		what = "the resume"
	}
	if key != "" {
		what += fmt.Sprintf(" of rule %q", key)
	}
	reason, ok := reasonOK(w, r, req.Reason, "the rollback state")
	if !ok {
		return
	}
	was, known := s.rollbackFlag(r.Context(), key)
	err = s.opts.Commit(r.Context(), Change{Key: key, RolledBack: &on}, func(ctx context.Context) (int64, error) {
		var err error
		st, err = s.opts.Store.SetRollback(ctx, key, on, ifVersion, store.Meta{By: p.name, Reason: reason})
		return st.Revision, err
	})
	if err != nil {
		s.commitError(w, what, "", err)
		return
	}
	s.log.Warn("rollback state changed", "key", key, "rolled_back", on, "by", p.name)
	if !known || was != on { // setting a flag to what it was commits nothing
		s.notifyRollback(key, on, p.name, reason, st.Revision)
	}
	if key == "" {
		writeJSON(w, http.StatusOK, map[string]any{"rolled_back": st.RolledBack, "revision": st.Revision})
		return
	}
	writeRule(w, st, key)
}

// commitError answers a failed Options.Commit: 409 when the change would
// not serve (nothing was written), 500 when it was stored but does not
// serve (stored says how, such as "as version 3"), and the store's own
// mapping otherwise. what names the change ("rule \"k\"").
func (s *Server) commitError(w http.ResponseWriter, what, stored string, err error) {
	switch {
	case errors.Is(err, ErrWouldNotServe):
		writeError(w, http.StatusConflict, fmt.Sprintf("%s would not serve under the current config and rules; nothing was changed", what),
			strict.Fields(cause(err, ErrWouldNotServe)))
	case errors.Is(err, ErrNotServing):
		s.log.Error("a stored change does not serve", "change", what, "err", err)
		msg := what + " was stored"
		if stored != "" {
			msg += " " + stored
		}
		writeError(w, http.StatusInternalServerError, msg+" but does not serve; the rules that were serving keep serving",
			strict.Fields(cause(err, ErrNotServing)))
	default:
		storeError(w, err)
	}
}

// cause returns err without sentinel, for the details of an answer: the
// errors joined with it by fmt.Errorf("%w: %w", sentinel, ...).
func cause(err, sentinel error) error {
	var rest []error
	var walk func(error)
	walk = func(e error) {
		if e == sentinel {
			return
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok && errors.Is(e, sentinel) {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		rest = append(rest, e)
	}
	walk(err)
	return errors.Join(rest...)
}
