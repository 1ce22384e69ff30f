package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/store"
)

// layersConfig runs two checkout experiments in one layer (on different
// paths, so a user could be in both if the layer did not exclude it), a
// search experiment in another layer in GrowthBook mode, and a 10% holdout.
const layersConfig = baseConfig + `
admin:
  tokens: [{name: dash, token: view-token, role: viewer}]
experiments:
  holdout: {percent: 10, salt: ho}
rules:
  - {key: cart_exp, type: ab, experiment_id: cart_2026, layer: checkout, layer_range: [0, 3000],
     conditions: {path_prefix: [/cart/]},
     groups: [{name: A, weight: 50, target: a, control: true}, {name: B, weight: 50, target: b}]}
  - {key: pay_exp, type: ab, experiment_id: pay_2026, layer: checkout, layer_range: [5000, 8000],
     conditions: {path_prefix: [/pay/]},
     groups: [{name: C, weight: 50, target: gray, control: true}, {name: D, weight: 50, target: b}]}
  - {key: search_exp, type: ab, hash: growthbook, experiment_id: search_2026, layer: search, layer_range: [0, 10000],
     conditions: {path_prefix: [/search/]},
     groups: [{name: S1, weight: 50, target: a, control: true}, {name: S2, weight: 50, target: b}]}
`

func bucketOf(salt, uid string) uint64 { return xxhash.Sum64String(salt+":"+uid) % 10000 }

// expectLayered is the test's own model of a layered xxh64 experiment with
// the 10% holdout: ("", "default", "stable") outside the range, the control
// backend as group "holdout" for held-out users, else the walked group.
func expectLayered(uid, key, exp string, start, end uint64, groups [2]string, backends [2]string) (string, string, string) {
	if s := bucketOf("checkout", uid); s < start || s >= end {
		return "", "default", "stable"
	}
	if bucketOf("ho", uid) < 1000 {
		return key, "holdout", backends[0]
	}
	if bucketOf(exp, uid) < 5000 {
		return key, groups[0], backends[0]
	}
	return key, groups[1], backends[1]
}

