package etcdstore

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/store/etcdstore/etcdtest"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, written as PEM files.
type testPKI struct {
	dir                                                  string
	caFile, serverCert, serverKey, clientCert, clientKey string
	pool                                                 *x509.CertPool
}

func newPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	p := testPKI{
		dir: dir, caFile: filepath.Join(dir, "ca.pem"),
		serverCert: filepath.Join(dir, "server.pem"), serverKey: filepath.Join(dir, "server-key.pem"),
		clientCert: filepath.Join(dir, "client.pem"), clientKey: filepath.Join(dir, "client-key.pem"),
		pool: x509.NewCertPool(),
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "graygate test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p.pool.AddCert(ca)
	writePEM(t, p.caFile, "CERTIFICATE", caDER)
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage, certFile, keyFile string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, certFile, "CERTIFICATE", der)
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	}
	leaf(2, "127.0.0.1", x509.ExtKeyUsageServerAuth, p.serverCert, p.serverKey)
	leaf(3, "graygate", x509.ExtKeyUsageClientAuth, p.clientCert, p.clientKey)
	return p
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestClientConfig(t *testing.T) {
	pki := newPKI(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	os.WriteFile(notPEM, []byte("hello"), 0o600)
	env := map[string]string{"GG_PW": "secret", "EMPTY": ""}
	opts := Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	if err := opts.provision(); err != nil {
		t.Fatal(err)
	}
	base := Config{Endpoints: []string{"127.0.0.1:2379", "h:2"}, Prefix: "/gg/"}
	tests := []struct {
		name string
		edit func(c *Config)
		err  string // path the error names; "" for success
		want func(t *testing.T, cc clientv3.Config)
	}{
		{"plain", func(c *Config) {}, "", func(t *testing.T, cc clientv3.Config) {
			if !reflect.DeepEqual(cc.Endpoints, []string{"http://127.0.0.1:2379", "http://h:2"}) || cc.TLS != nil {
				t.Errorf("endpoints %q, TLS %v", cc.Endpoints, cc.TLS)
			}
		}},
		{"tls and auth", func(c *Config) {
			c.TLS = TLS{CAFile: pki.caFile, CertFile: pki.clientCert, KeyFile: pki.clientKey}
			c.Username, c.PasswordEnv = "gg", "GG_PW"
		}, "", func(t *testing.T, cc clientv3.Config) {
			if cc.Endpoints[0] != "https://127.0.0.1:2379" || cc.TLS == nil || cc.TLS.RootCAs == nil || len(cc.TLS.Certificates) != 1 {
				t.Errorf("endpoints %q, TLS %+v", cc.Endpoints, cc.TLS)
			}
			if cc.Username != "gg" || cc.Password != "secret" {
				t.Errorf("credentials %q %q", cc.Username, cc.Password)
			}
		}},
		{"system roots", func(c *Config) { c.TLS.Enabled = true }, "", func(t *testing.T, cc clientv3.Config) {
			if cc.TLS == nil || cc.TLS.RootCAs != nil || cc.TLS.MinVersion != tls.VersionTLS12 {
				t.Errorf("TLS %+v, want system roots and TLS 1.2+", cc.TLS)
			}
		}},
		{"missing ca file", func(c *Config) { c.TLS.CAFile = filepath.Join(pki.dir, "nope.pem") }, "tls.ca_file:", nil},
		{"ca file not PEM", func(c *Config) { c.TLS.CAFile = notPEM }, "tls.ca_file:", nil},
		{"key of another cert", func(c *Config) { c.TLS.CertFile, c.TLS.KeyFile = pki.clientCert, pki.serverKey }, "tls.cert_file", nil},
		{"unset password env", func(c *Config) { c.Username, c.PasswordEnv = "gg", "NOPE" }, "password_env:", nil},
		{"empty password env", func(c *Config) { c.Username, c.PasswordEnv = "gg", "EMPTY" }, "password_env:", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.edit(&c)
			cc, err := clientConfig(c, &opts)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("clientConfig() = %v, want an error naming %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("clientConfig() = %v", err)
			}
			tt.want(t, cc)
		})
	}
	if _, err := Open(t.Context(), Config{Prefix: "/gg/"}, Options{}); !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "endpoints:") {
		t.Errorf("Open with no endpoints = %v, want ErrInvalid naming endpoints", err)
	}
	for _, n := range []int{-1, store.MaxHistoryLimit + 1} {
		if _, err := Open(t.Context(), base, Options{HistoryLimit: n}); !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("HistoryLimit %d", n)) {
			t.Errorf("Open with HistoryLimit %d = %v, want ErrInvalid naming it", n, err)
		}
	}
}

