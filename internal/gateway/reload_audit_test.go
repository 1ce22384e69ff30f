package gateway

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/testserve"
)

// TestReloadRemovingTLSListenNamesRestart: a reload whose config has no
// tls_listen (and so no tls section) applies the rest and names tls_listen;
// the TLS listener keeps serving with its certificates until the restart.
// Before, the reload was refused whole ("tls: no certificates").
func TestReloadRemovingTLSListenNamesRestart(t *testing.T) {
	e := startTLS(t, tlsConfig, oneCertTLS, oneCert)
	e.gw.mu.Lock()
	running := *e.gw.cfg
	e.gw.mu.Unlock()
	next := running
	next.TLSListen, next.TLS, next.DefaultUpstream = "", config.TLS{}, "gray"
	if err := next.Validate(); err != nil {
		t.Fatalf("the config without TLS is not valid: %v", err)
	}
	if err := e.gw.ReloadConfig(context.Background(), &next); err != nil {
		t.Fatalf("reload without tls_listen: %v", err)
	}
	st := e.gw.Status()
	if !slices.Equal(st.RestartRequired, []string{"tls_listen"}) || st.LastResult != "ok; restart required: tls_listen" {
		t.Errorf("restart_required %v, last_reload_result %q; want tls_listen named", st.RestartRequired, st.LastResult)
	}
	resp, err := http.Get("http://" + e.clear + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if b := resp.Header.Get("X-Backend"); b != "gray" {
		t.Errorf("the live part of the reload: default upstream answered by %q, want gray", b)
	}
	if got := tlsProbe(e, &tls.Config{}); got != "ok" {
		t.Errorf("the running TLS listener after the reload: %s, want it serving until the restart", got)
	}
	if err := e.gw.ReloadConfig(context.Background(), &running); err != nil {
		t.Fatalf("reload back: %v", err)
	}
	if st := e.gw.Status(); len(st.RestartRequired) != 0 || st.LastResult != "ok" {
		t.Errorf("back to the running config: restart_required %v, last_reload_result %q", st.RestartRequired, st.LastResult)
	}
}

// TestReloadRereadsTargetingFiles: a reload reads the targeting section's
// key files again, as it reads upstream CA files, token_env and
// secret_env, so that a rotated JWT key (the same path, new contents)
// applies at the reload an operator sends for it. Before, the section was
// rebuilt only when its text changed: the old key kept verifying and
// tokens of the new one were refused, with the reload reporting "ok".
// A reload that changes neither keeps the running resolvers (and their
// caches).
func TestReloadRereadsTargetingFiles(t *testing.T) {
	dir := t.TempDir()
	k1, pub1, jwks1 := ecKey(t, dir, "k1")
	k2, pub2, jwks2 := ecKey(t, dir, "k2")
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name      string
		body      string // the jwt section, with {{file}}
		old, next []byte // the file's contents
		sign      func(key int) string
	}{
		{
			name: "hs256_secret_file", body: `hs256_secret_file: "{{file}}"`, old: []byte(secretS), next: []byte(secretT),
			sign: func(key int) string {
				return jwtTok(t, jwt.SigningMethodHS256, []byte([]string{secretS, secretT}[key]), "", jwt.MapClaims{"sub": "vip"})
			},
		},
		{
			name: "public_key_file", body: `public_key_file: "{{file}}"`, old: read(pub1), next: read(pub2),
			sign: func(key int) string {
				return jwtTok(t, jwt.SigningMethodES256, []*ecdsa.PrivateKey{k1, k2}[key], "", jwt.MapClaims{"sub": "vip"})
			},
		},
		{
			name: "jwks_file", body: `jwks_file: "{{file}}"`, old: read(jwks1), next: read(jwks2),
			sign: func(key int) string {
				return jwtTok(t, jwt.SigningMethodES256, []*ecdsa.PrivateKey{k1, k2}[key], []string{"k1", "k2"}[key], jwt.MapClaims{"sub": "vip"})
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "key")
			if err := os.WriteFile(file, tc.old, 0o600); err != nil {
				t.Fatal(err)
			}
			y := jwtCfg(tc.body, "")
			y = string(bytes.ReplaceAll([]byte(y), []byte("{{file}}"), []byte(file)))
			e := start(t, y, "")
			e.mustPut("vip", vipRule)
			group := func(key int) string { return e.group("/", "Authorization", "Bearer "+tc.sign(key)) }
			if g0, g1 := group(0), group(1); g0 != "gray" || g1 != "default" {
				t.Fatalf("before the rotation: old key %s, new key %s; want gray, default", g0, g1)
			}
			// Nothing changed: the running resolvers stay.
			tgt := e.gw.tgt.Load()
			if err := e.reload(y); err != nil {
				t.Fatal(err)
			}
			if e.gw.tgt.Load() != tgt {
				t.Error("a reload that changed neither the section nor its files rebuilt the resolvers")
			}
			// The key is rotated in place, then the config reloaded.
			if err := os.WriteFile(file, tc.next, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := e.reload(y); err != nil {
				t.Fatal(err)
			}
			if g0, g1 := group(0), group(1); g0 != "default" || g1 != "gray" {
				t.Errorf("after the rotation and a reload: old key %s, new key %s; want default, gray", g0, g1)
			}
			if st := e.gw.Status(); st.LastResult != "ok" {
				t.Errorf("last_reload_result %q", st.LastResult)
			}
		})
	}
}

