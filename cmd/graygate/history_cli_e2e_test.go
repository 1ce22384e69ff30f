package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// startHistoryServe runs `graygate serve` with rule "paged" written n
// times (versions 1 to n, the reason of version v "step v"), and returns
// the CLI's environment for it.
func startHistoryServe(t *testing.T, n int) (*proc, []string) {
	t.Helper()
	p := startServe(t, "--data-dir", t.TempDir())
	for v := 1; v <= n; v++ {
		body := fmt.Sprintf(`{"type":"gray","gray_percent":%d,"targets":{"gray":"127.0.0.1:1","stable":"127.0.0.1:2"}}`, v)
		if code, out, err := put(p.admin, "paged", body, "X-Change-Reason", "step "+strconv.Itoa(v)); err != nil || code/100 != 2 {
			t.Fatalf("PUT version %d = %d %v %v", v, code, out, err)
		}
	}
	return p, []string{"GRAYGATE_ADMIN=" + p.admin, "GRAYGATE_ADMIN_TOKEN=tok"}
}

var (
	historyVersionLine = regexp.MustCompile(`(?m)^v(\d+)  `)
	moreLine           = regexp.MustCompile(`(?m)^more: --before (\d+)\n\z`)
)

// historyVersions lists the versions a text history prints, in order.
func historyVersions(out string) []int {
	var vs []int
	for _, m := range historyVersionLine.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.Atoi(m[1])
		vs = append(vs, v)
	}
	return vs
}

