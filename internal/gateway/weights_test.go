package gateway

import (
	"testing"
)

// TestWeightsCountByDefault: a pool that gives its instances weights and
// names no balancer is balanced by them, as nginx's upstream is; before,
// the default round robin ignored them and gave each instance an equal
// share. A round_robin named explicitly still ignores them.
func TestWeightsCountByDefault(t *testing.T) {
	e := start(t, `
default_upstream: w
upstreams:
  stable: {instances: [{addr: "{{stable}}"}]}
  gray:   {instances: [{addr: "{{gray}}"}]}
  w:      {instances: [{addr: "{{a}}", weight: 3}, {addr: "{{b}}"}]}
`, "")
	got := map[string]int{}
	for range 8 {
		a, err := e.get("/x")
		if err != nil {
			t.Fatal(err)
		}
		got[a.backend]++
	}
	if got["a"] != 6 || got["b"] != 2 {
		t.Errorf("8 requests to weights 3:1 went %v, want a 6, b 2", got)
	}
	// A balancer named explicitly is the operator's choice: round_robin
	// gives each instance its turn, weights or not.
	e2 := start(t, `
default_upstream: w
upstreams:
  stable: {instances: [{addr: "{{stable}}"}]}
  gray:   {instances: [{addr: "{{gray}}"}]}
  w:      {balancer: round_robin, instances: [{addr: "{{a}}", weight: 3}, {addr: "{{b}}"}]}
`, "")
	got = map[string]int{}
	for range 8 {
		a, err := e2.get("/x")
		if err != nil {
			t.Fatal(err)
		}
		got[a.backend]++
	}
	if got["a"] != 4 || got["b"] != 4 {
		t.Errorf("8 requests, balancer: round_robin: %v, want a 4, b 4", got)
	}
}
