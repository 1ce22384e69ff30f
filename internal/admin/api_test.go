package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/upstream"
)

const (
	testAdminToken  = "api-admin-token"
	testViewerToken = "api-viewer-token"
	testEventsToken = "api-events-token"
)

// testAPI is the admin API over an embedded file store, served on a real
// loopback listener. Its Commit writes without building a snapshot: these
// tests are about the HTTP contract, not about serving.
type testAPI struct {
	t   *testing.T
	url string
	st  *store.FileStore
}

func startAPI(t *testing.T) *testAPI {
	t.Helper()
	return startAPIWith(t, nil)
}

// startAPIWith is startAPI with its Options adjusted by adjust, unless nil.
func startAPIWith(t *testing.T, adjust func(*Options)) *testAPI {
	t.Helper()
	st, err := store.OpenFile(t.TempDir(), store.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	reg := upstream.NewRegistry(map[string]*upstream.Pool{
		"stable": upstream.NewPool("stable", []*upstream.Instance{{Addr: "127.0.0.1:1"}}),
		"gray":   upstream.NewPool("gray", []*upstream.Instance{{Addr: "127.0.0.1:2"}}),
	})
	env := rule.Env{Resolve: reg.Resolve}
	snap, err := router.Build(router.Input{})
	if err != nil {
		t.Fatal(err)
	}
	rt := router.New(snap)
	opts := Options{
		Store:   st,
		Router:  rt,
		View:    dataPlane(t, rt).View,
		Compile: func(r rule.Rule) (*rule.Compiled, error) { return rule.Compile(r, env) },
		Commit: func(ctx context.Context, _ Change, write func(context.Context) (int64, error)) error {
			if write == nil {
				return nil
			}
			_, err := write(ctx)
			return err
		},
		Status: func() any { return map[string]any{} },
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "graygate_up 1\n")
		}),
		Tokens: []Token{
			{Name: "ops", Value: testAdminToken, Role: RoleAdmin},
			{Name: "dash", Value: testViewerToken, Role: RoleViewer},
			{Name: "app", Value: testEventsToken, Role: RoleEvents},
		},
	}
	if adjust != nil {
		adjust(&opts)
	}
	srv := httptest.NewServer(New(opts))
	t.Cleanup(srv.Close)
	return &testAPI{t: t, url: srv.URL, st: st}
}

// do sends one request as the admin, with header name/value pairs, and
// returns the status, the headers and the body. It does not follow
// redirects: the API answers none, and one followed would hide it.
func (a *testAPI) do(method, path, body string, hdr ...string) (int, http.Header, string) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.url+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	client := &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// rule returns rule key as the API shows it.
func (a *testAPI) rule(key string) map[string]any {
	a.t.Helper()
	code, _, body := a.do("GET", "/api/v1/rules/"+key, "")
	if code != http.StatusOK {
		a.t.Fatalf("GET rule %s = %d %s", key, code, body)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		a.t.Fatal(err)
	}
	return m
}

func grayBody(percent string) string {
	return `{"type":"gray","gray_percent":` + percent + `,"targets":{"gray":"gray","stable":"stable"}}`
}

