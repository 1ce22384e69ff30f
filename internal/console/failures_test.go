package console_test

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The console's request timeout (api.js TIMEOUT_MS, README "Operator
// console"): a request without a complete answer by then is given up.
const consoleTimeout = 10 * time.Second

// faults wraps the admin handler and misbehaves on the requests it is
// told to, as a broken admin API, or a load balancer in front of it,
// would. Requests are named "METHOD /path" (without the query); the
// editor's checks, which are PUTs with ?dry_run=1, are "METHOD /path
// (dry run)", so that counting a route's writes does not count them.
type faults struct {
	t     *testing.T
	mu    sync.Mutex
	modes map[string]string
	hits  map[string]int
	stop  chan struct{}
}

// The modes of a faulty request.
const (
	hang      = "hang"       // accept the request, never answer
	applyHang = "apply-hang" // let the gateway apply it, then never answer
	slow      = "slow"       // answer normally after a while
	html502   = "502-html"   // a load balancer's HTML error page
	json503   = "503-json"   // the API's own JSON error
	html200   = "200-html"   // a proxy's login page, with 200
	cut       = "cut"        // start a JSON answer and close the connection
)

// slowBy is how long a slow request waits before it is served.
const slowBy = 2 * time.Second

const lbPage = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n" +
	"<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n" + "<!-- a padding to disable MSIE and Chrome friendly error page -->\r\n"

func newFaults(t *testing.T) *faults {
	f := &faults{t: t, modes: map[string]string{}, hits: map[string]int{}, stop: make(chan struct{})}
	t.Cleanup(func() { close(f.stop) }) // runs before the gateway's cleanups: hung handlers end first
	return f
}

func (f *faults) set(route, mode string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.modes[route] = mode
}

func (f *faults) clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.modes = map[string]string{}
}

// count is how many requests route has had.
func (f *faults) count(route string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[route]
}

// all returns how many requests each route has had.
func (f *faults) all() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.hits)
}

func (f *faults) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := r.Method + " " + r.URL.Path
		if r.URL.Query().Has("dry_run") {
			route += " (dry run)"
		}
		f.mu.Lock()
		f.hits[route]++
		mode := f.modes[route]
		f.mu.Unlock()
		wait := func() {
			select {
			case <-r.Context().Done():
			case <-f.stop:
			}
		}
		switch mode {
		case "":
			next.ServeHTTP(w, r)
		case hang:
			wait()
		case applyHang:
			next.ServeHTTP(httptest.NewRecorder(), r)
			wait()
		case slow:
			select {
			case <-time.After(slowBy):
			case <-f.stop:
			}
			next.ServeHTTP(w, r)
		case html502:
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, lbPage)
		case json503:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error": "store unavailable: etcd: context deadline exceeded"}`)
		case html200:
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, "<!doctype html><html><head><title>Sign in</title></head><body><form>Sign in to continue</form></body></html>")
		case cut:
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				f.t.Errorf("hijack: %v", err)
				return
			}
			buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n{\"revision\": 1, \"rules\": [")
			buf.Flush()
			conn.Close()
		default:
			f.t.Errorf("unknown fault mode %q", mode)
		}
	})
}

// stillShowsRules fails the test unless the overview still lists the
// demo rules.
func (b *tab) stillShowsRules(when string) {
	b.t.Helper()
	if !eval[bool](b, `!!document.querySelector('#overview tr[data-rule="user_center_v2"]') && !!document.querySelector('#overview tr[data-rule="checkout_button"]')`) {
		b.t.Errorf("%s the overview no longer lists the rules it showed: %q", when, b.text("#overview"))
	}
}

