// Package storetest is the conformance suite of store.Store: the
// behaviour every store (the file store, the etcd store) must share, run
// by each store's tests through a Harness.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/store"
)

// Epoch is where the stores' test clocks start.
var Epoch = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// Harness is how the suites reach the store under test.
type Harness struct {
	// Open opens the store called name (a fresh one, or one opened before,
	// whose data it keeps) with a history limit (0 for the default), to
	// be closed when t ends. Its clock returns Epoch plus n seconds on its
	// n-th call, from 1 on each Open, so every change has a predictable time.
	Open func(t *testing.T, name string, historyLimit int) store.Store
	// Name returns a store name of t's own.
	Name func(t *testing.T) string
	// Kind is what the store's Kind returns.
	Kind string
	// Compact, if set, compacts the store's persistent form; the suites
	// then check everything again on the compacted store.
	Compact func(t *testing.T, s store.Store)
	// HistoryRecords, if set, counts the history records the store keeps
	// for key, below what History shows.
	HistoryRecords func(t *testing.T, s store.Store, key string) int
}

// Clock returns a test clock: Epoch plus n seconds on its n-th call.
func Clock() func() time.Time {
	var n atomic.Int64
	return func() time.Time { return At(int(n.Add(1))) }
}

// At is the time a test clock returns on its n-th call.
func At(n int) time.Time { return Epoch.Add(time.Duration(n) * time.Second) }

func raw(s string) json.RawMessage { return json.RawMessage(s) }

// step is one call in a scenario. Version and revision are what the call
// reports: the entry's for put, the change's for delete, and for rollback
// the rule's version (or, for the global flag, the state's revision).
type step struct {
	do        string // put, revert, delete, rollback, resume
	key       string
	rule      string
	ifVersion int64
	wantErr   error
	wantVer   int64
	wantRev   int64
}

func (st step) run(ctx context.Context, s store.Store) (ver, rev int64, err error) {
	m := store.Meta{By: "tester", Reason: st.do + " " + st.key}
	switch st.do {
	case "put", "revert":
		if st.do == "revert" {
			m.Op = store.OpRevert
		}
		e, err := s.Put(ctx, st.key, raw(st.rule), st.ifVersion, m)
		return e.Version, e.Revision, err
	case "delete":
		c, err := s.Delete(ctx, st.key, st.ifVersion, m)
		return c.Version, c.Revision, err
	case "rollback", "resume":
		iv := st.ifVersion // a step's 0 is unconditional here
		if iv == 0 {
			iv = store.AnyVersion
		}
		state, err := s.SetRollback(ctx, st.key, st.do == "rollback", iv, m)
		if err != nil || st.key == "" {
			return 0, state.Revision, err
		}
		for _, e := range state.Rules {
			if e.Key == st.key {
				return e.Version, state.Revision, nil
			}
		}
		return 0, state.Revision, fmt.Errorf("rule %q missing from the returned state", st.key)
	}
	panic("unknown step " + st.do)
}

