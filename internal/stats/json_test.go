package stats

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
)

// assertCleanJSON marshals res and fails on NaN or Inf anywhere in it, and
// on undefined numbers written as anything but null.
func assertCleanJSON(t *testing.T, res *Results) []byte {
	t.Helper()
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatalf("json.Marshal: %v", err)
	}
	for _, bad := range []string{"NaN", "Inf", "inf", "nan"} {
		if bytes.Contains(b, []byte(bad)) {
			t.Fatalf("JSON holds %q: %s", bad, b)
		}
	}
	var back Results
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("JSON does not decode back: %v: %s", err, b)
	}
	return b
}

// TestJSONNeverHoldsNaN runs the edge cases where a naive computation gives
// NaN or Inf: no units, one unit, zero variance, baseline 0, sums whose
// square overflows, weights too small for an expected count.
func TestJSONNeverHoldsNaN(t *testing.T) {
	big := math.MaxFloat64 / 4
	tests := []struct {
		name string
		in   Input
	}{
		{"no units at all", twoGroups(conversions("m", 0, 0), conversions("m", 0, 0), Options{Sequential: true})},
		{"one unit each", twoGroups(conversions("m", 1, 1), conversions("m", 0, 1), Options{})},
		{"zero variance", twoGroups(conversions("m", 0, 100), conversions("m", 0, 100), Options{Sequential: true})},
		{"different constants", twoGroups(conversions("m", 0, 100), conversions("m", 100, 100), Options{Sequential: true})},
		{"baseline 0", twoGroups(conversions("m", 0, 100), conversions("m", 7, 100), Options{Sequential: true})},
		{"treatment 0", twoGroups(conversions("m", 7, 100), conversions("m", 0, 100), Options{Sequential: true})},
		{"sum squared overflows", twoGroups(
			Metric{Name: "m", Type: Mean, Units: 1e13, Count: 1e13, Sum: 1e160, SumSquares: big},
			Metric{Name: "m", Type: Mean, Units: 1e13, Count: 1e13, Sum: 2e160, SumSquares: big}, Options{})},
		{"huge values", twoGroups(
			Metric{Name: "m", Type: Mean, Units: 3, Count: 3, Sum: 1e150, SumSquares: 1e300},
			Metric{Name: "m", Type: Mean, Units: 3, Count: 3, Sum: -1e150, SumSquares: 1e300}, Options{Sequential: true})},
		{"tiny values", twoGroups(
			Metric{Name: "m", Type: Mean, Units: 3, Count: 3, Sum: 3e-300, SumSquares: 4e-310},
			Metric{Name: "m", Type: Mean, Units: 3, Count: 3, Sum: 1e-300, SumSquares: 4e-310}, Options{Sequential: true})},
		{"huge effect", twoGroups(conversions("m", 1, 1_000_000), conversions("m", 999_999, 1_000_000), Options{Sequential: true, SequentialTuning: 1e-300})},
		{"underflowing weight", Input{Experiment: "exp", Control: "A", Groups: []Group{
			{Name: "A", Weight: 1e308, Units: 100}, {Name: "B", Weight: 5e-324, Units: 100}}}},
		{"weight-0 group with units", Input{Experiment: "exp", Control: "A", Groups: []Group{
			{Name: "A", Weight: 100, Units: 100}, {Name: "B", Weight: 0, Units: 3}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Compute(tt.in)
			if err != nil {
				t.Fatalf("Compute: %v", err)
			}
			b := assertCleanJSON(t, res)
			t.Logf("%s", b)
		})
	}
}
