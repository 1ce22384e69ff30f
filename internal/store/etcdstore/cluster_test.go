package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/store/etcdstore/etcdtest"
)

// TestCASAcrossStores races writers on two stores, each with its own
// client, as two gateway processes would: in every round exactly one of
// them wins, and both stores end up with the winner's version.
func TestCASAcrossStores(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := t.Context()
	prefix := prefixOf(t)
	stores := []*Store{openStore(t, srv, prefix, fastOptions()), openStore(t, srv, prefix, fastOptions())}
	const writers, rounds = 8, 20
	e, err := stores[0].Put(ctx, "hot", raw(`{"round":0}`), 0, store.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	version := e.Version
	for round := 1; round <= rounds; round++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var won []int
		var others []error
		start := make(chan struct{})
		for w := range writers {
			s := stores[w%2]
			wg.Go(func() {
				<-start
				_, err := s.Put(ctx, "hot", raw(fmt.Sprintf(`{"round":%d,"w":%d}`, round, w)), version, store.Meta{By: fmt.Sprint(w)})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won = append(won, w)
				case !errors.Is(err, store.ErrConflict):
					others = append(others, err)
				}
			})
		}
		close(start)
		wg.Wait()
		if len(won) != 1 || len(others) != 0 {
			t.Fatalf("round %d: winners %v, unexpected errors %v; want exactly one winner", round, won, others)
		}
		// The winner's store reads its own write at once.
		e, err := stores[won[0]%2].Get(ctx, "hot")
		if err != nil || e.Version != version+1 || e.UpdatedBy != fmt.Sprint(won[0]) {
			t.Fatalf("round %d: Get = version %d by %q, %v; want version %d by %d", round, e.Version, e.UpdatedBy, err, version+1, won[0])
		}
		version = e.Version
	}
	// The other store follows through its watch.
	for i, s := range stores {
		eventually(t, 5*time.Second, fmt.Sprintf("store %d never reached version %d", i, version), func() bool {
			e, err := s.Get(ctx, "hot")
			return err == nil && e.Version == version && e.Revision == version
		})
	}
	h, err := stores[1].History(ctx, "hot")
	if err != nil || len(h) != rounds+1 || h[0].Version != version {
		t.Fatalf("History(hot) = %d records from version %d, %v; want %d ending at %d", len(h), h[0].Version, err, rounds+1, version)
	}
}

