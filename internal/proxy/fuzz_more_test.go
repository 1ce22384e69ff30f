package proxy

import (
	"net/url"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
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

// FuzzOriginForm: what an origin-form target sends upstream is what the
// decision parsed (fasthttp's URI, as the view reads it): the same path
// and the same query, and never a fragment.
func FuzzOriginForm(f *testing.F) {
	for _, s := range []string{"/", "/p?q=1#frag", "/p#frag?q=1", "/p#", "/a/b#/../../c", "//x#y", "/?#", "/%23?a=%23#b", "http://abs.test#f/p?q=3", "//://", "//evil.test://x/admin?q=1#f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		var ex exchange
		out := string(ex.originForm([]byte(target)))
		if strings.Contains(out, "#") {
			t.Fatalf("originForm(%q) = %q: a fragment is forwarded", target, out)
		}
		if !strings.HasPrefix(target, "/") {
			return
		}
		// What the decision reads, as Handler and the HTTP/2 view parse it.
		var u fasthttp.URI
		if err := u.Parse([]byte("h.test"), []byte(target)); err != nil {
			return
		}
		pathTarget(&u, []byte("h.test"), []byte(target))
		path, query, _ := strings.Cut(out, "?")
		if path != string(u.PathOriginal()) || query != string(u.QueryString()) {
			t.Fatalf("originForm(%q) = %q, the decision parsed path %q and query %q", target, out, u.PathOriginal(), u.QueryString())
		}
		if h := string(u.Host()); h != "h.test" {
			t.Fatalf("origin-form %q: the decision's host is %q, not the Host header's h.test", target, h)
		}
	})
}