// TestRulesHistoryPages: `rules history KEY --limit N [--before V]` prints
// one page as the whole history is printed, and a last line `more:
// --before V` while older versions remain; following the hints walks the
// whole history, each version once, and the pages put together are the
// unpaged output to the byte. Without the flags the whole history comes
// as before.
func TestRulesHistoryPages(t *testing.T) {
	_, env := startHistoryServe(t, 8)
	full, code := runCLI(t, env, "rules", "history", "paged")
	if code != 0 || fmt.Sprint(historyVersions(full)) != "[8 7 6 5 4 3 2 1]" || strings.Contains(full, "more:") || !strings.Contains(full, "“step 8”") {
		t.Fatalf("rules history paged (no flags) = %d\n%s", code, full)
	}

	for _, tc := range []struct {
		name       string
		args       []string
		flagsFirst bool // rules history FLAGS KEY, not KEY FLAGS
		versions   string
		more       string // the --before of the more: line, "" for none
	}{
		{"a first page", []string{"--limit", "3"}, false, "[8 7 6]", "6"},
		{"the flags before KEY", []string{"--limit", "3", "--before", "6"}, true, "[5 4 3]", "3"},
		{"flag=value", []string{"--limit=3", "--before=3"}, false, "[2 1]", ""},
		{"-limit with one dash", []string{"-limit", "2"}, false, "[8 7]", "7"},
		{"a page holding the rest exactly", []string{"--limit", "8"}, false, "[8 7 6 5 4 3 2 1]", ""},
		{"the largest page", []string{"--limit", "1000"}, false, "[8 7 6 5 4 3 2 1]", ""},
		{"--before alone: every older version", []string{"--before", "4"}, false, "[3 2 1]", ""},
		{"--before past the newest", []string{"--before", "100", "--limit", "1"}, false, "[8]", "8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"rules", "history", "paged"}, tc.args...)
			if tc.flagsFirst {
				args = append(append([]string{"rules", "history"}, tc.args...), "paged")
			}
			out, code := runCLI(t, env, args...)
			m := moreLine.FindStringSubmatch(out)
			gotMore := ""
			if m != nil {
				gotMore = m[1]
			}
			if code != 0 || fmt.Sprint(historyVersions(out)) != tc.versions || gotMore != tc.more || (tc.more == "" && strings.Contains(out, "more:")) {
				t.Errorf("%v = exit %d, want versions %s and more %q\n%s", args[1:], code, tc.versions, tc.more, out)
			}
		})
	}

	// Follow the hints, pages of 3, to the end.
	var pages []string
	var seen []int
	var joined strings.Builder
	for args := []string{"--limit", "3"}; ; {
		out, code := runCLI(t, env, append([]string{"rules", "history", "paged"}, args...)...)
		if code != 0 {
			t.Fatalf("rules history paged %v = %d\n%s", args, code, out)
		}
		pages = append(pages, out)
		seen = append(seen, historyVersions(out)...)
		m := moreLine.FindStringSubmatch(out)
		if m == nil {
			if strings.Contains(out, "more:") {
				t.Fatalf("a more: line that is not the last line, or not --before N:\n%s", out)
			}
			joined.WriteString(out)
			break
		}
		joined.WriteString(strings.TrimSuffix(out, m[0]))
		if len(pages) > 8 {
			t.Fatalf("the hints do not end: %q", pages)
		}
		args = []string{"--limit", "3", "--before", m[1]}
	}
	if len(pages) != 3 || fmt.Sprint(seen) != "[8 7 6 5 4 3 2 1]" {
		t.Errorf("following more: hints gave %d pages, versions %v; want 3 pages, 8..1\n%q", len(pages), seen, pages)
	}
	if joined.String() != full {
		t.Errorf("the pages put together differ from the whole history:\n%s\nwant:\n%s", joined.String(), full)
	}

	// -o json is the API's answer as it is, next_before included; no
	// more: line, so that it stays JSON.
	out, code := runCLI(t, env, "rules", "history", "paged", "--limit", "3", "--before", "6", "-o", "json")
	var page struct {
		History    []struct{ Version int }
		NextBefore *int `json:"next_before"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.History) != 3 || page.History[0].Version != 5 ||
		page.NextBefore == nil || *page.NextBefore != 3 || strings.Contains(out, "more:") {
		t.Errorf("rules history --limit 3 --before 6 -o json = %d\n%s", code, out)
	}
	out, code = runCLI(t, env, "rules", "history", "paged", "--limit", "3", "--before", "3", "-o", "json")
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.History) != 2 || strings.Contains(out, "next_before") {
		t.Errorf("the last page -o json = %d\n%s", code, out)
	}

	// Nothing older than version 1: the page says so instead of nothing.
	if out, code := runCLI(t, env, "rules", "history", "paged", "--before", "1"); code != 0 || out != "rule paged has no versions older than 1\n" {
		t.Errorf("rules history --before 1 = %d\n%q", code, out)
	}
}

// TestRulesHistoryFlagErrors: --limit and --before are checked before any
// request, with the server's range (limit 1 to 1000, before a version >= 1);
// the error names the flag and the value, and exits 2 like every usage
// error.
func TestRulesHistoryFlagErrors(t *testing.T) {
	_, env := startHistoryServe(t, 2)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--limit", "0"}, `--limit must be a whole number from 1 to 1000, got "0"`},
		{[]string{"--limit", "1001"}, `--limit must be a whole number from 1 to 1000, got "1001"`},
		{[]string{"--limit", "-5"}, `--limit must be a whole number from 1 to 1000, got "-5"`},
		{[]string{"--limit", "abc"}, `--limit must be a whole number from 1 to 1000, got "abc"`},
		{[]string{"--limit", "2.5"}, `--limit must be a whole number from 1 to 1000, got "2.5"`},
		{[]string{"--limit="}, `--limit must be a whole number from 1 to 1000, got ""`},
		{[]string{"--before", "0"}, `--before must be a version number >= 1, got "0"`},
		{[]string{"--before", "-1"}, `--before must be a version number >= 1, got "-1"`},
		{[]string{"--before", "x"}, `--before must be a version number >= 1, got "x"`},
		{[]string{"--before", "99999999999999999999"}, `--before must be a version number >= 1, got "99999999999999999999"`},
		{[]string{"--limit", "3", "--before", "v2"}, `--before must be a version number >= 1, got "v2"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, code := runCLI(t, env, append([]string{"rules", "history", "paged"}, tc.args...)...)
			if code != 2 || !strings.Contains(out, "graygate: "+tc.want+"\n") || strings.Contains(out, "HTTP 400") {
				t.Errorf("rules history paged %v = exit %d, want 2 and %s\n%s", tc.args, code, tc.want, out)
			}
		})
	}
}