// TestBrowserListHangs: the admin API accepts the overview's list request
// and never answers. The overview says so, naming the request, within the
// console's timeout and a refresh, keeps the rules it showed, never has
// more than one refresh in flight, and is live again once the API
// answers.
func TestBrowserListHangs(t *testing.T) {
	b := newTab(t)
	f := newFaults(t)
	e := startGateway(t, f.wrap)
	b.login(e, adminToken)
	b.waitText("#updated", "updated")

	before := f.count("GET /api/v1/rules")
	f.set("GET /api/v1/rules", hang)
	start := time.Now()
	b.waitText("#overview-problem", "GET /api/v1/rules")
	b.waitText("#overview-problem", fmt.Sprintf("no answer within %d s", int(consoleTimeout.Seconds())))
	if d := time.Since(start); d > consoleTimeout+8*time.Second {
		t.Errorf("the hang was reported after %v", d)
	}
	b.stillShowsRules("while the list hangs")
	// One refresh at a time: a hung one is not joined by another every
	// 3 s (the browser has six connections to the admin API, and hung
	// refreshes would take them all from the operator's next change).
	time.Sleep(4 * time.Second)
	since := time.Since(start)
	if n, most := f.count("GET /api/v1/rules")-before, int(since/consoleTimeout)+1; n > most {
		t.Errorf("%d list requests in %v of hanging, want at most %d: refreshes pile up on a hung API", n, since.Round(time.Second), most)
	}

	f.clear()
	b.waitFor("the problem to clear", `document.querySelector('#overview-problem').textContent === ''`)
	b.stillShowsRules("after the API answered again")
	b.waitText(`tr[data-rule="user_center_v2"] .split`, "30% gray")
}

// TestBrowserWriteHangs: Rollback all is applied by the gateway, whose
// answer never arrives. While it is out, the button is disabled and a
// second press sends nothing; after the timeout the console says that
// the change may or may not have been applied (never that it failed or
// succeeded), the buttons work again, and the next answer shows what is
// true.
func TestBrowserWriteHangs(t *testing.T) {
	b := newTab(t)
	f := newFaults(t)
	e := startGateway(t, f.wrap)
	b.login(e, adminToken)

	f.set("POST /api/v1/rollback", applyHang)
	b.click("#rollback-all")
	b.confirm("Roll back every rule")
	b.waitFor("the pressed button to be disabled while its request is out",
		`(() => { const el = document.querySelector('#global-rollback button'); return !!el && el.disabled; })()`)
	// The gateway applied it: the refresh shows it while the answer hangs.
	b.waitFor("the global rollback banner", `document.querySelector('#global-rollback[data-rolled-back="true"]')`)
	if n := eval[int](b, `[...document.querySelectorAll('#global-rollback button')].filter((el) => !el.disabled).length`); n != 0 {
		t.Errorf("while Rollback all is out, %d write buttons of the bar are enabled", n)
	}
	b.waitText("#toasts", "no answer within 10 s")
	b.waitText("#toasts", "may or may not have been applied")
	if got := b.text("#toasts"); strings.Contains(got, "is rolled back.") {
		t.Errorf("the toasts claim the rollback succeeded: %q", got)
	}
	b.waitFor("the bar's button to work again", `(() => { const el = document.querySelector('#resume-all'); return !!el && !el.disabled; })()`)
	if n := f.count("POST /api/v1/rollback"); n != 1 {
		t.Errorf("POST /api/v1/rollback was sent %d times, want 1", n)
	}
	f.clear()
	b.click("#resume-all")
	b.confirm("Resume every rule")
	b.waitFor("the banner to clear", `document.querySelector('#global-rollback[data-rolled-back="false"]')`)
	b.waitText("#toasts", "Resumed")
}

