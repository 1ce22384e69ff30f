package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

func grayRule(p float64) refRule {
	return refRule{Type: "gray", GrayPercent: pct(p), Targets: &refTgts{Gray: "gray", Stable: "stable"}}
}

// TestCASWriters races two writers on one key with If-Match: exactly one
// wins each round, the loser gets 409, and no write is lost.
func TestCASWriters(t *testing.T) {
	e := start(t, baseConfig, "")
	out := e.mustPut("k", grayRule(1))
	version := int(out["version"].(float64))
	for round := 0; round < 30; round++ {
		var wg sync.WaitGroup
		codes := make([]int, 2)
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				codes[w], _ = e.api("PUT", "/api/v1/rules/k", grayRule(float64(round*2+w)), "If-Match", fmt.Sprint(version))
			}(w)
		}
		wg.Wait()
		wins := 0
		for _, c := range codes {
			switch c {
			case 200:
				wins++
			case 409:
			default:
				t.Fatalf("round %d: unexpected status %v", round, codes)
			}
		}
		if wins != 1 {
			t.Fatalf("round %d: %d winners (%v)", round, wins, codes)
		}
		version++
		_, got := e.api("GET", "/api/v1/rules/k", nil)
		if int(got["version"].(float64)) != version {
			t.Fatalf("round %d: version %v, want %d", round, got["version"], version)
		}
	}
	_, h := e.api("GET", "/api/v1/rules/k/history", nil)
	if n := len(h["history"].([]any)); n != 31 {
		t.Errorf("history has %d versions, want 31", n)
	}
}

func TestHistoryRevertAndDelete(t *testing.T) {
	e := start(t, baseConfig, "")
	e.mustPut("k", grayRule(5))
	code, _ := e.api("PUT", "/api/v1/rules/k", grayRule(50), "X-Change-Reason", "ramp up")
	if code != 200 {
		t.Fatal(code)
	}
	_, h := e.api("GET", "/api/v1/rules/k/history", nil)
	hist := h["history"].([]any)
	top := hist[0].(map[string]any)
	if top["version"].(float64) != 2 || top["reason"] != "ramp up" || top["by"] != "default" || top["op"] != "update" {
		t.Errorf("history[0] = %v", top)
	}
	diff := fmt.Sprint(top["diff"])
	if !strings.Contains(diff, "gray_percent") || !strings.Contains(diff, "changed") {
		t.Errorf("diff = %v", diff)
	}
	code, out := e.api("POST", "/api/v1/rules/k/revert", map[string]any{"version": 1})
	if code != 200 || out["version"].(float64) != 3 || out["gray_percent"].(float64) != 5 {
		t.Fatalf("revert = %d %v", code, out)
	}
	code, _ = e.api("POST", "/api/v1/rules/k/revert", map[string]any{"version": 99})
	if code != 404 {
		t.Errorf("revert to a missing version = %d", code)
	}
	code, _ = e.api("DELETE", "/api/v1/rules/k", nil)
	if code != 200 {
		t.Fatal(code)
	}
	if code, _ := e.api("GET", "/api/v1/rules/k", nil); code != 404 {
		t.Errorf("GET deleted = %d", code)
	}
	_, h = e.api("GET", "/api/v1/rules/k/history", nil)
	if n := len(h["history"].([]any)); n != 4 {
		t.Errorf("history after delete has %d entries, want 4", n)
	}
	a, _ := e.get("/", "X-User-Id", "1")
	if a.group != "default" {
		t.Errorf("deleted rule still serves: %+v", a)
	}
}