// Semantics runs scenarios of puts, deletes, reverts and rollbacks and
// checks the versions, revisions and errors each call reports.
func Semantics(t *testing.T, impl Harness) {
	tests := []struct {
		name  string
		steps []step
		// wantRule is the rule Get returns for key "a" at the end ("" for
		// store.ErrNotFound).
		wantRule string
	}{
		{
			name: "create then update",
			steps: []step{
				{do: "put", key: "a", rule: `{"v":1}`, ifVersion: store.AnyVersion, wantVer: 1, wantRev: 1},
				{do: "put", key: "a", rule: `{"v":2}`, ifVersion: 1, wantVer: 2, wantRev: 2},
				{do: "put", key: "a", rule: `{"v":3}`, ifVersion: store.AnyVersion, wantVer: 3, wantRev: 3},
			},
			wantRule: `{"v":3}`,
		},
		{
			name: "versions are per key, revisions global",
			steps: []step{
				{do: "put", key: "a", rule: `{}`, ifVersion: 0, wantVer: 1, wantRev: 1},
				{do: "put", key: "b", rule: `{}`, ifVersion: 0, wantVer: 1, wantRev: 2},
				{do: "put", key: "b", rule: `{}`, ifVersion: 1, wantVer: 2, wantRev: 3},
				{do: "put", key: "a", rule: `{"x":1}`, ifVersion: 1, wantVer: 2, wantRev: 4},
			},
			wantRule: `{"x":1}`,
		},
		{
			name: "ifVersion 0 means create only",
			steps: []step{
				{do: "put", key: "a", rule: `{"v":1}`, ifVersion: 0, wantVer: 1, wantRev: 1},
				{do: "put", key: "a", rule: `{"v":2}`, ifVersion: 0, wantErr: store.ErrConflict},
			},
			wantRule: `{"v":1}`,
		},
		{
			name: "stale ifVersion conflicts",
			steps: []step{
				{do: "put", key: "a", rule: `{"v":1}`, ifVersion: store.AnyVersion, wantVer: 1, wantRev: 1},
				{do: "put", key: "a", rule: `{"v":2}`, ifVersion: 1, wantVer: 2, wantRev: 2},
				{do: "put", key: "a", rule: `{"v":3}`, ifVersion: 1, wantErr: store.ErrConflict},
				{do: "put", key: "a", rule: `{"v":3}`, ifVersion: 3, wantErr: store.ErrConflict},
			},
			wantRule: `{"v":2}`,
		},
		{
			name: "ifVersion on a missing rule conflicts",
			steps: []step{
				{do: "put", key: "a", rule: `{}`, ifVersion: 3, wantErr: store.ErrConflict},
			},
		},
		{
			name: "delete, then versions continue after re-create",
			steps: []step{
				{do: "put", key: "a", rule: `{"v":1}`, ifVersion: 0, wantVer: 1, wantRev: 1},
				{do: "delete", key: "a", ifVersion: 1, wantVer: 2, wantRev: 2},
				{do: "delete", key: "a", ifVersion: store.AnyVersion, wantErr: store.ErrNotFound},
				{do: "put", key: "a", rule: `{"v":2}`, ifVersion: 2, wantErr: store.ErrConflict},
				{do: "put", key: "a", rule: `{"v":2}`, ifVersion: 0, wantVer: 3, wantRev: 3},
			},
			wantRule: `{"v":2}`,
		},
		{
			name: "delete stays deleted",
			steps: []step{
				{do: "put", key: "a", rule: `{}`, ifVersion: 0, wantVer: 1, wantRev: 1},
				{do: "delete", key: "a", ifVersion: store.AnyVersion, wantVer: 2, wantRev: 2},
			},
		},
		{
			name: "delete checks ifVersion",
			steps: []step{
				{do: "put", key: "a", rule: `{}`, ifVersion: 0, wantVer: 1, wantRev: 1},
				{do: "put", key: "a", rule: `{}`, ifVersion: 1, wantVer: 2, wantRev: 2},
				{do: "delete", key: "a", ifVersion: 1, wantErr: store.ErrConflict},
				{do: "delete", key: "a", ifVersion: 0, wantErr: store.ErrConflict},
				{do: "delete", key: "b", ifVersion: store.AnyVersion, wantErr: store.ErrNotFound},
			},
			wantRule: `{}`,
		},
		{
			name: "revert is a versioned write",
			steps: []step{
				{do: "put", key: "a", rule: `{"v":1}`, ifVersion: 0, wantVer: 1, wantRev: 1},
				{do: "put", key: "a", rule: `{"v":2}`, ifVersion: 1, wantVer: 2, wantRev: 2},
				{do: "revert", key: "a", rule: `{"v":1}`, ifVersion: 2, wantVer: 3, wantRev: 3},
				{do: "revert", key: "a", rule: `{"v":0}`, ifVersion: 2, wantErr: store.ErrConflict},
			},
			wantRule: `{"v":1}`,
		},
		{
			name: "per-rule rollback bumps the version and is idempotent",
			steps: []step{
				{do: "put", key: "a", rule: `{}`, ifVersion: 0, wantVer: 1, wantRev: 1},
				{do: "rollback", key: "a", wantVer: 2, wantRev: 2},
				{do: "rollback", key: "a", wantVer: 2, wantRev: 2},
				{do: "put", key: "a", rule: `{"v":2}`, ifVersion: 1, wantErr: store.ErrConflict},
				{do: "put", key: "a", rule: `{"v":2}`, ifVersion: 2, wantVer: 3, wantRev: 3},
				{do: "resume", key: "a", wantVer: 4, wantRev: 4},
				{do: "resume", key: "a", wantVer: 4, wantRev: 4},
			},
			wantRule: `{"v":2}`,
		},
		{
			name: "a conditional rollback needs the current version",
			steps: []step{
				{do: "put", key: "a", rule: `{}`, ifVersion: 0, wantVer: 1, wantRev: 1},
				{do: "put", key: "a", rule: `{"v":2}`, ifVersion: 1, wantVer: 2, wantRev: 2},
				{do: "rollback", key: "a", ifVersion: 1, wantErr: store.ErrConflict},
				{do: "rollback", key: "a", ifVersion: -7, wantErr: store.ErrInvalid},
				{do: "rollback", key: "", ifVersion: 2, wantErr: store.ErrInvalid},
				{do: "rollback", key: "a", ifVersion: 2, wantVer: 3, wantRev: 3},
				{do: "resume", key: "a", ifVersion: 2, wantErr: store.ErrConflict},
				{do: "resume", key: "a", ifVersion: 3, wantVer: 4, wantRev: 4},
			},
			wantRule: `{"v":2}`,
		},
		{
			name: "rollback of a missing rule",
			steps: []step{
				{do: "rollback", key: "a", wantErr: store.ErrNotFound},
				{do: "put", key: "a", rule: `{}`, ifVersion: 0, wantVer: 1, wantRev: 1},
				{do: "delete", key: "a", ifVersion: 1, wantVer: 2, wantRev: 2},
				{do: "resume", key: "a", wantErr: store.ErrNotFound},
			},
		},
		{
			name: "global rollback bumps the revision only",
			steps: []step{
				{do: "put", key: "a", rule: `{}`, ifVersion: 0, wantVer: 1, wantRev: 1},
				{do: "rollback", key: "", wantRev: 2},
				{do: "rollback", key: "", wantRev: 2},
				{do: "resume", key: "", wantRev: 3},
				{do: "put", key: "a", rule: `{}`, ifVersion: 1, wantVer: 2, wantRev: 4},
			},
			wantRule: `{}`,
		},
		{
			name: "invalid arguments",
			steps: []step{
				{do: "put", key: "", rule: `{}`, ifVersion: store.AnyVersion, wantErr: store.ErrInvalid},
				{do: "put", key: "_global", rule: `{}`, ifVersion: store.AnyVersion, wantErr: store.ErrInvalid},
				{do: "put", key: "-a", rule: `{}`, ifVersion: store.AnyVersion, wantErr: store.ErrInvalid},
				{do: "put", key: "a/b", rule: `{}`, ifVersion: store.AnyVersion, wantErr: store.ErrInvalid},
				{do: "put", key: strings.Repeat("k", 129), rule: `{}`, ifVersion: store.AnyVersion, wantErr: store.ErrInvalid},
				{do: "put", key: "a", rule: `[1]`, ifVersion: store.AnyVersion, wantErr: store.ErrInvalid},
				{do: "put", key: "a", rule: `{"a":`, ifVersion: store.AnyVersion, wantErr: store.ErrInvalid},
				{do: "put", key: "a", rule: `{} {}`, ifVersion: store.AnyVersion, wantErr: store.ErrInvalid},
				{do: "put", key: "a", rule: "{\"a\":\"\xff\"}", ifVersion: store.AnyVersion, wantErr: store.ErrInvalid},
				{do: "put", key: "a", rule: ``, ifVersion: store.AnyVersion, wantErr: store.ErrInvalid},
				{do: "put", key: "a", rule: `{}`, ifVersion: -2, wantErr: store.ErrInvalid},
				{do: "delete", key: "a", ifVersion: -2, wantErr: store.ErrInvalid},
				{do: "rollback", key: "a b", wantErr: store.ErrInvalid},
				{do: "put", key: "A0_.:-z", rule: `{}`, ifVersion: store.AnyVersion, wantVer: 1, wantRev: 1},
				{do: "put", key: strings.Repeat("k", 128), rule: `{}`, ifVersion: store.AnyVersion, wantVer: 1, wantRev: 2},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			s := impl.Open(t, impl.Name(t), 0)
			for i, st := range tt.steps {
				ver, rev, err := st.run(ctx, s)
				if st.wantErr != nil {
					if !errors.Is(err, st.wantErr) {
						t.Fatalf("step %d: %s %q = %v, want %v", i, st.do, st.key, err, st.wantErr)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: %s %q = %v", i, st.do, st.key, err)
				}
				if ver != st.wantVer || rev != st.wantRev {
					t.Fatalf("step %d: %s %q = version %d revision %d, want %d %d", i, st.do, st.key, ver, rev, st.wantVer, st.wantRev)
				}
			}
			e, err := s.Get(ctx, "a")
			if tt.wantRule == "" {
				if !errors.Is(err, store.ErrNotFound) {
					t.Fatalf(`Get("a") = %s, %v, want store.ErrNotFound`, e.Rule, err)
				}
				return
			}
			if err != nil || string(e.Rule) != tt.wantRule {
				t.Fatalf(`Get("a") = %s, %v, want %s`, e.Rule, err, tt.wantRule)
			}
		})
	}
}

// ErrorMessages checks the wording of the errors a store returns.
func ErrorMessages(t *testing.T, impl Harness) {
	ctx := t.Context()
	s := impl.Open(t, impl.Name(t), 0)
	for i := range 4 {
		if _, err := s.Put(ctx, "x", raw(`{}`), store.AnyVersion, store.Meta{}); err != nil {
			t.Fatalf("Put #%d = %v", i, err)
		}
	}
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"stale put", func() error { _, err := s.Put(ctx, "x", raw(`{}`), 3, store.Meta{}); return err },
			`rule "x": version is 4, If-Match wanted 3: conflict`},
		{"missing get", func() error { _, err := s.Get(ctx, "y"); return err },
			`rule "y": not found`},
		{"bad key", func() error { _, err := s.Put(ctx, "_y", raw(`{}`), 0, store.Meta{}); return err },
			`put rule "_y": key must match ^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$: invalid argument`},
		{"missing delete", func() error { _, err := s.Delete(ctx, "y", store.AnyVersion, store.Meta{}); return err },
			`rule "y": not found`},
		{"missing history", func() error { _, err := s.History(ctx, "y"); return err },
			`history of "y": not found`},
		{"stale rollback", func() error { _, err := s.SetRollback(ctx, "x", true, 3, store.Meta{}); return err },
			`rule "x": version is 4, If-Match wanted 3: conflict`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); err == nil || err.Error() != tt.want {
				t.Errorf("error = %v, want %q", err, tt.want)
			}
		})
	}
}