// TestRevertIfMatch: a revert with If-Match is compare-and-set, as PUT is:
// a stale version is a 409 that changes nothing, "*" needs the rule to
// exist (so a rule deleted since is not brought back), and a malformed
// value is a 400, never an unconditional write.
func TestRevertIfMatch(t *testing.T) {
	a := startAPI(t)
	for _, p := range []string{"5", "20", "40"} { // versions 1, 2, 3
		if code, _, body := a.do("PUT", "/api/v1/rules/k", grayBody(p)); code/100 != 2 {
			t.Fatalf("PUT %s%% = %d %s", p, code, body)
		}
	}
	tests := []struct {
		name, ifMatch string
		code          int
		msg           string
	}{
		{"stale", "2", http.StatusConflict, "version is 3"},
		{"only if absent", "0", http.StatusConflict, "conflict"},
		{"malformed", "garbage", http.StatusBadRequest, `If-Match must be a rule version number, got \"garbage\"`},
	}
	for _, tt := range tests {
		code, _, body := a.do("POST", "/api/v1/rules/k/revert", `{"version":1}`, "If-Match", tt.ifMatch)
		if code != tt.code || !strings.Contains(body, tt.msg) {
			t.Errorf("%s: revert with If-Match %q = %d %s, want %d %q", tt.name, tt.ifMatch, code, body, tt.code, tt.msg)
		}
		if r := a.rule("k"); r["version"] != 3.0 || r["gray_percent"] != 40.0 {
			t.Fatalf("%s: after a refused revert the rule is %v, want version 3 at 40%%", tt.name, r)
		}
	}

	code, hdr, body := a.do("POST", "/api/v1/rules/k/revert", `{"version":1}`, "If-Match", `"3"`)
	if code != http.StatusOK || !strings.Contains(body, `"gray_percent": 5`) || hdr.Get("ETag") != `"4"` {
		t.Fatalf("revert with the current version = %d (ETag %s) %s, want 200 at 5%% with ETag \"4\"", code, hdr.Get("ETag"), body)
	}
	code, _, body = a.do("POST", "/api/v1/rules/k/revert", `{"version":2}`, "If-Match", "*")
	if code != http.StatusOK || !strings.Contains(body, `"version": 5`) {
		t.Fatalf("revert with If-Match * = %d %s, want 200 as version 5", code, body)
	}

	// Someone deletes the rule; a revert made against what was seen
	// before must not bring it back.
	if code, _, body := a.do("DELETE", "/api/v1/rules/k", ""); code != http.StatusOK {
		t.Fatalf("DELETE = %d %s", code, body)
	}
	for _, im := range []string{"5", "*"} {
		code, _, body := a.do("POST", "/api/v1/rules/k/revert", `{"version":1}`, "If-Match", im)
		if code != http.StatusConflict {
			t.Errorf("revert of a deleted rule with If-Match %q = %d %s, want 409", im, code, body)
		}
		if code, _, body := a.do("GET", "/api/v1/rules/k", ""); code != http.StatusNotFound {
			t.Fatalf("after a refused revert, GET = %d %s: the deleted rule came back", code, body)
		}
	}
	// Without If-Match a revert still restores a deleted rule.
	if code, _, body := a.do("POST", "/api/v1/rules/k/revert", `{"version":1}`); code != http.StatusOK {
		t.Fatalf("unconditional revert of a deleted rule = %d %s", code, body)
	}
}

// TestRuleETag: every answer that shows one rule carries its version as
// the ETag, which If-Match then takes back.
func TestRuleETag(t *testing.T) {
	a := startAPI(t)
	if code, hdr, body := a.do("PUT", "/api/v1/rules/k", grayBody("5")); code != http.StatusCreated || hdr.Get("ETag") != `"1"` {
		t.Fatalf("PUT = %d (ETag %q) %s", code, hdr.Get("ETag"), body)
	}
	code, hdr, body := a.do("GET", "/api/v1/rules/k", "")
	if code != http.StatusOK || hdr.Get("ETag") != `"1"` {
		t.Fatalf("GET = %d (ETag %q) %s, want ETag \"1\"", code, hdr.Get("ETag"), body)
	}
	if code, hdr, body := a.do("PUT", "/api/v1/rules/k", grayBody("10"), "If-Match", hdr.Get("ETag")); code != http.StatusOK || hdr.Get("ETag") != `"2"` {
		t.Fatalf("PUT with the GET's ETag as If-Match = %d (ETag %q) %s", code, hdr.Get("ETag"), body)
	}
	if code, hdr, body := a.do("POST", "/api/v1/rules/k/rollback", ""); code != http.StatusOK || hdr.Get("ETag") != `"3"` {
		t.Fatalf("rollback = %d (ETag %q) %s, want ETag \"3\"", code, hdr.Get("ETag"), body)
	}
}

