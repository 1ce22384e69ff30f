package tags

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"maps"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/graygate/graygate/internal/attr"
)

// testKeys are generated once per test binary: RSA generation is slow under
// the race detector.
type testKeys struct {
	secret      []byte
	rsa, rsa2   *rsa.PrivateKey
	ec, ec2     *ecdsa.PrivateKey
	rsaPubPEM   []byte
	ecPubPEM    []byte
	rsaPKCS1PEM []byte
}

var keysOnce = sync.OnceValue(func() *testKeys {
	k := &testKeys{secret: []byte("0123456789abcdef0123456789abcdef")}
	var err error
	must := func(e error) {
		if e != nil {
			panic(e)
		}
	}
	k.rsa, err = rsa.GenerateKey(rand.Reader, 2048)
	must(err)
	k.rsa2, err = rsa.GenerateKey(rand.Reader, 2048)
	must(err)
	k.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	k.ec2, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	k.rsaPubPEM = pemPublic(k.rsa.Public())
	k.ecPubPEM = pemPublic(k.ec.Public())
	k.rsaPKCS1PEM = pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&k.rsa.PublicKey)})
	return k
})

func pemPublic(pub any) []byte {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func rsaJWK(kid string, k *rsa.PublicKey) map[string]string {
	return map[string]string{"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())}
}

func ecJWK(kid string, k *ecdsa.PublicKey) map[string]string {
	b, err := k.Bytes()
	if err != nil {
		panic(err)
	}
	return map[string]string{"kty": "EC", "kid": kid, "crv": "P-256", "x": b64(b[1:33]), "y": b64(b[33:])}
}

func jwksFile(t *testing.T, keys ...map[string]string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "jwks.json", b)
}

// testNow is the verifiers' clock, so expiry cases do not depend on when the
// test runs.
var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newTestJWT(t *testing.T, cfg JWTConfig) *JWT {
	t.Helper()
	j, err := NewJWT(cfg)
	if err != nil {
		t.Fatalf("NewJWT(%+v) = %v", cfg, err)
	}
	j.now = func() time.Time { return testNow }
	return j
}

type tokenSpec struct {
	method jwt.SigningMethod
	key    any
	kid    string
	claims jwt.MapClaims
}

func sign(t *testing.T, s tokenSpec) string {
	t.Helper()
	tok := jwt.NewWithClaims(s.method, s.claims)
	if s.kid != "" {
		tok.Header["kid"] = s.kid
	}
	out, err := tok.SignedString(s.key)
	if err != nil {
		t.Fatalf("sign %s: %v", s.method.Alg(), err)
	}
	return out
}

func claims(extra ...any) jwt.MapClaims {
	c := jwt.MapClaims{"sub": "u-42", "iat": testNow.Add(-time.Minute).Unix(), "exp": testNow.Add(time.Hour).Unix(), "vip": true}
	for i := 0; i+1 < len(extra); i += 2 {
		k := extra[i].(string)
		if extra[i+1] == nil {
			delete(c, k)
			continue
		}
		c[k] = extra[i+1]
	}
	return c
}

func TestJWTVerify(t *testing.T) {
	k := keysOnce()
	t.Setenv("GG_TEST_HS256", string(k.secret))
	hs := newTestJWT(t, JWTConfig{HS256SecretEnv: "GG_TEST_HS256"})
	hsFile := newTestJWT(t, JWTConfig{HS256SecretFile: writeFile(t, "secret", append(slicesClone(k.secret), '\n'))})
	rs := newTestJWT(t, JWTConfig{PublicKeyFile: writeFile(t, "rsa.pem", k.rsaPubPEM)})
	rsPKCS1 := newTestJWT(t, JWTConfig{PublicKeyFile: writeFile(t, "rsa1.pem", k.rsaPKCS1PEM)})
	es := newTestJWT(t, JWTConfig{PublicKeyFile: writeFile(t, "ec.pem", k.ecPubPEM), Issuer: "idp", Audience: "graygate"})
	set := newTestJWT(t, JWTConfig{JWKSFile: jwksFile(t, rsaJWK("r1", &k.rsa.PublicKey), ecJWK("e1", &k.ec.PublicKey),
		map[string]string{"kty": "RSA", "use": "enc", "kid": "enc1"})})
	mixed := newTestJWT(t, JWTConfig{HS256SecretEnv: "GG_TEST_HS256", PublicKeyFile: writeFile(t, "rsa.pem", k.rsaPubPEM)})
	lenient := newTestJWT(t, JWTConfig{HS256SecretEnv: "GG_TEST_HS256", Leeway: Duration(30 * time.Second)})

	hsTok := func(c jwt.MapClaims) string { return sign(t, tokenSpec{jwt.SigningMethodHS256, k.secret, "", c}) }
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims()).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		v       *JWT
		token   string
		wantErr error
		wantID  string
	}{
		{name: "HS256 env secret", v: hs, token: hsTok(claims()), wantID: "u-42"},
		{name: "HS256 file secret", v: hsFile, token: hsTok(claims()), wantID: "u-42"},
		{name: "RS256 PKIX key", v: rs, token: sign(t, tokenSpec{jwt.SigningMethodRS256, k.rsa, "", claims()}), wantID: "u-42"},
		{name: "RS256 PKCS1 key", v: rsPKCS1, token: sign(t, tokenSpec{jwt.SigningMethodRS256, k.rsa, "", claims()}), wantID: "u-42"},
		{name: "RS256 kid without JWKS uses the PEM key", v: rs, token: sign(t, tokenSpec{jwt.SigningMethodRS256, k.rsa, "any", claims()}), wantID: "u-42"},
		{name: "ES256 with issuer and audience", v: es, token: sign(t, tokenSpec{jwt.SigningMethodES256, k.ec, "", claims("iss", "idp", "aud", "graygate")}), wantID: "u-42"},
		{name: "JWKS RS256", v: set, token: sign(t, tokenSpec{jwt.SigningMethodRS256, k.rsa, "r1", claims()}), wantID: "u-42"},
		{name: "JWKS ES256", v: set, token: sign(t, tokenSpec{jwt.SigningMethodES256, k.ec, "e1", claims()}), wantID: "u-42"},
		{name: "mixed keys HS256", v: mixed, token: hsTok(claims()), wantID: "u-42"},
		{name: "mixed keys RS256", v: mixed, token: sign(t, tokenSpec{jwt.SigningMethodRS256, k.rsa, "", claims()}), wantID: "u-42"},
		{name: "within leeway", v: lenient, token: hsTok(claims("exp", testNow.Add(-10*time.Second).Unix())), wantID: "u-42"},

		{name: "expired", v: hs, token: hsTok(claims("exp", testNow.Add(-time.Second).Unix())), wantErr: ErrExpired},
		{name: "expired beyond leeway", v: lenient, token: hsTok(claims("exp", testNow.Add(-time.Minute).Unix())), wantErr: ErrExpired},
		{name: "no exp", v: hs, token: hsTok(claims("exp", nil)), wantErr: ErrClaims},
		{name: "not yet valid", v: hs, token: hsTok(claims("nbf", testNow.Add(time.Hour).Unix())), wantErr: ErrClaims},
		{name: "wrong issuer", v: es, token: sign(t, tokenSpec{jwt.SigningMethodES256, k.ec, "", claims("iss", "evil", "aud", "graygate")}), wantErr: ErrClaims},
		{name: "wrong audience", v: es, token: sign(t, tokenSpec{jwt.SigningMethodES256, k.ec, "", claims("iss", "idp", "aud", "other")}), wantErr: ErrClaims},
		{name: "HS256 wrong secret", v: hs, token: sign(t, tokenSpec{jwt.SigningMethodHS256, []byte("another-secret-another-secret-xx"), "", claims()}), wantErr: ErrSignature},
		{name: "RS256 other key", v: rs, token: sign(t, tokenSpec{jwt.SigningMethodRS256, k.rsa2, "", claims()}), wantErr: ErrSignature},
		{name: "ES256 other key", v: es, token: sign(t, tokenSpec{jwt.SigningMethodES256, k.ec2, "", claims("iss", "idp", "aud", "graygate")}), wantErr: ErrSignature},
		{name: "JWKS kid of another key", v: set, token: sign(t, tokenSpec{jwt.SigningMethodRS256, k.rsa2, "r1", claims()}), wantErr: ErrSignature},
		{name: "tampered payload", v: rs, token: tamper(t, sign(t, tokenSpec{jwt.SigningMethodRS256, k.rsa, "", claims()})), wantErr: ErrSignature},
		{name: "alg none", v: hs, token: none, wantErr: ErrAlgorithm},
		{name: "alg none against JWKS", v: set, token: none, wantErr: ErrAlgorithm},
		{name: "HS256 signed with the RSA public key", v: rs, token: sign(t, tokenSpec{jwt.SigningMethodHS256, k.rsaPubPEM, "", claims()}), wantErr: ErrAlgorithm},
		{name: "HS256 signed with the RSA public key, mixed keys", v: mixed, token: sign(t, tokenSpec{jwt.SigningMethodHS256, k.rsaPubPEM, "", claims()}), wantErr: ErrSignature},
		{name: "HS512 not accepted", v: hs, token: sign(t, tokenSpec{jwt.SigningMethodHS512, k.secret, "", claims()}), wantErr: ErrAlgorithm},
		{name: "ES256 token for an RSA verifier", v: rs, token: sign(t, tokenSpec{jwt.SigningMethodES256, k.ec, "", claims()}), wantErr: ErrAlgorithm},
		{name: "PS256 with the right RSA key", v: rs, token: sign(t, tokenSpec{jwt.SigningMethodPS256, k.rsa, "", claims()}), wantErr: ErrAlgorithm},
		{name: "JWKS RS256 token naming the EC key", v: set, token: sign(t, tokenSpec{jwt.SigningMethodRS256, k.rsa, "e1", claims()}), wantErr: ErrAlgorithm},
		{name: "JWKS missing kid", v: set, token: sign(t, tokenSpec{jwt.SigningMethodRS256, k.rsa, "", claims()}), wantErr: ErrMissingKID},
		{name: "JWKS unknown kid", v: set, token: sign(t, tokenSpec{jwt.SigningMethodRS256, k.rsa, "r9", claims()}), wantErr: ErrUnknownKID},
		{name: "JWKS encryption key is not a signing key", v: set, token: sign(t, tokenSpec{jwt.SigningMethodRS256, k.rsa, "enc1", claims()}), wantErr: ErrUnknownKID},
		{name: "garbage", v: hs, token: "not-a-jwt", wantErr: ErrMalformed},
		{name: "bad base64 signature", v: hs, token: b64([]byte(`{"alg":"HS256"}`)) + ".e30.!!", wantErr: ErrMalformed},
		{name: "no alg", v: hs, token: "e30.e30.", wantErr: ErrAlgorithm},
		{name: "too long", v: hs, token: strings.Repeat("a", MaxTokenLen+1), wantErr: ErrMalformed},
		{name: "empty", v: hs, token: "", wantErr: ErrNoToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.v.Verify(tt.token)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Verify() error = %v, want %v", err, tt.wantErr)
				}
				if got.Identity != "" || got.Subject != "" || got.Tags != nil {
					t.Errorf("Verify() refused the token but returned claims %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Verify() error = %v", err)
			}
			if got.Identity != tt.wantID || got.Subject != "u-42" {
				t.Errorf("Verify() identity %q, subject %q; want %q", got.Identity, got.Subject, tt.wantID)
			}
			if !maps.Equal(got.Tags, Set{"vip": "true"}) {
				t.Errorf("Verify() tags = %v, want vip=true", got.Tags)
			}
			if !got.Expires.After(testNow.Add(-time.Minute)) {
				t.Errorf("Verify() expires = %v", got.Expires)
			}
		})
	}
}

