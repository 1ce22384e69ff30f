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
		Kind: "etcd",
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

func TestNoAliasing(t *testing.T)      { storetest.NoAliasing(t, etcdHarness(t)) }
func TestClosed(t *testing.T)          { storetest.Closed(t, etcdHarness(t)) }
func TestCanceledContext(t *testing.T) { storetest.CanceledContext(t, etcdHarness(t)) }
func TestChanges(t *testing.T)         { storetest.Changes(t, etcdHarness(t)) }

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
			_, err = s.SetRollback(ctx, k, i%2 == 1, store.AnyVersion, m)
			if errors.Is(err, ErrNotFound) {
				err = nil
			}
		case 7:
			_, err = s.SetRollback(ctx, "", i%3 == 1, store.AnyVersion, m)
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
