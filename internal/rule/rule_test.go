package rule

import (
	"encoding/json"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/match"
	"github.com/graygate/graygate/internal/strict"
	"github.com/graygate/graygate/internal/tags"
	"github.com/graygate/graygate/internal/upstream"
)

func testEnv() Env {
	reg := upstream.NewRegistry(map[string]*upstream.Pool{
		"user-center": upstream.NewPool("user-center", []*upstream.Instance{{Addr: "127.0.0.1:1"}}),
	})
	return Env{Resolve: reg.Resolve, HasRoute: func(n string) bool { return n == "api" }}
}

func mustParse(t *testing.T, js string) *Compiled {
	t.Helper()
	c, err := Parse([]byte(js), testEnv())
	if err != nil {
		t.Fatalf("Parse(%s): %v", js, err)
	}
	return c
}

// TestSeedShapesVerbatim accepts the two JSON examples of seed 000 section 1.3.
func TestSeedShapesVerbatim(t *testing.T) {
	gray := `{
  "key": "gray_v2",
  "type": "gray",
  "rule_name": "用户中心v2灰度",
  "gray_percent": 10,
  "white_list": ["uid:10001", "uid:10002"],
  "conditions": {
    "ua_contains": ["WeChat"],
    "path_prefix": ["/api/user/"]
  },
  "targets": {
    "gray": "192.168.1.66:8080",
    "stable": "192.168.1.65:8080"
  }
}`
	ab := `{
  "key": "ab_experiment_1",
  "type": "ab",
  "experiment_id": "exp_user_center_202405",
  "groups": [
    { "name": "A", "weight": 50, "target": "192.168.1.65:8080" },
    { "name": "B", "weight": 50, "target": "192.168.1.67:8080" }
  ]
}`
	g := mustParse(t, gray)
	if g.Gray.Pool.Instances[0].Addr != "192.168.1.66:8080" || g.threshold != 1000 {
		t.Errorf("gray compiled wrong: %+v", g)
	}
	a := mustParse(t, ab)
	if len(a.Groups) != 2 || a.Groups[1].Tag != "B" {
		t.Errorf("ab compiled wrong: %+v", a.Groups)
	}
}

