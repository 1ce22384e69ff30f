package gateway

import (
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/mirror"
)

// TestMirrorWiring: a rule stored through the admin API gets a running
// mirror, a bad mirror field is refused by path while the rule keeps
// serving, the diff document and the mirror metrics are served by the
// admin listener, and a changed target starts the diff over.
func TestMirrorWiring(t *testing.T) {
	e := start(t, baseConfig, "")
	e.mustPut("shadowed", map[string]any{"type": "gray", "gray_percent": 0, "targets": map[string]any{"gray": "gray", "stable": "stable"},
		"mirror": map[string]any{"percent": 100, "diff": map[string]any{"ignore": []string{"headers.date"}}}})
	code, doc := e.api("GET", "/api/v1/rules/shadowed/diff", nil)
	if code != 200 || doc["requests"] != 0.0 || doc["target"] != "gray" || doc["diff"] != true {
		t.Fatalf("GET diff = %d %v", code, doc)
	}

	bad := map[string]any{"type": "gray", "gray_percent": 0, "targets": map[string]any{"gray": "gray", "stable": "stable"},
		"mirror": map[string]any{"percent": 250, "methods": []string{"G T"}, "diff": map[string]any{"secondary": "nowhere"}}}
	code, out := e.api("PUT", "/api/v1/rules/shadowed", bad)
	msg := strings.Join(detailPaths(out), " ")
	if code != 400 || !strings.Contains(msg, "mirror.percent") || !strings.Contains(msg, "mirror.methods[0]") || !strings.Contains(msg, "mirror.diff.secondary") {
		t.Fatalf("PUT a bad mirror = %d %v", code, out)
	}

	// The router of the serving snapshot mirrors a stable GET; the data
	// plane would hand the copy to the gateway's set.
	d := e.gw.Router().Decide(&attr.Map{MethodV: "GET", HostV: "shop", PathV: "/p", Headers: map[string]string{"X-User-Id": "u1"}, IP: netip.MustParseAddr("127.0.0.1")})
	if d.Mirror == nil || d.Target.Name != "stable" {
		t.Fatalf("decision = %+v", d)
	}
	if !e.gw.Mirrors().Mirror(d.Mirror, mirror.Request{Method: "GET", URI: "/p", Host: "shop"}, mirror.Response{Status: 200, Body: []byte("stable")}) {
		t.Fatal("the copy was dropped")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, doc = e.api("GET", "/api/v1/rules/shadowed/diff", nil)
		if doc["compared"] == 1.0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the copy was never compared: %v", doc)
		}
		time.Sleep(10 * time.Millisecond)
	}
	fields, _ := doc["fields"].([]any)
	found := false
	for _, f := range fields {
		m := f.(map[string]any)
		if ex, _ := m["examples"].([]any); m["path"] == "body" && len(ex) == 1 {
			x := ex[0].(map[string]any)
			found = x["primary"] == "stable" && x["candidate"] == "gray"
		}
	}
	if !found {
		t.Errorf("fields = %v: want body, stable → gray", doc["fields"])
	}
	resp, err := e.client.Get(e.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`graygate_mirror_sent_total{rule="shadowed"} 1`, `graygate_mirror_dropped_total{rule="shadowed"} 0`, `graygate_mirror_failed_total{rule="shadowed"} 0`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	e.mustPut("shadowed", map[string]any{"type": "gray", "gray_percent": 0, "targets": map[string]any{"gray": "gray", "stable": "stable"},
		"mirror": map[string]any{"target": "a", "percent": 100, "diff": map[string]any{}}})
	if _, doc = e.api("GET", "/api/v1/rules/shadowed/diff", nil); doc["compared"] != 0.0 || doc["target"] != "a" {
		t.Errorf("a new target kept the old diff: %v", doc)
	}
	e.mustPut("plain", map[string]any{"type": "gray", "gray_percent": 0, "targets": map[string]any{"gray": "gray", "stable": "stable"}})
	if code, _ := e.api("GET", "/api/v1/rules/plain/diff", nil); code != 404 {
		t.Errorf("GET diff of a rule without a mirror = %d", code)
	}
}

func detailPaths(out map[string]any) []string {
	var ps []string
	ds, _ := out["details"].([]any)
	for _, d := range ds {
		m, _ := d.(map[string]any)
		ps = append(ps, m["path"].(string)+": "+m["message"].(string))
	}
	return ps
}
