package tags

import (
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// jwksServer is an identity provider's jwks_uri over HTTPS. Its answer can
// be replaced (a key rotation) or made to fail (an outage).
type jwksServer struct {
	*httptest.Server
	body    atomic.Pointer[[]byte] // nil: answer 503
	fetches atomic.Int64
}

func startJWKS(t *testing.T, keys ...map[string]string) *jwksServer {
	t.Helper()
	s := &jwksServer{}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		b := s.body.Load()
		if b == nil {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Write(*b)
	}))
	t.Cleanup(s.Close)
	s.serve(t, keys...)
	return s
}

func (s *jwksServer) serve(t *testing.T, keys ...map[string]string) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	s.body.Store(&b)
}

func (s *jwksServer) serveRaw(b string) { raw := []byte(b); s.body.Store(&raw) }

func (s *jwksServer) down() { s.body.Store(nil) }

// caFile writes the server's certificate as a PEM CA bundle.
func (s *jwksServer) caFile(t *testing.T) string {
	return writeFile(t, "ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw}))
}

// eventuallyVerifies polls Verify until it accepts tok (a fetch runs in the
// background) or the deadline passes.
func eventuallyVerifies(t *testing.T, j *JWT, tok, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := j.Verify(tok)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still refused: %v", what, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// idle waits until no fetch is in flight.
func idle(t *testing.T, j *JWT) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		j.remote.mu.Lock()
		busy := j.remote.fetching
		j.remote.mu.Unlock()
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a JWKS fetch never finished")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestJWKSURLRotation serves a real JWKS over HTTPS (verified against a CA
// file) and rotates its key: a token signed with the new key is accepted
// within jwks_min_refresh_interval of its first use, the old key keeps
// working until the set drops it (and a periodic refresh sees that), an
// unknown kid causes at most one fetch per interval, and while the
// endpoint is down or answers garbage the last good set keeps verifying.
func TestJWKSURLRotation(t *testing.T) {
	k := keysOnce()
	srv := startJWKS(t, rsaJWK("k1", &k.rsa.PublicKey))
	clk := &fakeClock{t: testNow}
	j, err := NewJWTWith(JWTConfig{
		JWKSURL: srv.URL + "/.well-known/jwks.json", JWKSCAFile: srv.caFile(t),
		JWKSRefreshInterval: Duration(5 * time.Minute), JWKSMinRefreshInterval: Duration(30 * time.Second),
	}, JWTOptions{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	old := sign(t, tokenSpec{jwt.SigningMethodRS256, k.rsa, "k1", claims()})
	rotated := sign(t, tokenSpec{jwt.SigningMethodES256, k.ec, "k2", claims()})
	if _, err := j.Verify(old); err != nil {
		t.Fatalf("the first key: %v", err)
	}
	if n := srv.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches at start, want 1", n)
	}

	// The provider rotates: the set now holds the old key and the new one.
	srv.serve(t, rsaJWK("k1", &k.rsa.PublicKey), ecJWK("k2", &k.ec.PublicKey))
	for range 50 {
		if _, err := j.Verify(rotated); !errors.Is(err, ErrUnknownKID) {
			t.Fatalf("the new key before a refresh may happen: %v, want ErrUnknownKID", err)
		}
	}
	idle(t, j)
	if n := srv.fetches.Load(); n != 1 {
		t.Errorf("50 unknown kids within jwks_min_refresh_interval caused %d fetches, want none", n-1)
	}
	clk.advance(30 * time.Second)
	eventuallyVerifies(t, j, rotated, "a token signed with the rotated key, jwks_min_refresh_interval after its first use")
	idle(t, j)
	if n := srv.fetches.Load(); n != 2 {
		t.Errorf("%d fetches after the rotation, want 2", n)
	}
	if _, err := j.Verify(old); err != nil {
		t.Errorf("the old key while the set still holds it: %v", err)
	}

	// The provider removes the old key: refused after the next refresh.
	srv.serve(t, ecJWK("k2", &k.ec.PublicKey))
	if _, err := j.Verify(old); err != nil {
		t.Errorf("the old key before the set is fetched again: %v", err)
	}
	clk.advance(5 * time.Minute)
	j.Verify(rotated) // the periodic refresh is due; this starts it
	idle(t, j)
	if _, err := j.Verify(old); !errors.Is(err, ErrUnknownKID) {
		t.Errorf("the removed key after a refresh: %v, want ErrUnknownKID", err)
	}

	// The endpoint goes down, then answers garbage, then is gone: the last
	// good set keeps verifying.
	for _, outage := range []struct {
		name string
		cut  func()
	}{
		{"503", srv.down},
		{"garbage", func() { srv.serveRaw(`{"keys": "not a list"}`) }},
		{"no signing keys", func() { srv.serveRaw(`{"keys": []}`) }},
		{"closed", srv.Close},
	} {
		outage.cut()
		before := srv.fetches.Load()
		clk.advance(5 * time.Minute)
		if _, err := j.Verify(rotated); err != nil {
			t.Errorf("%s: %v", outage.name, err)
		}
		idle(t, j)
		if outage.name != "closed" && srv.fetches.Load() != before+1 {
			t.Errorf("%s: the refresh did not happen", outage.name)
		}
		if _, err := j.Verify(rotated); err != nil {
			t.Errorf("%s: the last good set was dropped: %v", outage.name, err)
		}
	}
}

// TestJWKSURLDownAtStart: a gateway starts while the identity provider is
// down; tokens are refused until the set arrives, which the next
// unknown-kid token after jwks_min_refresh_interval fetches.
func TestJWKSURLDownAtStart(t *testing.T) {
	k := keysOnce()
	srv := startJWKS(t)
	srv.down()
	clk := &fakeClock{t: testNow}
	j, err := NewJWTWith(JWTConfig{JWKSURL: srv.URL + "/jwks", JWKSMinRefreshInterval: Duration(10 * time.Second)},
		JWTOptions{Now: clk.now, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatalf("NewJWT with the endpoint down = %v, want it to start", err)
	}
	defer j.Close()
	tok := sign(t, tokenSpec{jwt.SigningMethodRS256, k.rsa, "k1", claims()})
	if _, err := j.Verify(tok); !errors.Is(err, ErrUnknownKID) {
		t.Fatalf("with no key set: %v, want ErrUnknownKID", err)
	}
	srv.serve(t, rsaJWK("k1", &k.rsa.PublicKey))
	clk.advance(10 * time.Second)
	eventuallyVerifies(t, j, tok, "a token once the endpoint is back")
	if got := j.Methods(); strings.Join(got, ",") != "ES256,RS256" {
		t.Errorf("Methods() = %v: a rotation may bring either kind of key", got)
	}
	if _, err := j.Verify(sign(t, tokenSpec{jwt.SigningMethodRS256, k.rsa, "", claims()})); !errors.Is(err, ErrMissingKID) {
		t.Errorf("a token without kid: %v, want ErrMissingKID", err)
	}
}

// TestJWKSURLTimeout: a fetch that gets no answer is cut at jwks_timeout.
func TestJWKSURLTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	start := time.Now()
	j, err := NewJWTWith(JWTConfig{JWKSURL: srv.URL, JWKSTimeout: Duration(200 * time.Millisecond)}, JWTOptions{HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("NewJWT waited %v for a silent endpoint, want about jwks_timeout", took)
	}
}

// FuzzParseJWKS: a key set from the network never panics the parser, and
// what it accepts has a kid and a supported algorithm for every key.
func FuzzParseJWKS(f *testing.F) {
	k := keysOnce()
	for _, keys := range [][]map[string]string{{rsaJWK("a", &k.rsa.PublicKey)}, {ecJWK("b", &k.ec.PublicKey), rsaJWK("c", &k.rsa2.PublicKey)}} {
		b, _ := json.Marshal(map[string]any{"keys": keys})
		f.Add(b)
	}
	f.Add([]byte(`{"keys":[{"kty":"EC","crv":"P-256","kid":"x","x":"AAAA","y":"AAAA"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"RSA","kid":"r","n":"AQAB","e":"AQAB"}]}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := parseJWKS(b)
		if err != nil {
			return
		}
		for kid, key := range keys {
			if kid == "" || (key.alg != "RS256" && key.alg != "ES256") || key.key == nil {
				t.Fatalf("parseJWKS accepted kid %q with %+v", kid, key)
			}
		}
	})
}
