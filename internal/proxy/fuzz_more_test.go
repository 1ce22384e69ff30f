package proxy

import (
	"net/url"
	"testing"
)

// FuzzURLDecoded: the views decode query parameters and cookies as
// net/url does whenever net/url accepts the text, and keep a malformed
// escape as it is (PHP's urldecode does too) instead of failing.
func FuzzURLDecoded(f *testing.F) {
	for _, s := range []string{"", "a+b", "%41%42", "%zz", "%4", "%", "a%2", "%E7%94%A8%E6%88%B7", "100%", "%%41", "+%2B+"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := string(appendURLDecoded([]byte("prefix"), []byte(s)))[len("prefix"):]
		if want, err := url.QueryUnescape(s); err == nil && got != want {
			t.Fatalf("appendURLDecoded(%q) = %q, net/url gives %q", s, got, want)
		}
		if len(got) > len(s) {
			t.Fatalf("appendURLDecoded(%q) = %q: longer than its input", s, got)
		}
	})
}
