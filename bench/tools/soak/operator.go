package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// operator does what an operator does while traffic flows, a change every
// 20–100 ms: it sets the gray rule to 0, 30 or 100 percent, rolls every
// rule back and resumes, sends SIGHUP, and rewrites the config file with
// another read_timeout. After each change to 0 or 100 percent, and after
// each rollback, the very next request (over HTTP/1.1 and over h2c) must
// go where the change says.
//
// With a second gateway b (-fleet), each such change must also reach b
// within 3 s. A write refused while etcd is in trouble (store.troubled)
// is expected: it is 503 and changes nothing.
func operator(ctx context.Context, a, b *gateway, store *etcd, t *tally) {
	r := mrand.New(mrand.NewPCG(*seed, 7777))
	admin := fmt.Sprintf("http://127.0.0.1:%d", a.admin)
	cl := newClients(nil)
	defer cl.closeIdle()
	call := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, admin+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := cl.h1.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(got)
	}
	obeys := func(want, change string) {
		if b != nil {
			defer reaches(b, want, change, t)
		}
		for _, c := range []struct {
			name string
			cl   *http.Client
		}{{"h1", cl.h1}, {"h2c", cl.h2c}} {
			req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/svc/ok", a.data), nil)
			req.Header.Set("X-User-Id", strconv.Itoa(r.IntN(100000)))
			resp, err := c.cl.Do(req)
			if err != nil {
				t.fail(fmt.Sprintf("operator: the request after %s over %s: %s", change, c.name, short(err)))
				continue
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(got) != want {
				t.fail(fmt.Sprintf("operator: the request after %s over %s went to %q (status %d), not %s", change, c.name, got, resp.StatusCode, want))
				continue
			}
			t.add("operator: the request after " + change + " obeyed it")
		}
	}
	for ctx.Err() == nil {
		switch k := r.IntN(10); {
		case k < 6:
			pct := []int{0, 100, 30}[r.IntN(3)]
			rule := fmt.Sprintf(`{"key":"g1","type":"gray","gray_percent":%d,"conditions":{"path_prefix":["/svc/"]},"targets":{"gray":"gray","stable":"stable"}}`, pct)
			if st, body := call("PUT", "/api/v1/rules/g1", rule); st != http.StatusOK && st != http.StatusCreated {
				if st == http.StatusServiceUnavailable && store.troubled() {
					t.add("operator: a PUT refused with 503 while etcd was in trouble")
				} else {
					t.fail(fmt.Sprintf("operator: PUT answered %d: %.80s", st, body))
				}
				continue
			}
			switch pct {
			case 0:
				obeys("stable", "a PUT of 0%")
			case 100:
				obeys("gray", "a PUT of 100%")
			default:
				t.add("operator: a PUT of 30%")
			}
		case k < 8:
			if st, body := call("POST", "/api/v1/rollback", ""); st != http.StatusOK {
				if st == http.StatusServiceUnavailable && store.troubled() {
					t.add("operator: a rollback refused with 503 while etcd was in trouble")
				} else {
					t.fail(fmt.Sprintf("operator: rollback answered %d: %.80s", st, body))
				}
				continue
			}
			obeys("stable", "a rollback")
			time.Sleep(time.Duration(r.IntN(30)) * time.Millisecond)
			for try := 0; ; try++ {
				st, body := call("POST", "/api/v1/resume", "")
				if st == http.StatusOK {
					break
				}
				if st != http.StatusServiceUnavailable || !store.troubled() || try == 100 {
					t.fail(fmt.Sprintf("operator: resume answered %d: %.80s", st, body))
					break
				}
				time.Sleep(100 * time.Millisecond) // etcd is in trouble: a rollback must not stay on
			}
		case k < 9:
			syscall.Kill(a.cmd.Process.Pid, syscall.SIGHUP)
			t.add("operator: SIGHUP")
		default:
			next := strings.Replace(a.cfg, "read_timeout: 1s", fmt.Sprintf("read_timeout: %dms", 900+r.IntN(200)), 1)
			os.WriteFile(a.cfgPath+".new", []byte(next), 0o644)
			os.Rename(a.cfgPath+".new", a.cfgPath)
			t.add("operator: config rewritten")
		}
		time.Sleep(time.Duration(20+r.IntN(80)) * time.Millisecond)
	}
	if st, body := call("GET", "/api/v1/status", ""); st != http.StatusOK || !strings.Contains(body, `"last_reload_result": "ok"`) {
		t.fail(fmt.Sprintf("operator: status %d: %.200s", st, body))
	}
}

// ca signs the leaf certificates graygate serves.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newCA() *ca {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "graygate soak CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	c, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return &ca{c, key, pool}
}

// leaf writes a new leaf for 127.0.0.1 with the given serial to
// dir/leaf.key and dir/leaf.pem, each through a rename, the key first: as
// certbot does, the two files change one after the other.
func (a *ca) leaf(dir string, serial int64) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		panic(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	write := func(name string, b []byte) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p+".new", b, 0o600); err != nil {
			panic(err)
		}
		if err := os.Rename(p+".new", p); err != nil {
			panic(err)
		}
	}
	write("leaf.key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
	write("leaf.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// rotator writes a new leaf every 1.5–3 s and checks that new handshakes
// get it within 5 s, while the TLS clients keep going.
func rotator(ctx context.Context, a *ca, dir string, t *tally) {
	r := mrand.New(mrand.NewPCG(*seed, 8888))
	for serial := int64(101); ; serial++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(1500+r.IntN(1500)) * time.Millisecond):
		}
		a.leaf(dir, serial)
		deadline := time.Now().Add(5 * time.Second)
		for {
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", fmt.Sprintf("127.0.0.1:%d", tlsPort), &tls.Config{RootCAs: a.pool})
			if err != nil {
				t.fail("rotation: handshake: " + short(err))
			} else {
				got := c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
				c.Close()
				if got == serial {
					t.add("rotation: the new certificate served")
					break
				}
			}
			if time.Now().After(deadline) {
				t.fail("rotation: the new certificate not served within 5 s")
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
