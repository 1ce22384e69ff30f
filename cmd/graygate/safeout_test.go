package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestSafeWriter: controls are escaped, everything else (UTF-8 text, LF,
// TAB) passes as it is, and escaped JSON still decodes to the same value.
func TestSafeWriter(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain text\n", "plain text\n"},
		{"tab\there, 北京 → ok\n", "tab\there, 北京 → ok\n"},
		{"\x1b]0;pwned\x07title", `\u001b]0;pwned\u0007title`},
		{"over\rwrite", `over\u000dwrite`},
		{"del\x7f", `del\u007f`},
		{"c1 \u009b2J csi", `c1 \u009b2J csi`},
		{"\u00a0 is not a control", "\u00a0 is not a control"},
		{"\xc2", "\xc2"},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		n, err := safeWriter{&b}.Write([]byte(tt.in))
		if err != nil || n != len(tt.in) || b.String() != tt.want {
			t.Errorf("Write(%q) = %d %v, wrote %q; want %q", tt.in, n, err, b.String(), tt.want)
		}
	}
	var b bytes.Buffer
	in := map[string]string{"reason": "a\u009bb"}
	raw, _ := json.Marshal(in)
	_, _ = safeWriter{&b}.Write(raw)
	var back map[string]string
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back["reason"] != in["reason"] {
		t.Errorf("escaped JSON %s decodes to %q (%v), want %q", b.Bytes(), back["reason"], err, in["reason"])
	}
}