// EntryAndHistory checks entries and history records, field by field, live,
// reopened and (with Compact) compacted.
func EntryAndHistory(t *testing.T, impl Harness) {
	ctx := t.Context()
	name := impl.Name(t)
	s := impl.Open(t, name, 0) // the clock ticks once per change
	calls := []func() error{
		func() error {
			_, err := s.Put(ctx, "r", raw(`{ "v": 1 }`), 0, store.Meta{By: "ann", Reason: "first"})
			return err
		},
		func() error {
			_, err := s.Put(ctx, "r", raw(`{"v":2}`), 1, store.Meta{By: "bob", Op: store.OpUpdate})
			return err
		},
		func() error {
			_, err := s.SetRollback(ctx, "r", true, store.AnyVersion, store.Meta{By: "ops", Reason: "bad"})
			return err
		},
		func() error {
			_, err := s.SetRollback(ctx, "", true, store.AnyVersion, store.Meta{By: "ops", Reason: "all"})
			return err
		},
		func() error { _, err := s.Delete(ctx, "r", 3, store.Meta{By: "ann"}); return err },
		func() error {
			_, err := s.Put(ctx, "r", raw(`{"v":1}`), 0, store.Meta{By: "ann", Op: store.OpRevert})
			return err
		},
		func() error {
			_, err := s.SetRollback(ctx, "", false, store.AnyVersion, store.Meta{By: "ops", Op: store.OpResume})
			return err
		},
	}
	for i, call := range calls {
		if err := call(); err != nil {
			t.Fatalf("call %d = %v", i, err)
		}
	}
	v1, v2 := raw(`{"v":1}`), raw(`{"v":2}`)
	wantRule := []store.Change{
		{Key: "r", Op: store.OpRevert, Version: 5, Revision: 6, At: At(6), By: "ann", After: v1},
		{Key: "r", Op: store.OpDelete, Version: 4, Revision: 5, At: At(5), By: "ann", Before: v2, RolledBackBefore: true},
		{Key: "r", Op: store.OpRollback, Version: 3, Revision: 3, At: At(3), By: "ops", Reason: "bad", Before: v2, After: v2, RolledBackAfter: true},
		{Key: "r", Op: store.OpUpdate, Version: 2, Revision: 2, At: At(2), By: "bob", Before: v1, After: v2},
		{Key: "r", Op: store.OpCreate, Version: 1, Revision: 1, At: At(1), By: "ann", Reason: "first", After: v1},
	}
	wantGlobal := []store.Change{
		{Key: store.GlobalKey, Op: store.OpResume, Version: 2, Revision: 7, At: At(7), By: "ops", RolledBackBefore: true},
		{Key: store.GlobalKey, Op: store.OpRollback, Version: 1, Revision: 4, At: At(4), By: "ops", Reason: "all", RolledBackAfter: true},
	}
	wantEntry := store.Entry{Key: "r", Rule: v1, Version: 5, Revision: 6, UpdatedAt: At(6), UpdatedBy: "ann"}

	check := func(t *testing.T, s store.Store) {
		t.Helper()
		if got, err := s.History(ctx, "r"); err != nil || !reflect.DeepEqual(got, wantRule) {
			t.Errorf("History(r) = %v\n%+v\nwant %+v", err, got, wantRule)
		}
		if got, err := s.History(ctx, store.GlobalKey); err != nil || !reflect.DeepEqual(got, wantGlobal) {
			t.Errorf("History(_global) = %v\n%+v\nwant %+v", err, got, wantGlobal)
		}
		if got, err := s.Get(ctx, "r"); err != nil || !reflect.DeepEqual(got, wantEntry) {
			t.Errorf("Get(r) = %+v, %v, want %+v", got, err, wantEntry)
		}
		st, err := s.Load(ctx)
		want := store.State{Revision: 7, Rules: []store.Entry{wantEntry}}
		if err != nil || !reflect.DeepEqual(st, want) {
			t.Errorf("Load() = %+v, %v, want %+v", st, err, want)
		}
		if _, err := s.History(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("History(nope) = %v, want store.ErrNotFound", err)
		}
	}
	check(t, s)
	s.Close()
	t.Run("reopened", func(t *testing.T) { check(t, impl.Open(t, name, 0)) })
	if impl.Compact != nil {
		t.Run("compacted", func(t *testing.T) {
			s := impl.Open(t, name, 0)
			impl.Compact(t, s)
			s.Close()
			check(t, impl.Open(t, name, 0))
		})
	}
}

