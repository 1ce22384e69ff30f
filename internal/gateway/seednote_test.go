package gateway

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestConfigRulesNotApplied: the config file's rules only seed the store,
// and a rule of the file that does not serve says so: each reload logs one
// warning per such rule, naming its key, and the status lists the keys in
// config_rules_not_applied, until the file matches the store or drops the
// rule. A refused reload leaves the list as it was.
func TestConfigRulesNotApplied(t *testing.T) {
	logs := &syncBuffer{}
	rules := func(r1, r2 string) string {
		out := baseConfig + "rules:\n"
		if r1 != "" {
			out += "  - {key: r1, type: gray, gray_percent: " + r1 + ", targets: {gray: gray, stable: stable}}\n"
		}
		if r2 != "" {
			out += "  - {key: r2, type: gray, gray_percent: " + r2 + ", targets: {gray: gray, stable: stable}}\n"
		}
		return out
	}
	e := startWith(t, rules("10", "20"), "", func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	const served = "the store's version serves: edit it through the API or CLI, or remove it from the file"
	const deleted = "the store deleted it: create it through the API or CLI, or remove it from the file"
	steps := []struct {
		name    string
		api     func() // a change through the admin API first
		yaml    string // the file reloaded
		refused bool
		want    []string       // config_rules_not_applied
		logged  map[string]int // warning lines of this step, by text
	}{
		{name: "seeded", yaml: rules("10", "20"), want: []string{}},
		{name: "r1 edited through the API", api: func() {
			e.mustPut("r1", map[string]any{"type": "gray", "gray_percent": 50, "targets": map[string]string{"gray": "gray", "stable": "stable"}})
		}, yaml: rules("10", "20"), want: []string{"r1"}, logged: map[string]int{"config rule r1 not applied: " + served: 1}},
		{name: "the file edited, not applied either", yaml: rules("30", "20"), want: []string{"r1"}, logged: map[string]int{"config rule r1 not applied: " + served: 1}},
		{name: "a refused reload changes nothing", yaml: rules("30", "20") + "  - {key: r3, type: gray, gray_percent: 5, targets: {gray: nowhere, stable: stable}}\n", refused: true, want: []string{"r1"}},
		{name: "the file matches the store", yaml: rules("50", "20"), want: []string{}},
		{name: "the file differs again", yaml: rules("60", "20"), want: []string{"r1"}, logged: map[string]int{"config rule r1 not applied: " + served: 1}},
		{name: "r1 removed from the file", yaml: rules("", "20"), want: []string{}},
		{name: "r2 deleted through the API", api: func() {
			if code, out := e.api("DELETE", "/api/v1/rules/r2", nil); code != 200 {
				t.Fatalf("DELETE r2 = %d %v", code, out)
			}
		}, yaml: rules("", "20"), want: []string{"r2"}, logged: map[string]int{"config rule r2 not applied: " + deleted: 1}},
	}
	for _, st := range steps {
		if st.api != nil {
			st.api()
		}
		mark := len(logs.String())
		if err := e.reloadKeepingDataDir(st.yaml); (err != nil) != st.refused {
			t.Fatalf("%s: reload = %v, want refused %v", st.name, err, st.refused)
		}
		if got := e.gw.Status().ConfigRulesNotApplied; !slices.Equal(got, st.want) {
			t.Errorf("%s: config_rules_not_applied = %q, want %q", st.name, got, st.want)
		}
		_, body := e.api("GET", "/api/v1/status", nil)
		if got, ok := body["config_rules_not_applied"].([]any); !ok || len(got) != len(st.want) {
			t.Errorf("%s: /api/v1/status config_rules_not_applied = %v, want %q", st.name, body["config_rules_not_applied"], st.want)
		}
		step := logs.String()[mark:]
		if n := strings.Count(step, "not applied"); n != len(st.logged) {
			t.Errorf("%s: %d warnings of rules not applied, want %d:\n%s", st.name, n, len(st.logged), step)
		}
		for line, n := range st.logged {
			if got := strings.Count(step, line); got != n {
				t.Errorf("%s: %q logged %d times, want %d:\n%s", st.name, line, got, n, step)
			}
		}
	}
}

// TestConfigRuleMovedByItsRollout: a rule of the file whose rollout moved
// gray_percent in the store is still the file's rule, and a reload does
// not name it; the status comes from a rollout run by the gateway itself.
func TestConfigRuleMovedByItsRollout(t *testing.T) {
	logs := &syncBuffer{}
	yaml := baseConfig + "rules:\n" +
		"  - {key: r1, type: gray, gray_percent: 0, targets: {gray: gray, stable: stable}, rollout: {steps: [{percent: 5}, {pause: 1h}]}}\n"
	e := startWith(t, yaml, "", func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	waitRollout(t, e, "r1", "progressing", 1, 10*time.Second)
	if _, r := e.api("GET", "/api/v1/rules/r1", nil); r["gray_percent"] != 5.0 {
		t.Fatalf("the rollout did not move gray_percent: %v", r)
	}
	mark := len(logs.String())
	if err := e.reloadKeepingDataDir(yaml); err != nil {
		t.Fatal(err)
	}
	if got := e.gw.Status().ConfigRulesNotApplied; len(got) != 0 {
		t.Errorf("config_rules_not_applied = %q, want none", got)
	}
	if step := logs.String()[mark:]; strings.Contains(step, "not applied") {
		t.Errorf("the reload warned:\n%s", step)
	}
	// The same file with the steps changed is not what serves.
	if err := e.reloadKeepingDataDir(strings.Replace(yaml, "1h", "2h", 1)); err != nil {
		t.Fatal(err)
	}
	if got := e.gw.Status().ConfigRulesNotApplied; !slices.Equal(got, []string{"r1"}) {
		t.Errorf("with other steps, config_rules_not_applied = %q, want [r1]", got)
	}
}
