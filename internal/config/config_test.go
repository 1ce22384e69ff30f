package config

import (
	"fmt"
	"github.com/graygate/graygate/internal/strict"
	"strings"
	"testing"
	"time"
)

func TestParseExample(t *testing.T) {
	c, err := Parse([]byte(`
listen: ":8081"
default_upstream: stable
trusted_proxies: ["10.0.0.0/8", "127.0.0.1"]
admin:
  tokens:
    - {name: ops, token: s3cret}
    - {name: dash, token: view, role: viewer}
identity:
  sources: [{header: X-User-Id}, {cookie: uid}]
  anonymous: ip
proxy:
  dial_timeout: 500ms
experiments:
  holdout: {percent: 5.25, salt: ho2026}
upstreams:
  stable: {instances: [{addr: "127.0.0.1:9001"}]}
  gray: {instances: [{addr: "http://127.0.0.1:9002", metadata: {version: "2"}}]}
routes:
  - {name: api, path_prefix: /api/, upstream: stable}
rules:
  - {key: g, type: gray, gray_percent: 10, targets: {gray: gray, stable: stable}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != ":8081" || c.AdminListen != "127.0.0.1:9080" || c.DataDir != "./data" || !*c.PreserveHost {
		t.Errorf("defaults wrong: %+v", c)
	}
	if c.Proxy.DialTimeout.Std() != 500*time.Millisecond || c.Admin.Tokens[0].Role != "admin" || c.Admin.Tokens[1].Role != "viewer" {
		t.Errorf("decoded wrong: %+v", c)
	}
	if h := c.Experiments.Holdout; h == nil || h.Percent != 5.25 || h.Salt != "ho2026" {
		t.Errorf("experiments.holdout = %+v", h)
	}
	pools, _ := c.Pools(nil, nil)
	if p := pools["gray"]; p.Instances[0].Addr != "127.0.0.1:9002" || p.Instances[0].Metadata["version"] != "2" {
		t.Errorf("pool = %+v", p.Instances[0])
	}
	if len(c.Rules) != 1 {
		t.Errorf("rules = %d", len(c.Rules))
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown top-level key", "listne: :1\n", []string{"listne: unknown field"}},
		{"unknown nested key", "upstreams: {a: {instances: [{addr: 'h:1', wieght: 2}]}}\n", []string{"upstreams.a.instances[0].wieght: unknown field"}},
		{"bad types", "listen: 80\nproxy: {dial_timeout: fast}\n", []string{"listen: expected a string, got 80", "proxy.dial_timeout: expected a non-negative duration"}},
		{"bad listen", "listen: nowhere\n", []string{`listen: must be host:port or :port, got "nowhere"`}},
		{"bad listen port", "listen: \":x\"\nadmin_listen: \"127.0.0.1:70000\"\n", []string{
			`listen: port "x" in ":x" is not a number from 0 to 65535 or a known service name`,
			`admin_listen: port "70000" in "127.0.0.1:70000" is not a number from 0 to 65535 or a known service name`}},
		{"bad upstream addr", "upstreams: {a: {instances: [{addr: 'h'}]}}\n", []string{"upstreams.a.instances[0].addr: invalid address"}},
		{"empty pool", "upstreams: {a: {instances: []}}\n", []string{"upstreams.a.instances: needs at least one instance"}},
		{"unknown default", "default_upstream: nope\n", []string{`default_upstream: "nope" is neither a configured upstream nor an address`}},
		{"default with a stray bracket", "default_upstream: \"http://]\"\n", []string{`default_upstream: "http://]" is neither a configured upstream nor an address: invalid URL "http://]": host "]" has a stray bracket`}},
		{"route problems", "routes: [{name: r, path_prefix: api, upstream: x}, {name: r}]\n",
			[]string{`routes[0].path_prefix: must start with "/"`, "routes[0].upstream:", `routes[1].name: duplicates routes[0].name "r"`}},
		{"identity max_length out of range", "identity: {max_length: 4097}\n", []string{"identity.max_length: must be 1..4096 bytes (0 is the default, 256), got 4097"}},
		{"identity ipv6_prefix out of range", "identity: {ipv6_prefix: 16}\n", []string{"identity.ipv6_prefix: must be 32..128 bits (0 is the default, 128: the whole address), got 16"}},
		{"admin timeouts of 0", "admin: {read_timeout: 0s, idle_timeout: 0s}\n", []string{
			`admin.read_timeout: must be a positive duration such as "60s"`, `admin.idle_timeout: must be a positive duration such as "60s"`}},
		{"token problems", "admin: {tokens: [{name: a}, {name: a, token: t, role: root}]}\n",
			[]string{"admin.tokens[0]: set exactly one of token or token_env", `admin.tokens[1].name: duplicates`, `admin.tokens[1].role: must be "admin", "viewer" or "events", got "root"`}},
		{"token with a trailing newline", "admin: {tokens: [{name: ops, token: \"s3cret\\n\"}]}\n",
			[]string{"admin.tokens[0].token: starts or ends with whitespace (a newline a secret file ends with?), which no Authorization header can carry"}},
		{"token with a leading space", "admin: {tokens: [{name: ops, token: \" s3cret\"}]}\n",
			[]string{"admin.tokens[0].token: starts or ends with whitespace"}},
		{"token with a control character", "admin: {tokens: [{name: ops, token: \"s3\\x01cret\"}]}\n",
			[]string{"admin.tokens[0].token: holds a control character (byte 2 is 0x01)"}},
		{"same token twice", "admin: {tokens: [{name: dash, token: same, role: viewer}, {name: ops, token: same, role: admin}]}\n",
			[]string{`admin.tokens[1]: has the same secret as admin.tokens[0] ("dash")`}},
		{"max_header_bytes too large", "proxy: {max_header_bytes: 99999999999}\n", []string{"proxy.max_header_bytes: must be 1024..1048576 (1 KiB..1 MiB; 0 is the default, 16384), got 99999999999"}},
		{"max_header_bytes too small", "proxy: {max_header_bytes: 100}\n", []string{"proxy.max_header_bytes: must be 1024..1048576"}},
		{"max_client_connections negative", "proxy: {max_client_connections: -1}\n", []string{"proxy.max_client_connections: must not be negative (0 is the default, from the open-file limit), got -1"}},
		{"bad cidr", "trusted_proxies: [10.0.0.0/40]\n", []string{`trusted_proxies[0]: invalid CIDR or address "10.0.0.0/40"`}},
		{"bad identity", "identity: {anonymous: nope}\n", []string{`identity.anonymous: must be "cookie" or "ip"`}},
		{"bad yaml", "listen: [\n", []string{"invalid YAML"}},
		{"holdout above 100", "experiments: {holdout: {percent: 120}}\n", []string{"experiments.holdout.percent: must be 0..100, got 120"}},
		{"holdout decimals", "experiments: {holdout: {percent: 5.125, salt: h}}\n", []string{"experiments.holdout.percent: allows at most two decimals, got 5.125"}},
		{"holdout unknown key", "experiments: {holdout: {percentage: 5}}\n", []string{"experiments.holdout.percentage: unknown field"}},
		{"tracing without an endpoint", "tracing: {sample_ratio: 0.5}\n", []string{"tracing.otlp_endpoint: is required"}},
		{"tracing endpoint not a URL", "tracing: {otlp_endpoint: '127.0.0.1:4318'}\n", []string{`tracing.otlp_endpoint: must be an http:// or https:// URL with a host and no query, such as "http://127.0.0.1:4318", got "127.0.0.1:4318"`}},
		{"tracing endpoint with a query", "tracing: {otlp_endpoint: 'http://c:4318/?x=1'}\n", []string{"tracing.otlp_endpoint: must be an http:// or https:// URL"}},
		{"tracing ratio", "tracing: {otlp_endpoint: 'http://c:4318', sample_ratio: 1.5}\n", []string{"tracing.sample_ratio: must be 0..1, got 1.5"}},
		{"tracing service name", "tracing: {otlp_endpoint: 'http://c:4318', service_name: ' '}\n", []string{"tracing.service_name: must not be empty"}},
		{"history_limit above the maximum", "store: {history_limit: 1001}\n", []string{"store.history_limit: must be 1..1000 (versions kept per rule; 0 or unset means 100), got 1001"}},
		{"history_limit huge", "store: {history_limit: 100000000}\n", []string{"store.history_limit: must be 1..1000 (versions kept per rule; 0 or unset means 100), got 100000000"}},
		{"history_limit negative", "store: {history_limit: -1}\n", []string{"store.history_limit: must be 1..1000 (versions kept per rule; 0 or unset means 100), got -1"}},
		{"tracing unknown key", "tracing: {otlp_endpoint: 'http://c:4318', endpoint: x}\n", []string{"tracing.endpoint: unknown field"}},
		{"key given twice", "listen: ':1'\nupstreams:\n  a: {instances: [{addr: 'h:1', weight: 1, weight: 2}]}\n  a: {instances: [{addr: 'h:2'}]}\nrules:\n  - {key: k, type: gray, gray_percent: 5, gray_percent: 50}\n", []string{
			`upstreams.a.instances[0].weight: duplicate key: "weight" is given more than once in the same mapping (lines 3 and 3)`,
			`upstreams.a: duplicate key: "a" is given more than once in the same mapping (lines 3 and 4)`,
			`rules[0].gray_percent: duplicate key: "gray_percent" is given more than once in the same mapping (lines 6 and 6)`}},
		{"duration as a number", "proxy: {dial_timeout: 2}\n", []string{`proxy.dial_timeout: expected a duration string such as "500ms" or "30s", got 2`}},
		{"route host with a port", "routes: [{name: r, host: 'api.example.com:8080'}]\n", []string{`routes[0].host: must not have a port (a request's port is not compared), got "api.example.com:8080": use "api.example.com"`}},
		{"route host with a scheme", "routes: [{name: r, host: 'https://api.example.com'}]\n", []string{`routes[0].host: must be a host name without a scheme, got "https://api.example.com"`}},
		{"route host with a path", "routes: [{name: r, host: 'api.example.com/v1'}]\n", []string{`routes[0].host: must be a host name (ASCII letters`}},
		{"route host IPv6 without brackets", "routes: [{name: r, host: '::1'}]\n", []string{`routes[0].host: an IPv6 address must be in brackets, as in a Host header, got "::1": use "[::1]"`}},
		{"route host IPv6 with a port", "routes: [{name: r, host: '[::1]:8080'}]\n", []string{`routes[0].host: must not have a port (a request's port is not compared), got "[::1]:8080": use "[::1]"`}},
		{"route host wildcard", "routes: [{name: r, host: '*.example.com'}]\n", []string{`routes[0].host: wildcards are not supported (a host is matched exactly), got "*.example.com"`}},
		{"route host not ASCII", "routes: [{name: r, host: 'bücher.example'}]\n", []string{`routes[0].host: must be a host name (ASCII letters, digits, ".", "-"; an international name in its punycode form), got "bücher.example"`}},
		{"route shadowed by an earlier one", "routes: [{name: a, host: API.example.com, path_prefix: /v1/}, {name: b, host: api.example.com, path_prefix: /v1/}, {name: c}, {name: d, path_prefix: /}]\n",
			[]string{`routes[1]: has the host "api.example.com" and path_prefix "/v1/" of routes[0] ("a"), so it would never be used`, `routes[3]: has the host "" and path_prefix "/" of routes[2] ("c"), so it would never be used`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse(%q) succeeded", tt.yaml)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse(%q) = %v\nwant it to contain %q", tt.yaml, err, w)
				}
			}
		})
	}
}

