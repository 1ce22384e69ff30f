package upstream

import (
	"errors"
	"strings"
	"testing"
)

func userCenter() []*Instance {
	return []*Instance{
		{Addr: "a:1", Metadata: map[string]string{"version": "1", "zone": "x"}},
		{Addr: "b:1", Metadata: map[string]string{"version": "2", "zone": "x"}},
		{Addr: "c:1", Metadata: map[string]string{"version": "2", "zone": "y"}},
		{Addr: "d:1"},
	}
}

func TestSubsets(t *testing.T) {
	clk := newClock()
	h := NewHealth(HealthOptions{Now: clk.Now})
	opts := PoolOptions{Health: h, Passive: &PassiveHealth{ConsecutiveFailures: 1}}
	base := mustPool(t, "user-center", userCenter(), opts)
	reg := NewRegistry(map[string]*Pool{"user-center": base})

	sub, err := reg.Resolve("user-center@version=2")
	if err != nil {
		t.Fatal(err)
	}
	if sub.Name != "user-center@version=2" || len(sub.Instances) != 2 || sub.Instances[0].Addr != "b:1" || sub.Instances[1].Addr != "c:1" {
		t.Fatalf("subset = %s %v", sub.Name, sub.Instances)
	}
	if again, _ := reg.Resolve("user-center@version=2"); again != sub {
		t.Error("a subset must be cached per target string")
	}
	if seen := count(t, 10, sub.Pick, sub.Report); seen["b:1"] != 5 || seen["c:1"] != 5 {
		t.Errorf("subset round robin = %v", seen)
	}
	multi, err := reg.Resolve("user-center@version=2,zone=y")
	if err != nil || len(multi.Instances) != 1 || multi.Instances[0].Addr != "c:1" {
		t.Fatalf("two-label subset = %v, %v", multi, err)
	}

	// Health is shared with the base pool, and a subset never falls back.
	fail(base, base.Instances[1], 1)
	if seen := count(t, 4, sub.Pick, sub.Report); seen["c:1"] != 4 {
		t.Errorf("subset with b ejected through the base = %v", seen)
	}
	fail(sub, sub.Instances[1], 1)
	_, err = sub.Pick()
	if !errors.Is(err, ErrNoInstance) || err.Error() != `pool "user-center@version=2": no healthy instance (2 ejected)` {
		t.Errorf("subset all down: %v", err)
	}
	if _, err := sub.PickVersion("1"); !errors.Is(err, ErrNoInstance) {
		t.Errorf("PickVersion on a subset must stay in the subset: %v", err)
	}
	if seen := count(t, 4, base.Pick, base.Report); seen["a:1"] != 2 || seen["d:1"] != 2 {
		t.Errorf("base with b and c ejected = %v", seen)
	}

	empty, err := reg.Resolve("user-center@version=9")
	if err != nil {
		t.Fatalf("a subset without instances resolves (discovery may add some): %v", err)
	}
	if _, err := empty.Pick(); err == nil || err.Error() != `pool "user-center@version=9": no healthy instance (no instance has version=9)` {
		t.Errorf("empty subset: %v", err)
	}

	// Replacing the base invalidates the subset; the new one shares health.
	base2 := mustPool(t, "user-center", userCenter(), opts)
	reg2 := reg.WithNamed(map[string]*Pool{"user-center": base2})
	sub2, err := reg2.Resolve("user-center@version=2")
	if err != nil || sub2 == sub {
		t.Fatalf("subset after the base was replaced = %p (old %p), %v", sub2, sub, err)
	}
	if again, _ := reg2.Resolve("user-center@version=2"); again != sub2 {
		t.Error("the new subset must be cached")
	}
	if st := sub2.Stats(); st.Ejected != 2 {
		t.Errorf("new subset stats = %+v, want the 2 ejections carried over", st)
	}
	if sub.Gate != base.Gate {
		t.Error("a subset shares the base pool's concurrency gate")
	}
	reg.Retire(reg2)
	sub2.Close() // a subset holds no references: closing it is a no-op
	if hs, ok := hostStats(h, "b:1"); !ok || hs.Pools != 1 {
		t.Errorf("b after retiring the old registry = %+v, %v; want held by 1 pool", hs, ok)
	}
}

