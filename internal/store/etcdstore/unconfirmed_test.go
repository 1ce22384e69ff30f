package etcdstore

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/store/etcdstore/etcdtest"
)

// TestUnconfirmedWrite: a write whose transaction etcd was sent but never
// answered (etcd hung: SIGSTOP, right after the read the write decided
// on) may or may not have been applied: the error is ErrUnconfirmed (and
// ErrUnavailable, for callers that know only that) and says so. A write
// that could not reach etcd at all is not ErrUnconfirmed: nothing was
// sent.
func TestUnconfirmedWrite(t *testing.T) {
	srv := etcdtest.Start(t)
	opts := fastOptions()
	opts.WriteTimeout = time.Second
	var freeze atomic.Bool
	var thaw func()
	opts.commitHook = func() {
		if freeze.CompareAndSwap(true, false) {
			thaw = srv.Freeze()
		}
	}
	s := openStore(t, srv, prefixOf(t), opts)
	ctx := t.Context()
	if _, err := s.Put(ctx, "r", raw(`{"v":1}`), AnyVersion, store.Meta{}); err != nil {
		t.Fatal(err)
	}
	freeze.Store(true)
	_, err := s.Put(ctx, "r", raw(`{"v":2}`), AnyVersion, store.Meta{})
	if !errors.Is(err, store.ErrUnconfirmed) || !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "may or may not have been applied") {
		t.Errorf("Put with etcd hung after the read: %v, want ErrUnconfirmed saying it may or may not have been applied", err)
	}
	thaw()

	srv.Stop()
	_, err = s.Put(ctx, "r", raw(`{"v":3}`), AnyVersion, store.Meta{})
	if errors.Is(err, store.ErrUnconfirmed) || !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Put with etcd down: %v, want ErrUnavailable and not ErrUnconfirmed", err)
	}
}
