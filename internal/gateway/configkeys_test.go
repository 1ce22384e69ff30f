package gateway

import (
	"context"
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/graygate/graygate/internal/certs/certstest"
	"github.com/graygate/graygate/internal/config"
)

// The contract of a config reload: every config key either applies live
// (liveKeys, each with the test that proves it through a real reload) or
// is named in the status's restart_required and last_reload_result
// (restartKeys, each with the name the reload reports). A key in neither
// list fails TestEveryConfigKeyIsLiveOrRestartRequired, so a key added
// later cannot ship without that decision.
//
// Keys are paths of JSON names: "upstreams.*.balancer" is the balancer of
// every upstream (a map's values), "routes[].name" the name of every route
// (a slice's elements). A leaf is a value that holds no struct of config
// keys: a scalar, a list of scalars, a map of scalars, or a type with its
// own JSON form.

// liveKeys maps every live key to the tests that prove it live, separated
// by ", ": a test of this package ("TestX", "TestX/subtest") or of another
// internal package ("console.TestX"). "TestLiveKeysApply/<key>" is a case
// of liveCases.
var liveKeys = map[string]string{
	"default_upstream": "TestConfigReload",
	"preserve_host":    "TestLiveKeysApply/preserve_host",
	"trusted_proxies":  "TestLiveKeysApply/trusted_proxies",
	"trust_gray_tag":   "TestLiveKeysApply/trust_gray_tag",
	"name":             "TestNotificationsReload",

	"tls.certificates[].cert_file": "TestReloadTLSSettings",
	"tls.certificates[].key_file":  "TestReloadTLSSettings",
	"tls.min_version":              "TestLiveKeysApply/tls.min_version",
	"tls.client_ca_file":           "TestLiveKeysApply/tls.client_ca_file",

	"breaker.enabled":              "TestLiveKeysApply/breaker.enabled",
	"breaker.window":               "TestLiveKeysApply/breaker.window",
	"breaker.error_rate":           "TestLiveKeysApply/breaker.error_rate",
	"breaker.p99_latency":          "TestLiveKeysApply/breaker.p99_latency",
	"breaker.min_requests":         "TestLiveKeysApply/breaker.min_requests",
	"breaker.latency_min_requests": "TestLiveKeysApply/breaker.latency_min_requests",
	"breaker.open_for":             "TestLiveKeysApply/breaker.open_for",
	"breaker.half_open_probes":     "TestLiveKeysApply/breaker.half_open_probes",
	"breaker.error_statuses":       "TestLiveKeysApply/breaker.error_statuses",
	"breaker.grpc_error_codes":     "TestLiveKeysApply/breaker.grpc_error_codes",

	"limits.timeout":                       "TestLiveKeysApply/limits.timeout",
	"limits.max_body_bytes":                "TestReloadAppliesLive/limits.max_body_bytes",
	"limits.fallback_body_bytes":           "TestLiveKeysApply/limits.fallback_body_bytes",
	"limits.rate_limit.rps":                "TestLiveKeysApply/limits.rate_limit.rps",
	"limits.rate_limit.burst":              "TestLiveKeysApply/limits.rate_limit.burst",
	"limits.rate_limit.per_identity":       "TestLiveKeysApply/limits.rate_limit.per_identity",
	"limits.rate_limit.max_identities":     "TestLiveKeysApply/limits.rate_limit.max_identities",
	"limits.rate_limit.max_identity_bytes": "TestLiveKeysApply/limits.rate_limit.max_identity_bytes",

	"lifecycle.drain_delay":      "TestLiveKeysApply/lifecycle.drain_delay",
	"lifecycle.shutdown_timeout": "TestLiveKeysApply/lifecycle.shutdown_timeout",

	"targeting.region.header":               "TestLiveKeysApply/targeting.region.header",
	"targeting.region.geoip_db":             "TestLiveKeysApply/targeting.region.geoip_db",
	"targeting.region.language":             "TestLiveKeysApply/targeting.region.language",
	"targeting.region.phone_header":         "TestLiveKeysApply/targeting.region.phone_header",
	"targeting.region.phone_claim":          "TestLiveKeysApply/targeting.region.phone_claim",
	"targeting.region.default_phone_region": "TestLiveKeysApply/targeting.region.default_phone_region",
	"targeting.region.sources":              "TestLiveKeysApply/targeting.region.sources",
	"targeting.tags.header":                 "TestLiveKeysApply/targeting.tags.header",
	"targeting.tags.jwt.header":             "TestLiveKeysApply/targeting.tags.jwt.header",
	"targeting.tags.jwt.cookie":             "TestLiveKeysApply/targeting.tags.jwt.cookie",
	"targeting.tags.jwt.hs256_secret_env":   "TestLiveKeysApply/targeting.tags.jwt.hs256_secret_env",
	// A reload reads the key files again: a key rotated in place applies.
	"targeting.tags.jwt.hs256_secret_file":         "TestReloadAppliesLive/targeting_and_identity.jwt, TestReloadRereadsTargetingFiles/hs256_secret_file",
	"targeting.tags.jwt.public_key_file":           "TestLiveKeysApply/targeting.tags.jwt.public_key_file, TestReloadRereadsTargetingFiles/public_key_file",
	"targeting.tags.jwt.jwks_file":                 "TestLiveKeysApply/targeting.tags.jwt.jwks_file, TestReloadRereadsTargetingFiles/jwks_file",
	"targeting.tags.jwt.jwks_url":                  "TestLiveKeysApply/targeting.tags.jwt.jwks_url",
	"targeting.tags.jwt.jwks_ca_file":              "TestLiveKeysApply/targeting.tags.jwt.jwks_ca_file",
	"targeting.tags.jwt.jwks_timeout":              "TestLiveKeysApply/targeting.tags.jwt.jwks_timeout",
	"targeting.tags.jwt.jwks_refresh_interval":     "TestLiveKeysApply/targeting.tags.jwt.jwks_refresh_interval",
	"targeting.tags.jwt.jwks_min_refresh_interval": "TestLiveKeysApply/targeting.tags.jwt.jwks_min_refresh_interval",
	"targeting.tags.jwt.issuer":                    "TestLiveKeysApply/targeting.tags.jwt.issuer",
	"targeting.tags.jwt.audience":                  "TestLiveKeysApply/targeting.tags.jwt.audience",
	"targeting.tags.jwt.identity_claim":            "TestLiveKeysApply/targeting.tags.jwt.identity_claim",
	"targeting.tags.jwt.tags_claim":                "TestLiveKeysApply/targeting.tags.jwt.tags_claim",
	"targeting.tags.jwt.phone_claim":               "TestLiveKeysApply/targeting.tags.jwt.phone_claim",
	"targeting.tags.jwt.leeway":                    "TestLiveKeysApply/targeting.tags.jwt.leeway",
	"targeting.tags.redis.addr":                    "TestLiveKeysApply/targeting.tags.redis.addr",
	"targeting.tags.redis.key_pattern":             "TestLiveKeysApply/targeting.tags.redis.key_pattern",
	"targeting.tags.redis.db":                      "TestLiveKeysApply/targeting.tags.redis.db",
	"targeting.tags.redis.password_env":            "TestLiveKeysApply/targeting.tags.redis.password_env",
	"targeting.tags.redis.timeout":                 "TestLiveKeysApply/targeting.tags.redis.timeout",
	"targeting.tags.redis.cache_ttl":               "TestLiveKeysApply/targeting.tags.redis.cache_ttl",
	"targeting.tags.redis.cache_size":              "TestLiveKeysApply/targeting.tags.redis.cache_size",
	"targeting.tags.redis.breaker_failures":        "TestLiveKeysApply/targeting.tags.redis.breaker_failures",
	"targeting.tags.redis.breaker_cooldown":        "TestLiveKeysApply/targeting.tags.redis.breaker_cooldown",
	"targeting.tag_types.*":                        "TestLiveKeysApply/targeting.tag_types.*",

	"experiments.holdout.percent":   "TestHoldoutReload",
	"experiments.holdout.salt":      "TestLiveKeysApply/experiments.holdout.salt",
	"experiments.srm_action":        "TestLiveKeysApply/experiments.srm_action",
	"experiments.conversion_window": "TestLiveKeysApply/experiments.conversion_window",

	"admin.tokens[].name":      "TestLiveKeysApply/admin.tokens[].name",
	"admin.tokens[].token":     "TestReloadRevokesAdminToken",
	"admin.tokens[].token_env": "TestLiveKeysApply/admin.tokens[].token_env",
	"admin.tokens[].role":      "TestLiveKeysApply/admin.tokens[].role",

	"identity.sources[].header": "TestReloadAppliesLive/identity.sources",
	"identity.sources[].cookie": "TestLiveKeysApply/identity.sources[].cookie",
	"identity.sources[].query":  "TestLiveKeysApply/identity.sources[].query",
	"identity.anonymous":        "TestLiveKeysApply/identity.anonymous",
	"identity.anonymous_cookie": "TestLiveKeysApply/identity.anonymous_cookie",
	"identity.jwt":              "TestReloadAppliesLive/targeting_and_identity.jwt",
	"identity.max_length":       "TestLiveKeysApply/identity.max_length",
	"identity.ipv6_prefix":      "TestLiveKeysApply/identity.ipv6_prefix",

	"proxy.dial_timeout":            "TestLiveKeysApply/proxy.dial_timeout",
	"proxy.response_header_timeout": "TestLiveKeysApply/proxy.response_header_timeout",
	"proxy.idle_timeout":            "TestLiveKeysApply/proxy.idle_timeout",
	"proxy.read_timeout":            "TestLiveKeysApply/proxy.read_timeout",
	// Live toward HTTP/1.1 pools; toward h2 and h2c pools, whose HTTP/2
	// transports the data plane keeps across a change of this option
	// alone, the reload names it until they are replaced.
	"proxy.write_timeout":                "TestLiveKeysApply/proxy.write_timeout, TestReloadWriteTimeoutReachesH2CPools",
	"proxy.read_header_timeout":          "TestLiveKeysApply/proxy.read_header_timeout, proxy.TestReconfigureAppliesClientTimeouts",
	"proxy.client_idle_timeout":          "TestLiveKeysApply/proxy.client_idle_timeout, proxy.TestReconfigureAppliesClientTimeouts",
	"proxy.client_read_timeout":          "TestLiveKeysApply/proxy.client_read_timeout",
	"proxy.client_write_timeout":         "TestLiveKeysApply/proxy.client_write_timeout",
	"proxy.max_conns_per_host":           "TestLiveKeysApply/proxy.max_conns_per_host",
	"proxy.max_client_connections":       "TestLiveKeysApply/proxy.max_client_connections",
	"proxy.allow_underscores_in_headers": "TestLiveKeysApply/proxy.allow_underscores_in_headers",
	"proxy.via":                          "TestLiveKeysApply/proxy.via",

	"access_log.enabled": "TestReloadAccessLogOffClosesFile",
	"access_log.path":    "TestReloadAppliesLive/access_log.path",

	"upstreams.*.instances[].addr":                    "TestReloadAppliesLive/upstreams",
	"upstreams.*.instances[].weight":                  "TestLiveKeysApply/upstreams.*.instances[].weight",
	"upstreams.*.instances[].metadata.*":              "TestLiveKeysApply/upstreams.*.instances[].metadata.*",
	"upstreams.*.discover":                            "TestDiscoveryFollowsReload",
	"upstreams.*.balancer":                            "TestLiveKeysApply/upstreams.*.balancer",
	"upstreams.*.version_header":                      "TestLiveKeysApply/upstreams.*.version_header",
	"upstreams.*.passive_health.consecutive_failures": "TestLiveKeysApply/upstreams.*.passive_health.consecutive_failures",
	"upstreams.*.passive_health.base_ejection":        "TestLiveKeysApply/upstreams.*.passive_health.base_ejection",
	"upstreams.*.passive_health.max_ejection":         "TestLiveKeysApply/upstreams.*.passive_health.max_ejection",
	"upstreams.*.active_health.path":                  "TestLiveKeysApply/upstreams.*.active_health.path",
	"upstreams.*.active_health.interval":              "TestLiveKeysApply/upstreams.*.active_health.interval",
	"upstreams.*.active_health.timeout":               "TestLiveKeysApply/upstreams.*.active_health.timeout",
	"upstreams.*.active_health.healthy_threshold":     "TestLiveKeysApply/upstreams.*.active_health.healthy_threshold",
	"upstreams.*.active_health.unhealthy_threshold":   "TestLiveKeysApply/upstreams.*.active_health.unhealthy_threshold",
	"upstreams.*.max_concurrent":                      "TestLiveKeysApply/upstreams.*.max_concurrent",
	"upstreams.*.protocol":                            "TestLiveKeysApply/upstreams.*.protocol",
	"upstreams.*.ca_file":                             "TestLiveKeysApply/upstreams.*.ca_file",
	"upstreams.*.server_name":                         "TestLiveKeysApply/upstreams.*.server_name",

	"routes[].name":                          "TestLiveKeysApply/routes[].name",
	"routes[].host":                          "TestLiveKeysApply/routes[].host",
	"routes[].path_prefix":                   "TestLiveKeysApply/routes[].path_prefix",
	"routes[].upstream":                      "TestLiveKeysApply/routes[].upstream",
	"routes[].preserve_host":                 "TestLiveKeysApply/routes[].preserve_host",
	"routes[].version_header":                "TestLiveKeysApply/routes[].version_header",
	"routes[].timeout":                       "TestLiveKeysApply/routes[].timeout",
	"routes[].max_body_bytes":                "TestLiveKeysApply/routes[].max_body_bytes",
	"routes[].fallback_body_bytes":           "TestLiveKeysApply/routes[].fallback_body_bytes",
	"routes[].rate_limit.rps":                "TestLiveKeysApply/routes[].rate_limit.rps",
	"routes[].rate_limit.burst":              "TestLiveKeysApply/routes[].rate_limit.burst",
	"routes[].rate_limit.per_identity":       "TestLiveKeysApply/routes[].rate_limit.per_identity",
	"routes[].rate_limit.max_identities":     "TestLiveKeysApply/routes[].rate_limit.max_identities",
	"routes[].rate_limit.max_identity_bytes": "TestLiveKeysApply/routes[].rate_limit.max_identity_bytes",

	"notifications[].name":       "TestNotificationsReload",
	"notifications[].url":        "TestNotificationsReload",
	"notifications[].events":     "TestLiveKeysApply/notifications[].events",
	"notifications[].secret_env": "TestLiveKeysApply/notifications[].secret_env",

	"rules": "TestReloadAppliesLive/rules",
}