// TestDuplicateKeys: a member name given twice in one object of a request
// body is a 400 naming its path, and nothing is changed; encoding/json
// would silently take the last value.
func TestDuplicateKeys(t *testing.T) {
	a := startAPI(t)
	for _, p := range []string{"5", "20"} {
		if code, _, body := a.do("PUT", "/api/v1/rules/k", grayBody(p)); code/100 != 2 {
			t.Fatalf("PUT %s%% = %d %s", p, code, body)
		}
	}
	tests := []struct {
		name, method, path, body string
		details                  []string
	}{
		{"rule", "PUT", "/api/v1/rules/k",
			`{"type":"gray","gray_percent":5,"gray_percent":50,"targets":{"gray":"gray","stable":"stable"}}`,
			[]string{`gray_percent: duplicate key`}},
		{"nested and with other problems", "PUT", "/api/v1/rules/k",
			`{"type":"gray","gray_percent":5,"targets":{"gray":"gray","stable":"stable","stable":"gray"},"white_list":[{"a":1,"a":2}]}`,
			[]string{`targets.stable: duplicate key`, `white_list[0]: expected`}},
		{"dry run", "PUT", "/api/v1/rules/k?dry_run=1",
			`{"type":"gray","gray_percent":5,"gray_percent":50,"targets":{"gray":"gray","stable":"stable"}}`,
			[]string{`gray_percent: duplicate key`}},
		{"revert", "POST", "/api/v1/rules/k/revert", `{"version":1,"version":2}`, []string{`version: duplicate key`}},
		{"rollback", "POST", "/api/v1/rules/k/rollback", `{"reason":"a","reason":"b"}`, []string{`reason: duplicate key`}},
		{"global rollback", "POST", "/api/v1/rollback", `{"reason":"a","reason":"b"}`, []string{`reason: duplicate key`}},
		{"explain", "POST", "/api/v1/explain", `{"path":"/","headers":{"X-User-Id":"1","x-user-id":"3","X-User-Id":"2"}}`,
			[]string{`headers.X-User-Id: duplicate key`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, body := a.do(tt.method, tt.path, tt.body)
			if code != http.StatusBadRequest {
				t.Fatalf("%s %s %s = %d %s, want 400", tt.method, tt.path, tt.body, code, body)
			}
			var eb errorBody
			if err := json.Unmarshal([]byte(body), &eb); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range eb.Details {
				got = append(got, d.Path+": "+d.Message)
			}
			for _, want := range tt.details {
				found := false
				for _, g := range got {
					found = found || strings.HasPrefix(g, want)
				}
				if !found {
					t.Errorf("details %q lack %q", got, want)
				}
			}
			if r := a.rule("k"); r["version"] != 2.0 || r["gray_percent"] != 20.0 || r["rolled_back"] != false {
				t.Errorf("after a refused request the rule is %v, want version 2 at 20%%, not rolled back", r)
			}
		})
	}
}

// TestRuleBodyKeyType: a key that is not a string is named, not ignored.
func TestRuleBodyKeyType(t *testing.T) {
	a := startAPI(t)
	code, _, body := a.do("PUT", "/api/v1/rules/k", `{"key":5,"type":"gray","gray_percent":5,"targets":{"gray":"gray","stable":"stable"}}`)
	if code != http.StatusBadRequest || !strings.Contains(body, `"path": "key"`) || !strings.Contains(body, "expected a string, got 5") {
		t.Fatalf("PUT with key 5 = %d %s, want a 400 naming key and its value", code, body)
	}
	if code, _, body := a.do("GET", "/api/v1/rules/k", ""); code != http.StatusNotFound {
		t.Errorf("after a refused PUT, GET = %d %s", code, body)
	}
}

