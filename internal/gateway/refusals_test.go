package gateway

import (
	"fmt"
	"strings"
	"testing"
)

// TestWriteRefusalsSayNothingChanged: every write route's refusal of a
// malformed request (a bad If-Match, an unknown body field, a revert to
// nothing, an option the action does not take) says that nothing was
// changed and names what was wrong, and nothing was: the rule keeps its
// version, history and rollback state, and the global flag stays off.
// Through the real admin listener.
func TestWriteRefusalsSayNothingChanged(t *testing.T) {
	e := start(t, baseConfig, "")
	e.mustPut("k", grayRule(5))
	e.mustPut("k", grayRule(10)) // version 2
	e.mustPut("gone", grayRule(5))
	if code, out := e.api("DELETE", "/api/v1/rules/gone", nil); code != 200 {
		t.Fatalf("DELETE gone: %d %v", code, out)
	}
	refused := []struct {
		name, method, path string
		body               any
		hdr                []string
		names              string // in the error or its details
	}{
		{"PUT with a bad If-Match", "PUT", "/api/v1/rules/k", grayRule(50), []string{"If-Match", "two"}, "If-Match"},
		{"DELETE with a bad If-Match", "DELETE", "/api/v1/rules/k", nil, []string{"If-Match", "-1"}, "If-Match"},
		{"DELETE with an unknown field", "DELETE", "/api/v1/rules/k", map[string]any{"reasn": "x"}, nil, "reasn"},
		{"revert with a bad If-Match", "POST", "/api/v1/rules/k/revert", map[string]any{"version": 1}, []string{"If-Match", "v1"}, "If-Match"},
		{"revert with an unknown field", "POST", "/api/v1/rules/k/revert", map[string]any{"version": 1, "force": true}, nil, "force"},
		{"revert without a version", "POST", "/api/v1/rules/k/revert", map[string]any{}, nil, "version"},
		{"revert to a deletion", "POST", "/api/v1/rules/gone/revert", map[string]any{"version": 2}, nil, "deletion"},
		{"rollback with a bad If-Match", "POST", "/api/v1/rules/k/rollback", nil, []string{"If-Match", "x"}, "If-Match"},
		{"rollback with an unknown field", "POST", "/api/v1/rules/k/rollback", map[string]any{"why": "x"}, nil, "why"},
		{"global rollback with a version", "POST", "/api/v1/rollback", nil, []string{"If-Match", "2"}, "If-Match"},
		{"global rollback with an unknown field", "POST", "/api/v1/rollback", map[string]any{"all": true}, nil, "all"},
		{"rollout action with If-Match 0", "POST", "/api/v1/rules/k/rollout/pause", nil, []string{"If-Match", "0"}, "If-Match"},
		{"rollout pause with full", "POST", "/api/v1/rules/k/rollout/pause", map[string]any{"full": true}, nil, "full"},
		{"rollout action with an unknown field", "POST", "/api/v1/rules/k/rollout/promote", map[string]any{"step": 2}, nil, "step"},
	}
	for _, tc := range refused {
		code, out := e.api(tc.method, tc.path, tc.body, tc.hdr...)
		msg, all := fmt.Sprint(out["error"]), fmt.Sprint(out)
		if code != 400 || !strings.Contains(msg, "nothing was changed") && !strings.Contains(msg, "was not changed") || !strings.Contains(all, tc.names) {
			t.Errorf("%s: %d %v, want 400 saying nothing was changed and naming %s", tc.name, code, out, tc.names)
		}
	}
	_, got := e.api("GET", "/api/v1/rules/k", nil)
	if got["version"] != float64(2) || got["gray_percent"] != float64(10) || got["rolled_back"] == true {
		t.Errorf("after the refusals the rule is %v, want version 2 at 10%%, not rolled back", got)
	}
	_, h := e.api("GET", "/api/v1/rules/k/history", nil)
	if hist, _ := h["history"].([]any); len(hist) != 2 {
		t.Errorf("after the refusals the history has %d versions, want 2: %v", len(hist), h)
	}
	if code, _ := e.api("GET", "/api/v1/rules/gone", nil); code != 404 {
		t.Errorf("a refused revert brought back the deleted rule: %d", code)
	}
	if _, st := e.api("GET", "/api/v1/status", nil); fmt.Sprint(st["rolled_back"]) == "true" {
		t.Errorf("a refused global rollback applied: %v", st)
	}
}
