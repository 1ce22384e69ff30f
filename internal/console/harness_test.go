package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/gateway"
)

const (
	adminToken  = "console-admin-token"
	viewerToken = "console-viewer-token"
	// eventsToken may only post experiment events: not a console token.
	eventsToken = "console-events-token"
	// version is what the test gateway reports as its build.
	version = "v0.0.0-console-test"
)

// demoConfig is `graygate demo`'s setup: two rules over four upstreams,
// plus a viewer token.
const demoConfig = `
default_upstream: stable
admin:
  tokens:
    - {name: dashboard, token: ` + viewerToken + `, role: viewer}
    - {name: backend, token: ` + eventsToken + `, role: events}
upstreams:
  stable: {instances: [{addr: "{{stable}}"}]}
  gray:   {instances: [{addr: "{{gray}}"}]}
  exp-a:  {instances: [{addr: "{{exp-a}}"}]}
  exp-b:  {instances: [{addr: "{{exp-b}}"}]}
rules:
  - {key: user_center_v2, type: gray, rule_name: "user center v2 canary", gray_percent: 30, white_list: ["uid:10001"],
     conditions: {path_prefix: ["/api/user/"]}, targets: {gray: gray, stable: stable}}
  - {key: checkout_button, type: ab, experiment_id: exp_checkout_202611, conditions: {path_prefix: ["/shop/"]},
     groups: [{name: A, weight: 50, target: exp-a, control: true}, {name: B, weight: 50, target: exp-b}]}
`

// gw is a running gateway on loopback with backends that name themselves.
type gw struct {
	t       *testing.T
	data    string // http://127.0.0.1:port, the data plane
	admin   string // http://127.0.0.1:port, the admin listener (and the console)
	client  *http.Client
	g       *gateway.Gateway
	addrs   map[string]string // {{name}} placeholder → backend address
	dataDir string
}

// reload gives the running gateway yaml (demoConfig's shape, with its
// {{upstream}} placeholders) as a config reload does.
func (e *gw) reload(yaml string) {
	e.t.Helper()
	for name, addr := range e.addrs {
		yaml = strings.ReplaceAll(yaml, "{{"+name+"}}", addr)
	}
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		e.t.Fatalf("config: %v", err)
	}
	cfg.DataDir = e.dataDir
	if err := e.g.ReloadConfig(context.Background(), cfg); err != nil {
		e.t.Fatalf("reload: %v", err)
	}
}

// startGateway runs a gateway with the demo config. wrap, if set, wraps
// the admin handler (to add an API the gateway does not have yet).
func startGateway(t *testing.T, wrap func(http.Handler) http.Handler) *gw {
	t.Helper()
	return startGatewayWith(t, demoConfig, adminToken, wrap)
}