// TestTLS runs the store against an etcd that serves TLS and requires
// client certificates.
func TestTLS(t *testing.T) {
	t.Parallel() // mostly waiting for timeouts, leases and restarts
	pki := newPKI(t)
	clientCert, err := tls.LoadX509KeyPair(pki.clientCert, pki.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := etcdtest.StartConfig(t, etcdtest.Config{
		CertFile: pki.serverCert, KeyFile: pki.serverKey, ClientCAFile: pki.caFile,
		ClientTLS: &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{clientCert}},
	})
	ctx := t.Context()
	cfg, err := ParseURL("etcds://" + srv.Endpoint() + "/tls")
	if err != nil {
		t.Fatal(err)
	}
	cfg.TLS = TLS{CAFile: pki.caFile, CertFile: pki.clientCert, KeyFile: pki.clientKey}
	s, err := Open(ctx, cfg, fastOptions())
	if err != nil {
		t.Fatalf("Open over TLS = %v", err)
	}
	defer s.Close()
	if _, err := s.Put(ctx, "a", raw(`{}`), 0, store.Meta{}); err != nil {
		t.Fatalf("Put over TLS = %v", err)
	}
	if h, err := s.History(ctx, "a"); err != nil || len(h) != 1 {
		t.Fatalf("History over TLS = %v, %v", h, err)
	}

	// Without a client certificate the server refuses the handshake.
	noCert := cfg
	noCert.TLS = TLS{CAFile: pki.caFile}
	opts := fastOptions()
	opts.DialTimeout = time.Second
	s2, err := Open(ctx, noCert, opts)
	if err == nil {
		s2.Close()
		t.Fatal("Open without the required client certificate succeeded")
	}
	t.Logf("Open without a client certificate: %v", err)
}

// TestAuth runs the store as an etcd user whose role may only touch its
// prefix, including while etcd is down at Open: the client, which must
// fetch a token, is then created in the background once etcd is back.
func TestAuth(t *testing.T) {
	t.Parallel() // mostly waiting for timeouts, leases and restarts
	srv := etcdtest.Start(t)
	ctx := t.Context()
	root := srv.Client(t)
	prefix := "/auth/"
	for _, step := range []func() error{
		func() error { _, err := root.RoleAdd(ctx, "root"); return err },
		func() error { _, err := root.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.RoleAdd(ctx, "gg"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "gg", prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, "gg", "ggpw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "gg", "gg"); return err },
		func() error { _, err := root.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("setting up authentication: %v", err)
		}
	}
	env := map[string]string{"GG_PW": "ggpw", "BAD_PW": "nope"}
	opts := fastOptions()
	// Fetching a token costs a bcrypt comparison in etcd, which can take
	// a while on a loaded machine.
	opts.DialTimeout = 10 * time.Second
	opts.DataDir = t.TempDir()
	opts.LookupEnv = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, err := ParseURL(srv.URL(prefix))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Username, cfg.PasswordEnv = "gg", "GG_PW"

	s, err := Open(ctx, cfg, opts)
	if err != nil {
		t.Fatalf("Open as gg = %v", err)
	}
	if _, err := s.Put(ctx, "a", raw(`{"v":1}`), 0, store.Meta{}); err != nil {
		t.Fatalf("Put as gg = %v", err)
	}
	want, _ := s.Load(ctx)
	s.Close()

	// A refused password fails Open even though a cache exists: serving
	// it would hide the misconfiguration.
	bad := cfg
	bad.PasswordEnv = "BAD_PW"
	if s, err := Open(ctx, bad, opts); err == nil || errors.Is(err, store.ErrUnavailable) {
		if s != nil {
			s.Close()
		}
		t.Errorf("Open with a wrong password = %v, want a failure that is not ErrUnavailable", err)
	}

	srv.Stop()
	opts.DialTimeout = time.Second
	s, err = Open(ctx, cfg, opts)
	if err != nil {
		t.Fatalf("Open as gg while etcd is down, with a cache = %v", err)
	}
	defer s.Close()
	if s.Client() != nil || !s.Stale() {
		t.Errorf("Client() = %v, Stale() = %v; want no client yet, stale", s.Client(), s.Stale())
	}
	if got, _ := s.Load(ctx); !reflect.DeepEqual(got, want) {
		t.Errorf("Load() from the cache = %+v, want %+v", got, want)
	}
	if _, err := s.Put(ctx, "b", raw(`{}`), 0, store.Meta{}); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Put before the first connection = %v, want ErrUnavailable", err)
	}
	srv.Restart()
	eventually(t, 15*time.Second, "store did not connect after etcd came back", func() bool {
		return s.Synced() && s.Client() != nil
	})
	if e, err := s.Put(ctx, "b", raw(`{}`), 0, store.Meta{}); err != nil || e.Revision != 2 {
		t.Errorf("Put after connecting = %+v, %v", e, err)
	}
}
