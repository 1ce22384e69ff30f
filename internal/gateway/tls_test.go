package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/xml"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/graygate/graygate/internal/certs/certstest"
	"github.com/graygate/graygate/internal/config"
)

// tlsEnv is a gateway with a TLS listener and h2c on its cleartext one,
// in front of HTTP/1.1 backends that echo what they saw.
type tlsEnv struct {
	gw             *Gateway
	clear, tlsAddr string
	admin          string
	dir            string
	ca             *certstest.CA
	backends       map[string]string
}

// echoingBackend answers with its name and reports, in response headers,
// the request's X-Forwarded-Proto, X-Gray-Tag and protocol.
func echoingBackend(t *testing.T, name string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Backend", name)
		w.Header().Set("X-Seen-Proto", r.Header.Get("X-Forwarded-Proto"))
		w.Header().Set("X-Seen-Tag", r.Header.Get("X-Gray-Tag"))
		w.Header().Set("X-Seen-Via", r.Header.Get("Via"))
		_, _ = io.WriteString(w, name)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// startTLS runs a gateway with yaml ({{stable}}, {{gray}} replaced),
// tls_listen and h2c; tlsYAML is its tls section (the certificates), with
// {{dir}} replaced by the test's certificate directory, which mkCerts
// fills first.
func startTLS(t *testing.T, yaml, tlsYAML string, mkCerts func(dir string, ca *certstest.CA)) *tlsEnv {
	t.Helper()
	e := &tlsEnv{dir: t.TempDir(), backends: map[string]string{"stable": echoingBackend(t, "stable"), "gray": echoingBackend(t, "gray")}}
	e.ca = certstest.NewCA(t, e.dir, "gw")
	mkCerts(e.dir, e.ca)
	yaml = strings.NewReplacer("{{stable}}", e.backends["stable"], "{{gray}}", e.backends["gray"]).Replace(yaml)
	yaml += "\nh2c: true\ntls_listen: \"127.0.0.1:0\"\ntls: " + strings.ReplaceAll(tlsYAML, "{{dir}}", e.dir) + "\n"
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	cfg.DataDir = t.TempDir()
	g, err := New(Options{Config: cfg, AdminToken: token, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	e.gw = g
	e.clear, e.tlsAddr, e.admin = serveTLS(t, g)
	return e
}

// serveTLS serves g on three loopback listeners (cleartext data, TLS data,
// admin) until the test ends, and returns their addresses.
func serveTLS(t *testing.T, g *Gateway) (clear, tlsAddr, admin string) {
	t.Helper()
	dl, _ := net.Listen("tcp", "127.0.0.1:0")
	tl, _ := net.Listen("tcp", "127.0.0.1:0")
	al, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.ServeListeners(ctx, Listeners{Data: dl, TLS: tl, Admin: al}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("ServeListeners: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("the gateway did not stop")
		}
	})
	return dl.Addr().String(), tl.Addr().String(), al.Addr().String()
}

func oneCert(dir string, ca *certstest.CA) { ca.Server("gw.pem", "gw.key", "gw.test", "127.0.0.1") }

const oneCertTLS = `{certificates: [{cert_file: "{{dir}}/gw.pem", key_file: "{{dir}}/gw.key"}]}`

const tlsConfig = `
default_upstream: stable
upstreams:
  stable: {instances: [{addr: "{{stable}}"}]}
  gray:   {instances: [{addr: "{{gray}}"}]}
rules:
  - {key: all_gray, type: gray, gray_percent: 100, conditions: {path_prefix: ["/g/"]}, targets: {gray: gray, stable: stable}}
`

// curl runs curl with args and returns its output (headers and body).
func curl(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "curl", append([]string{"-sS", "-i", "--max-time", "20"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("curl %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestCurlHTTP2: curl --http2 over TLS (a CA made by the test) and curl
// --http2-prior-knowledge over h2c reach the backends through the
// gateway, with the decision headers, X-Forwarded-Proto: https over TLS,
// and the guarded HTTP/1.1 path still there on both listeners.
func TestCurlHTTP2(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed (scripts/test.sh installs it)")
	}
	e := startTLS(t, tlsConfig, oneCertTLS, oneCert)
	_, port, _ := net.SplitHostPort(e.tlsAddr)
	tlsArgs := []string{"--cacert", e.ca.File, "--resolve", "gw.test:" + port + ":127.0.0.1"}
	tests := []struct {
		name  string
		args  []string
		proto string // status line prefix
		want  []string
	}{
		{"http2 over tls", append(tlsArgs, "--http2", "https://gw.test:"+port+"/g/x"), "HTTP/2 200",
			[]string{"x-gray-group: gray", "x-gray-rule: all_gray", "x-seen-proto: https", "x-seen-tag: gray", "x-seen-via: 2 graygate", "\r\n\r\ngray"}},
		{"http/1.1 over tls", append(tlsArgs, "--http1.1", "https://gw.test:"+port+"/g/x"), "HTTP/1.1 200",
			[]string{"X-Gray-Group: gray", "X-Seen-Proto: https", "X-Seen-Via: 1.1 graygate", "\r\n\r\ngray"}},
		{"h2c prior knowledge", []string{"--http2-prior-knowledge", "http://" + e.clear + "/other"}, "HTTP/2 200",
			[]string{"x-gray-group: default", "x-seen-proto: http", "\r\n\r\nstable"}},
		{"http/1.1 in clear", []string{"--http1.1", "http://" + e.clear + "/g/y"}, "HTTP/1.1 200",
			[]string{"X-Gray-Group: gray", "X-Seen-Proto: http", "\r\n\r\ngray"}},
		{"h2c upgrade is plain http/1.1", []string{"--http2", "http://" + e.clear + "/g/z"}, "HTTP/1.1 200",
			[]string{"X-Gray-Group: gray", "\r\n\r\ngray"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := curl(t, tt.args...)
			if !strings.HasPrefix(out, tt.proto) {
				t.Fatalf("curl %v:\n%s\nwant a response starting %q", tt.args, out, tt.proto)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("curl %v:\n%s\nwant it to contain %q", tt.args, out, w)
				}
			}
		})
	}
	// curl refuses the gateway's certificate without the test CA.
	cmd := exec.Command("curl", "-sS", "--max-time", "10", "--resolve", "gw.test:"+port+":127.0.0.1", "https://gw.test:"+port+"/")
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("curl without the CA succeeded: %s", out)
	}
}

// serialOf dials the TLS listener asking for sni and returns the serial of
// the certificate the gateway presented.
func serialOf(t *testing.T, addr, sni string, ca *certstest.CA, client *tls.Certificate) (int64, error) {
	conf := &tls.Config{ServerName: sni, RootCAs: ca.Pool, NextProtos: []string{"http/1.1"}}
	if client != nil {
		conf.Certificates = []tls.Certificate{*client}
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, conf)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+sni+"\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
}

// TestSNIAndMutualTLS: the certificate is chosen by SNI, and with
// client_ca_file only clients with a certificate of that CA get in.
func TestSNIAndMutualTLS(t *testing.T) {
	var a, b certstest.Pair
	var good, other tls.Certificate
	e := startTLS(t, tlsConfig, `{client_ca_file: "{{dir}}/gw-ca.pem", certificates: [
	  {cert_file: "{{dir}}/a.pem", key_file: "{{dir}}/a.key"}, {cert_file: "{{dir}}/b.pem", key_file: "{{dir}}/b.key"}]}`,
		func(dir string, ca *certstest.CA) {
			a = ca.Server("a.pem", "a.key", "a.test")
			b = ca.Server("b.pem", "b.key", "b.test")
			good = ca.Client("c.pem", "c.key", "client").TLSCertificate(t)
			other = certstest.NewCA(t, dir, "other").Client("o.pem", "o.key", "intruder").TLSCertificate(t)
		})
	for _, tt := range []struct {
		sni  string
		want int64
	}{{"a.test", a.Serial}, {"b.test", b.Serial}} {
		if got, err := serialOf(t, e.tlsAddr, tt.sni, e.ca, &good); err != nil || got != tt.want {
			t.Errorf("SNI %s: serial %d, %v; want %d", tt.sni, got, err, tt.want)
		}
	}
	if _, err := serialOf(t, e.tlsAddr, "a.test", e.ca, nil); err == nil {
		t.Error("a client without a certificate got in")
	}
	if _, err := serialOf(t, e.tlsAddr, "a.test", e.ca, &other); err == nil {
		t.Error("a client with a certificate of another CA got in")
	}
}

// TestCertRotationUnderLoad: while HTTP/2 and HTTP/1.1 clients keep their
// TLS connections busy and others open a new connection per request, the
// certificate files are replaced. New handshakes get the new certificate,
// the established connections keep working, and no request fails.
func TestCertRotationUnderLoad(t *testing.T) {
	e := startTLS(t, tlsConfig, oneCertTLS, oneCert)
	first, err := serialOf(t, e.tlsAddr, "gw.test", e.ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := "https://" + e.tlsAddr + "/g/load"
	tlsConf := &tls.Config{RootCAs: e.ca.Pool, ServerName: "gw.test"}
	h2 := &http.Client{Transport: &http2.Transport{TLSClientConfig: tlsConf}, Timeout: 20 * time.Second}
	h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf, MaxIdleConnsPerHost: 4}, Timeout: 20 * time.Second}
	fresh := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf, DisableKeepAlives: true}, Timeout: 20 * time.Second}
	var serials sync.Map // certificate serials seen on fresh connections
	var ok, failed atomic.Int64
	var errMu sync.Mutex
	var errs []string
	do := func(c *http.Client, fresh bool) {
		resp, err := c.Get(base)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			} else if fresh && resp.TLS != nil {
				serials.Store(resp.TLS.PeerCertificates[0].SerialNumber.Int64(), true)
			}
		}
		if err != nil {
			failed.Add(1)
			errMu.Lock()
			errs = append(errs, err.Error())
			errMu.Unlock()
			return
		}
		ok.Add(1)
	}
	stop := underLoad(6, func(w, n int) {
		switch w % 3 {
		case 0:
			do(h2, false)
		case 1:
			do(h1, false)
		default:
			do(fresh, true)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for ok.Load() < 200 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	rotated := e.ca.Server("gw.pem", "gw.key", "gw.test", "127.0.0.1")
	for {
		if _, seen := serials.Load(rotated.Serial); seen {
			break
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("no new connection got the rotated certificate (serial %d) in time", rotated.Serial)
		}
		time.Sleep(10 * time.Millisecond)
	}
	after := ok.Load()
	for ok.Load() < after+200 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if failed.Load() > 0 {
		t.Errorf("%d of %d requests failed across the rotation: %v", failed.Load(), failed.Load()+ok.Load(), errs[:min(len(errs), 5)])
	}
	if got, err := serialOf(t, e.tlsAddr, "gw.test", e.ca, nil); err != nil || got != rotated.Serial || got == first {
		t.Errorf("after the rotation a new handshake gets serial %d (%v), want %d", got, err, rotated.Serial)
	}
}

// allowedH2Spec are the h2spec v2.2.1 tests that Go's own x/net/http2
// server fails, and so the gateway, which is that server (README, "HTTP/2"):
//
//	3.5/2     invalid connection preface: the server closes the connection
//	          at once instead of sending GOAWAY first;
//	4.2/3     a HEADERS frame over SETTINGS_MAX_FRAME_SIZE: the server
//	          answers it instead of a FRAME_SIZE_ERROR;
//	6.5.3/1   several SETTINGS_INITIAL_WINDOW_SIZE values in one frame:
//	          the server closes the connection;
//	8.1.2.2/1 a connection-specific header field, and
//	8.1.2.2/2 TE other than "trailers": the server hands the request on
//	          instead of a PROTOCOL_ERROR (golang/go#26321).
var allowedH2Spec = []string{"3.5/2", "4.2/3", "6.5.3/1", "8.1.2.2/1", "8.1.2.2/2"}

// h2specBinary builds h2spec v2.2.1 from the Go module proxy, pinned in
// tools/h2spec (as scripts/h2spec.sh does).
func h2specBinary(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "tools", "h2spec")
	bin := filepath.Join(t.TempDir(), "h2spec")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/summerwind/h2spec/cmd/h2spec")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build h2spec: %v\n%s", err, out)
	}
	return bin
}

