package console_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp/kb"
)

// TestBrowserLoginAndOverview logs in (after a refused token), sees the
// demo rules with their splits, and sees live traffic appear per group.
func TestBrowserLoginAndOverview(t *testing.T) {
	b := newTab(t)
	e := startGateway(t, nil)

	b.open(e.admin + "/ui/")
	b.waitFor("the login form", `document.querySelector('#token')`)
	if typ := eval[string](b, `document.querySelector('#token').type`); typ != "password" {
		t.Errorf("the token field is an <input type=%q>, want password", typ)
	}
	b.typeInto("#token", "not-the-token")
	b.click("#login-submit")
	b.waitText("#login-error", "refused")
	b.typeInto("#token", adminToken)
	b.click("#login-submit")
	b.waitFor("the overview", `document.querySelector('#overview tr[data-rule]')`)
	b.waitText("#whoami", "default · admin")

	b.waitText(`tr[data-rule="user_center_v2"] .split`, "30% gray + 1 whitelisted")
	b.waitText(`tr[data-rule="user_center_v2"] .rule-name`, "user center v2 canary")
	b.waitText(`tr[data-rule="checkout_button"] .split`, "A 50 · B 50")
	b.waitText(`tr[data-rule="user_center_v2"] .breaker`, "closed")
	b.waitText(`tr[data-rule="checkout_button"] .rollback`, "no")

	// The token is in sessionStorage only: not in a cookie, not in the URL.
	if got := eval[string](b, `sessionStorage.getItem('graygate.token')`); got != adminToken {
		t.Errorf("sessionStorage token = %q, want the admin token", got)
	}
	if c := eval[string](b, `document.cookie`); c != "" {
		t.Errorf("document.cookie = %q, want none", c)
	}
	if u := eval[string](b, `location.href`); strings.Contains(u, adminToken) {
		t.Errorf("the URL %q carries the token", u)
	}

	// Live traffic: the whitelisted user goes to gray, shop users to A or
	// B; the overview's figures follow within a few refreshes.
	for i := range 30 {
		if a := e.get("/api/user/profile", "10001"); a.group != "gray" {
			t.Fatalf("whitelisted user: group %q, want gray", a.group)
		}
		e.get("/shop/cart", fmt.Sprint(i))
	}
	gray := `tr[data-rule="user_center_v2"] tr[data-group="gray"] [data-stat="rps"]`
	b.waitFor("a gray request rate", fmt.Sprintf(`(() => { const el = document.querySelector(%s); return el && el.textContent !== '0/s'; })()`, js(gray)))
	b.waitFor("rates for both experiment groups", `['A', 'B'].every((g) => {
		const el = document.querySelector('tr[data-rule="checkout_button"] tr[data-group="' + g + '"] [data-stat="rps"]');
		return el && el.textContent !== '0/s';
	})`)
	b.waitText(`tr[data-rule="user_center_v2"] tr[data-group="gray"] [data-stat="error_rate"]`, "0.0%")

	// Logging out forgets the token.
	b.click("#logout")
	b.waitFor("the login form", `document.querySelector('#token')`)
	if got := eval[string](b, `sessionStorage.getItem('graygate.token') || ''`); got != "" {
		t.Errorf("after logging out, sessionStorage still holds %q", got)
	}
}

