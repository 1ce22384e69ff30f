package gateway

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/config"
)

// TestActiveHealthH2Pool serves an h2 pool (a private CA, a
// server name) with active health through the real listener. Its probes
// used to go out as HTTP/1.1 in clear, so the TLS instance failed every
// probe and every request got 503 once three probes had failed.
func TestActiveHealthH2Pool(t *testing.T) {
	var probes, wrong atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hc" {
			if r.ProtoMajor != 2 || r.TLS == nil {
				wrong.Add(1)
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			probes.Add(1)
			return
		}
		io.WriteString(w, "orders over "+r.Proto)
	}))
	var ps http.Protocols
	ps.SetHTTP2(true)
	srv.Config.Protocols = &ps
	srv.TLS = &tls.Config{NextProtos: []string{"h2"}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(srv.URL, "https://")
	e := start(t, fmt.Sprintf(`
default_upstream: orders
upstreams:
  orders:
    protocol: h2
    ca_file: %q
    server_name: example.com
    instances: [{addr: %q}]
    active_health: {path: /hc, interval: 20ms, timeout: 1s, unhealthy_threshold: 2}
`, ca, addr), "")
	deadline := time.Now().Add(10 * time.Second)
	for probes.Load() < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for 5 passing probes (%d came in HTTP/1.1 or in clear)", wrong.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := range 5 {
		resp, err := e.client.Get(e.data + "/x")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "orders over HTTP/2.0" {
			t.Fatalf("request %d after %d probes = %d %q", i, probes.Load(), resp.StatusCode, body)
		}
	}
	if n := wrong.Load(); n != 0 {
		t.Errorf("%d probes came in HTTP/1.1 or in clear", n)
	}
}

// TestBadURLAddressRefused refuses instance and target URLs that can never
// be dialled, naming the field, and keeps serving the old config. They
// used to pass validation, and every request to them failed with 502.
func TestBadURLAddressRefused(t *testing.T) {
	e := start(t, `
default_upstream: stable
upstreams:
  stable: {instances: [{addr: "{{stable}}"}]}
`, "")
	for _, bad := range []string{"http://127.0.0.1:99999", "http://:8080", "http://127.0.0.1:0"} {
		t.Run(bad, func(t *testing.T) {
			err := e.gw.ReloadConfigFile(context.Background(), func() (*config.Config, error) {
				return config.Parse([]byte(fmt.Sprintf(`
default_upstream: stable
upstreams:
  stable: {instances: [{addr: %q}]}
`, bad)))
			})
			if err == nil || !strings.Contains(err.Error(), "upstreams.stable.instances[0].addr") || !strings.Contains(err.Error(), bad) {
				t.Errorf("reload with instance %q: %v, want an error naming upstreams.stable.instances[0].addr and the value", bad, err)
			}
			code, out := e.api("PUT", "/api/v1/rules/bad", map[string]any{"type": "gray", "gray_percent": 50,
				"targets": map[string]string{"gray": bad, "stable": "stable"}})
			if code != 400 || !strings.Contains(fmt.Sprint(out), "targets.gray") || !strings.Contains(fmt.Sprint(out), bad) {
				t.Errorf("PUT a rule with target %q = %d %v, want 400 naming targets.gray and the value", bad, code, out)
			}
			a, err := e.get("/x")
			if err != nil || a.status != 200 || a.backend != "stable" {
				t.Errorf("after the refusals: %+v, %v", a, err)
			}
		})
	}
}