// TestBrowserDoublePress: an operator presses a write button again while
// its first request is still out (the API is slow). Only one request is
// sent: for Rollback all on the overview, and for Rollback and Revert on
// a rule page.
func TestBrowserDoublePress(t *testing.T) {
	b := newTab(t)
	f := newFaults(t)
	e := startGateway(t, f.wrap)
	e.putRule("user_center_v2", func(r map[string]any) { r["gray_percent"] = 40 }) // version 2
	b.login(e, adminToken)

	// pressAgain presses sel once more as an impatient operator would,
	// confirming if it asks.
	pressAgain := func(sel string) {
		t.Helper()
		eval[bool](b, fmt.Sprintf(`(() => { const el = document.querySelector(%s); if (el) el.click(); return true; })()`, js(sel)))
		time.Sleep(300 * time.Millisecond)
		if eval[bool](b, `!!document.querySelector('dialog[open]')`) {
			b.click("dialog[open] [data-confirm]")
		}
	}
	tests := []struct {
		name, page, route, button, confirm, done string
	}{
		{"rule rollback", "#/rules/checkout_button", "POST /api/v1/rules/checkout_button/rollback", "#rule-rollback", "Roll back checkout_button",
			`document.querySelector('#rule-resume')`},
		{"revert", "#/rules/user_center_v2", "POST /api/v1/rules/user_center_v2/revert", `[data-revert="1"]`, "Revert user_center_v2",
			`(document.querySelector('#rule-fields tr[data-field="Version"] td') || {}).textContent === '3'`},
		// Last: a global rollback shows every rule page rolled back.
		{"rollback all", "#/", "POST /api/v1/rollback", "#rollback-all", "Roll back every rule",
			`document.querySelector('#global-rollback[data-rolled-back="true"]')`},
	}
	for _, tt := range tests {
		b.open(e.admin + "/ui/" + tt.page)
		f.set(tt.route, slow)
		b.click(tt.button)
		b.confirm(tt.confirm)
		pressAgain(tt.button)
		b.waitFor(tt.name+" to be done", tt.done)
		time.Sleep(slowBy + time.Second) // a second request, if one was sent, is answered by now
		if n := f.count(tt.route); n != 1 {
			t.Errorf("%s: %s was sent %d times, want 1", tt.name, tt.route, n)
		}
		f.clear()
	}

	// Save disables itself: a double click sends one PUT.
	b.open(e.admin + "/ui/#/rules/user_center_v2")
	b.typeInto(`#editor input[data-path="gray_percent"]`, "45")
	b.waitText("#validation", "valid")
	b.click("#review")
	b.waitFor("the save button", `document.querySelector('#save')`)
	before := f.count("PUT /api/v1/rules/user_center_v2")
	f.set("PUT /api/v1/rules/user_center_v2", slow)
	eval[bool](b, `(() => { const el = document.querySelector('#save'); el.click(); el.click(); return true; })()`)
	b.waitText("#toasts", "Saved user_center_v2: version 4")
	time.Sleep(slowBy + time.Second)
	if n := f.count("PUT /api/v1/rules/user_center_v2") - before; n != 1 {
		t.Errorf("a double click on Save sent %d PUTs, want 1 (requests by route: %v)", n, f.all())
	}
}

// TestBrowserDetailAndSaveHang: a rule page whose rule does not come
// says so (and offers to try again) instead of staying blank; a save
// that the gateway applies but never answers says the change may or may
// not have been applied, never "saved", and the page says it cannot
// check the rule while the API hangs; once the API answers, the page
// shows what is true.
func TestBrowserDetailAndSaveHang(t *testing.T) {
	b := newTab(t)
	f := newFaults(t)
	e := startGateway(t, f.wrap)
	b.login(e, adminToken)

	f.set("GET /api/v1/rules/user_center_v2", hang)
	b.open(e.admin + "/ui/#/rules/user_center_v2")
	b.waitText("#main", "Loading user_center_v2")
	b.waitText("#rule-error", "Could not load rule user_center_v2: GET /api/v1/rules/user_center_v2: no answer within 10 s")
	f.clear()
	b.click("#rule-retry")
	b.waitText(`#rule-fields tr[data-field="Version"] td`, "1")

	b.typeInto(`#editor input[data-path="gray_percent"]`, "45")
	b.waitText("#validation", "valid")
	b.click("#review")
	f.set("PUT /api/v1/rules/user_center_v2", applyHang)
	f.set("GET /api/v1/rules/user_center_v2", hang)
	b.click("#save")
	b.waitText("#save-result", "no answer within 10 s")
	b.waitText("#save-result", "may or may not have been applied")
	b.waitFor("Save to work again", `!document.querySelector('#save').disabled`)
	if got := b.text("#toasts"); strings.Contains(got, "Saved") {
		t.Errorf("a save without an answer was reported: %q", got)
	}
	b.waitText("#rule-notice", "Could not check whether user_center_v2 changed")
	if n := b.count("#rule-fields"); n != 1 {
		t.Errorf("the page lost the rule it showed: %q", b.text("#main"))
	}
	f.clear()
	b.waitText("#rule-stale", "it is now version 2")
	if _, r := e.api("GET", "/api/v1/rules/user_center_v2", nil); r["gray_percent"] != 45.0 {
		t.Fatalf("the rule is %v, want the applied save at 45%%", r)
	}
}