func TestDryRunAndLimits(t *testing.T) {
	e := start(t, baseConfig, "")
	code, out := e.api("PUT", "/api/v1/rules/k?dry_run=1", grayRule(100))
	if code != 200 || out["dry_run"] != true {
		t.Fatalf("dry run = %d %v", code, out)
	}
	if code, _ := e.api("GET", "/api/v1/rules/k", nil); code != 404 {
		t.Errorf("dry run stored the rule")
	}
	if a, _ := e.get("/", "X-User-Id", "1"); a.group != "default" {
		t.Errorf("dry run applied the rule: %+v", a)
	}
	// A dry_run that is not a boolean is refused, never taken for a write.
	for _, v := range []string{"yes", "on", ""} {
		code, out := e.api("PUT", "/api/v1/rules/k?dry_run="+v, grayRule(100))
		if code != 400 || !strings.Contains(fmt.Sprint(out["details"]), "dry_run") || !strings.Contains(fmt.Sprint(out["details"]), fmt.Sprintf("%q", v)) {
			t.Errorf("dry_run=%s: %d %v, want 400 naming dry_run and the value", v, code, out)
		}
	}
	if code, _ := e.api("GET", "/api/v1/rules/k", nil); code != 404 {
		t.Errorf("a refused dry_run stored the rule")
	}
	// A body whose key differs from the URL's gets that one problem, not
	// also "type: is required" for a type it has.
	code, out = e.api("PUT", "/api/v1/rules/k", `{"key":"other","type":"gray","gray_percent":100,"targets":{"gray":"gray","stable":"stable"}}`)
	if details, _ := out["details"].([]any); code != 400 || len(details) != 1 || !strings.Contains(fmt.Sprint(details), `does not match the key in the URL`) {
		t.Errorf("a key that differs from the URL's: %d %v, want 400 with that one problem", code, out)
	}
	// A tag that would break the X-Gray-Tag header is refused by path.
	code, out = e.api("PUT", "/api/v1/rules/k", `{"type":"gray","gray_percent":100,"targets":{"gray":"gray","stable":"stable"},"target_tags":{"gray":"a\r\nX-Evil: 1"}}`)
	if code != 400 || !strings.Contains(fmt.Sprint(out["details"]), "target_tags.gray") {
		t.Errorf("a tag with CR LF: %d %v, want 400 naming target_tags.gray", code, out)
	}
	if a, _ := e.get("/", "X-User-Id", "1"); a.group != "default" {
		t.Errorf("a refused rule is served: %+v", a)
	}
	big := `{"type":"gray","gray_percent":1,"targets":{"gray":"gray","stable":"stable"},"rule_name":"` + strings.Repeat("x", 1<<20) + `"}`
	if code, _ := e.api("PUT", "/api/v1/rules/k", big); code != 413 {
		t.Errorf("1 MiB body = %d, want 413", code)
	}
	var wl strings.Builder
	wl.WriteString(`{"type":"gray","gray_percent":1,"targets":{"gray":"gray","stable":"stable"},"white_list":[`)
	for i := 0; i <= 100000; i++ {
		if i > 0 {
			wl.WriteByte(',')
		}
		wl.WriteString(`"uid:1"`) // short entries, so the body stays under 1 MiB
	}
	wl.WriteString("]}")
	code, out = e.api("PUT", "/api/v1/rules/k", wl.String())
	if code != 400 || !strings.Contains(fmt.Sprint(out["details"]), "at most 100000") {
		t.Errorf("100001 whitelist entries = %d %v", code, out["details"])
	}
}

// TestRollbackUnderLoad watches X-Gray-Group on every response while the
// global rollback is switched on and off.
func TestRollbackUnderLoad(t *testing.T) {
	e := start(t, baseConfig, "")
	r := grayRule(100)
	r.WhiteList = []string{"uid:vip"}
	r.Conditions = &refCond{PathPrefix: []string{"/api/"}}
	e.mustPut("canary", r)
	e.mustPut("exp", refRule{Type: "ab", Experiment: "e", Conditions: &refCond{PathPrefix: []string{"/shop/"}},
		Groups: []refGrp{{Name: "A", Weight: 0, Target: "a"}, {Name: "B", Weight: 100, Target: "b"}}})
	check := func(rolled bool) {
		t.Helper()
		for i := 0; i < 50; i++ {
			a, err := e.get("/api/x", "X-User-Id", fmt.Sprint(i))
			if err != nil || a.status != 200 {
				t.Fatalf("request failed: %+v %v", a, err)
			}
			if rolled && (a.group != "stable" || a.degraded != "rollback" || a.backend != "stable") {
				t.Fatalf("during rollback user %d got %+v", i, a)
			}
			if !rolled && (a.group != "gray" || a.degraded != "" || a.backend != "gray") {
				t.Fatalf("after resume user %d got %+v", i, a)
			}
			a, _ = e.get("/shop/x", "X-User-Id", fmt.Sprint(i))
			if rolled && (a.group != "A" || a.degraded != "rollback") || !rolled && a.group != "B" {
				t.Fatalf("ab rule, rolled back %v: %+v", rolled, a)
			}
		}
	}
	check(false)
	if code, _ := e.api("POST", "/api/v1/rollback", nil); code != 200 {
		t.Fatal(code)
	}
	check(true)
	_, got := e.api("GET", "/api/v1/rules/canary", nil)
	if got["rolled_back"] != true || got["gray_percent"].(float64) != 100 {
		t.Errorf("rule during rollback = %v (it must be kept unchanged and marked)", got)
	}
	if code, _ := e.api("POST", "/api/v1/resume", nil); code != 200 {
		t.Fatal(code)
	}
	check(false)
	// Per rule.
	e.api("POST", "/api/v1/rules/canary/rollback", nil)
	if a, _ := e.get("/api/x", "X-User-Id", "vip"); a.group != "stable" || a.degraded != "rollback" {
		t.Errorf("per-rule rollback: %+v", a)
	}
	if a, _ := e.get("/shop/x", "X-User-Id", "1"); a.group != "B" {
		t.Errorf("per-rule rollback touched another rule: %+v", a)
	}
	e.api("POST", "/api/v1/rules/canary/resume", nil)
	if a, _ := e.get("/api/x", "X-User-Id", "vip"); a.group != "gray" {
		t.Errorf("per-rule resume: %+v", a)
	}
}