// TestRouteHosts: the route hosts a request's Host can equal are valid,
// and so are two routes of one host with different prefixes.
func TestRouteHosts(t *testing.T) {
	for _, h := range []string{"api.example.com", "API.Example.com", "localhost", "10.0.0.1", "[::1]", "[2001:db8::1]", "xn--bcher-kva.example", "my_host.internal", "example.com."} {
		y := fmt.Sprintf("routes: [{name: a, host: %q, path_prefix: /v1/}, {name: b, host: %q, path_prefix: /v2/}, {name: c, host: %q}]\n", h, h, h)
		if _, err := Parse([]byte(y)); err != nil {
			t.Errorf("route host %q: %v", h, err)
		}
	}
}

// TestHistoryLimitBounds: the bounds themselves are valid, and 0, as the
// error for a bad value says, means the default of 100.
func TestHistoryLimitBounds(t *testing.T) {
	for n, want := range map[int]int{1: 1, 1000: 1000, 0: 100} {
		c, err := Parse([]byte(fmt.Sprintf("store: {history_limit: %d}\n", n)))
		if err != nil || c.Store.HistoryLimit != want {
			t.Errorf("history_limit %d: %+v %v, want %d", n, c, err, want)
		}
	}
}

func TestTracingDefaults(t *testing.T) {
	c, err := Parse([]byte("listen: ':1'\n"))
	if err != nil || c.Tracing != nil {
		t.Fatalf("tracing is not off by default: %+v %v", c.Tracing, err)
	}
	c, err = Parse([]byte("tracing: {otlp_endpoint: 'http://127.0.0.1:4318'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if tr := c.Tracing; tr.OTLPEndpoint != "http://127.0.0.1:4318" || *tr.SampleRatio != 0.01 || tr.ServiceName != "graygate" {
		t.Errorf("tracing defaults = %+v", tr)
	}
	c, err = Parse([]byte("tracing: {otlp_endpoint: 'https://otel.example/base/', sample_ratio: 0, service_name: edge}\n"))
	if err != nil || *c.Tracing.SampleRatio != 0 || c.Tracing.ServiceName != "edge" {
		t.Errorf("tracing = %+v %v", c.Tracing, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("listen: ':1'\nupstreams: {a: {instances: [{addr: 'h:1'}]}}\n"))
	f.Add([]byte("routes: [{name: r}]\nrules: [{key: a}]\n"))
	f.Add([]byte("{1: 2}"))
	f.Add([]byte("experiments: {holdout: {percent: 5, salt: holdout}}\n"))
	f.Add([]byte("experiments: {holdout: {percent: -0.001, salt: [1]}}\n"))
	f.Add([]byte("notifications: [{name: a, url: 'http://h/', events: [srm, nope]}, {url: 'ftp://x', secret_env: X}]\n"))
	f.Add([]byte("tracing: {otlp_endpoint: 'http://h:1/p', sample_ratio: 0.5, service_name: g}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err == nil && c.Listen == "" {
			t.Fatal("valid config without defaults")
		}
	})
}

func TestExperimentsConfig(t *testing.T) {
	c, err := Parse([]byte(`
experiments:
  exposure_log: /var/log/graygate/exposures.jsonl
  store: redis://:pw@127.0.0.1:6379/2
  srm_action: freeze
  conversion_window: 24h
  flush_interval: 250ms
  gateway: gw-1
`))
	if err != nil {
		t.Fatal(err)
	}
	e := c.Experiments
	if e.ExposureLog != "/var/log/graygate/exposures.jsonl" || e.Store != "redis://:pw@127.0.0.1:6379/2" || e.SRMAction != "freeze" ||
		e.ConversionWindow.Std() != 24*time.Hour || e.FlushInterval.Std() != 250*time.Millisecond || e.Gateway != "gw-1" ||
		e.MaxUnits != DefaultMaxUnits || e.BufferEvents != DefaultBufferEvents {
		t.Errorf("experiments = %+v", e)
	}
	d, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Experiments.ConversionWindow.Std() != 72*time.Hour || d.Experiments.FlushInterval.Std() != time.Second || d.Experiments.SRMAction != "" || d.Experiments.Store != "" {
		t.Errorf("experiment defaults = %+v", d.Experiments)
	}
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"bad store scheme", "experiments: {store: 'etcd://h:1/x'}", []string{`experiments.store: must be redis://host:port/db or rediss://host:port/db, got "etcd://h:1/x"`}},
		{"bad store db", "experiments: {store: 'redis://h:1/notadb'}", []string{`experiments.store: invalid Redis URL "redis://h:1/notadb"`}},
		{"password redacted", "experiments: {store: 'redis://u:secret@h:1/x'}", []string{`experiments.store: invalid Redis URL "redis://u:xxxxx@h:1/x"`}},
		{"bad action", "experiments: {srm_action: stop}", []string{`experiments.srm_action: must be "freeze" or empty, got "stop"`}},
		{"short window", "experiments: {conversion_window: 10ms}", []string{"experiments.conversion_window: must be at least 1s, got 10ms"}},
		{"flush too slow", "experiments: {flush_interval: 2m}", []string{"experiments.flush_interval: must be 10ms..1m, got 2m0s"}},
		{"negative bounds", "experiments: {max_units: -1, buffer_events: -2}", []string{"experiments.max_units: must be at least 1, got -1", "experiments.buffer_events: must be at least 1, got -2"}},
		{"unknown key", "experiments: {exposure_logs: x}", []string{"experiments.exposure_logs: unknown field"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse accepted %s", tt.yaml)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\nlacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
}

// TestOneBadValueOnly: a value its type's decoder refuses (a Duration)
// does not stop the fields after it from being decoded and checked, so
// nothing else is reported: upstreams is decoded after proxy, and
// default_upstream names one of them.
func TestOneBadValueOnly(t *testing.T) {
	for _, bad := range []string{"proxy: {read_timeout: -1s}", "lifecycle: {drain_delay: soon}", "limits: {timeout: -2s}"} {
		_, err := Parse([]byte("default_upstream: stable\nupstreams: {stable: {instances: [{addr: 'h:1'}]}}\n" + bad + "\n"))
		if fields := strict.Fields(err); len(fields) != 1 {
			t.Errorf("%s: %v, want exactly one problem", bad, err)
		}
	}
}

// TestNonFiniteNumbers: YAML's .inf and .nan have no JSON form; they are
// refused with their path, not as a failure to convert the file.
func TestNonFiniteNumbers(t *testing.T) {
	for _, v := range []string{".inf", "-.inf", ".nan"} {
		_, err := Parse([]byte("default_upstream: stable\nupstreams: {stable: {instances: [{addr: 'h:1'}]}}\n" +
			"rules:\n  - {key: a, type: gray, gray_percent: " + v + ", targets: {gray: stable, stable: stable}}\n"))
		fields := strict.Fields(err)
		if len(fields) != 1 || fields[0].Path != "rules[0].gray_percent" || !strings.Contains(fields[0].Message, "finite") {
			t.Errorf("gray_percent: %s: %v, want one problem at rules[0].gray_percent", v, err)
		}
	}
}

// TestAdminTokenSecrets: a token no Authorization header can carry
// (whitespace around it, as a secret file's newline leaves, or a control
// character) is refused naming the field, from the file or from the
// environment, and the message never quotes the secret; before, such a
// token was accepted and every request carrying it got 401. Any token a
// header can carry is accepted.
func TestAdminTokenSecrets(t *testing.T) {
	tests := []struct {
		name, env, secret string
		want              string // "" for valid
	}{
		{"plain", "", "s3cret", ""},
		{"inner space and tab", "", "s3 cr\tet", ""},
		{"punctuation and UTF-8", "", "s3cret!~/+=é", ""},
		{"trailing newline", "", "s3cret\n", "admin.tokens[0].token: starts or ends with whitespace"},
		{"trailing CRLF", "", "s3cret\r\n", "admin.tokens[0].token: starts or ends with whitespace"},
		{"leading tab", "", "\ts3cret", "admin.tokens[0].token: starts or ends with whitespace"},
		{"NUL inside", "", "s3\x00cret", "admin.tokens[0].token: holds a control character (byte 2 is 0x00)"},
		{"DEL inside", "", "s3\x7fcret", "admin.tokens[0].token: holds a control character (byte 2 is 0x7f)"},
		{"env plain", "GG_TEST_TOKEN_SECRET", "s3cret", ""},
		{"env trailing newline", "GG_TEST_TOKEN_SECRET", "s3cret\n", "admin.tokens[0].token_env: environment variable GG_TEST_TOKEN_SECRET starts or ends with whitespace"},
		{"env control character", "GG_TEST_TOKEN_SECRET", "s3\x1bcret", "admin.tokens[0].token_env: environment variable GG_TEST_TOKEN_SECRET holds a control character (byte 2 is 0x1b)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := fmt.Sprintf("{name: ops, token: %q}", tt.secret)
			if tt.env != "" {
				t.Setenv(tt.env, tt.secret)
				tok = "{name: ops, token_env: " + tt.env + "}"
			}
			_, err := Parse([]byte("admin: {tokens: [" + tok + "]}\n"))
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("token %q: %v, want it accepted", tt.secret, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("token %q: %v, want an error containing %q", tt.secret, err, tt.want)
			case err != nil && strings.Contains(err.Error(), "s3"):
				t.Errorf("token %q: the error quotes the secret: %v", tt.secret, err)
			}
		})
	}
}