// TestInvalidKeyIsOneAnswer: every endpoint that names a rule answers a
// malformed key the same way, a 400 whose details name the key and the
// form it must have, before it looks at anything else (a revert's body,
// the store). The global rollback flag's history is not a malformed key.
func TestInvalidKeyIsOneAnswer(t *testing.T) {
	a := startAPI(t)
	for _, ep := range []struct{ method, path, body string }{
		{"GET", "/api/v1/rules/bad%20key", ""},
		{"PUT", "/api/v1/rules/bad%20key", grayBody("5")},
		{"DELETE", "/api/v1/rules/bad%20key", ""},
		{"GET", "/api/v1/rules/bad%20key/history", ""},
		{"POST", "/api/v1/rules/bad%20key/revert", `{}`},
		{"POST", "/api/v1/rules/bad%20key/rollback", ""},
		{"POST", "/api/v1/rules/bad%20key/resume", ""},
		{"POST", "/api/v1/rules/_x/rollback", ""},
		// Escaped slashes are part of the key, as ServeMux routes them:
		// never a path to clean into another rule's ("/api/v1/rules/b").
		{"DELETE", "/api/v1/rules/a%2F..%2Fb", ""},
		{"GET", "/api/v1/rules/%2e%2e/history", ""},
	} {
		code, _, body := a.do(ep.method, ep.path, ep.body)
		var out struct {
			Error   string `json:"error"`
			Details []struct{ Path, Message string }
		}
		_ = json.Unmarshal([]byte(body), &out)
		if code != http.StatusBadRequest || !strings.Contains(out.Error, "invalid rule key") || len(out.Details) != 1 ||
			out.Details[0].Path != "key" || !strings.Contains(out.Details[0].Message, "must match ^[A-Za-z0-9]") {
			t.Errorf("%s %s = %d %s, want a 400 naming the key", ep.method, ep.path, code, body)
		}
	}
	if code, _, body := a.do("GET", "/api/v1/rules/_global/history", ""); code == http.StatusBadRequest {
		t.Errorf("the global flag's history = %d %s", code, body)
	}
}

// TestNonCanonicalPath: a path of the API with an empty, "." or ".."
// segment, or one that cleans into the API, gets a JSON 404 naming the
// canonical path, for reads and writes alike, never ServeMux's redirect
// with an HTML body; and nothing is written. /api itself is a JSON 404
// too. The paths outside the API keep ServeMux's behaviour.
func TestNonCanonicalPath(t *testing.T) {
	a := startAPI(t)
	for _, ep := range []struct{ method, path, canonical string }{
		{"GET", "/api//v1/rules", "/api/v1/rules"},
		{"GET", "/api/v1/./rules", "/api/v1/rules"},
		{"GET", "/api/v1/x/../rules", "/api/v1/rules"},
		{"GET", "//api/v1/rules", "/api/v1/rules"},
		{"GET", "/x/../api/v1/rules", "/api/v1/rules"},
		{"GET", "/api/v1/..", "/api"},
		{"GET", "/api/..", "/"},
		{"PUT", "/api/v1//rules/k", "/api/v1/rules/k"},
		{"DELETE", "/api/v1/rules/x/../k", "/api/v1/rules/k"},
		{"POST", "/api//v1/rollback", "/api/v1/rollback"},
	} {
		code, hdr, body := a.do(ep.method, ep.path, grayBody("5"))
		if code != http.StatusNotFound || hdr.Get("Content-Type") != "application/json" || hdr.Get("Location") != "" ||
			!strings.Contains(body, "not a canonical path; use "+ep.canonical+`"`) {
			t.Errorf("%s %s = %d %s %s, want a JSON 404 naming %s", ep.method, ep.path, code, hdr.Get("Content-Type"), body, ep.canonical)
		}
	}
	for _, method := range []string{"GET", "POST"} {
		if code, hdr, body := a.do(method, "/api", ""); code != http.StatusNotFound || hdr.Get("Content-Type") != "application/json" {
			t.Errorf("%s /api = %d %s %s, want a JSON 404", method, code, hdr.Get("Content-Type"), body)
		}
	}
	for _, ep := range []struct {
		path     string
		code     int
		location string
	}{
		{"/healthz", http.StatusOK, ""},
		{"/readyz", http.StatusOK, ""},
		{"/metrics", http.StatusOK, ""},
		{"/ui/", http.StatusOK, ""},
		{"/", http.StatusFound, "/ui/"},
		{"/ui//", http.StatusTemporaryRedirect, "/ui/"},
		{"//healthz", http.StatusTemporaryRedirect, "/healthz"},
	} {
		if code, hdr, body := a.do("GET", ep.path, ""); code != ep.code || hdr.Get("Location") != ep.location {
			t.Errorf("GET %s = %d (Location %q) %.80s, want %d (Location %q)", ep.path, code, hdr.Get("Location"), body, ep.code, ep.location)
		}
	}
	if code, _, body := a.do("GET", "/api/v1/rules/k", ""); code != http.StatusNotFound {
		t.Errorf("a write to a non-canonical path wrote: %d %s", code, body)
	}
	req, _ := http.NewRequest("GET", a.url+"/api//v1/rules", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a token: %d, want 401", resp.StatusCode)
	}
	if code, _, body := a.do("GET", "/api/v1/rules", ""); code != http.StatusOK {
		t.Errorf("GET /api/v1/rules = %d %s", code, body)
	}
}

