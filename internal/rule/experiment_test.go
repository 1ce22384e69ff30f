package rule

import (
	"fmt"
	"strings"
	"testing"
)

// TestSharedExperimentConflicts: ab rules that share an experiment_id pool
// its data, so they must agree on the groups, weights and control group,
// on how a user is put in a group, and on the type of a metric both
// declare; a rule that does not is refused naming the field and the rule
// that runs the experiment, by LayerConflicts (every cross-rule check) and
// by CheckLayers (the snapshot).
func TestSharedExperimentConflicts(t *testing.T) {
	ab := func(key, exp, groups, extra string) *Compiled {
		if extra != "" {
			extra = "," + extra
		}
		return mustParse(t, fmt.Sprintf(`{"key":%q,"type":"ab","experiment_id":%q%s,"groups":[%s]}`, key, exp, extra, groups))
	}
	const ab5050 = `{"name":"A","weight":50,"target":"127.0.0.1:1"},{"name":"B","weight":50,"target":"127.0.0.1:2"}`
	const metrics = `"metrics":[{"name":"purchase","type":"binomial"},{"name":"revenue","type":"mean"}]`
	running := []*Compiled{
		ab("ccx", "ccx_id", ab5050, metrics),
		ab("other", "other_id", `{"name":"X","weight":100,"target":"127.0.0.1:1"}`, ""),
		mustParse(t, `{"key":"g","type":"gray","gray_percent":5,"targets":{"gray":"127.0.0.1:2","stable":"127.0.0.1:1"}}`),
	}
	tests := []struct {
		name string
		c    *Compiled
		want []string // "path: substring"
	}{
		{"another experiment", ab("dup", "new_id", `{"name":"X","weight":50,"target":"127.0.0.1:1"},{"name":"Y","weight":50,"target":"127.0.0.1:2"}`, ""), nil},
		{"the same experiment on another route", ab("dup", "ccx_id", ab5050, `"conditions":{"path_prefix":["/d/"]},"metrics":[{"name":"revenue","type":"mean"},{"name":"signup","type":"binomial"}]`), nil},
		{"replacing itself with other groups", ab("ccx", "ccx_id", `{"name":"X","weight":80,"target":"127.0.0.1:1"},{"name":"Y","weight":20,"target":"127.0.0.1:2"}`, ""), nil},
		{"other group names", ab("dup", "ccx_id", `{"name":"X","weight":50,"target":"127.0.0.1:1"},{"name":"Y","weight":50,"target":"127.0.0.1:2"}`, ""),
			[]string{`experiment_id: "ccx_id" is the experiment of rule "ccx", whose groups are A 50, B 50 (control A); rules that share an experiment pool its units, so they must have the same groups, weights and control group, got X 50, Y 50 (control X)`}},
		{"other weights", ab("dup", "ccx_id", `{"name":"A","weight":80,"target":"127.0.0.1:1"},{"name":"B","weight":20,"target":"127.0.0.1:2"}`, ""),
			[]string{`experiment_id: "ccx_id" is the experiment of rule "ccx", whose groups are A 50, B 50 (control A)`}},
		{"another control", ab("dup", "ccx_id", `{"name":"A","weight":50,"target":"127.0.0.1:1"},{"name":"B","weight":50,"target":"127.0.0.1:2","control":true}`, ""),
			[]string{`experiment_id: "ccx_id" is the experiment of rule "ccx"`}},
		{"a third group", ab("dup", "ccx_id", `{"name":"A","weight":50,"target":"127.0.0.1:1"},{"name":"B","weight":40,"target":"127.0.0.1:2"},{"name":"C","weight":10,"target":"127.0.0.1:2"}`, ""),
			[]string{`experiment_id: "ccx_id" is the experiment of rule "ccx"`}},
		{"another hash", ab("dup", "ccx_id", ab5050, `"hash":"growthbook"`),
			[]string{`hash: rule "ccx" assigns the groups of experiment "ccx_id" with xxh64 salted "ccx_id", this rule with growthbook salted "ccx_id"`}},
		{"an unleash group id per rule", ab("dup", "ccx_id", ab5050, `"hash":"unleash"`),
			[]string{`hash: rule "ccx" assigns`}},
		{"another metric type", ab("dup", "ccx_id", ab5050, `"metrics":[{"name":"signup","type":"binomial"},{"name":"purchase","type":"mean"}]`),
			[]string{`metrics[1].type: is mean, but metric "purchase" of experiment "ccx_id" is binomial in rule "ccx"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := LayerConflicts(tt.c, running)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("LayerConflicts = %v, want none", err)
				}
				if tt.c.Key != "ccx" {
					if err := CheckLayers(append([]*Compiled{tt.c}, running...)); err != nil {
						t.Errorf("CheckLayers = %v, want none", err)
					}
				}
				return
			}
			for _, w := range missingProblems(err, tt.want) {
				t.Errorf("LayerConflicts = %q, want one starting %q", err, w)
			}
			if err := CheckLayers(append(append([]*Compiled(nil), running...), tt.c)); err == nil || !strings.Contains(err.Error(), `rule "dup"`) {
				t.Errorf("CheckLayers = %v, want the conflict of rule \"dup\"", err)
			}
		})
	}
	// Two unleash rules share an experiment when they name one group id.
	u1 := ab("u1", "u_id", ab5050, `"hash":"unleash","group_id":"flag"`)
	if err := LayerConflicts(ab("u2", "u_id", ab5050, `"hash":"unleash","group_id":"flag"`), []*Compiled{u1}); err != nil {
		t.Errorf("unleash rules of one group id: %v", err)
	}
	if err := LayerConflicts(ab("u2", "u_id", ab5050, `"hash":"unleash","group_id":"other"`), []*Compiled{u1}); err == nil || !strings.HasPrefix(err.Error(), `group_id: rule "u1" assigns`) {
		t.Errorf("unleash rules of two group ids: %v", err)
	}
}
