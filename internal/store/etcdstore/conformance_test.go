package etcdstore

// The tests in this file are the file store's (internal/store/*_test.go),
// copied with their tables unchanged and run against etcd, plus one that
// runs the same mixed workload through both stores and compares everything
// they return. Keep the tables in step with the file store's.

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/store/etcdstore/etcdtest"
)

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
		state, err := s.SetRollback(ctx, st.key, st.do == "rollback", m)
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

const AnyVersion = store.AnyVersion

var (
	ErrConflict = store.ErrConflict
	ErrNotFound = store.ErrNotFound
	ErrInvalid  = store.ErrInvalid
)

func TestSemantics(t *testing.T) {
	srv := etcdtest.Start(t)
	tests := []struct {
		name  string
		steps []step
		// wantRule is the rule Get returns for key "a" at the end ("" for
		// ErrNotFound).
		wantRule string
	}{
		{
			name: "create then update",
			steps: []step{
				{do: "put", key: "a", rule: `{"v":1}`, ifVersion: AnyVersion, wantVer: 1, wantRev: 1},
				{do: "put", key: "a", rule: `{"v":2}`, ifVersion: 1, wantVer: 2, wantRev: 2},
				{do: "put", key: "a", rule: `{"v":3}`, ifVersion: AnyVersion, wantVer: 3, wantRev: 3},
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
				{do: "put", key: "a", rule: `{"v":2}`, ifVersion: 0, wantErr: ErrConflict},
			},
			wantRule: `{"v":1}`,
		},
		{
			name: "stale ifVersion conflicts",
			steps: []step{
				{do: "put", key: "a", rule: `{"v":1}`, ifVersion: AnyVersion, wantVer: 1, wantRev: 1},
				{do: "put", key: "a", rule: `{"v":2}`, ifVersion: 1, wantVer: 2, wantRev: 2},
				{do: "put", key: "a", rule: `{"v":3}`, ifVersion: 1, wantErr: ErrConflict},
				{do: "put", key: "a", rule: `{"v":3}`, ifVersion: 3, wantErr: ErrConflict},
			},
			wantRule: `{"v":2}`,
		},
		{
			name: "ifVersion on a missing rule conflicts",
			steps: []step{
				{do: "put", key: "a", rule: `{}`, ifVersion: 3, wantErr: ErrConflict},
			},
		},
		{
			name: "delete, then versions continue after re-create",
			steps: []step{
				{do: "put", key: "a", rule: `{"v":1}`, ifVersion: 0, wantVer: 1, wantRev: 1},
				{do: "delete", key: "a", ifVersion: 1, wantVer: 2, wantRev: 2},
				{do: "delete", key: "a", ifVersion: AnyVersion, wantErr: ErrNotFound},
				{do: "put", key: "a", rule: `{"v":2}`, ifVersion: 2, wantErr: ErrConflict},
				{do: "put", key: "a", rule: `{"v":2}`, ifVersion: 0, wantVer: 3, wantRev: 3},
			},
			wantRule: `{"v":2}`,
		},
		{
			name: "delete stays deleted",
			steps: []step{
				{do: "put", key: "a", rule: `{}`, ifVersion: 0, wantVer: 1, wantRev: 1},
				{do: "delete", key: "a", ifVersion: AnyVersion, wantVer: 2, wantRev: 2},
			},
		},
		{
			name: "delete checks ifVersion",
			steps: []step{
				{do: "put", key: "a", rule: `{}`, ifVersion: 0, wantVer: 1, wantRev: 1},
				{do: "put", key: "a", rule: `{}`, ifVersion: 1, wantVer: 2, wantRev: 2},
				{do: "delete", key: "a", ifVersion: 1, wantErr: ErrConflict},
				{do: "delete", key: "a", ifVersion: 0, wantErr: ErrConflict},
				{do: "delete", key: "b", ifVersion: AnyVersion, wantErr: ErrNotFound},
			},
			wantRule: `{}`,
		},
		{
			name: "revert is a versioned write",
			steps: []step{
				{do: "put", key: "a", rule: `{"v":1}`, ifVersion: 0, wantVer: 1, wantRev: 1},
				{do: "put", key: "a", rule: `{"v":2}`, ifVersion: 1, wantVer: 2, wantRev: 2},
				{do: "revert", key: "a", rule: `{"v":1}`, ifVersion: 2, wantVer: 3, wantRev: 3},
				{do: "revert", key: "a", rule: `{"v":0}`, ifVersion: 2, wantErr: ErrConflict},
			},
			wantRule: `{"v":1}`,
		},
		{
			name: "per-rule rollback bumps the version and is idempotent",
			steps: []step{
				{do: "put", key: "a", rule: `{}`, ifVersion: 0, wantVer: 1, wantRev: 1},
				{do: "rollback", key: "a", wantVer: 2, wantRev: 2},
				{do: "rollback", key: "a", wantVer: 2, wantRev: 2},
				{do: "put", key: "a", rule: `{"v":2}`, ifVersion: 1, wantErr: ErrConflict},
				{do: "put", key: "a", rule: `{"v":2}`, ifVersion: 2, wantVer: 3, wantRev: 3},
				{do: "resume", key: "a", wantVer: 4, wantRev: 4},
				{do: "resume", key: "a", wantVer: 4, wantRev: 4},
			},
			wantRule: `{"v":2}`,
		},
		{
			name: "rollback of a missing rule",
			steps: []step{
				{do: "rollback", key: "a", wantErr: ErrNotFound},
				{do: "put", key: "a", rule: `{}`, ifVersion: 0, wantVer: 1, wantRev: 1},
				{do: "delete", key: "a", ifVersion: 1, wantVer: 2, wantRev: 2},
				{do: "resume", key: "a", wantErr: ErrNotFound},
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
				{do: "put", key: "", rule: `{}`, ifVersion: AnyVersion, wantErr: ErrInvalid},
				{do: "put", key: "_global", rule: `{}`, ifVersion: AnyVersion, wantErr: ErrInvalid},
				{do: "put", key: "-a", rule: `{}`, ifVersion: AnyVersion, wantErr: ErrInvalid},
				{do: "put", key: "a/b", rule: `{}`, ifVersion: AnyVersion, wantErr: ErrInvalid},
				{do: "put", key: strings.Repeat("k", 129), rule: `{}`, ifVersion: AnyVersion, wantErr: ErrInvalid},
				{do: "put", key: "a", rule: `[1]`, ifVersion: AnyVersion, wantErr: ErrInvalid},
				{do: "put", key: "a", rule: `{"a":`, ifVersion: AnyVersion, wantErr: ErrInvalid},
				{do: "put", key: "a", rule: `{} {}`, ifVersion: AnyVersion, wantErr: ErrInvalid},
				{do: "put", key: "a", rule: "{\"a\":\"\xff\"}", ifVersion: AnyVersion, wantErr: ErrInvalid},
				{do: "put", key: "a", rule: ``, ifVersion: AnyVersion, wantErr: ErrInvalid},
				{do: "put", key: "a", rule: `{}`, ifVersion: -2, wantErr: ErrInvalid},
				{do: "delete", key: "a", ifVersion: -2, wantErr: ErrInvalid},
				{do: "rollback", key: "a b", wantErr: ErrInvalid},
				{do: "put", key: "A0_.:-z", rule: `{}`, ifVersion: AnyVersion, wantVer: 1, wantRev: 1},
				{do: "put", key: strings.Repeat("k", 128), rule: `{}`, ifVersion: AnyVersion, wantVer: 1, wantRev: 2},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			s := openStore(t, srv, prefixOf(t), fastOptions())
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
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf(`Get("a") = %s, %v, want ErrNotFound`, e.Rule, err)
				}
				return
			}
			if err != nil || string(e.Rule) != tt.wantRule {
				t.Fatalf(`Get("a") = %s, %v, want %s`, e.Rule, err, tt.wantRule)
			}
		})
	}
}

