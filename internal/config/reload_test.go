package config

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/graygate/graygate/internal/certs/certstest"
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
		{"identity defaults written out are no change", base + "identity: {sources: [{header: X-User-Id}, {cookie: user_id}, {query: user_id}], anonymous: cookie, anonymous_cookie: gg_uid, max_length: 256}\n", nil, nil},
		{"no identity sources is a change", base + "identity: {sources: []}\n", []string{"identity"}, nil},
		{"identity max_length", base + "identity: {max_length: 64}\n", []string{"identity"}, nil},
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

// TestDefaultWrittenOutNeedsNoRestart: for every restart row with a
// default, a config that writes the default out is no change from one that
// leaves it unset, so a reload names nothing; another value is named, which
// shows that each case reaches its row. A restart row added later fails
// here until it has a case or is listed as judged elsewhere.
func TestDefaultWrittenOutNeedsNoRestart(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	const base = "default_upstream: stable\nupstreams: {stable: {instances: [{addr: \"127.0.0.1:1\"}]}}\n"
	const etcd = `store: {url: "etcd://127.0.0.1:1/gg"`
	cert := certstest.NewCA(t, t.TempDir(), "test").Server("gw.pem", "gw.key", "gw.test")
	tests := []struct {
		row, before, dflt, other string
	}{
		{"listen", "", `listen: ":8080"`, `listen: ":8081"`},
		{"admin_listen", "", `admin_listen: "127.0.0.1:9080"`, `admin_listen: "127.0.0.1:9081"`},
		{"data_dir", "", "data_dir: ./data", "data_dir: ./other"},
		{"tls_listen", "", `tls_listen: ""`, fmt.Sprintf("tls_listen: \":8443\"\ntls: {certificates: [{cert_file: %q, key_file: %q}]}", cert.CertFile, cert.KeyFile)},
		{"h2c", "", "h2c: false", "h2c: true"},
		{"lifecycle.reuse_port", "", "lifecycle: {reuse_port: false}", "lifecycle: {reuse_port: true}"},
		{"experiments.store", "", `experiments: {store: ""}`, `experiments: {store: "redis://127.0.0.1:1/0"}`},
		{"experiments.exposure_log", "", `experiments: {exposure_log: ""}`, "experiments: {exposure_log: /tmp/x.log}"},
		{"experiments.flush_interval", "", "experiments: {flush_interval: 1s}", "experiments: {flush_interval: 2s}"},
		{"experiments.max_units", "", "experiments: {max_units: 5000000}", "experiments: {max_units: 10}"},
		{"experiments.buffer_events", "", "experiments: {buffer_events: 100000}", "experiments: {buffer_events: 10}"},
		// The host name and the listen port: what a restart would use.
		{"experiments.gateway", "", fmt.Sprintf("experiments: {gateway: %q}", net.JoinHostPort(host, "8080")), "experiments: {gateway: gw-1}"},
		{"experiments.gateway", `listen: ":9000"`, fmt.Sprintf("listen: \":9000\"\nexperiments: {gateway: %q}", net.JoinHostPort(host, "9000")), "listen: \":9000\"\nexperiments: {gateway: " + net.JoinHostPort(host, "8080") + "}"},
		{"tracing", `tracing: {otlp_endpoint: "http://127.0.0.1:4318"}`, `tracing: {otlp_endpoint: "http://127.0.0.1:4318", sample_ratio: 0.01, service_name: graygate}`, `tracing: {otlp_endpoint: "http://127.0.0.1:4318", sample_ratio: 0.5}`},
		{"tracing", "", "tracing: null", `tracing: {otlp_endpoint: "http://127.0.0.1:4318"}`},
		{"store.history_limit", "", "store: {history_limit: 100}", "store: {history_limit: 7}"},
		{"admin.read_timeout", "", "admin: {read_timeout: 60s}", "admin: {read_timeout: 5s}"},
		{"admin.idle_timeout", "", "admin: {idle_timeout: 2m}", "admin: {idle_timeout: 5s}"},
		{"store.url", "", `store: {url: ""}`, etcd + "}"},
		{"store.tls", etcd + "}", etcd + ", tls: {enabled: false}}", etcd + ", tls: {enabled: true}}"},
		{"store.username", etcd + "}", etcd + `, username: ""}`, etcd + ", username: u, password_env: HOME}"},
		{"store.password_env", etcd + "}", etcd + `, password_env: ""}`, etcd + ", username: u, password_env: HOME}"},
	}
	// The listening server's setting is judged by the data plane with its
	// own default (proxy.Reconfigure), which the gateway asks instead:
	// gateway.TestReloadDefaultWrittenOutNeedsNoRestart.
	dataPlane := []string{"proxy.max_header_bytes"}
	covered := map[string]bool{}
	for _, tt := range tests {
		covered[tt.row] = true
	}
	for _, f := range Fields() {
		if f.Reload == Restart && !covered[f.Path] && !slices.Contains(dataPlane, f.Path) {
			t.Errorf("restart row %s has no case: add its default written out, or say why it has none", f.Path)
		}
	}
	parse := func(t *testing.T, extra string) *Config {
		t.Helper()
		c, err := Parse([]byte(base + extra + "\n"))
		if err != nil {
			t.Fatalf("Parse(%q): %v", extra, err)
		}
		return c
	}
	for _, tt := range tests {
		t.Run(tt.row+": "+tt.dflt, func(t *testing.T) {
			running := parse(t, tt.before)
			if got := RestartRequired(running, parse(t, tt.dflt)); len(got) != 0 {
				t.Errorf("%s written out: RestartRequired = %v, want none", tt.dflt, got)
			}
			if got := RestartRequired(parse(t, tt.dflt), running); len(got) != 0 {
				t.Errorf("%s taken out: RestartRequired = %v, want none", tt.dflt, got)
			}
			if got := RestartRequired(running, parse(t, tt.other)); !slices.Contains(got, tt.row) {
				t.Errorf("%s: RestartRequired = %v, want %s named", tt.other, got, tt.row)
			}
		})
	}
}
