package attr

import "testing"

func TestValidToken(t *testing.T) {
	tests := []struct {
		s    string
		want bool
	}{
		{"X-User-Id", true}, {"user_id", true}, {"gg_uid", true}, {"a!#$%&'*+-.^_`|~9", true},
		{"", false}, {"bad header", false}, {"a;b", false}, {"a:b", false}, {"a=b", false},
		{"a/b", false}, {`a"b`, false}, {"a(b)", false}, {"a\tb", false}, {"用户", false}, {"a\x7f", false},
	}
	for _, tt := range tests {
		if got := ValidToken(tt.s); got != tt.want {
			t.Errorf("ValidToken(%q) = %v, want %v", tt.s, got, tt.want)
		}
	}
}

func TestMapHeaderCaseInsensitive(t *testing.T) {
	m := &Map{Headers: map[string]string{"x-user-id": "1"}}
	if v, ok := m.Header("X-User-Id"); !ok || v != "1" {
		t.Errorf("Header = %q %v", v, ok)
	}
	if _, ok := m.Header("X-Other"); ok {
		t.Error("absent header found")
	}
}