// TestUnpagedHistoryFitsOnePage: the history without ?limit is the whole
// retained history (the README's contract; the CLI without --limit and the
// console's rule and rollout views read it so), so the store's bound on
// what it retains must keep that answer within the largest page.
func TestUnpagedHistoryFitsOnePage(t *testing.T) {
	if store.MaxHistoryLimit > maxHistoryPage {
		t.Errorf("store.MaxHistoryLimit %d is above the largest history page %d: the unpaged history would be larger than any page", store.MaxHistoryLimit, maxHistoryPage)
	}
}

// TestHistoryPages: ?limit pages the history, newest first, and
// next_before says where the next page starts; ?before alone gives the
// older versions; without either the whole history comes, as always. A
// bad value is a 400 naming the parameter and the value.
func TestHistoryPages(t *testing.T) {
	a := startAPI(t)
	for p := 1; p <= 7; p++ { // versions 1 to 7
		if code, _, body := a.do("PUT", "/api/v1/rules/k", grayBody(strconv.Itoa(p))); code/100 != 2 {
			t.Fatalf("PUT = %d %s", code, body)
		}
	}
	page := func(query string) ([]float64, any) {
		t.Helper()
		code, _, body := a.do("GET", "/api/v1/rules/k/history"+query, "")
		var out struct {
			History    []struct{ Version float64 }
			NextBefore any `json:"next_before"`
		}
		if code != http.StatusOK || json.Unmarshal([]byte(body), &out) != nil {
			t.Fatalf("history%s = %d %s", query, code, body)
		}
		var vs []float64
		for _, h := range out.History {
			vs = append(vs, h.Version)
		}
		return vs, out.NextBefore
	}
	var all []float64
	for q := "?limit=3"; ; {
		vs, next := page(q)
		all = append(all, vs...)
		if next == nil {
			break
		}
		q = fmt.Sprintf("?limit=3&before=%v", next)
	}
	if fmt.Sprint(all) != "[7 6 5 4 3 2 1]" {
		t.Errorf("pages of 3 gave versions %v", all)
	}
	if vs, next := page(""); fmt.Sprint(vs) != "[7 6 5 4 3 2 1]" || next != nil {
		t.Errorf("the whole history: %v, next_before %v", vs, next)
	}
	if vs, next := page("?before=3"); fmt.Sprint(vs) != "[2 1]" || next != nil {
		t.Errorf("?before=3: %v, next_before %v", vs, next)
	}
	if vs, next := page("?limit=7"); len(vs) != 7 || next != nil {
		t.Errorf("?limit=7: %v, next_before %v (nothing is left)", vs, next)
	}
	for _, q := range []string{"limit=0", "limit=abc", "limit=1001", "before=-1", "before=x"} {
		code, _, body := a.do("GET", "/api/v1/rules/k/history?"+q, "")
		name, value, _ := strings.Cut(q, "=")
		if code != http.StatusBadRequest || !strings.Contains(body, `"path": "`+name+`"`) || !strings.Contains(body, `got \"`+value+`\"`) {
			t.Errorf("history?%s = %d %s, want a 400 naming %s", q, code, body, name)
		}
	}
}