// TestBrowserBadAnswers: the admin API answers 5xx with its JSON error, a
// load balancer's HTML 502 page, a 200 that is not JSON, or a connection
// closed mid-answer. Each is said in a short, clear message naming the
// request; the page keeps what it showed, throws nothing (newTab fails a
// test on any page exception) and works again once the API does.
func TestBrowserBadAnswers(t *testing.T) {
	b := newTab(t)
	f := newFaults(t)
	e := startGateway(t, f.wrap)

	// A login through a broken load balancer.
	f.set("GET /api/v1/whoami", html502)
	b.open(e.admin + "/ui/")
	b.typeInto("#token", adminToken)
	b.click("#login-submit")
	b.waitText("#login-error", "HTTP 502")
	if got := b.text("#login-error"); strings.Contains(got, "<") || len(got) > 300 {
		t.Errorf("the login error is %q: want a short message, not the page", got)
	}
	f.clear()
	b.click("#login-submit")
	b.waitFor("the overview", `document.querySelector('#overview tr[data-rule]')`)

	// Opening the console with a stored token while the API is broken is
	// no verdict on the token: the page says what failed and offers to
	// try again.
	f.set("GET /api/v1/whoami", html502)
	b.open(e.admin + "/ui/#/status")
	b.do("reload the page", chromedp.Reload())
	b.waitText("#connect-error", "GET /api/v1/whoami: HTTP 502")
	f.clear()
	b.click("#connect-retry")
	b.waitText("#st-version", version)
	b.open(e.admin + "/ui/#/")
	b.waitFor("the overview", `document.querySelector('#overview tr[data-rule]')`)

	tests := []struct {
		route, mode string
		want        []string
	}{
		{"GET /api/v1/status", html502, []string{"GET /api/v1/status", "HTTP 502", "502 Bad Gateway nginx"}},
		{"GET /api/v1/rules", json503, []string{"GET /api/v1/rules", "HTTP 503", "store unavailable: etcd: context deadline exceeded"}},
		{"GET /api/v1/rules", html200, []string{"GET /api/v1/rules", "not JSON", "Sign in"}},
		{"GET /api/v1/rules", cut, []string{"GET /api/v1/rules", "connection"}},
		{"GET /api/v1/stats", html502, []string{"live traffic", "GET /api/v1/stats", "HTTP 502"}},
	}
	for _, tt := range tests {
		f.set(tt.route, tt.mode)
		for _, w := range tt.want {
			b.waitText("#overview-problem", w)
		}
		if got := b.text("#overview-problem"); strings.Contains(got, "<") || len(got) > 300 {
			t.Errorf("%s %s: the overview says %q: want a short message, not the page", tt.route, tt.mode, got)
		}
		b.stillShowsRules(fmt.Sprintf("after %s answered %s,", tt.route, tt.mode))
		f.clear()
		b.waitFor("the problem to clear", `document.querySelector('#overview-problem').textContent === ''`)
		if !eval[bool](b, `!!document.querySelector('#overview th.live-head')`) {
			t.Errorf("after %s answered %s, the overview has no live traffic column", tt.route, tt.mode)
		}
	}

	// A write refused with a 5xx may have been applied behind a proxy.
	f.set("POST /api/v1/rollback", html502)
	b.click("#rollback-all")
	b.confirm("Roll back every rule")
	// A failure is an alert, which a screen reader reads out at once.
	b.waitText(`#toasts [role="alert"]`, "Rollback failed: POST /api/v1/rollback: HTTP 502")
	b.waitText(`#toasts [role="alert"]`, "may or may not have been applied")
	b.waitFor("Rollback all to work again", `(() => { const el = document.querySelector('#rollback-all'); return !!el && !el.disabled; })()`)
	f.clear()

	// A rule page keeps the rule it shows when reloading it fails after
	// an action.
	b.open(e.admin + "/ui/#/rules/user_center_v2")
	b.waitText(`#rule-fields tr[data-field="Version"] td`, "1")
	f.set("GET /api/v1/rules/user_center_v2", html502)
	b.click("#rule-rollback")
	b.confirm("Roll back user_center_v2")
	b.waitText(`#toasts [role="status"]`, "user_center_v2 is rolled back.")
	if got := b.text(`#toasts [role="alert"]`); strings.Contains(got, "is rolled back") {
		t.Errorf("a rollback that worked is an alert: %q", got)
	}
	b.waitText("#rule-notice", "HTTP 502")
	if n := b.count("#rule-fields"); n != 1 {
		t.Errorf("after a failed reload the rule page lost the rule it showed: %q", b.text("#main"))
	}
	f.clear()
	b.waitText("#rule-stale", "it is now version 2") // a rule's rollback is a new version of it
	b.click("#rule-reload")
	b.waitText(`#rule-fields tr[data-field="Rolled back"] td`, "yes")
}