func TestErrorMessages(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := t.Context()
	s := openStore(t, srv, prefixOf(t), fastOptions())
	for i := range 4 {
		if _, err := s.Put(ctx, "x", raw(`{}`), AnyVersion, store.Meta{}); err != nil {
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
		{"missing delete", func() error { _, err := s.Delete(ctx, "y", AnyVersion, store.Meta{}); return err },
			`rule "y": not found`},
		{"missing history", func() error { _, err := s.History(ctx, "y"); return err },
			`history of "y": not found`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); err == nil || err.Error() != tt.want {
				t.Errorf("error = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestEntryAndHistory(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := t.Context()
	prefix := prefixOf(t)
	s := openStore(t, srv, prefix, fastOptions()) // the clock ticks once per change
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
			_, err := s.SetRollback(ctx, "r", true, store.Meta{By: "ops", Reason: "bad"})
			return err
		},
		func() error { _, err := s.SetRollback(ctx, "", true, store.Meta{By: "ops", Reason: "all"}); return err },
		func() error { _, err := s.Delete(ctx, "r", 3, store.Meta{By: "ann"}); return err },
		func() error {
			_, err := s.Put(ctx, "r", raw(`{"v":1}`), 0, store.Meta{By: "ann", Op: store.OpRevert})
			return err
		},
		func() error {
			_, err := s.SetRollback(ctx, "", false, store.Meta{By: "ops", Op: store.OpResume})
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
		{Key: "r", Op: store.OpRevert, Version: 5, Revision: 6, At: at(6), By: "ann", After: v1},
		{Key: "r", Op: store.OpDelete, Version: 4, Revision: 5, At: at(5), By: "ann", Before: v2, RolledBackBefore: true},
		{Key: "r", Op: store.OpRollback, Version: 3, Revision: 3, At: at(3), By: "ops", Reason: "bad", Before: v2, After: v2, RolledBackAfter: true},
		{Key: "r", Op: store.OpUpdate, Version: 2, Revision: 2, At: at(2), By: "bob", Before: v1, After: v2},
		{Key: "r", Op: store.OpCreate, Version: 1, Revision: 1, At: at(1), By: "ann", Reason: "first", After: v1},
	}
	wantGlobal := []store.Change{
		{Key: store.GlobalKey, Op: store.OpResume, Version: 2, Revision: 7, At: at(7), By: "ops", RolledBackBefore: true},
		{Key: store.GlobalKey, Op: store.OpRollback, Version: 1, Revision: 4, At: at(4), By: "ops", Reason: "all", RolledBackAfter: true},
	}
	wantEntry := store.Entry{Key: "r", Rule: v1, Version: 5, Revision: 6, UpdatedAt: at(6), UpdatedBy: "ann"}

	check := func(t *testing.T, s *Store) {
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
		if _, err := s.History(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("History(nope) = %v, want ErrNotFound", err)
		}
	}
	check(t, s)
	s.Close()
	t.Run("reopened", func(t *testing.T) { check(t, openStore(t, srv, prefix, fastOptions())) })
}

func TestMetaOp(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := t.Context()
	s := openStore(t, srv, prefixOf(t), fastOptions())
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
			_, err := s.Put(ctx, "a", raw(`{}`), AnyVersion, store.Meta{Op: store.OpDelete})
			return err
		}},
		{"put with rollback", func() error {
			_, err := s.Put(ctx, "a", raw(`{}`), AnyVersion, store.Meta{Op: store.OpRollback})
			return err
		}},
		{"delete with update", func() error {
			_, err := s.Delete(ctx, "a", AnyVersion, store.Meta{Op: store.OpUpdate})
			return err
		}},
		{"rollback with resume", func() error {
			_, err := s.SetRollback(ctx, "a", true, store.Meta{Op: store.OpResume})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, ErrInvalid) {
				t.Errorf("error = %v, want ErrInvalid", err)
			}
		})
	}
	if e, err := s.Get(ctx, "a"); err != nil || e.Version != 1 {
		t.Errorf("Get(a) = version %d, %v; rejected calls must not write", e.Version, err)
	}
}