// TestBrowserEditSaveRevert edits the canary's percent in the rule page:
// 120 is refused next to its field, 20 is accepted, the diff is shown,
// the save is served by the data plane; then the history reverts it.
func TestBrowserEditSaveRevert(t *testing.T) {
	b := newTab(t)
	e := startGateway(t, nil)
	e.checkSplit(30, 200)
	b.login(e, adminToken)

	b.click(`tr[data-rule="user_center_v2"] a.rule-key`)
	b.waitFor("the editor", `document.querySelector('#editor input[data-path="gray_percent"]')`)
	percent := `#editor input[data-path="gray_percent"]`
	errSlot := `#editor [data-error-for="gray_percent"]`

	b.typeInto(percent, "120")
	b.waitText(errSlot, "must be 0..100, got 120")
	b.waitText("#validation", "gray_percent: must be 0..100, got 120")
	if inv := eval[string](b, `document.querySelector('`+percent+`').getAttribute('aria-invalid')`); inv != "true" {
		t.Errorf("the percent field's aria-invalid = %q, want true", inv)
	}
	if !eval[bool](b, `document.querySelector('#review').disabled`) {
		t.Error("Review changes is enabled while the rule is invalid")
	}
	if _, r := e.api("GET", "/api/v1/rules/user_center_v2", nil); r["gray_percent"] != 30.0 || r["version"] != 1.0 {
		t.Fatalf("validation changed the stored rule: %v", r)
	}

	b.typeInto(percent, "20")
	b.waitText("#validation", "valid")
	if got := b.text(errSlot); got != "" {
		t.Errorf("after fixing it, the percent field still says %q", got)
	}
	b.click("#review")
	b.waitText("#review-diff", "~ gray_percent: 30 → 20")
	if n := b.count("#review-diff li"); n != 1 {
		t.Errorf("the review lists %d changes, want 1: %q", n, b.text("#review-diff"))
	}
	b.typeInto("#reason", "ramp to 20%")
	b.click("#save")
	b.waitText(`#rule-fields tr[data-field="Version"] td`, "2")

	// Traffic follows the saved rule at once.
	e.checkSplit(20, 200)
	_, hist := e.api("GET", "/api/v1/rules/user_center_v2/history", nil)
	top := hist["history"].([]any)[0].(map[string]any)
	if top["by"] != "default" || top["reason"] != "ramp to 20%" {
		t.Errorf("history[0] = %v, want by default, reason “ramp to 20%%”", top)
	}

	// The history shows the field diff; revert to version 1.
	b.waitText(`#history li[data-version="2"]`, "~ gray_percent: 30 → 20")
	b.waitText(`#history li[data-version="2"]`, "“ramp to 20%”")
	if n := b.count(`#history li[data-version="2"] [data-revert]`); n != 0 {
		t.Errorf("the current version offers %d revert buttons, want none", n)
	}
	b.click(`#history li[data-version="1"] [data-revert="1"]`)
	b.confirm("user_center_v2")
	b.waitText(`#rule-fields tr[data-field="Version"] td`, "3")
	b.waitText(`#history li[data-version="3"]`, "revert")
	b.waitText(`#history li[data-version="3"]`, "~ gray_percent: 20 → 30")
	e.checkSplit(30, 200)
}

// editPercent opens user_center_v2's page as an admin and types 45 as its
// percent: a valid edit, not yet saved. It returns the tab, the gateway
// and the percent field's selector.
func editPercent(t *testing.T) (*tab, *gw, string) {
	b := newTab(t)
	e := startGateway(t, nil)
	b.login(e, adminToken)
	b.open(e.admin + "/ui/#/rules/user_center_v2")
	percent := `#editor input[data-path="gray_percent"]`
	b.typeInto(percent, "45")
	b.waitText("#validation", "valid")
	return b, e, percent
}

// TestBrowserConcurrentEdit: a rule changed by someone else after the page
// was opened is not overwritten; the operator is told so.
func TestBrowserConcurrentEdit(t *testing.T) {
	b, e, _ := editPercent(t)

	// Meanwhile, another operator ramps the rule through the API.
	_, cur := e.api("GET", "/api/v1/rules/user_center_v2", nil)
	cur["gray_percent"] = 60
	if code, out := e.api("PUT", "/api/v1/rules/user_center_v2", cur, "If-Match", "1"); code != 200 {
		t.Fatalf("the other operator's PUT = %d %v", code, out)
	}

	b.click("#review")
	b.focusOn("#save")
	b.press(kb.Enter)
	b.waitText("#conflict", "changed since you opened it")
	b.waitText("#conflict", "now version 2")
	b.waitText("#conflict", "Nothing was saved")
	// Save is disabled now: the keyboard focus is on the one thing to do.
	b.waitFocus("#load-latest", "after a save that found the rule changed")
	if _, r := e.api("GET", "/api/v1/rules/user_center_v2", nil); r["gray_percent"] != 60.0 || r["version"] != 2.0 {
		t.Fatalf("after the refused save the rule is %v, want the other operator's version 2 at 60%%", r)
	}
	e.checkSplit(60, 100)
}