// tamper changes the payload but keeps the header and signature.
func tamper(t *testing.T, tok string) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	parts[1] = b64([]byte(`{"sub":"admin","exp":4102444800}`))
	return strings.Join(parts, ".")
}

func slicesClone(b []byte) []byte { return append([]byte(nil), b...) }

func TestJWTClaims(t *testing.T) {
	k := keysOnce()
	t.Setenv("GG_TEST_HS256", string(k.secret))
	tests := []struct {
		name      string
		cfg       JWTConfig
		claims    jwt.MapClaims
		wantID    string
		wantPhone string
		wantTags  Set
		wantErr   error
	}{
		{
			name:   "top-level claims are tags except registered, identity and phone",
			cfg:    JWTConfig{PhoneClaim: "phone"},
			claims: claims("iss", "idp", "jti", "j1", "phone", "13800138000", "region", "bj", "scope", []string{"a"}, "https://example.com/roles", "admin", "profile", map[string]any{"x": 1}, "multi_loan_index", 0.82),
			wantID: "u-42", wantPhone: "13800138000",
			wantTags: Set{"vip": "true", "region": "bj", "multi_loan_index": "0.82"},
		},
		{
			name:     "object tags claim",
			cfg:      JWTConfig{TagsClaim: "tags", IdentityClaim: "uid"},
			claims:   claims("uid", json.Number("12345678901234567890"), "tags", map[string]any{"blacklist_flag": false, "multi_loan_index": 0.82, "nested": map[string]any{}, "bad key": "x"}),
			wantID:   "12345678901234567890",
			wantTags: Set{"blacklist_flag": "false", "multi_loan_index": "0.82"},
		},
		{name: "no tags claim", cfg: JWTConfig{TagsClaim: "tags"}, claims: claims(), wantID: "u-42"},
		{name: "no identity claim", cfg: JWTConfig{IdentityClaim: "uid"}, claims: claims("vip", nil), wantID: ""},
		{name: "tags claim not an object", cfg: JWTConfig{TagsClaim: "tags"}, claims: claims("tags", "vip"), wantErr: ErrClaims},
		{name: "identity claim is an object", cfg: JWTConfig{IdentityClaim: "uid"}, claims: claims("uid", map[string]any{}), wantErr: ErrClaims},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.HS256SecretEnv = "GG_TEST_HS256"
			j := newTestJWT(t, tt.cfg)
			got, err := j.Verify(sign(t, tokenSpec{jwt.SigningMethodHS256, k.secret, "", tt.claims}))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Verify() error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Verify() error = %v", err)
			}
			if got.Identity != tt.wantID || got.Phone != tt.wantPhone || !maps.Equal(got.Tags, tt.wantTags) {
				t.Errorf("Verify() = identity %q phone %q tags %v; want %q %q %v", got.Identity, got.Phone, got.Tags, tt.wantID, tt.wantPhone, tt.wantTags)
			}
		})
	}
}

