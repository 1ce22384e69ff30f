package experiment

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/router"
)

// FuzzParseEvents feeds POST /api/v1/events bodies to the parser. It must
// never panic; every problem names a path under events, and accepted plus
// rejected is the number of events.
func FuzzParseEvents(f *testing.F) {
	f.Add([]byte(`{"events": [{"unit": "u1", "metric": "signup", "value": 1, "ts": "2026-11-30T10:00:00Z"}]}`))
	f.Add([]byte(`{"events": [{"unit": "u1", "metric": "revenue", "value": 1e300}, {"unit": 5}, null, [], "x"]}`))
	f.Add([]byte(`{"events": [{"unit": "用户", "metric": "purchase", "ts": "2026-13-40T99:00:00Z"}]}`))
	f.Add([]byte(`{"events": null}`))
	f.Add([]byte(`{"events": [{"unit":"u","metric":"revenue","value":-0.0000004}]}`))
	snap := snapshot(f, router.Input{}, checkoutRule)
	cat := NewCatalog(snap, Settings{})
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		evs, res, err := ParseEvents(body, cat, now)
		if err != nil {
			if evs != nil || res.Accepted != 0 {
				t.Fatalf("an error with results: %v %+v", err, res)
			}
			return
		}
		for _, p := range res.Problems {
			if len(p.Path) < 7 || p.Path[:7] != "events[" || p.Message == "" {
				t.Fatalf("problem %+v does not name an event", p)
			}
		}
		for _, e := range evs {
			if e.Kind != Conversion || e.Unit == "" || e.Experiment != "exp_checkout" || (e.Binomial && e.Value != 1) || (!e.Binomial && e.Value == 0) {
				t.Fatalf("event %+v", e)
			}
		}
	})
}

// FuzzReadFrames: whatever a damaged journal holds, reading it never
// panics, and an intact prefix re-encodes to the same bytes.
func FuzzReadFrames(f *testing.F) {
	var b []byte
	for _, r := range []record{
		{op: opHeader, value: 7},
		{op: opExpose, exp: "e", key: 42, ts: 1764496800000, ver: 3, group: "B"},
		{op: opBinomial, exp: "e", key: 42, metric: "purchase"},
		{op: opValue, exp: "e", key: 42, metric: "revenue", value: -12_340_000},
		{op: opExposeP, exp: "e", key: 43, ts: 1764496800001, ver: 4, group: "A"},
		{op: opPhase, exp: "e", phase: `{"alloc":"1f","weights":{"A":50,"B":50},"since":1764496800000}`, ts: 1764496800000, key: 31, units: map[string]int64{"A": 1, "B": 0}},
		{op: opPark, exp: "e", key: 44, at: 1764496800002, ts: 1764496799000, metric: "revenue", flags: parkExposes, value: 2_500_000},
		{op: opExpire, exp: "e", key: 44, ts: 1764496740002},
		{op: opTrailer, value: 7},
	} {
		b = appendFrame(b, &r)
	}
	f.Add(b)
	f.Add(b[:len(b)-2])
	f.Add(append(slices.Clone(b), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
	f.Fuzz(func(t *testing.T, data []byte) {
		var again []byte
		n, _ := readFrames(data, func(r *record) error {
			again = appendFrame(again, r)
			return nil
		})
		if n < 0 || n > len(data) {
			t.Fatalf("intact prefix %d of %d", n, len(data))
		}
		if string(again) != string(data[:n]) {
			t.Fatalf("re-encoding the intact prefix differs")
		}
	})
}

// TestSeenSet checks the seen set against a map through inserts, deletes
// (forget), growth and the clear at its bound.
func TestSeenSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s shard
	model := map[uint64]bool{}
	for i := range 200_000 {
		k := max(rng.Uint64()%50_000, 1)
		if i%7 == 0 {
			s.forget(k)
			delete(model, k)
			continue
		}
		before := s.used
		got := s.seenOrAdd(k)
		if s.used <= before && !got { // the set was cleared at its bound, then took k
			if s.used != 1 || got {
				t.Fatalf("op %d: after the clear used = %d", i, s.used)
			}
			model = map[uint64]bool{k: true}
			continue
		}
		if got != model[k] {
			t.Fatalf("op %d: seenOrAdd(%d) = %v, model says %v", i, k, got, model[k])
		}
		model[k] = true
		if s.used != len(model) {
			t.Fatalf("op %d: used %d, model %d", i, s.used, len(model))
		}
	}
	if len(s.seen) != maxSeenSlots {
		t.Errorf("the set did not grow to its bound: %d slots", len(s.seen))
	}
}

// TestParseMicro pins the fast path to strconv's answer.
func TestParseMicro(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"12.34", 12_340_000, true}, {"-3", -3_000_000, true}, {"+0.5", 500_000, true}, {"0.000001", 1, true},
		{".5", 500_000, true}, {"5.", 5_000_000, true}, {"1e3", 1_000_000_000, true}, {"0.0000004", 0, true},
		{"0.0000006", 1, true}, {"1000000000000", 1e18, true}, {"1000000000001", 0, false}, {"", 0, false},
		{".", 0, false}, {"-", 0, false}, {"1.2.3", 0, false}, {"abc", 0, false}, {"NaN", 0, false}, {"Inf", 0, false},
		{"12,5", 0, false}, {"0x10", 0, false}, {"99999999999999999999", 0, false},
		// strconv reads these as numbers; a reported value is a plain decimal.
		{"1_0", 0, false}, {"0x1p3", 0, false}, {"Infinity", 0, false}, {"1e999", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseMicro([]byte(tt.in))
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseMicro(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// FuzzParseMicro: the fast path agrees with strconv.ParseFloat rounded to
// µ-units wherever float64 is exact enough to compare (below 2^48 µ).
func FuzzParseMicro(f *testing.F) {
	for _, s := range []string{"12.34", "-0.000001", "1e3", "99.999999", "+7", ".", "1.0000005"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseMicro([]byte(s))
		want, wok := slowMicro([]byte(s))
		if ok != wok {
			t.Fatalf("parseMicro(%q) ok = %v, strconv %v", s, ok, wok)
		}
		if ok && got != want && math.Abs(float64(got)) < 1<<48 {
			t.Fatalf("parseMicro(%q) = %d, strconv %d", s, got, want)
		}
	})
}