// restartKeys maps every key that needs a restart to the name a reload
// that changes it reports in restart_required: the row of the reload
// table (config.Fields) that covers it.
var restartKeys = map[string]string{
	"listen":               "listen",
	"admin_listen":         "admin_listen",
	"data_dir":             "data_dir",
	"tls_listen":           "tls_listen", // removed too: TestReloadRemovingTLSListenNamesRestart
	"h2c":                  "h2c",
	"lifecycle.reuse_port": "lifecycle.reuse_port",
	"admin.read_timeout":   "admin.read_timeout",
	"admin.idle_timeout":   "admin.idle_timeout",

	"experiments.exposure_log":   "experiments.exposure_log",
	"experiments.store":          "experiments.store",
	"experiments.flush_interval": "experiments.flush_interval",
	"experiments.max_units":      "experiments.max_units",
	"experiments.buffer_events":  "experiments.buffer_events",
	"experiments.gateway":        "experiments.gateway",

	"tracing.otlp_endpoint": "tracing",
	"tracing.sample_ratio":  "tracing",
	"tracing.service_name":  "tracing",

	// Judged by its effective value: TestReloadDefaultWrittenOutNeedsNoRestart.
	"proxy.max_header_bytes": "proxy.max_header_bytes",

	"store.history_limit":   "store.history_limit",
	"store.url":             "store.url",
	"store.tls.enabled":     "store.tls",
	"store.tls.ca_file":     "store.tls",
	"store.tls.cert_file":   "store.tls",
	"store.tls.key_file":    "store.tls",
	"store.tls.server_name": "store.tls",
	"store.username":        "store.username",
	"store.password_env":    "store.password_env",
}

