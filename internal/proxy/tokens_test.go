package proxy

import (
	"bytes"
	"testing"
)

// TestTokens: a Connection value is split into words at commas and at
// whitespace, so that a folded or space-separated value names each word
// hop-by-hop; any other list (Upgrade, TE) at commas only, its elements
// without the whitespace around them.
func TestTokens(t *testing.T) {
	for _, tc := range []struct {
		vals       []string
		conn, list string // the elements, joined with "|"
	}{
		{[]string{"keep-alive"}, "keep-alive", "keep-alive"},
		{[]string{"close, X-A"}, "close|X-A", "close|X-A"},
		{[]string{" , a ,, b ,"}, "a|b", "a|b"},
		{[]string{"x-hop keep-alive"}, "x-hop|keep-alive", "x-hop keep-alive"},
		{[]string{"a\t b,c"}, "a|b|c", "a\t b|c"},
		{[]string{"websocket x", "h2c"}, "websocket|x|h2c", "websocket x|h2c"},
		{[]string{"", " ", ","}, "", ""},
	} {
		var vals [][]byte
		for _, v := range tc.vals {
			vals = append(vals, []byte(v))
		}
		if got := string(bytes.Join(appendConnTokens(nil, vals), []byte("|"))); got != tc.conn {
			t.Errorf("appendConnTokens(%q) = %q, want %q", tc.vals, got, tc.conn)
		}
		if got := string(bytes.Join(appendListTokens(nil, vals), []byte("|"))); got != tc.list {
			t.Errorf("appendListTokens(%q) = %q, want %q", tc.vals, got, tc.list)
		}
	}
}