func TestValidationErrors(t *testing.T) {
	tests := []struct {
		name string
		js   string
		want []string // "path: substring"
	}{
		{"not json", `{`, []string{": invalid JSON: unexpected end of input"}},
		{"bad json", `{"key":}`, []string{": invalid JSON at line 1, column 8"}},
		{"unknown field", `{"key":"a","type":"gray","gray_percent":1,"targets":{"gray":"h:1","stable":"h:2","grey":"x"},"colour":1}`,
			[]string{"colour: unknown field", "targets.grey: unknown field"}},
		{"wrong types", `{"key":1,"type":"ab","experiment_id":"e","groups":[{"name":"A","weight":"50","target":"h:1"}]}`,
			[]string{"key: expected a string, got 1", "groups[0].weight: expected a number, got \"50\""}},
		{"weight with three decimals", `{"key":"a","type":"ab","experiment_id":"e","groups":[{"name":"A","weight":33.335,"target":"h:1"},{"name":"B","weight":66.665,"target":"h:2"}]}`,
			[]string{"groups[0].weight: allows at most two decimals, got 33.335", "groups[1].weight: allows at most two decimals, got 66.665"}},
		{"unleash weight in hundredths", `{"key":"a","type":"ab","hash":"unleash","experiment_id":"e","groups":[{"name":"A","weight":50.05,"target":"h:1"},{"name":"B","weight":49.95,"target":"h:2"}]}`,
			[]string{`groups[0].weight: allows one decimal with "hash": "unleash" (Unleash stores a variant's weight in tenths of a percent), got 50.05`,
				`groups[1].weight: allows one decimal with "hash": "unleash"`}},
		{"fractional weights sum", `{"key":"a","type":"ab","experiment_id":"e","groups":[{"name":"A","weight":33.3,"target":"h:1"},{"name":"B","weight":33.3,"target":"h:2"},{"name":"C","weight":33.3,"target":"h:3"}]}`,
			[]string{"groups: weights must sum to 100, got 99.9"}},
		{"missing type", `{"key":"a"}`, []string{"type: is required"}},
		{"bad type", `{"key":"a","type":"canary"}`, []string{`type: must be "gray", "ab" or "tag", got "canary"`}},
		{"tag rule without target", `{"key":"a","rules":[{"tag":"vip","operator":"eq","value":true}]}`, []string{"target: is required for a tag rule"}},
		{"tag rule bad condition", `{"key":"a","rules":[{"tag":"vip","operator":"gt","value":true}],"target":"h:1","gray_percent":5}`, []string{"rules[0].value: type mismatch", "gray_percent: is not for tag rules"}},
		{"tag fields on gray", `{"key":"a","type":"gray","gray_percent":1,"targets":{"gray":"h:1","stable":"h:2"},"target":"h:3"}`, []string{"rules: rules, target and stable belong to tag rules"}},
		{"bad key", `{"key":"a b","type":"gray","gray_percent":1,"targets":{"gray":"h:1","stable":"h:2"}}`, []string{"key: must match"}},
		{"gray missing everything", `{"key":"a","type":"gray"}`,
			[]string{"gray_percent: is required", "targets: is required"}},
		{"percent range", `{"key":"a","type":"gray","gray_percent":120,"targets":{"gray":"h:1","stable":"h:2"}}`,
			[]string{"gray_percent: must be 0..100, got 120"}},
		{"percent decimals", `{"key":"a","type":"gray","gray_percent":12.345,"targets":{"gray":"h:1","stable":"h:2"}}`,
			[]string{"gray_percent: allows at most two decimals, got 12.345"}},
		{"bad whitelist", `{"key":"a","type":"gray","gray_percent":1,"white_list":["10001","ip:300.1.1.1","ip:10.0.0.0/33","uid:","ip:fe80::1%eth0"],"targets":{"gray":"h:1","stable":"h:2"}}`,
			[]string{"white_list[0]: must be", "white_list[1]: invalid IP address", "white_list[2]: invalid CIDR", "white_list[3]: must be", "white_list[4]: an IP address with a zone (%eth0) matches no client"}},
		{"bad targets", `{"key":"a","type":"gray","gray_percent":1,"targets":{"gray":"nowhere","stable":"http://h:1/path"}}`,
			[]string{"targets.gray: invalid address \"nowhere\"", "targets.stable: invalid URL"}},
		{"weights sum", `{"key":"a","type":"ab","experiment_id":"e","groups":[{"name":"A","weight":50,"target":"h:1"},{"name":"B","weight":40,"target":"h:2"}]}`,
			[]string{"groups: weights must sum to 100, got 90"}},
		{"negative weight", `{"key":"a","type":"ab","experiment_id":"e","groups":[{"name":"A","weight":-10,"target":"h:1"},{"name":"B","weight":110,"target":"h:2"}]}`,
			[]string{"groups[0].weight: must be 0..100, got -10", "groups[1].weight: must be 0..100, got 110"}},
		{"ab group problems", `{"key":"a","type":"ab","groups":[{"name":"A","weight":50,"target":"h:1","control":true},{"name":"A","weight":50,"target":"","control":true}]}`,
			[]string{"experiment_id: is required", "groups[1].name: duplicates groups[0].name", "groups[1].target: is required", "groups: at most one group"}},
		{"group named holdout", `{"key":"a","type":"ab","experiment_id":"e","groups":[{"name":"A","weight":50,"target":"h:1"},{"name":"holdout","weight":50,"target":"h:2"}]}`,
			[]string{`groups[1].name: "holdout" is reserved`}},
		{"mixed shapes", `{"key":"a","type":"ab","experiment_id":"e","gray_percent":5,"groups":[{"name":"A","weight":100,"target":"h:1"}]}`,
			[]string{"gray_percent: is only for gray rules"}},
		{"unknown route", `{"key":"a","type":"gray","route":"web","gray_percent":1,"targets":{"gray":"h:1","stable":"h:2"}}`,
			[]string{`route: no route named "web"`}},
		{"bad hash", `{"key":"a","type":"gray","hash":"md5","gray_percent":1,"targets":{"gray":"h:1","stable":"h:2"}}`,
			[]string{`hash: must be "xxh64", "crc32", "growthbook" or "unleash", got "md5"`}},
		{"group_id on xxh64", `{"key":"a","type":"gray","group_id":"g","gray_percent":1,"targets":{"gray":"h:1","stable":"h:2"}}`,
			[]string{`group_id: is only for "hash": "unleash"; this rule hashes with "xxh64"`}},
		{"group_id on growthbook", `{"key":"a","type":"ab","hash":"growthbook","group_id":"g","experiment_id":"e","groups":[{"name":"A","weight":100,"target":"h:1"}]}`,
			[]string{`group_id: is only for "hash": "unleash"; this rule hashes with "growthbook"`}},
		{"seed on unleash", `{"key":"a","type":"gray","hash":"unleash","seed":"s","gray_percent":1,"targets":{"gray":"h:1","stable":"h:2"}}`,
			[]string{`seed: is only for "hash": "growthbook"; this rule hashes with "unleash"`}},
		{"layer_range without layer", `{"key":"a","type":"ab","experiment_id":"e","layer_range":[0,5000],"layer_salt":"x","groups":[{"name":"A","weight":100,"target":"h:1"}]}`,
			[]string{`layer_range: needs "layer"`, `layer_salt: needs "layer"`}},
		{"layer without layer_range", `{"key":"a","type":"ab","experiment_id":"e","layer":"checkout","groups":[{"name":"A","weight":100,"target":"h:1"}]}`,
			[]string{`layer_range: is required with "layer"`}},
		{"layer_range above 10000", `{"key":"a","type":"ab","experiment_id":"e","layer":"checkout","layer_range":[5000,10001],"groups":[{"name":"A","weight":100,"target":"h:1"}]}`,
			[]string{"layer_range: must be within 0..10000, got [5000, 10001]"}},
		{"layer_range negative", `{"key":"a","type":"ab","experiment_id":"e","layer":"checkout","layer_range":[-1,10],"groups":[{"name":"A","weight":100,"target":"h:1"}]}`,
			[]string{"layer_range: must be within 0..10000, got [-1, 10]"}},
		{"layer_range empty", `{"key":"a","type":"ab","experiment_id":"e","layer":"checkout","layer_range":[5000,5000],"groups":[{"name":"A","weight":100,"target":"h:1"}]}`,
			[]string{"layer_range: must not be empty: start 5000 must be below end 5000"}},
		{"layer_range reversed", `{"key":"a","type":"ab","experiment_id":"e","layer":"checkout","layer_range":[6000,5000],"groups":[{"name":"A","weight":100,"target":"h:1"}]}`,
			[]string{"layer_range: must not be empty: start 6000 must be below end 5000"}},
		{"layer_range three numbers", `{"key":"a","type":"ab","experiment_id":"e","layer":"checkout","layer_range":[0,1,2],"groups":[{"name":"A","weight":100,"target":"h:1"}]}`,
			[]string{"layer_range: must be [start, end], got 3 numbers"}},
		{"layer_range fractional", `{"key":"a","type":"ab","experiment_id":"e","layer":"checkout","layer_range":[0,1.5],"groups":[{"name":"A","weight":100,"target":"h:1"}]}`,
			[]string{"layer_range[1]: expected an integer, got 1.5"}},
		{"bad layer name", `{"key":"a","type":"ab","experiment_id":"e","layer":"check out","layer_range":[0,10],"groups":[{"name":"A","weight":100,"target":"h:1"}]}`,
			[]string{"layer: must match"}},
		{"layer on a gray rule", `{"key":"a","type":"gray","layer":"checkout","layer_range":[0,10],"gray_percent":1,"targets":{"gray":"h:1","stable":"h:2"}}`,
			[]string{"layer: is only for ab rules", "layer_range: is only for ab rules"}},
		{"tags that would break a header", `{"key":"a","type":"gray","gray_percent":1,"targets":{"gray":"h:1","stable":"h:2"},"target_tags":{"gray":"a\r\nX-Evil: 1","stable":" v1"}}`,
			[]string{`target_tags.gray: must not contain control characters (it goes out in a header), got "a\r\nX-Evil: 1"`,
				`target_tags.stable: must not start or end with a space (it goes out in a header), got " v1"`}},
		{"group name and tag that would break a header", `{"key":"a","type":"ab","experiment_id":"e","groups":[{"name":"A\nX: 1","weight":50,"target":"h:1"},{"name":"B","tag":"t\u0000","weight":50,"target":"h:2"}]}`,
			[]string{`groups[0].name: must not contain control characters`, `groups[1].tag: must not contain control characters`}},
		{"bad conditions", `{"key":"a","type":"gray","gray_percent":1,"conditions":{"path_prefix":["api"],"ua_contains":[""]},"targets":{"gray":"h:1","stable":"h:2"}}`,
			[]string{`conditions.path_prefix[0]: must start with "/"`, "conditions.ua_contains[0]: must not be empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.js), testEnv())
			if err == nil {
				t.Fatalf("Parse(%s) succeeded, want errors %q", tt.js, tt.want)
			}
			for _, w := range missingProblems(err, tt.want) {
				t.Errorf("Parse(%s) errors = %q, want one starting %q", tt.js, err, w)
			}
		})
	}
}

