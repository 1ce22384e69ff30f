package config

import (
	"crypto/tls"
	"fmt"
	"strings"
	"testing"

	"github.com/graygate/graygate/internal/certs/certstest"
	"github.com/graygate/graygate/internal/upstream"
)

func TestTLSAndProtocols(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "test")
	a := ca.Server("a.pem", "a.key", "a.test")
	b := ca.Server("b.pem", "b.key", "b.test")
	c, err := Parse([]byte(fmt.Sprintf(`
tls_listen: ":8443"
h2c: true
tls:
  certificates: [{cert_file: %q, key_file: %q}, {cert_file: %q, key_file: %q}]
  min_version: "1.3"
  client_ca_file: %q
upstreams:
  grpc: {protocol: h2c, instances: [{addr: "127.0.0.1:9001"}]}
  secure: {protocol: h2, ca_file: %q, server_name: svc.internal, instances: [{addr: "127.0.0.1:9002"}]}
  plain: {instances: [{addr: "127.0.0.1:9003"}]}
`, a.CertFile, a.KeyFile, b.CertFile, b.KeyFile, ca.File, ca.File)))
	if err != nil {
		t.Fatal(err)
	}
	if c.TLSListen != ":8443" || !c.H2C || len(c.TLS.Certificates) != 2 || c.TLS.MinTLSVersion() != tls.VersionTLS13 || c.TLS.ClientCAFile != ca.File {
		t.Errorf("decoded %+v", c)
	}
	pools, err := c.Pools(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := pools["grpc"]; p.Protocol != upstream.H2C || p.TLS != nil {
		t.Errorf("grpc pool: protocol %v tls %v", p.Protocol, p.TLS)
	}
	if p := pools["secure"]; p.Protocol != upstream.H2 || p.TLS == nil || p.TLS.ServerName != "svc.internal" || p.TLS.RootCAs == nil || !strings.Contains(p.TLSKey, "ca=") {
		t.Errorf("secure pool: protocol %v tls %+v key %q", p.Protocol, p.TLS, p.TLSKey)
	}
	if p := pools["plain"]; p.Protocol != upstream.HTTP1 {
		t.Errorf("plain pool: protocol %v", p.Protocol)
	}
}

func TestTLSErrors(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "test")
	a := ca.Server("a.pem", "a.key", "a.test")
	b := ca.Server("b.pem", "b.key", "b.test")
	up := "upstreams: {s: {instances: [{addr: '127.0.0.1:1'}]}}\n"
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"tls_listen without certificates", "tls_listen: ':8443'\n", []string{"tls.certificates: needs at least one certificate"}},
		{"bad tls_listen", "tls_listen: nowhere\n", []string{`tls_listen: must be host:port or :port, got "nowhere"`}},
		{"tls without tls_listen", fmt.Sprintf("tls: {certificates: [{cert_file: %q, key_file: %q}]}\n", a.CertFile, a.KeyFile), []string{"tls: is set but tls_listen is not"}},
		{"missing files", "tls_listen: ':1'\ntls: {certificates: [{cert_file: /nope.pem, key_file: /nope.key}]}\n",
			[]string{"tls.certificates[0].cert_file: open /nope.pem", "tls.certificates[0].key_file: open /nope.key"}},
		{"key of another certificate", fmt.Sprintf("tls_listen: ':1'\ntls: {certificates: [{cert_file: %q, key_file: %q}]}\n", a.CertFile, b.KeyFile),
			[]string{"tls.certificates[0]: cert_file " + a.CertFile + " and key_file " + b.KeyFile}},
		{"empty names", "tls_listen: ':1'\ntls: {certificates: [{cert_file: '', key_file: ''}]}\n",
			[]string{"tls.certificates[0].cert_file: is required", "tls.certificates[0].key_file: is required"}},
		{"min version", fmt.Sprintf("tls_listen: ':1'\ntls: {min_version: '1.1', certificates: [{cert_file: %q, key_file: %q}]}\n", a.CertFile, a.KeyFile),
			[]string{`tls.min_version: must be "1.2" or "1.3", got "1.1"`}},
		{"client ca not pem", fmt.Sprintf("tls_listen: ':1'\ntls: {client_ca_file: %q, certificates: [{cert_file: %q, key_file: %q}]}\n", a.KeyFile, a.CertFile, a.KeyFile),
			[]string{"tls.client_ca_file: " + a.KeyFile + " holds no PEM certificate"}},
		{"unknown tls key", "tls: {certs: []}\n", []string{"tls.certs: unknown field"}},
		{"protocol", "upstreams: {s: {protocol: h3, instances: [{addr: '127.0.0.1:1'}]}}\n", []string{`upstreams.s.protocol: must be "http1", "h2c" or "h2", got "h3"`}},
		{"ca_file without h2", "upstreams: {s: {protocol: h2c, ca_file: /x, server_name: y, instances: [{addr: '127.0.0.1:1'}]}}\n",
			[]string{`upstreams.s.ca_file: only applies to protocol: h2, got protocol "h2c"`, `upstreams.s.server_name: only applies to protocol: h2`}},
		{"unreadable ca_file", "upstreams: {s: {protocol: h2, ca_file: /nope.pem, instances: [{addr: '127.0.0.1:1'}]}}\n", []string{"upstreams.s.ca_file: open /nope.pem"}},
		{"https instance of an h2c pool", "upstreams: {s: {protocol: h2c, instances: [{addr: 'https://127.0.0.1:1'}]}}\n", []string{"upstreams.s.instances[0].addr: is https but the upstream's protocol is h2c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := tt.yaml
			if !strings.Contains(y, "upstreams:") {
				y += up
			}
			_, err := Parse([]byte(y))
			if err == nil {
				t.Fatalf("Parse(%q) succeeded", y)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse(%q) = %v\nwant it to contain %q", y, err, w)
				}
			}
		})
	}
}
