package rule

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/strict"
	"github.com/graygate/graygate/internal/upstream"
)

// issueExample is the plan of issue 15, with a real query and webhook URL
// in place of the issue's "…".
const issueExample = `{"key":"canary","type":"gray","gray_percent":0,"targets":{"gray":"127.0.0.1:2","stable":"127.0.0.1:1"},
"rollout": {
  "steps": [
    {"percent": 5},
    {"pause": "2m"},
    {"analysis": "health"},
    {"percent": 25},
    {"pause": {}},
    {"percent": 100}
  ],
  "analyses": {
    "health": {
      "interval": "30s", "count": 4, "failure_limit": 1, "inconclusive_limit": 1,
      "checks": [
        {"metric": "error_rate", "max": 0.01},
        {"metric": "error_rate_vs_stable", "max": 0.005},
        {"metric": "p99_ms", "max": 500, "min_requests": 100},
        {"prometheus": {"address": "http://127.0.0.1:9090", "query": "sum(rate(graygate_requests_total{group=\"gray\",code=\"5xx\"}[1m]))", "max": 0.05}},
        {"webhook": {"url": "http://127.0.0.1:9999/check", "timeout": "5s"}}
      ]
    }
  },
  "background_analysis": "health"
}}`

func TestRolloutIssueExample(t *testing.T) {
	c := mustParse(t, issueExample)
	ro := c.Source.Rollout
	if len(ro.Steps) != 6 || ro.Steps[1].Pause.Duration != 2*time.Minute || !ro.Steps[4].Pause.UntilPromoted || ro.Steps[2].Analysis != "health" {
		t.Fatalf("steps = %+v", ro.Steps)
	}
	a := ro.Analyses["health"]
	if a.Interval.Std() != 30*time.Second || a.EffectiveCount() != 4 || a.FailureLimit != 1 || a.InconclusiveLimit != 1 || len(a.Checks) != 5 {
		t.Fatalf("analysis = %+v", a)
	}
	if !ro.AbortsOnBreaker() || ro.AbortWhitelist {
		t.Errorf("defaults: abort_on_breaker %v, abort_whitelist %v", ro.AbortsOnBreaker(), ro.AbortWhitelist)
	}
	var labels []string
	for _, ch := range a.Checks {
		labels = append(labels, ch.Label())
	}
	if got := strings.Join(labels, ","); got != "error_rate,error_rate_vs_stable,p99_ms,prometheus,webhook" {
		t.Errorf("labels = %s", got)
	}
	if p, ok := ro.FinalPercent(); !ok || p != 100 {
		t.Errorf("FinalPercent = %v %v", p, ok)
	}
	// It marshals back to the same plan.
	b, err := json.Marshal(c.Source)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(b)
	if err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	if !SamePlan(back.Rollout, ro) || !strings.Contains(string(b), `"pause":{}`) || !strings.Contains(string(b), `"pause":"2m0s"`) {
		t.Errorf("round trip: %s", b)
	}
}

