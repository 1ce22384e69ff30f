package tags

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/jsondur"
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
	// JWKSURL fetches the key set instead, from an identity provider's
	// jwks_uri, over HTTPS (plain http only to a loopback address). It is
	// cached, fetched again every jwks_refresh_interval and when a token
	// names a kid the set lacks (a rotated key), never more often than
	// jwks_min_refresh_interval; while the endpoint is down or answers
	// garbage, the last good set keeps verifying. Set jwks_file or
	// jwks_url, not both.
	JWKSURL string `json:"jwks_url,omitempty"`
	// JWKSCAFile is a PEM bundle of the CAs that sign jwks_url's server
	// certificate (default: the system roots).
	JWKSCAFile string `json:"jwks_ca_file,omitempty"`
	// JWKSTimeout bounds one fetch of jwks_url (default 5s, at most 1m).
	JWKSTimeout Duration `json:"jwks_timeout,omitempty"`
	// JWKSRefreshInterval is how often jwks_url is fetched again (default
	// 5m, 1s to 24h).
	JWKSRefreshInterval Duration `json:"jwks_refresh_interval,omitempty"`
	// JWKSMinRefreshInterval is the least time between two fetches, which
	// bounds the ones unknown kids cause (default 30s, 1s up to
	// jwks_refresh_interval). A rotated key is accepted at most this long
	// after its first token.
	JWKSMinRefreshInterval Duration `json:"jwks_min_refresh_interval,omitempty"`
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
	DefaultJWKSTimeout     = 5 * time.Second
	DefaultJWKSRefresh     = 5 * time.Minute
	DefaultJWKSMinRefresh  = 30 * time.Second
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
		if j.JWKSURL != "" {
			if j.JWKSTimeout == 0 {
				j.JWKSTimeout = Duration(DefaultJWKSTimeout)
			}
			if j.JWKSRefreshInterval == 0 {
				j.JWKSRefreshInterval = Duration(DefaultJWKSRefresh)
			}
			if j.JWKSMinRefreshInterval == 0 {
				j.JWKSMinRefreshInterval = Duration(min(DefaultJWKSMinRefresh, j.JWKSRefreshInterval.Std()))
			}
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
	if j.HS256SecretEnv == "" && j.HS256SecretFile == "" && j.PublicKeyFile == "" && j.JWKSFile == "" && j.JWKSURL == "" {
		errs = append(errs, strict.Errorf(path, "no key: set hs256_secret_env, hs256_secret_file, public_key_file, jwks_file or jwks_url"))
	}
	errs = append(errs, j.validateJWKSURL(path))
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

// Duration is a time.Duration written as a Go duration string ("500ms",
// "30s"); see jsondur.
type Duration = jsondur.Duration

// Limits of the jwks_url settings.
const (
	maxJWKSTimeout = time.Minute
	minJWKSRefresh = time.Second
	maxJWKSRefresh = 24 * time.Hour
)

func (j *JWTConfig) validateJWKSURL(path string) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, strict.Errorf(strict.Join(path, field), format, args...))
	}
	if j.JWKSURL == "" {
		for _, f := range []struct {
			name string
			set  bool
		}{{"jwks_ca_file", j.JWKSCAFile != ""}, {"jwks_timeout", j.JWKSTimeout != 0},
			{"jwks_refresh_interval", j.JWKSRefreshInterval != 0}, {"jwks_min_refresh_interval", j.JWKSMinRefreshInterval != 0}} {
			if f.set {
				bad(f.name, "needs jwks_url")
			}
		}
		return errors.Join(errs...)
	}
	if j.JWKSFile != "" {
		bad("jwks_url", "set only one of jwks_file and jwks_url")
	}
	if err := checkJWKSURL(j.JWKSURL); err != nil {
		bad("jwks_url", "%v", err)
	}
	if t := j.JWKSTimeout.Std(); t <= 0 || t > maxJWKSTimeout {
		bad("jwks_timeout", "must be more than 0 and at most %s, got %s", maxJWKSTimeout, t)
	}
	r := j.JWKSRefreshInterval.Std()
	if r < minJWKSRefresh || r > maxJWKSRefresh {
		bad("jwks_refresh_interval", "must be between %s and %s, got %s", minJWKSRefresh, maxJWKSRefresh, r)
	}
	if m := j.JWKSMinRefreshInterval.Std(); m < minJWKSRefresh || m > r {
		bad("jwks_min_refresh_interval", "must be between %s and jwks_refresh_interval (%s), got %s", minJWKSRefresh, r, m)
	}
	return errors.Join(errs...)
}

// checkJWKSURL accepts https URLs, and http ones only to a loopback host:
// a key set fetched in the clear could be swapped for an attacker's, who
// could then sign any token.
func checkJWKSURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("invalid URL %q", s)
	}
	if u.Host == "" || u.User != nil || u.Fragment != "" {
		return fmt.Errorf("want https://HOST[:PORT]/PATH without credentials or fragment, got %q", s)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		host := u.Hostname()
		if ip := net.ParseIP(host); (ip != nil && ip.IsLoopback()) || host == "localhost" {
			return nil
		}
		return fmt.Errorf("plain http is accepted only to a loopback address (the key set decides which tokens are genuine); use https, got %q", s)
	}
	return fmt.Errorf("scheme must be https, got %q", s)
}