// TestRollbackIfMatch: a rule's rollback and resume take If-Match as PUT
// does: a stale version is 409 and changes nothing, the current one
// applies; the global flag, which has no version, refuses one with 400.
func TestRollbackIfMatch(t *testing.T) {
	e := start(t, baseConfig, t.TempDir())
	e.mustPut("canary", grayRule(100))
	e.mustPut("canary", grayRule(50))
	_, r := e.api("GET", "/api/v1/rules/canary", nil)
	v, _ := r["version"].(float64)
	if code, out := e.api("POST", "/api/v1/rules/canary/rollback", nil, "If-Match", fmt.Sprint(v-1)); code != 409 {
		t.Errorf("rollback with a stale If-Match: %d %v, want 409", code, out)
	}
	if _, r = e.api("GET", "/api/v1/rules/canary", nil); r["rolled_back"] != false || r["version"] != v {
		t.Errorf("a refused rollback changed the rule: %v", r)
	}
	if code, out := e.api("POST", "/api/v1/rules/canary/rollback", nil, "If-Match", fmt.Sprintf("%q", fmt.Sprint(v))); code != 200 || out["rolled_back"] != true {
		t.Errorf("rollback with the current If-Match: %d %v", code, out)
	}
	if a, _ := e.get("/api/x", "X-User-Id", "vip"); a.degraded != "rollback" {
		t.Errorf("after the conditional rollback: %+v", a)
	}
	if code, out := e.api("POST", "/api/v1/rules/canary/resume", nil, "If-Match", fmt.Sprint(v)); code != 409 {
		t.Errorf("resume with the version before the rollback: %d %v, want 409", code, out)
	}
	if code, out := e.api("POST", "/api/v1/rollback", nil, "If-Match", "3"); code != 400 || !strings.Contains(fmt.Sprint(out), "global rollback flag has no version") {
		t.Errorf("global rollback with If-Match: %d %v, want 400", code, out)
	}
	if code, _ := e.api("POST", "/api/v1/rollback", nil, "If-Match", "*"); code != 200 {
		t.Errorf("global rollback with If-Match: * = %d", code)
	}
}

// TestRollbackSurvivesRestart checks that the rollback state and the rules
// are persisted in the data dir.
func TestRollbackSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	e := start(t, baseConfig, dir)
	e.mustPut("canary", grayRule(100))
	e.api("POST", "/api/v1/rollback", nil)
	cfg := e.gw.cfg
	e.shutdown()
	e.restart(cfg)
	a, err := e.get("/", "X-User-Id", "1")
	if err != nil || a.group != "stable" || a.degraded != "rollback" {
		t.Errorf("after restart: %+v %v", a, err)
	}
	_, st := e.api("GET", "/api/v1/status", nil)
	store, _ := st["store"].(map[string]any)
	if st["rolled_back"] != true || st["rules"].(float64) != 1 || store["kind"] != "file" || store["state"] != "ok" || store["revision"] != st["revision"] {
		t.Errorf("status = %v", st)
	}
}

