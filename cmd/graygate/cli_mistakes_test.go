package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// auditServe runs `graygate serve` with rule "canary" (targets are
// addresses, so a rule file of it validates without a config), and
// returns it with the CLI's environment for it.
func auditServe(t *testing.T, args ...string) (*proc, []string) {
	t.Helper()
	p := startServe(t, append([]string{"--data-dir", t.TempDir()}, args...)...)
	body := `{"type":"gray","gray_percent":5,"targets":{"gray":"127.0.0.1:1","stable":"127.0.0.1:2"}}`
	if code, out, err := put(p.admin, "canary", body, "X-Change-Reason", "first"); err != nil || code != 201 {
		t.Fatalf("PUT canary = %d %v %v", code, out, err)
	}
	return p, []string{"GRAYGATE_ADMIN=" + p.admin, "GRAYGATE_ADMIN_TOKEN=tok"}
}

// TestTrailingFlagWithoutValue: a flag that needs a value, given last
// without one, is the flag package's "flag needs an argument", and
// nothing is sent. Before, the flags were moved in front of the
// positional arguments, so the flag took the KEY as its value:
// "rollback canary --reason" rolled back every rule with the reason
// "canary", and "rules get canary --admin" said it needs a KEY.
func TestTrailingFlagWithoutValue(t *testing.T) {
	p, env := auditServe(t)
	for _, args := range [][]string{
		{"rollback", "canary", "--reason"},
		{"resume", "canary", "--reason"},
		{"rules", "delete", "canary", "--reason"},
		{"rules", "revert", "canary", "1", "--token"},
		{"rules", "get", "canary", "-o", "json", "--admin"},
		{"rules", "history", "canary", "--limit"},
		{"validate", "x.json", "--config"},
	} {
		out, code := runCLI(t, env, args...)
		flagName := strings.TrimLeft(args[len(args)-1], "-")
		if code != 2 || !strings.Contains(out, "flag needs an argument: -"+flagName) {
			t.Errorf("%v = exit %d, want 2 and flag needs an argument: -%s:\n%s", args, code, flagName, out)
		}
	}
	st := adminStatus(t, p.admin)
	if st["rolled_back"] != false {
		t.Errorf("after the refused commands, status rolled_back = %v, want false", st["rolled_back"])
	}
	out, code := runCLI(t, env, "rules", "list")
	if code != 0 || !strings.Contains(out, "revision 1, 1 rule(s), global rollback false") || strings.Contains(out, "true") {
		t.Errorf("after the refused commands, rules list = %d, want rule canary untouched at revision 1:\n%s", code, out)
	}
}

// TestClientHelpHidesToken: a client command's -h does not print the
// bearer token from GRAYGATE_ADMIN_TOKEN as the flag's default (nor the
// address from GRAYGATE_ADMIN), and the environment is still used.
// Before, both were the flags' defaults, so -h printed the secret.
func TestClientHelpHidesToken(t *testing.T) {
	p, _ := auditServe(t)
	env := []string{"GRAYGATE_ADMIN=" + p.admin, "GRAYGATE_ADMIN_TOKEN=tok"}
	for _, args := range [][]string{{"rules", "list", "-h"}, {"status", "--help"}, {"rollback", "-h"}, {"explain", "--header", "nokv"}} {
		out, _ := runCLI(t, env, args...)
		if !strings.Contains(out, "-token TOKEN") {
			t.Errorf("%v does not show its usage:\n%s", args, out)
		}
		if strings.Contains(out, `"tok"`) || strings.Contains(out, p.admin) {
			t.Errorf("%v prints the environment's token or address:\n%s", args, out)
		}
	}
	if out, code := runCLI(t, env, "rules", "list"); code != 0 || !strings.Contains(out, "canary") {
		t.Errorf("rules list with the environment = %d:\n%s", code, out)
	}
	if out, code := runCLI(t, env, "rules", "list", "--token", "wrong"); code != 1 || !strings.Contains(out, "invalid bearer token (HTTP 401)") {
		t.Errorf("--token wrong over the environment's = %d, want the flag to win:\n%s", code, out)
	}
}