// TestLayersAndHoldoutThroughTheListener drives the data plane with many
// users and reads the decision headers: no user is in both checkout
// experiments, held-out users get X-Gray-Group: holdout and the control
// target's answer in every experiment, and GET /api/v1/layers reports the
// ranges and free slots. An overlapping rule is refused with a 400 naming
// layer_range and the other rule, and the rules that serve keep serving.
func TestLayersAndHoldoutThroughTheListener(t *testing.T) {
	e := start(t, layersConfig, "")
	const users = 300
	inCart, inPay, held, both := 0, 0, 0, 0
	cartAnswer := map[string]answer{}
	for u := 0; u < users; u++ {
		uid := "user-" + strconv.Itoa(u)
		cart, err := e.get("/cart/items", "X-User-Id", uid)
		if err != nil {
			t.Fatal(err)
		}
		pay, err := e.get("/pay/now", "X-User-Id", uid)
		if err != nil {
			t.Fatal(err)
		}
		search, err := e.get("/search/q", "X-User-Id", uid)
		if err != nil {
			t.Fatal(err)
		}
		cartAnswer[uid] = cart
		for _, c := range []struct {
			got                   answer
			key, exp              string
			start, end            uint64
			groups, backends, tag [2]string
		}{
			{cart, "cart_exp", "cart_2026", 0, 3000, [2]string{"A", "B"}, [2]string{"a", "b"}, [2]string{"A", "B"}},
			{pay, "pay_exp", "pay_2026", 5000, 8000, [2]string{"C", "D"}, [2]string{"gray", "b"}, [2]string{"C", "D"}},
		} {
			rule, group, backend := expectLayered(uid, c.key, c.exp, c.start, c.end, c.groups, c.backends)
			if c.got.status != 200 || c.got.rule != rule || c.got.group != group || c.got.backend != backend {
				t.Fatalf("user %s on %s: rule %q group %q backend %q, want %q %q %q", uid, c.key, c.got.rule, c.got.group, c.got.backend, rule, group, backend)
			}
			if group == "holdout" && c.got.tag != c.tag[0] {
				t.Errorf("held-out user %s on %s was colored %q, want the control tag %q", uid, c.key, c.got.tag, c.tag[0])
			}
		}
		if cart.rule != "" {
			inCart++
		}
		if pay.rule != "" {
			inPay++
		}
		if cart.rule != "" && pay.rule != "" {
			both++
		}
		isHeld := bucketOf("ho", uid) < 1000
		if isHeld {
			held++
		}
		if search.rule != "search_exp" || (search.group == "holdout") != isHeld {
			t.Fatalf("user %s on search: %+v (held out: %v)", uid, search, isHeld)
		}
		if want := map[string]string{"holdout": "a", "S1": "a", "S2": "b"}[search.group]; search.backend != want {
			t.Fatalf("user %s on search: group %q served by %q", uid, search.group, search.backend)
		}
	}
	if both != 0 {
		t.Errorf("%d users are in both experiments of layer checkout", both)
	}
	if inCart < 60 || inPay < 60 || held < 15 || held > 50 {
		t.Errorf("of %d users %d are in cart_exp, %d in pay_exp, %d held out", users, inCart, inPay, held)
	}

	wantLayers := []any{
		map[string]any{"name": "checkout", "layer_salt": "checkout", "slots": 10000.0,
			"rules": []any{
				map[string]any{"key": "cart_exp", "experiment_id": "cart_2026", "layer_range": []any{0.0, 3000.0}, "slots": 3000.0},
				map[string]any{"key": "pay_exp", "experiment_id": "pay_2026", "layer_range": []any{5000.0, 8000.0}, "slots": 3000.0},
			},
			"free": []any{[]any{3000.0, 5000.0}, []any{8000.0, 10000.0}}, "free_slots": 4000.0},
		map[string]any{"name": "search", "layer_salt": "search", "slots": 10000.0,
			"rules": []any{map[string]any{"key": "search_exp", "experiment_id": "search_2026", "layer_range": []any{0.0, 10000.0}, "slots": 10000.0}},
			"free":  []any{}, "free_slots": 0.0},
	}
	code, got := viewerGet(t, e, "/api/v1/layers")
	if code != 200 || !reflect.DeepEqual(got["layers"], wantLayers) || fmt.Sprint(got["holdout"]) != "map[percent:10 salt:ho]" {
		t.Fatalf("GET /api/v1/layers (viewer) = %d %v", code, got)
	}

	// An overlapping experiment is refused, by dry run and for real.
	overlap := `{"type":"ab","experiment_id":"x","layer":"checkout","layer_range":[2500,4000],
		"groups":[{"name":"X","weight":100,"target":"b"}]}`
	for _, path := range []string{"/api/v1/rules/new_exp?dry_run=1", "/api/v1/rules/new_exp"} {
		code, out := e.api("PUT", path, overlap)
		details := fmt.Sprint(out["details"])
		if code != 400 || !strings.Contains(details, "path:layer_range") || !strings.Contains(details, `rule "cart_exp"`) {
			t.Fatalf("PUT %s with an overlapping range = %d %v", path, code, out)
		}
	}
	if code, _ := e.api("GET", "/api/v1/rules/new_exp", nil); code != 404 {
		t.Errorf("the refused rule was stored: %d", code)
	}
	if _, now := viewerGet(t, e, "/api/v1/layers"); !reflect.DeepEqual(now["layers"], wantLayers) {
		t.Errorf("layers changed after a refused PUT: %v", now["layers"])
	}
	// One that takes free slots is accepted, and moves no running user.
	e.mustPut("new_exp", strings.Replace(overlap, "[2500,4000]", "[3000,5000]", 1))
	_, now := viewerGet(t, e, "/api/v1/layers")
	if l := now["layers"].([]any)[0].(map[string]any); fmt.Sprint(l["free"]) != "[[8000 10000]]" || l["free_slots"] != 2000.0 {
		t.Errorf("checkout after adding new_exp: %v", l)
	}
	for u := 0; u < users; u += 3 {
		uid := "user-" + strconv.Itoa(u)
		a, err := e.get("/cart/items", "X-User-Id", uid)
		if err != nil {
			t.Fatal(err)
		}
		before := cartAnswer[uid]
		if before.rule == "cart_exp" && (a.rule != before.rule || a.group != before.group || a.backend != before.backend) {
			t.Fatalf("adding new_exp moved user %s from %+v to %+v", uid, before, a)
		}
		if a.rule == "new_exp" && bucketOf("checkout", uid) < 3000 {
			t.Fatalf("new_exp claimed user %s of cart_exp's slots", uid)
		}
	}

	// Explain shows the layer, the salt, the slot and the range, and says "held out".
	heldUID, inUID := "", ""
	for u := 0; heldUID == "" || inUID == ""; u++ {
		uid := "user-" + strconv.Itoa(u)
		if bucketOf("checkout", uid) < 3000 && bucketOf("ho", uid) < 1000 && heldUID == "" {
			heldUID = uid
		}
		if bucketOf("checkout", uid) < 3000 && bucketOf("ho", uid) >= 1000 && inUID == "" {
			inUID = uid
		}
	}
	for _, uid := range []string{heldUID, inUID} {
		code, out := e.api("POST", "/api/v1/explain", map[string]any{"path": "/cart/x", "headers": map[string]string{"X-User-Id": uid}})
		if code != 200 {
			t.Fatalf("explain = %d %v", code, out)
		}
		var tr struct {
			Decision struct {
				Group string `json:"group"`
			} `json:"decision"`
			Trace struct {
				Reason string           `json:"reason"`
				Rules  []explainedLayer `json:"rules"`
			} `json:"trace"`
		}
		raw, _ := json.Marshal(out)
		if err := json.Unmarshal(raw, &tr); err != nil {
			t.Fatal(err)
		}
		var cart *explainedLayer
		for i := range tr.Trace.Rules {
			if tr.Trace.Rules[i].Key == "cart_exp" {
				cart = &tr.Trace.Rules[i]
			}
		}
		if cart == nil || cart.Layer != "checkout" || cart.LayerSalt != "checkout" || cart.Slot == nil || *cart.Slot != bucketOf("checkout", uid) || fmt.Sprint(cart.LayerRange) != "[0 3000]" {
			t.Fatalf("explain of %s: %s", uid, raw)
		}
		if held := uid == heldUID; cart.HeldOut != held || strings.Contains(cart.Reason, "held out") != held ||
			strings.Contains(tr.Trace.Reason, "held out") != held || (tr.Decision.Group == "holdout") != held {
			t.Errorf("explain of %s (held out %v): %s", uid, held, raw)
		}
	}
}