func TestJWTToken(t *testing.T) {
	t.Setenv("GG_TEST_HS256", string(keysOnce().secret))
	auth := newTestJWT(t, JWTConfig{HS256SecretEnv: "GG_TEST_HS256", Cookie: "gg_jwt", Header: "Authorization"})
	custom := newTestJWT(t, JWTConfig{HS256SecretEnv: "GG_TEST_HS256", Header: "X-Token"})
	cookieOnly := newTestJWT(t, JWTConfig{HS256SecretEnv: "GG_TEST_HS256", Cookie: "gg_jwt"})
	tests := []struct {
		name    string
		j       *JWT
		headers map[string]string
		cookies map[string]string
		want    string
	}{
		{name: "bearer", j: auth, headers: map[string]string{"authorization": "Bearer abc"}, want: "abc"},
		{name: "bearer any case and spaces", j: auth, headers: map[string]string{"Authorization": " bearer  abc "}, want: "abc"},
		{name: "basic falls back to cookie", j: auth, headers: map[string]string{"Authorization": "Basic dXNlcg=="}, cookies: map[string]string{"gg_jwt": "ck"}, want: "ck"},
		{name: "bearer without token", j: auth, headers: map[string]string{"Authorization": "Bearer "}},
		{name: "header wins over cookie", j: auth, headers: map[string]string{"Authorization": "Bearer h"}, cookies: map[string]string{"gg_jwt": "ck"}, want: "h"},
		{name: "custom header is the bare token", j: custom, headers: map[string]string{"X-Token": "abc"}, want: "abc"},
		{name: "custom header ignores authorization", j: custom, headers: map[string]string{"Authorization": "Bearer abc"}},
		{name: "cookie only", j: cookieOnly, headers: map[string]string{"Authorization": "Bearer abc"}, cookies: map[string]string{"gg_jwt": "ck"}, want: "ck"},
		{name: "nothing", j: auth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.j.Token(&attr.Map{Headers: tt.headers, Cookies: tt.cookies})
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("Token() = %q, %v; want %q", got, ok, tt.want)
			}
		})
	}
}

