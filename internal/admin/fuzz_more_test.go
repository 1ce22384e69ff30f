package admin

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/graygate/graygate/internal/store"
)

// FuzzIfMatch: an If-Match header is a version (>= 0, optionally quoted
// or weak), "*" or absent (any version), or an error that quotes it;
// never a negative version other than AnyVersion.
func FuzzIfMatch(f *testing.F) {
	for _, s := range []string{"", "*", "3", `"3"`, `W/"3"`, "-1", "0", " 7 ", "9223372036854775808", `""`, "x", `W/`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		r := &http.Request{Header: http.Header{"If-Match": {h}}}
		v, err := parseIfMatch(r)
		if err != nil {
			if !strings.Contains(err.Error(), "If-Match") || !strings.Contains(err.Error(), strconv.Quote(h)) {
				t.Fatalf("parseIfMatch(%q): %v names neither the header nor the value", h, err)
			}
			return
		}
		if v < 0 && v != store.AnyVersion {
			t.Fatalf("parseIfMatch(%q) = %d", h, v)
		}
		if tr := strings.TrimSpace(h); (tr == "" || tr == "*") != (v == store.AnyVersion) {
			t.Fatalf("parseIfMatch(%q) = %d: any version only when empty or *", h, v)
		}
	})
}