func TestHistoryPruning(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := t.Context()
	// build writes 7 updates and 3 global flag changes, then deletes the
	// rule: versions 1..8 of "a" and 1..3 of the global flag.
	build := func(t *testing.T, prefix string) *Store {
		opts := fastOptions()
		opts.HistoryLimit = 3
		s := openStore(t, srv, prefix, opts)
		for i := 1; i <= 7; i++ {
			if _, err := s.Put(ctx, "a", raw(fmt.Sprintf(`{"v":%d}`, i)), AnyVersion, store.Meta{}); err != nil {
				t.Fatal(err)
			}
			if i%2 == 0 {
				if _, err := s.SetRollback(ctx, "", i%4 == 2, store.Meta{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := s.Delete(ctx, "a", AnyVersion, store.Meta{}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	reopen := func(limit int) func(t *testing.T, s *Store, prefix string) *Store {
		return func(t *testing.T, s *Store, prefix string) *Store {
			s.Close()
			opts := fastOptions()
			opts.HistoryLimit = limit
			return openStore(t, srv, prefix, opts)
		}
	}
	tests := []struct {
		name       string
		open       func(t *testing.T, built *Store, prefix string) *Store
		wantRule   []int64
		wantGlobal []int64
		wantKeys   int // history records left in etcd for "a"
	}{
		{"live", func(t *testing.T, s *Store, _ string) *Store { return s }, []int64{8, 7, 6}, []int64{3, 2, 1}, 3},
		{"reopened", reopen(3), []int64{8, 7, 6}, []int64{3, 2, 1}, 3},
		{"lower limit on reopen", reopen(1), []int64{8}, []int64{3}, 3},
	}
	versions := func(t *testing.T, s *Store, key string) []int64 {
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
			prefix := prefixOf(t)
			s := tt.open(t, build(t, prefix), prefix)
			if got := versions(t, s, "a"); !reflect.DeepEqual(got, tt.wantRule) {
				t.Errorf("History(a) versions = %v, want %v", got, tt.wantRule)
			}
			if got := versions(t, s, store.GlobalKey); !reflect.DeepEqual(got, tt.wantGlobal) {
				t.Errorf("History(_global) versions = %v, want %v", got, tt.wantGlobal)
			}
			// Pruning happens in etcd, not only in what History shows.
			resp, err := s.Client().Get(ctx, s.keys.historyOf("a"), clientv3.WithPrefix())
			if err != nil || len(resp.Kvs) != tt.wantKeys {
				t.Errorf("history keys of a in etcd = %d, %v, want %d", len(resp.Kvs), err, tt.wantKeys)
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

func TestNoAliasing(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := t.Context()
	s := openStore(t, srv, prefixOf(t), fastOptions())
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

func TestClosed(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := t.Context()
	s := openStore(t, srv, prefixOf(t), fastOptions())
	if s.Kind() != "etcd" {
		t.Errorf("Kind() = %q, want etcd", s.Kind())
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
		{"Delete", func() error { _, err := s.Delete(ctx, "a", AnyVersion, store.Meta{}); return err }},
		{"SetRollback", func() error { _, err := s.SetRollback(ctx, "", true, store.Meta{}); return err }},
	}
	for _, tt := range tests {
		if err := tt.call(); !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", tt.name, err)
		}
	}
}

func TestCanceledContext(t *testing.T) {
	srv := etcdtest.Start(t)
	s := openStore(t, srv, prefixOf(t), fastOptions())
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Put(ctx, "a", raw(`{}`), 0, store.Meta{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with a canceled context = %v", err)
	}
	if st, err := s.Load(t.Context()); err != nil || st.Revision != 0 {
		t.Errorf("Load() = revision %d, %v; a canceled Put must not write", st.Revision, err)
	}
}

func TestChanges(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := t.Context()
	s := openStore(t, srv, prefixOf(t), fastOptions())
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
	if rev := nextChange(t, ch, 5*time.Second); rev != 1 {
		t.Fatalf("first notification = %d, want 1", rev)
	}
	// Nobody reads while five changes commit: writers must not block, and
	// the reader then finds only the latest revision.
	done := make(chan error, 1)
	go func() {
		for i := range 4 {
			if _, err := s.Put(ctx, "a", raw(fmt.Sprintf(`{"i":%d}`, i)), AnyVersion, store.Meta{}); err != nil {
				done <- err
				return
			}
		}
		_, err := s.SetRollback(ctx, "", true, store.Meta{})
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
	if rev := nextChange(t, ch, 5*time.Second); rev != 6 {
		t.Fatalf("coalesced notification = %d, want 6", rev)
	}
	select {
	case rev := <-ch:
		t.Fatalf("extra notification %d", rev)
	default:
	}
	// A change that changes nothing notifies nothing.
	if _, err := s.SetRollback(ctx, "", true, store.Meta{}); err != nil {
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

// dump is everything a store returns: the state and every key's history.
type dump struct {
	State   store.State
	History map[string][]store.Change
}

var mixKeys = []string{"alpha", "beta.v2", "gamma:x", "delta-1", "eps_0"}

func dumpStore(t testing.TB, s store.Store) dump {
	t.Helper()
	ctx := context.Background()
	st, err := s.Load(ctx)
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	d := dump{State: st, History: make(map[string][]store.Change)}
	for _, k := range append([]string{store.GlobalKey}, mixKeys...) {
		h, err := s.History(ctx, k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("History(%q) = %v", k, err)
		}
		d.History[k] = h
	}
	return d
}

// writeMix performs n varied changes, deterministically: the file store's
// workload, with HTML characters, U+2028 and invalid UTF-8 in the metadata.
func writeMix(t testing.TB, s store.Store, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		k := mixKeys[i%len(mixKeys)]
		m := store.Meta{By: fmt.Sprintf("user%d", i%3), Reason: fmt.Sprintf("change <%d> & \u2028 \xff", i)}
		var err error
		switch i % 11 {
		case 3:
			_, err = s.Delete(ctx, k, AnyVersion, m)
			if errors.Is(err, ErrNotFound) {
				err = nil
			}
		case 5:
			_, err = s.SetRollback(ctx, k, i%2 == 1, m)
			if errors.Is(err, ErrNotFound) {
				err = nil
			}
		case 7:
			_, err = s.SetRollback(ctx, "", i%3 == 1, m)
		case 9:
			m.Op = store.OpRevert
			_, err = s.Put(ctx, k, raw(fmt.Sprintf(`{"reverted": %d}`, i)), AnyVersion, m)
		default:
			_, err = s.Put(ctx, k, raw(fmt.Sprintf(` { "i" : %d, "html": "<a&b>", "u": "\u2028 é" } `, i)), AnyVersion, m)
		}
		if err != nil {
			t.Fatalf("change %d on %q: %v", i, k, err)
		}
	}
}

// TestSameAsFileStore runs one workload through the file store and the etcd
// store, with the same clock, and requires everything they return to be
// equal: state, entries, every history record, byte for byte. A second
// etcd store opened on the prefix afterwards (a fresh gateway) must agree
// too, as must a third that followed the writes through its watch.
func TestSameAsFileStore(t *testing.T) {
	srv := etcdtest.Start(t)
	const n, limit = 120, 5
	fs, err := store.OpenFile(t.TempDir(), store.FileOptions{HistoryLimit: limit, Now: newClock()})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	writeMix(t, fs, n)
	want := dumpStore(t, fs)
	if want.State.Revision < 100 {
		t.Fatalf("only %d changes were written", want.State.Revision)
	}

	prefix := prefixOf(t)
	opts := fastOptions()
	opts.HistoryLimit = limit
	watcher := openStore(t, srv, prefix, opts)
	opts.Now = newClock()
	es := openStore(t, srv, prefix, opts)
	writeMix(t, es, n)
	if got := dumpStore(t, es); !reflect.DeepEqual(got, want) {
		t.Errorf("etcd store differs from the file store\netcd: %+v\nfile: %+v", got, want)
	}
	eventually(t, 5*time.Second, "the watching store never reached the writer's revision", func() bool {
		st, _ := watcher.Load(t.Context())
		return st.Revision == want.State.Revision
	})
	if got := dumpStore(t, watcher); !reflect.DeepEqual(got, want) {
		t.Errorf("store that followed the watch differs\ngot:  %+v\nwant: %+v", got.State, want.State)
	}
	if got := dumpStore(t, openStore(t, srv, prefix, opts)); !reflect.DeepEqual(got, want) {
		t.Errorf("reopened etcd store differs\ngot:  %+v\nwant: %+v", got.State, want.State)
	}
}