func TestNewJWTErrors(t *testing.T) {
	k := keysOnce()
	t.Setenv("GG_TEST_SHORT", "short")
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(k.rsa)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  JWTConfig
		want string
	}{
		{name: "no key", cfg: JWTConfig{}, want: "no key"},
		{name: "unset env", cfg: JWTConfig{HS256SecretEnv: "GG_TEST_UNSET_VARIABLE"}, want: "empty or unset"},
		{name: "short secret", cfg: JWTConfig{HS256SecretEnv: "GG_TEST_SHORT"}, want: "at least 32"},
		{name: "missing file", cfg: JWTConfig{PublicKeyFile: filepath.Join(t.TempDir(), "nope.pem")}, want: "no such file"},
		{name: "not PEM", cfg: JWTConfig{PublicKeyFile: writeFile(t, "x.pem", []byte("hello"))}, want: "no PEM block"},
		{name: "private key", cfg: JWTConfig{PublicKeyFile: writeFile(t, "p.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}))}, want: "never a private key"},
		{name: "weak RSA", cfg: JWTConfig{PublicKeyFile: writeFile(t, "w.pem", pemPublic(weak.Public()))}, want: "1024 bits"},
		{name: "P-384", cfg: JWTConfig{PublicKeyFile: writeFile(t, "e.pem", pemPublic(p384.Public()))}, want: "only P-256"},
		{name: "JWKS not JSON", cfg: JWTConfig{JWKSFile: writeFile(t, "j.json", []byte("{"))}, want: "decode JWKS"},
		{name: "JWKS empty", cfg: JWTConfig{JWKSFile: jwksFile(t)}, want: "no signing keys"},
		{name: "JWKS no kid", cfg: JWTConfig{JWKSFile: jwksFile(t, rsaJWK("", &k.rsa.PublicKey))}, want: "no kid"},
		{name: "JWKS duplicate kid", cfg: JWTConfig{JWKSFile: jwksFile(t, rsaJWK("a", &k.rsa.PublicKey), ecJWK("a", &k.ec.PublicKey))}, want: "kid used twice"},
		{name: "JWKS alg mismatch", cfg: JWTConfig{JWKSFile: jwksFile(t, func() map[string]string { m := rsaJWK("a", &k.rsa.PublicKey); m["alg"] = "RS512"; return m }())}, want: `alg "RS512"`},
		{name: "JWKS oct key", cfg: JWTConfig{JWKSFile: jwksFile(t, map[string]string{"kty": "oct", "kid": "s", "k": "c2VjcmV0"})}, want: `kty "oct"`},
		{name: "JWKS point not on curve", cfg: JWTConfig{JWKSFile: jwksFile(t, map[string]string{"kty": "EC", "kid": "e", "crv": "P-256", "x": b64(make([]byte, 32)), "y": b64(make([]byte, 32))})}, want: "keys[0]"},
		{name: "JWKS weak RSA", cfg: JWTConfig{JWKSFile: jwksFile(t, rsaJWK("w", &weak.PublicKey))}, want: "1024 bits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := NewJWT(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewJWT() = %v, %v; want error containing %q", j, err, tt.want)
			}
		})
	}
}