func TestRolloutValidation(t *testing.T) {
	const targets = `"type":"gray","gray_percent":0,"targets":{"gray":"h:2","stable":"h:1"}`
	ok := `"interval":"1s","checks":[{"metric":"error_rate","max":0.1}]`
	tests := []struct {
		name    string
		rollout string // the value of "rollout"
		rest    string // replaces the gray fields
		path    string
		message string
	}{
		{"no steps", `{"steps":[]}`, "", "rollout.steps", "at least one step"},
		{"empty step", `{"steps":[{}]}`, "", "rollout.steps[0]", "needs one of percent, pause or analysis"},
		{"two things", `{"steps":[{"percent":5,"pause":"1s"}]}`, "", "rollout.steps[0]", "sets percent and pause"},
		{"percent range", `{"steps":[{"percent":120}]}`, "", "rollout.steps[0].percent", "must be 0..100, got 120"},
		{"percent decimals", `{"steps":[{"percent":1.234}]}`, "", "rollout.steps[0].percent", "at most two decimals"},
		{"decreasing", `{"steps":[{"percent":50},{"pause":"1s"},{"percent":25}]}`, "", "rollout.steps[2].percent", "25 is below the 50 of steps[0] before it"},
		{"below gray_percent", `{"steps":[{"percent":10},{"pause":{}},{"percent":50}]}`, `"type":"gray","gray_percent":30,"targets":{"gray":"h:2","stable":"h:1"}`, "rollout.steps[0].percent", "10 is below the rule's gray_percent 30"},
		{"a later step below gray_percent", `{"steps":[{"pause":"1s"},{"percent":20}]}`, `"type":"gray","gray_percent":30,"targets":{"gray":"h:2","stable":"h:1"}`, "rollout.steps[1].percent", "20 is below the rule's gray_percent 30"},
		{"a step not reached below gray_percent", `{"steps":[{"percent":5},{"pause":{}},{"percent":20}],"status":{"state":"paused","step":1,"started_at":"2026-01-01T00:00:00Z","step_started_at":"2026-01-01T00:00:00Z","paused_for":"promote"}}`, `"type":"gray","gray_percent":30,"targets":{"gray":"h:2","stable":"h:1"}`, "rollout.steps[2].percent", "20 is below the rule's gray_percent 30"},
		{"bad duration", `{"steps":[{"pause":"soon"}]}`, "", "rollout.steps[0].pause", `got "soon"`},
		{"zero pause", `{"steps":[{"pause":"0s"}]}`, "", "rollout.steps[0].pause", "positive duration"},
		{"pause object", `{"steps":[{"pause":{"until":"x"}}]}`, "", "rollout.steps[0].pause", "an object must be empty"},
		{"pause number", `{"steps":[{"pause":5}]}`, "", "rollout.steps[0].pause", `expected a duration such as "2m", or {} to wait for promote; got 5`},
		{"unknown analysis", `{"steps":[{"analysis":"nope"}],"analyses":{"health":{` + ok + `}}}`, "", "rollout.steps[0].analysis", `no analysis named "nope" in rollout.analyses (it defines "health")`},
		{"unknown background", `{"steps":[{"percent":5}],"background_analysis":"bg"}`, "", "rollout.background_analysis", `no analysis named "bg"`},
		{"no interval", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"checks":[{"metric":"error_rate","max":0.1}]}}}`, "", "rollout.analyses.a.interval", "is required"},
		{"interval too long for built-ins", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"5m","checks":[{"metric":"error_rate","max":0.1}]}}}`, "", "rollout.analyses.a.interval", "at most 2m0s with built-in metrics"},
		{"fractional interval", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1500ms","checks":[{"metric":"error_rate","max":0.1}]}}}`, "", "rollout.analyses.a.interval", "whole number of seconds"},
		{"negative limits", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","failure_limit":-1,"checks":[{"metric":"error_rate","max":0.1}]}}}`, "", "rollout.analyses.a.failure_limit", "must not be negative, got -1"},
		{"negative inconclusive", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","inconclusive_limit":-2,"checks":[{"metric":"error_rate","max":0.1}]}}}`, "", "rollout.analyses.a.inconclusive_limit", "got -2"},
		{"negative count", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","count":-1,"checks":[{"metric":"error_rate","max":0.1}]}}}`, "", "rollout.analyses.a.count", "at least 1"},
		{"no checks", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","checks":[]}}}`, "", "rollout.analyses.a.checks", "at least one check"},
		{"check of no kind", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","checks":[{"max":1}]}}}`, "", "rollout.analyses.a.checks[0]", "needs one of metric, prometheus or webhook"},
		{"check of two kinds", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","checks":[{"metric":"p99_ms","max":1,"webhook":{"url":"http://h/"}}]}}}`, "", "rollout.analyses.a.checks[0]", "sets metric and webhook"},
		{"unknown metric", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","checks":[{"metric":"latency","max":1}]}}}`, "", "rollout.analyses.a.checks[0].metric", `got "latency"`},
		{"no bound", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","checks":[{"metric":"p99_ms"}]}}}`, "", "rollout.analyses.a.checks[0]", "needs max and/or min"},
		{"error rate as percent", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","checks":[{"metric":"error_rate","max":5}]}}}`, "", "rollout.analyses.a.checks[0].max", "fractions: 0.01 is 1%"},
		{"min above max", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","checks":[{"metric":"p99_ms","min":10,"max":5}]}}}`, "", "rollout.analyses.a.checks[0].min", "10 is above max 5"},
		{"negative min_requests", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","checks":[{"metric":"p99_ms","max":5,"min_requests":-1}]}}}`, "", "rollout.analyses.a.checks[0].min_requests", "got -1"},
		{"prometheus address", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","checks":[{"prometheus":{"address":"127.0.0.1:9090","query":"up","max":1}}]}}}`, "", "rollout.analyses.a.checks[0].prometheus.address", "http:// or https:// URL"},
		{"prometheus query", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","checks":[{"prometheus":{"address":"http://p:9090","max":1}}]}}}`, "", "rollout.analyses.a.checks[0].prometheus.query", "is required"},
		{"prometheus bounds", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","checks":[{"prometheus":{"address":"http://p:9090","query":"up"}}]}}}`, "", "rollout.analyses.a.checks[0].prometheus", "needs max and/or min"},
		{"top-level max on prometheus", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","checks":[{"max":1,"prometheus":{"address":"http://p:9090","query":"up","max":1}}]}}}`, "", "rollout.analyses.a.checks[0].max", "only for metric checks"},
		{"max on webhook", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","checks":[{"max":1,"webhook":{"url":"http://h/x"}}]}}}`, "", "rollout.analyses.a.checks[0].max", "only for metric checks (a webhook check passes on a 2xx answer)"},
		{"webhook url", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","checks":[{"webhook":{"url":"ftp://h/x"}}]}}}`, "", "rollout.analyses.a.checks[0].webhook.url", `got "ftp://h/x"`},
		{"webhook timeout", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","checks":[{"webhook":{"url":"http://h/x","timeout":"2h"}}]}}}`, "", "rollout.analyses.a.checks[0].webhook.timeout", "between 1ms and 1m0s (0 or unset means 10s), got 2h0m0s"},
		{"prometheus timeout too long", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","checks":[{"prometheus":{"address":"http://p:9090","query":"up","max":1,"timeout":"90s"}}]}}}`, "", "rollout.analyses.a.checks[0].prometheus.timeout", "(0 or unset means 10s), got 1m30s"},
		{"duplicate labels", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","checks":[{"webhook":{"url":"http://h/x"}},{"webhook":{"url":"http://h/y"}}]}}}`, "", "rollout.analyses.a.checks[1].name", `checks[0] is also called "webhook"`},
		{"bad analysis name", `{"steps":[{"analysis":"a b"}],"analyses":{"a b":{` + ok + `}}}`, "", "rollout.analyses.a b", "analysis name must match"},
		{"unknown field", `{"steps":[{"percent":5}],"stepz":1}`, "", "rollout.stepz", "unknown field"},
		{"unknown check field", `{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","checks":[{"metric":"error_rate","max":0.1,"maximum":1}]}}}`, "", "rollout.analyses.a.checks[0].maximum", "unknown field"},
		{"ab rule", `{"steps":[{"percent":5}]}`, `"type":"ab","experiment_id":"e","groups":[{"name":"A","weight":100,"target":"h:1"}]`, "rollout", "only for gray rules"},
		{"bad status", `{"steps":[{"percent":5}],"status":{"state":"dancing","step":7}}`, "", "rollout.status.state", `got "dancing"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rest := targets
			if tt.rest != "" {
				rest = tt.rest
			}
			js := `{"key":"k",` + rest + `,"rollout":` + tt.rollout + `}`
			_, err := Parse([]byte(js), testEnv())
			if err == nil {
				t.Fatalf("Parse(%s) accepted it", js)
			}
			for _, fe := range strict.Fields(err) {
				if fe.Path == tt.path && strings.Contains(fe.Message, tt.message) {
					return
				}
			}
			t.Errorf("Parse(%s) = %v, want %s: ...%s...", js, err, tt.path, tt.message)
		})
	}
}

// TestRolloutOneProblemPerBadStep: a step whose field does not decode is
// reported once, at that field, and not also as a step without percent,
// pause or analysis; a step that is really empty still is.
func TestRolloutOneProblemPerBadStep(t *testing.T) {
	tests := []struct {
		name, steps, path, message string
	}{
		{"pause as a number", `[{"percent":10},{"pause":30},{"percent":50}]`, "rollout.steps[1].pause", `expected a duration such as "2m", or {} to wait for promote; got 30`},
		{"percent as a string", `[{"percent":"10"},{"pause":"1m"}]`, "rollout.steps[0].percent", `expected a number, got "10"`},
		{"analysis as a number", `[{"analysis":7}]`, "rollout.steps[0].analysis", "expected a string, got 7"},
		{"an empty step", `[{"percent":10},{}]`, "rollout.steps[1]", "needs one of percent, pause or analysis"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			js := `{"key":"k","type":"gray","gray_percent":0,"targets":{"gray":"h:2","stable":"h:1"},"rollout":{"steps":` + tt.steps + `}}`
			_, err := Parse([]byte(js), testEnv())
			fields := strict.Fields(err)
			if len(fields) != 1 || fields[0].Path != tt.path || fields[0].Message != tt.message {
				t.Errorf("Parse(%s) = %v, want one problem: %s: %s", js, err, tt.path, tt.message)
			}
		})
	}
}

// TestRolloutBaseline: the steps a rollout has not reached must not lower
// gray_percent, but the gray_percent its own percent steps set is no
// problem when the stored rule is checked again (by the engine's every
// write, or a reload).
func TestRolloutBaseline(t *testing.T) {
	const plan = `"steps":[{"percent":5},{"pause":"1m"},{"percent":50},{"pause":{}},{"percent":100}]`
	status := func(state string, step int) string {
		return fmt.Sprintf(`,"status":{"state":%q,"step":%d,"started_at":"2026-01-01T00:00:00Z","step_started_at":"2026-01-01T00:00:00Z"}`, state, step)
	}
	tests := []struct {
		name   string
		gray   float64
		status string
		path   string // "" for valid
	}{
		{"not started at 0", 0, "", ""},
		{"not started at 5", 5, "", ""},
		{"not started above the first step", 30, "", "rollout.steps[0].percent"},
		{"at 50, waiting for promote", 50, status(RolloutPaused, 3), ""},
		{"at 50, progressing at the last step", 50, status(RolloutProgressing, 4), ""},
		{"raised by hand above what is left", 70, status(RolloutPaused, 3), ""},
		{"raised by hand above a step not reached", 70, status(RolloutProgressing, 2), "rollout.steps[2].percent"},
		{"completed", 100, status(RolloutCompleted, 5), ""},
		{"aborted", 0, status(RolloutAborted, 3), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			js := fmt.Sprintf(`{"key":"k","type":"gray","gray_percent":%v,"targets":{"gray":"h:2","stable":"h:1"},"rollout":{%s%s}}`, tt.gray, plan, tt.status)
			_, err := Parse([]byte(js), testEnv())
			switch fields := strict.Fields(err); {
			case tt.path == "" && err != nil:
				t.Errorf("Parse(%s) = %v, want it valid", js, err)
			case tt.path != "" && (len(fields) != 1 || fields[0].Path != tt.path || !strings.Contains(fields[0].Message, "below the rule's gray_percent")):
				t.Errorf("Parse(%s) = %v, want one problem at %s", js, err, tt.path)
			}
		})
	}
}

// TestInfiniteBound: JSON cannot write an infinite bound (nor YAML's .inf
// get through the config), but a rule built in Go can: it is refused, as
// it could never be stored.
func TestInfiniteBound(t *testing.T) {
	inf := math.Inf(1)
	r := Rule{Key: "k", Type: TypeGray, GrayPercent: new(0.0), Targets: &Targets{Gray: "h:2", Stable: "h:1"}, Rollout: &Rollout{
		Steps: []Step{{Analysis: "a"}},
		Analyses: map[string]Analysis{"a": {Interval: breaker.Duration(time.Second), Checks: []Check{
			{Prometheus: &PrometheusCheck{Address: "http://p:9090", Query: "up", Max: &inf}},
		}}},
	}}
	fields := strict.Fields(r.Validate())
	if len(fields) != 1 || fields[0].Path != "rollout.analyses.a.checks[0].prometheus.max" || !strings.Contains(fields[0].Message, "must be a finite number, got +Inf") {
		t.Errorf("Validate = %v, want one problem at rollout.analyses.a.checks[0].prometheus.max", fields)
	}
}

// TestOverflowingBoundIsOneProblem: a bound JSON can write but float64
// cannot hold ("max": 1e999) is one problem, at the bound, and not also a
// check "needing max and/or min".
func TestOverflowingBoundIsOneProblem(t *testing.T) {
	for _, check := range []string{`{"metric":"error_rate","max":1e999}`, `{"prometheus":{"address":"http://p:9090","query":"up","min":-1e999}}`} {
		js := `{"key":"k","type":"gray","gray_percent":0,"targets":{"gray":"h:2","stable":"h:1"},"rollout":{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"30s","checks":[` + check + `]}}}}`
		_, err := Parse([]byte(js), testEnv())
		fields := strict.Fields(err)
		if len(fields) != 1 || !strings.HasSuffix(fields[0].Path, "max") && !strings.HasSuffix(fields[0].Path, "min") || !strings.Contains(fields[0].Message, "expected a number, got") {
			t.Errorf("Parse(%s) = %v, want one problem at the bound", js, err)
		}
	}
}

func TestRolloutValidPlans(t *testing.T) {
	for _, ro := range []string{
		`{"steps":[{"percent":5},{"pause":"1s"},{"percent":5},{"percent":100}]}`,
		`{"steps":[{"pause":{}}]}`,
		`{"steps":[{"analysis":"p"}],"analyses":{"p":{"interval":"1h","checks":[{"prometheus":{"address":"https://prom.example:9090/sub","query":"up","min":1}}]}}}`,
		`{"steps":[{"percent":12.34}],"abort_on_breaker":false,"abort_whitelist":true}`,
		`{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"2m","checks":[{"name":"vs","metric":"error_rate_vs_stable","min":-0.5,"max":0.01,"min_requests":0}]}}}`,
	} {
		js := `{"key":"k","type":"gray","gray_percent":0,"targets":{"gray":"h:2","stable":"h:1"},"rollout":` + ro + `}`
		if _, err := Parse([]byte(js), testEnv()); err != nil {
			t.Errorf("Parse(%s): %v", ro, err)
		}
	}
}

// TestAbortWhitelist checks that an aborted rollout with abort_whitelist
// sends no whitelisted user to gray, and that without it (or while the
// rollout runs) the whitelist works.
func TestAbortWhitelist(t *testing.T) {
	base := `{"key":"k","type":"gray","gray_percent":0,"white_list":["uid:vip"],"targets":{"gray":"127.0.0.1:2","stable":"127.0.0.1:1"},
		"rollout":{"steps":[{"percent":5}],"abort_whitelist":%s,"status":{"state":"%s","step":0,"started_at":"2026-01-01T00:00:00Z","step_started_at":"2026-01-01T00:00:00Z"}}}`
	tests := []struct {
		name, abortWhitelist, state string
		wantGray                    bool
	}{
		{"aborted with abort_whitelist", "true", RolloutAborted, false},
		{"aborted without", "false", RolloutAborted, true},
		{"progressing with abort_whitelist", "true", RolloutProgressing, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, fmt.Sprintf(base, tt.abortWhitelist, tt.state))
			out, ok := c.Eval(facts(req("/", "", "10.0.0.1"), "vip"), false, nil, nil)
			if gray := ok && out.Target.Group == "gray"; gray != tt.wantGray {
				t.Errorf("vip to gray = %v, want %v", gray, tt.wantGray)
			}
		})
	}
}

func TestPauseJSON(t *testing.T) {
	tests := []struct {
		in   string
		want Pause
		err  string
	}{
		{`"90s"`, Pause{Duration: 90 * time.Second}, ""},
		{`{}`, Pause{UntilPromoted: true}, ""},
		{` { } `, Pause{UntilPromoted: true}, ""},
		{`{"a":1}`, Pause{}, "must be empty"},
		{`[]`, Pause{}, "expected a duration"},
		{`"1 minute"`, Pause{}, `got "1 minute"`},
	}
	for _, tt := range tests {
		var p Pause
		err := p.UnmarshalJSON([]byte(tt.in))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Unmarshal(%s) = %v, want error %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || p != tt.want {
			t.Errorf("Unmarshal(%s) = %+v, %v; want %+v", tt.in, p, err, tt.want)
		}
		b, _ := json.Marshal(p)
		var back Pause
		if err := back.UnmarshalJSON(b); err != nil || back != p {
			t.Errorf("round trip of %+v through %s = %+v, %v", p, b, back, err)
		}
	}
}

// TestREADMERolloutExample parses the plan the README's "Progressive
// delivery" section shows, so that the documentation cannot drift.
func TestREADMERolloutExample(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(data), "## Progressive delivery\n")
	if !ok {
		t.Fatal("the README has no Progressive delivery section")
	}
	_, block, ok := strings.Cut(sec, "```json\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok || block == "" {
		t.Fatal("no JSON example in the Progressive delivery section")
	}
	env := testEnv()
	reg := upstream.NewRegistry(map[string]*upstream.Pool{
		"gray":   upstream.NewPool("gray", []*upstream.Instance{{Addr: "127.0.0.1:2"}}),
		"stable": upstream.NewPool("stable", []*upstream.Instance{{Addr: "127.0.0.1:1"}}),
	})
	env.Resolve = reg.Resolve
	c, err := Parse([]byte(block), env)
	if err != nil {
		t.Fatalf("the README's rollout example: %v\n%s", err, block)
	}
	if n := len(c.Source.Rollout.Steps); n != 6 {
		t.Errorf("%d steps", n)
	}
}