// missingProblems returns the entries of want that no problem of err
// ("path: message") starts with.
func missingProblems(err error, want []string) []string {
	var missing []string
	for _, w := range want {
		found := false
		for _, f := range strict.Fields(err) {
			found = found || strings.HasPrefix(f.Path+": "+f.Message, w)
		}
		if !found {
			missing = append(missing, w)
		}
	}
	return missing
}

func TestWhitelistLimit(t *testing.T) {
	wl := make([]string, MaxWhitelist+1)
	for i := range wl {
		wl[i] = "uid:x"
	}
	r := Rule{Key: "a", Type: TypeGray, GrayPercent: new(float64), WhiteList: wl, Targets: &Targets{Gray: "h:1", Stable: "h:2"}}
	_, err := Compile(r, testEnv())
	if err == nil || !strings.Contains(err.Error(), "white_list: has 100001 entries; at most 100000") {
		t.Fatalf("Compile with %d entries: %v", len(wl), err)
	}
}

func facts(r attr.Request, uid string) *match.Facts {
	f := match.NewFacts(r, uid, nil)
	return &f
}

func req(path, ua string, ip string, headers ...string) *attr.Map {
	m := &attr.Map{MethodV: "GET", PathV: path, Headers: map[string]string{"User-Agent": ua}}
	for i := 0; i+1 < len(headers); i += 2 {
		m.Headers[headers[i]] = headers[i+1]
	}
	if ip != "" {
		m.IP = netip.MustParseAddr(ip)
	}
	return m
}

