package certs

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/certs/certstest"
	"github.com/graygate/graygate/internal/testserve"
)

// serve accepts TLS connections with st's configuration until the test
// ends, completing each handshake and answering one byte.
func serve(t *testing.T, st *Store) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", st.Config())
	if err != nil {
		t.Fatal(err)
	}
	testserve.On(t, ln, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if err := c.(*tls.Conn).Handshake(); err != nil {
			return
		}
		_, _ = c.Write([]byte("x"))
		buf := make([]byte, 1)
		_, _ = c.Read(buf)
	})
	return ln.Addr().String()
}

// serial dials addr asking for server name sni and returns the serial of
// the certificate the server presented.
func serial(t *testing.T, addr, sni string, ca *certstest.CA, client *tls.Certificate) (int64, error) {
	t.Helper()
	conf := &tls.Config{ServerName: sni, RootCAs: ca.Pool}
	if client != nil {
		conf.Certificates = []tls.Certificate{*client}
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, conf)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	// With TLS 1.3 a refused client certificate shows on the first read.
	if _, err := c.Read(make([]byte, 1)); err != nil {
		return 0, err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
}

func TestSNI(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "test")
	a := ca.Server("a.pem", "a.key", "a.example.com")
	b := ca.Server("b.pem", "b.key", "b.example.com", "*.b.example.com")
	st, err := New(Settings{Certificates: []Pair{{a.CertFile, a.KeyFile}, {b.CertFile, b.KeyFile}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, st)
	tests := []struct {
		name, sni string
		want      int64
		fails     bool
	}{
		{"first", "a.example.com", a.Serial, false},
		{"second", "b.example.com", b.Serial, false},
		{"wildcard", "x.b.example.com", b.Serial, false},
		// No certificate names c: the first is presented, which the
		// client then refuses for its name.
		{"unknown name gets the default", "c.example.com", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := serial(t, addr, tt.sni, ca, nil)
			if tt.fails {
				if err == nil || !strings.Contains(err.Error(), "a.example.com") {
					t.Fatalf("SNI %q: %v, want a certificate error naming the default certificate a.example.com", tt.sni, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("SNI %q: serial %d, %v; want %d", tt.sni, got, err, tt.want)
			}
		})
	}
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "test")
	other := certstest.NewCA(t, dir, "other")
	srv := ca.Server("s.pem", "s.key", "gw.test")
	good := ca.Client("c.pem", "c.key", "client").TLSCertificate(t)
	bad := other.Client("o.pem", "o.key", "intruder").TLSCertificate(t)
	st, err := New(Settings{Certificates: []Pair{{srv.CertFile, srv.KeyFile}}, ClientCAFile: ca.File}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, st)
	if _, err := serial(t, addr, "gw.test", ca, &good); err != nil {
		t.Errorf("client certificate of the configured CA: %v", err)
	}
	if _, err := serial(t, addr, "gw.test", ca, &bad); err == nil {
		t.Error("a client certificate of another CA was accepted")
	}
	if _, err := serial(t, addr, "gw.test", ca, nil); err == nil {
		t.Error("a client without a certificate was accepted")
	}
}

// TestWatchRotates: new handshakes get a rotated certificate within a
// bounded time, a connection made before keeps working, and a broken
// rotation (a key that does not match) keeps the old certificate serving.
func TestWatchRotates(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "test")
	first := ca.Server("s.pem", "s.key", "gw.test")
	st, err := New(Settings{Certificates: []Pair{{first.CertFile, first.KeyFile}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, _, stop := watch(t, st)

	old, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "gw.test", RootCAs: ca.Pool})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, err := old.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	second := ca.Server("s.pem", "s.key", "gw.test")
	waitSerial(t, addr, ca, second.Serial)
	if _, err := old.Write([]byte("y")); err != nil {
		t.Errorf("the connection made before the rotation broke: %v", err)
	}

	// A key from elsewhere: the pair does not match, the second
	// certificate keeps serving.
	loads := st.Loads()
	stray := ca.Server("x.pem", "x.key", "gw.test")
	key, err := os.ReadFile(stray.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(second.KeyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // several debounce intervals
	if st.Loads() != loads {
		t.Errorf("a mismatched key was loaded")
	}
	waitSerial(t, addr, ca, second.Serial)
	third := ca.Server("s.pem", "s.key", "gw.test")
	waitSerial(t, addr, ca, third.Serial)
	stop()
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "test")
	a := ca.Server("a.pem", "a.key", "a")
	b := ca.Server("b.pem", "b.key", "b")
	tests := []struct {
		name string
		s    Settings
		want string
	}{
		{"none", Settings{}, "no certificates"},
		{"missing cert", Settings{Certificates: []Pair{{dir + "/nope.pem", a.KeyFile}}}, "certificates[0]: cert_file"},
		{"missing key", Settings{Certificates: []Pair{{a.CertFile, dir + "/nope.key"}}}, "certificates[0]: key_file"},
		{"mismatch", Settings{Certificates: []Pair{{a.CertFile, a.KeyFile}, {a.CertFile, b.KeyFile}}}, "certificates[1]: cert_file"},
		{"bad client CA", Settings{Certificates: []Pair{{a.CertFile, a.KeyFile}}, ClientCAFile: a.KeyFile}, "client_ca_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.s, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestWatchFollowsUpdate: a config reload (Update) that moves a
// certificate to a directory not watched before has that directory
// watched at once: a rotation there reaches new handshakes though nothing
// changed in the directories watched before.
func TestWatchFollowsUpdate(t *testing.T) {
	ca := certstest.NewCA(t, t.TempDir(), "test")
	first := ca.Server("s.pem", "s.key", "gw.test")
	st, err := New(Settings{Certificates: []Pair{{first.CertFile, first.KeyFile}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, _, stop := watch(t, st)

	other := t.TempDir()
	moved := ca.Server(filepath.Join(other, "s.pem"), filepath.Join(other, "s.key"), "gw.test")
	if err := st.Update(Settings{Certificates: []Pair{{moved.CertFile, moved.KeyFile}}}); err != nil {
		t.Fatal(err)
	}
	waitSerial(t, addr, ca, moved.Serial)
	rotated := ca.Server(moved.CertFile, moved.KeyFile, "gw.test")
	waitSerial(t, addr, ca, rotated.Serial)
	stop()
}

// TestWatchSeesChangeBeforeStart: a renewal written after New read the
// files but before Watch had its watches in place raises no event Watch
// can see; it is served all the same, once Watch has started.
func TestWatchSeesChangeBeforeStart(t *testing.T) {
	ca := certstest.NewCA(t, t.TempDir(), "test")
	first := ca.Server("s.pem", "s.key", "gw.test")
	st, err := New(Settings{Certificates: []Pair{{first.CertFile, first.KeyFile}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	renewed := ca.Server(first.CertFile, first.KeyFile, "gw.test")
	addr, _, stop := watch(t, st)
	waitSerial(t, addr, ca, renewed.Serial)
	stop()
}

// watch runs st.Watch (debounce 20 ms) and serves TLS with
// st on loopback, until the test ends. ended reports a Watch that returned
// early; stop ends the watch and fails the test unless it returned nil.
func watch(t *testing.T, st *Store) (addr string, ended <-chan error, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- st.Watch(ctx, 20*time.Millisecond) }()
	return serve(t, st), done, func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	}
}

// waitSerial waits until a new handshake with addr for gw.test gets the
// certificate with serial want, or fails the test after 10 s.
func waitSerial(t *testing.T, addr string, ca *certstest.CA, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := serial(t, addr, "gw.test", ca, nil)
		if err == nil && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("serial %d (%v), want %d", got, err, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
