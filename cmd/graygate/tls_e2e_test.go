package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/graygate/graygate/internal/certs/certstest"
)

// TestServeTLSAndH2C: `graygate serve` with tls_listen and h2c serves
// HTTP/2 over TLS and with prior knowledge in clear, and on SIGTERM
// closes both listeners and exits cleanly.
func TestServeTLSAndH2C(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "e2e")
	pair := ca.Server("gw.pem", "gw.key", "gw.test")
	cfg := filepath.Join(dir, "graygate.yaml")
	yaml := fmt.Sprintf("default_upstream: %q\nh2c: true\ntls_listen: %q\ntls: {certificates: [{cert_file: %q, key_file: %q}]}\n",
		backend(t, "stable"), "127.0.0.1:0", pair.CertFile, pair.KeyFile)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, "--config", cfg, "--data-dir", filepath.Join(dir, "data"))
	// The start-up log names the address the TLS listener holds (port 0
	// asks the kernel for one), as startServe found it.
	tlsAddr := p.tls
	if _, port, err := net.SplitHostPort(tlsAddr); err != nil || port == "0" {
		t.Fatalf("the start-up log names the TLS listener as %q, want the address it holds\n%s", tlsAddr, p.log())
	}

	overTLS := &http.Client{Timeout: 10 * time.Second, Transport: &http2.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, ServerName: "gw.test"}}}
	h2c := &http.Client{Timeout: 10 * time.Second, Transport: &http2.Transport{AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}}
	for _, tt := range []struct {
		name string
		c    *http.Client
		url  string
	}{{"h2 over tls", overTLS, "https://" + tlsAddr + "/x"}, {"h2c", h2c, "http://" + p.data + "/x"}} {
		resp, err := tt.c.Get(tt.url)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != 200 || string(body) != "stable" || resp.Header.Get("X-Gray-Group") != "default" {
			t.Errorf("%s: %s %d %q group %q", tt.name, resp.Proto, resp.StatusCode, body, resp.Header.Get("X-Gray-Group"))
		}
	}
	p.kill(syscall.SIGTERM)
	if !p.cmd.ProcessState.Success() {
		p.mu.Lock()
		t.Errorf("graygate did not exit cleanly on SIGTERM: %v\n%s", p.cmd.ProcessState, p.stderr)
		p.mu.Unlock()
	}
	for _, addr := range []string{tlsAddr, p.data} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after the shutdown", addr)
		}
	}
}
