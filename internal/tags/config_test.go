package tags

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/strict"
)

func TestConfigDefaults(t *testing.T) {
	var c Config
	if err := strict.Decode([]byte(`{"header":"X-User-Tags","jwt":{"hs256_secret_env":"S"},"redis":{"addr":"127.0.0.1:6379"}}`), &c); err != nil {
		t.Fatal(err)
	}
	c.Defaults()
	if err := c.Validate("tags"); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	if c.JWT.Header != "Authorization" || c.JWT.IdentityClaim != "sub" {
		t.Errorf("JWT defaults = header %q, identity_claim %q", c.JWT.Header, c.JWT.IdentityClaim)
	}
	if c.JWT.JWKSTimeout != 0 || c.JWT.JWKSRefreshInterval != 0 {
		t.Errorf("JWKS defaults without jwks_url = %+v", *c.JWT)
	}
	u := Config{JWT: &JWTConfig{JWKSURL: "https://idp/jwks"}}
	u.Defaults()
	if j := u.JWT; j.JWKSTimeout.Std() != 5*time.Second || j.JWKSRefreshInterval.Std() != 5*time.Minute || j.JWKSMinRefreshInterval.Std() != 30*time.Second {
		t.Errorf("JWKS defaults = timeout %s, refresh %s, min refresh %s", j.JWKSTimeout.Std(), j.JWKSRefreshInterval.Std(), j.JWKSMinRefreshInterval.Std())
	}
	r := c.Redis
	if r.KeyPattern != "tags:{uid}" || r.Timeout.Std() != 20*time.Millisecond || r.CacheTTL.Std() != 30*time.Second ||
		r.CacheSize != 100_000 || r.BreakerFailures != 5 || r.BreakerCooldown.Std() != 5*time.Second {
		t.Errorf("Redis defaults = %+v", *r)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		json string
		want []string // paths of the expected errors, sorted
	}{
		{name: "empty is valid", json: `{}`},
		{name: "bad header", json: `{"header":"X User"}`, want: []string{"tags.header"}},
		{name: "jwt without key", json: `{"jwt":{}}`, want: []string{"tags.jwt"}},
		{name: "jwt two secrets", json: `{"jwt":{"hs256_secret_env":"A","hs256_secret_file":"/f"}}`, want: []string{"tags.jwt.hs256_secret_file"}},
		{name: "jwt leeway and cookie", json: `{"jwt":{"jwks_file":"/k","cookie":"a b","leeway":"1h"}}`, want: []string{"tags.jwt.cookie", "tags.jwt.leeway"}},
		{name: "jwt tags claim is identity", json: `{"jwt":{"jwks_file":"/k","tags_claim":"sub"}}`, want: []string{"tags.jwt.tags_claim"}},
		{name: "redis everything wrong", json: `{"redis":{"addr":"nohost","key_pattern":"tags","db":-1,"timeout":"2s","cache_size":-1,"breaker_failures":-2}}`,
			want: []string{"tags.redis.addr", "tags.redis.breaker_failures", "tags.redis.cache_size", "tags.redis.db", "tags.redis.key_pattern", "tags.redis.timeout"}},
		{name: "redis no addr", json: `{"redis":{}}`, want: []string{"tags.redis.addr"}},
		{name: "redis two uids", json: `{"redis":{"addr":"r:6379","key_pattern":"{uid}:{uid}"}}`, want: []string{"tags.redis.key_pattern"}},
		{name: "jwks_url https", json: `{"jwt":{"jwks_url":"https://idp.example.com/.well-known/jwks.json"}}`},
		{name: "jwks_url http to loopback", json: `{"jwt":{"jwks_url":"http://127.0.0.1:8443/jwks"}}`},
		{name: "jwks_url http to localhost", json: `{"jwt":{"jwks_url":"http://localhost/jwks"}}`},
		{name: "jwks_url in the clear", json: `{"jwt":{"jwks_url":"http://idp.example.com/jwks"}}`, want: []string{"tags.jwt.jwks_url"}},
		{name: "jwks_url not a URL", json: `{"jwt":{"jwks_url":"idp.example.com/jwks"}}`, want: []string{"tags.jwt.jwks_url"}},
		{name: "jwks_url with credentials", json: `{"jwt":{"jwks_url":"https://u:p@idp.example.com/jwks"}}`, want: []string{"tags.jwt.jwks_url"}},
		{name: "jwks_url and jwks_file", json: `{"jwt":{"jwks_url":"https://idp/jwks","jwks_file":"/k"}}`, want: []string{"tags.jwt.jwks_url"}},
		{name: "jwks settings without jwks_url", json: `{"jwt":{"jwks_file":"/k","jwks_ca_file":"/ca","jwks_refresh_interval":"1m"}}`,
			want: []string{"tags.jwt.jwks_ca_file", "tags.jwt.jwks_refresh_interval"}},
		{name: "jwks intervals out of range", json: `{"jwt":{"jwks_url":"https://idp/jwks","jwks_timeout":"2m","jwks_refresh_interval":"1m","jwks_min_refresh_interval":"2m"}}`,
			want: []string{"tags.jwt.jwks_min_refresh_interval", "tags.jwt.jwks_timeout"}},
		{name: "jwks refresh too often", json: `{"jwt":{"jwks_url":"https://idp/jwks","jwks_refresh_interval":"10ms"}}`,
			want: []string{"tags.jwt.jwks_min_refresh_interval", "tags.jwt.jwks_refresh_interval"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Config
			if err := strict.Decode([]byte(tt.json), &c); err != nil {
				t.Fatalf("Decode(%s) = %v", tt.json, err)
			}
			c.Defaults()
			var got []string
			for _, f := range strict.Fields(c.Validate("tags")) {
				got = append(got, f.Path)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Validate(%s) paths = %q, want %q\n%v", tt.json, got, tt.want, c.Validate("tags"))
			}
		})
	}
}

func TestConfigDecodeErrors(t *testing.T) {
	var c Config
	err := strict.Decode([]byte(`{"redis":{"addr":"a:1","timeout":"soon","cache_tll":"1s"}}`), &c)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	for _, want := range []string{"redis.timeout", "redis.cache_tll: unknown field"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Decode error %q does not mention %q", msg, want)
		}
	}
}
