package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/admin"
	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/store"
)

// startWrapped runs a gateway on yaml whose file store is wrapped by wrap.
func startWrapped(t *testing.T, yaml string, wrap func(store.Store) store.Store) *env {
	t.Helper()
	e := &env{t: t, backends: startBackends(t, "stable", "gray", "a", "b")}
	for name, addr := range e.backends {
		yaml = strings.ReplaceAll(yaml, "{{"+name+"}}", addr)
	}
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	e.openStore = func() store.Store {
		fs, err := store.OpenFile(cfg.DataDir, store.FileOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return wrap(fs)
	}
	e.restart(cfg)
	return e
}

// putGate holds the next Put of a store that embeds it, once armed: it
// closes entered and waits until release is closed.
type putGate struct {
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func newPutGate() putGate {
	return putGate{entered: make(chan struct{}), release: make(chan struct{})}
}

func (g *putGate) hold() {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
}

// gatedStore holds the next Put, once armed, until release is closed.
type gatedStore struct {
	store.Store
	putGate
}

func (s *gatedStore) Put(ctx context.Context, key string, rule json.RawMessage, ifVersion int64, m store.Meta) (store.Entry, error) {
	s.hold()
	return s.Store.Put(ctx, key, rule, ifVersion, m)
}

// TestWriteRacingReload is issue 12, item 6: a rule that compiles alone
// (its route exists when the PUT is checked) but not in the snapshot that
// follows (a reload removed the route while the write was on its way) must
// not be answered 2xx and then not serve. The store holds the PUT's write
// until a reload that removes the route has had its chance to run.
func TestWriteRacingReload(t *testing.T) {
	withRoute := baseConfig + "routes: [{name: api, path_prefix: /api/, upstream: stable}]\n"
	gs := &gatedStore{putGate: newPutGate()}
	e := startWrapped(t, withRoute, func(s store.Store) store.Store { gs.Store = s; return gs })
	gs.armed.Store(true)
	put := make(chan int, 1)
	go func() {
		code, _ := e.api("PUT", "/api/v1/rules/r", map[string]any{"type": "gray", "gray_percent": 100, "route": "api", "targets": grayRule(1).Targets})
		put <- code
	}()
	select {
	case <-gs.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the PUT never reached the store")
	}
	reloaded := make(chan error, 1)
	go func() { reloaded <- e.reload(baseConfig) }() // no routes
	select {
	case <-reloaded: // the old code reloads at once, under the PUT
		reloaded <- nil
	case <-time.After(2 * time.Second): // the fixed code waits for the PUT
	}
	close(gs.release)
	code := <-put
	select {
	case <-reloaded:
	case <-time.After(10 * time.Second):
		t.Fatal("the reload never finished")
	}
	a, err := e.get("/api/x", "X-User-Id", "1")
	st := e.gw.Status()
	if code/100 == 2 && (err != nil || a.rule != "r" || len(st.BrokenRules) != 0) {
		t.Fatalf("PUT answered %d, but rule r does not serve: %+v %v, broken %v", code, a, err, st.BrokenRules)
	}
	if code/100 == 2 && !strings.Contains(st.LastError, `rule "r" would stop compiling`) {
		t.Errorf("the reload should have been refused for rule r: %q", st.LastError)
	}
}

// failingStore makes every Load after a write fail, once armed, until fail
// is cleared: the write is committed, but the snapshot that should follow
// cannot be built. Every Load fails, not only the first: the store's change
// feed also wakes watchStore, whose Apply may load before Commit's does.
type failingStore struct {
	store.Store
	armed, fail atomic.Bool
}

func (s *failingStore) wrote() {
	if s.armed.CompareAndSwap(true, false) {
		s.fail.Store(true)
	}
}

func (s *failingStore) Load(ctx context.Context) (store.State, error) {
	if s.fail.Load() {
		return store.State{}, errors.New("injected: the disk went away")
	}
	return s.Store.Load(ctx)
}

func (s *failingStore) Put(ctx context.Context, key string, rule json.RawMessage, ifVersion int64, m store.Meta) (store.Entry, error) {
	e, err := s.Store.Put(ctx, key, rule, ifVersion, m)
	s.wrote()
	return e, err
}

func (s *failingStore) Delete(ctx context.Context, key string, ifVersion int64, m store.Meta) (store.Change, error) {
	c, err := s.Store.Delete(ctx, key, ifVersion, m)
	s.wrote()
	return c, err
}

func (s *failingStore) SetRollback(ctx context.Context, key string, on bool, ifVersion int64, m store.Meta) (store.State, error) {
	st, err := s.Store.SetRollback(ctx, key, on, ifVersion, m)
	s.wrote()
	return st, err
}

// TestApplyFailureIsNot2xx is issue 12, item 6: when the write is
// committed but the new snapshot cannot be built, PUT, revert, rollback,
// resume and delete answer 500 and say the change was stored but does not
// serve, instead of 200.
func TestApplyFailureIsNot2xx(t *testing.T) {
	fs := &failingStore{}
	e := startWrapped(t, baseConfig, func(s store.Store) store.Store { fs.Store = s; return fs })
	e.mustPut("k", grayRule(10))
	e.mustPut("k", grayRule(20))
	tests := []struct {
		name, method, path string
		body               any
		want               string
	}{
		{"put", "PUT", "/api/v1/rules/k", grayRule(30), `rule "k" was stored as version 3 but does not serve`},
		{"revert", "POST", "/api/v1/rules/k/revert", map[string]any{"version": 1}, `the revert of rule "k" to version 1 was stored as version 4 but does not serve`},
		{"rollback", "POST", "/api/v1/rollback", nil, "the rollback was stored but does not serve"},
		{"resume", "POST", "/api/v1/resume", nil, "the resume was stored but does not serve"},
		{"rule rollback", "POST", "/api/v1/rules/k/rollback", nil, `the rollback of rule "k" was stored but does not serve`},
		{"delete", "DELETE", "/api/v1/rules/k", nil, `the deletion of rule "k" was stored but does not serve`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs.armed.Store(true)
			code, out := e.api(tt.method, tt.path, tt.body)
			if code != 500 || !strings.Contains(fmt.Sprint(out["error"]), tt.want) || !strings.Contains(fmt.Sprint(out["details"]), "injected: the disk went away") {
				t.Errorf("%s %s = %d %v, want 500 saying %q and why", tt.method, tt.path, code, out, tt.want)
			}
			// The store is readable again: the next rebuild serves the change.
			fs.fail.Store(false)
			if err := e.gw.Apply(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCommitRefusesWhatWouldNotServe checks a change before it is written:
// a rule that does not compile under the current config is refused with
// ErrWouldNotServe, and the store is never written.
func TestCommitRefusesWhatWouldNotServe(t *testing.T) {
	e := start(t, baseConfig, "")
	tests := []struct {
		name string
		rule string
		want string
	}{
		{"route that is not configured", `{"key":"x","type":"gray","gray_percent":1,"route":"nope","targets":{"gray":"gray","stable":"stable"}}`, `"nope"`},
		{"upstream that is not configured", `{"key":"x","type":"gray","gray_percent":1,"targets":{"gray":"nowhere","stable":"stable"}}`, "nowhere"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wrote := false
			err := e.gw.Commit(context.Background(), admin.Change{Key: "x", Rule: json.RawMessage(tt.rule)}, func(context.Context) (int64, error) {
				wrote = true
				return 0, nil
			})
			if !errors.Is(err, admin.ErrWouldNotServe) || !strings.Contains(err.Error(), tt.want) || wrote {
				t.Errorf("Commit = %v (wrote %v), want ErrWouldNotServe naming %s and no write", err, wrote, tt.want)
			}
		})
	}
	ok := `{"key":"x","type":"gray","gray_percent":1,"targets":{"gray":"gray","stable":"stable"}}`
	if err := e.gw.Commit(context.Background(), admin.Change{Key: "x", Rule: json.RawMessage(ok)}, nil); err != nil {
		t.Errorf("check of a good rule = %v", err)
	}
	if code, _ := e.api("GET", "/api/v1/rules/x", nil); code != 404 {
		t.Errorf("a check alone stored the rule: GET = %d", code)
	}
}