// TestBrowserRollback presses Rollback all (a cancelled press first, then
// a confirmed one), sees live traffic degraded, and resumes; then the same
// for one rule from its page.
func TestBrowserRollback(t *testing.T) {
	b := newTab(t)
	e := startGateway(t, nil)
	b.login(e, adminToken)

	b.click("#rollback-all")
	b.waitFor("the confirmation dialog", `document.querySelector('dialog[open]')`)
	b.click("dialog[open] [data-cancel]")
	b.waitFor("the dialog to close", `!document.querySelector('dialog[open]')`)
	if a := e.get("/api/user/profile", "10001"); a.degraded != "" || a.group != "gray" {
		t.Fatalf("after a cancelled rollback: group %q degraded %q, want gray and none", a.group, a.degraded)
	}

	b.click("#rollback-all")
	b.confirm("Roll back every rule")
	b.waitFor("the global rollback banner", `document.querySelector('#global-rollback[data-rolled-back="true"]')`)
	b.waitText(`tr[data-rule="user_center_v2"] .rollback`, "rolled back")
	if a := e.get("/api/user/profile", "10001"); a.degraded != "rollback" || a.group != "stable" || a.backend != "stable" {
		t.Errorf("whitelisted user under rollback: group %q degraded %q backend %q, want stable, rollback, stable", a.group, a.degraded, a.backend)
	}
	if a := e.get("/shop/cart", "3"); a.degraded != "rollback" || a.group != "A" {
		t.Errorf("shop user under rollback: group %q degraded %q, want the control group A and rollback", a.group, a.degraded)
	}
	b.click("#resume-all")
	b.confirm("Resume every rule")
	b.waitFor("the banner to clear", `document.querySelector('#global-rollback[data-rolled-back="false"]')`)
	if a := e.get("/api/user/profile", "10001"); a.degraded != "" || a.group != "gray" {
		t.Errorf("after Resume: group %q degraded %q, want gray and none", a.group, a.degraded)
	}

	// One rule, from its page: the confirmation names the rule.
	b.click(`tr[data-rule="checkout_button"] a.rule-key`)
	b.click("#rule-rollback")
	b.confirm("checkout_button")
	b.waitFor("the Resume button", `document.querySelector('#rule-resume')`)
	for u := range 20 {
		if a := e.get("/shop/cart", fmt.Sprint(u)); a.degraded != "rollback" || a.group != "A" {
			t.Fatalf("user %d under checkout_button's rollback: group %q degraded %q", u, a.group, a.degraded)
		}
	}
	if a := e.get("/api/user/profile", "10001"); a.degraded != "" {
		t.Errorf("user_center_v2 is degraded (%q) by checkout_button's rollback", a.degraded)
	}
	b.click("#rule-resume")
	b.confirm("checkout_button")
	b.waitFor("the Rollback button", `document.querySelector('#rule-rollback')`)
	if a := e.get("/shop/cart", "3"); a.degraded != "" {
		t.Errorf("after Resume, a shop user is still degraded: %q", a.degraded)
	}
}

// TestBrowserOverviewKeepsItsRows checks that the overview's refreshes
// update a rule's row in place: the link a user is about to click stays
// the same element while its figures change, a new rule gets a row, and
// a deleted rule loses its row.
func TestBrowserOverviewKeepsItsRows(t *testing.T) {
	b := newTab(t)
	e := startGateway(t, nil)
	b.login(e, adminToken)
	b.waitText(`tr[data-rule="checkout_button"] .split`, "A 50 · B 50")
	eval[bool](b, `(window.keptLinks = [...document.querySelectorAll('#overview a.rule-key')]).length > 0`)

	for i := range 20 {
		e.get("/shop/cart", fmt.Sprint(i))
	}
	b.waitFor("rates for both experiment groups", `['A', 'B'].every((g) => {
		const el = document.querySelector('tr[data-rule="checkout_button"] tr[data-group="' + g + '"] [data-stat="rps"]');
		return el && el.textContent !== '0/s';
	})`)
	rows := `#overview table.rules > tbody > tr`
	before := b.count(rows)
	code, out := e.api("PUT", "/api/v1/rules/new_rule", map[string]any{
		"type": "gray", "gray_percent": 5,
		"conditions": map[string]any{"path_prefix": []string{"/new/"}}, "targets": map[string]any{"gray": "gray", "stable": "stable"},
	})
	if code != 201 {
		t.Fatalf("PUT new_rule = %d %v", code, out)
	}
	b.waitText(`tr[data-rule="new_rule"] .split`, "5% gray")
	kept := `window.keptLinks.every((a) => a.isConnected && document.querySelector('#overview tr[data-rule="' + a.textContent + '"] a.rule-key') === a)`
	if !eval[bool](b, kept) {
		t.Fatal("a refresh replaced a rule's link: a click that starts before a refresh and ends after it would be lost")
	}

	if code, out := e.api("DELETE", "/api/v1/rules/new_rule", nil); code != 200 {
		t.Fatalf("DELETE new_rule = %d %v", code, out)
	}
	b.waitFor("the deleted rule's row to go", `!document.querySelector('tr[data-rule="new_rule"]')`)
	if !eval[bool](b, kept) {
		t.Fatal("after a rule was deleted, the other rules' links were replaced")
	}
	if n := b.count(rows); n != before {
		t.Errorf("the overview has %d rows after the delete, want the %d it had before the PUT", n, before)
	}
}

