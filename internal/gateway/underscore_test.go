package gateway

import (
	"testing"
)

// TestUnderscoreHeadersNotRouted: a header field whose name holds "_" is
// dropped before forwarding unless proxy.allow_underscores_in_headers,
// and the decision does not see it either, as nginx hides such fields
// from routing: a rule that names X_Beta matched a request the upstream
// then got without it. Explain agrees with the data plane; with the
// setting on, both see the field.
func TestUnderscoreHeadersNotRouted(t *testing.T) {
	rule := map[string]any{"type": "gray", "gray_percent": 100, "targets": grayRule(100).Targets,
		"conditions": map[string]any{"header_exists": []string{"X_Beta"}}}
	for _, tt := range []struct {
		name  string
		extra string
		group string
	}{
		{"dropped", "", "default"},
		{"allowed", "proxy: {allow_underscores_in_headers: true}\n", "gray"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, baseConfig+tt.extra, "")
			e.mustPut("beta", rule)
			if a, err := e.get("/x", "X_Beta", "1", "X-User-Id", "u1"); err != nil || a.group != tt.group {
				t.Errorf("X_Beta: 1 through the data plane: %+v %v, want group %q", a, err, tt.group)
			}
			code, out := e.api("POST", "/api/v1/explain", map[string]any{"path": "/x", "headers": map[string]string{"X_Beta": "1", "X-User-Id": "u1"}})
			dec, _ := out["decision"].(map[string]any)
			if code != 200 || dec["group"] != tt.group {
				t.Errorf("explain of X_Beta: 1 = %d %v, want group %q", code, out, tt.group)
			}
		})
	}
}