// rowPath is key as the reload table's dotted paths name it: no "[]" and
// no "*" for a map's values.
func rowPath(key string) string {
	key = strings.ReplaceAll(key, "[]", "")
	return strings.ReplaceAll(key, ".*", "")
}

// TestEveryConfigKeyIsLiveOrRestartRequired: every leaf of config.Config is
// in exactly one of liveKeys and restartKeys, neither names a key that is
// not there, each agrees with the reload table (which the README's table
// follows), and each live key's proof is a test that exists.
func TestEveryConfigKeyIsLiveOrRestartRequired(t *testing.T) {
	keys := config.Keys()
	if len(keys) < 100 {
		t.Fatalf("found only %d config keys: %v", len(keys), keys)
	}
	known := map[string]bool{}
	for _, k := range keys {
		if known[k] {
			t.Errorf("config key %s appears twice in the walk", k)
		}
		known[k] = true
		_, live := liveKeys[k]
		_, restart := restartKeys[k]
		switch {
		case live && restart:
			t.Errorf("config key %s is both live and restart-required", k)
		case !live && !restart:
			t.Errorf("config key %s is neither live nor restart-required: decide, apply it in ReloadConfig or name it, and list it in liveKeys or restartKeys", k)
		}
		row, ok := config.FieldOf(rowPath(k))
		if !ok {
			t.Errorf("config key %s is in no row of the reload table (config.Fields)", k)
			continue
		}
		switch {
		case live && row.Reload != config.Live:
			t.Errorf("config key %s is live here but its reload table row %s says %s", k, row.Path, row.Reload)
		case restart && row.Reload != config.Restart:
			t.Errorf("config key %s is restart-required here but its reload table row %s says %s", k, row.Path, row.Reload)
		case restart && restartKeys[k] != row.Path:
			t.Errorf("config key %s: a reload names it %q, not %q", k, row.Path, restartKeys[k])
		}
	}
	for k := range liveKeys {
		if !known[k] {
			t.Errorf("liveKeys names %s, which is not a config key", k)
		}
	}
	for k := range restartKeys {
		if !known[k] {
			t.Errorf("restartKeys names %s, which is not a config key", k)
		}
	}
	// Every proof is a test that exists: a function of the package's (or
	// another package's) test files, and for TestLiveKeysApply a case.
	tests := map[string]map[string]bool{}
	testsOf := func(pkg string) map[string]bool {
		if m, ok := tests[pkg]; ok {
			return m
		}
		m := testFuncs(t, filepath.Join("..", pkg))
		tests[pkg] = m
		return m
	}
	cases := map[string]bool{}
	for _, c := range liveCases {
		if cases[c.key] {
			t.Errorf("liveCases has two cases for %s", c.key)
		}
		cases[c.key] = true
	}
	for k, proofs := range liveKeys {
		for proof := range strings.SplitSeq(proofs, ", ") {
			pkg, name := "gateway", proof
			if p, n, ok := strings.Cut(proof, "."); ok && !strings.Contains(p, "/") {
				pkg, name = p, n
			}
			fn, sub, _ := strings.Cut(name, "/")
			if !testsOf(pkg)[fn] {
				t.Errorf("live key %s: its proof %s names no test of package %s", k, proof, pkg)
			}
			if fn == "TestLiveKeysApply" && (sub != k || !cases[k]) {
				t.Errorf("live key %s: its proof %s is no case of liveCases", k, proof)
			}
		}
	}
	for k := range cases {
		if _, ok := liveKeys[k]; !ok {
			t.Errorf("liveCases has a case for %s, which liveKeys does not list as live", k)
		}
	}
}