// explainedLayer is the part of a rule's explain trace about layers.
type explainedLayer struct {
	Key        string  `json:"key"`
	Layer      string  `json:"layer"`
	LayerSalt  string  `json:"layer_salt"`
	Slot       *uint64 `json:"slot"`
	LayerRange []int   `json:"layer_range"`
	HeldOut    bool    `json:"held_out"`
	Reason     string  `json:"reason"`
}

func viewerGet(t *testing.T, e *env, path string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("GET", e.admin+path, nil)
	req.Header.Set("Authorization", "Bearer view-token")
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, raw)
	}
	return resp.StatusCode, out
}

// TestLayerValidationThroughTheAPI: each bad layer or hash field gets a 400
// that names it, and nothing is stored.
func TestLayerValidationThroughTheAPI(t *testing.T) {
	e := start(t, baseConfig, "")
	groups := `"groups":[{"name":"A","weight":100,"target":"a"}]`
	tests := []struct{ name, body, path, message string }{
		{"range above the slots", `{"type":"ab","experiment_id":"e","layer":"l","layer_range":[0,10001],` + groups + `}`, "layer_range", "must be within 0..10000, got [0, 10001]"},
		{"empty range", `{"type":"ab","experiment_id":"e","layer":"l","layer_range":[7,7],` + groups + `}`, "layer_range", "must not be empty"},
		{"range without layer", `{"type":"ab","experiment_id":"e","layer_range":[0,10],` + groups + `}`, "layer_range", `needs "layer"`},
		{"unknown hash", `{"type":"ab","hash":"murmur","experiment_id":"e",` + groups + `}`, "hash", `must be "xxh64", "crc32", "growthbook" or "unleash", got "murmur"`},
		{"group_id without unleash", `{"type":"ab","hash":"growthbook","group_id":"g","experiment_id":"e",` + groups + `}`, "group_id", `is only for "hash": "unleash"`},
		{"weight finer than unleash stores", `{"type":"ab","hash":"unleash","experiment_id":"e","groups":[{"name":"A","weight":33.35,"target":"a"},{"name":"B","weight":66.65,"target":"a"}]}`,
			"groups[0].weight", `allows one decimal with "hash": "unleash" (Unleash stores a variant's weight in tenths of a percent), got 33.35`},
		{"weight with three decimals", `{"type":"ab","experiment_id":"e","groups":[{"name":"A","weight":12.345,"target":"a"},{"name":"B","weight":87.655,"target":"a"}]}`,
			"groups[1].weight", "allows at most two decimals, got 87.655"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := e.api("PUT", "/api/v1/rules/bad", tt.body)
			if code != 400 {
				t.Fatalf("PUT = %d %v, want 400", code, out)
			}
			found := false
			details, _ := out["details"].([]any)
			for _, d := range details {
				m := d.(map[string]any)
				found = found || m["path"] == tt.path && strings.Contains(m["message"].(string), tt.message)
			}
			if !found {
				t.Errorf("details = %v, want %s: %s", details, tt.path, tt.message)
			}
		})
	}
	if code, _ := e.api("GET", "/api/v1/rules/bad", nil); code != 404 {
		t.Errorf("a refused rule was stored: %d", code)
	}
}

