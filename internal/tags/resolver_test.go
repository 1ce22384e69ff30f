package tags

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/tags/redistest"
	"github.com/graygate/graygate/internal/testport"
)

func newTestResolver(t *testing.T, cfg Config) *Resolver {
	t.Helper()
	r, err := New(cfg, nil)
	if err != nil {
		t.Fatalf("New(%+v) = %v", cfg, err)
	}
	t.Cleanup(func() { r.Close() })
	if r.jwt != nil {
		r.jwt.now = func() time.Time { return testNow }
	}
	return r
}

func bearer(t *testing.T, c jwt.MapClaims) map[string]string {
	return map[string]string{"Authorization": "Bearer " + sign(t, tokenSpec{jwt.SigningMethodHS256, keysOnce().secret, "", c})}
}

// TestResolve covers the sources that need no redis-server.
func TestResolve(t *testing.T) {
	t.Setenv("GG_TEST_HS256", string(keysOnce().secret))
	jwtCfg := &JWTConfig{HS256SecretEnv: "GG_TEST_HS256", TagsClaim: "tags"}
	both := newTestResolver(t, Config{Header: "X-User-Tags", JWT: jwtCfg})
	down := newTestResolver(t, Config{Header: "X-User-Tags", Redis: &RedisConfig{Addr: testport.Refused(t)}})
	empty := newTestResolver(t, Config{})

	tests := []struct {
		name       string
		r          *Resolver
		headers    map[string]string
		trusted    bool
		uid        string
		want       Set
		wantStatus Status
		wantErr    error
		wantID     string
	}{
		{name: "no sources", r: empty, headers: map[string]string{"X-User-Tags": "vip=true"}, trusted: true, wantStatus: None},
		{name: "nothing in the request", r: both, trusted: true, wantStatus: None},
		{name: "trusted header", r: both, headers: map[string]string{"x-user-tags": "vip=true;multi_loan_index=0.82"}, trusted: true,
			want: Set{"vip": "true", "multi_loan_index": "0.82"}, wantStatus: Known},
		{name: "untrusted header is ignored", r: both, headers: map[string]string{"X-User-Tags": "vip=true"}, wantStatus: None},
		{name: "malformed trusted header", r: both, headers: map[string]string{"X-User-Tags": "v p=1"}, trusted: true, wantStatus: Unknown},
		{name: "jwt tags and identity", r: both, headers: bearer(t, claims("tags", map[string]any{"vip": true})),
			want: Set{"vip": "true"}, wantStatus: Known, wantID: "u-42"},
		{name: "jwt wins over the header", r: both, trusted: true,
			headers: merged(bearer(t, claims("tags", map[string]any{"vip": true})), map[string]string{"X-User-Tags": "vip=false;tier=gold"}),
			want:    Set{"vip": "true", "tier": "gold"}, wantStatus: Known, wantID: "u-42"},
		{name: "expired jwt", r: both, headers: bearer(t, claims("exp", testNow.Add(-time.Hour).Unix())), wantStatus: Unknown, wantErr: ErrExpired},
		{name: "forged jwt", r: both, headers: map[string]string{"Authorization": "Bearer " + sign(t, tokenSpec{jwt.SigningMethodHS256, []byte("another-secret-another-secret-xx"), "", claims()})},
			wantStatus: Unknown, wantErr: ErrSignature},
		{name: "redis down keeps header tags but is unknown", r: down, headers: map[string]string{"X-User-Tags": "vip=true"}, trusted: true, uid: "u1",
			want: Set{"vip": "true"}, wantStatus: Unknown, wantErr: ErrRedisUnknown},
		{name: "no uid means no redis lookup", r: down, wantStatus: None},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := tt.r.Resolve(context.Background(), &attr.Map{Headers: tt.headers}, tt.trusted, tt.uid)
			if res.Status != tt.wantStatus || !maps.Equal(res.Tags, tt.want) {
				t.Errorf("Resolve() = %v, %v (err %v); want %v, %v", res.Tags, res.Status, res.Err, tt.want, tt.wantStatus)
			}
			if tt.wantErr != nil && !errors.Is(res.Err, tt.wantErr) {
				t.Errorf("Resolve().Err = %v, want %v", res.Err, tt.wantErr)
			}
			if (res.Status == Unknown) != (res.Err != nil) {
				t.Errorf("Resolve() status %v with Err %v: Err must explain exactly the unknown results", res.Status, res.Err)
			}
			gotID := ""
			if res.Claims != nil {
				gotID = res.Claims.Identity
			}
			if gotID != tt.wantID {
				t.Errorf("Resolve().Claims identity = %q, want %q", gotID, tt.wantID)
			}
		})
	}
}

func merged(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

func TestResolveWithRedis(t *testing.T) {
	srv := redistest.Start(t)
	admin := adminClient(t, srv.Addr())
	hset(t, admin, "tags:u-42", "tier", "silver", "vip", "false", "region", "sh")
	hset(t, admin, "tags:u-7", "tier", "bronze")
	t.Setenv("GG_TEST_HS256", string(keysOnce().secret))
	r := newTestResolver(t, Config{
		Header: "X-User-Tags",
		JWT:    &JWTConfig{HS256SecretEnv: "GG_TEST_HS256", TagsClaim: "tags"},
		Redis:  &RedisConfig{Addr: srv.Addr(), Timeout: Duration(time.Second)},
	})
	ctx := context.Background()

	// Layers: Redis, then the trusted header, then the token. The Redis key
	// comes from the token's identity when the caller has no uid.
	req := &attr.Map{Headers: merged(bearer(t, claims("tags", map[string]any{"vip": true})), map[string]string{"X-User-Tags": "tier=gold"})}
	res := r.Resolve(ctx, req, true, "")
	want := Set{"tier": "gold", "vip": "true", "region": "sh"}
	if res.Status != Known || !maps.Equal(res.Tags, want) || res.Err != nil {
		t.Errorf("Resolve() = %v, %v, %v; want %v, known", res.Tags, res.Status, res.Err, want)
	}
	// An explicit uid keys Redis.
	res = r.Resolve(ctx, &attr.Map{}, false, "u-7")
	if res.Status != Known || !maps.Equal(res.Tags, Set{"tier": "bronze"}) {
		t.Errorf("Resolve(uid u-7) = %v, %v", res.Tags, res.Status)
	}
	// One source answering from the cache costs no allocation.
	bare := &attr.Map{}
	allocs := testing.AllocsPerRun(100, func() {
		if res := r.Resolve(ctx, bare, false, "u-7"); res.Status != Known {
			t.Fatalf("Resolve(u-7) = %v", res.Status)
		}
	})
	if allocs != 0 {
		t.Errorf("Resolve from the Redis cache: %v allocs per run, want 0", allocs)
	}
	if s := r.Redis().Stats(); s.Lookups != 2 {
		t.Errorf("Redis lookups = %d, want 2", s.Lookups)
	}
}