// TestUnconfirmedWriteAnswer: a write the store sent but could not have
// confirmed (store.ErrUnconfirmed: etcd gave no answer in time) may have
// been applied: the 503 says so and to read the rule back before a
// retry, not that nothing was changed, which a write that never reached
// the store still says (etcdstore.TestUnconfirmedWrite makes both errors
// with a real etcd).
func TestUnconfirmedWriteAnswer(t *testing.T) {
	var fail error
	a := startAPIWith(t, func(o *Options) {
		o.Commit = func(ctx context.Context, _ Change, write func(context.Context) (int64, error)) error {
			if write == nil {
				return nil
			}
			return fail
		}
	})
	fail = store.Unconfirmed(fmt.Errorf("etcd at 127.0.0.1:2379 did not confirm the write: it may or may not have been applied (no answer within 2s): %w", store.ErrUnavailable))
	for _, req := range [][3]string{{"PUT", "/api/v1/rules/k", grayBody("5")}, {"DELETE", "/api/v1/rules/k", ""}, {"POST", "/api/v1/rollback", ""}} {
		code, _, body := a.do(req[0], req[1], req[2])
		if code != 503 || !strings.Contains(body, "may or may not have been applied") || !strings.Contains(body, "read the rule") || strings.Contains(body, "nothing was changed") {
			t.Errorf("%s %s, the write unconfirmed: %d %s", req[0], req[1], code, body)
		}
	}
	fail = fmt.Errorf("etcd at 127.0.0.1:2379 is unreachable: write not applied (connection refused): %w", store.ErrUnavailable)
	if code, _, body := a.do("PUT", "/api/v1/rules/k", grayBody("5")); code != 503 || !strings.Contains(body, "nothing was changed") {
		t.Errorf("PUT, the store unreachable: %d %s", code, body)
	}
}

// TestMissingRule: every request about a rule that does not exist is a
// 404 that names it in the same words; GET said `rule "nope" not found`
// where DELETE, rollback and resume said `rule "nope": not found`.
func TestMissingRule(t *testing.T) {
	a := startAPI(t)
	for _, tc := range []struct{ method, path, body, want string }{
		{"GET", "/api/v1/rules/nope", "", `rule "nope": not found`},
		{"DELETE", "/api/v1/rules/nope", "", `rule "nope": not found`},
		{"POST", "/api/v1/rules/nope/rollback", "", `rule "nope": not found`},
		{"POST", "/api/v1/rules/nope/resume", "", `rule "nope": not found`},
		{"GET", "/api/v1/rules/nope/history", "", `history of "nope": not found`},
		{"POST", "/api/v1/rules/nope/revert", `{"version":1}`, `history of "nope": not found`},
	} {
		code, _, body := a.do(tc.method, tc.path, tc.body)
		var e struct{ Error string }
		if err := json.Unmarshal([]byte(body), &e); err != nil || code != http.StatusNotFound || e.Error != tc.want {
			t.Errorf("%s %s = %d %s, want 404 with error %q", tc.method, tc.path, code, body, tc.want)
		}
	}
}
