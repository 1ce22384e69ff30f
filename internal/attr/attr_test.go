package attr

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

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

func TestParseDecimal(t *testing.T) {
	tests := []struct {
		s    string
		want float64
		ok   bool
	}{
		{"0", 0, true}, {"12.34", 12.34, true}, {"-3", -3, true}, {"+0.5", 0.5, true}, {".5", 0.5, true},
		{"5.", 5, true}, {"1e3", 1000, true}, {"2.5E-2", 0.025, true}, {"-1e+2", -100, true}, {"007", 7, true},
		{"1e-400", 0, true}, // underflow rounds to 0, as the number is finite
		{"", 0, false}, {".", 0, false}, {"-", 0, false}, {"+.", 0, false}, {"e3", 0, false}, {"1e", 0, false},
		{"1e+", 0, false}, {"1_0", 0, false}, {"1_000.5", 0, false}, {"0x10", 0, false}, {"0x1p3", 0, false},
		{"Inf", 0, false}, {"-Infinity", 0, false}, {"NaN", 0, false}, {"nan", 0, false}, {"1e999", 0, false},
		{" 1", 0, false}, {"1 ", 0, false}, {"1.2.3", 0, false}, {"12,5", 0, false}, {"--1", 0, false}, {"١", 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseDecimal(tt.s)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseDecimal(%q) = %v, %v; want %v, %v", tt.s, got, ok, tt.want, tt.ok)
		}
	}
}

// FuzzParseDecimal: whatever ParseDecimal accepts, strconv reads as the
// same finite number, and it accepts no byte outside a decimal's.
func FuzzParseDecimal(f *testing.F) {
	for _, s := range []string{"12.34", "-1e3", ".5", "1_0", "0x1p3", "Inf", "1e999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := ParseDecimal(s)
		if !ok {
			return
		}
		want, err := strconv.ParseFloat(s, 64)
		if err != nil || want != got || math.IsInf(got, 0) || math.IsNaN(got) {
			t.Fatalf("ParseDecimal(%q) = %v; strconv %v, %v", s, got, want, err)
		}
		if i := strings.IndexFunc(s, func(r rune) bool { return !strings.ContainsRune("0123456789+-.eE", r) }); i >= 0 {
			t.Fatalf("ParseDecimal(%q) accepted %q", s, s[i:])
		}
	})
}
