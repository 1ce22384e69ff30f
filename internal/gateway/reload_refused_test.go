package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/config"
)

// TestReloadErrorClearedByFix: a refused reload keeps the old config
// serving and shows its error, naming the field and its value, in the
// status; the reload that fixes the file clears it; the same file again
// changes nothing.
func TestReloadErrorClearedByFix(t *testing.T) {
	e := start(t, baseConfig, "")
	fixed := strings.Replace(baseConfig, "default_upstream: stable", "default_upstream: b", 1)
	err := e.reload(fixed + "proxy: {max_header_bytes: 10}\n")
	if err == nil {
		t.Fatal("a max_header_bytes of 10 was accepted")
	}
	if a, _ := e.get("/", "X-User-Id", "1"); a.backend != "stable" || a.status != 200 {
		t.Errorf("the refused config serves: %+v", a)
	}
	_, st := e.api("GET", "/api/v1/status", nil)
	if msg, _ := st["last_error"].(string); !strings.Contains(msg, "proxy.max_header_bytes") || !strings.Contains(msg, "got 10") || st["last_reload_result"] != "error" {
		t.Errorf("status after the refused reload: last_error %q, last_reload_result %q", st["last_error"], st["last_reload_result"])
	}
	for i := 0; i < 2; i++ {
		if err := e.reload(fixed); err != nil {
			t.Fatal(err)
		}
		if a, _ := e.get("/", "X-User-Id", "1"); a.backend != "b" || a.status != 200 {
			t.Errorf("reload %d of the fixed file: %+v", i+1, a)
		}
		_, st = e.api("GET", "/api/v1/status", nil)
		if _, has := st["last_error"]; has || st["last_reload_result"] != "ok" || st["last_error_at"] != nil {
			t.Errorf("reload %d of the fixed file: last_error %q (at %v), last_reload_result %q", i+1, st["last_error"], st["last_error_at"], st["last_reload_result"])
		}
	}
}

// TestRefusedReloadChangesNothing: a config refused because a stored rule
// would stop compiling under it changes nothing that serves, not even the
// state the running pools and rules share with the ones a reload builds:
// an open breaker stays open (in the status too), a pool's max_concurrent
// and its health-check path keep their running values.
func TestRefusedReloadChangesNothing(t *testing.T) {
	f := &flaky{}
	grayAddr := startFlaky(t, f)
	var (
		mu      sync.Mutex
		probed  []string
		inSlow  atomic.Int32
		release = make(chan struct{})
	)
	stable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/health"):
			mu.Lock()
			probed = append(probed, r.URL.Path)
			mu.Unlock()
		case r.URL.Path == "/slow":
			inSlow.Add(1)
			<-release
		}
		w.Header().Set("X-Backend", "stable")
		fmt.Fprint(w, "stable")
	}))
	t.Cleanup(stable.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	running := strings.NewReplacer("{{gray}}", grayAddr, "{{stable}}", strings.TrimPrefix(stable.URL, "http://")).Replace(baseConfig)
	running = strings.Replace(running, `}]}`+"\n  gray:", `}], max_concurrent: 2, active_health: {path: /health-running, interval: 1h}}`+"\n  gray:", 1)
	if !strings.Contains(running, "max_concurrent: 2") {
		t.Fatalf("config not rewritten:\n%s", running)
	}
	e := start(t, running, "")
	e.mustPut("canary", map[string]any{"type": "gray", "gray_percent": 100, "targets": grayRule(100).Targets,
		"breaker": map[string]any{"window": "60s", "min_requests": 10, "open_for": "1h"}})
	f.mode.Store(3)
	for i := 0; i < 200 && breakerState(e) != "open"; i++ {
		e.get("/", "X-User-Id", fmt.Sprint(i))
	}
	if breakerState(e) != "open" {
		t.Fatal("the breaker did not open")
	}

	// The gray upstream the rule needs is gone: refused, whatever else
	// the file changes.
	refused := strings.Replace(running, "max_concurrent: 2", "max_concurrent: 1", 1)
	refused = strings.Replace(refused, "/health-running", "/health-refused", 1)
	refused = strings.Replace(refused, "  gray:", "  grey:", 1)
	if err := e.reload(refused); err == nil || !strings.Contains(err.Error(), `rule "canary" would stop compiling`) {
		t.Fatalf("reload without the gray upstream = %v", err)
	}
	if got := breakerState(e); got != "open" {
		t.Errorf("after the refused reload the status says the breaker is %q, want open", got)
	}
	// A rule write publishes a new snapshot with the breakers the set holds.
	e.mustPut("other", map[string]any{"type": "gray", "gray_percent": 0, "conditions": map[string]any{"path_prefix": []string{"/other/"}}, "targets": grayRule(0).Targets})
	for i := 0; i < 5; i++ {
		if a, _ := e.get("/", "X-User-Id", fmt.Sprint(i)); a.degraded != "breaker" || a.backend != "stable" {
			t.Fatalf("after the refused reload and a rule write: %+v, want the open breaker's stable", a)
		}
	}
	if got := breakerState(e); got != "open" {
		t.Errorf("after a rule write the breaker is %q, want open", got)
	}

	// max_concurrent is still 2: two requests in flight at once are served.
	codes := make(chan int, 2)
	for i := 0; i < 2; i++ {
		go func() {
			resp, err := e.client.Get(e.data + "/slow")
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for inSlow.Load() < 2 && len(codes) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	for i := 0; i < 2; i++ {
		if c := <-codes; c != 200 {
			t.Errorf("a request under max_concurrent 2 got %d (the refused config's max_concurrent 1 applied)", c)
		}
	}

	// The health checks still probe the running path: a reload that is
	// taken changes it, and the probe loop (one request at a time) sees
	// /health-next after whatever the refused reload made it probe.
	next := strings.Replace(running, "/health-running", "/health-next", 1)
	if err := e.reload(next); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a probe of /health-next", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(strings.Join(probed, " "), "/health-next")
	})
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(probed, " "); strings.Contains(got, "/health-refused") {
		t.Errorf("the refused config's health check ran: probes %s", got)
	}
}