// testFuncs returns the names of the Test functions in dir's test files.
func testFuncs(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files in %s: %v", dir, err)
	}
	out := map[string]bool{}
	fset := gotoken.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Test") {
				out[fd.Name.Name] = true
			}
		}
	}
	return out
}

// restartCase changes one restart-required key: before is the config the
// gateway starts with, after the one it reloads; {{name}} placeholders are
// the backends' addresses and what prep returns.
type restartCase struct {
	key           string
	before, after string
	prep          func(t *testing.T) map[string]string
}

// restartCases drive every key of restartKeys through a real reload.
var restartCases = []restartCase{
	{key: "listen", after: `listen: "127.0.0.1:1"`},
	{key: "admin_listen", after: `admin_listen: "127.0.0.1:1"`},
	{key: "data_dir", after: `data_dir: "{{dir}}"`, prep: tempDir},
	{key: "tls_listen", after: `tls_listen: "127.0.0.1:1"` + "\n" + `tls: {certificates: [{cert_file: "{{cert}}", key_file: "{{key}}"}]}`, prep: serverCert},
	{key: "h2c", after: "h2c: true"},
	{key: "lifecycle.reuse_port", after: "lifecycle: {reuse_port: true}"},
	{key: "admin.read_timeout", after: "admin: {read_timeout: 5s}"},
	{key: "admin.idle_timeout", after: "admin: {idle_timeout: 5s}"},
	{key: "experiments.exposure_log", after: `experiments: {exposure_log: "{{dir}}/exposures.log"}`, prep: tempDir},
	{key: "experiments.store", after: `experiments: {store: "redis://127.0.0.1:1/0"}`},
	{key: "experiments.flush_interval", after: "experiments: {flush_interval: 2s}"},
	{key: "experiments.max_units", after: "experiments: {max_units: 10}"},
	{key: "experiments.buffer_events", after: "experiments: {buffer_events: 10}"},
	{key: "experiments.gateway", after: "experiments: {gateway: gw-1}"},
	{key: "tracing.otlp_endpoint", before: `tracing: {otlp_endpoint: "http://127.0.0.1:1"}`, after: `tracing: {otlp_endpoint: "http://127.0.0.1:2"}`},
	{key: "tracing.sample_ratio", before: `tracing: {otlp_endpoint: "http://127.0.0.1:1", sample_ratio: 0.5}`, after: `tracing: {otlp_endpoint: "http://127.0.0.1:1", sample_ratio: 0.25}`},
	{key: "tracing.service_name", before: `tracing: {otlp_endpoint: "http://127.0.0.1:1"}`, after: `tracing: {otlp_endpoint: "http://127.0.0.1:1", service_name: other}`},
	{key: "proxy.max_header_bytes", after: "proxy: {max_header_bytes: 4096}"},
	{key: "store.history_limit", after: "store: {history_limit: 7}"},
	{key: "store.url", after: `store: {url: "etcd://127.0.0.1:1/gg"}`},
	{key: "store.tls.enabled", before: `store: {url: "etcd://127.0.0.1:1/gg"}`, after: `store: {url: "etcd://127.0.0.1:1/gg", tls: {enabled: true}}`},
	{key: "store.tls.ca_file", before: `store: {url: "etcd://127.0.0.1:1/gg"}`, after: `store: {url: "etcd://127.0.0.1:1/gg", tls: {ca_file: "{{ca}}"}}`, prep: serverCert},
	{key: "store.tls.cert_file", before: `store: {url: "etcd://127.0.0.1:1/gg", tls: {cert_file: "{{cert}}", key_file: "{{key}}"}}`, after: `store: {url: "etcd://127.0.0.1:1/gg", tls: {cert_file: "{{cert2}}", key_file: "{{key}}"}}`, prep: serverCert},
	{key: "store.tls.key_file", before: `store: {url: "etcd://127.0.0.1:1/gg", tls: {cert_file: "{{cert}}", key_file: "{{key}}"}}`, after: `store: {url: "etcd://127.0.0.1:1/gg", tls: {cert_file: "{{cert}}", key_file: "{{key2}}"}}`, prep: serverCert},
	{key: "store.tls.server_name", before: `store: {url: "etcd://127.0.0.1:1/gg", tls: {enabled: true}}`, after: `store: {url: "etcd://127.0.0.1:1/gg", tls: {enabled: true, server_name: etcd.test}}`},
	{key: "store.username", before: `store: {url: "etcd://127.0.0.1:1/gg", username: u1, password_env: GG_TEST_ETCD_PASSWORD}`, after: `store: {url: "etcd://127.0.0.1:1/gg", username: u2, password_env: GG_TEST_ETCD_PASSWORD}`},
	{key: "store.password_env", before: `store: {url: "etcd://127.0.0.1:1/gg", username: u1, password_env: GG_TEST_ETCD_PASSWORD}`, after: `store: {url: "etcd://127.0.0.1:1/gg", username: u1, password_env: GG_TEST_ETCD_PASSWORD_2}`},
}