// MetaOp checks that the store, not the caller, decides a change's op.
func MetaOp(t *testing.T, impl Harness) {
	ctx := t.Context()
	s := impl.Open(t, impl.Name(t), 0)
	if _, err := s.Put(ctx, "a", raw(`{}`), 0, store.Meta{Op: store.OpUpdate}); err != nil {
		t.Fatalf("Put with Op update on a new rule = %v", err)
	}
	h, _ := s.History(ctx, "a")
	if len(h) != 1 || h[0].Op != store.OpCreate {
		t.Fatalf("history = %+v, want one %q: the store decides", h, store.OpCreate)
	}
	tests := []struct {
		name string
		call func() error
	}{
		{"put with delete", func() error {
			_, err := s.Put(ctx, "a", raw(`{}`), store.AnyVersion, store.Meta{Op: store.OpDelete})
			return err
		}},
		{"put with rollback", func() error {
			_, err := s.Put(ctx, "a", raw(`{}`), store.AnyVersion, store.Meta{Op: store.OpRollback})
			return err
		}},
		{"delete with update", func() error {
			_, err := s.Delete(ctx, "a", store.AnyVersion, store.Meta{Op: store.OpUpdate})
			return err
		}},
		{"rollback with resume", func() error {
			_, err := s.SetRollback(ctx, "a", true, store.AnyVersion, store.Meta{Op: store.OpResume})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("error = %v, want store.ErrInvalid", err)
			}
		})
	}
	if e, err := s.Get(ctx, "a"); err != nil || e.Version != 1 {
		t.Errorf("Get(a) = version %d, %v; rejected calls must not write", e.Version, err)
	}
}

