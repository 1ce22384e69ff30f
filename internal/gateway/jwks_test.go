package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestJWKSURLThroughGateway takes identities from tokens verified against
// a JWKS served over HTTPS, through the data plane, and rotates the key:
// a token signed with the new key routes by its identity within the
// refresh bound, and one signed with the old key still does while the set
// holds it.
func TestJWKSURLThroughGateway(t *testing.T) {
	k1, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	k2, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	jwk := func(kid string, k *ecdsa.PrivateKey) map[string]string {
		b, _ := k.PublicKey.Bytes()
		enc := base64.RawURLEncoding.EncodeToString
		return map[string]string{"kty": "EC", "crv": "P-256", "kid": kid, "x": enc(b[1:33]), "y": enc(b[33:])}
	}
	var set atomic.Pointer[[]byte]
	serve := func(keys ...map[string]string) {
		b, _ := json.Marshal(map[string]any{"keys": keys})
		set.Store(&b)
	}
	serve(jwk("k1", k1))
	idp := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(*set.Load()) }))
	defer idp.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: idp.Certificate().Raw}), 0o600)
	e := start(t, baseConfig+fmt.Sprintf(`
identity: {jwt: only, anonymous: ip}
targeting:
  tags:
    jwt: {jwks_url: %q, jwks_ca_file: %q, jwks_refresh_interval: 1m, jwks_min_refresh_interval: 1s}
`, idp.URL+"/.well-known/jwks.json", ca), "")
	e.mustPut("vip", map[string]any{"type": "gray", "gray_percent": 0, "white_list": []string{"uid:alice"}, "targets": grayRule(1).Targets})
	token := func(kid string, key *ecdsa.PrivateKey) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()})
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	group := func(tok string) string {
		a, err := e.get("/", "Authorization", "Bearer "+tok)
		if err != nil {
			t.Fatal(err)
		}
		return a.group
	}
	if g := group(token("k1", k1)); g != "gray" {
		t.Fatalf("a token of the first key: group %q, want gray", g)
	}
	serve(jwk("k1", k1), jwk("k2", k2))
	rotated := token("k2", k2)
	first := time.Now()
	for group(rotated) != "gray" {
		if time.Since(first) > 10*time.Second {
			t.Fatal("a token of the rotated key never routed by its identity")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the rotated key was accepted %v after its first token (jwks_min_refresh_interval 1s)", time.Since(first).Round(time.Millisecond))
	if g := group(token("k1", k1)); g != "gray" {
		t.Errorf("the old key while the set still holds it: group %q, want gray", g)
	}
}
