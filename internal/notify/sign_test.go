package notify

import "testing"

// TestSignRFC4231: HMAC-SHA-256 test case 2 of RFC 4231 §4.3 (key "Jefe").
func TestSignRFC4231(t *testing.T) {
	key, data := []byte("Jefe"), []byte("what do ya want for nothing?")
	const want = "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
	if got := Sign(key, data); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	tests := []struct {
		name      string
		key, body []byte
		sig       string
		ok        bool
	}{
		{"valid", key, data, want, true},
		{"other body", key, []byte("what do ya want for nothing!"), want, false},
		{"other key", []byte("jefe"), data, want, false},
		{"no prefix", key, data, want[len("sha256="):], false},
		{"sha1 prefix", key, data, "sha1=" + want[len("sha256="):], false},
		{"not hex", key, data, "sha256=zz", false},
		{"truncated", key, data, want[:len(want)-2], false},
		{"empty", key, data, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Verify(tt.key, tt.body, tt.sig); got != tt.ok {
				t.Errorf("Verify(%q) = %v, want %v", tt.sig, got, tt.ok)
			}
		})
	}
}
