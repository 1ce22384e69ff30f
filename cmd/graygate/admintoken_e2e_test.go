package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAdminTokenNoHeaderCanCarry: a token with whitespace around it (the
// newline a secret file ends with) or a control character could never be
// sent in an Authorization header, so it locked its holder out: every
// request got 401 and nothing said why. serve refuses it, from
// token_env, token or GRAYGATE_ADMIN_TOKEN, naming where it came from
// and never quoting it; a reload that brings one in is refused and the
// tokens that were serving keep working.
func TestAdminTokenNoHeaderCanCarry(t *testing.T) {
	dir := t.TempDir()
	run := func(env []string, args ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		all := append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"), "--default-upstream", "127.0.0.1:1"}, args...)
		cmd := exec.CommandContext(ctx, binary, all...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("serve %q did not stop: it served with the token\n%s", args, out)
		}
		return string(out), err
	}

	cfg := filepath.Join(dir, "graygate.yaml")
	if err := os.WriteFile(cfg, []byte("admin: {tokens: [{name: ops, token_env: GG_E2E_OPS_TOKEN}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"token_env with a newline", []string{"GG_E2E_OPS_TOKEN=Zq9sekret\n"}, []string{"--config", cfg},
			"admin.tokens[0].token_env: environment variable GG_E2E_OPS_TOKEN starts or ends with whitespace"},
		{"GRAYGATE_ADMIN_TOKEN with a newline", []string{"GRAYGATE_ADMIN_TOKEN=Zq9sekret\n"}, nil,
			"GRAYGATE_ADMIN_TOKEN: starts or ends with whitespace"},
		{"--admin-token with a control character", nil, []string{"--admin-token", "Zq9\x01sekret"},
			"--admin-token: holds a control character (byte 3 is 0x01)"},
	} {
		out, err := run(tc.env, tc.args...)
		if err == nil || !strings.Contains(out, tc.want) || strings.Contains(out, "Zq9") {
			t.Errorf("%s: %v\n%s\nwant serve to stop saying %q, without the secret", tc.name, err, out, tc.want)
		}
	}

	// A reload bringing such a token in is refused; the serving tokens
	// keep working.
	if err := os.WriteFile(cfg, []byte("admin: {tokens: [{name: ops, token: good}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, "--config", cfg, "--data-dir", filepath.Join(dir, "data2"), "--default-upstream", "127.0.0.1:1")
	whoami := func(tok string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+p.admin+"/api/v1/whoami", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := whoami("good"); code != 200 {
		t.Fatalf("token good before the reload: %d", code)
	}
	if err := os.WriteFile(cfg, []byte("admin: {tokens: [{name: ops, token: \"better\\n\"}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "admin.tokens[0].token: starts or ends with whitespace")
	if code := whoami("good"); code != 200 {
		t.Errorf("after the refused reload token good gets %d, want 200: the tokens that were serving keep serving", code)
	}
}
