package tags

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/graygate/graygate/internal/attr"
)

// Reasons a token is refused. Verify wraps one of them, so callers can count
// refusals by reason with errors.Is.
var (
	ErrNoToken    = errors.New("jwt: no token")
	ErrMalformed  = errors.New("jwt: malformed token")
	ErrAlgorithm  = errors.New("jwt: algorithm not accepted")
	ErrUnknownKID = errors.New("jwt: unknown kid")
	ErrMissingKID = errors.New("jwt: token has no kid")
	ErrSignature  = errors.New("jwt: bad signature")
	ErrExpired    = errors.New("jwt: token expired")
	ErrClaims     = errors.New("jwt: invalid claims")
)

// MaxTokenLen bounds the tokens Verify will parse: anything longer is refused
// before base64 or JSON decoding runs.
const MaxTokenLen = 8192

// minSecretLen is the HS256 key size that RFC 7518 §3.2 requires: at least
// the 256-bit hash output.
const minSecretLen = 32

// minRSABits refuses keys weaker than NIST SP 800-131A allows.
const minRSABits = 2048

// Claims is what a verified token says about the user.
type Claims struct {
	// Subject is the sub claim.
	Subject string
	// Identity is the configured identity claim (sub by default), a string or
	// a number written as in the token.
	Identity string
	// Tags holds the tag claims; nil when there are none.
	Tags Set
	// Phone is the configured phone claim, if any.
	Phone string
	// Expires is the exp claim.
	Expires time.Time
}

// JWT verifies tokens against the configured keys. It is safe for
// concurrent use.
type JWT struct {
	header   string
	bearer   bool
	cookie   string
	identity string
	tagsKey  string
	phone    string

	secret  []byte            // HS256
	pemKey  any               // *rsa.PublicKey or *ecdsa.PublicKey, for tokens without kid
	pemAlg  string            // RS256 or ES256
	kids    map[string]jwkKey // from the JWKS file
	remote  *remoteKeys       // from jwks_url; nil without
	methods []string          // exactly the algorithms the keys above verify
	parser  *jwt.Parser
	now     func() time.Time
}

// JWTOptions are the parts of a verifier that are not configuration.
type JWTOptions struct {
	// Now is the clock for expiry and JWKS refreshes (default time.Now).
	Now func() time.Time
	// HTTPClient fetches jwks_url (default: a client of its own with
	// jwks_timeout and jwks_ca_file's CAs).
	HTTPClient *http.Client
	// Logger receives JWKS fetch failures (default: discard).
	Logger *slog.Logger
}

type jwkKey struct {
	alg string
	key any
}

// NewJWT loads the keys that cfg names. It fails if a key is missing, weak or
// of an unsupported kind, so a bad deployment stops at startup rather than
// refusing every token. A jwks_url is fetched once before NewJWT returns;
// if the endpoint does not answer, NewJWT still succeeds (see remoteKeys).
func NewJWT(cfg JWTConfig) (*JWT, error) { return NewJWTWith(cfg, JWTOptions{}) }