func TestGraySemantics(t *testing.T) {
	c := mustParse(t, `{"key":"gray_v2","type":"gray","gray_percent":0,
		"white_list":["uid:10001","ip:10.1.2.3","ip:192.168.0.0/16"],
		"conditions":{"ua_contains":["WeChat","Alipay"],"path_prefix":["/api/user/"],"header_exists":["X-Beta","X-Canary"]},
		"targets":{"gray":"127.0.0.1:2","stable":"127.0.0.1:1"}}`)
	in := func(m *attr.Map) *attr.Map { m.Headers["X-Canary"] = "1"; return m }
	tests := []struct {
		name       string
		r          *attr.Map
		uid        string
		rolledBack bool
		claimed    bool
		group      string
		degraded   string
	}{
		{"whitelisted uid", in(req("/api/user/1", "WeChat/8", "")), "10001", false, true, "gray", ""},
		{"whitelisted ip", in(req("/api/user/1", "Alipay", "10.1.2.3")), "u", false, true, "gray", ""},
		{"whitelisted cidr", in(req("/api/user/1", "Alipay", "192.168.7.7")), "u", false, true, "gray", ""},
		{"not whitelisted at 0%", in(req("/api/user/1", "Alipay", "10.1.2.4")), "u", false, false, "", ""},
		{"ua fails", in(req("/api/user/1", "curl", "")), "10001", false, false, "", ""},
		{"path fails", in(req("/api/order/1", "WeChat", "")), "10001", false, false, "", ""},
		{"header fails", req("/api/user/1", "WeChat", ""), "10001", false, false, "", ""},
		{"rollback sends whitelist to stable", in(req("/api/user/1", "WeChat", "")), "10001", true, true, "stable", "rollback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tr Trace
			out, ok := c.Eval(facts(tt.r, tt.uid), tt.rolledBack, nil, &tr)
			if ok != tt.claimed {
				t.Fatalf("Eval claimed = %v, want %v (trace %+v)", ok, tt.claimed, tr)
			}
			if ok && (out.Target.Group != tt.group || out.Degraded != tt.degraded) {
				t.Errorf("Eval = %s/%s, want %s/%s", out.Target.Group, out.Degraded, tt.group, tt.degraded)
			}
			if tr.Claimed != ok || tr.Reason == "" {
				t.Errorf("trace disagrees: %+v", tr)
			}
		})
	}
}

