package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var testEpoch = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// newClock returns a clock that advances one second per call, so that every
// change has a distinct, predictable time.
func newClock() func() time.Time {
	var n atomic.Int64
	return func() time.Time { return testEpoch.Add(time.Duration(n.Add(1)) * time.Second) }
}

// at is the time the n-th call of a newClock clock returns.
func at(n int) time.Time { return testEpoch.Add(time.Duration(n) * time.Second) }

func openTest(t testing.TB, dir string, opts FileOptions) *FileStore {
	t.Helper()
	if opts.Now == nil {
		opts.Now = newClock()
	}
	s, err := OpenFile(dir, opts)
	if err != nil {
		t.Fatalf("OpenFile(%q) = %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

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

func (st step) run(ctx context.Context, s Store) (ver, rev int64, err error) {
	m := Meta{By: "tester", Reason: st.do + " " + st.key}
	switch st.do {
	case "put", "revert":
		if st.do == "revert" {
			m.Op = OpRevert
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

func TestSemantics(t *testing.T) {
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
			s := openTest(t, t.TempDir(), FileOptions{})
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
	ctx := t.Context()
	s := openTest(t, t.TempDir(), FileOptions{})
	for i := range 4 {
		if _, err := s.Put(ctx, "x", raw(`{}`), AnyVersion, Meta{}); err != nil {
			t.Fatalf("Put #%d = %v", i, err)
		}
	}
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"stale put", func() error { _, err := s.Put(ctx, "x", raw(`{}`), 3, Meta{}); return err },
			`rule "x": version is 4, If-Match wanted 3: conflict`},
		{"missing get", func() error { _, err := s.Get(ctx, "y"); return err },
			`rule "y": not found`},
		{"bad key", func() error { _, err := s.Put(ctx, "_y", raw(`{}`), 0, Meta{}); return err },
			`put rule "_y": key must match ^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$: invalid argument`},
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
	ctx := t.Context()
	s := openTest(t, t.TempDir(), FileOptions{}) // the clock ticks once per change
	calls := []func() error{
		func() error {
			_, err := s.Put(ctx, "r", raw(`{ "v": 1 }`), 0, Meta{By: "ann", Reason: "first"})
			return err
		},
		func() error { _, err := s.Put(ctx, "r", raw(`{"v":2}`), 1, Meta{By: "bob", Op: OpUpdate}); return err },
		func() error { _, err := s.SetRollback(ctx, "r", true, Meta{By: "ops", Reason: "bad"}); return err },
		func() error { _, err := s.SetRollback(ctx, "", true, Meta{By: "ops", Reason: "all"}); return err },
		func() error { _, err := s.Delete(ctx, "r", 3, Meta{By: "ann"}); return err },
		func() error { _, err := s.Put(ctx, "r", raw(`{"v":1}`), 0, Meta{By: "ann", Op: OpRevert}); return err },
		func() error { _, err := s.SetRollback(ctx, "", false, Meta{By: "ops", Op: OpResume}); return err },
	}
	for i, call := range calls {
		if err := call(); err != nil {
			t.Fatalf("call %d = %v", i, err)
		}
	}
	v1, v2 := raw(`{"v":1}`), raw(`{"v":2}`)
	wantRule := []Change{
		{Key: "r", Op: OpRevert, Version: 5, Revision: 6, At: at(6), By: "ann", After: v1},
		{Key: "r", Op: OpDelete, Version: 4, Revision: 5, At: at(5), By: "ann", Before: v2, RolledBackBefore: true},
		{Key: "r", Op: OpRollback, Version: 3, Revision: 3, At: at(3), By: "ops", Reason: "bad", Before: v2, After: v2, RolledBackAfter: true},
		{Key: "r", Op: OpUpdate, Version: 2, Revision: 2, At: at(2), By: "bob", Before: v1, After: v2},
		{Key: "r", Op: OpCreate, Version: 1, Revision: 1, At: at(1), By: "ann", Reason: "first", After: v1},
	}
	wantGlobal := []Change{
		{Key: GlobalKey, Op: OpResume, Version: 2, Revision: 7, At: at(7), By: "ops", RolledBackBefore: true},
		{Key: GlobalKey, Op: OpRollback, Version: 1, Revision: 4, At: at(4), By: "ops", Reason: "all", RolledBackAfter: true},
	}
	wantEntry := Entry{Key: "r", Rule: v1, Version: 5, Revision: 6, UpdatedAt: at(6), UpdatedBy: "ann"}

	check := func(t *testing.T, s *FileStore) {
		t.Helper()
		if got, err := s.History(ctx, "r"); err != nil || !reflect.DeepEqual(got, wantRule) {
			t.Errorf("History(r) = %v\n%+v\nwant %+v", err, got, wantRule)
		}
		if got, err := s.History(ctx, GlobalKey); err != nil || !reflect.DeepEqual(got, wantGlobal) {
			t.Errorf("History(_global) = %v\n%+v\nwant %+v", err, got, wantGlobal)
		}
		if got, err := s.Get(ctx, "r"); err != nil || !reflect.DeepEqual(got, wantEntry) {
			t.Errorf("Get(r) = %+v, %v, want %+v", got, err, wantEntry)
		}
		st, err := s.Load(ctx)
		want := State{Revision: 7, Rules: []Entry{wantEntry}}
		if err != nil || !reflect.DeepEqual(st, want) {
			t.Errorf("Load() = %+v, %v, want %+v", st, err, want)
		}
		if _, err := s.History(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("History(nope) = %v, want ErrNotFound", err)
		}
	}
	check(t, s)
	dir := s.dir
	s.Close()
	t.Run("reopened", func(t *testing.T) { check(t, openTest(t, dir, FileOptions{})) })
	t.Run("compacted", func(t *testing.T) {
		s := openTest(t, dir, FileOptions{})
		s.wmu.Lock()
		s.j.nextCompact = 0
		s.compactBytes = 1
		s.maybeCompact()
		s.wmu.Unlock()
		if s.j.size != s.j.base {
			t.Fatalf("journal is %d bytes after compaction, checkpoint %d", s.j.size, s.j.base)
		}
		s.Close()
		check(t, openTest(t, dir, FileOptions{}))
	})
}

func TestMetaOp(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, t.TempDir(), FileOptions{})
	if _, err := s.Put(ctx, "a", raw(`{}`), 0, Meta{Op: OpUpdate}); err != nil {
		t.Fatalf("Put with Op update on a new rule = %v", err)
	}
	h, _ := s.History(ctx, "a")
	if h[0].Op != OpCreate {
		t.Errorf("op = %q, want the store to decide %q", h[0].Op, OpCreate)
	}
	tests := []struct {
		name string
		call func() error
	}{
		{"put with delete", func() error { _, err := s.Put(ctx, "a", raw(`{}`), AnyVersion, Meta{Op: OpDelete}); return err }},
		{"put with rollback", func() error { _, err := s.Put(ctx, "a", raw(`{}`), AnyVersion, Meta{Op: OpRollback}); return err }},
		{"delete with update", func() error { _, err := s.Delete(ctx, "a", AnyVersion, Meta{Op: OpUpdate}); return err }},
		{"rollback with resume", func() error { _, err := s.SetRollback(ctx, "a", true, Meta{Op: OpResume}); return err }},
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
	ctx := t.Context()
	// build writes 7 updates and 3 global flag changes, then deletes the
	// rule: versions 1..8 of "a" and 1..3 of the global flag.
	build := func(t *testing.T, dir string) *FileStore {
		s := openTest(t, dir, FileOptions{HistoryLimit: 3})
		for i := 1; i <= 7; i++ {
			if _, err := s.Put(ctx, "a", raw(fmt.Sprintf(`{"v":%d}`, i)), AnyVersion, Meta{}); err != nil {
				t.Fatal(err)
			}
			if i%2 == 0 {
				if _, err := s.SetRollback(ctx, "", i%4 == 2, Meta{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := s.Delete(ctx, "a", AnyVersion, Meta{}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		name       string
		open       func(t *testing.T, built *FileStore) *FileStore
		wantRule   []int64
		wantGlobal []int64
	}{
		{"live", func(t *testing.T, s *FileStore) *FileStore { return s }, []int64{8, 7, 6}, []int64{3, 2, 1}},
		{"reopened", func(t *testing.T, s *FileStore) *FileStore {
			s.Close()
			return openTest(t, s.dir, FileOptions{HistoryLimit: 3})
		}, []int64{8, 7, 6}, []int64{3, 2, 1}},
		{"compacted", func(t *testing.T, s *FileStore) *FileStore {
			s.wmu.Lock()
			s.compactBytes = 1
			s.maybeCompact()
			s.wmu.Unlock()
			if s.j.size != s.j.base {
				t.Fatalf("journal not compacted: %d bytes, checkpoint %d", s.j.size, s.j.base)
			}
			s.Close()
			return openTest(t, s.dir, FileOptions{HistoryLimit: 3})
		}, []int64{8, 7, 6}, []int64{3, 2, 1}},
		{"lower limit on reopen", func(t *testing.T, s *FileStore) *FileStore {
			s.Close()
			return openTest(t, s.dir, FileOptions{HistoryLimit: 1})
		}, []int64{8}, []int64{3}},
	}
	versions := func(t *testing.T, s *FileStore, key string) []int64 {
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
			s := tt.open(t, build(t, t.TempDir()))
			if got := versions(t, s, "a"); !reflect.DeepEqual(got, tt.wantRule) {
				t.Errorf("History(a) versions = %v, want %v", got, tt.wantRule)
			}
			if got := versions(t, s, GlobalKey); !reflect.DeepEqual(got, tt.wantGlobal) {
				t.Errorf("History(_global) versions = %v, want %v", got, tt.wantGlobal)
			}
			st, err := s.Load(ctx)
			if err != nil || st.Revision != 11 || !st.RolledBack || len(st.Rules) != 0 {
				t.Errorf("Load() = %+v, %v, want revision 11, rolled back, no rules", st, err)
			}
			// Pruning must not reset the version counter of a deleted rule.
			if e, err := s.Put(ctx, "a", raw(`{}`), 0, Meta{}); err != nil || e.Version != 9 {
				t.Errorf("re-create = version %d, %v, want 9", e.Version, err)
			}
		})
	}
}