// stallingH2C is an h2c upstream with flow-control windows of 1 GiB that
// reads nothing of a request for pause after its header, then reads it to
// its end and answers 200: a request body stalls in the gateway's socket
// writes, which proxy.write_timeout bounds.
func stallingH2C(t *testing.T, pause time.Duration) string {
	return testserve.Conns(t, func(c net.Conn) {
		defer c.Close()
		preface := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(c, preface); err != nil {
			return
		}
		fr := http2.NewFramer(c, c)
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30}, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20})
		_ = fr.WriteWindowUpdate(0, 1<<30-65535)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.HeadersFrame:
				time.Sleep(pause)
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck()
				}
			case *http2.DataFrame:
				if f.StreamEnded() {
					var hb bytes.Buffer
					_ = hpack.NewEncoder(&hb).WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
					_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: true})
				}
			}
		}
	})
}

// TestReloadWriteTimeoutReachesH2CPools: proxy.write_timeout bounds a
// stalled write to an h2c upstream too, from the first request after a
// reload that changes only it (the data plane's HTTP/2 upstream transports
// are built with it, and are replaced), and the reload names nothing.
// Before, the 300ms reloaded was silently ignored (the request waited the
// 2s stall out and got 200) while a gateway started with it answered 504.
func TestReloadWriteTimeoutReachesH2CPools(t *testing.T) {
	fx := &fixture{echo: map[string]*echo{}}
	fx.set("h2c", stallingH2C(t, 2*time.Second))
	up := `{instances: [{addr: "{{h2c}}"}], protocol: h2c}`
	e := start(t, fx.fill(echoCfg(up, "")), "")
	post := func() string { return e.postLong("/") }
	if got := post(); got != "200" {
		t.Fatalf("with the default write_timeout (60s) a 2s stall: %s, want 200", got)
	}
	if err := e.reload(fx.fill(echoCfg(up, "proxy: {write_timeout: 300ms}"))); err != nil {
		t.Fatal(err)
	}
	if got := post(); got == "200" {
		t.Errorf("after a reload to write_timeout 300ms, a 2s stall toward an h2c pool still got 200")
	}
	if rr := e.gw.Status().RestartRequired; len(rr) != 0 {
		t.Errorf("write_timeout applies live, yet restart_required is %v", rr)
	}
	// Back to the value the transports run with: nothing waits.
	if err := e.reload(fx.fill(echoCfg(up, ""))); err != nil {
		t.Fatal(err)
	}
	if rr := e.gw.Status().RestartRequired; len(rr) != 0 {
		t.Errorf("back to the running write_timeout: restart_required %v", rr)
	}
}

// TestReloadDefaultWrittenOutNeedsNoRestart: writing out the default of the
// listener setting that needs a restart (max_header_bytes) changes nothing
// that runs, so the reload names nothing; another value is named. The
// client timeouts written with it apply live and are never named.
func TestReloadDefaultWrittenOutNeedsNoRestart(t *testing.T) {
	e := start(t, baseConfig, "")
	if err := e.reload(baseConfig + "proxy: {read_header_timeout: 10s, client_idle_timeout: 75s, max_header_bytes: 16384}\n"); err != nil {
		t.Fatal(err)
	}
	if st := e.gw.Status(); len(st.RestartRequired) != 0 || st.LastResult != "ok" {
		t.Errorf("the defaults written out: restart_required %v, last_reload_result %q; want none", st.RestartRequired, st.LastResult)
	}
	if err := e.reload(baseConfig + "proxy: {read_header_timeout: 11s, client_idle_timeout: 70s, max_header_bytes: 8192}\n"); err != nil {
		t.Fatal(err)
	}
	if rr := e.gw.Status().RestartRequired; !slices.Equal(rr, []string{"proxy.max_header_bytes"}) {
		t.Errorf("other values of all three: restart_required %v, want [proxy.max_header_bytes]", rr)
	}
}
