package match

import (
	"context"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/tags"
	"github.com/graygate/graygate/internal/tags/redistest"
	"github.com/graygate/graygate/internal/testport"
	"github.com/graygate/graygate/internal/when"
)

const testSecret = "0123456789abcdef0123456789abcdef" // 32 bytes, HS256's minimum

// TestJWTIdentityThenRedisTags follows the router with identity.jwt
// "first": it asks the Facts for the token's identity before the user id
// is known, then sets UID (from the token, or else from X-User-Id) and
// evaluates tag conditions. The Redis hash must be the one of that user.
// Before, JWTIdentity resolved every tag source with no user id, so a
// request without a token never saw its Redis tags.
func TestJWTIdentityThenRedisTags(t *testing.T) {
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for uid, v := range map[string]string{"42": "true", "7": "gold"} {
		field := "vip"
		if uid == "7" {
			field = "tier"
		}
		if err := admin.HSet(ctx, "tags:"+uid, field, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("GG_MATCH_TEST_HS256", testSecret)
	r, err := tags.New(tags.Config{
		JWT:   &tags.JWTConfig{HS256SecretEnv: "GG_MATCH_TEST_HS256"},
		Redis: &tags.RedisConfig{Addr: srv.Addr(), Timeout: tags.Duration(time.Second)}, // generous: a loaded machine
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	src := &Sources{Tags: r}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "7", "beta": true, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	vip, _ := Compile(&Conditions{Tags: []TagCond{{Tag: "vip", Operator: "eq", Value: true}}}, "", nil)
	gold, _ := Compile(&Conditions{Tags: []TagCond{{Tag: "tier", Operator: "eq", Value: "gold"}, {Tag: "beta", Operator: "exists"}}}, "", nil)

	tests := []struct {
		name    string
		headers map[string]string
		wantJWT string // the token's identity, "" for none
		uid     string // what the identity resolver then settles on
		p       *Predicate
	}{
		{"no token: the X-User-Id user's Redis tags", map[string]string{"X-User-Id": "42"}, "", "42", &vip},
		{"token: its subject's Redis tags and its own", map[string]string{"Authorization": "Bearer " + tok, "X-User-Id": "42"}, "7", "7", &gold},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFacts(&attr.Map{Headers: tt.headers}, "", src)
			id, ok := f.JWTIdentity()
			if id != tt.wantJWT || ok != (tt.wantJWT != "") {
				t.Fatalf("JWTIdentity() = %q, %v; want %q", id, ok, tt.wantJWT)
			}
			f.UID = tt.uid
			var trace []Result
			if !tt.p.Match(&f, &trace) {
				t.Errorf("Match for user %s = false, want true; trace %+v", tt.uid, trace)
			}
		})
	}
}

// TestWhenFailsClosedOnUnknownTags: a "when" expression that depends on
// user.tags does not match while a tag source has failed, as a tag
// condition does not. Before, it saw whatever the sources that answered
// said, so !("blacklist_flag" in user.tags) sent a blacklisted user to gray
// whenever Redis was down.
func TestWhenFailsClosedOnUnknownTags(t *testing.T) {
	r, err := tags.New(tags.Config{Header: "X-User-Tags", Redis: &tags.RedisConfig{Addr: testport.Refused(t), Timeout: tags.Duration(time.Second)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	notBlacklisted, err := when.Compile(`!("blacklist_flag" in user.tags)`, when.Options{})
	if err != nil {
		t.Fatal(err)
	}
	byPath, err := when.Compile(`request.path.startsWith("/web/") || "vip" in user.tags`, when.Options{})
	if err != nil {
		t.Fatal(err)
	}
	req := &attr.Map{PathV: "/web/x", Headers: map[string]string{"X-User-Tags": "vip"}, Trusted: true}

	// Redis refuses the connection: the header's tags are all there is,
	// and the tags are unknown.
	f := NewFacts(req, "666", &Sources{Tags: r})
	if ok, err := f.EvalWhen(notBlacklisted); ok || err == nil {
		t.Errorf("EvalWhen(%s) with Redis down = %v, %v; want false and an error", notBlacklisted.Source(), ok, err)
	}
	if ok, err := f.EvalWhen(byPath); !ok || err != nil {
		t.Errorf("EvalWhen(%s) with Redis down = %v, %v; want true: the path decides", byPath.Source(), ok, err)
	}

	// An empty uid skips Redis: every source answered (None is an answer
	// too), so the expression decides.
	for _, hdr := range []string{"vip", ""} {
		f = NewFacts(&attr.Map{Headers: map[string]string{"X-User-Tags": hdr}, Trusted: true}, "", &Sources{Tags: r})
		if ok, err := f.EvalWhen(notBlacklisted); !ok || err != nil {
			t.Errorf("EvalWhen(%s) with tags %q known = %v, %v; want true, nil", notBlacklisted.Source(), hdr, ok, err)
		}
	}
}
