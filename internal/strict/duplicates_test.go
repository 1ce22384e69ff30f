package strict

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzDuplicateKeys: DuplicateKeys never panics, finds nothing in a body
// that encoding/json re-encoded (which cannot repeat a name), and finds a
// top-level name given a second time.
func FuzzDuplicateKeys(f *testing.F) {
	f.Add([]byte(`{"a":1,"b":{"c":[1,{"d":2,"d":3}]},"a":2}`))
	f.Add([]byte(`[{"x":1},{"x":1}]`))
	f.Add([]byte(`{"a":{}, "b":[], "c":"}"}`))
	f.Add([]byte(`{"a":`))
	f.Add([]byte(`{"a":1}{"a":1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, fe := range Fields(DuplicateKeys(body)) {
			if fe.Message == "" {
				t.Fatalf("an empty message for %q", body)
			}
		}
		var v any
		if json.Unmarshal(body, &v) != nil {
			return
		}
		clean, _ := json.Marshal(v)
		if err := DuplicateKeys(clean); err != nil {
			t.Fatalf("DuplicateKeys(%s) = %v, want none", clean, err)
		}
		m, ok := v.(map[string]any)
		if !ok || len(m) == 0 {
			return
		}
		for k := range m {
			name, _ := json.Marshal(k)
			dup := append([]byte(`{`+string(name)+`:null,`), clean[1:]...)
			err := DuplicateKeys(dup)
			want := Join("", k) + ": duplicate key"
			if Join("", k) == "" {
				want = "duplicate key" // the empty name has no path of its own
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("DuplicateKeys(%s) = %v, want %q named", dup, err, k)
			}
			break
		}
	})
}
