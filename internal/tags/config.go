package tags

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/strict"
)

// Config is the tags section of the config file. Every source is optional;
// with none set, every lookup answers None.
type Config struct {
	// Header names a request header carrying "name=value;…" tags (see
	// ParseHeader), such as X-User-Tags. It is read only from trusted peers:
	// anyone else could tag themselves vip.
	Header string `json:"header,omitempty"`
	// JWT reads tags, and optionally the identity, from a verified token.
	JWT *JWTConfig `json:"jwt,omitempty"`
	// Redis reads tags from a hash per user.
	Redis *RedisConfig `json:"redis,omitempty"`
}

// JWTConfig says where a token comes from, which keys verify it and which
// claims hold the identity and the tags. Set one HS256 secret (env or file)
// and/or asymmetric keys (public_key_file, jwks_file); the accepted
// algorithms are exactly those the configured keys can verify.
type JWTConfig struct {
	// Header carries the token. "Authorization" (the default when neither
	// header nor cookie is set) requires the Bearer scheme (RFC 6750 §2.1);
	// any other header holds the bare token.
	Header string `json:"header,omitempty"`
	// Cookie carries the token when the header is absent.
	Cookie string `json:"cookie,omitempty"`
	// HS256SecretEnv names an environment variable holding the HS256 secret.
	HS256SecretEnv string `json:"hs256_secret_env,omitempty"`
	// HS256SecretFile is a file holding the HS256 secret; one trailing
	// newline is ignored. The secret must be at least 32 bytes (RFC 7518 §3.2).
	HS256SecretFile string `json:"hs256_secret_file,omitempty"`
	// PublicKeyFile is a PEM RSA (RS256, at least 2048 bits) or P-256 EC
	// (ES256) public key or certificate. It verifies tokens without a kid.
	PublicKeyFile string `json:"public_key_file,omitempty"`
	// JWKSFile is a JSON Web Key Set (RFC 7517) of RSA and P-256 EC keys. A
	// token verified by it must name its key with kid.
	JWKSFile string `json:"jwks_file,omitempty"`
	// Issuer, when set, must equal the iss claim.
	Issuer string `json:"issuer,omitempty"`
	// Audience, when set, must be among the aud claim.
	Audience string `json:"audience,omitempty"`
	// IdentityClaim holds the user id (default "sub").
	IdentityClaim string `json:"identity_claim,omitempty"`
	// TagsClaim names an object claim whose scalar members are the tags.
	// Empty means every top-level scalar claim except the registered ones
	// (iss, sub, aud, exp, nbf, iat, jti) and the identity and phone claims.
	TagsClaim string `json:"tags_claim,omitempty"`
	// PhoneClaim holds the phone number used by region routing (seed 004
	// §3.1.2), if any.
	PhoneClaim string `json:"phone_claim,omitempty"`
	// Leeway tolerates clock skew on exp, nbf and iat (default 0, at most 5m).
	Leeway Duration `json:"leeway,omitempty"`
}

// RedisConfig reads tags with HGETALL from one hash per user.
type RedisConfig struct {
	// Addr is host:port of the Redis server.
	Addr string `json:"addr"`
	// KeyPattern builds the key; "{uid}" is replaced by the user id
	// (default "tags:{uid}").
	KeyPattern string `json:"key_pattern,omitempty"`
	// DB selects the Redis database (default 0).
	DB int `json:"db,omitempty"`
	// PasswordEnv names an environment variable holding the password.
	PasswordEnv string `json:"password_env,omitempty"`
	// Timeout bounds one lookup (default 20ms, at most 1s). A lookup that
	// takes longer makes the tags Unknown; the request is still served.
	Timeout Duration `json:"timeout,omitempty"`
	// CacheTTL is how long an answer, including "no tags", is reused
	// (default 30s).
	CacheTTL Duration `json:"cache_ttl,omitempty"`
	// CacheSize bounds the cache in users; the least recently used go first
	// (default 100000).
	CacheSize int `json:"cache_size,omitempty"`
	// BreakerFailures consecutive failures open the breaker (default 5).
	BreakerFailures int `json:"breaker_failures,omitempty"`
	// BreakerCooldown is how long an open breaker skips Redis before one
	// probe is let through (default 5s).
	BreakerCooldown Duration `json:"breaker_cooldown,omitempty"`
}

// Defaults used when the config leaves a field empty.
const (
	DefaultJWTHeader       = "Authorization"
	DefaultIdentityClaim   = "sub"
	DefaultKeyPattern      = "tags:{uid}"
	DefaultTimeout         = 20 * time.Millisecond
	DefaultCacheTTL        = 30 * time.Second
	DefaultCacheSize       = 100_000
	DefaultBreakerFailures = 5
	DefaultBreakerCooldown = 5 * time.Second
)

// Limits enforced by Validate.
const (
	maxTimeout   = time.Second
	maxLeeway    = 5 * time.Minute
	maxCacheSize = 10_000_000
)

