package config

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
)

// Reload says when a changed config field takes effect.
type Reload uint8

const (
	// Live fields apply when the config is reloaded (SIGHUP, or the file
	// changed), to the next request.
	Live Reload = iota + 1
	// Restart fields keep their running value until the process restarts;
	// a reload that changes one says "restart required: <path>" in its log
	// line and in /api/v1/status.
	Restart
)

// String returns "live" or "restart".
func (r Reload) String() string {
	switch r {
	case Live:
		return "live"
	case Restart:
		return "restart"
	}
	return "unknown"
}

// Field is one row of the reload table: a config field by its path, which
// stands for everything under it.
type Field struct {
	Path   string
	Reload Reload
	// How says how a live field is applied, or why a restart field cannot be.
	How string
}

// fields is the reload table: every config field is under exactly one row
// (TestReloadTableCoversConfig checks it, and TestREADMEReloadTable that
// the README's table says the same). To make a field live, apply it in
// gateway.ReloadConfig and flip its row.
var fields = []Field{
	{"listen", Restart, "the data-plane socket is bound at start (hand over with reuse_port)"},
	{"admin_listen", Restart, "the admin socket is bound at start"},
	{"data_dir", Restart, "the store is opened at start"},
	{"default_upstream", Live, "the next snapshot"},
	{"preserve_host", Live, "the next snapshot"},
	{"trusted_proxies", Live, "the data plane's options"},
	{"trust_gray_tag", Live, "the next snapshot"},
	{"tls_listen", Restart, "the TLS socket is bound at start (hand over with reuse_port); a config without it leaves the running listener as it is until the restart"},
	{"tls.certificates", Live, "the files are loaded for the next handshakes; established connections keep theirs"},
	{"tls.min_version", Live, "the next handshakes"},
	{"tls.client_ca_file", Live, "the file is loaded for the next handshakes"},
	{"h2c", Restart, "the cleartext listener's protocols are set at start"},
	{"breaker", Live, "every breaker is reconfigured, keeping its state"},
	{"limits", Live, "the next snapshot; rate limiters keep their tokens while their route keeps a rate_limit; those of removed routes (or limits) are dropped, so a route added back starts with a full bucket"},
	{"lifecycle.drain_delay", Live, "read when the gateway stops"},
	{"lifecycle.shutdown_timeout", Live, "read when the gateway stops"},
	{"lifecycle.reuse_port", Restart, "the data-plane socket is bound at start"},
	{"targeting", Live, "region and tag sources are rebuilt when the section changes, or the key files and environment variables it names do"},
	{"admin.tokens", Live, "the admin API's token set is replaced"},
	{"admin.read_timeout", Restart, "a setting of the admin HTTP server"},
	{"admin.idle_timeout", Restart, "a setting of the admin HTTP server"},
	{"identity", Live, "the next snapshot"},
	{"experiments.holdout", Live, "the next snapshot"},
	{"experiments.conversion_window", Live, "the next snapshot's experiment catalog"},
	{"experiments.srm_action", Live, "the next snapshot's experiment catalog"},
	{"experiments.store", Restart, "the experiment store (embedded or Redis) is opened at start"},
	{"experiments.exposure_log", Restart, "the exposure log file is opened at start"},
	{"experiments.flush_interval", Restart, "the experiment writer's clock is set at start"},
	{"experiments.max_units", Restart, "the embedded store is sized at start"},
	{"experiments.buffer_events", Restart, "the event buffer is sized at start"},
	{"experiments.gateway", Restart, "exposure log lines are labelled at start"},
	{"tracing", Restart, "the tracer provider and its exporter are built at start"},
	{"proxy.dial_timeout", Live, "the data plane's options; upstream pools are replaced"},
	{"proxy.response_header_timeout", Live, "the data plane's options"},
	{"proxy.idle_timeout", Live, "the data plane's options; upstream pools are replaced"},
	{"proxy.read_header_timeout", Live, "the listener's options: the next request head of every connection, the next TLS handshake, and HTTP/2 connections opened from then on"},
	{"proxy.read_timeout", Live, "the data plane's options"},
	{"proxy.write_timeout", Live, "the data plane's options; the HTTP/2 transports of h2 and h2c pools, built with it, are replaced"},
	{"proxy.client_read_timeout", Live, "the listener's options"},
	{"proxy.client_write_timeout", Live, "the listener's options"},
	{"proxy.client_idle_timeout", Live, "the listener's options: the next keep-alive wait of every connection, and HTTP/2 connections opened from then on"},
	{"proxy.max_header_bytes", Restart, "the listening server's read buffer is sized at start"},
	{"proxy.max_conns_per_host", Live, "the data plane's options; upstream pools are replaced"},
	{"proxy.max_client_connections", Live, "the listener's options, for the next connection accepted"},
	{"proxy.allow_underscores_in_headers", Live, "the data plane's options"},
	{"proxy.via", Live, "the data plane's options"},
	{"access_log.enabled", Live, "the data plane's options; turning it off closes the file (one logrotate deleted is freed), turning it on opens it again"},
	{"access_log.path", Live, "the log file is switched; the new one is opened first"},
	{"store.history_limit", Restart, "the store is opened at start"},
	{"store.url", Restart, "the store is opened at start"},
	{"store.tls", Restart, "the store is opened at start"},
	{"store.username", Restart, "the store is opened at start"},
	{"store.password_env", Restart, "the store is opened at start"},
	{"upstreams", Live, "pools are rebuilt, keeping health and in-flight counts; discovery watches start and stop"},
	{"routes", Live, "the next snapshot"},
	{"rules", Live, "keys the store has never held are seeded; the others that differ from the store are named (config_rules_not_applied)"},
	{"name", Live, "the gateway's name in notifications"},
	{"notifications", Live, "receivers are reconfigured in place; a kept receiver keeps its queue"},
}

// Fields returns a copy of the reload table, in config order.
func Fields() []Field { return slices.Clone(fields) }

// FieldOf returns the row that covers path (the row itself or the nearest
// one above it), and false if none does.
func FieldOf(path string) (Field, bool) {
	for p := path; ; {
		for _, f := range fields {
			if f.Path == p {
				return f, true
			}
		}
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			return Field{}, false
		}
		p = p[:i]
	}
}

// derived are the rows whose default Defaults cannot fill in, because it
// depends on the host or on another field: each row's effective value.
// Writing such a default out is no change (a restart would run with the
// same value). When neither config writes the field, the two are equal
// whatever the field it follows does: a change of listen is named as
// listen, not also as the exposure label it implies.
var derived = map[string]func(*Config) any{
	"experiments.gateway": func(c *Config) any { return c.ExposureGateway() },
	// An empty list of sources is none at all, unset is the defaults:
	// the JSON of both leaves the list out.
	"identity": func(c *Config) any { return c.Identity.Effective() },
}

// Changed returns the paths of the table's rows whose effective value
// differs between a and b, in table order: defaults count as written out.
func Changed(a, b *Config) []string {
	ma, erra := generic(a)
	mb, errb := generic(b)
	var out []string
	if erra != nil || errb != nil {
		// A config that does not marshal (a rule that is not JSON) cannot
		// be compared: every row counts as changed, so that none is
		// silently taken as unchanged.
		for _, f := range fields {
			out = append(out, f.Path)
		}
		return out
	}
	for _, f := range fields {
		va, vb := at(ma, f.Path), at(mb, f.Path)
		if eff, ok := derived[f.Path]; ok && (va != nil || vb != nil) {
			va, vb = eff(a), eff(b)
		}
		if !reflect.DeepEqual(va, vb) {
			out = append(out, f.Path)
		}
	}
	return out
}

// RestartRequired returns the paths of the Restart rows whose value differs
// between running (what the process started with) and next.
func RestartRequired(running, next *Config) []string {
	var out []string
	for _, p := range Changed(running, next) {
		if f, _ := FieldOf(p); f.Reload == Restart {
			out = append(out, p)
		}
	}
	return out
}

// generic is c as JSON values, the shape the paths name.
func generic(c *Config) (map[string]any, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	err = json.Unmarshal(data, &m)
	return m, err
}

// at returns the value under a dotted path, nil if absent.
func at(m map[string]any, path string) any {
	var v any = m
	for _, k := range strings.Split(path, ".") {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

// Keys lists every leaf key of Config by its JSON names, as an operator
// writes them: the elements of a list as "[]" and the values of a map as
// ".*" (upstreams.*.instances[].addr). A type that decodes itself
// (Duration) is one key. The reload contract is checked against it: each
// key is under one row of Fields, and live or named by a reload.
func Keys() []string { return keys(reflect.TypeFor[Config](), "") }

// keys walks t by its JSON names and returns every leaf key under prefix.
func keys(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if ownJSON(t) {
		return []string{prefix}
	}
	switch t.Kind() {
	case reflect.Map:
		return keys(t.Elem(), prefix+".*")
	case reflect.Slice, reflect.Array:
		e := t.Elem()
		for e.Kind() == reflect.Pointer {
			e = e.Elem()
		}
		if e.Kind() == reflect.Struct && !ownJSON(e) {
			return keys(e, prefix+"[]")
		}
		return []string{prefix}
	case reflect.Struct:
	default:
		return []string{prefix}
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			out = append(out, keys(f.Type, prefix)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		if prefix != "" {
			name = prefix + "." + name
		}
		out = append(out, keys(f.Type, name)...)
	}
	return out
}

// ownJSON reports whether t decodes or encodes itself: its fields are not
// config keys.
func ownJSON(t reflect.Type) bool {
	m, u := reflect.TypeFor[json.Marshaler](), reflect.TypeFor[json.Unmarshaler]()
	return t.Implements(m) || t.Implements(u) || reflect.PointerTo(t).Implements(m) || reflect.PointerTo(t).Implements(u)
}