func tempDir(t *testing.T) map[string]string { return map[string]string{"dir": t.TempDir()} }

// serverCert makes a CA and two certificates with their keys.
func serverCert(t *testing.T) map[string]string {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "test")
	p := ca.Server("gw.pem", "gw.key", "gw.test", "127.0.0.1")
	q := ca.Server("gw2.pem", "gw2.key", "gw.test", "127.0.0.1")
	return map[string]string{"ca": ca.File, "cert": p.CertFile, "key": p.KeyFile, "cert2": q.CertFile, "key2": q.KeyFile}
}

// TestRestartRequiredKeysAreNamed reloads a change of every restart-required
// key: the reload succeeds, the rest of the config applies, and the key's
// name is in restart_required and in last_reload_result, until a config
// with the running value comes back.
func TestRestartRequiredKeysAreNamed(t *testing.T) {
	t.Setenv("GG_TEST_ETCD_PASSWORD", "x")
	t.Setenv("GG_TEST_ETCD_PASSWORD_2", "y")
	covered := map[string]bool{}
	for _, tc := range restartCases {
		covered[tc.key] = true
	}
	for k := range restartKeys {
		if !covered[k] {
			t.Errorf("restart-required key %s has no case in restartCases", k)
		}
	}
	for _, tc := range restartCases {
		t.Run(tc.key, func(t *testing.T) {
			name, ok := restartKeys[tc.key]
			if !ok {
				t.Fatalf("%s is not in restartKeys", tc.key)
			}
			var repl map[string]string
			if tc.prep != nil {
				repl = tc.prep(t)
			}
			fill := func(y string) string {
				for k, v := range repl {
					y = strings.ReplaceAll(y, "{{"+k+"}}", v)
				}
				return y
			}
			before := baseConfig + fill(tc.before) + "\n"
			e := start(t, before, "")
			// The live part of the same reload applies.
			after := strings.Replace(baseConfig, "default_upstream: stable", "default_upstream: b", 1) + fill(tc.after) + "\n"
			if err := e.reloadKeepingDataDir(after); err != nil {
				t.Fatalf("reload: %v", err)
			}
			if a, err := e.get("/", "X-User-Id", "1"); err != nil || a.backend != "b" {
				t.Errorf("the live part of the reload was not applied: %+v %v", a, err)
			}
			st := e.gw.Status()
			if !slices.Equal(st.RestartRequired, []string{name}) {
				t.Errorf("restart_required = %v, want [%s]", st.RestartRequired, name)
			}
			if want := "ok; restart required: " + name; st.LastResult != want {
				t.Errorf("last_reload_result = %q, want %q", st.LastResult, want)
			}
			// Back to the running value: nothing waits for a restart.
			if err := e.reloadKeepingDataDir(before); err != nil {
				t.Fatalf("reload back: %v", err)
			}
			if st := e.gw.Status(); len(st.RestartRequired) != 0 || st.LastResult != "ok" {
				t.Errorf("back to the running value: restart_required %v, last_reload_result %q", st.RestartRequired, st.LastResult)
			}
		})
	}
}

