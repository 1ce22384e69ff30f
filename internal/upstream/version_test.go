package upstream

import (
	"maps"
	"slices"
	"testing"
)

// TestPickVersionSeed003 checks the fallback of seed 003's predicate
// (getEligibleServers: "if (results.size()>0) return results; else return
// servers") case by case.
func TestPickVersionSeed003(t *testing.T) {
	fleet := func() []*Instance {
		return []*Instance{
			{Addr: "v1a:1", Metadata: map[string]string{"version": "1"}},
			{Addr: "v1b:1", Metadata: map[string]string{"version": "1"}},
			{Addr: "v2:1", Metadata: map[string]string{"version": "2"}},
			{Addr: "bare:1"}, // no metadata at all
			{Addr: "zoned:1", Metadata: map[string]string{"zone": "x"}}, // metadata without a version
		}
	}
	all := []string{"bare:1", "v1a:1", "v1b:1", "v2:1", "zoned:1"}
	tests := []struct {
		name    string
		fleet   []*Instance
		version string // "" is both an absent and an empty header
		ejected []string
		want    []string // the instances that must share the traffic
		even    bool     // and share it exactly evenly
	}{
		{name: "header missing or empty: round robin over all", version: "", want: all, even: true},
		{name: "version 1 goes to its two instances", version: "1", want: []string{"v1a:1", "v1b:1"}, even: true},
		{name: "version 2 goes to its one instance", version: "2", want: []string{"v2:1"}, even: true},
		{name: "no instance has the version: all", version: "3", want: all, even: true},
		{name: "a metadata value of another key is not a version", version: "x", want: all, even: true},
		{name: "versions match exactly", version: "1.0", want: all, even: true},
		{name: "one of two matches ejected: the other", version: "1", ejected: []string{"v1a:1"}, want: []string{"v1b:1"}, even: true},
		{name: "only match ejected: all healthy", version: "2", ejected: []string{"v2:1"}, want: []string{"bare:1", "v1a:1", "v1b:1", "zoned:1"}},
		{name: "only match ejected, header empty: all healthy", version: "", ejected: []string{"v2:1"}, want: []string{"bare:1", "v1a:1", "v1b:1", "zoned:1"}},
		{
			name:    "a pool without metadata always falls back",
			fleet:   []*Instance{{Addr: "x:1"}, {Addr: "y:1"}},
			version: "1",
			want:    []string{"x:1", "y:1"},
			even:    true,
		},
	}
	for _, tt := range tests {
		for _, bal := range []Balancer{RoundRobin, Weighted, LeastRequest} {
			t.Run(tt.name+"/"+string(bal), func(t *testing.T) {
				insts := tt.fleet
				if insts == nil {
					insts = fleet()
				}
				clk := newClock()
				p := mustPool(t, "user-center", insts, PoolOptions{
					Balancer: bal, VersionHeader: DefaultVersionHeader,
					Health: NewHealth(HealthOptions{Now: clk.Now}), Passive: &PassiveHealth{ConsecutiveFailures: 1},
				})
				for _, in := range insts {
					if slices.Contains(tt.ejected, in.Addr) {
						fail(p, in, 1)
					}
				}
				picks := 60 * len(tt.want)
				seen := count(t, picks, func() (*Instance, error) { return p.PickVersion(tt.version) }, p.Report)
				if got := slices.Sorted(maps.Keys(seen)); !slices.Equal(got, tt.want) {
					t.Fatalf("PickVersion(%q) chose %v, want %v", tt.version, seen, tt.want)
				}
				if tt.even && bal != LeastRequest {
					for _, a := range tt.want {
						if seen[a] != 60 {
							t.Errorf("PickVersion(%q) counts %v, want 60 each", tt.version, seen)
							break
						}
					}
				}
			})
		}
	}
}

// TestPickVersionRotationsAreIndependent interleaves versions: each keeps
// its own rotation, so alternating requests do not pin one instance.
func TestPickVersionRotationsAreIndependent(t *testing.T) {
	insts := []*Instance{
		{Addr: "a:1", Metadata: map[string]string{"version": "1"}},
		{Addr: "b:1", Metadata: map[string]string{"version": "1"}},
		{Addr: "c:1", Metadata: map[string]string{"version": "2"}},
	}
	p := NewPool("svc", insts)
	seen := map[string]int{}
	for range 10 {
		for _, v := range []string{"1", "2"} {
			in, err := p.PickVersion(v)
			if err != nil {
				t.Fatal(err)
			}
			seen[v+">"+in.Addr]++
			p.Report(in, true)
		}
	}
	if seen["1>a:1"] != 5 || seen["1>b:1"] != 5 || seen["2>c:1"] != 10 {
		t.Errorf("interleaved versions = %v, want 1 split 5/5 over a and b", seen)
	}
}