func TestResolveErrors(t *testing.T) {
	reg := NewRegistry(map[string]*Pool{"pool": NewPool("pool", userCenter())})
	tests := []struct {
		target, want string
	}{
		{"pool@", `invalid subset "pool@": empty selector`},
		{"pool@=x", `invalid subset "pool@=x": empty metadata key in "=x"`},
		{"pool@k=", `invalid subset "pool@k=": empty value for key "k"`},
		{"pool@k", `invalid subset "pool@k": "k" has no "="`},
		{"@k=v", `invalid subset "@k=v": empty pool name`},
		{"pool@k=v,k=w", `key "k" is repeated`},
		{"pool@k=v,", `"" has no "="`},
		{"pool@k=a b", `value "a b" has a space`},
		{"pool@k@j=v", `metadata key "k@j" has a space, "@" or "="`},
		{"nope@version=2", `subset "nope@version=2": no upstream named "nope"`},
		{"nope", `invalid address "nope": want host:port, a URL or an upstream name`},
	}
	for _, tt := range tests {
		p, err := reg.Resolve(tt.target)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Resolve(%q) = %v, %v; want error containing %q", tt.target, p, err, tt.want)
		}
	}
}

func TestRetire(t *testing.T) {
	h := NewHealth(HealthOptions{})
	opts := PoolOptions{Health: h}
	shared := mustPool(t, "shared", []*Instance{{Addr: "s:1"}}, opts)
	old := mustPool(t, "svc", []*Instance{{Addr: "a:1"}, {Addr: "b:1"}}, opts)
	reg := NewRegistry(map[string]*Pool{"svc": old, "shared": shared})
	if _, err := reg.Resolve("svc@version=1"); err != nil {
		t.Fatal(err)
	}
	// A rejected reload: the new registry is retired in favour of the old.
	rejected := reg.WithNamed(map[string]*Pool{"svc": mustPool(t, "svc", []*Instance{{Addr: "b:1"}, {Addr: "c:1"}}, opts), "shared": shared})
	rejected.Retire(reg)
	if got := addrs(h); got != "a:1/1 b:1/1 s:1/1" {
		t.Fatalf("after a rejected reload: %s", got)
	}
	// An accepted reload: the old one is retired.
	next := reg.WithNamed(map[string]*Pool{"svc": mustPool(t, "svc", []*Instance{{Addr: "b:1"}, {Addr: "c:1"}}, opts), "shared": shared})
	if got := addrs(h); got != "a:1/1 b:1/2 c:1/1 s:1/1" {
		t.Fatalf("during the swap: %s", got)
	}
	reg.Retire(next)
	if got := addrs(h); got != "b:1/1 c:1/1 s:1/1" {
		t.Fatalf("after the swap: %s", got)
	}
	if len(reg.sub.pools) != 0 {
		t.Errorf("subsets of a retired pool are still cached: %v", reg.sub.pools)
	}
	next.Close()
	if got := addrs(h); got != "" {
		t.Errorf("after Close: %s", got)
	}
}

// addrs lists "addr/pools" for every address the registry holds.
func addrs(h *Health) string {
	var parts []string
	for _, s := range h.Snapshot() {
		parts = append(parts, s.Addr+"/"+string(rune('0'+s.Pools)))
	}
	return strings.Join(parts, " ")
}

func TestRegistryStats(t *testing.T) {
	reg := NewRegistry(map[string]*Pool{"b": NewPool("b", weighted(1, 1)), "a": NewPool("a", weighted(1))})
	st := reg.Stats()
	if len(st) != 2 || st[0].Name != "a" || st[0].Size != 1 || st[1].Name != "b" || st[1].Healthy != 2 {
		t.Errorf("Registry.Stats = %+v", st)
	}
}

func FuzzParseSubset(f *testing.F) {
	for _, s := range []string{"user-center@version=2", "p@a=1,b=2", "p@", "@", "p@=", "p@k=", "host:80", "a@b@c=d", "p@k=v,,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		s, ok, err := ParseSubset(target)
		if ok && err != nil {
			t.Fatalf("ParseSubset(%q) = ok and error %v", target, err)
		}
		if !ok {
			if err == nil && strings.Contains(target, "@") {
				t.Fatalf("ParseSubset(%q): a target with @ is a subset or an error", target)
			}
			return
		}
		if s.Pool == "" || len(s.Match()) != len(s.labels) || len(s.labels) == 0 {
			t.Fatalf("ParseSubset(%q) = %+v", target, s)
		}
		if back := s.Pool + "@" + s.selector(); back != target {
			t.Fatalf("ParseSubset(%q) round trip = %q", target, back)
		}
	})
}