// junit is the part of h2spec's JUnit report the test reads.
type junit struct {
	Suites []struct {
		Package string `xml:"package,attr"`
		Cases   []struct {
			Name    string    `xml:"classname,attr"`
			Error   *struct{} `xml:"error"`
			Failure *struct{} `xml:"failure"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// TestH2Spec runs h2spec against the h2c listener and the TLS listener:
// it may fail only the tests Go's HTTP/2 server fails.
func TestH2Spec(t *testing.T) {
	bin := h2specBinary(t)
	e := startTLS(t, tlsConfig, oneCertTLS, oneCert)
	for _, tt := range []struct {
		name string
		addr string
		tls  bool
	}{{"h2c", e.clear, false}, {"tls", e.tlsAddr, true}} {
		t.Run(tt.name, func(t *testing.T) {
			host, port, _ := net.SplitHostPort(tt.addr)
			report := filepath.Join(t.TempDir(), "report.xml")
			args := []string{"-h", host, "-p", port, "-o", "3", "-j", report}
			if tt.tls {
				args = append(args, "-t", "-k")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			out, _ := exec.CommandContext(ctx, bin, args...).CombinedOutput()
			data, err := os.ReadFile(report)
			if err != nil {
				t.Fatalf("h2spec wrote no report: %v\n%s", err, out)
			}
			var rep junit
			if err := xml.Unmarshal(data, &rep); err != nil {
				t.Fatal(err)
			}
			var failed, unexpected []string
			total := 0
			for _, s := range rep.Suites {
				id := strings.TrimPrefix(s.Package, "http2/")
				for i, c := range s.Cases {
					total++
					if c.Error == nil && c.Failure == nil {
						continue
					}
					name := fmt.Sprintf("%s/%d", id, i+1)
					failed = append(failed, name)
					if !slices.Contains(allowedH2Spec, name) {
						unexpected = append(unexpected, name+" ("+c.Name+")")
					}
				}
			}
			sort.Strings(failed)
			t.Logf("h2spec %s: %d tests, failed %v", tt.name, total, failed)
			if total < 140 {
				t.Fatalf("h2spec ran only %d tests:\n%s", total, out)
			}
			if len(unexpected) > 0 {
				t.Errorf("h2spec failures beyond Go's own: %v\n%s", unexpected, out)
			}
		})
	}
}

// TestReloadTLSSettings: a config reload that names other certificate
// files applies to the next handshakes, and reports no restart; moving
// tls_listen does.
func TestReloadTLSSettings(t *testing.T) {
	var other certstest.Pair
	e := startTLS(t, tlsConfig, oneCertTLS, func(dir string, ca *certstest.CA) {
		oneCert(dir, ca)
		other = ca.Server("other.pem", "other.key", "gw.test", "127.0.0.1")
	})
	e.gw.mu.Lock()
	cfg := *e.gw.cfg
	e.gw.mu.Unlock()
	cfg.TLS.Certificates = []config.Certificate{{CertFile: other.CertFile, KeyFile: other.KeyFile}}
	if err := e.gw.ReloadConfig(context.Background(), &cfg); err != nil {
		t.Fatal(err)
	}
	if got, err := serialOf(t, e.tlsAddr, "gw.test", e.ca, nil); err != nil || got != other.Serial {
		t.Errorf("after the reload: serial %d (%v), want %d", got, err, other.Serial)
	}
	if rr := e.gw.Status().RestartRequired; len(rr) != 0 {
		t.Errorf("restart_required = %v after a certificate change", rr)
	}
	moved := cfg
	moved.TLSListen = "127.0.0.1:1"
	if err := e.gw.ReloadConfig(context.Background(), &moved); err != nil {
		t.Fatal(err)
	}
	if rr := e.gw.Status().RestartRequired; !slices.Equal(rr, []string{"tls_listen"}) {
		t.Errorf("restart_required = %v after moving tls_listen, want [tls_listen]", rr)
	}
}
