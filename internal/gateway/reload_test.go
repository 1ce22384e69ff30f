package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/graygate/graygate/internal/config"
)

// TestConfigReload swaps the default upstream by reloading the config, and
// checks that a bad config keeps the old one serving and shows its error.
func TestConfigReload(t *testing.T) {
	e := start(t, baseConfig, "")
	if a, _ := e.get("/", "X-User-Id", "1"); a.backend != "stable" {
		t.Fatalf("before reload: %+v", a)
	}
	next := strings.Replace(baseConfig, "default_upstream: stable", "default_upstream: b", 1)
	for name, addr := range e.backends {
		next = strings.ReplaceAll(next, "{{"+name+"}}", addr)
	}
	load := func(y string) func() (*config.Config, error) {
		return func() (*config.Config, error) {
			c, err := config.Parse([]byte(y))
			if err == nil {
				c.DataDir = e.gw.cfg.DataDir
			}
			return c, err
		}
	}
	if err := e.gw.ReloadConfigFile(context.Background(), load(next)); err != nil {
		t.Fatal(err)
	}
	if a, _ := e.get("/", "X-User-Id", "1"); a.backend != "b" {
		t.Errorf("after reload the default upstream is %q, want b", a.backend)
	}
	bad := next + "\nunknown_key: 1\n"
	if err := e.gw.ReloadConfigFile(context.Background(), load(bad)); err == nil {
		t.Fatal("bad config accepted")
	}
	if a, _ := e.get("/", "X-User-Id", "1"); a.backend != "b" {
		t.Errorf("a bad config changed what serves: %q", a.backend)
	}
	_, st := e.api("GET", "/api/v1/status", nil)
	if !strings.Contains(st["last_error"].(string), "unknown_key: unknown field") || st["last_reload_result"] != "error" {
		t.Errorf("status = %v", st)
	}
	// A config that drops an upstream a stored rule needs is refused whole.
	e.mustPut("g", grayRule(100))
	noGray := strings.Replace(next, "  gray:", "  grey:", 1)
	err := e.gw.ReloadConfigFile(context.Background(), load(noGray))
	if err == nil || !strings.Contains(err.Error(), `rule "g" would stop compiling`) {
		t.Errorf("reload without the gray upstream = %v", err)
	}
	if a, _ := e.get("/", "X-User-Id", "1"); a.backend != "gray" || a.rule != "g" {
		t.Errorf("rule g stopped serving: %+v", a)
	}
	if st := e.gw.Status(); len(st.BrokenRules) != 0 || st.LastResult != "error" {
		t.Errorf("status after a refused reload = %+v", st)
	}
}
