package console_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// press sends one key to whatever has the keyboard focus, as a person at
// the keyboard does.
func (b *tab) press(key string) {
	b.t.Helper()
	b.do("press "+fmt.Sprintf("%q", key), chromedp.KeyEvent(key))
}

// focusOn gives sel the keyboard focus, as Tab does when it reaches it.
func (b *tab) focusOn(sel string) {
	b.t.Helper()
	b.waitUsable(sel)
	b.do("focus "+sel, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%s).focus()`, js(sel))))
}

// focused describes the element with the keyboard focus: its id, or its
// tag when it has none ("BODY" when nothing has it).
const focusedJS = `(() => { const el = document.activeElement; return el ? (el.id ? '#' + el.id : el.tagName) : 'none'; })()`

// waitFocus waits until sel has the keyboard focus.
func (b *tab) waitFocus(sel, when string) {
	b.t.Helper()
	b.waitForThen(func() string {
		return fmt.Sprintf("%s to have the keyboard focus %s (it is on %s)", sel, when, eval[string](b, focusedJS))
	}, fmt.Sprintf(`document.activeElement === document.querySelector(%s)`, js(sel)))
}

// keyboardConfirm answers the open confirmation dialog from the keyboard:
// the dialog opens on Cancel, Tab goes to its confirm button, Enter
// presses it.
func (b *tab) keyboardConfirm(want string) {
	b.t.Helper()
	b.waitFor("the confirmation dialog", `document.querySelector('dialog[open]')`)
	b.waitFocus("dialog[open] [data-cancel]", "when the dialog opens")
	if got := b.text("dialog[open]"); !strings.Contains(got, want) {
		b.t.Fatalf("the confirmation says %q, want it to name %q", got, want)
	}
	// What a screen reader announces as the focus lands on Cancel: the
	// dialog's name and its description.
	name := eval[string](b, `(() => { const d = document.querySelector('dialog[open]'); const el = document.getElementById(d.getAttribute('aria-labelledby')); return el && d.contains(el) ? el.textContent : ''; })()`)
	desc := eval[string](b, `(() => { const d = document.querySelector('dialog[open]'); const el = document.getElementById(d.getAttribute('aria-describedby')); return el && d.contains(el) ? el.textContent : ''; })()`)
	if !strings.HasSuffix(name, "?") || desc == "" || !strings.Contains(name+" "+desc, want) {
		b.t.Errorf("the dialog is named %q and described by %q; want its question and what it does, naming %q", name, desc, want)
	}
	b.press(kb.Tab)
	b.waitFocus("dialog[open] [data-confirm]", "after Tab")
	b.press(kb.Enter)
	b.waitFor("the dialog to close", `!document.querySelector('dialog[open]')`)
}

// keyAction is one confirmed action done from the keyboard.
type keyAction struct {
	press   string // what to Tab to first ("": Enter where the focus is)
	confirm string // what the confirmation names
	done    string // a predicate that holds once the page shows it done
	focus   string // where the keyboard focus must be then
}

// act does a: Enter on its button, Tab and Enter in the confirmation,
// then waits for the page to show it done and the focus to be back.
func (b *tab) act(a keyAction) {
	b.t.Helper()
	if a.press != "" {
		b.focusOn(a.press)
	}
	b.press(kb.Enter)
	b.keyboardConfirm(a.confirm)
	b.waitFor(a.confirm+" to be done", a.done)
	b.waitFocus(a.focus, "after "+a.confirm)
}

// TestBrowserKeyboardKeepsFocus drives the console's actions from the
// keyboard alone. An action disables its button while it runs and then
// draws the page again, the pressed button with it; the keyboard focus
// must come back to the button that stands where the pressed one stood
// (Rollback's place is Resume's once it is done), not fall to the page's
// top, where the next Tab would start over.
func TestBrowserKeyboardKeepsFocus(t *testing.T) {
	b := newTab(t)
	e := startGateway(t, nil)
	e.putRule("user_center_v2", func(r map[string]any) { r["gray_percent"] = 0; r["rollout"] = rolloutPlan })
	e.waitRollout("user_center_v2", "progressing", 1)
	b.login(e, adminToken)

	// The overview's global switch.
	for _, a := range []keyAction{
		{"#rollback-all", "Roll back every rule", `document.querySelector('#global-rollback[data-rolled-back="true"]')`, "#resume-all"},
		{"", "Resume every rule", `document.querySelector('#global-rollback[data-rolled-back="false"]')`, "#rollback-all"},
	} {
		b.act(a)
	}

	// A cancelled action leaves the focus where it was.
	b.press(kb.Enter)
	b.waitFocus("dialog[open] [data-cancel]", "when the dialog opens")
	b.press(kb.Escape)
	b.waitFor("the dialog to close", `!document.querySelector('dialog[open]')`)
	b.waitFocus("#rollback-all", "after Escape")

	// A rule's link, from the keyboard: the rule page has the focus, and
	// the next Tab is its first link, not the header's.
	b.focusOn(`tr[data-rule="checkout_button"] a.rule-key`)
	b.press(kb.Enter)
	b.waitFor("the rule page", `document.querySelector('#rule-rollback')`)
	b.waitFocus("#main", "after opening the rule")
	b.press(kb.Tab)
	b.waitFocus("#main a.back", "after Tab on the rule page")

	// A rule's own Rollback and Resume, on its page.
	b.act(keyAction{"#rule-rollback", "Roll back checkout_button", `document.querySelector('#rule-resume')`, "#rule-resume"})
	if a := e.get("/shop/cart", "3"); a.degraded != "rollback" {
		t.Errorf("after the keyboard's Rollback, a shop user is not degraded (%q)", a.degraded)
	}
	b.act(keyAction{"", "Resume checkout_button", `document.querySelector('#rule-rollback')`, "#rule-rollback"})

	// Revert: the history is drawn again with one version more, and the
	// focus is on the same version's Revert button.
	oldest := eval[string](b, `[...document.querySelectorAll('[data-revert]')].pop().dataset.revert`)
	sel := fmt.Sprintf(`[data-revert=%q]`, oldest)
	versions := b.count("#history > li")
	b.act(keyAction{sel, "Revert checkout_button to version " + oldest,
		fmt.Sprintf(`document.querySelectorAll('#history > li').length === %d`, versions+1), sel})

	// The editor: Back to editing returns to Review changes; a save draws
	// the new version with a fresh editor, and the focus is at its start.
	b.typeInto(`#editor input[data-path="experiment_id"]`, "exp_checkout_202612")
	b.waitText("#validation", "valid")
	b.focusOn("#review")
	b.press(kb.Enter)
	b.waitText("#review-diff", "experiment_id")
	b.focusOn("#cancel-review")
	b.press(kb.Enter)
	b.waitFor("the review to close", `!document.querySelector('#review-diff')`)
	b.waitFocus("#review", "after Back to editing")
	b.press(kb.Enter)
	b.waitText("#review-diff", "experiment_id")
	version := eval[string](b, `document.querySelector('#rule-fields tr[data-field="Version"] td').textContent`)
	b.focusOn("#save")
	b.press(kb.Enter)
	b.waitFor("the saved version", fmt.Sprintf(`(() => { const el = document.querySelector('#rule-fields tr[data-field="Version"] td'); return !!el && el.textContent !== %s; })()`, js(version)))
	b.waitFocus("#tab-fields", "after Save")
	if _, r := e.api("GET", "/api/v1/rules/checkout_button", nil); r["experiment_id"] != "exp_checkout_202612" {
		t.Errorf("after the keyboard's Save the rule's experiment_id is %v", r["experiment_id"])
	}

	// Someone else changes the rule: Load the latest version draws the
	// page anew, its own button gone, and the focus is on the title.
	_, cur := e.api("GET", "/api/v1/rules/checkout_button", nil)
	cur["experiment_id"] = "exp_checkout_202701"
	if code, out := e.api("PUT", "/api/v1/rules/checkout_button", cur); code != 200 {
		t.Fatalf("the other operator's PUT = %d %v", code, out)
	}
	b.focusOn("#rule-stale #rule-reload")
	b.press(kb.Enter)
	b.waitText(`#rule-fields tr[data-field="experiment_id"] td`, "exp_checkout_202701")
	b.waitFocus("#rule-title", "after Load the latest version")

	// A rollout's Pause and Resume: its section is drawn again after each.
	b.open(e.admin + "/ui/#/rules/user_center_v2")
	for _, a := range []struct {
		keyAction
		state string
	}{
		{keyAction{"#rollout-pause", "Pause the rollout of user_center_v2", `document.querySelector('#rollout[data-state="paused"] #rollout-resume')`, "#rollout-resume"}, "paused"},
		{keyAction{"", "Resume the rollout of user_center_v2", `document.querySelector('#rollout[data-state="progressing"] #rollout-pause')`, "#rollout-pause"}, "progressing"},
		{keyAction{"#rollout-abort", "Abort the rollout of user_center_v2", `document.querySelector('#rollout[data-state="aborted"] #rollout-retry')`, "#rollout-retry"}, "aborted"},
	} {
		b.act(a.keyAction)
		e.waitRollout("user_center_v2", a.state, 1)
	}
}
