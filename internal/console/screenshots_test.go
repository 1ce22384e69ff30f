package console_test

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

var screenshotDir = flag.String("screenshots", "", "write the console's screenshots (the README's) to `DIR`")

// TestScreenshots walks the main screens with live traffic flowing, checks
// what each shows, and captures it. With -screenshots DIR the PNGs are
// written there (go test ./internal/console -run TestScreenshots
// -screenshots ../../docs), else to a temporary directory.
func TestScreenshots(t *testing.T) {
	b := newTab(t)
	e := startGateway(t, nil)
	dir := *screenshotDir
	if dir == "" {
		dir = t.TempDir()
	}
	shot := func(name string) {
		t.Helper()
		buf, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// shotOf captures one element of the page.
	shotOf := func(sel, name string) {
		t.Helper()
		b.do("scroll to "+sel, chromedp.ScrollIntoView(chromedp.CSS(sel)))
		buf, err := chromedp.Run(b.ctx, chromedp.Screenshot(chromedp.CSS(sel), chromedp.NodeVisible))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Traffic for the live columns, in waves, with a few failures on gray:
	// bounded in time and count.
	stop := make(chan struct{})
	var failing atomic.Bool // whether every 40th request fails on gray
	failing.Store(true)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		for i := 0; i < 30000; i++ {
			wave := 2 + 4*(1+math.Sin(time.Since(start).Seconds()/2))
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(wave) * time.Millisecond):
			}
			uid := fmt.Sprint(i % 97)
			if i%40 == 0 && failing.Load() {
				e.get("/api/user/profile", "10001", "X-Test-Fail", "1")
			} else if !failing.Load() {
				// Whitelisted: gray at any percent, so the rollout's
				// analysis has gray requests to measure, however slowly
				// a loaded machine runs this loop.
				e.get("/api/user/profile", "10001")
			}
			e.get("/api/user/profile", uid)
			if i%2 == 0 {
				e.get("/shop/cart", uid)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	b.login(e, adminToken)
	// Seconds with traffic in the trend of every group: a few for the
	// test, most of the minute for the README's picture.
	seconds := 3
	if *screenshotDir != "" {
		seconds = 40
	}
	b.waitForWithin(time.Duration(seconds+30)*time.Second, "rates and trends for every group", fmt.Sprintf(`['user_center_v2|gray', 'checkout_button|A', 'checkout_button|B'].every((k) => {
		const [r, g] = k.split('|');
		const row = document.querySelector('tr[data-rule="' + r + '"] tr[data-group="' + g + '"]');
		const line = row && row.querySelector('polyline');
		return line && row.querySelector('[data-stat="rps"]').textContent !== '0/s' &&
			line.getAttribute('points').split(' ').filter((p) => !p.endsWith(',21.0')).length >= %d;
	})`, seconds))
	b.waitText(`tr[data-rule="user_center_v2"] tr[data-group="gray"] [data-stat="error_rate"]`, "%")
	shot("console-overview.png")

	b.click("#rollback-all")
	b.waitFor("the confirmation", `document.querySelector('dialog[open]')`)
	shot("console-rollback-confirm.png")
	b.click("dialog[open] [data-cancel]")

	b.open(e.admin + "/ui/#/rules/user_center_v2")
	b.typeInto(`#editor input[data-path="gray_percent"]`, "120")
	b.waitText(`#editor [data-error-for="gray_percent"]`, "must be 0..100, got 120")
	b.waitFor("live traffic on the rule page", `document.querySelector('#rule-live table')`)
	shot("console-rule-invalid.png")
	b.typeInto(`#editor input[data-path="gray_percent"]`, "20")
	b.waitText("#validation", "valid")
	b.click("#review")
	b.typeInto("#reason", "ramp to 20%")
	b.waitText("#review-diff", "gray_percent: 30 → 20")
	b.do("scroll to the review", chromedp.ScrollIntoView(chromedp.CSS("#review-panel")))
	shot("console-rule-review.png")

	b.open(e.admin + "/ui/#/explain")
	b.typeInto("#x-path", "/api/user/profile")
	b.typeInto("#x-user", "42")
	b.typeInto("#x-headers", "User-Agent: Mozilla/5.0")
	b.click("#x-submit")
	b.waitText("#x-decision", "user “42”")
	shot("console-explain.png")

	b.open(e.admin + "/ui/#/status")
	b.waitText("#st-version", version)
	shot("console-status.png")

	// A rollout that ramped to 25% through a passed analysis and waits
	// for promote; the traffic above, without its failures, feeds its
	// analysis.
	failing.Store(false)
	e.putRule("user_center_v2", func(r map[string]any) {
		r["gray_percent"] = 0
		r["rollout"] = map[string]any{
			"steps": []any{
				map[string]any{"percent": 5}, map[string]any{"analysis": "health"}, map[string]any{"percent": 25},
				map[string]any{"pause": map[string]any{}}, map[string]any{"percent": 100},
			},
			"analyses": map[string]any{"health": map[string]any{"interval": "2s", "count": 3, "inconclusive_limit": 2, "checks": []any{
				map[string]any{"metric": "error_rate", "max": 0.01, "min_requests": 5},
				map[string]any{"metric": "p99_ms", "max": 500, "min_requests": 5},
			}}},
		}
	})
	e.waitRollout("user_center_v2", "paused", 3)
	b.open(e.admin + "/ui/#/rules/user_center_v2")
	b.waitText(`#rollout-steps li[data-step="3"][data-place="current"]`, "pause until promoted")
	// Measured: the analysis passed, though its last measurement may be
	// one of the inconclusive ones it allows when the loaded machine sent
	// fewer than min_requests in an interval.
	b.waitFor("measured checks", `document.querySelector('#rollout-checks tr[data-check="health/error_rate"]:not([data-result="none"])')`)
	b.waitFor("the rollout's events", `document.querySelectorAll('#rollout-events li').length >= 4`)
	shotOf("#rollout", "console-rollout.png")

	// An experiment with a conversion metric: B's users buy more often.
	e.putRule("checkout_button", metricRule)
	for u := range 600 {
		uid := fmt.Sprintf("shopper-%d", u)
		a := e.get("/shop/cart", uid)
		if (a.group == "B" && u%3 == 0) || (a.group == "A" && u%8 == 0) {
			e.send("POST", "/shop/buy", uid)
		}
	}
	b.open(e.admin + "/ui/#/rules/checkout_button")
	b.waitFor("judged results", `document.querySelector('#srm[data-srm="ok"]') &&
		/^\d/.test(document.querySelector('#experiment table[data-metric="purchase"] tr[data-group="B"] [data-col="p"]').textContent)`)
	shotOf("#experiment", "console-experiment.png")
	t.Logf("screenshots in %s", dir)
}