// Defaults fills empty fields of the configured sources.
func (c *Config) Defaults() {
	if j := c.JWT; j != nil {
		if j.Header == "" && j.Cookie == "" {
			j.Header = DefaultJWTHeader
		}
		if j.IdentityClaim == "" {
			j.IdentityClaim = DefaultIdentityClaim
		}
	}
	if r := c.Redis; r != nil {
		r.defaults()
	}
}

func (r *RedisConfig) defaults() {
	if r.KeyPattern == "" {
		r.KeyPattern = DefaultKeyPattern
	}
	if r.Timeout == 0 {
		r.Timeout = Duration(DefaultTimeout)
	}
	if r.CacheTTL == 0 {
		r.CacheTTL = Duration(DefaultCacheTTL)
	}
	if r.CacheSize == 0 {
		r.CacheSize = DefaultCacheSize
	}
	if r.BreakerFailures == 0 {
		r.BreakerFailures = DefaultBreakerFailures
	}
	if r.BreakerCooldown == 0 {
		r.BreakerCooldown = Duration(DefaultBreakerCooldown)
	}
}

// Validate reports every problem under path. It checks the config as
// written; NewJWT and NewRedis then check what only the machine can tell
// (files, environment variables).
func (c *Config) Validate(path string) error {
	var errs []error
	if c.Header != "" && !attr.ValidToken(c.Header) {
		errs = append(errs, strict.Errorf(strict.Join(path, "header"), "invalid header name %q", c.Header))
	}
	if c.JWT != nil {
		errs = append(errs, c.JWT.validate(strict.Join(path, "jwt")))
	}
	if c.Redis != nil {
		errs = append(errs, c.Redis.validate(strict.Join(path, "redis")))
	}
	return errors.Join(errs...)
}

func (j *JWTConfig) validate(path string) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, strict.Errorf(strict.Join(path, field), format, args...))
	}
	if j.Header != "" && !attr.ValidToken(j.Header) {
		bad("header", "invalid header name %q", j.Header)
	}
	if j.Cookie != "" && !attr.ValidToken(j.Cookie) {
		bad("cookie", "invalid cookie name %q", j.Cookie)
	}
	if j.Header == "" && j.Cookie == "" {
		bad("header", "set header or cookie")
	}
	if j.HS256SecretEnv != "" && j.HS256SecretFile != "" {
		bad("hs256_secret_file", "set only one of hs256_secret_env and hs256_secret_file")
	}
	if j.HS256SecretEnv == "" && j.HS256SecretFile == "" && j.PublicKeyFile == "" && j.JWKSFile == "" {
		errs = append(errs, strict.Errorf(path, "no key: set hs256_secret_env, hs256_secret_file, public_key_file or jwks_file"))
	}
	if j.IdentityClaim == "" {
		bad("identity_claim", "must not be empty")
	}
	if j.Leeway.Std() > maxLeeway {
		bad("leeway", "must be at most %s, got %s", maxLeeway, j.Leeway.Std())
	}
	if j.TagsClaim != "" && (j.TagsClaim == j.IdentityClaim || j.TagsClaim == j.PhoneClaim) {
		bad("tags_claim", "must differ from identity_claim and phone_claim")
	}
	return errors.Join(errs...)
}

func (r *RedisConfig) validate(path string) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, strict.Errorf(strict.Join(path, field), format, args...))
	}
	if r.Addr == "" {
		bad("addr", "required, such as \"127.0.0.1:6379\"")
	} else if host, port, err := net.SplitHostPort(r.Addr); err != nil || host == "" || port == "" {
		bad("addr", "must be host:port, got %q", r.Addr)
	}
	if n := strings.Count(r.KeyPattern, "{uid}"); n != 1 {
		bad("key_pattern", "must contain {uid} exactly once, got %q", r.KeyPattern)
	}
	if r.DB < 0 {
		bad("db", "must not be negative, got %d", r.DB)
	}
	if r.Timeout <= 0 || r.Timeout.Std() > maxTimeout {
		bad("timeout", "must be more than 0 and at most %s, got %s: a slow tag store must not hold requests", maxTimeout, r.Timeout.Std())
	}
	if r.CacheTTL <= 0 {
		bad("cache_ttl", "must be more than 0, got %s", r.CacheTTL.Std())
	}
	if r.CacheSize < 1 || r.CacheSize > maxCacheSize {
		bad("cache_size", "must be 1..%d, got %d", maxCacheSize, r.CacheSize)
	}
	if r.BreakerFailures < 1 {
		bad("breaker_failures", "must be at least 1, got %d", r.BreakerFailures)
	}
	if r.BreakerCooldown <= 0 {
		bad("breaker_cooldown", "must be more than 0, got %s", r.BreakerCooldown.Std())
	}
	return errors.Join(errs...)
}

// Duration is a time.Duration written as "20ms" or "30s". It mirrors
// config.Duration, which this package cannot import: config embeds Config.
type Duration time.Duration

// UnmarshalJSON parses a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("expected a duration string such as \"20ms\" or \"30s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("expected a non-negative duration such as \"20ms\", got %q", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }
