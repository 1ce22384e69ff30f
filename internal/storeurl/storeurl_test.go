package storeurl

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		in   string
		want Config
		// errs are the paths the error must name, all of them.
		errs []string
	}{
		{in: "etcd://127.0.0.1:2379/graygate", want: Config{Endpoints: []string{"127.0.0.1:2379"}, Prefix: "/graygate/"}},
		{in: "etcd://a:1,b.example:2/gg/prod/", want: Config{Endpoints: []string{"a:1", "b.example:2"}, Prefix: "/gg/prod/"}},
		{in: "ETCD://h:1/x", want: Config{Endpoints: []string{"h:1"}, Prefix: "/x/"}},
		{in: "etcd://[::1]:2379/gg", want: Config{Endpoints: []string{"[::1]:2379"}, Prefix: "/gg/"}},
		{in: "etcds://h:2379/gg", want: Config{Endpoints: []string{"h:2379"}, Prefix: "/gg/", TLS: TLS{Enabled: true}}},
		{in: "http://h:1/x", errs: []string{"scheme:"}},
		{in: "h:1/x", errs: []string{"scheme:"}},
		{in: "etcd:///x", errs: []string{"endpoints:"}},
		{in: "etcd://h/x", errs: []string{"endpoints[0]:"}},
		{in: "etcd://h:0/x", errs: []string{"endpoints[0]:"}},
		{in: "etcd://h:99999/x", errs: []string{"endpoints[0]:"}},
		{in: "etcd://:1/x", errs: []string{"endpoints[0]:"}},
		{in: "etcd://h:1,bad/x", errs: []string{"endpoints[1]:"}},
		{in: "etcd://h:1,/x", errs: []string{"endpoints[1]:"}},
		{in: "etcd://u:p@h:1/x", errs: []string{"endpoints:"}},
		{in: "etcd://h:1", errs: []string{"prefix:"}},
		{in: "etcd://h:1/", errs: []string{"prefix:"}},
		{in: "etcd://h:1/a//b", errs: []string{"prefix:"}},
		{in: "etcd://h:1/a/../b", errs: []string{"prefix:"}},
		{in: "etcd://h:1/a b", errs: []string{"prefix:"}},
		{in: "etcd://h:1/x?timeout=1s", errs: []string{"url:"}},
		{in: "etcd://h/a//b", errs: []string{"endpoints[0]:", "prefix:"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseURL(tt.in)
			if len(tt.errs) == 0 {
				if err != nil || !reflect.DeepEqual(got, tt.want) {
					t.Fatalf("ParseURL(%q) = %+v, %v, want %+v", tt.in, got, err, tt.want)
				}
				if err := got.Validate(); err != nil {
					t.Errorf("Validate() of a parsed URL = %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseURL(%q) = %+v, want an error naming %q", tt.in, got, tt.errs)
			}
			for _, path := range tt.errs {
				if !strings.Contains(err.Error(), path) {
					t.Errorf("ParseURL(%q) = %v, want it to name %q", tt.in, err, path)
				}
			}
		})
	}
}

// TestParseURLCredentials: a URL with credentials in it is refused with
// one error naming endpoints and saying where credentials go, and no
// piece of the password shows in any error, whatever else is wrong with
// the URL (before, each endpoint error quoted "user:password@host").
// A query's values are masked the same way.
func TestParseURLCredentials(t *testing.T) {
	const secret = "s3cr3t-Pa55"
	for _, in := range []string{
		"etcd://gg:" + secret + "@127.0.0.1:2379/graygate",
		"etcd://gg:" + secret + "@127.0.0.1:2379",
		"etcd://gg:" + secret + "@h1:2379,h2:2379/x",
		"etcds://gg:" + secret + "@h1/x?timeout=1s",
		"etcd://gg:s3cr/3t-Pa55@h1:2379/x", // a / in the password
		"etcd://gg:s3cr,3t-Pa55@h1:2379/x", // a , in the password
		"gg:" + secret + "@127.0.0.1:2379/graygate",
		"http://gg:" + secret + "@127.0.0.1:2379/graygate",
	} {
		_, err := ParseURL(in)
		if err == nil {
			t.Errorf("ParseURL(%q) = nil error, want credentials refused", in)
			continue
		}
		msg := err.Error()
		for _, piece := range []string{secret, "s3cr", "3t-Pa55", "Pa55"} {
			if strings.Contains(msg, piece) {
				t.Errorf("ParseURL(%q) = %q: the error shows %q of the password", in, msg, piece)
			}
		}
		if !strings.HasPrefix(msg, "endpoints: credentials do not belong in the URL") || !strings.Contains(msg, "username and password_env") || strings.Contains(msg, "\n") {
			t.Errorf("ParseURL(%q) = %q, want the one credentials error", in, msg)
		}
	}
	_, err := ParseURL("etcd://h:1/x?password=" + secret + "&timeout=1s#frag")
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), `"?password=…&timeout=…#…"`) {
		t.Errorf("a query with a password: %v, want the names with the values masked", err)
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"etcd://127.0.0.1:2379/graygate", "etcds://a:1,b:2/x/y/", "etcd://[::1]:1/a", "etcd://h/a//b", "etcd://h:1/x?y", "etcd://u:p@h:1/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := ParseURL(s)
		if err != nil {
			// Nothing of a URL with credentials is repeated: its error is
			// the one fixed message.
			if strings.Contains(s, "@") && err.Error() != errCredentials.Error() {
				t.Fatalf("ParseURL(%q) = %q: want only the credentials error", s, err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("ParseURL(%q) = %+v, which fails Validate: %v", s, cfg, err)
		}
		if !strings.HasPrefix(cfg.Prefix, "/") || !strings.HasSuffix(cfg.Prefix, "/") || strings.Contains(cfg.Prefix, "//") {
			t.Fatalf("ParseURL(%q): prefix %q is not normalized", s, cfg.Prefix)
		}
		scheme := "etcd"
		if cfg.TLS.Enabled {
			scheme = "etcds"
		}
		again, err := ParseURL(scheme + "://" + strings.Join(cfg.Endpoints, ",") + cfg.Prefix)
		if err != nil || !reflect.DeepEqual(again, cfg) {
			t.Fatalf("ParseURL(%q) = %+v, but its URL form parses as %+v, %v", s, cfg, again, err)
		}
	})
}

func TestValidate(t *testing.T) {
	ok := Config{Endpoints: []string{"h:1"}, Prefix: "/gg/"}
	tests := []struct {
		name string
		edit func(c *Config)
		errs []string
	}{
		{"valid", func(c *Config) {}, nil},
		{"prefix without slashes", func(c *Config) { c.Prefix = "gg" }, nil},
		{"no endpoints", func(c *Config) { c.Endpoints = nil }, []string{"endpoints:"}},
		{"bad endpoint", func(c *Config) { c.Endpoints = []string{"h:1", "h"} }, []string{"endpoints[1]:"}},
		{"root prefix", func(c *Config) { c.Prefix = "/" }, []string{"prefix:"}},
		{"cert without key", func(c *Config) { c.TLS.CertFile = "c.pem" }, []string{"tls:"}},
		{"username without password_env", func(c *Config) { c.Username = "gg" }, []string{"username:"}},
		{"everything", func(c *Config) { c.Endpoints = nil; c.Prefix = ""; c.TLS.KeyFile = "k" }, []string{"endpoints:", "prefix:", "tls:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			err := c.Validate()
			if len(tt.errs) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			for _, path := range tt.errs {
				if err == nil || !strings.Contains(err.Error(), path) {
					t.Errorf("Validate() = %v, want it to name %q", err, path)
				}
			}
		})
	}
}
