// Package certstest makes certificate authorities and certificates for
// tests, as PEM files in a directory, the way an operator's files look:
// a CA, server certificates for a set of names signed by it, and client
// certificates for mTLS. Keys are ECDSA P-256, made from crypto/rand.
package certstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority whose files live in a test's directory.
type CA struct {
	t    testing.TB
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File is the CA certificate's PEM file.
	File string
	// Pool holds the CA certificate, for a client that trusts it.
	Pool *x509.CertPool
	n    int
}

// NewCA makes a CA named name with its certificate in dir.
func NewCA(t testing.TB, dir, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{t: t, dir: dir, cert: cert, key: key, Pool: x509.NewCertPool()}
	ca.Pool.AddCert(cert)
	ca.File = filepath.Join(dir, name+"-ca.pem")
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Pair is a certificate and key as files.
type Pair struct {
	CertFile, KeyFile string
	// Serial is the certificate's serial number, to tell certificates
	// apart on the wire.
	Serial int64
}

// Server issues a server certificate for names (DNS names or IP
// addresses; the first is the common name) and writes it and its key to
// certFile and keyFile (relative names are in the CA's directory).
func (ca *CA) Server(certFile, keyFile string, names ...string) Pair {
	return ca.issue(certFile, keyFile, x509.ExtKeyUsageServerAuth, names)
}

// Client issues a client certificate for mTLS.
func (ca *CA) Client(certFile, keyFile, name string) Pair {
	return ca.issue(certFile, keyFile, x509.ExtKeyUsageClientAuth, []string{name})
}

func (ca *CA) issue(certFile, keyFile string, usage x509.ExtKeyUsage, names []string) Pair {
	t := ca.t
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca.n++
	serial := time.Now().UnixNano() + int64(ca.n)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := Pair{CertFile: ca.path(certFile), KeyFile: ca.path(keyFile), Serial: serial}
	// The key first: a watcher that reloads on the certificate's write
	// then finds a matching pair.
	writePEM(t, p.KeyFile, "EC PRIVATE KEY", kd)
	writePEM(t, p.CertFile, "CERTIFICATE", der)
	return p
}

func (ca *CA) path(name string) string {
	if filepath.IsAbs(name) {
		return name
	}
	return filepath.Join(ca.dir, name)
}

// TLSCertificate loads p for a client's tls.Config.
func (p Pair) TLSCertificate(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// writePEM writes one PEM block to path through a temporary file and a
// rename, as certificate managers do, so that a reader never sees half a
// file.
func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(fmt.Errorf("rename %s: %w", tmp, err))
	}
}