func TestJWTMethods(t *testing.T) {
	k := keysOnce()
	t.Setenv("GG_TEST_HS256", string(k.secret))
	j := newTestJWT(t, JWTConfig{HS256SecretEnv: "GG_TEST_HS256", JWKSFile: jwksFile(t, rsaJWK("r", &k.rsa.PublicKey), ecJWK("e", &k.ec.PublicKey))})
	if got := strings.Join(j.Methods(), ","); got != "ES256,HS256,RS256" {
		t.Errorf("Methods() = %s, want ES256,HS256,RS256", got)
	}
}

// FuzzVerify: a token is outside input. Verify never panics, and it either
// refuses a token for one of its reasons or returns claims of a token that
// has not expired; the identity it returns is never over the claim text.
func FuzzVerify(f *testing.F) {
	k := keysOnce()
	f.Setenv("GG_TEST_HS256", string(k.secret))
	pem := filepath.Join(f.TempDir(), "rsa.pem")
	if err := os.WriteFile(pem, k.rsaPubPEM, 0o600); err != nil {
		f.Fatal(err)
	}
	j, err := NewJWT(JWTConfig{HS256SecretEnv: "GG_TEST_HS256", PublicKeyFile: pem})
	if err != nil {
		f.Fatal(err)
	}
	j.now = func() time.Time { return testNow }
	hs := func(c jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(k.secret)
		if err != nil {
			f.Fatal(err)
		}
		return s
	}
	f.Add(hs(claims()))
	f.Add(hs(claims("sub", 42, "exp", testNow.Add(-time.Hour).Unix())))
	f.Add(hs(claims("tags", map[string]any{"a": []any{1}}, "nbf", "x")))
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiI0MiIsImV4cCI6OTk5OTk5OTk5OX0.")
	f.Add("a.b.c")
	f.Add("..")
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := j.Verify(tok)
		if err != nil {
			for _, reason := range []error{ErrNoToken, ErrMalformed, ErrAlgorithm, ErrUnknownKID, ErrMissingKID, ErrSignature, ErrExpired, ErrClaims} {
				if errors.Is(err, reason) {
					return
				}
			}
			t.Fatalf("Verify(%q) = %v: not one of the refusal reasons", tok, err)
		}
		if !c.Expires.After(testNow) {
			t.Fatalf("Verify(%q) accepted a token expiring at %v (now %v)", tok, c.Expires, testNow)
		}
		if len(c.Identity) > len(tok) {
			t.Fatalf("Verify(%q) = identity of %d bytes", tok, len(c.Identity))
		}
	})
}