// TestValidateTakesWhatPutTakes: the JSON `rules get -o json` prints (the
// rule with version, revision, updated_at, updated_by, rolled_back and
// reason) is what `rules put -f` takes back; validate passes it too, and
// still names a reason that is not a string. Before, validate reported
// six unknown fields for the file that put accepted.
func TestValidateTakesWhatPutTakes(t *testing.T) {
	_, env := auditServe(t)
	out, code := runCLI(t, env, "rules", "get", "canary", "-o", "json")
	if code != 0 || !strings.Contains(out, `"updated_by"`) {
		t.Fatalf("rules get -o json = %d:\n%s", code, out)
	}
	dir := t.TempDir()
	one := filepath.Join(dir, "canary.json")
	list := filepath.Join(dir, "list.json")
	badReason := filepath.Join(dir, "bad.json")
	edited := strings.Replace(out, `"gray_percent": 5`, `"gray_percent": 20`, 1)
	for f, s := range map[string]string{one: edited, list: "[" + edited + "]", badReason: strings.Replace(edited, `"reason": "first"`, `"reason": 7`, 1)} {
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, code := runCLI(t, nil, "validate", one); code != 0 || out != one+": 1 valid rule(s)\n" {
		t.Errorf("validate of rules get's output = %d, want valid:\n%s", code, out)
	}
	if out, code := runCLI(t, nil, "validate", list); code != 0 || out != list+": 1 valid rule(s)\n" {
		t.Errorf("validate of a list of it = %d, want valid:\n%s", code, out)
	}
	if out, code := runCLI(t, nil, "validate", badReason); code != 1 || !strings.Contains(out, "  reason: expected a string, got 7\n") {
		t.Errorf("validate with reason 7 = %d, want the reason named:\n%s", code, out)
	}
	if out, code := runCLI(t, env, "rules", "put", "-f", one); code != 0 || !strings.Contains(out, "rule canary saved: version 2") {
		t.Errorf("rules put of the validated file = %d:\n%s", code, out)
	}
}

// TestRulesPutRefusesAmbiguousFiles: a file of rules that names one rule
// twice, holds no rule, is empty or is not JSON is refused before
// anything is sent, naming the file; before, two entries for one key were
// written as two versions (the second silently winning) and an empty list
// exited 0 having done nothing.
func TestRulesPutRefusesAmbiguousFiles(t *testing.T) {
	_, env := auditServe(t)
	dir := t.TempDir()
	rule := func(pct string) string {
		return `{"key":"canary","type":"gray","gray_percent":` + pct + `,"targets":{"gray":"127.0.0.1:1","stable":"127.0.0.1:2"}}`
	}
	for _, tc := range []struct{ name, body, want string }{
		{"dup.json", "[" + rule("10") + "," + rule("90") + "]", `rules 0 and 1 are both rule "canary"; nothing was sent`},
		{"wrapped.json", `{"rules":[` + rule("10") + "," + rule("90") + "]}", `rules 0 and 1 are both rule "canary"; nothing was sent`},
		{"none.json", "[]", "holds no rules; nothing was sent"},
		{"nowrapped.json", `{"rules":[]}`, "holds no rules; nothing was sent"},
		{"empty.json", " \n", "is empty"},
		{"cut.json", `{"key":"canary","type":`, "invalid JSON"},
	} {
		f := filepath.Join(dir, tc.name)
		if err := os.WriteFile(f, []byte(tc.body), 0o644); err != nil {
			t.Fatal(err)
		}
		out, code := runCLI(t, env, "rules", "put", "-f", f)
		if code != 1 || !strings.Contains(out, f) || !strings.Contains(out, tc.want) {
			t.Errorf("rules put -f %s = exit %d, want 1 and %q naming the file:\n%s", tc.name, code, tc.want, out)
		}
	}
	out, code := runCLI(t, env, "rules", "history", "canary")
	if code != 0 || len(historyVersions(out)) != 1 {
		t.Errorf("after the refused files, canary's history = %d, want version 1 only:\n%s", code, out)
	}
}

// TestClientAtTheDataPlane: the CLI pointed at the data plane (whose
// upstream answers text) says that what answered is not the admin API,
// naming the address, instead of a bare JSON syntax error ("invalid
// character 'S' looking for beginning of value"). Extra arguments to
// status and rules list are refused instead of ignored.
func TestClientAtTheDataPlane(t *testing.T) {
	be := backend(t, "STABLE")
	p, env := auditServe(t, "--default-upstream", be)
	// The CLI sends no identity, so each request gets a random anonymous
	// id, which canary's 5% sent to its dead gray target one time in
	// twenty: at 0% every request reaches the default upstream.
	body := `{"type":"gray","gray_percent":0,"targets":{"gray":"127.0.0.1:1","stable":"127.0.0.1:2"}}`
	if code, out, err := put(p.admin, "canary", body); err != nil || code != 200 {
		t.Fatalf("PUT canary at 0%% = %d %v %v", code, out, err)
	}
	for _, args := range [][]string{{"status"}, {"rules", "list"}, {"rules", "get", "canary"}} {
		out, code := runCLI(t, nil, append(args, "--admin", p.data, "--token", "tok")...)
		if code != 1 || !strings.Contains(out, `answered 200 with "STABLE"`) || !strings.Contains(out, "is http://"+p.data+" the admin listener") {
			t.Errorf("%v at the data plane = exit %d, want it to say this is not the admin API:\n%s", args, code, out)
		}
	}
	for _, args := range [][]string{{"status", "canary"}, {"rules", "list", "canary"}} {
		out, code := runCLI(t, env, args...)
		if code != 2 || !strings.Contains(out, `takes no arguments, got "canary"`) {
			t.Errorf("%v = exit %d, want 2 and the argument refused:\n%s", args, code, out)
		}
	}
}

// TestRouteHostWithPortRefused: a route whose host has a port (or a
// scheme) can never match, since the router compares the request's Host
// without its port. Such a config is refused at start, naming the field
// and the value, and on a reload, where the route that was serving keeps
// serving. Before, it was accepted and the route silently served nothing.
func TestRouteHostWithPortRefused(t *testing.T) {
	stable, gray := backend(t, "stable"), backend(t, "gray")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "graygate.yaml")
	write := func(host string) {
		t.Helper()
		doc := fmt.Sprintf("default_upstream: %q\nupstreams: {gray: {instances: [{addr: %q}]}}\nroutes: [{name: api, host: %q, upstream: gray}]\n", stable, gray, host)
		if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	get := func(p *proc, host string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+p.data+"/x", nil)
		req.Host = host
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	write("api.example.com")
	p := startServe(t, "--config", cfg, "--data-dir", filepath.Join(dir, "data"))
	_, port, _ := net.SplitHostPort(p.data)
	if got := get(p, "api.example.com:"+port); got != "gray" {
		t.Fatalf("Host api.example.com:%s before the reload = %q, want gray", port, got)
	}

	write("api.example.com:" + port)
	want := fmt.Sprintf(`routes[0].host: must not have a port (a request's port is not compared), got "api.example.com:%s": use "api.example.com"`, port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if e, _ := adminStatus(t, p.admin)["last_error"].(string); strings.Contains(e, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status last_error does not say %s: %v", want, adminStatus(t, p.admin))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := get(p, "api.example.com:"+port); got != "gray" {
		t.Errorf("after the refused reload, Host api.example.com:%s = %q, want the route serving (gray)", port, got)
	}

	// The same file at start: refused, exit 1, the field and value named.
	out, code := runCLI(t, nil, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data2"))
	if code != 1 || !strings.Contains(out, want) {
		t.Errorf("serve with the route host with a port = exit %d, want 1 and %s:\n%s", code, want, out)
	}
	write("https://api.example.com")
	if out, code := runCLI(t, nil, "validate", cfg); code != 1 || !strings.Contains(out, `routes[0].host: must be a host name without a scheme, got "https://api.example.com"`) {
		t.Errorf("validate with a route host with a scheme = exit %d:\n%s", code, out)
	}
}

// TestValidateUsage: validate -h names --kind's values plainly; before,
// the flag package took "rule" for the argument's name and printed
// "-kind rule" over "rule or `config`".
func TestValidateUsage(t *testing.T) {
	out, code := runCLI(t, nil, "validate", "-h")
	if code != 0 || !strings.Contains(out, "-kind KIND") || !strings.Contains(out, "KIND: rule or config;") || strings.Contains(out, "`") {
		t.Errorf("validate -h = %d:\n%s", code, out)
	}
}

// TestConfigKeyGivenTwice: a config that gives a key twice in one mapping
// (two "upstreams:" sections pasted into one file) is refused at start,
// exit 1, with the key's path and both lines; before, only yaml's "line
// 4: mapping key "upstreams" already defined at line 2" was printed.
func TestConfigKeyGivenTwice(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "graygate.yaml")
	doc := "default_upstream: stable\nupstreams:\n  stable: {instances: [{addr: \"127.0.0.1:1\"}]}\nupstreams:\n  gray: {instances: [{addr: \"127.0.0.1:2\"}]}\n"
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	want := `upstreams: duplicate key: "upstreams" is given more than once in the same mapping (lines 2 and 4)`
	out, code := runCLI(t, nil, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"))
	if code != 1 || !strings.Contains(out, want) {
		t.Errorf("serve with upstreams twice = exit %d, want 1 and %s:\n%s", code, want, out)
	}
}
