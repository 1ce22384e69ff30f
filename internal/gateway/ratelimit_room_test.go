package gateway

import "testing"

// TestRateLimitRoomForOne: with room for one identity
// (max_identities: 1), each new client takes the room. Before, the one
// already there kept it and a new client's bucket was dropped to make
// room for itself, so that client got a fresh burst on every request and
// was never limited.
func TestRateLimitRoomForOne(t *testing.T) {
	e := start(t, baseConfig+"\nlimits: {rate_limit: {rps: 0.001, burst: 1, per_identity: true, max_identities: 1}}\n", "")
	for _, id := range []string{"a", "b", "c"} {
		if got := e.status("GET", "/", nil, "X-User-Id", id); got != "200" {
			t.Errorf("first request of %s: %s, want 200", id, got)
		}
		if got := e.status("GET", "/", nil, "X-User-Id", id); got != "429" {
			t.Errorf("second request of %s: %s, want 429", id, got)
		}
	}
}

// TestPerIdentityToggleKeepsTokens: rate limiters keep their tokens
// while their route keeps a rate_limit (the reload table says so), and
// per_identity turned off and on again is no exception: a client that
// used its burst does not get a fresh one. Before, every identity's
// bucket was dropped, which also happened on a reload refused after its
// build.
func TestPerIdentityToggleKeepsTokens(t *testing.T) {
	limits := func(perIdentity string) string {
		return baseConfig + "\nlimits: {rate_limit: {rps: 0.001, burst: 1, per_identity: " + perIdentity + "}}\n"
	}
	e := start(t, limits("true"), "")
	if got := e.status("GET", "/", nil, "X-User-Id", "a"); got != "200" {
		t.Fatalf("a's first request: %s", got)
	}
	for _, v := range []string{"false", "true"} {
		if err := e.reloadKeepingDataDir(limits(v)); err != nil {
			t.Fatalf("reload per_identity: %s: %v", v, err)
		}
	}
	if got := e.status("GET", "/", nil, "X-User-Id", "a"); got != "429" {
		t.Errorf("a's second request after per_identity went off and on: %s, want 429 (its bucket is empty)", got)
	}
}
