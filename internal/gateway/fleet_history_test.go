package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/store/etcdstore"
	"github.com/graygate/graygate/internal/store/etcdstore/etcdtest"
)

// grayShare says what a gateway serves for rule r of grayRule: "100" if
// every one of 20 users goes to gray, "0" if every one goes to stable,
// and what it saw otherwise.
func grayShare(e *env) string {
	gray, stable := 0, 0
	for u := range 20 {
		a, err := e.get("/", "X-User-Id", fmt.Sprint("user-", u))
		switch {
		case err != nil:
			return err.Error()
		case a.backend == "gray":
			gray++
		case a.backend == "stable":
			stable++
		}
	}
	switch {
	case gray == 20:
		return "100"
	case stable == 20:
		return "0"
	}
	return fmt.Sprintf("%d gray, %d stable", gray, stable)
}

// storedPercent is the gray_percent of rule r that a gateway's admin API
// returns.
func storedPercent(e *env) string {
	code, out := e.api("GET", "/api/v1/rules/r", nil)
	if code != 200 {
		return fmt.Sprintf("GET %d %v", code, out)
	}
	return fmt.Sprint(out["gray_percent"])
}

// waitServes waits until every gateway serves and stores rule r at pct.
func waitServes(t *testing.T, gws []*env, pct, when string) {
	t.Helper()
	for i, g := range gws {
		var share, stored string
		deadline := time.Now().Add(10 * time.Second)
		for {
			share, stored = grayShare(g), storedPercent(g)
			if share == pct && stored == pct {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: gateway %d serves %s and stores %s, want %s", when, i+1, share, stored, pct)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestFleetRestoredFromBackup is the audit's first fleet bug: etcd restored
// from a backup taken before the last changes went back in revision, and
// the gateways kept the newer history's rules, said "synced", and answered
// 200 to writes that none of them served. Now every gateway goes over to
// what etcd holds after the restore, and every write answered 2xx serves
// on every gateway, whether the fleet or a write notices the restore
// first.
func TestFleetRestoredFromBackup(t *testing.T) {
	tests := []struct {
		name string
		// waitRestored waits for the fleet to serve the restored rules
		// before writing.
		waitRestored bool
	}{
		{name: "the fleet notices by itself", waitRestored: true},
		{name: "a write comes first"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := etcdtest.Start(t)
			gws := fleet(t, srv, 2)
			gws[0].mustPut("r", grayRule(100))
			waitServes(t, gws, "100", "before the backup")
			backup := srv.Backup()
			for range 3 {
				gws[0].mustPut("r", grayRule(0))
			}
			waitServes(t, gws, "0", "before the restore")
			srv.Restore(backup) // store revision 1: r at 100%
			// Each write changes what serves, from the restored state
			// or from the one before the restore.
			pcts := []float64{100, 0, 100}
			if tt.waitRestored {
				waitServes(t, gws, "100", "after the restore")
				pcts = []float64{0, 100, 0}
			}
			for i, p := range pcts {
				via := gws[i%2]
				code, out := via.api("PUT", "/api/v1/rules/r", grayRule(p))
				if code/100 != 2 {
					t.Fatalf("write %d (%v%% via gateway %d) = %d %v", i, p, i%2+1, code, out)
				}
				want := fmt.Sprint(p)
				if got := grayShare(via); got != want {
					t.Errorf("write %d answered %d, but the gateway that made it serves %s, want %s", i, code, got, want)
				}
				waitServes(t, gws, want, fmt.Sprintf("after write %d", i))
			}
			for i, g := range gws {
				st := g.gw.Status()
				if st.Store.State != StoreSynced || st.Sync == nil || st.Sync.HistoryResets != 1 || st.Revision != 4 {
					t.Errorf("gateway %d: store %+v, sync %+v, revision %d; want synced, one history reset, revision 4", i+1, st.Store, st.Sync, st.Revision)
				}
				if m := g.metricsText(); !strings.Contains(m, "\ngraygate_store_history_resets_total 1\n") {
					t.Errorf("gateway %d: /metrics lacks graygate_store_history_resets_total 1", i+1)
				}
			}
		})
	}
}

// gatedEtcd holds the next Put, once armed, until release is closed. It
// embeds the etcd store, so that the gateway still sees a fleet's store.
type gatedEtcd struct {
	*etcdstore.Store
	putGate
}

func (s *gatedEtcd) Put(ctx context.Context, key string, rule json.RawMessage, ifVersion int64, m store.Meta) (store.Entry, error) {
	s.hold()
	return s.Store.Put(ctx, key, rule, ifVersion, m)
}

// TestFleetLayerOverlapRace is the audit's second fleet bug: two gateways
// each checked one half of a layer overlap against their own copy of the
// rules, which did not hold the other half yet, and both stored it; from
// then on every write to any rule, on any gateway, was refused. Now the
// store judges a write again on the state it commits on top of: one half
// is stored, the other is refused with a 400 naming layer_range and the
// other rule, and other writes go on. A store that holds an overlap all
// the same (written around the API) disables the rule stored later and
// keeps taking other writes.
func TestFleetLayerOverlapRace(t *testing.T) {
	srv := etcdtest.Start(t)
	backends := startBackends(t, "stable", "gray", "a", "b")
	gate := &gatedEtcd{putGate: newPutGate()}
	gw1 := startFleetMemberWith(t, srv, backends, t.TempDir(), func(s *etcdstore.Store) store.Store { gate.Store = s; return gate })
	gw2 := startFleetMember(t, srv, backends, t.TempDir())
	gws := []*env{gw1, gw2}
	cli := srv.Client(t)
	stored := func(key string) bool {
		t.Helper()
		resp, err := cli.Get(t.Context(), "/graygate/rules/"+key)
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Kvs) > 0
	}
	ab := func(exp, layer string, from, to int) string {
		return fmt.Sprintf(`{"type":"ab","experiment_id":%q,"layer":%q,"layer_range":[%d,%d],"groups":[{"name":"A","weight":50,"target":"a"},{"name":"B","weight":50,"target":"b"}]}`,
			exp, layer, from, to)
	}
	refused := func(code int, out map[string]any, other string) bool {
		msg := fmt.Sprint(out)
		return code == 400 && strings.Contains(msg, "layer_range") && strings.Contains(msg, fmt.Sprintf("%q", other))
	}

	// gw1 has checked rule a against its rules and is about to write it
	// when gw2, which has not seen a either, writes b.
	gate.armed.Store(true)
	type result struct {
		code int
		out  map[string]any
	}
	first := make(chan result, 1)
	go func() {
		code, out := gw1.api("PUT", "/api/v1/rules/a", ab("a", "checkout", 0, 6000))
		first <- result{code, out}
	}()
	select {
	case <-gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the PUT of a never reached the store")
	}
	if code, out := gw2.api("PUT", "/api/v1/rules/b", ab("b", "checkout", 4000, 10000)); code != 201 {
		t.Fatalf("PUT b via gateway 2 = %d %v", code, out)
	}
	close(gate.release)
	if r := <-first; !refused(r.code, r.out, "b") {
		t.Errorf("PUT a via gateway 1, after b was stored = %d %v, want 400 naming layer_range and rule \"b\"", r.code, r.out)
	}
	if stored("a") || !stored("b") {
		t.Errorf("etcd holds a: %v, b: %v; want b only", stored("a"), stored("b"))
	}

	// The same race, unordered, a few times: exactly one half is stored.
	for round := range 5 {
		layer := fmt.Sprint("race", round)
		keys := [2]string{layer + "_x", layer + "_y"}
		bodies := [2]string{ab(keys[0], layer, 0, 6000), ab(keys[1], layer, 4000, 10000)}
		var codes [2]int
		var outs [2]map[string]any
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() { codes[i], outs[i] = gws[i].api("PUT", "/api/v1/rules/"+keys[i], bodies[i]) })
		}
		wg.Wait()
		won := 0
		for i := range 2 {
			switch {
			case codes[i] == 201:
				won++
				if !stored(keys[i]) {
					t.Errorf("round %d: %s answered 201 but is not in etcd", round, keys[i])
				}
			case refused(codes[i], outs[i], keys[1-i]):
				if stored(keys[i]) {
					t.Errorf("round %d: %s was refused but is in etcd", round, keys[i])
				}
			default:
				t.Errorf("round %d: PUT %s = %d %v", round, keys[i], codes[i], outs[i])
			}
		}
		if won != 1 {
			t.Errorf("round %d: %d of the two overlapping rules were stored (%v), want 1", round, won, codes)
		}
	}

	// Other writes go on, on both gateways.
	for i, g := range gws {
		key := fmt.Sprint("unrelated", i)
		if code, out := g.api("PUT", "/api/v1/rules/"+key, `{"type":"gray","gray_percent":10,"targets":{"gray":"gray","stable":"stable"}}`); code != 201 {
			t.Errorf("PUT %s via gateway %d = %d %v", key, i+1, code, out)
		}
	}

	// An overlap written around the API: the later rule is disabled on
	// every gateway, and other writes still go on and serve everywhere.
	hand := []byte(`{"key":"hand",` + ab("hand", "checkout", 5000, 7000)[1:])
	if _, err := gw1.gw.store.Put(t.Context(), "hand", hand, 0, store.Meta{By: "hand"}); err != nil {
		t.Fatal(err)
	}
	for i, g := range gws {
		waitFor(t, fmt.Sprintf("gateway %d to disable rule hand", i+1), 10*time.Second, func() bool {
			msg, broken := g.gw.Status().BrokenRules["hand"]
			return broken && strings.Contains(msg, "layer_range") && strings.Contains(msg, `"b"`)
		})
	}
	if code, out := gw2.api("PUT", "/api/v1/rules/later", `{"type":"gray","gray_percent":100,"targets":{"gray":"gray","stable":"stable"},"conditions":{"path_prefix":["/later/"]}}`); code != 201 {
		t.Fatalf("PUT later via gateway 2, with an overlap in etcd = %d %v", code, out)
	}
	for i, g := range gws {
		waitFor(t, fmt.Sprintf("gateway %d to serve rule later", i+1), 10*time.Second, func() bool {
			a, err := g.get("/later/x", "X-User-Id", "u1")
			return err == nil && a.rule == "later" && a.backend == "gray"
		})
		if st := g.gw.Status(); st.LastResult == "error" || len(st.BrokenRules) != 1 {
			t.Errorf("gateway %d: last reload %q (%s), broken %v; want only rule hand broken", i+1, st.LastResult, st.LastError, st.BrokenRules)
		}
	}
}
