package gateway

import (
	"strings"
	"testing"

	"github.com/graygate/graygate/internal/config"
)

// TestWeightsCountByDefault: a pool that gives its instances weights and
// names no balancer is balanced by them, as nginx's upstream is; before,
// the default round robin ignored them and gave each instance an equal
// share. A balancer that ignores weights, named with them, is refused
// with the field and the value.
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
	for _, b := range []string{"round_robin", "least_request"} {
		_, err := config.Parse([]byte(`
default_upstream: w
upstreams:
  w: {balancer: ` + b + `, instances: [{addr: "127.0.0.1:1", weight: 3}, {addr: "127.0.0.1:2"}]}
`))
		if err == nil || !strings.Contains(err.Error(), "upstreams.w.instances[0].weight") || !strings.Contains(err.Error(), "got 3") {
			t.Errorf("balancer %s with a weight: %v, want an error naming upstreams.w.instances[0].weight and 3", b, err)
		}
	}
}
