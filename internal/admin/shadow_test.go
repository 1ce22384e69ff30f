package admin

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/mirror"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/upstream"
)

// TestRuleDiffThroughTheListener serves the admin API on a real loopback
// listener, mirrors answers of a candidate that changes one field, and
// reads GET /api/v1/rules/{key}/diff as a viewer.
func TestRuleDiffThroughTheListener(t *testing.T) {
	candidate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"name":"x","price":%s}`, map[bool]string{true: "2", false: "1"}[strings.HasSuffix(r.URL.RawQuery, "0")])
	}))
	defer candidate.Close()
	reg := upstream.NewRegistry(map[string]*upstream.Pool{
		"stable": upstream.NewPool("stable", []*upstream.Instance{{Addr: "127.0.0.1:1"}}),
	})
	env := rule.Env{Resolve: reg.Resolve}
	shadowed, err := rule.Parse([]byte(`{"key":"shadowed","type":"gray","gray_percent":5,"targets":{"gray":"`+candidate.Listener.Addr().String()+`","stable":"stable"},
		"mirror":{"percent":100,"diff":{"ignore":["headers.date"]}}}`), env)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := rule.Parse([]byte(`{"key":"plain","type":"gray","gray_percent":5,"targets":{"gray":"127.0.0.1:2","stable":"stable"}}`), env)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := router.Build(router.Input{Rules: []*rule.Compiled{shadowed, plain}})
	if err != nil {
		t.Fatal(err)
	}
	set := mirror.New(mirror.Options{})
	defer set.Close()
	set.Sync([]*mirror.Spec{shadowed.Mirror})
	api := New(Options{Router: router.New(snap), Mirrors: set, Tokens: []Token{{Name: "ops", Value: "view", Role: RoleViewer}}})
	srv := httptest.NewServer(api)
	defer srv.Close()

	for i := range 20 {
		req := mirror.Request{Method: "GET", URI: fmt.Sprintf("/item?n=%d", i), Host: "shop"}
		primary := mirror.Response{Status: 200, Header: []mirror.Header{{Name: "Content-Type", Value: "application/json"}}, Body: []byte(`{"name":"x","price":1}`)}
		if !set.Mirror(shadowed.Mirror, req, primary) {
			t.Fatalf("copy %d dropped", i)
		}
	}
	get := func(path, token string) (int, []byte) {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	deadline := time.Now().Add(10 * time.Second)
	var doc map[string]any
	for {
		code, body := get("/api/v1/rules/shadowed/diff", "view")
		if code != 200 {
			t.Fatalf("GET diff = %d %s", code, body)
		}
		doc = nil
		if err := json.Unmarshal(body, &doc); err != nil {
			t.Fatal(err)
		}
		if doc["compared"] == 20.0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never compared 20 answers: %s", body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, k := range []string{"requests", "compared", "status_mismatch", "fields"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("the document lacks %q: %v", k, doc)
		}
	}
	if doc["requests"] != 20.0 || doc["status_mismatch"] != 0.0 {
		t.Errorf("document = %v", doc)
	}
	fields, _ := doc["fields"].([]any)
	if len(fields) != 1 {
		t.Fatalf("fields = %v", doc["fields"])
	}
	f := fields[0].(map[string]any)
	for _, k := range []string{"path", "raw_rate", "noise_rate", "regression", "examples"} {
		if _, ok := f[k]; !ok {
			t.Errorf("a field lacks %q: %v", k, f)
		}
	}
	if f["path"] != "body.price" || f["raw_rate"] != 0.1 || f["noise_rate"] != 0.0 || f["regression"] != true {
		t.Errorf("field = %v", f)
	}
	if ex, _ := f["examples"].([]any); len(ex) != 2 {
		t.Errorf("examples = %v", f["examples"])
	}

	tests := []struct {
		path, token string
		code        int
		msg         string
	}{
		{"/api/v1/rules/plain/diff", "view", 404, `rule \"plain\" has no mirror`},
		{"/api/v1/rules/nothing/diff", "view", 404, `no rule \"nothing\" is serving`},
		{"/api/v1/rules/shadowed/diff", "", 401, "missing bearer token"},
	}
	for _, tt := range tests {
		if code, body := get(tt.path, tt.token); code != tt.code || !strings.Contains(string(body), tt.msg) {
			t.Errorf("GET %s = %d %s, want %d %q", tt.path, code, body, tt.code, tt.msg)
		}
	}
}
