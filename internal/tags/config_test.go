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
