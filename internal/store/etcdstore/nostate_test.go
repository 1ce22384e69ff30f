package etcdstore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/store/etcdstore/etcdtest"
)

// TestStartWithoutState opens a store while etcd is down and no cache
// exists: with StartWithoutState it opens without a state, says why, and
// gets one (notifying Changes) once etcd is back.
func TestStartWithoutState(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	ctx := t.Context()
	prefix := prefixOf(t)
	seed := openStore(t, srv, prefix, fastOptions())
	if _, err := seed.Put(ctx, "r1", raw(`{"a":1}`), 0, store.Meta{}); err != nil {
		t.Fatal(err)
	}
	seed.Close()
	srv.Stop()

	cfg, err := ParseURL(srv.URL(prefix))
	if err != nil {
		t.Fatal(err)
	}
	opts := fastOptions()
	opts.DataDir = t.TempDir() // empty: no cache
	opts.DialTimeout = 300 * time.Millisecond
	if _, err := Open(ctx, cfg, opts); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Open without a cache and without StartWithoutState = %v, want ErrUnavailable", err)
	}
	opts.StartWithoutState = true
	before := time.Now()
	s, err := Open(ctx, cfg, opts)
	if err != nil {
		t.Fatalf("Open with StartWithoutState = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.StateErr(); err == nil || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), "no cache file") {
		t.Errorf("StateErr() = %v, want it to say etcd is unreachable and there is no cache", err)
	}
	if _, err := s.Load(ctx); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("Load() without a state = %v, want ErrUnavailable saying why", err)
	}
	if _, err := s.Get(ctx, "r1"); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Get() without a state = %v, want ErrUnavailable", err)
	}
	if s.Synced() || !s.Stale() || s.SyncSince().Before(before.Add(-time.Second)) {
		t.Errorf("Synced() = %v, Stale() = %v, SyncSince() = %v; want unsynced, stale, since the Open", s.Synced(), s.Stale(), s.SyncSince())
	}

	srv.Restart()
	if rev := nextChange(t, s.Changes(), 20*time.Second); rev != 1 {
		t.Errorf("notification after the first sync = %d, want 1", rev)
	}
	if err := s.StateErr(); err != nil {
		t.Errorf("StateErr() after the sync = %v", err)
	}
	if st, err := s.Load(ctx); err != nil || len(st.Rules) != 1 || st.Rules[0].Key != "r1" {
		t.Errorf("Load() after the sync = %+v, %v", st, err)
	}
	synced := s.SyncSince()
	eventually(t, 10*time.Second, "synced and fresh", func() bool { return s.Synced() && !s.Stale() })

	// Losing etcd moves SyncSince to the moment the probe found out.
	srv.Stop()
	eventually(t, 10*time.Second, "the store to notice etcd is gone", func() bool { return !s.Synced() })
	if !s.SyncSince().After(synced) {
		t.Errorf("SyncSince() = %v after losing etcd, want later than %v", s.SyncSince(), synced)
	}
	if _, err := s.Load(ctx); err != nil {
		t.Errorf("Load() while unsynced = %v; the last state must keep serving", err)
	}
}