// startGatewayWith is startGateway with another config (demoConfig's
// shape, with its {{upstream}} placeholders) and admin token ("" for
// none).
func startGatewayWith(t *testing.T, yaml, token string, wrap func(http.Handler) http.Handler) *gw {
	t.Helper()
	addrs := map[string]string{}
	for _, name := range []string{"stable", "gray", "exp-a", "exp-b"} {
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Backend", name)
			if r.Header.Get("X-Test-Fail") != "" { // a request that asks the backend to fail
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			io.WriteString(w, name)
		})}
		ln := listen(t)
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		addrs[name] = ln.Addr().String()
		yaml = strings.ReplaceAll(yaml, "{{"+name+"}}", ln.Addr().String())
	}
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	cfg.DataDir = t.TempDir()
	g, err := gateway.New(gateway.Options{Config: cfg, AdminToken: token, Logger: slog.New(slog.DiscardHandler), Version: version})
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	dl, al := listen(t), listen(t)
	e := &gw{t: t, data: "http://" + dl.Addr().String(), admin: "http://" + al.Addr().String(),
		client: &http.Client{Timeout: 20 * time.Second}, g: g, addrs: addrs, dataDir: cfg.DataDir}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	if wrap == nil {
		go func() { done <- g.Serve(ctx, dl, al) }()
	} else {
		// The gateway serves its own admin listener on a spare port; the
		// console's port serves the wrapped handler.
		spare := listen(t)
		srv := &http.Server{Handler: wrap(g.AdminHandler()), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(al)
		t.Cleanup(func() { srv.Close() })
		go func() { done <- g.Serve(ctx, dl, spare) }()
	}
	t.Cleanup(func() {
		e.client.CloseIdleConnections() // else the data plane waits for them to go idle-closed
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("gateway did not stop")
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := e.client.Get(e.admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway not ready: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return e
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// api calls the admin API as the admin and decodes the JSON answer.
func (e *gw) api(method, path string, body any, hdr ...string) (int, map[string]any) {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		js, _ := json.Marshal(body)
		rd = bytes.NewReader(js)
	}
	req, _ := http.NewRequest(method, e.admin+path, rd)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

// answer is what the data plane said to one request.
type answer struct {
	status                         int
	rule, group, degraded, backend string
}

// get sends one request through the gateway's data plane as user uid,
// with the given header name/value pairs.
func (e *gw) get(path, uid string, hdr ...string) answer {
	e.t.Helper()
	return e.send("GET", path, uid, hdr...)
}

// send is get with a method.
func (e *gw) send(method, path, uid string, hdr ...string) answer {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.data+path, nil)
	req.Header.Set("X-User-Id", uid)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s as %s: %v", method, path, uid, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, rule: resp.Header.Get("X-Gray-Rule"), group: resp.Header.Get("X-Gray-Group"),
		degraded: resp.Header.Get("X-Gray-Degraded"), backend: string(body)}
}

// grayAt is the test's own model of a gray rule's split (README "Hashing
// modes"): uid is gray iff xxhash64(key:uid) % 10000 < percent × 100.
func grayAt(key, uid string, percent float64) bool {
	return xxhash.Sum64String(key+":"+uid)%10000 < uint64(percent*100)
}

// checkSplit sends users 1..n through the data plane and checks that each
// lands where a user_center_v2 at percent puts it.
func (e *gw) checkSplit(percent float64, n int) {
	e.t.Helper()
	gray := 0
	for u := 1; u <= n; u++ {
		uid := fmt.Sprint(u)
		a := e.get("/api/user/profile", uid)
		want := grayAt("user_center_v2", uid, percent)
		if got := a.rule == "user_center_v2" && a.group == "gray" && a.backend == "gray"; got != want {
			e.t.Fatalf("at %v%%: user %s got rule %q group %q backend %q; want gray=%v", percent, uid, a.rule, a.group, a.backend, want)
		}
		if want {
			gray++
		}
	}
	e.t.Logf("at %v%%: %d of %d users gray, each as the hash says", percent, gray, n)
}

// The browser is shared by the package's tests: one chromium process,
// a tab per test. browserCtx is nil when no chromium was found.
var (
	browserCtx context.Context
	browserErr string
)

func TestMain(m *testing.M) {
	// The browser tests mostly wait (for the console's refreshes, for the
	// browser); let more of them wait at once than there are CPUs. An
	// explicit -parallel on the command line still wins.
	_ = flag.Set("test.parallel", "5")
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	path := findChromium()
	if path == "" {
		browserErr = "chromium is not installed (scripts/chromium.sh installs it)"
		if os.Getenv("GRAYGATE_REQUIRE_BROWSER") != "" {
			fmt.Fprintln(os.Stderr, "GRAYGATE_REQUIRE_BROWSER is set but", browserErr)
			return 1
		}
		return m.Run()
	}
	profile, err := os.MkdirTemp("", "graygate-chromium-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(profile)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1360, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	if err := chromedp.Do(bctx); err != nil { // starts the browser, bound to bctx
		fmt.Fprintln(os.Stderr, "start chromium:", err)
		return 1
	}
	browserCtx = bctx
	return m.Run()
}

func findChromium() string {
	if p := os.Getenv("GRAYGATE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// tab is one browser tab driven by one test.
type tab struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	problems []string // exceptions and CSP violations the page reported
	dialogs  []string // JavaScript dialogs that opened
}

// tabBudget bounds everything a test does in its tab, so that a hung
// page fails the test rather than the run. It is not a speed check: each
// wait has its own bound. The longest test (TestBrowserRollout) takes
// about 36 s alone and 125 s on a machine running two whole suites at
// once, which the budget must allow.
const tabBudget = 4 * time.Minute

// newTab opens a tab, or skips the test when there is no browser. On
// failure it saves a screenshot and names it in the log. Browser tests run
// in parallel, each in its own tab against its own gateway: most of their
// time is spent waiting for the console's refreshes.
func newTab(t *testing.T) *tab {
	t.Helper()
	if browserCtx == nil {
		t.Skip(browserErr)
	}
	t.Parallel()
	tctx, cancel := chromedp.NewContext(browserCtx)
	if err := chromedp.Do(tctx); err != nil {
		cancel()
		t.Fatalf("open a tab: %v", err)
	}
	ctx, cancelT := context.WithTimeout(tctx, tabBudget)
	b := &tab{t: t, ctx: ctx}
	msgs := chromedp.Console(ctx)
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for m, err := range msgs {
			if err != nil {
				return
			}
			text := m.String()
			// 4xx answers the console expects (a refused token, a rule
			// that does not validate, an API this gateway lacks) are
			// logged by the browser; they are not faults.
			if m.IsException() || strings.Contains(text, "Content Security Policy") || strings.Contains(text, "Trusted Type") ||
				(m.Type == chromedp.ConsoleError && !strings.Contains(text, "Failed to load resource")) {
				b.mu.Lock()
				b.problems = append(b.problems, text)
				b.mu.Unlock()
			}
		}
	}()
	go func() {
		defer wg.Done()
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.dialogs = append(b.dialogs, fmt.Sprintf("%s dialog: %q", ev.Type, ev.Message))
			b.mu.Unlock()
			// Close it, so a test that fails here does not hang.
			go chromedp.Call(tctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	t.Cleanup(func() {
		cancelT()
		cancel()
		wg.Wait()
	})
	t.Cleanup(func() {
		b.mu.Lock()
		problems := b.problems
		b.mu.Unlock()
		for _, p := range problems {
			t.Errorf("the page reported: %s", p)
		}
		if t.Failed() {
			b.screenshot("failure")
		}
	})
	return b
}

// screenshot saves the tab as a PNG in a directory that outlives the
// test, and logs its path.
func (b *tab) screenshot(what string) {
	buf, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot: %v", err)
		return
	}
	dir, err := os.MkdirTemp("", "graygate-console-screenshots-")
	if err != nil {
		b.t.Logf("screenshot: %v", err)
		return
	}
	name := filepath.Join(dir, strings.ReplaceAll(b.t.Name(), "/", "_")+"-"+what+".png")
	if err := os.WriteFile(name, buf, 0o644); err != nil {
		b.t.Logf("screenshot: %v", err)
		return
	}
	b.t.Logf("screenshot of the page: %s", name)
}

func (b *tab) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

func (b *tab) open(url string) { b.t.Helper(); b.do("open "+url, chromedp.Navigate(url)) }

// click clicks the element sel finds once it is visible and enabled. A
// rule page's reload draws the page again around the same sections,
// which takes them out of the document and puts them back: the DevTools
// node id the click found then no longer exists, and the click fails
// before any mouse event is sent. A person sees the same button and
// clicks it; so does click, a few times at most.
func (b *tab) click(sel string) {
	b.t.Helper()
	for tries := 1; ; tries++ {
		b.waitUsable(sel)
		err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
		if err == nil {
			return
		}
		if tries < 5 && strings.Contains(err.Error(), "Could not find node with given id") {
			continue
		}
		b.t.Fatalf("click %s: %v", sel, err)
	}
}

// waitUsable waits until sel finds an element that is visible and
// enabled: one a person could press.
func (b *tab) waitUsable(sel string) {
	b.t.Helper()
	b.waitFor("a visible "+sel, fmt.Sprintf(`(() => { const el = document.querySelector(%s); return !!el && el.offsetParent !== null && !el.disabled; })()`, js(sel)))
}

// typeInto replaces the value of an input as a person would: select what
// is there and type over it, key by key.
func (b *tab) typeInto(sel, text string) {
	b.t.Helper()
	b.waitFor("a visible "+sel, fmt.Sprintf(`(() => { const el = document.querySelector(%s); return !!el && el.offsetParent !== null; })()`, js(sel)))
	b.do("type into "+sel,
		chromedp.Focus(chromedp.CSS(sel), chromedp.NodeVisible),
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%s).select()`, js(sel))),
		chromedp.SendKeys(chromedp.CSS(sel), text, chromedp.NodeVisible))
}

// eval evaluates a JavaScript expression in the page. DevTools evaluation
// is exempt from the page's CSP, so the tests can read the DOM although
// the page itself may not eval.
func eval[T any](b *tab, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitFor polls a JavaScript predicate until it holds.
func (b *tab) waitFor(what, expr string) {
	b.t.Helper()
	b.waitForThen(func() string { return what }, expr)
}

// waitForWithin is waitFor with its own deadline.
func (b *tab) waitForWithin(d time.Duration, what, expr string) {
	b.t.Helper()
	b.poll(d, func() string { return what }, expr)
}

// waitForThen is waitFor with a description made when it times out.
func (b *tab) waitForThen(what func() string, expr string) {
	b.t.Helper()
	b.poll(30*time.Second, what, expr)
}

func (b *tab) poll(d time.Duration, what func() string, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`!!(`+expr+`)`))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("timed out waiting for %s (last error: %v)", what(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// text returns the textContent of the first element sel matches ("" if none).
func (b *tab) text(sel string) string {
	b.t.Helper()
	return eval[string](b, fmt.Sprintf(`(document.querySelector(%s) || {textContent: ''}).textContent`, js(sel)))
}

// waitText waits until the element sel matches contains want in its text.
func (b *tab) waitText(sel, want string) {
	b.t.Helper()
	b.waitForThen(func() string { return fmt.Sprintf("%s to say %q (it says %q)", sel, want, b.text(sel)) },
		fmt.Sprintf(`(() => { const el = document.querySelector(%s); return !!el && el.textContent.includes(%s); })()`, js(sel), js(want)))
}

func (b *tab) count(sel string) int {
	b.t.Helper()
	return eval[int](b, fmt.Sprintf(`document.querySelectorAll(%s).length`, js(sel)))
}

// confirm waits for the confirmation dialog, checks that its text names
// want, and presses its confirm button.
func (b *tab) confirm(want string) {
	b.t.Helper()
	b.waitFor("the confirmation dialog", `document.querySelector('dialog[open]')`)
	if got := b.text("dialog[open]"); !strings.Contains(got, want) {
		b.t.Fatalf("the confirmation says %q, want it to name %q", got, want)
	}
	b.click("dialog[open] [data-confirm]")
	b.waitFor("the dialog to close", `!document.querySelector('dialog[open]')`)
}

// login opens the console and logs in with token.
func (b *tab) login(e *gw, token string) {
	b.t.Helper()
	b.open(e.admin + "/ui/")
	b.typeInto("#token", token)
	b.click("#login-submit")
	b.waitFor("the overview", `document.querySelector('#overview tr[data-rule]') && document.querySelector('#whoami')`)
}

// js quotes s as a JavaScript string literal.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