// TestBrowserTokenWithdrawn: a config reload takes a logged-in token's
// right to read the API away (its role becomes events: 403), or removes
// it (401). Either way the console goes back to the login with the
// reason and forgets the token.
func TestBrowserTokenWithdrawn(t *testing.T) {
	const opsToken = "console-ops-token"
	b := newTab(t)
	e := startGatewayWith(t, opsConfig(opsToken, "viewer"), adminToken, nil)
	b.login(e, opsToken)
	b.waitText("#whoami", "ops · viewer")

	e.reload(opsConfig(opsToken, "events"))
	b.waitText("#login-error", `token "ops" has role "events"`)
	if got := eval[string](b, `sessionStorage.getItem('graygate.token') || ''`); got != "" {
		t.Errorf("after the token lost its role, sessionStorage still holds %q", got)
	}

	e.reload(opsConfig(opsToken, "viewer"))
	b.login(e, opsToken)
	b.open(e.admin + "/ui/#/rules/user_center_v2")
	b.waitText("#rule-json", `"gray_percent": 30`)
	e.reload(demoConfig)
	b.waitText("#login-error", "log in again")
	if got := eval[string](b, `sessionStorage.getItem('graygate.token') || ''`); got != "" {
		t.Errorf("after the token was removed, sessionStorage still holds %q", got)
	}
}

// TestBrowserButtonsWaitForTheRedraw: an action ends when the page has
// drawn what it changed, optional sections included. The buttons that
// draw brings wait for that end as the pressed one does (a press before
// it would be dropped by the write gate, silently), then work, with the
// keyboard focus on the one that took the pressed one's place.
func TestBrowserButtonsWaitForTheRedraw(t *testing.T) {
	b := newTab(t)
	f := newFaults(t)
	e := startGateway(t, f.wrap)
	b.login(e, adminToken)
	b.open(e.admin + "/ui/#/rules/checkout_button")
	b.waitFor("the experiment section", `document.querySelector('#rule-extras') && Number(document.querySelector('#rule-extras').dataset.rounds) > 0`)

	f.set("GET /api/v1/experiments/checkout_button/results", slow)
	b.click("#rule-rollback")
	b.confirm("Roll back checkout_button")
	b.waitFor("the rule drawn rolled back", `document.querySelector('#rule-resume')`)
	if !eval[bool](b, `(() => { const el = document.querySelector('#rule-resume'); return el.disabled && el.getAttribute('aria-busy') === 'true'; })()`) {
		t.Error("Resume works while the page that drew it is still loading its experiment section")
	}
	b.waitFor("Resume to work once the page is drawn", `(() => { const el = document.querySelector('#rule-resume'); return !!el && !el.disabled && !el.hasAttribute('aria-busy'); })()`)
	b.waitFocus("#rule-resume", "after the rollback")
	f.clear()
	b.click("#rule-resume")
	b.confirm("Resume checkout_button")
	b.waitFor("the Rollback button", `document.querySelector('#rule-rollback')`)
	if a := e.get("/shop/cart", "3"); a.degraded != "" {
		t.Errorf("after Resume, a shop user is still degraded: %q", a.degraded)
	}
}
