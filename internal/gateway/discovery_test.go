package gateway

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/store/etcdstore"
	"github.com/graygate/graygate/internal/store/etcdstore/etcdtest"
)

// TestDiscoveryFollowsReload is issue 12, item 11: a service that only a
// reloaded config names is watched (its registered instance serves), and
// the watch of a service the config no longer names is stopped.
func TestDiscoveryFollowsReload(t *testing.T) {
	srv := etcdtest.Start(t)
	backends := startBackends(t, "stable", "gray", "a", "b")
	one := `
default_upstream: svc1
upstreams:
  svc1: {discover: one}
`
	two := one + `  svc2: {discover: two}
routes: [{name: two, path_prefix: /two/, upstream: svc2}]
`
	cfg, err := config.Parse([]byte(one))
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	cfg.DataDir = dataDir
	ecfg, _ := etcdstore.ParseURL(srv.URL("/graygate"))
	e := &env{t: t, backends: backends}
	e.openStore = func() store.Store {
		s, err := etcdstore.Open(context.Background(), ecfg, etcdstore.Options{DataDir: dataDir, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	e.restart(cfg)
	cli, err := etcdstore.NewClient(ecfg, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	register := func(svc, backend string) {
		t.Helper()
		reg, err := etcdstore.Register(context.Background(), cli, ecfg.Prefix, svc, etcdstore.Instance{Addr: backends[backend], Weight: 1}, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { reg.Close() })
	}
	register("one", "a")
	waitFor(t, "service one to serve", 10*time.Second, func() bool {
		a, err := e.get("/x")
		return err == nil && a.backend == "a"
	})
	if got := e.gw.watchedServices(); !slices.Equal(got, []string{"one"}) {
		t.Fatalf("watched at start: %v", got)
	}

	if err := e.reload(two); err != nil {
		t.Fatal(err)
	}
	register("two", "b")
	waitFor(t, "service two, named only by the reloaded config, to serve", 10*time.Second, func() bool {
		a, err := e.get("/two/x")
		return err == nil && a.backend == "b"
	})
	if got := e.gw.watchedServices(); !slices.Equal(got, []string{"one", "two"}) {
		t.Errorf("watched after adding two: %v", got)
	}

	if err := e.reload(strings.TrimSpace(one) + "\n"); err != nil {
		t.Fatal(err)
	}
	if got := e.gw.watchedServices(); !slices.Equal(got, []string{"one"}) {
		t.Errorf("watched after removing two: %v", got)
	}
	e.gw.mu.Lock()
	_, kept := e.gw.discovered["two"]
	e.gw.mu.Unlock()
	if kept {
		t.Error("the instances of a service no longer named are kept")
	}
	if a, err := e.get("/two/x"); err != nil || a.backend != "a" {
		t.Errorf("after removing the route, /two/x = %+v %v, want service one", a, err)
	}
}
