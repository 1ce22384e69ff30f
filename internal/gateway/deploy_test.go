package gateway

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/graygate/graygate/internal/store/etcdstore/etcdtest"
)

var metricName = regexp.MustCompile(`\bgraygate_[a-zA-Z0-9_]+\b`)

// dashboardQueries returns every PromQL string of the dashboard: panel
// and row targets and the template variables' queries.
func dashboardQueries(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title      string `json:"title"`
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *struct {
				Type string `json:"type"`
				UID  string `json:"uid"`
			} `json:"datasource"`
			GridPos *struct{ X, Y, W, H int } `json:"gridPos"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s is not valid dashboard JSON: %v", path, err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: title %q, uid %q, %d panels", path, d.Title, d.UID, len(d.Panels))
	}
	var out []string
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("%s: panel id %d is used twice", path, p.ID)
		}
		ids[p.ID] = true
		if p.Title == "" || p.GridPos == nil || p.GridPos.W == 0 {
			t.Errorf("%s: panel %d lacks a title or a position", path, p.ID)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || len(p.Targets) == 0 {
			t.Errorf("%s: panel %q needs a prometheus datasource and a target", path, p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" || tg.RefID == "" {
				t.Errorf("%s: panel %q has a target without expr or refId", path, p.Title)
			}
			out = append(out, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			out = append(out, v.Definition)
		}
	}
	return out
}

func alertQueries(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	var alerts []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out = append(out, r.Expr)
			alerts = append(alerts, r.Alert)
		}
	}
	for _, want := range []string{"GraygateBreakerOpen", "GraygateGrayErrorRateHigh", "GraygateExperimentSRM", "GraygateRolloutAborted", "GraygateStoreStale"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("%s has no alert %s", path, want)
		}
	}
	return out
}

// TestShippedFilesUseExportedMetrics runs a gateway on the etcd store,
// drives it until it has exported every kind of metric (a gray target
// whose breaker opens, a rollout that measures and aborts), and checks
// that every metric name the Grafana dashboard and the alert rules query
// is one it exports, so that neither can rot.
func TestShippedFilesUseExportedMetrics(t *testing.T) {
	dash := dashboardQueries(t, "../../deploy/grafana/graygate.json")
	alerts := alertQueries(t, "../../deploy/prometheus/alerts.yaml")
	srv := etcdtest.Start(t)
	stable, _ := countingBackend(t, "stable", nil)
	gray, _ := countingBackend(t, "gray", func(int64) bool { return true })
	e := startFleetMember(t, srv, map[string]string{"stable": stable, "gray": gray, "a": stable, "b": stable}, t.TempDir())
	stop := load(e, 4)
	defer stop()
	e.mustPut("canary", `{"type":"gray","gray_percent":0,"targets":{"gray":"gray","stable":"stable"},"rollout":{"abort_on_breaker":false,
		"steps":[{"percent":100},{"analysis":"a"}],"analyses":{"a":{"interval":"1s","count":5,"failure_limit":2,"checks":[{"metric":"error_rate","max":0.05}]}}}}`)
	// An experiment with units enough in each group to be judged, for the
	// SRM gauges the alerts use; it goes before the canary, which claims
	// its gray users on every path.
	e.mustPut("shop", `{"type":"ab","priority":50,"experiment_id":"exp_deploy","conditions":{"path_prefix":["/shop/"]},
		"groups":[{"name":"A","weight":50,"target":"a"},{"name":"B","weight":50,"target":"b"}]}`)
	waitFor(t, "the experiment to serve", 20*time.Second, func() bool {
		a, err := e.get("/shop/item", "X-User-Id", "deploy-probe")
		return err == nil && a.rule == "shop"
	})
	for i := range 60 {
		if a, err := e.get("/shop/item", "X-User-Id", fmt.Sprintf("deploy-%d", i)); err != nil || a.rule != "shop" {
			t.Fatalf("unit %d of the experiment: %+v %v", i, a, err)
		}
	}

	need := map[string][]string{} // metric name → the files that use it
	for file, qs := range map[string][]string{"graygate.json": dash, "alerts.yaml": alerts} {
		for _, q := range qs {
			for _, n := range metricName.FindAllString(q, -1) {
				if !slices.Contains(need[n], file) {
					need[n] = append(need[n], file)
				}
			}
		}
	}
	var missing []string
	deadline := time.Now().Add(60 * time.Second)
	for {
		missing = missing[:0]
		mfs, err := e.gw.metrics.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		exported := map[string]dto.MetricType{}
		for _, mf := range mfs {
			if len(mf.GetMetric()) > 0 {
				exported[mf.GetName()] = mf.GetType()
			}
		}
		for n, files := range need {
			if _, ok := exported[n]; ok {
				continue
			}
			if base, ok := strings.CutSuffix(n, "_bucket"); ok && exported[base] == dto.MetricType_HISTOGRAM {
				continue
			}
			missing = append(missing, fmt.Sprintf("%s (in %s)", n, strings.Join(files, ", ")))
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			slices.Sort(missing)
			t.Fatalf("the shipped files query metrics the gateway does not export:\n  %s", strings.Join(missing, "\n  "))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, n := range []string{"graygate_rollout_step", "graygate_rollout_percent", "graygate_rollout_state", "graygate_breaker_state", "graygate_requests_total", "graygate_store_stale", "graygate_request_duration_seconds_bucket"} {
		if _, ok := need[n]; !ok {
			t.Errorf("neither the dashboard nor the alerts use %s", n)
		}
	}
}