// writeControlsJS counts write controls in the page: anything marked as
// one, and any button or input a viewer must not have.
const writeControlsJS = `(() => {
	const marked = document.querySelectorAll('[data-write], #editor, #rollback-all, #resume-all, #rule-rollback, #rule-resume, [data-revert], #save, #review');
	const labelled = [...document.querySelectorAll('button')].filter((el) =>
		/rollback|roll back|resume|save|revert|review|delete|promote|pause|abort|retry/i.test(el.textContent));
	return marked.length + labelled.length;
})()`

// TestBrowserViewer logs in with a viewer token: everything is visible
// and no write control is in the DOM.
func TestBrowserViewer(t *testing.T) {
	b := newTab(t)
	e := startGateway(t, nil)
	b.login(e, viewerToken)
	b.waitText("#whoami", "dashboard · viewer")
	b.waitText(`tr[data-rule="user_center_v2"] .split`, "30% gray")
	if n := eval[int](b, writeControlsJS); n != 0 {
		t.Errorf("the overview shows a viewer %d write controls", n)
	}
	b.open(e.admin + "/ui/#/rules/user_center_v2")
	b.waitText("#rule-json", `"gray_percent": 30`)
	b.waitText(`#history li[data-version="1"]`, "create")
	if n := eval[int](b, writeControlsJS); n != 0 {
		t.Errorf("the rule page shows a viewer %d write controls", n)
	}
	// Reading is allowed: explain works for a viewer.
	b.open(e.admin + "/ui/#/explain")
	b.typeInto("#x-path", "/api/user/profile")
	b.typeInto("#x-user", "10001")
	b.click("#x-submit")
	b.waitText("#x-group", "gray")
	if n := eval[int](b, writeControlsJS); n != 0 {
		t.Errorf("the explain page shows a viewer %d write controls", n)
	}
	// The API refuses writes anyway.
	req, _ := http.NewRequest("POST", e.admin+"/api/v1/rollback", nil)
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a viewer's POST /api/v1/rollback = %d, want 403", resp.StatusCode)
	}
}

// opsConfig is the demo config with one more token, named ops, of role.
func opsConfig(token, role string) string {
	return strings.Replace(demoConfig, "  tokens:\n", "  tokens:\n    - {name: ops, token: "+token+", role: "+role+"}\n", 1)
}

// TestBrowserRoleLoweredByReload: a config reload lowers a logged-in
// token's role from admin to viewer while its operator edits a rule. The
// save is refused (403), and the console then shows the new role, takes
// its write controls away and says why, instead of keeping buttons the
// API refuses until the next login.
func TestBrowserRoleLoweredByReload(t *testing.T) {
	const opsToken = "console-ops-token"
	b := newTab(t)
	e := startGatewayWith(t, opsConfig(opsToken, "admin"), adminToken, nil)
	b.login(e, opsToken)
	b.waitText("#whoami", "ops · admin")
	b.open(e.admin + "/ui/#/rules/user_center_v2")
	percent := `#editor input[data-path="gray_percent"]`
	b.typeInto(percent, "45")
	b.waitText("#validation", "valid")
	b.click("#review")
	b.waitFor("the save button", `document.querySelector('#save')`)

	e.reload(opsConfig(opsToken, "viewer"))
	b.click("#save")
	b.waitText("#whoami", "ops · viewer")
	b.waitText("#role-notice", "role is now viewer (it was admin)")
	b.waitText("#rule-json", `"gray_percent": 30`)
	if n := eval[int](b, writeControlsJS); n != 0 {
		t.Errorf("after the role was lowered, the rule page shows %d write controls", n)
	}
	if _, r := e.api("GET", "/api/v1/rules/user_center_v2", nil); r["gray_percent"] != 30.0 || r["version"] != 1.0 {
		t.Errorf("the refused save changed the rule: %v", r)
	}
	// Navigating keeps the notice and the read-only screens.
	b.open(e.admin + "/ui/#/")
	b.waitText(`tr[data-rule="user_center_v2"] .split`, "30% gray")
	if n := eval[int](b, writeControlsJS); n != 0 {
		t.Errorf("after the role was lowered, the overview shows %d write controls", n)
	}
}

