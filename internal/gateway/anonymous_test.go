package gateway

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/graygate/graygate/internal/tags/redistest"
)

// TestAnonymousCookieIsNoUser: with identity.jwt "only" no id a client
// sends is believed, but the anonymous cookie is the client's too. A
// visitor sending gg_uid=10001 must neither pass the whitelist entry
// uid:10001 nor be given user 10001's tags from Redis; a verified token
// for 10001 gets both. Explain says what the data plane did.
func TestAnonymousCookieIsNoUser(t *testing.T) {
	rs := redistest.Start(t)
	secret := strings.Repeat("k", 32)
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	e := start(t, baseConfig+fmt.Sprintf(`
identity: {jwt: only}
targeting:
  tags:
    jwt: {hs256_secret_file: %q}
    redis: {addr: %q, timeout: 200ms}
`, secretFile, rs.Addr()), "")
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	if err := rdb.HSet(context.Background(), "tags:10001", "vip", "true").Err(); err != nil {
		t.Fatal(err)
	}
	e.mustPut("staff", map[string]any{"type": "gray", "gray_percent": 0, "white_list": []string{"uid:10001"},
		"conditions": map[string]any{"path_prefix": []string{"/staff/"}}, "targets": grayRule(0).Targets})
	e.mustPut("vip", map[string]any{"type": "gray", "gray_percent": 100, "targets": grayRule(100).Targets,
		"conditions": map[string]any{"path_prefix": []string{"/vip/"},
			"tags": []map[string]any{{"tag": "vip", "operator": "eq", "value": true}}}})
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "10001", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/staff/x", "/vip/x"} {
		if a, err := e.get(path, "Authorization", "Bearer "+tok); err != nil || a.group != "gray" {
			t.Errorf("%s with a token for 10001: %+v %v, want gray", path, a, err)
		}
		for _, hdr := range [][]string{{"Cookie", "gg_uid=10001"}, {"X-User-Id", "10001", "Cookie", "gg_uid=10001"}} {
			if a, err := e.get(path, hdr...); err != nil || a.group != "default" || a.backend != "stable" {
				t.Errorf("%s with %q: %+v %v, want the default group: the anonymous cookie names no user", path, hdr, a, err)
			}
		}
	}
	code, out := e.api("POST", "/api/v1/explain", map[string]any{"path": "/staff/x", "host": "x", "cookies": map[string]string{"gg_uid": "10001"}})
	dec, _ := out["decision"].(map[string]any)
	if code != 200 || dec["group"] != "default" || !strings.Contains(fmt.Sprint(out["trace"]), "anonymous cookie's id") {
		t.Errorf("explain of gg_uid=10001 = %d %v, want the default group and why the whitelist did not hit", code, out)
	}
}

// TestMappedCIDRWhitelist: a whitelist entry written IPv4-mapped
// (ip:::ffff:198.51.100.0/120) names the IPv4 clients it spells, as the
// mapped address ip:::ffff:203.0.113.9 does, for clients named by a
// trusted proxy's X-Forwarded-For in either form.
func TestMappedCIDRWhitelist(t *testing.T) {
	e := start(t, baseConfig+`trusted_proxies: ["127.0.0.1/32"]
`, "")
	e.mustPut("ips", map[string]any{"type": "gray", "gray_percent": 0, "targets": grayRule(0).Targets,
		"white_list": []string{"ip:::ffff:198.51.100.0/120", "ip:::ffff:203.0.113.9"}})
	for xff, want := range map[string]string{
		"198.51.100.5":          "gray",
		"::ffff:198.51.100.77":  "gray",
		"203.0.113.9":           "gray",
		"198.51.101.5":          "default",
		"2001:db8::c633:6405":   "default",
		"::ffff:198.51.101.200": "default",
	} {
		if a, err := e.get("/", "X-User-Id", "u1", "X-Forwarded-For", xff); err != nil || a.group != want {
			t.Errorf("client %s: %+v %v, want %s", xff, a, err, want)
		}
	}
}