// TestExplainMatchesLive compares explain answers with live decisions.
func TestExplainMatchesLive(t *testing.T) {
	e := start(t, baseConfig, "")
	e.mustPut("canary", refRule{Type: "gray", GrayPercent: pct(30), WhiteList: []string{"uid:vip"},
		Conditions: &refCond{PathPrefix: []string{"/api/"}}, Targets: &refTgts{Gray: "gray", Stable: "stable"}})
	e.mustPut("exp", refRule{Type: "ab", Experiment: "e", Groups: []refGrp{{Name: "A", Weight: 50, Target: "a"}, {Name: "B", Weight: 50, Target: "b"}}})
	for i := 0; i < 60; i++ {
		uid := fmt.Sprint(i)
		path := []string{"/api/x", "/web"}[i%2]
		live, _ := e.get(path, "X-User-Id", uid)
		code, ex := e.api("POST", "/api/v1/explain", map[string]any{"method": "GET", "path": path, "headers": map[string]string{"X-User-Id": uid}, "remote_addr": "127.0.0.1"})
		if code != 200 {
			t.Fatalf("explain = %d %v", code, ex)
		}
		d := ex["decision"].(map[string]any)
		if d["group"] != live.group || d["rule"] != live.rule || d["target"] != live.backend {
			t.Errorf("user %s %s: explain %v, live %+v", uid, path, d, live)
		}
		tr := ex["trace"].(map[string]any)
		rules := tr["rules"].([]any)
		first := rules[0].(map[string]any)
		if path == "/api/x" && first["whitelist_hit"] == nil && first["bucket"] == nil {
			t.Errorf("trace lacks the bucket: %v", first)
		}
		// Like live traffic, explain does not evaluate a rule the path
		// index rules out; the trace names it instead.
		if skipped := fmt.Sprint(tr["skipped_by_index"]); path == "/web" && (first["key"] != "exp" || skipped != "[canary]") {
			t.Errorf("/web: trace evaluated %v first and skipped %s; want exp evaluated and canary skipped by the index", first["key"], skipped)
		}
	}
}

// TestWrongMethod: a method an endpoint does not serve gets 405 with the
// methods it does in Allow (RFC 9110 section 15.5.6); a path that is no
// endpoint gets 404.
func TestWrongMethod(t *testing.T) {
	e := start(t, baseConfig, "")
	for _, tt := range []struct{ method, path, allow string }{
		{"POST", "/api/v1/rules/k", "GET, PUT, DELETE, HEAD"},
		{"DELETE", "/api/v1/rules", "GET, HEAD"},
		{"GET", "/api/v1/rollback", "POST"},
		{"GET", "/api/v1/explain", "POST"},
	} {
		req, _ := http.NewRequest(tt.method, e.admin+tt.path, strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != tt.allow {
			t.Errorf("%s %s: %d Allow %q, want 405 Allow %q", tt.method, tt.path, resp.StatusCode, resp.Header.Get("Allow"), tt.allow)
		}
	}
	if code, _ := e.api("GET", "/api/v1/nothing", nil); code != 404 {
		t.Errorf("GET /api/v1/nothing = %d, want 404", code)
	}
}

// TestPutIfMatch: a PUT's If-Match is a precondition on the rule's current
// version for a dry run too, which answers what the write would; and
// If-Match: * holds only for a rule that exists (RFC 9110 section
// 13.1.1), so it never creates one.
func TestPutIfMatch(t *testing.T) {
	e := start(t, baseConfig, t.TempDir())
	if code, out := e.api("PUT", "/api/v1/rules/k", grayRule(10), "If-Match", "*"); code != 409 || !strings.Contains(fmt.Sprint(out), "does not exist") {
		t.Errorf("If-Match: * on a rule that does not exist: %d %v, want 409", code, out)
	}
	if code, _ := e.api("GET", "/api/v1/rules/k", nil); code != 404 {
		t.Errorf("If-Match: * created the rule")
	}
	e.mustPut("k", grayRule(10))
	e.mustPut("k", grayRule(20)) // version 2
	for _, tt := range []struct {
		path, ifMatch string
		code          int
	}{
		{"/api/v1/rules/k?dry_run=1", "1", 409},
		{"/api/v1/rules/k?dry_run=1", "0", 409},
		{"/api/v1/rules/k?dry_run=1", "2", 200},
		{"/api/v1/rules/k?dry_run=1", "*", 200},
		{"/api/v1/rules/new?dry_run=1", "1", 409},
		{"/api/v1/rules/new?dry_run=1", "0", 200},
		{"/api/v1/rules/k", "1", 409},
		{"/api/v1/rules/k", "*", 200}, // version 3
	} {
		if code, out := e.api("PUT", tt.path, grayRule(30), "If-Match", tt.ifMatch); code != tt.code {
			t.Errorf("PUT %s with If-Match %s: %d %v, want %d", tt.path, tt.ifMatch, code, out, tt.code)
		}
	}
	if _, r := e.api("GET", "/api/v1/rules/k", nil); r["version"] != float64(3) || r["gray_percent"] != float64(30) {
		t.Errorf("after the PUTs: version %v, gray_percent %v; want 3 and 30", r["version"], r["gray_percent"])
	}
}