// NewJWTWith is NewJWT with a clock, an HTTP client and a logger.
func NewJWTWith(cfg JWTConfig, opts JWTOptions) (*JWT, error) {
	c := Config{JWT: &cfg}
	c.Defaults()
	if err := c.Validate("jwt"); err != nil {
		return nil, err
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	j := &JWT{
		header:   cfg.Header,
		bearer:   strings.EqualFold(cfg.Header, "Authorization"),
		cookie:   cfg.Cookie,
		identity: cfg.IdentityClaim,
		tagsKey:  cfg.TagsClaim,
		phone:    cfg.PhoneClaim,
		now:      opts.Now,
	}
	switch {
	case cfg.HS256SecretEnv != "":
		s := os.Getenv(cfg.HS256SecretEnv)
		if s == "" {
			return nil, fmt.Errorf("jwt: environment variable %s (hs256_secret_env) is empty or unset", cfg.HS256SecretEnv)
		}
		j.secret = []byte(s)
	case cfg.HS256SecretFile != "":
		b, err := os.ReadFile(cfg.HS256SecretFile)
		if err != nil {
			return nil, fmt.Errorf("jwt: read hs256_secret_file: %w", err)
		}
		b = bytes.TrimSuffix(b, []byte("\n"))
		j.secret = bytes.TrimSuffix(b, []byte("\r"))
	}
	if j.secret != nil {
		if len(j.secret) < minSecretLen {
			return nil, fmt.Errorf("jwt: HS256 secret is %d bytes; RFC 7518 §3.2 requires at least %d", len(j.secret), minSecretLen)
		}
		j.methods = append(j.methods, "HS256")
	}
	if cfg.PublicKeyFile != "" {
		b, err := os.ReadFile(cfg.PublicKeyFile)
		if err != nil {
			return nil, fmt.Errorf("jwt: read public_key_file: %w", err)
		}
		j.pemKey, j.pemAlg, err = parsePEMKey(b)
		if err != nil {
			return nil, fmt.Errorf("jwt: public_key_file %s: %w", cfg.PublicKeyFile, err)
		}
		j.methods = append(j.methods, j.pemAlg)
	}
	if cfg.JWKSFile != "" {
		b, err := os.ReadFile(cfg.JWKSFile)
		if err != nil {
			return nil, fmt.Errorf("jwt: read jwks_file: %w", err)
		}
		j.kids, err = parseJWKS(b)
		if err != nil {
			return nil, fmt.Errorf("jwt: jwks_file %s: %w", cfg.JWKSFile, err)
		}
		for _, k := range j.kids {
			j.methods = append(j.methods, k.alg)
		}
	}
	if cfg.JWKSURL != "" {
		client := opts.HTTPClient
		if client == nil {
			var err error
			if client, err = jwksClient(cfg.JWKSCAFile, cfg.JWKSTimeout.Std()); err != nil {
				return nil, err
			}
		}
		// The set can rotate to either kind of key; each kid is still
		// held to its own key's algorithm (see key).
		j.methods = append(j.methods, "RS256", "ES256")
		j.remote = newRemoteKeys(cfg, client, func() time.Time { return j.now() }, opts.Logger)
		j.remote.start()
	}
	slices.Sort(j.methods)
	j.methods = slices.Compact(j.methods)

	popts := []jwt.ParserOption{
		jwt.WithValidMethods(j.methods),
		jwt.WithExpirationRequired(),
		jwt.WithJSONNumber(),
		jwt.WithLeeway(cfg.Leeway.Std()),
		jwt.WithTimeFunc(func() time.Time { return j.now() }),
	}
	if cfg.Issuer != "" {
		popts = append(popts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		popts = append(popts, jwt.WithAudience(cfg.Audience))
	}
	j.parser = jwt.NewParser(popts...)
	return j, nil
}

// Methods returns the accepted algorithms, sorted.
func (j *JWT) Methods() []string { return slices.Clone(j.methods) }

// Token finds the token in req: the configured header first (with the
// Bearer scheme for Authorization, where another scheme such as Basic is
// ignored), then the configured cookie.
func (j *JWT) Token(req attr.Request) (string, bool) {
	if j.header != "" {
		if v, ok := req.Header(j.header); ok {
			v = trimOWS(v)
			if j.bearer {
				scheme, tok, ok := strings.Cut(v, " ")
				if ok && strings.EqualFold(scheme, "Bearer") {
					if tok = trimOWS(tok); tok != "" {
						return tok, true
					}
				}
			} else if v != "" {
				return v, true
			}
		}
	}
	if j.cookie != "" {
		if v, ok := req.Cookie(j.cookie); ok && v != "" {
			return v, true
		}
	}
	return "", false
}

// Verify checks the token's algorithm, key, signature, expiry (required) and
// the configured issuer and audience, then reads the claims. An error wraps
// one of the Err* reasons above and the library's detail.
func (j *JWT) Verify(token string) (Claims, error) {
	if token == "" {
		return Claims{}, ErrNoToken
	}
	if len(token) > MaxTokenLen {
		return Claims{}, fmt.Errorf("%w: %d bytes, more than %d", ErrMalformed, len(token), MaxTokenLen)
	}
	if j.remote != nil {
		j.remote.tick(j.now())
	}
	m := jwt.MapClaims{}
	tok, err := j.parser.ParseWithClaims(token, m, j.key)
	if err != nil {
		return Claims{}, j.classify(tok, err)
	}
	return j.claims(m)
}

// key is the jwt.Keyfunc. It hands out a key only for the algorithm that key
// belongs to, so an HS256 token can never be checked against an RSA public
// key used as an HMAC secret (the classic algorithm confusion), even if the
// library's own key type checks were to change.
func (j *JWT) key(t *jwt.Token) (any, error) {
	alg := t.Method.Alg()
	if alg == "HS256" {
		if j.secret == nil {
			return nil, fmt.Errorf("%w: no HS256 secret", ErrAlgorithm)
		}
		return j.secret, nil
	}
	kid, hasKID := t.Header["kid"]
	if hasKID && (j.kids != nil || j.remote != nil) {
		s, ok := kid.(string)
		if !ok {
			return nil, fmt.Errorf("%w: kid is not a string", ErrMalformed)
		}
		k, ok := j.kids[s]
		if !ok && j.remote != nil {
			k, ok = j.remote.lookup(s)
		}
		if !ok {
			return nil, fmt.Errorf("%w %q", ErrUnknownKID, s)
		}
		if k.alg != alg {
			return nil, fmt.Errorf("%w: key %q is for %s, token says %s", ErrAlgorithm, s, k.alg, alg)
		}
		return k.key, nil
	}
	if j.pemKey != nil && j.pemAlg == alg {
		return j.pemKey, nil
	}
	if j.kids != nil || j.remote != nil {
		return nil, ErrMissingKID
	}
	return nil, fmt.Errorf("%w: no %s key", ErrAlgorithm, alg)
}

// Close stops a JWKS fetch in flight, if any. The verifier must not be
// used afterwards.
func (j *JWT) Close() {
	if j.remote != nil {
		j.remote.close()
	}
}

func (j *JWT) classify(tok *jwt.Token, err error) error {
	for _, reason := range []error{ErrUnknownKID, ErrMissingKID, ErrAlgorithm} {
		if errors.Is(err, reason) {
			return fmt.Errorf("%w: %w", reason, err)
		}
	}
	if tok != nil && tok.Header != nil {
		alg, _ := tok.Header["alg"].(string)
		if !slices.Contains(j.methods, alg) {
			return fmt.Errorf("%w: %q (accepted: %s)", ErrAlgorithm, alg, strings.Join(j.methods, ", "))
		}
	}
	var reason error
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		reason = ErrMalformed
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		reason = ErrSignature
	case errors.Is(err, jwt.ErrTokenExpired):
		reason = ErrExpired
	default:
		reason = ErrClaims
	}
	return fmt.Errorf("%w: %w", reason, err)
}

// registered are the RFC 7519 §4.1 claims, never tags.
var registered = map[string]bool{"iss": true, "sub": true, "aud": true, "exp": true, "nbf": true, "iat": true, "jti": true}

func (j *JWT) claims(m jwt.MapClaims) (Claims, error) {
	var c Claims
	c.Subject, _ = m["sub"].(string)
	if exp, err := m.GetExpirationTime(); err == nil && exp != nil {
		c.Expires = exp.Time
	}
	var ok bool
	if v, present := m[j.identity]; present {
		if c.Identity, ok = scalar(v); !ok {
			return Claims{}, fmt.Errorf("%w: identity claim %q is not a string, number or boolean", ErrClaims, j.identity)
		}
	}
	if j.phone != "" {
		if v, present := m[j.phone]; present {
			if c.Phone, ok = scalar(v); !ok {
				return Claims{}, fmt.Errorf("%w: phone claim %q is not a string or number", ErrClaims, j.phone)
			}
		}
	}
	src := map[string]any(m)
	if j.tagsKey != "" {
		v, present := m[j.tagsKey]
		if !present {
			return c, nil
		}
		if src, ok = v.(map[string]any); !ok {
			return Claims{}, fmt.Errorf("%w: tags claim %q is not an object", ErrClaims, j.tagsKey)
		}
	}
	for k, v := range src {
		if j.tagsKey == "" && (registered[k] || k == j.identity || k == j.phone) {
			continue
		}
		s, ok := scalar(v)
		if !ok || !ValidKey(k) || len(s) > MaxValueLen || len(c.Tags) == MaxTags {
			continue // scopes, nested objects, namespaced claim URLs: not tags
		}
		if c.Tags == nil {
			c.Tags = make(Set)
		}
		c.Tags[k] = s
	}
	return c, nil
}

// scalar writes a JSON string, number or boolean as a tag value; numbers
// keep the token's text (jwt.WithJSONNumber), so a 19-digit user id is not
// rounded through float64.
func scalar(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	case bool:
		return strconv.FormatBool(x), true
	}
	return "", false
}

// parsePEMKey reads the first PEM block: a PKIX or PKCS#1 public key or an
// X.509 certificate, RSA (RS256) or P-256 EC (ES256).
func parsePEMKey(b []byte) (any, string, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, "", errors.New("no PEM block")
	}
	var key any
	var err error
	switch block.Type {
	case "PUBLIC KEY":
		key, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		key, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			key = cert.PublicKey
		}
	default:
		return nil, "", fmt.Errorf("PEM block %q: want PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE (never a private key)", block.Type)
	}
	if err != nil {
		return nil, "", err
	}
	alg, err := algFor(key)
	return key, alg, err
}

func algFor(key any) (string, error) {
	switch k := key.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return "", fmt.Errorf("RSA key of %d bits, less than %d", k.N.BitLen(), minRSABits)
		}
		return "RS256", nil
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return "", fmt.Errorf("EC key on %s: only P-256 (ES256) is supported", k.Curve.Params().Name)
		}
		return "ES256", nil
	}
	return "", fmt.Errorf("%T keys are not supported: use RSA (RS256) or P-256 EC (ES256)", key)
}
