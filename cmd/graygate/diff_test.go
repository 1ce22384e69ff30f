package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/admin"
	"github.com/graygate/graygate/internal/mirror"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/upstream"
)

// TestDiffCommand runs `graygate diff KEY` against an admin API on a real
// listener whose rule mirrors to a candidate that changes one field.
func TestDiffCommand(t *testing.T) {
	candidate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		price := "1"
		if strings.HasSuffix(r.URL.RawQuery, "0") || strings.HasSuffix(r.URL.RawQuery, "1") {
			price = "2"
		}
		fmt.Fprintf(w, "{\"price\":%s,\"note\":\"a\\tb\"}", price)
	}))
	defer candidate.Close()
	reg := upstream.NewRegistry(map[string]*upstream.Pool{"stable": upstream.NewPool("stable", []*upstream.Instance{{Addr: "127.0.0.1:1"}})})
	c, err := rule.Parse([]byte(`{"key":"shadowed","type":"gray","gray_percent":5,"targets":{"gray":"`+candidate.Listener.Addr().String()+`","stable":"stable"},
		"mirror":{"percent":100,"diff":{"ignore":["headers.date"]}}}`), rule.Env{Resolve: reg.Resolve})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := router.Build(router.Input{Rules: []*rule.Compiled{c}})
	if err != nil {
		t.Fatal(err)
	}
	set := mirror.New(mirror.Options{})
	defer set.Close()
	set.Sync([]*mirror.Spec{c.Mirror})
	srv := httptest.NewServer(admin.New(admin.Options{Router: router.New(snap), Mirrors: set, Tokens: []admin.Token{{Name: "v", Value: "view", Role: admin.RoleViewer}}}))
	defer srv.Close()
	for i := range 20 {
		set.Mirror(c.Mirror, mirror.Request{Method: "GET", URI: fmt.Sprintf("/p?n=%d", i)},
			mirror.Response{Status: 200, Header: []mirror.Header{{Name: "Content-Type", Value: "application/json"}}, Body: []byte(`{"price":1,"note":"a\tb"}`)})
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, _ := set.Diff("shadowed")
		if d.Compared == 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("compared %d of 20", d.Compared)
		}
		time.Sleep(10 * time.Millisecond)
	}
	env := []string{"GRAYGATE_ADMIN=" + srv.URL, "GRAYGATE_ADMIN_TOKEN=view"}
	out, code := runCLI(t, env, "diff", "shadowed")
	if code != 0 {
		t.Fatalf("graygate diff: exit %d\n%s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, want := range []string{
		"rule shadowed mirrors to " + candidate.Listener.Addr().String(),
		"requests 20, compared 20, status mismatches 0, failed 0, dropped 0",
		"regression: raw − noise > 3% and (raw − noise)/(raw + noise) > 20%, after 10 compared answers",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	header := lines[len(lines)-2]
	row := strings.Fields(lines[len(lines)-1])
	if !strings.HasPrefix(header, "PATH") || len(row) < 5 || row[0] != "body.price" || row[1] != "20.0%" || row[2] != "0.0%" || row[3] != "YES" {
		t.Errorf("table:\n%s", out)
	}
	if !strings.Contains(lines[len(lines)-1], "GET /p?n=") || !strings.Contains(lines[len(lines)-1], "1 → 2") {
		t.Errorf("example: %s", lines[len(lines)-1])
	}

	js, code := runCLI(t, env, "diff", "shadowed", "-o", "json")
	var doc map[string]any
	if code != 0 || json.Unmarshal([]byte(js), &doc) != nil || doc["compared"] != 20.0 {
		t.Errorf("graygate diff -o json: exit %d\n%s", code, js)
	}
	if out, code := runCLI(t, env, "diff", "nothing"); code != 1 || !strings.Contains(out, `no rule "nothing" is serving (HTTP 404)`) {
		t.Errorf("diff of an unknown rule: exit %d\n%s", code, out)
	}
	if out, code := runCLI(t, env, "diff"); code != 2 || !strings.Contains(out, "usage: graygate diff KEY") {
		t.Errorf("diff without a key: exit %d\n%s", code, out)
	}
}
