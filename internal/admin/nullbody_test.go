package admin

import (
	"net/http"
	"strings"
	"testing"
)

// TestPutNullBody: a PUT whose body is the JSON literal null gets a 400
// that says a rule must be an object, with or without dry_run, and the
// rule that was stored is untouched. Before, null decoded into a nil map
// and the handler panicked: the connection was closed with no answer.
func TestPutNullBody(t *testing.T) {
	a := startAPI(t)
	if code, _, body := a.do("PUT", "/api/v1/rules/k", grayBody("5")); code != http.StatusCreated {
		t.Fatalf("PUT = %d %s", code, body)
	}
	for _, path := range []string{"/api/v1/rules/k", "/api/v1/rules/k?dry_run=1", "/api/v1/rules/new"} {
		for _, body := range []string{"null", " null\n"} {
			code, hdr, got := a.do("PUT", path, body, "Content-Type", "application/json")
			if code != http.StatusBadRequest || !strings.Contains(got, "a rule must be a JSON object, got null") {
				t.Errorf("PUT %s %q = %d %s, want a 400 saying a rule is an object", path, body, code, got)
			}
			if ct := hdr.Get("Content-Type"); ct != "application/json" {
				t.Errorf("PUT %s %q: Content-Type %q, want application/json", path, body, ct)
			}
		}
	}
	if r := a.rule("k"); r["gray_percent"] != float64(5) || r["version"] != float64(1) {
		t.Errorf("after the refused PUTs, rule k = %v, want version 1 at 5%%", r)
	}
	if code, _, body := a.do("GET", "/api/v1/rules/new", ""); code != http.StatusNotFound {
		t.Errorf("after a refused PUT of null, GET new = %d %s, want 404", code, body)
	}
}
