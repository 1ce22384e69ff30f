package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/store/etcdstore/etcdtest"
)

// TestRestoredFromBackup restores etcd from a copy of its data directory
// taken before the last changes: its revision, and the store's, go back.
// Every store goes over to what etcd holds now, in a new epoch, whether a
// probe, a reconnection, the watch or a write notices first, and a write
// made after the restore is what both stores serve.
func TestRestoredFromBackup(t *testing.T) {
	// noProbe leaves a restore to be noticed some other way.
	noProbe := func(o *Options, _ int) { o.ProbeInterval = time.Minute }
	waitRestored := func(t *testing.T, _ *etcdtest.Server, a, b *Store) {
		for i, s := range []*Store{a, b} {
			eventually(t, 10*time.Second, fmt.Sprintf("store %d never served the restored state", i), func() bool {
				st, _ := s.Load(t.Context())
				return st.Revision == 1 && st.Epoch == 1 && len(st.Rules) == 1 && string(st.Rules[0].Rule) == `{"p":100}`
			})
		}
	}
	tests := []struct {
		name string
		// opts adjusts the options of store i (a is 0, b is 1).
		opts func(o *Options, i int)
		// after runs once etcd is restored, before the writes.
		after func(t *testing.T, srv *etcdtest.Server, a, b *Store)
		// bFirst makes store b write first.
		bFirst bool
	}{
		// Probes that fail while etcd restarts end the watch.
		{name: "a reconnection notices", after: waitRestored},
		// Probes that outlast the restart leave the watch to the client,
		// which resumes it on a history that is not its own.
		{name: "a probe notices", opts: func(o *Options, _ int) { o.ProbeTimeout = 10 * time.Second }, after: waitRestored},
		// Store a writes before anything else could notice; b's probe
		// notices in time to serve the write.
		{name: "a write notices", opts: func(o *Options, i int) {
			if i == 0 {
				o.ProbeInterval = time.Minute
			} else {
				o.ProbeTimeout = 10 * time.Second
			}
		}},
		{name: "the watch notices after etcd's revision climbed past the old one", opts: noProbe, bFirst: true,
			after: func(t *testing.T, srv *etcdtest.Server, a, b *Store) {
				// Other tenants (or the rollouts' fleet/ keys) write
				// outside the store's range.
				cli := srv.Client(t)
				was := a.snap.Load().etcdRev
				for {
					resp, err := cli.Put(t.Context(), "/elsewhere", "x")
					if err != nil {
						t.Fatal(err)
					}
					if resp.Header.Revision > was+2 {
						return
					}
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := etcdtest.Start(t)
			ctx := t.Context()
			prefix := prefixOf(t)
			var stores []*Store
			for i := range 2 {
				opts := fastOptions()
				if tt.opts != nil {
					tt.opts(&opts, i)
				}
				stores = append(stores, openStore(t, srv, prefix, opts))
			}
			a, b := stores[0], stores[1]
			if _, err := a.Put(ctx, "r", raw(`{"p":100}`), store.AnyVersion, store.Meta{}); err != nil {
				t.Fatal(err)
			}
			backup := srv.Backup()
			for range 3 {
				if _, err := a.Put(ctx, "r", raw(`{"p":0}`), store.AnyVersion, store.Meta{}); err != nil {
					t.Fatal(err)
				}
			}
			eventually(t, 10*time.Second, "store b never reached revision 4", func() bool {
				st, _ := b.Load(ctx)
				return st.Revision == 4
			})
			srv.Restore(backup)
			if tt.after != nil {
				tt.after(t, srv, a, b)
			}
			// Writes through either store: each serves on the store that
			// made it at once, and on the other soon.
			first, second := a, b
			if tt.bFirst {
				first, second = b, a
			}
			for i, w := range []struct {
				by   *Store
				body string
			}{{first, `{"p":50}`}, {second, `{"p":60}`}, {first, `{"p":70}`}} {
				e, err := w.by.Put(ctx, "r", raw(w.body), store.AnyVersion, store.Meta{})
				if err != nil {
					t.Fatalf("write %d after the restore: %v", i, err)
				}
				if want := int64(2 + i); e.Revision != want || e.Version != want {
					t.Errorf("write %d: revision %d version %d, want %d and %d (after the restored revision 1)", i, e.Revision, e.Version, want, want)
				}
				if got, err := w.by.Get(ctx, "r"); err != nil || string(got.Rule) != w.body {
					t.Fatalf("write %d: the writer reads %s, %v, want %s", i, got.Rule, err, w.body)
				}
				for j, s := range []*Store{a, b} {
					eventually(t, 10*time.Second, fmt.Sprintf("store %d never served write %d", j, i), func() bool {
						st, _ := s.Load(ctx)
						return st.Revision == e.Revision && len(st.Rules) == 1 && string(st.Rules[0].Rule) == w.body
					})
				}
			}
			for i, s := range []*Store{a, b} {
				st, _ := s.Load(ctx)
				if st.Epoch != 1 || s.HistoryResets() != 1 || !s.Synced() {
					t.Errorf("store %d: epoch %d, HistoryResets %d, Synced %v; want 1, 1, true", i, st.Epoch, s.HistoryResets(), s.Synced())
				}
			}
		})
	}
}

// TestWriteCheck: a write that carries a store.Check is judged on the
// whole state it commits on top of, including after it lost a race to
// another process's write, which the check it ran first did not see.
func TestWriteCheck(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := t.Context()
	prefix := prefixOf(t)
	a, b := openStore(t, srv, prefix, fastOptions()), openStore(t, srv, prefix, fastOptions())
	errBoth := errors.New("x and y must not both exist")
	var seen []string
	check := func(base, next store.State) error {
		var keys []string
		for _, e := range next.Rules {
			keys = append(keys, e.Key)
		}
		seen = append(seen, fmt.Sprintf("%d→%d %s", base.Revision, next.Revision, strings.Join(keys, ",")))
		if len(seen) == 1 {
			// Another process commits y between this write's read and
			// its transaction.
			if _, err := b.Put(ctx, "y", raw(`{}`), 0, store.Meta{}); err != nil {
				t.Errorf("Put(y) on the other store = %v", err)
			}
		}
		if len(keys) == 2 {
			return errBoth
		}
		return nil
	}
	_, err := a.Put(store.WithCheck(ctx, check), "x", raw(`{}`), 0, store.Meta{})
	if !errors.Is(err, errBoth) || err.Error() != errBoth.Error() {
		t.Errorf("Put(x) = %v, want the check's error as it is", err)
	}
	if want := []string{"0→1 x", "1→2 x,y"}; fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("the check saw %q, want %q", seen, want)
	}
	eventually(t, 5*time.Second, "store a never saw y", func() bool { _, err := a.Get(ctx, "y"); return err == nil })
	if _, err := a.Get(ctx, "x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get(x) = %v: the refused write was stored", err)
	}
	// A write the check allows commits; deletes and flags are checked too.
	if _, err := a.Put(store.WithCheck(ctx, func(_, next store.State) error { return nil }), "z", raw(`{}`), 0, store.Meta{}); err != nil {
		t.Errorf("Put(z) = %v", err)
	}
	refuse := func(_, next store.State) error { return fmt.Errorf("revision %d refused", next.Revision) }
	if _, err := a.Delete(store.WithCheck(ctx, refuse), "z", store.AnyVersion, store.Meta{}); err == nil || err.Error() != "revision 3 refused" {
		t.Errorf("Delete(z) = %v, want the check's refusal", err)
	}
	if _, err := a.SetRollback(store.WithCheck(ctx, refuse), "", true, store.AnyVersion, store.Meta{}); err == nil || err.Error() != "revision 3 refused" {
		t.Errorf("SetRollback = %v, want the check's refusal", err)
	}
	if st, _ := a.Load(context.WithoutCancel(ctx)); st.Revision != 2 || st.RolledBack {
		t.Errorf("state after refused writes = %+v", st)
	}
}
