package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/store/etcdstore"
	"github.com/graygate/graygate/internal/store/etcdstore/etcdtest"
)

// plain fetches an unauthenticated admin path and returns its status and
// body.
func (e *env) plain(path string) (int, string) {
	e.t.Helper()
	resp, err := e.client.Get(e.admin + path)
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric returns the value of one unlabelled metric line, or "".
func (e *env) metric(name string) string {
	_, body := e.plain("/metrics")
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	return ""
}

// TestOutageReadiness is issue 12, item 3 against a real etcd. When etcd
// goes away, a gateway holding a snapshot stays ready and serves it, its
// status says stale (since when, which revision), graygate_store_stale is
// 1, and a write gets 503 saying why. A gateway started during the outage
// with a cache is ready; one without a cache is not, and /readyz says why.
// When etcd returns, every gateway syncs and the one without rules gets
// them.
func TestOutageReadiness(t *testing.T) {
	srv := etcdtest.Start(t)
	gws := fleet(t, srv, 2)
	gws[0].mustPut("canary", refRule{Type: "gray", GrayPercent: pct(0), WhiteList: []string{"uid:vip"}, Targets: &refTgts{Gray: "gray", Stable: "stable"}})
	for _, g := range gws {
		waitFor(t, "both gateways to serve the rule", 10*time.Second, func() bool {
			a, err := g.get("/", "X-User-Id", "vip")
			return err == nil && a.group == "gray"
		})
		if code, _ := g.plain("/readyz"); code != 200 {
			t.Fatalf("/readyz before the outage = %d", code)
		}
		if v := g.metric("graygate_store_stale"); v != "0" {
			t.Errorf("graygate_store_stale before the outage = %q, want 0", v)
		}
	}
	_, st := gws[0].api("GET", "/api/v1/status", nil)
	if store, _ := st["store"].(map[string]any); store["kind"] != "etcd" || store["state"] != "synced" {
		t.Errorf("store before the outage = %v", st["store"])
	}
	revision := st["revision"]

	before := time.Now()
	srv.Stop()
	g := gws[0]
	waitFor(t, "the status to say stale", 15*time.Second, func() bool {
		_, st := g.api("GET", "/api/v1/status", nil)
		store, _ := st["store"].(map[string]any)
		return store["state"] == "stale"
	})
	_, st = g.api("GET", "/api/v1/status", nil)
	ss := st["store"].(map[string]any)
	since, err := time.Parse(time.RFC3339Nano, ss["since"].(string))
	if err != nil || since.Before(before.Add(-time.Second)) || ss["revision"] != revision || ss["kind"] != "etcd" {
		t.Errorf("store during the outage = %v, want stale since the outage at revision %v", ss, revision)
	}
	if code, body := g.plain("/readyz"); code != 200 {
		t.Errorf("/readyz during the outage = %d %s, want 200: the gateway holds a snapshot", code, body)
	}
	if v := g.metric("graygate_store_stale"); v != "1" {
		t.Errorf("graygate_store_stale during the outage = %q, want 1", v)
	}
	if a, err := g.get("/", "X-User-Id", "vip"); err != nil || a.group != "gray" {
		t.Errorf("serving during the outage: %+v %v", a, err)
	}
	code, out := g.api("PUT", "/api/v1/rules/canary", grayRule(100))
	if msg, _ := out["error"].(string); code != 503 || !strings.Contains(msg, "unavailable") || !strings.Contains(msg, "nothing was changed") {
		t.Errorf("PUT during the outage = %d %v, want 503 saying the store is unavailable", code, out)
	}

	// Restarted during the outage, with its cache and with a rule in its
	// config to seed: ready, serving; the seeding waits for etcd.
	late := json.RawMessage(`{"key":"late","type":"gray","gray_percent":0,"white_list":["uid:late"],"targets":{"gray":"gray","stable":"stable"}}`)
	g2 := gws[1]
	g2.shutdown()
	cfg2 := *g2.gw.cfg
	cfg2.Rules = []json.RawMessage{late}
	g2.restart(&cfg2)
	if code, body := g2.plain("/readyz"); code != 200 {
		t.Errorf("/readyz of a gateway started with a cache = %d %s", code, body)
	}
	if a, err := g2.get("/", "X-User-Id", "vip"); err != nil || a.group != "gray" {
		t.Errorf("started with a cache: %+v %v", a, err)
	}

	// Started during the outage without a cache: not ready, and says why.
	ecfg, _ := etcdstore.ParseURL(srv.URL("/graygate"))
	dataDir := t.TempDir()
	bare := &env{t: t, backends: g.backends}
	bare.openStore = func() store.Store {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := etcdstore.Open(ctx, ecfg, etcdstore.Options{DataDir: dataDir, Logger: slog.New(slog.DiscardHandler),
			ProbeInterval: 200 * time.Millisecond, DialTimeout: time.Second, WriteTimeout: time.Second, StartWithoutState: true})
		if err != nil {
			t.Fatalf("open etcd store without state: %v", err)
		}
		return s
	}
	cfg := *g.gw.cfg
	cfg.DataDir = dataDir
	bare.restart(&cfg)
	code, body := bare.plain("/readyz")
	if code != 503 || !strings.Contains(body, "no rules to serve") || !strings.Contains(body, "unreachable") || !strings.Contains(body, "no cache file") {
		t.Errorf("/readyz without a cache = %d %s, want 503 saying why", code, body)
	}
	_, st = bare.api("GET", "/api/v1/status", nil)
	if store, _ := st["store"].(map[string]any); store["state"] != "unavailable" || !strings.Contains(store["reason"].(string), "unreachable") {
		t.Errorf("store without a cache = %v", st["store"])
	}

	srv.Restart()
	for i, e := range []*env{g, g2, bare} {
		waitFor(t, "every gateway to sync after the outage", 30*time.Second, func() bool {
			_, st := e.api("GET", "/api/v1/status", nil)
			store, _ := st["store"].(map[string]any)
			return store["state"] == "synced"
		})
		if code, body := e.plain("/readyz"); code != 200 {
			t.Errorf("gateway %d: /readyz after the outage = %d %s", i, code, body)
		}
		if v := e.metric("graygate_store_stale"); v != "0" {
			t.Errorf("gateway %d: graygate_store_stale after the outage = %q", i, v)
		}
	}
	waitFor(t, "the gateway started without rules to serve them", 10*time.Second, func() bool {
		a, err := bare.get("/", "X-User-Id", "vip")
		return err == nil && a.group == "gray"
	})
	// The rule the restarted gateway's config seeds reached etcd once it
	// was back, and every gateway serves it.
	for i, e := range []*env{g, g2, bare} {
		waitFor(t, fmt.Sprintf("gateway %d to serve the rule seeded after the outage", i), 20*time.Second, func() bool {
			a, err := e.get("/", "X-User-Id", "late")
			return err == nil && a.rule == "late" && a.group == "gray"
		})
	}
}