// TestStoredLayerOverlap: if the store somehow holds overlapping rules
// (written around the API), the rule stored later is disabled and reported
// and the one stored first keeps serving, live and after a restart alike,
// and writes to other rules go on: one bad pair must not stop every write
// (in a fleet, on every gateway).
func TestStoredLayerOverlap(t *testing.T) {
	dir := t.TempDir()
	e := start(t, baseConfig, dir)
	e.mustPut("first", `{"type":"ab","experiment_id":"e1","layer":"l","layer_range":[0,6000],"groups":[{"name":"A","weight":100,"target":"a"}]}`)
	served, _ := e.get("/", "X-User-Id", "u1")
	ctx := context.Background()
	raw := []byte(`{"key":"second","type":"ab","experiment_id":"e2","priority":1,"layer":"l","layer_range":[5000,10000],"groups":[{"name":"B","weight":100,"target":"b"}]}`)
	if _, err := e.gw.store.Put(ctx, "second", raw, 0, store.Meta{By: "test"}); err != nil {
		t.Fatal(err)
	}
	if err := e.gw.Apply(ctx); err != nil {
		t.Fatalf("Apply = %v, want the overlapping rule disabled", err)
	}
	check := func(when string) {
		t.Helper()
		for u := 0; u < 50; u++ {
			uid := "u" + strconv.Itoa(u)
			a, err := e.get("/", "X-User-Id", uid)
			if err != nil || a.rule == "second" {
				t.Fatalf("%s: user %s: %+v %v", when, uid, a, err)
			}
		}
		if a, _ := e.get("/", "X-User-Id", "u1"); a.rule != served.rule || a.backend != served.backend {
			t.Errorf("%s: u1 = %+v, before %+v", when, a, served)
		}
		_, st := e.api("GET", "/api/v1/status", nil)
		broken, _ := st["broken_rules"].(map[string]any)
		if msg, _ := broken["second"].(string); !strings.Contains(msg, "layer_range") || !strings.Contains(msg, `"first"`) || len(broken) != 1 {
			t.Errorf("%s: status = %v, want only rule second broken, naming layer_range and rule first", when, st)
		}
	}
	check("live")
	// Writes to other rules go on, and serve.
	e.mustPut("other", `{"type":"gray","gray_percent":100,"targets":{"gray":"gray","stable":"stable"},"conditions":{"path_prefix":["/other/"]}}`)
	if a, _ := e.get("/other/x", "X-User-Id", "u1"); a.rule != "other" || a.backend != "gray" {
		t.Errorf("after a PUT of an unrelated rule: %+v", a)
	}
	// The disabled rule stays refused, and so does a new overlap.
	if code, out := e.api("PUT", "/api/v1/rules/third", `{"type":"ab","experiment_id":"e3","layer":"l","layer_range":[5500,7000],"groups":[{"name":"B","weight":100,"target":"b"}]}`); code != 400 || !strings.Contains(fmt.Sprint(out), "layer_range") {
		t.Errorf("PUT of another overlapping rule = %d %v, want 400 naming layer_range", code, out)
	}
	check("after the writes")
	cfg := e.gw.cfg
	e.shutdown()
	e.restart(cfg)
	check("after restart")
}