func TestABRollbackGoesToControl(t *testing.T) {
	c := mustParse(t, `{"key":"ab","type":"ab","experiment_id":"e","groups":[
		{"name":"A","weight":50,"target":"127.0.0.1:1"},{"name":"B","weight":50,"target":"127.0.0.1:2","control":true}]}`)
	for _, u := range []string{"1", "2", "3", "4", "5", "6"} {
		out, ok := c.Eval(facts(req("/", "", ""), u), true, nil, nil)
		if !ok || out.Target.Group != "B" || out.Degraded != "rollback" {
			t.Errorf("rolled back Eval(%s) = %+v, want control group B", u, out)
		}
	}
	d := mustParse(t, `{"key":"ab","type":"ab","experiment_id":"e","groups":[
		{"name":"A","weight":0,"target":"127.0.0.1:1"},{"name":"B","weight":100,"target":"127.0.0.1:2"}]}`)
	if out, _ := d.Eval(facts(req("/", "", ""), "x"), true, nil, nil); out.Target.Group != "A" {
		t.Errorf("without a control group rollback goes to the first group, got %s", out.Target.Group)
	}
}

// TestSeedPHPGolden checks every crc32-mode decision against the output of
// seed 000's own PHP functions (testdata/seed000_golden.php, run by PHP 8.2).
func TestSeedPHPGolden(t *testing.T) {
	data, err := os.ReadFile("testdata/seed000_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Users []string `json:"users"`
		Gray  []struct {
			Rule json.RawMessage `json:"rule"`
			Gray []bool          `json:"gray"`
		} `json:"gray"`
		AB []struct {
			Rule  json.RawMessage `json:"rule"`
			Group []string        `json:"group"`
		} `json:"ab"`
	}
	if err := json.Unmarshal(data, &golden); err != nil {
		t.Fatal(err)
	}
	r := req("/", "", "")
	n := 0
	for _, g := range golden.Gray {
		c, err := Parse(g.Rule, testEnv())
		if err != nil {
			t.Fatalf("Parse(%s): %v", g.Rule, err)
		}
		for i, u := range golden.Users {
			_, ok := c.Eval(facts(r, u), false, nil, nil)
			if ok != g.Gray[i] {
				t.Errorf("rule %s percent %v: user %q gray = %v, PHP says %v", c.Key, *c.Source.GrayPercent, u, ok, g.Gray[i])
			}
			n++
		}
	}
	for _, g := range golden.AB {
		c, err := Parse(g.Rule, testEnv())
		if err != nil {
			t.Fatalf("Parse(%s): %v", g.Rule, err)
		}
		for i, u := range golden.Users {
			out, _ := c.Eval(facts(r, u), false, nil, nil)
			if out.Target.Group != g.Group[i] {
				t.Errorf("rule %s: user %q group = %s, PHP says %s", c.Key, u, out.Target.Group, g.Group[i])
			}
			n++
		}
	}
	if n < 10000 {
		t.Fatalf("only %d golden decisions checked", n)
	}
}