// reloadKeepingDataDir is reload, except that a config that sets data_dir
// keeps its own.
func (e *env) reloadKeepingDataDir(yaml string) error {
	e.t.Helper()
	for name, addr := range e.backends {
		yaml = strings.ReplaceAll(yaml, "{{"+name+"}}", addr)
	}
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		return err
	}
	if !strings.Contains(yaml, "data_dir:") {
		cfg.DataDir = e.gw.boot.DataDir
	}
	return e.gw.ReloadConfig(context.Background(), cfg)
}

// Guard: the walk sees through pointers, maps and slices (a key missing
// from it would be missing from the contract too).
func TestConfigKeysWalk(t *testing.T) {
	keys := config.Keys()
	for _, want := range []string{
		"preserve_host", "tls.certificates[].cert_file", "breaker.error_statuses", "limits.rate_limit.rps",
		"targeting.tags.jwt.leeway", "targeting.tag_types.*", "tracing.sample_ratio", "store.tls.ca_file",
		"upstreams.*.instances[].metadata.*", "upstreams.*.passive_health.max_ejection", "upstreams.*.balancer",
		"routes[].rate_limit.max_identity_bytes", "routes[].timeout", "notifications[].events", "rules",
	} {
		if !slices.Contains(keys, want) {
			t.Errorf("the walk misses %s; it found %v", want, keys)
		}
	}
}
