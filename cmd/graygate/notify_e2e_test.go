package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestNotificationsBinary drives the built binary: `graygate rollback`
// sends a signed rollback to the configured receiver, named by the host's
// name; editing the config file (watched) renames the gateway and narrows
// the receiver's events, live.
func TestNotificationsBinary(t *testing.T) {
	const secret = "bin-s3cret"
	t.Setenv("GRAYGATE_E2E_HOOK_SECRET", secret)
	var mu sync.Mutex
	var got []map[string]any
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		m := hmac.New(sha256.New, []byte(secret))
		m.Write(raw)
		if sig := r.Header.Get("X-Graygate-Signature"); sig != "sha256="+hex.EncodeToString(m.Sum(nil)) {
			t.Errorf("bad signature %q on %s", sig, raw)
		}
		var b map[string]any
		if err := json.Unmarshal(raw, &b); err != nil {
			t.Errorf("body %s: %v", raw, err)
		}
		mu.Lock()
		got = append(got, b)
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	events := func() []map[string]any {
		mu.Lock()
		defer mu.Unlock()
		return append([]map[string]any(nil), got...)
	}
	wait := func(n int, what string) []map[string]any {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for len(events()) < n {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; got %v", what, events())
			}
			time.Sleep(20 * time.Millisecond)
		}
		return events()
	}
	stable := backend(t, "stable")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "graygate.yaml")
	write := func(extra string) {
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf("upstreams: {stable: {instances: [{addr: %q}]}}\ndefault_upstream: stable\n%s", stable, extra)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(fmt.Sprintf("notifications: [{name: ops, url: %q, secret_env: GRAYGATE_E2E_HOOK_SECRET}]\n", hook.URL+"/hook"))
	p := startServe(t, "--config", cfg, "--data-dir", filepath.Join(dir, "data"))
	env := []string{"GRAYGATE_ADMIN=" + p.admin, "GRAYGATE_ADMIN_TOKEN=tok"}
	// The reason is the operator's text: in the chat sentence it is
	// escaped as Slack asks, so that it pings no channel; the structured
	// field keeps it as typed.
	if out, code := runCLI(t, env, "rollback", "--reason", "pager went off <!channel> & <http://x|y>"); code != 0 {
		t.Fatalf("rollback: %d\n%s", code, out)
	}
	host, _ := os.Hostname()
	b := wait(1, "the rollback")[0]
	if b["event"] != "rollback" || b["actor"] != "default" || b["reason"] != "pager went off <!channel> & <http://x|y>" || b["gateway"] != host ||
		b["text"] != "["+host+"] default rolled back every rule: gray traffic goes to stable, experiments to their control group (reason: pager went off &lt;!channel&gt; &amp; &lt;http://x|y&gt;)" {
		t.Errorf("rollback body: %v", b)
	}

	generation := func() float64 {
		req, _ := http.NewRequest("GET", "http://"+p.admin+"/api/v1/status", nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st map[string]any
		json.NewDecoder(resp.Body).Decode(&st)
		g, _ := st["config_generation"].(float64)
		return g
	}
	gen := generation()
	write(fmt.Sprintf("name: edge-1\nnotifications: [{name: ops, url: %q, secret_env: GRAYGATE_E2E_HOOK_SECRET, events: [resume]}]\n", hook.URL+"/hook"))
	deadline := time.Now().Add(20 * time.Second)
	for generation() <= gen {
		if time.Now().After(deadline) {
			t.Fatal("the edited config was not reloaded")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The rollback is no longer sent; the resume is, from edge-1.
	for _, cmd := range []string{"resume", "rollback", "resume"} {
		if out, code := runCLI(t, env, cmd); code != 0 {
			t.Fatalf("%s: %d\n%s", cmd, code, out)
		}
	}
	evs := wait(3, "the resumes")
	for i, want := range []string{"rollback", "resume", "resume"} {
		if evs[i]["event"] != want {
			t.Fatalf("events %v", evs)
		}
	}
	if evs[1]["gateway"] != "edge-1" || evs[2]["gateway"] != "edge-1" {
		t.Errorf("after the reload the gateway is %v, %v", evs[1]["gateway"], evs[2]["gateway"])
	}
}
