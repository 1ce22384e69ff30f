package gateway

import (
	"context"
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
//     written (an error wrapping admin.ErrWouldNotServe);
//  2. write commits it to the store (its errors are returned as they are);
//  3. the snapshot is rebuilt and published, and Commit checks that it
//     serves the write: if not (the store failed between the write and the
//     rebuild, or another writer's change made the rule fail), the error
//     wraps admin.ErrNotServing and says why.
//
// A nil write only checks (dry runs). Commits and config reloads are
// serialized, so no reload lands between the check and the write.
func (g *Gateway) Commit(ctx context.Context, c admin.Change, write func(context.Context) (int64, error)) error {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if err := g.check(ctx, c); err != nil {
		return fmt.Errorf("%w: %w", admin.ErrWouldNotServe, err)
	}
	if write == nil {
		return nil
	}
	rev, err := write(ctx)
	if err != nil {
		return err
	}
	if err := g.Apply(ctx); err != nil {
		return fmt.Errorf("%w: %w", admin.ErrNotServing, err)
	}
	return g.serves(c, rev)
}

// check compiles the state c leads to under the current config, changing
// nothing. It fails if the rule c writes would not compile there, if a rule
// that serves now would stop, or if the snapshot would not build.
func (g *Gateway) check(ctx context.Context, c admin.Change) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	st, err := g.load(ctx)
	if err != nil {
		return err
	}
	st = candidate(st, c)
	in, broken, err := g.assemble(g.cfg, st, false)
	if err != nil {
		return err
	}
	if c.Key != "" && c.Rule != nil {
		if err, ok := broken[c.Key]; ok {
			return fmt.Errorf("rule %q: %w", c.Key, err)
		}
	}
	var newly []string
	for k, err := range broken {
		if _, was := g.status.BrokenRules[k]; !was && k != c.Key {
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
// with st; a written rule gets version 0, which no cached compile has.
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
				e.Rule, e.Version = c.Rule, 0
			}
			if c.RolledBack != nil {
				e.RolledBack = *c.RolledBack
			}
		}
		rules = append(rules, e)
	}
	if !found && c.Key != "" && c.Rule != nil && !c.Delete {
		rules = append(rules, store.Entry{Key: c.Key, Rule: c.Rule})
	}
	st.Rules = rules
	if c.Key == "" && c.RolledBack != nil {
		st.RolledBack = *c.RolledBack
	}
	return st
}

// serves reports whether the published snapshot includes the write c made
// at store revision rev.
func (g *Gateway) serves(c admin.Change, rev int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
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
