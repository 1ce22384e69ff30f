package tags

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
)

// jwk is the part of an RFC 7517 JSON Web Key this package reads.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// parseJWKS reads a key set into kid → key. Keys marked for encryption
// ("use": "enc") are skipped; every signing key must have a unique kid and
// be RSA (RS256) or P-256 EC (ES256), and a wrong or unsupported key is an
// error rather than silently dropped, so "unknown kid" at request time
// always means the token names a key that is not in the file.
func parseJWKS(b []byte) (map[string]jwkKey, error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("decode JWKS: %w", err)
	}
	out := make(map[string]jwkKey, len(set.Keys))
	for i, k := range set.Keys {
		if k.Use == "enc" {
			continue
		}
		key, err := k.publicKey()
		if err == nil && k.Kid == "" {
			err = errors.New("no kid")
		}
		if err == nil {
			if _, dup := out[k.Kid]; dup {
				err = errors.New("kid used twice")
			}
		}
		var alg string
		if err == nil {
			alg, err = algFor(key)
		}
		if err == nil && k.Alg != "" && k.Alg != alg {
			err = fmt.Errorf("alg %q is not supported for this key (want %s)", k.Alg, alg)
		}
		if err != nil {
			return nil, fmt.Errorf("keys[%d] (kid %q): %w", i, k.Kid, err)
		}
		out[k.Kid] = jwkKey{alg: alg, key: key}
	}
	if len(out) == 0 {
		return nil, errors.New("no signing keys")
	}
	return out, nil
}

func (k *jwk) publicKey() (any, error) {
	switch k.Kty {
	case "RSA":
		n, err := b64Int(k.N)
		if err != nil {
			return nil, fmt.Errorf("n: %w", err)
		}
		e, err := b64Int(k.E)
		if err != nil {
			return nil, fmt.Errorf("e: %w", err)
		}
		if !e.IsInt64() || e.Int64() < 3 || e.Int64() > 1<<31-1 || e.Bit(0) == 0 {
			return nil, errors.New("e: not a usable RSA exponent")
		}
		return &rsa.PublicKey{N: n, E: int(e.Int64())}, nil
	case "EC":
		if k.Crv != "P-256" {
			return nil, fmt.Errorf("crv %q: only P-256 (ES256) is supported", k.Crv)
		}
		x, err := base64.RawURLEncoding.DecodeString(k.X)
		if err != nil || len(x) != 32 {
			return nil, errors.New("x: want 32 bytes of base64url")
		}
		y, err := base64.RawURLEncoding.DecodeString(k.Y)
		if err != nil || len(y) != 32 {
			return nil, errors.New("y: want 32 bytes of base64url")
		}
		// ParseUncompressedPublicKey checks that the point is on the curve.
		return ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
	case "":
		return nil, errors.New("no kty")
	}
	return nil, fmt.Errorf("kty %q is not supported: use RSA or EC", k.Kty)
}

func b64Int(s string) (*big.Int, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, errors.New("empty")
	}
	return new(big.Int).SetBytes(b), nil
}
