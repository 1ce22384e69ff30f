package gateway

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/graygate/graygate/internal/tags/redistest"
)

// TestTagsFromRedisAndJWT stores seed 004's tag rule through the admin API,
// takes identities from verified JWTs (forged X-User-Id headers count for
// nothing), reads tags from a real Redis, and stops Redis under load: no
// request fails, and users whose tags are unknown go to the default.
func TestTagsFromRedisAndJWT(t *testing.T) {
	rs := redistest.Start(t)
	secret := strings.Repeat("k", 32)
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	os.WriteFile(secretFile, []byte(secret), 0o600)
	e := start(t, baseConfig+fmt.Sprintf(`
identity: {jwt: only, anonymous: ip}
targeting:
  tags:
    jwt: {hs256_secret_file: %q}
    redis: {addr: %q, timeout: 50ms, cache_ttl: 100ms}
  tag_types: {multi_loan_index: number, blacklist_flag: bool}
`, secretFile, rs.Addr()), "")
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		idx, black := "0.5", "false"
		if i%2 == 0 {
			idx = "0.9"
		}
		if i%10 == 0 {
			black = "true"
		}
		if err := rdb.HSet(ctx, fmt.Sprint("tags:user", i), "multi_loan_index", idx, "blacklist_flag", black).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Seed 004's shape, verbatim, with a stable target for degradation.
	code, out := e.api("PUT", "/api/v1/rules/credit_v21", `{"rules":[{"tag":"multi_loan_index","operator":"gt","value":0.7},{"tag":"blacklist_flag","operator":"eq","value":false}],"target":"gray"}`)
	if code != 201 {
		t.Fatalf("PUT seed 004 rule = %d %v", code, out)
	}
	// A type mismatch against a declared tag type is refused at PUT.
	code, out = e.api("PUT", "/api/v1/rules/bad", `{"rules":[{"tag":"multi_loan_index","operator":"gt","value":"high"}],"target":"gray"}`)
	if code != 400 || !strings.Contains(fmt.Sprint(out["details"]), "type mismatch") {
		t.Errorf("type mismatch PUT = %d %v", code, out)
	}
	token := func(sub string, exp time.Duration, key string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(exp).Unix()}).SignedString([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	want := func(i int) string {
		if i%2 == 0 && i%10 != 0 {
			return "gray"
		}
		return "default"
	}
	for i := 0; i < 100; i++ {
		a, err := e.get("/", "Authorization", "Bearer "+token(fmt.Sprint("user", i), time.Hour, secret))
		if err != nil || a.group != want(i) {
			t.Fatalf("user%d: %+v %v, want %s", i, a, err, want(i))
		}
	}
	// Forged identities get nothing: a spoofed header, an expired token, a
	// wrongly signed one and alg:none all leave the request anonymous.
	none := "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"user2","exp":9999999999}`)) + "."
	for name, hdr := range map[string][]string{
		"spoofed header": {"X-User-Id", "user2"},
		"expired":        {"Authorization", "Bearer " + token("user2", -time.Hour, secret)},
		"wrong key":      {"Authorization", "Bearer " + token("user2", time.Hour, strings.Repeat("x", 32))},
		"alg none":       {"Authorization", "Bearer " + none},
	} {
		a, err := e.get("/", hdr...)
		if err != nil || a.group != "default" {
			t.Errorf("%s: %+v %v, want the default group", name, a, err)
		}
	}
	// Redis stops under load: nothing fails; tags become unknown.
	var failed, total atomic.Int64
	stop := underLoad(4, func(w, n int) {
		a, err := e.get("/", "Authorization", "Bearer "+token(fmt.Sprint("user", (w*25+n)%100), time.Hour, secret))
		total.Add(1)
		if err != nil || a.status != 200 {
			failed.Add(1)
		}
	})
	time.Sleep(300 * time.Millisecond)
	rs.Stop()
	time.Sleep(700 * time.Millisecond)
	stop()
	if failed.Load() > 0 {
		t.Fatalf("%d of %d requests failed while Redis was down", failed.Load(), total.Load())
	}
	a, _ := e.get("/", "Authorization", "Bearer "+token("user2", time.Hour, secret))
	if a.group != "default" {
		t.Errorf("with Redis down user2's tags are unknown and must not match: %+v", a)
	}
	resp, err := e.client.Get(e.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(resp)
	resp.Body.Close()
	if !strings.Contains(body, "graygate_tags_unknown_total") || strings.Contains(body, "graygate_tags_unknown_total 0\n") {
		t.Error("the unknown-tags counter did not count the outage")
	}
	t.Logf("%d requests during the Redis outage, none failed", total.Load())
}

// TestCELTagsFailClosedWhileRedisDown: a CEL "when" that reads user.tags
// decides on them while Redis answers, and matches no one while Redis is
// down, through the listener: "not blacklisted" must not send the
// blacklisted user to gray because her tags could not be read. A user
// Redis holds no tags for is not blacklisted either.
func TestCELTagsFailClosedWhileRedisDown(t *testing.T) {
	rs := redistest.Start(t)
	e := start(t, baseConfig+fmt.Sprintf(`
targeting:
  tags:
    redis: {addr: %q, timeout: 50ms, cache_ttl: 100ms}
`, rs.Addr()), "")
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	if err := rdb.HSet(context.Background(), "tags:777", "blacklist_flag", "true").Err(); err != nil {
		t.Fatal(err)
	}
	e.mustPut("not_blacklisted", map[string]any{"type": "gray", "gray_percent": 100, "targets": grayRule(100).Targets,
		"when": `!("blacklist_flag" in user.tags)`})
	for uid, want := range map[string]string{"777": "default", "42": "gray"} {
		if a, err := e.get("/", "X-User-Id", uid); err != nil || a.group != want {
			t.Fatalf("with Redis up, user %s: %+v %v, want group %s", uid, a, err, want)
		}
	}
	rs.Stop()
	// Past the cache's 100 ms, every lookup fails: nobody matches.
	deadline := time.Now().Add(10 * time.Second)
	for {
		a, err := e.get("/", "X-User-Id", "42")
		if err != nil {
			t.Fatal(err)
		}
		if a.group == "default" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("user 42 still matched %+v with Redis down", a)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for range 5 {
		if a, err := e.get("/", "X-User-Id", "777"); err != nil || a.group != "default" || a.status != 200 {
			t.Fatalf("with Redis down, blacklisted user 777: %+v %v, want the default group, served", a, err)
		}
	}
}

// TestJWTFirstKeepsRedisTags: with identity.jwt "first", a request without
// a token is identified by X-User-Id, and its Redis tags are looked up
// under that id, through the listener (they were looked up for no user
// before the id was known, and the empty answer kept).
func TestJWTFirstKeepsRedisTags(t *testing.T) {
	rs := redistest.Start(t)
	secretFile := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secretFile, []byte(strings.Repeat("k", 32)), 0o600)
	e := start(t, baseConfig+fmt.Sprintf(`
identity: {jwt: first}
targeting:
  tags:
    jwt: {hs256_secret_file: %q}
    redis: {addr: %q, timeout: 50ms}
`, secretFile, rs.Addr()), "")
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	if err := rdb.HSet(context.Background(), "tags:42", "vip", "true").Err(); err != nil {
		t.Fatal(err)
	}
	e.mustPut("vip", map[string]any{"type": "gray", "gray_percent": 100, "targets": grayRule(100).Targets,
		"conditions": map[string]any{"tags": []map[string]any{{"tag": "vip", "operator": "eq", "value": true}}}})
	for uid, want := range map[string]string{"42": "gray", "43": "default"} {
		if a, err := e.get("/", "X-User-Id", uid); err != nil || a.group != want {
			t.Errorf("user %s without a token: %+v %v, want group %s", uid, a, err, want)
		}
	}
}
