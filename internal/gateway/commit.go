package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/graygate/graygate/internal/admin"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/store"
)

// Commit makes one admin write serve, so that a stored rule always serves:
//
//  1. the state c leads to (the store's current state with c applied) is
//     compiled against the current config, the way the next snapshot will
//     be, and a state that would not serve is refused before anything is
//     written (see refusal: admin.ErrWouldNotServe, or store.ErrInvalid
//     for a rule that would overlap another in its layer);
//  2. write commits it to the store (its errors are returned as they are).
//     A shared store judges the write again, the same way, on the state it
//     commits on top of (store.WithCheck): this gateway's copy of the
//     store may not have another gateway's last write yet, and two writes
//     that are each fine alone (two halves of a layer overlap) must not
//     both commit;
//  3. the snapshot is rebuilt and published, and Commit checks that it
//     serves the write: if not (the store failed between the write and the
//     rebuild, etcd's history was replaced meanwhile, or another writer's
//     change made the rule fail), the error wraps admin.ErrNotServing and
//     says why.
//
// A nil write only checks (dry runs). Commits and config reloads are
// serialized, so no reload lands between the check and the write.
func (g *Gateway) Commit(ctx context.Context, c admin.Change, write func(context.Context) (int64, error)) error {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if err := g.check(ctx, c); err != nil {
		return refusal(err)
	}
	if write == nil {
		return nil
	}
	rev, err := write(store.WithCheck(ctx, func(base, next store.State) error { return g.recheck(base, next, c) }))
	if err != nil {
		return err
	}
	// The store applied the write before returning, so its newest epoch
	// is the one of the write.
	epoch := g.storeEpoch()
	if err := g.Apply(ctx); err != nil {
		return fmt.Errorf("%w: %w", admin.ErrNotServing, err)
	}
	return g.serves(c, rev, epoch)
}

// check compiles the state c leads to from the store's current state under
// the current config, changing nothing. It fails if the rule c writes would
// not compile there, if a rule that serves now would stop, or if the
// snapshot would not build.
func (g *Gateway) check(ctx context.Context, c admin.Change) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	st, err := g.load(ctx)
	if err != nil {
		return err
	}
	return g.judge(st, candidate(st, c), c)
}

// recheck is check on the state a shared store's write lands on (base)
// and leads to (next); see Commit.
func (g *Gateway) recheck(base, next store.State, c admin.Change) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.judge(base, next, c); err != nil {
		return refusal(err)
	}
	return nil
}

// refusal is how Commit refuses a change that would not serve. A rule that
// would overlap another in its layer is the writer's mistake, whichever
// check finds it: an error wrapping store.ErrInvalid, a 400 like the one
// the admin API gives when it finds the overlap among the rules that
// serve. Anything else would not serve under the current config: an
// error wrapping admin.ErrWouldNotServe.
func refusal(err error) error {
	if lc := (*layerConflict)(nil); errors.As(err, &lc) {
		return fmt.Errorf("%w: %w", err, store.ErrInvalid)
	}
	return fmt.Errorf("%w: %w", admin.ErrWouldNotServe, err)
}

// judge compiles next, the state c leads to from base, under the current
// config, changing nothing. It fails if the rule c writes would not serve
// in next (it does not compile, or it overlaps another rule of its layer:
// a *layerConflict), if a rule that serves in base would stop, or if the
// snapshot would not build. The caller holds g.mu.
func (g *Gateway) judge(base, next store.State, c admin.Change) error {
	in, broken, err := g.assemble(g.cfg, g.reg, next, false)
	if err != nil {
		return err
	}
	if c.Key != "" && c.Rule != nil {
		if err, ok := broken[c.Key]; ok {
			return fmt.Errorf("rule %q: %w", c.Key, err)
		}
	}
	_, was, err := g.assemble(g.cfg, g.reg, base, false)
	if err != nil {
		return err
	}
	var newly []string
	for k, err := range broken {
		if _, before := was[k]; !before && k != c.Key {
			newly = append(newly, fmt.Sprintf("rule %q would stop serving: %v", k, err))
		}
	}
	if len(newly) > 0 {
		slices.Sort(newly)
		return fmt.Errorf("%s", strings.Join(newly, "; "))
	}
	if _, err := router.Build(in); err != nil {
		return err
	}
	return nil
}

// candidate returns st with c applied. Entries are copied, never shared
// with st. The entry c changes gets the next revision, as the store will
// give it, so that it is the newest rule (dropLayerConflicts disables the
// newer of two that overlap).
func candidate(st store.State, c admin.Change) store.State {
	rules := make([]store.Entry, 0, len(st.Rules)+1)
	found := false
	for _, e := range st.Rules {
		if e.Key == c.Key {
			found = true
			switch {
			case c.Delete:
				continue
			case c.Rule != nil:
				e.Rule = c.Rule
			}
			if c.RolledBack != nil {
				e.RolledBack = *c.RolledBack
			}
			e.Revision = st.Revision + 1
		}
		rules = append(rules, e)
	}
	if !found && c.Key != "" && c.Rule != nil && !c.Delete {
		rules = append(rules, store.Entry{Key: c.Key, Rule: c.Rule, Revision: st.Revision + 1})
	}
	st.Rules = rules
	if c.Key == "" && c.RolledBack != nil {
		st.RolledBack = *c.RolledBack
	}
	st.Revision++
	return st
}

// serves reports whether the published snapshot includes the write c made
// at store revision rev of epoch (store.State.Epoch).
func (g *Gateway) serves(c admin.Change, rev, epoch int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.epoch != epoch {
		return fmt.Errorf("%w: the store's history was replaced (etcd restored from a backup?) while the change was made: revision %d of another history serves", admin.ErrNotServing, g.router.Load().Revision)
	}
	if cur := g.router.Load(); cur.Revision < rev {
		return fmt.Errorf("%w: revision %d serves, the change is revision %d", admin.ErrNotServing, cur.Revision, rev)
	}
	if c.Key != "" && !c.Delete && c.Rule != nil {
		if msg, broken := g.status.BrokenRules[c.Key]; broken {
			return fmt.Errorf("%w: rule %q is disabled: %s", admin.ErrNotServing, c.Key, msg)
		}
	}
	return nil
}
