package gateway

import (
	"fmt"
	"strings"
	"testing"
)

// TestChangeReasonBounded: every version keeps its reason, in the data
// dir or etcd, in history and diffs and notifications, so a reason is
// bounded (admin.MaxReasonBytes, 1024 bytes): a longer one, from the
// body or X-Change-Reason, is a 400 naming reason and its length, and
// nothing changes. Before, a 900 KB reason was kept in every version.
// The reason may also come as ?reason=, which rollback and resume, like
// the rest, used to ignore.
func TestChangeReasonBounded(t *testing.T) {
	e := start(t, baseConfig, "")
	e.mustPut("k", grayRule(5))
	long := strings.Repeat("r", 1025)
	refused := []struct {
		name, method, path string
		body               any
		hdr                []string
	}{
		{"PUT body", "PUT", "/api/v1/rules/k", map[string]any{"type": "gray", "gray_percent": 50, "targets": map[string]string{"gray": "gray", "stable": "stable"}, "reason": long}, nil},
		{"PUT header", "PUT", "/api/v1/rules/k", grayRule(50), []string{"X-Change-Reason", long}},
		{"PUT query", "PUT", "/api/v1/rules/k?reason=" + long, grayRule(50), nil},
		{"DELETE", "DELETE", "/api/v1/rules/k", nil, []string{"X-Change-Reason", long}},
		{"revert", "POST", "/api/v1/rules/k/revert", map[string]any{"version": 1, "reason": long}, nil},
		{"rollback", "POST", "/api/v1/rules/k/rollback", map[string]any{"reason": long}, nil},
		{"global rollback", "POST", "/api/v1/rollback", nil, []string{"X-Change-Reason", long}},
	}
	for _, tc := range refused {
		code, out := e.api(tc.method, tc.path, tc.body, tc.hdr...)
		details := fmt.Sprint(out["details"])
		if code != 400 || !strings.Contains(details, "reason") || !strings.Contains(details, "1025 bytes") {
			t.Errorf("%s with a 1025-byte reason: %d %v, want 400 naming reason and its length", tc.name, code, out)
		}
	}
	_, got := e.api("GET", "/api/v1/rules/k", nil)
	if got["version"] != float64(1) || got["gray_percent"] != float64(5) || got["rolled_back"] == true {
		t.Errorf("after the refused changes the rule is %v, want version 1 at 5%%", got)
	}
	if _, st := e.api("GET", "/api/v1/status", nil); fmt.Sprint(st["rolled_back"]) == "true" {
		t.Errorf("a refused global rollback applied: %v", st)
	}

	// At the limit, and from the query: kept as given.
	atLimit := strings.Repeat("s", 1024)
	if code, out := e.api("PUT", "/api/v1/rules/k", grayRule(10), "X-Change-Reason", atLimit); code != 200 {
		t.Fatalf("a 1024-byte reason: %d %v", code, out)
	}
	if code, out := e.api("POST", "/api/v1/rules/k/rollback?reason=gray+5xx", nil); code != 200 {
		t.Fatalf("rollback: %d %v", code, out)
	}
	if code, out := e.api("POST", "/api/v1/rules/k/resume?reason=fixed+in+v2.1", nil); code != 200 {
		t.Fatalf("resume: %d %v", code, out)
	}
	_, h := e.api("GET", "/api/v1/rules/k/history", nil)
	var reasons []string
	for _, it := range h["history"].([]any) {
		reasons = append(reasons, fmt.Sprint(it.(map[string]any)["reason"]))
	}
	want := []string{"fixed in v2.1", "gray 5xx", atLimit}
	if len(reasons) < 3 || fmt.Sprint(reasons[:3]) != fmt.Sprint(want) {
		t.Errorf("history reasons %q, want %q first", reasons, want)
	}
}

// TestRevertWithoutVersion: a revert that names no version is told that
// version is required, not that it sent 0.
func TestRevertWithoutVersion(t *testing.T) {
	e := start(t, baseConfig, "")
	e.mustPut("k", grayRule(5))
	for _, body := range []any{map[string]any{}, map[string]any{"version": nil}, map[string]any{"reason": "back"}} {
		code, out := e.api("POST", "/api/v1/rules/k/revert", body)
		details := fmt.Sprint(out["details"])
		if code != 400 || !strings.Contains(details, "version") || !strings.Contains(details, "required") || strings.Contains(details, "got 0") {
			t.Errorf("revert %v: %d %v, want 400 saying version is required", body, code, out)
		}
	}
	code, out := e.api("POST", "/api/v1/rules/k/revert", map[string]any{"version": 0})
	if code != 400 || !strings.Contains(fmt.Sprint(out["details"]), "got 0") {
		t.Errorf("revert to version 0: %d %v, want 400 naming the 0", code, out)
	}
}

// TestDeleteTakesReasonFromBody: DELETE takes its reason from a body's
// reason field, as every other change does (README "Admin API"), and a
// body that is not {"reason": ...} is a 400 naming the field, with the
// rule kept.
func TestDeleteTakesReasonFromBody(t *testing.T) {
	e := start(t, baseConfig, "")
	e.mustPut("k", grayRule(5))
	code, out := e.api("DELETE", "/api/v1/rules/k", map[string]any{"reason": "gray retired", "reasn": "typo"})
	if details := fmt.Sprint(out["details"]); code != 400 || !strings.Contains(details, "reasn") {
		t.Errorf("DELETE with an unknown body field: %d %v, want 400 naming reasn", code, out)
	}
	if code, got := e.api("GET", "/api/v1/rules/k", nil); code != 200 || got["version"] != float64(1) {
		t.Fatalf("after a refused DELETE the rule is %d %v, want version 1 kept", code, got)
	}
	if code, out := e.api("DELETE", "/api/v1/rules/k", map[string]any{"reason": "gray retired"}); code != 200 {
		t.Fatalf("DELETE: %d %v", code, out)
	}
	_, h := e.api("GET", "/api/v1/rules/k/history", nil)
	hist, _ := h["history"].([]any)
	if len(hist) == 0 || hist[0].(map[string]any)["reason"] != "gray retired" {
		t.Errorf("history after DELETE with a body reason: %v, want the deletion first with reason %q", h, "gray retired")
	}
}
