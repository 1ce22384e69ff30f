//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestSIGHUPRevokesToken is issue 12, item 4 as an operator does it: a
// leaked admin token is removed from the config file, graygate gets SIGHUP,
// and within a second the token gets 401 while the others keep working.
// The same edit raises store.history_limit, which needs a restart: the log
// and /api/v1/status name it.
func TestSIGHUPRevokesToken(t *testing.T) {
	stable := backend(t, "stable")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "graygate.yaml")
	write := func(extra string) {
		t.Helper()
		doc := fmt.Sprintf("default_upstream: %q\nadmin:\n  tokens:\n    - {name: ops, token: ops-0123456789abcdef}\n%s", stable, extra)
		if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("    - {name: leaked, token: leaked-0123456789abcdef}\n")
	p := startServe(t, "--config", cfg, "--data-dir", filepath.Join(dir, "data"))
	client := &http.Client{Timeout: 5 * time.Second}
	call := func(tok string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+p.admin+"/api/v1/status", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		body, _ := io.ReadAll(resp.Body)
		json.Unmarshal(body, &out)
		return resp.StatusCode, out
	}
	for _, tok := range []string{"ops-0123456789abcdef", "leaked-0123456789abcdef", "tok"} {
		if code, _ := call(tok); code != 200 {
			t.Fatalf("token %s before the reload: %d", tok, code)
		}
	}

	write("store: {history_limit: 7}\n")
	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for {
		code, _ := call("leaked-0123456789abcdef")
		if code == 401 {
			break
		}
		if time.Since(sent) > time.Second {
			t.Fatalf("the revoked token still gets %d one second after SIGHUP", code)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("revoked token refused %v after SIGHUP", time.Since(sent).Round(time.Millisecond))
	for _, tok := range []string{"ops-0123456789abcdef", "tok"} {
		if code, _ := call(tok); code != 200 {
			t.Errorf("token %s after the reload: %d", tok, code)
		}
	}
	_, st := call("ops-0123456789abcdef")
	if st["last_reload_result"] != "ok; restart required: store.history_limit" || fmt.Sprint(st["restart_required"]) != "[store.history_limit]" {
		t.Errorf("status after the reload: last_reload_result %q, restart_required %v", st["last_reload_result"], st["restart_required"])
	}
	p.waitLog(t, `"msg":"restart required: store.history_limit"`)

	// A SIGHUP that lands mid-save, the file truncated and not yet
	// written, loads nothing: an empty file would be a config without
	// the ops token or the default upstream.
	if err := os.WriteFile(cfg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "config file is empty")
	if code, _ := call("ops-0123456789abcdef"); code != 200 {
		t.Errorf("token ops after a SIGHUP on an empty file: %d", code)
	}
	if b, err := dataGet(p.data, "someone"); err != nil || b != "stable" {
		t.Errorf("data plane after a SIGHUP on an empty file: %q %v", b, err)
	}
}