// HistoryPruning checks that history is pruned to the limit, also after a
// reopen with a lower one, without resetting version counters.
func HistoryPruning(t *testing.T, impl Harness) {
	ctx := t.Context()
	// build writes 7 updates and 3 global flag changes, then deletes the
	// rule: versions 1..8 of "a" and 1..3 of the global flag.
	build := func(t *testing.T, name string) store.Store {
		s := impl.Open(t, name, 3)
		for i := 1; i <= 7; i++ {
			if _, err := s.Put(ctx, "a", raw(fmt.Sprintf(`{"v":%d}`, i)), store.AnyVersion, store.Meta{}); err != nil {
				t.Fatal(err)
			}
			if i%2 == 0 {
				if _, err := s.SetRollback(ctx, "", i%4 == 2, store.AnyVersion, store.Meta{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := s.Delete(ctx, "a", store.AnyVersion, store.Meta{}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	reopen := func(limit int) func(t *testing.T, s store.Store, name string) store.Store {
		return func(t *testing.T, s store.Store, name string) store.Store {
			s.Close()
			return impl.Open(t, name, limit)
		}
	}
	type variant struct {
		name       string
		open       func(t *testing.T, built store.Store, name string) store.Store
		wantRule   []int64
		wantGlobal []int64
		wantKeys   int // history records the store keeps for "a" (HistoryRecords)
	}
	tests := []variant{
		{"live", func(t *testing.T, s store.Store, _ string) store.Store { return s }, []int64{8, 7, 6}, []int64{3, 2, 1}, 3},
		{"reopened", reopen(3), []int64{8, 7, 6}, []int64{3, 2, 1}, 3},
	}
	if impl.Compact != nil {
		tests = append(tests, variant{"compacted", func(t *testing.T, s store.Store, name string) store.Store {
			impl.Compact(t, s)
			s.Close()
			return impl.Open(t, name, 3)
		}, []int64{8, 7, 6}, []int64{3, 2, 1}, 3})
	}
	tests = append(tests, variant{"lower limit on reopen", reopen(1), []int64{8}, []int64{3}, 3})
	versions := func(t *testing.T, s store.Store, key string) []int64 {
		t.Helper()
		h, err := s.History(ctx, key)
		if err != nil {
			t.Fatalf("History(%q) = %v", key, err)
		}
		var vs []int64
		for _, c := range h {
			vs = append(vs, c.Version)
		}
		return vs
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := impl.Name(t)
			s := tt.open(t, build(t, name), name)
			if got := versions(t, s, "a"); !reflect.DeepEqual(got, tt.wantRule) {
				t.Errorf("History(a) versions = %v, want %v", got, tt.wantRule)
			}
			if got := versions(t, s, store.GlobalKey); !reflect.DeepEqual(got, tt.wantGlobal) {
				t.Errorf("History(_global) versions = %v, want %v", got, tt.wantGlobal)
			}
			// Pruning happens in what the store keeps, not only in what
			// History shows.
			if impl.HistoryRecords != nil {
				if n := impl.HistoryRecords(t, s, "a"); n != tt.wantKeys {
					t.Errorf("history records of a kept by the store = %d, want %d", n, tt.wantKeys)
				}
			}
			st, err := s.Load(ctx)
			if err != nil || st.Revision != 11 || !st.RolledBack || len(st.Rules) != 0 {
				t.Errorf("Load() = %+v, %v, want revision 11, rolled back, no rules", st, err)
			}
			// Pruning must not reset the version counter of a deleted rule.
			if e, err := s.Put(ctx, "a", raw(`{}`), 0, store.Meta{}); err != nil || e.Version != 9 {
				t.Errorf("re-create = version %d, %v, want 9", e.Version, err)
			}
		})
	}
}

// NoAliasing checks that no slice a store takes or returns is shared with
// what it keeps.
func NoAliasing(t *testing.T, impl Harness) {
	ctx := t.Context()
	s := impl.Open(t, impl.Name(t), 0)
	in := []byte(`{"a":"original"}`)
	e, err := s.Put(ctx, "k", in, 0, store.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "k", raw(`{"a":"second"}`), 1, store.Meta{}); err != nil {
		t.Fatal(err)
	}
	scribble := func(b []byte) { copy(b, "XXXXXXXXXXXXXXXX") }
	scribble(in)
	scribble(e.Rule)
	if got, _ := s.Get(ctx, "k"); true {
		scribble(got.Rule)
	}
	if st, _ := s.Load(ctx); len(st.Rules) == 1 {
		scribble(st.Rules[0].Rule)
	}
	if h, _ := s.History(ctx, "k"); len(h) == 2 {
		scribble(h[0].Before)
		scribble(h[0].After)
		scribble(h[1].After)
	}
	c, err := s.Delete(ctx, "k", 2, store.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	scribble(c.Before)
	h, err := s.History(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`{"a":"second"}`, `{"a":"second"}`, `{"a":"original"}`}
	got := []string{string(h[0].Before), string(h[1].After), string(h[2].After)}
	if !slices.Equal(got, want) {
		t.Errorf("history rules = %q, want %q", got, want)
	}
	if _, err := s.Put(ctx, "k", raw(`{"a":"third"}`), 0, store.Meta{}); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Load(ctx)
	scribble(st.Rules[0].Rule)
	if got, _ := s.Load(ctx); string(got.Rules[0].Rule) != `{"a":"third"}` {
		t.Errorf("Load after scribbling a loaded rule = %s", got.Rules[0].Rule)
	}
}

// Closed checks Kind, a second Close, and that every call after Close
// fails with ErrClosed.
func Closed(t *testing.T, impl Harness) {
	ctx := t.Context()
	s := impl.Open(t, impl.Name(t), 0)
	if s.Kind() != impl.Kind {
		t.Errorf("Kind() = %q, want %q", s.Kind(), impl.Kind)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close() = %v", err)
	}
	tests := []struct {
		name string
		call func() error
	}{
		{"Load", func() error { _, err := s.Load(ctx); return err }},
		{"Get", func() error { _, err := s.Get(ctx, "a"); return err }},
		{"History", func() error { _, err := s.History(ctx, "a"); return err }},
		{"Put", func() error { _, err := s.Put(ctx, "a", raw(`{}`), 0, store.Meta{}); return err }},
		{"Delete", func() error { _, err := s.Delete(ctx, "a", store.AnyVersion, store.Meta{}); return err }},
		{"SetRollback", func() error { _, err := s.SetRollback(ctx, "", true, store.AnyVersion, store.Meta{}); return err }},
	}
	for _, tt := range tests {
		if err := tt.call(); !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", tt.name, err)
		}
	}
}

// CanceledContext checks that a call with a canceled context writes
// nothing.
func CanceledContext(t *testing.T, impl Harness) {
	s := impl.Open(t, impl.Name(t), 0)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Put(ctx, "a", raw(`{}`), 0, store.Meta{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with a canceled context = %v", err)
	}
	if st, err := s.Load(t.Context()); err != nil || st.Revision != 0 {
		t.Errorf("Load() = revision %d, %v; a canceled Put must not write", st.Revision, err)
	}
}

// Changes checks the change notifications: one channel, coalesced to the
// latest revision, never blocking writers, none for a no-op, closed by
// Close.
func Changes(t *testing.T, impl Harness) {
	ctx := t.Context()
	s := impl.Open(t, impl.Name(t), 0)
	ch := s.Changes()
	if ch != s.Changes() {
		t.Fatal("Changes() returned two different channels")
	}
	select {
	case rev := <-ch:
		t.Fatalf("notification %d before any change", rev)
	default:
	}
	if _, err := s.Put(ctx, "a", raw(`{}`), 0, store.Meta{}); err != nil {
		t.Fatal(err)
	}
	if rev := NextChange(t, ch, 5*time.Second); rev != 1 {
		t.Fatalf("first notification = %d, want 1", rev)
	}
	// Nobody reads while five changes commit: writers must not block, and
	// the reader then finds only the latest revision.
	done := make(chan error, 1)
	go func() {
		for i := range 4 {
			if _, err := s.Put(ctx, "a", raw(fmt.Sprintf(`{"i":%d}`, i)), store.AnyVersion, store.Meta{}); err != nil {
				done <- err
				return
			}
		}
		_, err := s.SetRollback(ctx, "", true, store.AnyVersion, store.Meta{})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("writers blocked on an unread Changes channel")
	}
	if rev := NextChange(t, ch, 5*time.Second); rev != 6 {
		t.Fatalf("coalesced notification = %d, want 6", rev)
	}
	select {
	case rev := <-ch:
		t.Fatalf("extra notification %d", rev)
	default:
	}
	// A change that changes nothing notifies nothing.
	if _, err := s.SetRollback(ctx, "", true, store.AnyVersion, store.Meta{}); err != nil {
		t.Fatal(err)
	}
	select {
	case rev := <-ch:
		t.Fatalf("notification %d for a no-op", rev)
	case <-time.After(300 * time.Millisecond):
	}
	s.Close()
	if _, ok := <-ch; ok {
		t.Fatal("Changes channel still open after Close")
	}
}

// NextChange waits up to timeout for a notification on ch.
func NextChange(t testing.TB, ch <-chan int64, timeout time.Duration) int64 {
	t.Helper()
	select {
	case rev, ok := <-ch:
		if !ok {
			t.Fatal("Changes channel closed")
		}
		return rev
	case <-time.After(timeout):
		t.Fatalf("no Changes notification within %v", timeout)
	}
	panic("unreachable")
}
