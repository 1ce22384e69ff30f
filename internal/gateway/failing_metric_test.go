package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestFailingInstancesExported: an instance that fails its active health
// checks takes no traffic, and /metrics says so per pool
// (graygate_pool_failing_instances), as it says how many passive health
// ejected; before, a failing instance was only missing from
// graygate_pool_healthy_instances, with no sign of why.
func TestFailingInstancesExported(t *testing.T) {
	sick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(sick.Close)
	e := start(t, `
default_upstream: w
upstreams:
  stable: {instances: [{addr: "{{stable}}"}]}
  gray:   {instances: [{addr: "{{gray}}"}]}
  w:      {instances: [{addr: "{{a}}"}, {addr: "`+sick.Listener.Addr().String()+`"}],
           active_health: {path: /healthz, interval: 50ms, unhealthy_threshold: 1}}
`, "")
	series := `graygate_pool_failing_instances{pool="w"}`
	deadline := time.Now().Add(5 * time.Second)
	for {
		text := metricsText(t, e)
		if metricValue(text, series) == 1 && metricValue(text, `graygate_pool_healthy_instances{pool="w"}`) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, healthy %v; want 1 failing and 1 healthy", series, metricValue(text, series), metricValue(text, `graygate_pool_healthy_instances{pool="w"}`))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