// TestHoldoutReload changes experiments.holdout by reloading the config:
// the new holdout serves from the next request, gray rules untouched.
func TestHoldoutReload(t *testing.T) {
	e := start(t, baseConfig, "")
	e.mustPut("canary", grayRule(100))
	// The canary claims every path; the experiment goes first on /shop/.
	e.mustPut("exp", `{"type":"ab","priority":1,"experiment_id":"e","conditions":{"path_prefix":["/shop/"]},
		"groups":[{"name":"A","weight":0,"target":"a","control":true},{"name":"B","weight":100,"target":"b"}]}`)
	withHoldout := func(percent string) *config.Config {
		y := baseConfig
		if percent != "" {
			y += "experiments: {holdout: {percent: " + percent + "}}\n"
		}
		for name, addr := range e.backends {
			y = strings.ReplaceAll(y, "{{"+name+"}}", addr)
		}
		c, err := config.Parse([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		c.DataDir = e.gw.cfg.DataDir
		return c
	}
	check := func(group, backend string) {
		t.Helper()
		for u := 0; u < 20; u++ {
			uid := strconv.Itoa(u)
			if a, err := e.get("/shop/x", "X-User-Id", uid); err != nil || a.rule != "exp" || a.group != group || a.backend != backend {
				t.Fatalf("user %s on /shop/: %+v %v, want group %s on %s", uid, a, err, group, backend)
			}
			if a, err := e.get("/api/x", "X-User-Id", uid); err != nil || a.rule != "canary" || a.group != "gray" {
				t.Fatalf("user %s on the gray rule: %+v %v", uid, a, err)
			}
		}
	}
	check("B", "b")
	if err := e.gw.ReloadConfig(context.Background(), withHoldout("100")); err != nil {
		t.Fatal(err)
	}
	check("holdout", "a")
	if code, got := e.api("GET", "/api/v1/layers", nil); code != 200 || fmt.Sprint(got["holdout"]) != "map[percent:100 salt:holdout]" {
		t.Errorf("GET /api/v1/layers = %d %v", code, got)
	}
	if err := e.gw.ReloadConfig(context.Background(), withHoldout("")); err != nil {
		t.Fatal(err)
	}
	check("B", "b")
}

// TestConfigRulesMustNotOverlap: config rules that overlap in a layer are a
// config error naming layer_range and the other rule.
func TestConfigRulesMustNotOverlap(t *testing.T) {
	y := baseConfig + `
rules:
  - {key: one, type: ab, experiment_id: e1, layer: l, layer_range: [0, 6000], groups: [{name: A, weight: 100, target: a}]}
  - {key: two, type: ab, experiment_id: e2, layer: l, layer_range: [5000, 10000], groups: [{name: B, weight: 100, target: b}]}
`
	y = strings.NewReplacer("{{stable}}", "127.0.0.1:1", "{{gray}}", "127.0.0.1:2", "{{a}}", "127.0.0.1:3", "{{b}}", "127.0.0.1:4").Replace(y)
	cfg, err := config.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	g, err := New(Options{Config: cfg})
	if err == nil {
		t.Fatalf("New accepted overlapping config rules: %+v", g.Status())
	}
	if msg := err.Error(); !strings.Contains(msg, "config rules[1]: layer_range: [5000, 10000] overlaps [0, 6000] of rule \"one\"") {
		t.Errorf("New = %v", err)
	}
}

// TestSeedRefusals: the config file's rules are refused at start, as on a
// reload, when they would overlap a stored rule in a layer (at start
// nothing serves yet, and the check is against what the store holds) or
// repeat a key; nothing of theirs is written to the store.
func TestSeedRefusals(t *testing.T) {
	dir := t.TempDir()
	e := start(t, baseConfig, dir)
	e.mustPut("cb", `{"type":"ab","experiment_id":"e1","layer":"l","layer_range":[0,5000],"groups":[{"name":"A","weight":100,"target":"a"}]}`)
	cfg := e.gw.cfg
	e.shutdown()
	withRules := func(rules string) *config.Config {
		y := baseConfig + "rules:\n" + rules
		for name, addr := range e.backends {
			y = strings.ReplaceAll(y, "{{"+name+"}}", addr)
		}
		c, err := config.Parse([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		c.DataDir = dir
		return c
	}
	for _, tt := range []struct{ name, rules, want string }{
		{"overlap with a stored rule", "  - {key: cc, type: ab, experiment_id: e2, layer: l, layer_range: [4000, 6000], groups: [{name: B, weight: 100, target: b}]}\n",
			`layer_range`},
		{"a repeated key", "  - {key: n1, type: gray, gray_percent: 0, targets: {gray: gray, stable: stable}}\n" +
			"  - {key: n1, type: gray, gray_percent: 100, targets: {gray: gray, stable: stable}}\n",
			`rules[1].key: duplicates rules[0].key "n1"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Options{Config: withRules(tt.rules), AdminToken: token, Logger: slog.New(slog.DiscardHandler)})
			if err == nil {
				t.Fatalf("New accepted the rules; want an error with %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want %q", err, tt.want)
			}
		})
	}
	e.restart(cfg)
	for _, key := range []string{"cc", "n1"} {
		if code, _ := e.api("GET", "/api/v1/rules/"+key, nil); code != 404 {
			t.Errorf("refused seed rule %q was stored: GET = %d", key, code)
		}
	}
	_, st := e.api("GET", "/api/v1/status", nil)
	if broken, _ := st["broken_rules"].(map[string]any); len(broken) != 0 {
		t.Errorf("broken rules after the refused seeds: %v", broken)
	}
}