func TestEvalDoesNotAllocate(t *testing.T) {
	c := mustParse(t, `{"key":"g","type":"gray","gray_percent":50,"white_list":["uid:a","ip:10.0.0.0/8"],
		"conditions":{"path_prefix":["/api/"]},"targets":{"gray":"127.0.0.1:2","stable":"127.0.0.1:1"}}`)
	r := req("/api/x", "ua", "10.9.9.9")
	f := facts(r, "user-1")
	allocs := testing.AllocsPerRun(100, func() { c.Eval(f, false, nil, nil) })
	if allocs != 0 {
		t.Errorf("Eval allocates %v times per call", allocs)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"key":"gray_v2","type":"gray","gray_percent":10,"white_list":["uid:1"],"targets":{"gray":"h:1","stable":"h:2"}}`))
	f.Add([]byte(`{"key":"ab","type":"ab","experiment_id":"e","groups":[{"name":"A","weight":100,"target":"h:1"}]}`))
	f.Add([]byte(`[1,2,{"a":null}]`))
	f.Add([]byte(`{"key":"x","conditions":{"path_prefix":"/a"}}`))
	f.Add([]byte(`{"key":"ab","type":"ab","experiment_id":"e","layer":"checkout","layer_range":[0,5000],"layer_salt":"s","groups":[{"name":"A","weight":50,"target":"h:1"},{"name":"B","weight":50,"target":"h:2"}]}`))
	f.Add([]byte(`{"key":"ab","type":"ab","experiment_id":"e","layer":"checkout","layer_range":[9999,10000,1],"groups":[{"name":"A","weight":100,"target":"h:1"}]}`))
	f.Add([]byte(`{"key":"ab","type":"ab","experiment_id":"e","layer_range":[-5,1e9],"groups":[{"name":"A","weight":100,"target":"h:1"}]}`))
	f.Add([]byte(`{"key":"ab","type":"ab","experiment_id":"e","layer":"l","layer_range":[],"groups":[{"name":"A","weight":100,"target":"h:1"}]}`))
	f.Add([]byte(`{"key":"g","type":"gray","hash":"growthbook","seed":"种子","gray_percent":12.34,"targets":{"gray":"h:1","stable":"h:2"}}`))
	f.Add([]byte(`{"key":"g","type":"gray","hash":"unleash","group_id":"AB12A","gray_percent":50,"targets":{"gray":"h:1","stable":"h:2"}}`))
	f.Add([]byte(`{"key":"ab","type":"ab","experiment_id":"e","sequential":true,"metrics":[{"name":"p","type":"binomial","match":{"method":"POST","status":"2xx"}},{"name":"r","type":"mean","from_header":"X-R"}],"groups":[{"name":"A","weight":100,"target":"h:1"}]}`))
	f.Add([]byte(`{"key":"ab","type":"ab","hash":"unleash","experiment_id":"e","groups":[{"name":"A","weight":0,"target":"h:1"},{"name":"B","weight":100,"target":"h:2"}]}`))
	f.Add([]byte(`{"key":"ab","type":"ab","hash":"unleash","experiment_id":"e","groups":[{"name":"A","weight":33.4,"target":"h:1"},{"name":"B","weight":33.3,"target":"h:2"},{"name":"C","weight":33.3,"target":"h:3"}]}`))
	f.Add([]byte(`{"key":"ab","type":"ab","hash":"crc32","experiment_id":"e","groups":[{"name":"A","weight":0.01,"target":"h:1"},{"name":"B","weight":99.99,"target":"h:2"}]}`))
	f.Add([]byte(`{"key":"ab","type":"ab","hash":"growthbook","experiment_id":"e","groups":[{"name":"A","weight":12.5,"target":"h:1"},{"name":"B","weight":87.5000000001,"target":"h:2"}]}`))
	f.Add([]byte(issueExample))
	f.Add([]byte(`{"key":"g","type":"gray","gray_percent":0,"targets":{"gray":"h:1","stable":"h:2"},"rollout":{"steps":[{"percent":5},{"pause":{}},{"pause":"1s"},{"analysis":"a"}],"analyses":{"a":{"interval":"1s","count":2,"checks":[{"metric":"p99_ms","max":5,"min_requests":3}]}},"abort_whitelist":true,"status":{"state":"aborted","step":1,"started_at":"2026-01-01T00:00:00Z","step_started_at":"2026-01-01T00:00:00Z","pause_left":"3s","failure":{"analysis":"a","check":"p99_ms","result":"failed","value":9}}}}`))
	f.Add([]byte(`{"key":"g","type":"gray","gray_percent":0,"targets":{"gray":"h:1","stable":"h:2"},"rollout":{"steps":[{"pause":{"x":1}},{"pause":7},{"percent":-1,"analysis":"z"}],"analyses":{"":{"interval":"-1s","checks":[{}]}},"status":{"state":"x","step":-4}}}`))
	f.Add([]byte(`{"key":"g","type":"gray","gray_percent":0,"targets":{"gray":"h:1","stable":"h:2"},"rollout":{"steps":[{"analysis":"w"}],"analyses":{"w":{"interval":"1s","checks":[{"webhook":{"url":"http://[::1]:0/x","timeout":"0s"}},{"prometheus":{"address":"https://","query":" ","min":2,"max":1}}]}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, testEnv())
		if err != nil {
			for _, fe := range strict.Fields(err) {
				if fe.Message == "" {
					t.Fatalf("empty message in %v", err)
				}
			}
			return
		}
		// A compiled rule must evaluate without panicking.
		c.Eval(facts(req("/api/user/1", "WeChat", "10.0.0.1"), "u1"), false, nil, &Trace{})
		c.Eval(facts(req("/", "", ""), ""), true, nil, nil)
		c.Eval(facts(req("/", "", ""), "用户😀"), false, NewHoldout(50, ""), &Trace{})
		_ = CheckLayers([]*Compiled{c, c})
		for _, m := range c.Metrics {
			if m.Match != nil {
				m.Match.Matches("POST", "/api/order", 201)
			}
			if m.Header >= len(c.ReportHeaders) {
				t.Fatalf("metric %q: header index %d of %d", m.Name, m.Header, len(c.ReportHeaders))
			}
		}
	})
}