// TestBrowserXSS stores a rule whose rule_name is markup: the console
// shows it literally everywhere and no script runs.
func TestBrowserXSS(t *testing.T) {
	b := newTab(t)
	e := startGateway(t, nil)
	const evil = `<img src=x onerror=alert(1)>`
	code, out := e.api("PUT", "/api/v1/rules/xss_rule", map[string]any{
		"type": "gray", "rule_name": evil, "gray_percent": 10, "white_list": []string{"uid:" + evil},
		"conditions": map[string]any{"path_prefix": []string{"/xss/"}}, "targets": map[string]any{"gray": "gray", "stable": "stable"},
	}, "X-Change-Reason", "<script>alert(2)</script>")
	if code != 201 {
		t.Fatalf("PUT xss_rule = %d %v", code, out)
	}
	b.login(e, adminToken)
	b.waitText(`tr[data-rule="xss_rule"] .rule-name`, evil)

	b.open(e.admin + "/ui/#/rules/xss_rule")
	b.waitText("#rule-name", evil)
	b.waitText(`#history li[data-version="1"]`, "<script>alert(2)</script>")
	b.waitText(`#rule-fields`, "uid:"+evil)
	b.click("#rule-rollback")
	b.waitFor("the confirmation dialog", `document.querySelector('dialog[open]')`)
	b.waitText("dialog[open]", "xss_rule ("+evil+")")
	b.click("dialog[open] [data-cancel]")

	b.open(e.admin + "/ui/#/explain")
	b.typeInto("#x-path", "/xss/")
	b.typeInto("#x-user", evil)
	b.click("#x-submit")
	b.waitText("#x-decision", evil)

	// Give any injected image time to fail and fire, through a refresh of
	// the overview, then check that nothing ran.
	b.open(e.admin + "/ui/")
	b.waitText(`tr[data-rule="xss_rule"] .rule-name`, evil)
	before := b.text("#updated")
	b.waitFor("an overview refresh", fmt.Sprintf(`document.querySelector('#updated').textContent !== %s`, js(before)))
	if n := b.count("img, script:not([src]), [onerror]"); n != 0 {
		t.Errorf("the page has %d injected elements", n)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.dialogs) != 0 {
		t.Errorf("a JavaScript dialog opened: %v", b.dialogs)
	}
}

// TestBrowserExplain asks why users land where they do.
func TestBrowserExplain(t *testing.T) {
	b := newTab(t)
	e := startGateway(t, nil)
	b.login(e, adminToken)
	b.click(`header nav a[href="#/explain"]`)
	b.typeInto("#x-path", "/api/user/profile")
	b.typeInto("#x-user", "10001")
	b.click("#x-submit")
	b.waitText("#x-decision", `user “10001” (from header:X-User-Id) → group gray, upstream gray, rule user_center_v2`)
	b.waitText(`#x-trace tr[data-rule="user_center_v2"]`, "whitelisted")
	b.waitText(`#x-trace tr[data-rule="user_center_v2"]`, "✓ path_prefix")

	// A user the hash leaves out falls through to the default upstream.
	uid := ""
	for u := 1; uid == ""; u++ {
		if !grayAt("user_center_v2", fmt.Sprint(u), 30) {
			uid = fmt.Sprint(u)
		}
	}
	b.typeInto("#x-user", uid)
	b.typeInto("#x-headers", "User-Agent: console-test")
	b.typeInto("#x-cookies", "theme=dark")
	b.click("#x-submit")
	b.waitText("#x-decision", fmt.Sprintf("user “%s” (from header:X-User-Id) → group default", uid))
	b.waitText(`#x-trace tr[data-rule="user_center_v2"]`, "threshold")
	b.waitText(`#x-trace tr[data-rule="checkout_button"]`, "skipped by the path index")
	if a := e.get("/api/user/profile", uid); a.group != "default" || a.backend != "stable" {
		t.Errorf("live traffic for user %s: group %q backend %q; explain said default, stable", uid, a.group, a.backend)
	}

	// Bad input is named next to its field.
	b.typeInto("#x-remote", "not-an-ip")
	b.click("#x-submit")
	b.waitText(`[data-error-for="x-remote"]`, `must be an IP address or IP:port, got "not-an-ip"`)
}

