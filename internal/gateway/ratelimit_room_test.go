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
