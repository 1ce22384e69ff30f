package etcdstore

// The tests in this file run the store conformance suite
// (internal/store/storetest) against etcd, the file store's tests of the
// rest of the contract (internal/store/file_test.go) copied and run against
// etcd, and one that runs the same mixed workload through both stores and
// compares everything they return.

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/store/etcdstore/etcdtest"
	"github.com/graygate/graygate/internal/store/storetest"
)

func etcdHarness(t *testing.T) storetest.Harness {
	srv := etcdtest.Start(t)
	return storetest.Harness{
		Open: func(t *testing.T, prefix string, historyLimit int) store.Store {
			opts := fastOptions()
			opts.HistoryLimit = historyLimit
			return openStore(t, srv, prefix, opts)
		},
		Name: func(t *testing.T) string { return prefixOf(t) },
		// Pruning deletes history keys in etcd.
		HistoryRecords: func(t *testing.T, s store.Store, key string) int {
			es := s.(*Store)
			resp, err := es.Client().Get(t.Context(), es.keys.historyOf(key), clientv3.WithPrefix())
			if err != nil {
				t.Fatalf("reading the history keys of %q: %v", key, err)
			}
			return len(resp.Kvs)
		},
	}
}

func TestSemantics(t *testing.T)       { storetest.Semantics(t, etcdHarness(t)) }
func TestErrorMessages(t *testing.T)   { storetest.ErrorMessages(t, etcdHarness(t)) }
func TestEntryAndHistory(t *testing.T) { storetest.EntryAndHistory(t, etcdHarness(t)) }
func TestMetaOp(t *testing.T)          { storetest.MetaOp(t, etcdHarness(t)) }
func TestHistoryPruning(t *testing.T)  { storetest.HistoryPruning(t, etcdHarness(t)) }

// Short names, as the file store's tests have them.
const AnyVersion = store.AnyVersion

var ErrNotFound = store.ErrNotFound

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