// TestBrowserStatus reads the status screen, from the status document as
// the gateway writes it (the file store) and from one of an etcd store
// serving stale rules.
func TestBrowserStatus(t *testing.T) {
	t.Parallel()
	t.Run("file store", func(t *testing.T) {
		b := newTab(t)
		e := startGateway(t, nil)
		b.login(e, adminToken)
		b.click(`header nav a[href="#/status"]`)
		b.waitText("#st-store", "file")
		b.waitText("#st-state", "ok")
		b.waitText("#st-reload", "ok")
		b.waitText("#st-error", "none")
		b.waitText("#st-version", version)
		b.waitFor("an uptime", `/^\d+(s|m )/.test(document.querySelector('#st-uptime').textContent)`)
		_, st := e.api("GET", "/api/v1/status", nil)
		b.waitText("#st-revision", fmt.Sprint(st["revision"]))
	})
	t.Run("stale etcd store", func(t *testing.T) {
		b := newTab(t)
		e := startGateway(t, func(admin http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/api/v1/status" {
					admin.ServeHTTP(w, r)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, `{"revision": 9, "rules": 2, "store": {"kind": "etcd", "state": "stale", "since": "2026-11-30T10:00:00Z", "revision": 41},
					"last_reload": "2026-11-30T10:00:01Z", "last_reload_result": "error", "last_error": "load rules: etcd: context deadline exceeded",
					"last_error_at": "2026-11-30T10:00:02Z", "breakers": [], "version": "v9", "uptime_s": 3725}`)
			})
		})
		b.login(e, adminToken)
		b.open(e.admin + "/ui/#/status")
		b.waitText("#st-store", "etcd")
		b.waitText("#st-state", "stale")
		b.waitText("#status-fields", "2026-11-30 10:00:00Z")
		b.waitText("#st-revision", "41")
		b.waitText("#st-reload", "error")
		b.waitText("#st-error", "load rules: etcd: context deadline exceeded")
		b.waitText("#st-uptime", "1h 02m 05s")
		b.open(e.admin + "/ui/")
		b.waitText("#overview", "Store etcd")
	})
}

// TestBrowserOptionalFeatures: the rollout, experiment and shadow diff
// sections show only when their API answers for the rule. A gateway
// without these APIs (their paths answer 404, as any unknown /api path
// does) shows no trace of them and no error, even for rules that have a
// rollout and a mirror; on the real gateway a rule shows the sections it
// has and none of the others.
func TestBrowserOptionalFeatures(t *testing.T) {
	t.Parallel()
	withBoth := func(r map[string]any) {
		r["gray_percent"] = 5 // below the plan's first step: a rollout only adds users
		r["rollout"] = rolloutPlan
		r["mirror"] = map[string]any{"target": "gray", "percent": 100, "diff": map[string]any{}}
	}
	// noExtras checks that the page of key has drawn and shows none of
	// the optional sections, and no error.
	noExtras := func(b *tab, key string) {
		b.t.Helper()
		b.waitText(`#history li[data-version="1"]`, "create")
		b.waitFor("the live traffic table", `document.querySelector('#rule-live table')`)
		// Two rounds of the probes answered (the first, and a refresh).
		b.waitFor("two rounds of probes", `Number((document.querySelector('#rule-extras') || {dataset: {}}).dataset.rounds) >= 2`)
		if n := b.count("#rule-extras > *, #rollout, #experiment, #mirror-diff"); n != 0 {
			b.t.Errorf("the page of %s shows %d rollout/experiment/diff elements", key, n)
		}
		if n := b.count(".error:not(:empty)"); n != 0 {
			b.t.Errorf("the page of %s shows an error: %q", key, b.text(".error:not(:empty)"))
		}
	}
	t.Run("absent", func(t *testing.T) {
		b := newTab(t)
		e := startGateway(t, func(admin http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				p := r.URL.Path
				if strings.HasPrefix(p, "/api/v1/experiments/") || strings.HasSuffix(p, "/rollout") || strings.Contains(p, "/rollout/") || strings.HasSuffix(p, "/diff") {
					http.NotFound(w, r)
					return
				}
				admin.ServeHTTP(w, r)
			})
		})
		e.putRule("user_center_v2", withBoth)
		b.login(e, adminToken)
		b.open(e.admin + "/ui/#/rules/checkout_button")
		noExtras(b, "checkout_button")
		b.open(e.admin + "/ui/#/rules/user_center_v2")
		noExtras(b, "user_center_v2")
	})
	t.Run("none for this rule", func(t *testing.T) {
		b := newTab(t)
		e := startGateway(t, nil)
		b.login(e, adminToken)
		// The gateway has the APIs; this rule has neither a rollout nor a
		// mirror, so they answer 404 for it.
		b.open(e.admin + "/ui/#/rules/user_center_v2")
		noExtras(b, "user_center_v2")
	})
	t.Run("present", func(t *testing.T) {
		b := newTab(t)
		e := startGateway(t, nil)
		e.putRule("user_center_v2", withBoth)
		b.login(e, adminToken)
		b.open(e.admin + "/ui/#/rules/checkout_button")
		b.waitText("#experiment-about", "experiment exp_checkout_202611")
		b.waitText("#srm", "not judged yet")
		b.waitText("#experiment-no-metrics", "declares no metrics")
		if n := b.count("#rollout, #mirror-diff"); n != 0 {
			t.Errorf("an ab rule shows %d rollout or diff sections", n)
		}
		b.open(e.admin + "/ui/#/rules/user_center_v2")
		b.waitFor("the rollout and the diff", `document.querySelector('#rule-extras > #rollout + #mirror-diff')`)
		b.waitText("#mirror-about", "mirrors to gray")
		if n := b.count("#experiment"); n != 0 {
			t.Error("a gray rule shows experiment results")
		}
	})
}