// TestDistinctKeysAcrossStores writes different rules from two stores at
// once. Every write compares the store revision, so most lose a race at
// first; they must decide again and all succeed, each with its own
// revision, 1 to N without gaps.
func TestDistinctKeysAcrossStores(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := t.Context()
	prefix := prefixOf(t)
	stores := []*Store{openStore(t, srv, prefix, fastOptions()), openStore(t, srv, prefix, fastOptions())}
	const writers, each = 6, 5
	var wg sync.WaitGroup
	var mu sync.Mutex
	revs := make(map[int64]string)
	for w := range writers {
		s := stores[w%2]
		wg.Go(func() {
			for i := range each {
				key := fmt.Sprintf("w%d", w)
				e, err := s.Put(ctx, key, raw(fmt.Sprintf(`{"i":%d}`, i)), int64(i), store.Meta{})
				if err != nil {
					t.Errorf("Put(%s, ifVersion %d) = %v", key, i, err)
					return
				}
				mu.Lock()
				if other, dup := revs[e.Revision]; dup {
					t.Errorf("revision %d given to %s and to %s", e.Revision, other, key)
				}
				revs[e.Revision] = key
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for rev := int64(1); rev <= writers*each; rev++ {
		if _, ok := revs[rev]; !ok {
			t.Errorf("no write got revision %d", rev)
		}
	}
	eventually(t, 5*time.Second, "stores did not converge", func() bool {
		a, _ := stores[0].Load(ctx)
		b, _ := stores[1].Load(ctx)
		return a.Revision == writers*each && reflect.DeepEqual(a, b)
	})
}

// TestChangesAcrossStores checks that a change committed by one process is
// delivered to another: notification, state and propagation lag.
func TestChangesAcrossStores(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := t.Context()
	prefix := prefixOf(t)
	opts := fastOptions()
	opts.Now = nil // the lag compares with the wall clock
	a := openStore(t, srv, prefix, opts)
	b := openStore(t, srv, prefix, opts)
	if got := b.PropagationLag(); got != 0 {
		t.Errorf("PropagationLag() before any change = %v, want 0", got)
	}
	e, err := a.Put(ctx, "a", raw(`{"target":"v2"}`), 0, store.Meta{By: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	if rev := nextChange(t, a.Changes(), 5*time.Second); rev != e.Revision {
		t.Fatalf("a notified of its own revision %d, want %d", rev, e.Revision)
	}
	if rev := nextChange(t, b.Changes(), 5*time.Second); rev != e.Revision {
		t.Fatalf("b notified of revision %d, want %d", rev, e.Revision)
	}
	st, err := b.Load(ctx)
	if err != nil || st.Revision != e.Revision || len(st.Rules) != 1 || !reflect.DeepEqual(st.Rules[0], e) {
		t.Fatalf("b.Load() = %+v, %v; want revision %d with %+v", st, err, e.Revision, e)
	}
	if lag := b.PropagationLag(); lag <= 0 || lag > 5*time.Second {
		t.Errorf("PropagationLag() = %v, want a positive lag below 5s", lag)
	}
	if _, err := b.SetRollback(ctx, "", true, store.AnyVersion, store.Meta{}); err != nil {
		t.Fatal(err)
	}
	if rev := nextChange(t, a.Changes(), 5*time.Second); rev != e.Revision+1 {
		t.Fatalf("a notified of revision %d, want %d", rev, e.Revision+1)
	}
	if st, _ := a.Load(ctx); !st.RolledBack {
		t.Error("a does not see the global rollback b set")
	}
	if !a.Synced() || !b.Synced() || a.Stale() || a.LastSync().IsZero() {
		t.Errorf("Synced() = %v %v, Stale() = %v, LastSync() = %v; want synced, fresh, set", a.Synced(), b.Synced(), a.Stale(), a.LastSync())
	}
	if n := a.WatchRestarts() + b.WatchRestarts(); n != 0 {
		t.Errorf("WatchRestarts() = %d without any failure", n)
	}
}

// TestCompactionDuringWatch lets another process write and compact etcd's
// history past the revision the watch is about to resume from: the state a
// watch falls behind in during a disconnection. The server then cancels the
// watch with ErrCompacted (a live watch that keeps up is never affected by
// compaction). The store must re-read, notify and keep watching.
func TestCompactionDuringWatch(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := t.Context()
	prefix := prefixOf(t)
	writer := openStore(t, srv, prefix, fastOptions())
	cli := srv.Client(t)
	var calls atomic.Int64
	var compactedAt atomic.Int64
	hookErr := make(chan error, 1)
	opts := fastOptions()
	opts.watchHook = func(from int64) clientv3.WatchChan {
		if calls.Add(1) != 1 {
			return nil
		}
		hookErr <- func() error {
			for i := range 3 {
				if _, err := writer.Put(ctx, "r", raw(fmt.Sprintf(`{"i":%d}`, i)), AnyVersion, store.Meta{}); err != nil {
					return err
				}
			}
			resp, err := cli.Get(ctx, "any")
			if err != nil {
				return err
			}
			if resp.Header.Revision < from {
				return fmt.Errorf("etcd is at revision %d, the watch starts at %d: nothing to compact", resp.Header.Revision, from)
			}
			if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
				return err
			}
			compactedAt.Store(resp.Header.Revision)
			return nil
		}()
		return nil
	}
	s := openStore(t, srv, prefix, opts)
	if err := <-hookErr; err != nil {
		t.Fatalf("writing and compacting: %v", err)
	}
	if rev := nextChange(t, s.Changes(), 10*time.Second); rev != 3 {
		t.Fatalf("notification after the resync = %d, want 3", rev)
	}
	if e, err := s.Get(ctx, "r"); err != nil || string(e.Rule) != `{"i":2}` {
		t.Fatalf("Get(r) after the resync = %s, %v, want {\"i\":2}", e.Rule, err)
	}
	if n := s.WatchRestarts(); n != 1 {
		t.Errorf("WatchRestarts() = %d, want 1", n)
	}
	// The watch resumed: later changes still arrive.
	if _, err := writer.Put(ctx, "r", raw(`{"i":3}`), AnyVersion, store.Meta{}); err != nil {
		t.Fatal(err)
	}
	if rev := nextChange(t, s.Changes(), 5*time.Second); rev != 4 {
		t.Fatalf("notification after resuming = %d, want 4", rev)
	}
	if calls.Load() != 2 || s.WatchRestarts() != 1 {
		t.Errorf("watches started = %d, restarts = %d, want 2 and 1", calls.Load(), s.WatchRestarts())
	}
	// History lives in keys, not in etcd's revision history: compaction
	// does not lose it.
	if h, err := s.History(ctx, "r"); err != nil || len(h) != 4 {
		t.Errorf("History(r) after compaction at %d = %d records, %v, want 4", compactedAt.Load(), len(h), err)
	}
}

// TestLostWatch gives the store a watch that silently delivers nothing, as a
// stream stuck on a partitioned member would. The probes see store changes
// that the watch does not deliver; the store must abandon it, re-read and
// watch again.
func TestLostWatch(t *testing.T) {
	t.Parallel() // mostly waiting for timeouts, leases and restarts
	srv := etcdtest.Start(t)
	ctx := t.Context()
	prefix := prefixOf(t)
	writer := openStore(t, srv, prefix, fastOptions())
	var calls atomic.Int64
	opts := fastOptions()
	opts.watchHook = func(int64) clientv3.WatchChan {
		if calls.Add(1) == 1 {
			return make(chan clientv3.WatchResponse) // never delivers
		}
		return nil
	}
	s := openStore(t, srv, prefix, opts)
	e, err := writer.Put(ctx, "a", raw(`{}`), 0, store.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if rev := nextChange(t, s.Changes(), 10*time.Second); rev != e.Revision {
		t.Fatalf("notification = %d, want %d", rev, e.Revision)
	}
	t.Logf("the lost watch was replaced after %v", time.Since(start))
	if got, err := s.Get(ctx, "a"); err != nil || !reflect.DeepEqual(got, e) {
		t.Errorf("Get(a) = %+v, %v, want %+v", got, err, e)
	}
	if !s.Synced() {
		t.Error("Synced() = false: etcd answered all along")
	}
	// The replacement watch delivers.
	if _, err := writer.Put(ctx, "a", raw(`{"v":2}`), 1, store.Meta{}); err != nil {
		t.Fatal(err)
	}
	if rev := nextChange(t, s.Changes(), 5*time.Second); rev != e.Revision+1 {
		t.Fatalf("notification = %d, want %d", rev, e.Revision+1)
	}
	if n := s.WatchRestarts(); n != 1 || calls.Load() != 2 {
		t.Errorf("WatchRestarts() = %d after %d watches, want 1 after 2", n, calls.Load())
	}
}

// TestOutage kills etcd under a running store: it keeps serving its last
// state, refuses writes quickly, reports not synced, and when etcd is back
// resyncs, including a change another process made right after the
// restart.
func TestOutage(t *testing.T) {
	t.Parallel() // mostly waiting for timeouts, leases and restarts
	srv := etcdtest.Start(t)
	ctx := t.Context()
	prefix := prefixOf(t)
	opts := fastOptions()
	opts.DataDir = t.TempDir()
	s := openStore(t, srv, prefix, opts)
	e, err := s.Put(ctx, "a", raw(`{"v":1}`), 0, store.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := s.Load(ctx)
	nextChange(t, s.Changes(), 5*time.Second)

	srv.Stop()
	// Only calls read WriteTimeout, and none is running: shorten it for
	// the calls that must fail during the outage.
	s.opts.WriteTimeout = time.Second
	eventually(t, 5*time.Second, "Synced() still true with etcd killed", func() bool { return !s.Synced() })
	if st, err := s.Load(ctx); err != nil || !reflect.DeepEqual(st, before) {
		t.Errorf("Load() during the outage = %+v, %v, want the last state %+v", st, err, before)
	}
	if got, err := s.Get(ctx, "a"); err != nil || !reflect.DeepEqual(got, e) {
		t.Errorf("Get(a) during the outage = %+v, %v", got, err)
	}
	start := time.Now()
	_, err = s.Put(ctx, "b", raw(`{}`), AnyVersion, store.Meta{})
	took := time.Since(start)
	want := "etcd at " + srv.Endpoint() + " is unreachable: write not applied"
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), want) {
		t.Errorf("Put during the outage = %v, want ErrUnavailable saying %q", err, want)
	}
	t.Logf("Put during the outage failed after %v: %v", took.Round(time.Millisecond), err)
	if took > s.opts.WriteTimeout+time.Second {
		t.Errorf("Put during the outage took %v, want it bounded by WriteTimeout %v", took, s.opts.WriteTimeout)
	}
	if _, err := s.SetRollback(ctx, "", true, store.AnyVersion, store.Meta{}); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("SetRollback during the outage = %v, want ErrUnavailable", err)
	}
	if _, err := s.History(ctx, "a"); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("History during the outage = %v, want ErrUnavailable", err)
	}
	if st, _ := s.Load(ctx); !reflect.DeepEqual(st, before) {
		t.Errorf("failed writes changed the local state: %+v", st)
	}
	select {
	case rev := <-s.Changes():
		t.Errorf("notification %d during the outage", rev)
	default:
	}

	srv.Restart()
	s.opts.WriteTimeout = opts.WriteTimeout
	other := openStore(t, srv, prefix, fastOptions())
	c, err := other.Put(ctx, "c", raw(`{"from":"other"}`), 0, store.Meta{By: "other"})
	if err != nil {
		t.Fatalf("Put by another store after the restart = %v", err)
	}
	eventually(t, 10*time.Second, "store did not resync after etcd came back", func() bool {
		_, err := s.Get(ctx, "c")
		return s.Synced() && err == nil
	})
	if rev := nextChange(t, s.Changes(), 5*time.Second); rev != c.Revision {
		t.Errorf("notification after the resync = %d, want %d", rev, c.Revision)
	}
	if _, err := s.Get(ctx, "b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get(b) = %v: a write refused during the outage must not exist", err)
	}
	if _, err := other.Get(ctx, "b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("other.Get(b) = %v: a write refused during the outage must not exist", err)
	}
	if s.WatchRestarts() < 1 {
		t.Errorf("WatchRestarts() = %d, want at least 1", s.WatchRestarts())
	}
	if e, err := s.Put(ctx, "a", raw(`{"v":2}`), 1, store.Meta{}); err != nil || e.Version != 2 || e.Revision != c.Revision+1 {
		t.Errorf("Put after the outage = version %d revision %d, %v, want 2 and %d", e.Version, e.Revision, err, c.Revision+1)
	}
}

// TestOpenWhileDown opens stores while etcd is down: with the cache of an
// earlier run they serve it, Stale, and catch up when etcd returns;
// without one they fail.
func TestOpenWhileDown(t *testing.T) {
	t.Parallel() // mostly waiting for timeouts, leases and restarts
	srv := etcdtest.Start(t)
	ctx := t.Context()
	prefix := prefixOf(t)
	dir := t.TempDir()
	opts := fastOptions()
	opts.DataDir = dir
	first := openStore(t, srv, prefix, opts)
	writeMix(t, first, 30)
	want, _ := first.Load(ctx)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, cacheName)); err != nil {
		t.Fatalf("no cache file after Close: %v", err)
	}
	srv.Stop()

	cfg, err := ParseURL(srv.URL(prefix))
	if err != nil {
		t.Fatal(err)
	}
	opts.DialTimeout, opts.WriteTimeout = time.Second, time.Second
	start := time.Now()
	s, err := Open(ctx, cfg, opts)
	if err != nil {
		t.Fatalf("Open while etcd is down, with a cache = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if took := time.Since(start); took > opts.DialTimeout+time.Second {
		t.Errorf("Open while etcd is down took %v, want about DialTimeout %v", took, opts.DialTimeout)
	}
	if !s.Stale() || s.Synced() || s.LastSync().IsZero() {
		t.Errorf("Stale() = %v, Synced() = %v, LastSync() = %v; want stale, not synced, the cache's time", s.Stale(), s.Synced(), s.LastSync())
	}
	if got, err := s.Load(ctx); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Load() from the cache = %+v, %v\nwant %+v", got, err, want)
	}
	if _, err := s.Put(ctx, "new", raw(`{}`), 0, store.Meta{}); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Put while stale = %v, want ErrUnavailable", err)
	}

	for _, tt := range []struct {
		name    string
		dataDir string
		prefix  string
		want    string
	}{
		{"no data dir", "", prefix, "no DataDir"},
		{"empty data dir", t.TempDir(), prefix, "no cache file"},
		{"cache of another prefix", dir, "/other", `holds prefix "` + normalizePrefix(prefix) + `"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := opts
			o.DataDir = tt.dataDir
			o.DialTimeout = 300 * time.Millisecond
			c := cfg
			c.Prefix = normalizePrefix(tt.prefix)
			s, err := Open(ctx, c, o)
			if err == nil {
				s.Close()
			}
			if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open = %v, want ErrUnavailable mentioning %q", err, tt.want)
			}
		})
	}

	srv.Restart()
	s.opts.WriteTimeout = fastOptions().WriteTimeout // only calls read it, and none is running
	eventually(t, 10*time.Second, "store opened from the cache did not sync after etcd came back", func() bool {
		return s.Synced() && !s.Stale()
	})
	if rev := nextChange(t, s.Changes(), 5*time.Second); rev != want.Revision {
		t.Errorf("notification after the first sync = %d, want %d", rev, want.Revision)
	}
	if e, err := s.Put(ctx, "new", raw(`{}`), 0, store.Meta{}); err != nil || e.Revision != want.Revision+1 {
		t.Errorf("Put after sync = revision %d, %v, want %d", e.Revision, err, want.Revision+1)
	}
}

// TestCacheFile covers the cache on its own: round trip, refusal of damaged
// or foreign files, and that a write replaces the file atomically.
func TestCacheFile(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Endpoints: []string{"127.0.0.1:2379"}, Prefix: "/gg/"}
	c := newCacheFile(dir, cfg, testLogger())
	snap := &snapshot{etcdRev: 42, state: store.State{Revision: 7, RolledBack: true, Rules: []store.Entry{
		{Key: "a", Rule: raw(`{"html":"<a&b>"}`), Version: 3, Revision: 7, UpdatedAt: at(1), UpdatedBy: "ann"},
		{Key: "b", Rule: raw(`{}`), Version: 1, Revision: 2, UpdatedAt: at(2), RolledBack: true},
	}}}
	if _, _, err := c.load(); err == nil || !strings.Contains(err.Error(), "no cache file") {
		t.Fatalf("load() of a missing cache = %v", err)
	}
	if err := c.write(snap); err != nil {
		t.Fatal(err)
	}
	got, syncedAt, err := c.load()
	if err != nil || !reflect.DeepEqual(got, snap) || syncedAt.IsZero() {
		t.Fatalf("load() = %+v, %v, %v\nwant %+v", got, syncedAt, err, snap)
	}
	empty := &snapshot{state: store.State{Rules: []store.Entry{}}}
	if err := c.write(empty); err != nil {
		t.Fatal(err)
	}
	if got, _, err := c.load(); err != nil || !reflect.DeepEqual(got, empty) {
		t.Errorf("load() of an empty state = %+v, %v", got, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("data dir holds %d entries, want only the cache (no temporary files)", len(entries))
	}
	other := newCacheFile(dir, Config{Prefix: "/other/"}, testLogger())
	if _, _, err := other.load(); err == nil || !strings.Contains(err.Error(), "holds prefix") {
		t.Errorf("load() of another prefix's cache = %v", err)
	}
	for _, tt := range []struct {
		name, content string
		want          error
	}{
		{"garbage", "{not json", store.ErrCorrupt},
		{"unsorted", `{"format":1,"prefix":"/gg/","state":{"rules":[{"key":"b","rule":{}},{"key":"a","rule":{}}]}}`, store.ErrCorrupt},
		{"bad key", `{"format":1,"prefix":"/gg/","state":{"rules":[{"key":"_x","rule":{}}]}}`, store.ErrCorrupt},
		{"rule not an object", `{"format":1,"prefix":"/gg/","state":{"rules":[{"key":"x","rule":[1]}]}}`, store.ErrCorrupt},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.WriteFile(c.path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, _, err := c.load(); !errors.Is(err, tt.want) {
				t.Errorf("load() = %v, want %v", err, tt.want)
			}
		})
	}
	if err := os.WriteFile(c.path, []byte(`{"format":2,"prefix":"/gg/"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.load(); err == nil || !strings.Contains(err.Error(), "format 2") {
		t.Errorf("load() of a future format = %v", err)
	}
}

// TestOversizedRule checks that a rule too large for one etcd transaction
// is refused as invalid before it is sent, and that nothing was written.
func TestOversizedRule(t *testing.T) {
	t.Parallel() // mostly waiting for timeouts, leases and restarts
	srv := etcdtest.Start(t)
	ctx := t.Context()
	opts := fastOptions()
	opts.WriteTimeout = 15 * time.Second // megabytes through etcd's fsync, under -race
	s := openStore(t, srv, prefixOf(t), opts)
	big := `{"ids":"` + strings.Repeat("x", 600<<10) + `"}`
	if _, err := s.Put(ctx, "big", raw(big), 0, store.Meta{}); err != nil {
		t.Fatalf("Put of a 600 KiB rule = %v; two copies fit in 1.5 MiB", err)
	}
	_, err := s.Put(ctx, "big", raw(big), 1, store.Meta{})
	if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "max-request-bytes") {
		t.Fatalf("update of a 600 KiB rule (three copies) = %v, want ErrInvalid naming max-request-bytes", err)
	}
	if e, err := s.Get(ctx, "big"); err != nil || e.Version != 1 {
		t.Errorf("Get(big) = version %d, %v, want the first version only", e.Version, err)
	}
	if st, _ := s.Load(ctx); st.Revision != 1 {
		t.Errorf("revision = %d after a refused write, want 1", st.Revision)
	}
}

// TestCloseDuringWrite closes a store while a write waits for an
// unreachable etcd: Close does not wait for the WriteTimeout, and the write
// fails with ErrClosed.
func TestCloseDuringWrite(t *testing.T) {
	t.Parallel() // mostly waiting for timeouts, leases and restarts
	srv := etcdtest.Start(t)
	opts := fastOptions()
	opts.WriteTimeout = 20 * time.Second
	s := openStore(t, srv, prefixOf(t), opts)
	srv.Stop()
	// Once the probe has failed, the connection is known to be down and
	// new calls wait for it instead of failing on the dying one.
	eventually(t, 5*time.Second, "store still synced with etcd killed", func() bool { return !s.Synced() })
	errc := make(chan error, 1)
	go func() {
		_, err := s.Put(context.Background(), "a", raw(`{}`), 0, store.Meta{})
		errc <- err
	}()
	// Give the Put time to reach the client. If Close won the race
	// instead, the Put fails with ErrClosed all the same.
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Close() took %v with a write in flight", took)
	}
	if err := <-errc; !errors.Is(err, store.ErrClosed) {
		t.Errorf("Put interrupted by Close = %v, want ErrClosed", err)
	}
}
