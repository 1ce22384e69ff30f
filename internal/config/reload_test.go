package config

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// fieldPaths is Keys cut at the first list or map: the paths the reload
// table's rows name (upstreams, not upstreams.*.instances[].addr).
func fieldPaths() []string {
	var out []string
	for _, k := range Keys() {
		if i := strings.IndexAny(k, "[*"); i >= 0 {
			k = strings.TrimSuffix(k[:i], ".")
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// TestReloadTableCoversConfig: every config field is under exactly one row
// of the reload table, and every row names a field, so a new field cannot
// be added without saying whether it reloads live.
func TestReloadTableCoversConfig(t *testing.T) {
	leaves := fieldPaths()
	if len(leaves) < 20 {
		t.Fatalf("found only %d config fields: %v", len(leaves), leaves)
	}
	used := map[string]bool{}
	for _, leaf := range leaves {
		f, ok := FieldOf(leaf)
		if !ok {
			t.Errorf("config field %s is in no row of the reload table", leaf)
			continue
		}
		used[f.Path] = true
	}
	for _, f := range Fields() {
		if !used[f.Path] {
			t.Errorf("reload table row %s names no config field", f.Path)
		}
		if f.Reload != Live && f.Reload != Restart {
			t.Errorf("reload table row %s: reload %v", f.Path, f.Reload)
		}
		for _, g := range Fields() {
			if g.Path != f.Path && strings.HasPrefix(g.Path, f.Path+".") {
				t.Errorf("rows %s and %s overlap", f.Path, g.Path)
			}
		}
	}
}

func TestChangedAndRestartRequired(t *testing.T) {
	base := `
listen: ":8080"
default_upstream: stable
upstreams: {stable: {instances: [{addr: "127.0.0.1:1"}]}}
`
	tests := []struct {
		name, next       string
		changed, restart []string
	}{
		{"same", base, nil, nil},
		{"live field", strings.Replace(base, "default_upstream: stable", "default_upstream: 127.0.0.1:2", 1), []string{"default_upstream"}, nil},
		{"restart field", strings.Replace(base, `":8080"`, `":8081"`, 1), []string{"listen"}, []string{"listen"}},
		{"nested restart field", base + "lifecycle: {reuse_port: true, drain_delay: 1s}\n", []string{"lifecycle.drain_delay", "lifecycle.reuse_port"}, []string{"lifecycle.reuse_port"}},
		{"both", base + "store: {history_limit: 5}\nproxy: {max_conns_per_host: 8}\n", []string{"proxy.max_conns_per_host", "store.history_limit"}, []string{"store.history_limit"}},
		{"a default written out is no change", base + "store: {history_limit: 100}\naccess_log: {path: stdout}\n", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := Parse([]byte(base))
			if err != nil {
				t.Fatal(err)
			}
			b, err := Parse([]byte(tt.next))
			if err != nil {
				t.Fatal(err)
			}
			if got := Changed(a, b); !slices.Equal(got, tt.changed) {
				t.Errorf("Changed = %v, want %v", got, tt.changed)
			}
			if got := RestartRequired(a, b); !slices.Equal(got, tt.restart) {
				t.Errorf("RestartRequired = %v, want %v", got, tt.restart)
			}
		})
	}
}

// TestREADMEReloadTable: the README's configuration section has a table of
// every row of the reload table, saying "live" or "restart" as it does.
func TestREADMEReloadTable(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9_.]+)` \\| (live|restart) \\|").FindAllStringSubmatch(string(data), -1) {
		rows[m[1]] = m[2]
	}
	for _, f := range Fields() {
		got, ok := rows[f.Path]
		if !ok {
			t.Errorf("README's reload table has no row for %s", f.Path)
			continue
		}
		if got != f.Reload.String() {
			t.Errorf("README says %s reloads %q, the table %q", f.Path, got, f.Reload)
		}
		delete(rows, f.Path)
	}
	for p := range rows {
		t.Errorf("README's reload table names %s, which the reload table does not", p)
	}
}