// TestBrowserEditorPaths: a problem whose path names a list goes beside
// the list, and one whose field has no input (edited away in the JSON
// view) goes beside the nearest enclosing field.
func TestBrowserEditorPaths(t *testing.T) {
	b := newTab(t)
	e := startGateway(t, nil)
	b.login(e, adminToken)

	b.open(e.admin + "/ui/#/rules/checkout_button")
	b.typeInto(`#editor input[data-path="groups[0].weight"]`, "70")
	b.waitText(`#editor [data-error-for="groups"]`, "weights must sum to 100, got 120")
	b.typeInto(`#editor input[data-path="groups[1].weight"]`, "30")
	b.waitText("#validation", "valid")
	b.click("#review")
	b.waitText("#review-diff", "~ groups: ")

	b.open(e.admin + "/ui/#/rules/user_center_v2")
	b.click("#tab-json")
	b.typeInto("#editor-json", `{"type": "gray", "gray_percent": 30, "targets": {"gray": "gray"}}`)
	b.waitText("#validation", "targets.stable")
	b.click("#tab-fields")
	b.waitFor("the targets problem beside targets", `document.querySelector('#editor [data-error-for="targets"]').textContent !== ''`)
	if n := b.count(`#editor input[data-path="white_list[0]"]`); n != 0 {
		t.Errorf("the form still shows the white list the JSON removed")
	}
	if _, r := e.api("GET", "/api/v1/rules/user_center_v2", nil); r["version"] != 1.0 {
		t.Errorf("editing saved something: version %v", r["version"])
	}
}

// TestBrowserLoginRefusals: a login the API refuses says why, in the
// API's own words: a token of a role that may not read the API (an
// events token, 403), and a gateway started without any admin token
// (401, which is not the operator's typo).
func TestBrowserLoginRefusals(t *testing.T) {
	b := newTab(t)
	e := startGateway(t, nil)
	b.open(e.admin + "/ui/")
	b.typeInto("#token", eventsToken)
	b.click("#login-submit")
	b.waitText("#login-error", "HTTP 403")
	b.waitText("#login-error", `token "backend" has role "events", which may only POST /api/v1/events`)
	if got := eval[string](b, `sessionStorage.getItem('graygate.token') || ''`); got != "" {
		t.Errorf("after a refused login, sessionStorage holds %q", got)
	}

	// A token that was fine when stored but no longer reads the API sends
	// the page back to the login with the reason, not to a dead end.
	eval[bool](b, fmt.Sprintf(`(sessionStorage.setItem('graygate.token', %s), true)`, js(eventsToken)))
	b.open(e.admin + "/ui/#/status")
	b.waitText("#login-error", "may only POST /api/v1/events")

	// The same gateway without the admin section, and no --admin-token.
	i, j := strings.Index(demoConfig, "admin:\n"), strings.Index(demoConfig, "upstreams:\n")
	noTokens := startGatewayWith(t, demoConfig[:i]+demoConfig[j:], "", nil)
	b.open(noTokens.admin + "/ui/")
	b.typeInto("#token", adminToken)
	b.click("#login-submit")
	b.waitText("#login-error", "no admin token is configured")
}