// TestSeed004TagRuleVerbatim accepts seed 004's tag rule (section 3.1.3) as
// written, with only the key added.
func TestSeed004TagRuleVerbatim(t *testing.T) {
	c := mustParse(t, `{"key":"credit_v21",
"rules": [
{"tag": "multi_loan_index", "operator": "gt", "value": 0.7},
{"tag": "blacklist_flag", "operator": "eq", "value": false}
],
"target": "user-center"
}`)
	if c.Type != TypeTag || c.Gray.Pool.Name != "user-center" || c.Stable.Pool != nil {
		t.Fatalf("compiled = %+v", c)
	}
	src, err := tags.New(tags.Config{Header: "X-User-Tags"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		header string
		want   bool
	}{{"multi_loan_index=0.82;blacklist_flag=false", true}, {"multi_loan_index=0.5;blacklist_flag=false", false}, {"", false}} {
		r := req("/", "", "")
		r.Headers["X-User-Tags"] = tt.header
		r.Trusted = true
		f := match.NewFacts(r, "u1", &match.Sources{Tags: src})
		var tr Trace
		out, ok := c.Eval(&f, false, nil, &tr)
		if ok != tt.want || ok && out.Target.Group != "gray" {
			t.Errorf("tags %q: claimed %v (%+v), want %v; trace %+v", tt.header, ok, out, tt.want, tr)
		}
	}
}

// TestOneBadValueOnly: a value its type's decoder refuses does not stop
// the fields after it from being decoded: only that field is reported,
// not the key, type or targets that follow it in the JSON.
func TestOneBadValueOnly(t *testing.T) {
	for _, tt := range []struct{ js, path string }{
		{`{"breaker":{"window":"-1s"},"key":"a","type":"gray","gray_percent":1,"targets":{"gray":"h:1","stable":"h:2"}}`, "breaker.window"},
		{`{"mirror":{"percent":1,"max_body":"lots"},"key":"a","type":"gray","gray_percent":1,"targets":{"gray":"h:1","stable":"h:2"}}`, "mirror.max_body"},
		// A bad array element is dropped as null, which each custom
		// decoder must take as encoding/json's no-op.
		{`{"breaker":{"error_statuses":["abc"]},"key":"a","type":"gray","gray_percent":1,"targets":{"gray":"h:1","stable":"h:2"}}`, "breaker.error_statuses[0]"},
		{`{"breaker":{"grpc_error_codes":["NOPE"]},"key":"a","type":"gray","gray_percent":1,"targets":{"gray":"h:1","stable":"h:2"}}`, "breaker.grpc_error_codes[0]"},
		{`{"breaker":{"error_statuses":[500,"abc",503]},"key":"a","type":"gray","gray_percent":1,"targets":{"gray":"h:1","stable":"h:2"}}`, "breaker.error_statuses[1]"},
	} {
		_, err := Parse([]byte(tt.js), testEnv())
		fields := strict.Fields(err)
		if len(fields) != 1 || fields[0].Path != tt.path {
			t.Errorf("Parse(%s) = %v, want one problem at %s", tt.js, err, tt.path)
		}
	}
	// ...and does not hide the rule's other problems.
	js := `{"breaker":{"error_statuses":["abc"]},"key":"a","type":"gray","gray_percent":101,"targets":{"gray":"h:1","stable":"h:2"}}`
	_, err := Parse([]byte(js), testEnv())
	var paths []string
	for _, f := range strict.Fields(err) {
		paths = append(paths, f.Path)
	}
	if want := "breaker.error_statuses[0] gray_percent"; strings.Join(paths, " ") != want {
		t.Errorf("Parse(%s): problems at %v (%v), want %s", js, paths, err, want)
	}
}