// TestReadOnlyCommandsRefuseChangeFlags: --reason only goes with a command
// that changes rules, and --limit/--before only with rules history; any
// other command refuses them, naming the flag and its value, exits 2 and
// sends nothing: the rule and the rollback flag are as they were. The
// commands that change rules still take --reason.
func TestReadOnlyCommandsRefuseChangeFlags(t *testing.T) {
	_, env := startHistoryServe(t, 2)
	ruleFile := filepath.Join(t.TempDir(), "paged.json")
	if err := os.WriteFile(ruleFile, []byte(`{"key":"paged","type":"gray","gray_percent":50,"targets":{"gray":"127.0.0.1:1","stable":"127.0.0.1:2"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	const reasonWant = `--reason "why not": only applies to commands that change rules`
	refusals := []struct {
		args []string
		want string
	}{
		{[]string{"rules", "list", "--reason", "why not"}, reasonWant},
		{[]string{"rules", "get", "paged", "--reason", "why not"}, reasonWant},
		{[]string{"rules", "history", "paged", "--reason", "why not"}, reasonWant},
		{[]string{"rules", "history", "paged", "--limit", "1", "--reason=why not"}, reasonWant},
		{[]string{"rules", "history", "--reason", "why not", "paged"}, reasonWant},
		{[]string{"rules", "list", "-reason", ""}, `--reason "": only applies to commands that change rules`},
		{[]string{"rollout", "get", "paged", "--reason", "why not"}, reasonWant},
		{[]string{"explain", "--user-id", "u1", "--reason", "why not"}, reasonWant},
		{[]string{"status", "--reason", "why not"}, reasonWant},
		{[]string{"diff", "paged", "--reason", "why not"}, reasonWant},
		{[]string{"results", "paged", "--reason", "why not"}, reasonWant},
		{[]string{"version", "--reason", "why not"}, reasonWant},

		{[]string{"rules", "list", "--limit", "5"}, `--limit "5": only applies to rules history`},
		{[]string{"rules", "get", "paged", "--before", "2"}, `--before "2": only applies to rules history`},
		{[]string{"rules", "put", "-f", ruleFile, "--limit", "5"}, `--limit "5": only applies to rules history`},
		{[]string{"rules", "delete", "paged", "--before=2"}, `--before "2": only applies to rules history`},
		{[]string{"rules", "revert", "paged", "1", "--limit", "5"}, `--limit "5": only applies to rules history`},
		{[]string{"rollback", "--limit", "5"}, `--limit "5": only applies to rules history`},
		{[]string{"rollback", "paged", "--before", "2"}, `--before "2": only applies to rules history`},
		{[]string{"resume", "--limit", "5"}, `--limit "5": only applies to rules history`},
		{[]string{"rollout", "get", "paged", "--limit", "5"}, `--limit "5": only applies to rules history`},
		{[]string{"rollout", "abort", "paged", "--before", "2"}, `--before "2": only applies to rules history`},
		{[]string{"explain", "--limit", "5"}, `--limit "5": only applies to rules history`},
		{[]string{"status", "--before", "2"}, `--before "2": only applies to rules history`},
		{[]string{"diff", "paged", "--limit", "5"}, `--limit "5": only applies to rules history`},
		{[]string{"results", "paged", "--limit", "5"}, `--limit "5": only applies to rules history`},
		{[]string{"version", "--limit", "5"}, `--limit "5": only applies to rules history`},
	}
	for _, tc := range refusals {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, code := runCLI(t, env, tc.args...)
			if code != 2 || !strings.Contains(out, "graygate: "+tc.want) {
				t.Errorf("%v = exit %d, want 2 and %s\n%s", tc.args, code, tc.want, out)
			}
		})
	}
	// Nothing reached the store: still version 2, not rolled back.
	out, code := runCLI(t, env, "rules", "list")
	if code != 0 || !strings.Contains(out, "revision 2, 1 rule(s), global rollback false") {
		t.Fatalf("rules list after the refusals = %d\n%s", code, out)
	}
	if out, code := runCLI(t, env, "rules", "get", "paged", "-o", "json"); code != 0 || !strings.Contains(out, `"version": 2`) || !strings.Contains(out, `"gray_percent": 2`) {
		t.Errorf("rule paged after the refusals = %d\n%s", code, out)
	}

	// The commands that change rules take --reason, and it is recorded.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rules", "put", "-f", ruleFile, "--reason", "put it"}, "version 3"},
		{[]string{"rules", "revert", "paged", "1", "--reason", "revert it"}, "now version 4"},
		{[]string{"rollback", "paged", "--reason", "roll it back"}, "rolled back rule paged"},
		{[]string{"resume", "paged", "--reason", "resume it"}, "resumed rule paged"},
		{[]string{"rules", "delete", "paged", "--reason", "delete it"}, "deleted"},
	} {
		if out, code := runCLI(t, env, tc.args...); code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("%v = %d\n%s", tc.args, code, out)
		}
	}
	out, code = runCLI(t, env, "rules", "history", "paged")
	for _, r := range []string{"put it", "revert it", "delete it"} {
		if code != 0 || !strings.Contains(out, "“"+r+"”") {
			t.Errorf("the history does not record reason %q: %d\n%s", r, code, out)
		}
	}
}

// TestClientHelp: `version --help` and `version -h` print version's usage
// as `rules --help` does (stdout, exit 0), not the version; a subcommand's
// -h lists the flags it takes and not the ones it refuses.
func TestClientHelp(t *testing.T) {
	for _, args := range [][]string{{"version", "--help"}, {"version", "-h"}, {"--version", "--help"}, {"version", "help"}} {
		if out, code := runCLI(t, nil, args...); code != 0 || !strings.HasPrefix(out, "usage: graygate version") || strings.Contains(out, "graygate devel") {
			t.Errorf("%v = %d\n%s", args, code, out)
		}
	}
	if out, code := runCLI(t, nil, "version"); code != 0 || !strings.HasPrefix(out, "graygate ") || strings.Contains(out, "usage") {
		t.Errorf("version = %d\n%s", code, out)
	}
	if out, code := runCLI(t, nil, "version", "extra"); code != 2 || !strings.Contains(out, `graygate: version takes no arguments, got "extra"`) {
		t.Errorf("version extra = %d\n%s", code, out)
	}
	for _, tc := range []struct {
		args      []string
		has, hasn []string
	}{
		{[]string{"rules", "list", "-h"}, []string{"-admin", "-o FORMAT"}, []string{"-reason", "-limit", "-before"}},
		{[]string{"rules", "history", "-h"}, []string{"-limit N", "-before VERSION"}, []string{"-reason"}},
		{[]string{"rules", "put", "-h"}, []string{"-reason REASON", "-f FILE"}, []string{"-limit", "-before"}},
		{[]string{"status", "-h"}, []string{"-token"}, []string{"-reason", "-limit"}},
		{[]string{"validate", "-h"}, []string{"Usage of validate"}, nil},
		{[]string{"serve", "--help"}, []string{"-listen"}, nil},
		{[]string{"register", "-h"}, []string{"-service"}, nil},
		{[]string{"demo", "-h"}, []string{"Usage of demo"}, nil},
	} {
		out, code := runCLI(t, nil, tc.args...)
		if code != 0 || strings.Contains(out, "help requested") {
			t.Errorf("%v = %d, want its usage and 0:\n%s", tc.args, code, out)
		}
		for _, s := range tc.has {
			if !strings.Contains(out, s) {
				t.Errorf("%v does not list %s:\n%s", tc.args, s, out)
			}
		}
		for _, s := range tc.hasn {
			if strings.Contains(out, s) {
				t.Errorf("%v lists %s, which it refuses:\n%s", tc.args, s, out)
			}
		}
	}
	out, code := runCLI(t, nil, "rules", "--help")
	if code != 0 || !strings.Contains(out, "history KEY [--limit N] [--before VERSION]") || !strings.Contains(out, "more: --before") {
		t.Errorf("rules --help does not document the paging: %d\n%s", code, out)
	}
}

// TestMistypedKeyTouchesNoOtherRule: a key with "?" or "#" in it is
// refused by the admin API as an invalid key, naming it; before, the
// client sent it unescaped, so "rules delete paged#" deleted rule paged
// and "rules get paged?x" showed it.
func TestMistypedKeyTouchesNoOtherRule(t *testing.T) {
	_, env := startHistoryServe(t, 2)
	for _, args := range [][]string{
		{"rules", "delete", "paged#"},
		{"rules", "delete", "paged?x"},
		{"rules", "revert", "paged#", "1"},
		{"rules", "get", "paged?x"},
		{"rules", "history", "paged#"},
		{"rollback", "paged#"},
		{"rollout", "abort", "paged?x"},
		{"diff", "paged?x"},
	} {
		out, code := runCLI(t, env, args...)
		if code == 0 || !strings.Contains(out, "HTTP 400") || !strings.Contains(out, args[len(args)-1]) && !strings.Contains(out, args[len(args)-2]) {
			t.Errorf("%v = exit %d, want a refusal (HTTP 400) naming the key:\n%s", args, code, out)
		}
	}
	out, code := runCLI(t, env, "rules", "list")
	if code != 0 || !strings.Contains(out, "revision 2, 1 rule(s), global rollback false") {
		t.Errorf("after the mistyped keys, rules list = %d, want rule paged untouched at revision 2:\n%s", code, out)
	}
}