// TestWatchedConfigSavedInTwoWrites: the config file of a running gateway
// is saved as a truncation, a pause, then the new contents. Requests keep
// being served by the running config until the new one applies: the empty
// file between (a config with no upstreams) never does.
func TestWatchedConfigSavedInTwoWrites(t *testing.T) {
	e := start(t, baseConfig, "")
	path := filepath.Join(t.TempDir(), "graygate.yaml")
	render := func(y string) []byte {
		for name, addr := range e.backends {
			y = strings.ReplaceAll(y, "{{"+name+"}}", addr)
		}
		return []byte(y + "data_dir: " + e.gw.cfg.DataDir + "\n")
	}
	if err := os.WriteFile(path, render(baseConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var reloads atomic.Int32
	const debounce = 20 * time.Millisecond
	go config.Watch(ctx, path, debounce, func() {
		e.gw.ReloadConfigFile(ctx, func() (*config.Config, error) { return config.Load(path) })
		reloads.Add(1)
	})
	// Until the watch is up, rewrite the file (same config, another
	// name) and wait for its reload.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; reloads.Load() == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatal("the watch never reloaded")
		}
		os.WriteFile(path, render(baseConfig+fmt.Sprintf("name: gw-%d\n", i)), 0o644)
		for end := time.Now().Add(20 * debounce); reloads.Load() == 0 && time.Now().Before(end); {
			time.Sleep(5 * time.Millisecond)
		}
	}

	var bad atomic.Int64
	stop := sync.OnceFunc(underLoad(2, func(w, n int) {
		if a, err := e.get("/", "X-User-Id", fmt.Sprint(n)); err != nil || a.status != 200 {
			if bad.Add(1) == 1 {
				t.Errorf("a request failed while the file was saved: %+v %v", a, err)
			}
		}
	}))
	defer stop()
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The writer pauses well past the debounce between its two writes.
	time.Sleep(10 * debounce)
	if _, err := fh.Write(render(strings.Replace(baseConfig, "default_upstream: stable", "default_upstream: b", 1))); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	waitFor(t, "the new default upstream", 10*time.Second, func() bool {
		a, _ := e.get("/", "X-User-Id", "1")
		return a.backend == "b"
	})
	stop()
	if n := bad.Load(); n > 0 {
		t.Errorf("%d requests failed while the file was saved in two writes", n)
	}
	if st := e.gw.Status(); st.LastError != "" || st.LastResult != "ok" {
		t.Errorf("status: %q %q", st.LastResult, st.LastError)
	}
}