// TestBrowserRevertIsCompareAndSet: Revert to this version applies to the
// version the page shows. When someone else changed the rule since, or
// deleted it, the operator is told so and nothing is written: the other
// change keeps serving and a deleted rule stays deleted. A save of a rule
// deleted meanwhile says it was deleted.
func TestBrowserRevertIsCompareAndSet(t *testing.T) {
	b := newTab(t)
	e := startGateway(t, nil)
	e.putRule("user_center_v2", func(r map[string]any) { r["gray_percent"] = 40 }) // version 2
	b.login(e, adminToken)
	b.open(e.admin + "/ui/#/rules/user_center_v2")
	b.waitText(`#rule-fields tr[data-field="Version"] td`, "2")

	// Meanwhile, another operator ramps it to 50%: version 3.
	e.putRule("user_center_v2", func(r map[string]any) { r["gray_percent"] = 50 })
	b.click(`#history li[data-version="1"] [data-revert="1"]`)
	b.confirm("user_center_v2")
	b.waitText("#toasts", "user_center_v2 changed since you opened it: you opened version 2, and it is now version 3 (by default")
	b.waitText("#toasts", "Nothing was reverted.")
	if _, r := e.api("GET", "/api/v1/rules/user_center_v2", nil); r["version"] != 3.0 || r["gray_percent"] != 50.0 {
		t.Fatalf("after the refused revert the rule is %v, want the other operator's version 3 at 50%%", r)
	}
	e.checkSplit(50, 100)

	// The page now shows version 3; someone deletes the rule. A revert
	// from the page must not bring it back.
	b.waitText(`#rule-fields tr[data-field="Version"] td`, "3")
	if code, out := e.api("DELETE", "/api/v1/rules/user_center_v2", nil); code != 200 {
		t.Fatalf("DELETE = %d %v", code, out)
	}
	b.click(`#history li[data-version="2"] [data-revert="2"]`)
	b.confirm("user_center_v2")
	b.waitText("#toasts", "you opened version 3, and it has since been deleted. Nothing was reverted.")
	b.waitText("#rule-missing", "There is no rule named user_center_v2")
	if code, r := e.api("GET", "/api/v1/rules/user_center_v2", nil); code != 404 {
		t.Fatalf("after the refused revert GET = %d %v: the deleted rule came back", code, r)
	}
	if a := e.get("/api/user/profile", "10001"); a.rule != "" {
		t.Errorf("the deleted rule still claims requests: rule %q group %q", a.rule, a.group)
	}

	// An edit of a rule deleted while it was being edited.
	b.open(e.admin + "/ui/#/rules/checkout_button")
	b.typeInto(`#editor input[data-path="groups[0].weight"]`, "60")
	b.typeInto(`#editor input[data-path="groups[1].weight"]`, "40")
	b.waitText("#validation", "valid")
	if code, out := e.api("DELETE", "/api/v1/rules/checkout_button", nil); code != 200 {
		t.Fatalf("DELETE = %d %v", code, out)
	}
	b.click("#review")
	b.click("#save")
	b.waitText("#conflict", "you opened version 1, and it has since been deleted. Nothing was saved.")
	if code, r := e.api("GET", "/api/v1/rules/checkout_button", nil); code != 404 {
		t.Fatalf("after the refused save GET = %d %v", code, r)
	}
}

// TestBrowserRulePageNoticesChanges: a rule page says, within a refresh,
// that the rule changed or was deleted after it was drawn, without
// throwing away an edit in progress; the notice's button loads the latest
// version.
func TestBrowserRulePageNoticesChanges(t *testing.T) {
	b, e, percent := editPercent(t)

	e.putRule("user_center_v2", func(r map[string]any) { r["gray_percent"] = 60 }) // another operator: version 2
	b.waitText("#rule-stale", "user_center_v2 changed since this page loaded it: it is now version 2 (by default")
	b.waitText("#rule-stale", "this page shows version 1")
	if got := eval[string](b, `document.querySelector('`+percent+`').value`); got != "45" {
		t.Errorf("the notice threw away the edit: the percent field says %q, want 45", got)
	}
	b.click("#rule-reload")
	b.waitText(`#rule-fields tr[data-field="Version"] td`, "2")
	b.waitFor("the percent field to show 60", `document.querySelector('`+percent+`').value === '60'`)
	if got := b.text("#rule-notice"); got != "" {
		t.Errorf("after loading the latest version the notice still says %q", got)
	}
	// The global switch changes no version, but what the page shows.
	if code, out := e.api("POST", "/api/v1/rollback", nil); code != 200 {
		t.Fatalf("POST /api/v1/rollback = %d %v", code, out)
	}
	b.waitText("#rule-stale", "user_center_v2 is rolled back now: every rule was rolled back since this page loaded it.")
	b.click("#rule-reload")
	b.waitText(`#rule-fields tr[data-field="Rolled back"] td`, "yes")
	if code, out := e.api("POST", "/api/v1/resume", nil); code != 200 {
		t.Fatalf("POST /api/v1/resume = %d %v", code, out)
	}
	b.waitText("#rule-stale", "no longer rolled back")
	b.click("#rule-reload")
	b.waitText(`#rule-fields tr[data-field="Rolled back"] td`, "no")

	if code, out := e.api("DELETE", "/api/v1/rules/user_center_v2", nil); code != 200 {
		t.Fatalf("DELETE = %d %v", code, out)
	}
	b.waitText("#rule-stale", "user_center_v2 has been deleted since this page loaded it; this page shows version 2 as it was.")
	b.click("#rule-reload")
	b.waitText("#rule-missing", "There is no rule named user_center_v2")
}
