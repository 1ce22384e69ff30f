package experiment

import (
	"bytes"
	"testing"
)

// FuzzParsePhase: a stored phase comes back from Redis or the data dir,
// where anyone with access may have written it: damaged is the zero
// phase, never a panic, and a phase that parses encodes to what parses
// back to it.
func FuzzParsePhase(f *testing.F) {
	f.Add([]byte(nil))
	f.Add([]byte(`{}`))
	f.Add((&phase{}).encode())
	f.Add([]byte(`{"version":3,"groups":["A","B"],"weights":[50,50]}`))
	f.Add([]byte(`[1,2]`))
	f.Add([]byte(`{"groups":null,"weights":[1e309]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p := parsePhase(raw)
		enc := p.encode()
		again := parsePhase(enc)
		if !bytes.Equal(again.encode(), enc) {
			t.Fatalf("phase %q encodes to %q, which parses to %q", raw, enc, again.encode())
		}
	})
}
