package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/graygate/graygate/internal/rollout"
	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/strict"
)

// RolloutControl is the rollout engine as the admin API uses it.
type RolloutControl interface {
	View(ctx context.Context, key string) (rollout.View, error)
	Act(ctx context.Context, key string, cmd rollout.Command) (rollout.View, error)
}

// routeRollouts adds GET /api/v1/rules/{key}/rollout (viewers) and
// POST /api/v1/rules/{key}/rollout/{action} (admins).
func (s *Server) routeRollouts() {
	if s.opts.Rollout == nil {
		return
	}
	s.handle("GET /api/v1/rules/{key}/rollout", RoleViewer, s.getRollout)
	s.handle("POST /api/v1/rules/{key}/rollout/{action}", RoleAdmin, s.actRollout)
}

func rolloutError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, rollout.ErrNoRollout):
		writeError(w, http.StatusNotFound, err.Error(), nil)
	case errors.Is(err, rollout.ErrState):
		writeError(w, http.StatusConflict, err.Error(), nil)
	default:
		storeError(w, err)
	}
}

// writeView answers with a rollout view and its rule's version as the
// ETag, for an If-Match on the next action.
func writeView(w http.ResponseWriter, v rollout.View) {
	if v.Version > 0 {
		w.Header().Set("ETag", strconv.Quote(strconv.FormatInt(v.Version, 10)))
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) getRollout(w http.ResponseWriter, r *http.Request, _ principal) {
	v, err := s.opts.Rollout.View(r.Context(), r.PathValue("key"))
	if err != nil {
		rolloutError(w, err)
		return
	}
	writeView(w, v)
}

func (s *Server) actRollout(w http.ResponseWriter, r *http.Request, p principal) {
	key, action := r.PathValue("key"), rollout.Action(r.PathValue("action"))
	if !slices.Contains(rollout.Actions, action) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no rollout action %q: POST .../rollout/promote, pause, resume, abort or retry", action), nil)
		return
	}
	// If-Match makes the action conditional on the rule's version, as for
	// PUT and a rule's rollback: 409 when the rule has changed since.
	ifVersion, err := parseIfMatch(r)
	if err == nil && ifVersion == 0 {
		err = fmt.Errorf("If-Match: a rollout action needs the rule's version (1 or more), got %q", r.Header.Get("If-Match"))
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error()+"; nothing was changed", nil)
		return
	}
	if ifVersion == store.AnyVersion {
		ifVersion = 0
	}
	var req struct {
		Full   bool   `json:"full,omitempty"`
		Reason string `json:"reason,omitempty"`
	}
	if !optionalBody(w, r, fmt.Sprintf("the rollout of rule %q", key), &req) {
		return
	}
	if req.Full && action != rollout.ActionPromote {
		writeError(w, http.StatusBadRequest, "invalid rollout request; nothing was changed", []strict.FieldError{{Path: "full", Message: fmt.Sprintf("is only for promote, not %s", action)}})
		return
	}
	reason, ok := reasonOK(w, r, req.Reason, fmt.Sprintf("the rollout of rule %q", key))
	if !ok {
		return
	}
	v, err := s.opts.Rollout.Act(r.Context(), key, rollout.Command{Action: action, Full: req.Full, By: p.name, Reason: reason, IfVersion: ifVersion})
	if err != nil {
		rolloutError(w, err)
		return
	}
	s.log.Info("rollout action", "rule", key, "action", string(action), "full", req.Full, "by", p.name)
	writeView(w, v)
}

// carryStatus gives rl the rollout status the write will give it (see
// putRollout), so that it is validated as it will be stored: the steps a
// running rollout has not reached yet must not lower the gray_percent it
// set, and a new plan's steps none at all.
func (s *Server) carryStatus(ctx context.Context, key string, rl *rule.Rule) error {
	_, prev, err := s.storedRule(ctx, key)
	if err != nil {
		return err
	}
	ro := *rl.Rollout
	rl.Rollout = &ro
	rollout.Carry(prev, rl)
	return nil
}

// storedRule returns rule key's current entry and the rule it holds (nil
// when it does not decode); for a rule that does not exist, a zero entry
// (version 0) and no error.
func (s *Server) storedRule(ctx context.Context, key string) (store.Entry, *rule.Rule, error) {
	cur, err := s.opts.Store.Get(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.Entry{}, nil, nil
	case err != nil:
		return store.Entry{}, nil, err
	}
	if r, derr := rule.Decode(cur.Rule); derr == nil {
		return cur, &r, nil
	}
	return cur, nil, nil
}

// putRollout stores a rule with a rollout the way an operator's PUT or
// revert must: whatever status the body carries is dropped and the
// stored status carried over (same plan) or started afresh (a new plan),
// with compare-and-set on the version it was carried from. Without
// If-Match a lost race is decided again on the newer version.
func (s *Server) putRollout(ctx context.Context, key string, rl rule.Rule, ifVersion int64, m store.Meta) (store.Entry, error) {
	for attempt := 0; ; attempt++ {
		want := ifVersion
		cur, prev, err := s.storedRule(ctx, key)
		if err != nil {
			return store.Entry{}, err
		}
		if want == store.AnyVersion {
			want = cur.Version // 0: the rule does not exist
		}
		next := rl
		ro := *rl.Rollout
		next.Rollout = &ro
		rollout.Carry(prev, &next)
		if err := next.Validate(); err != nil {
			// The stored status moved since the rule was checked (another
			// plan came in meanwhile, say).
			return store.Entry{}, fmt.Errorf("rule %q as it would be stored: %w: %w", key, err, store.ErrInvalid)
		}
		raw, err := json.Marshal(next)
		if err != nil {
			return store.Entry{}, err
		}
		e, err := s.opts.Store.Put(ctx, key, raw, want, m)
		if errors.Is(err, store.ErrConflict) && ifVersion == store.AnyVersion && attempt < 5 {
			continue
		}
		return e, err
	}
}
