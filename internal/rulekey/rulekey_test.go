package rulekey

import (
	"regexp"
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	re := regexp.MustCompile(Pattern)
	tests := []struct {
		key  string
		want bool
	}{
		{"gray_v2", true},
		{"a", true},
		{"A1.b:c-d_e", true},
		{strings.Repeat("k", 128), true},
		{strings.Repeat("k", 129), false},
		{"", false},
		{"_lead", false},
		{"-lead", false},
		{"a/b", false},
		{"a b", false},
		{"用户", false},
	}
	for _, tt := range tests {
		if got := Valid(tt.key); got != tt.want {
			t.Errorf("Valid(%q) = %v, want %v", tt.key, got, tt.want)
		}
		if got := re.MatchString(tt.key); got != tt.want {
			t.Errorf("Pattern matches %q = %v, want %v: Pattern and Valid disagree", tt.key, got, tt.want)
		}
	}
}

// FuzzValid checks that Valid agrees with the documented Pattern.
func FuzzValid(f *testing.F) {
	for _, s := range []string{"gray_v2", "", "a/b", "_x", strings.Repeat("k", 128)} {
		f.Add(s)
	}
	re := regexp.MustCompile(Pattern)
	f.Fuzz(func(t *testing.T, s string) {
		if Valid(s) != re.MatchString(s) {
			t.Fatalf("Valid(%q) = %v, Pattern says %v", s, Valid(s), re.MatchString(s))
		}
	})
}
