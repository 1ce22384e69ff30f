package gateway

import (
	"fmt"
	"strings"
	"testing"
)

// TestChangeQueryIsChecked: a change's query is read strictly. A
// parameter the change does not take (?dryrun=1, a typo of dry_run), one
// given twice, or a query that does not parse (?dry_run=%zz, which
// URL.Query drops) is a 400 naming it, and nothing changes. Before, the
// parameter was ignored and the PUT meant as a dry run was a real write.
func TestChangeQueryIsChecked(t *testing.T) {
	e := start(t, baseConfig, "")
	e.mustPut("k", grayRule(5))
	refused := []struct {
		name, method, path string
		body               any
		want               string // in details
	}{
		{"PUT with a typo of dry_run", "PUT", "/api/v1/rules/k?dryrun=1", grayRule(50), "dryrun unknown query parameter: PUT /api/v1/rules/{key} takes dry_run and reason"},
		{"PUT with dry-run", "PUT", "/api/v1/rules/k?dry-run=true", grayRule(50), "dry-run unknown query parameter"},
		{"PUT with dry_run twice", "PUT", "/api/v1/rules/k?dry_run=1&dry_run=0", grayRule(50), "dry_run is given 2 times"},
		{"PUT with a malformed dry_run", "PUT", "/api/v1/rules/k?dry_run=%zz", grayRule(50), `malformed query "dry_run=%zz"`},
		{"PUT with a semicolon", "PUT", "/api/v1/rules/k?dry_run=1;reason=x", grayRule(50), "malformed query"},
		{"DELETE with dry_run", "DELETE", "/api/v1/rules/k?dry_run=1", nil, "dry_run unknown query parameter: DELETE /api/v1/rules/{key} takes reason"},
		{"revert with dry_run", "POST", "/api/v1/rules/k/revert?dry_run=1", map[string]any{"version": 1}, "dry_run unknown query parameter"},
		{"rollback with dry_run", "POST", "/api/v1/rules/k/rollback?dry_run=1", nil, "dry_run unknown query parameter: POST /api/v1/rules/{key}/rollback takes reason"},
		{"global rollback with a typo", "POST", "/api/v1/rollback?resaon=x", nil, "resaon unknown query parameter"},
	}
	for _, tc := range refused {
		code, out := e.api(tc.method, tc.path, tc.body)
		var details []string
		ds, _ := out["details"].([]any)
		for _, d := range ds {
			m, _ := d.(map[string]any)
			details = append(details, fmt.Sprint(m["path"], " ", m["message"]))
		}
		if code != 400 || !strings.Contains(strings.Join(details, "\n"), tc.want) || !strings.Contains(fmt.Sprint(out["error"]), "nothing was changed") {
			t.Errorf("%s: %d %v, want 400 with %q in details", tc.name, code, out, tc.want)
		}
	}
	_, got := e.api("GET", "/api/v1/rules/k", nil)
	if got["version"] != float64(1) || got["gray_percent"] != float64(5) || got["rolled_back"] == true {
		t.Errorf("after the refused changes the rule is %v, want version 1 at 5%%", got)
	}
	if _, st := e.api("GET", "/api/v1/status", nil); fmt.Sprint(st["rolled_back"]) == "true" {
		t.Errorf("a refused global rollback applied: %v", st)
	}

	// What a change takes still works: a dry run with a reason, a PUT
	// with a reason, a resume with one; reads keep ignoring the query.
	if code, out := e.api("PUT", "/api/v1/rules/k?dry_run=1&reason=try", grayRule(50)); code != 200 || out["dry_run"] != true {
		t.Errorf("PUT ?dry_run=1&reason=try: %d %v", code, out)
	}
	if code, out := e.api("PUT", "/api/v1/rules/k?reason=ramp", grayRule(20)); code != 200 || out["version"] != float64(2) {
		t.Errorf("PUT ?reason=ramp: %d %v", code, out)
	}
	if code, out := e.api("POST", "/api/v1/rules/k/rollback?reason=5xx", nil); code != 200 || out["rolled_back"] != true {
		t.Errorf("rollback ?reason=5xx: %d %v", code, out)
	}
	if code, out := e.api("GET", "/api/v1/rules/k?x=1", nil); code != 200 || out["gray_percent"] != float64(20) {
		t.Errorf("GET ?x=1: %d %v", code, out)
	}
}
