package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

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

func (s *Server) getRollout(w http.ResponseWriter, r *http.Request, _ principal) {
	v, err := s.opts.Rollout.View(r.Context(), r.PathValue("key"))
	if err != nil {
		rolloutError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) actRollout(w http.ResponseWriter, r *http.Request, p principal) {
	key, action := r.PathValue("key"), rollout.Action(r.PathValue("action"))
	if !slices.Contains(rollout.Actions, action) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no rollout action %q: POST .../rollout/promote, pause, resume, abort or retry", action), nil)
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var req struct {
		Full   bool   `json:"full,omitempty"`
		Reason string `json:"reason,omitempty"`
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := strict.Decode(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, "invalid rollout request", strict.Fields(err))
			return
		}
	}
	if req.Full && action != rollout.ActionPromote {
		writeError(w, http.StatusBadRequest, "invalid rollout request", []strict.FieldError{{Path: "full", Message: fmt.Sprintf("is only for promote, not %s", action)}})
		return
	}
	v, err := s.opts.Rollout.Act(r.Context(), key, rollout.Command{Action: action, Full: req.Full, By: p.name, Reason: changeReason(r, req.Reason)})
	if err != nil {
		rolloutError(w, err)
		return
	}
	s.log.Info("rollout action", "rule", key, "action", string(action), "full", req.Full, "by", p.name)
	writeJSON(w, http.StatusOK, v)
}

// putRollout stores a rule with a rollout the way an operator's PUT or
// revert must: whatever status the body carries is dropped and the
// stored status carried over (same plan) or started afresh (a new plan),
// with compare-and-set on the version it was carried from. Without
// If-Match a lost race is decided again on the newer version.
func (s *Server) putRollout(ctx context.Context, key string, rl rule.Rule, ifVersion int64, m store.Meta) (store.Entry, error) {
	for attempt := 0; ; attempt++ {
		want := ifVersion
		var prev *rule.Rule
		cur, err := s.opts.Store.Get(ctx, key)
		switch {
		case err == nil:
			if p, derr := rule.Decode(cur.Rule); derr == nil {
				prev = &p
			}
			if want == store.AnyVersion {
				want = cur.Version
			}
		case errors.Is(err, store.ErrNotFound):
			if want == store.AnyVersion {
				want = 0
			}
		default:
			return store.Entry{}, err
		}
		next := rl
		ro := *rl.Rollout
		next.Rollout = &ro
		rollout.Carry(prev, &next)
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
