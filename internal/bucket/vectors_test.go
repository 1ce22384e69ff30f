package bucket

import (
	"encoding/json"
	"hash/fnv"
	"math"
	"os"
	"strconv"
	"testing"
	"unicode/utf16"
)

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// hundredths converts percentages (33.4) into the hundredths of a percent
// that a Splitter takes (3340), as a rule's validation does.
func hundredths(percents []float64) []int {
	h := make([]int, len(percents))
	for i, p := range percents {
		h[i] = int(math.Round(p * 100))
	}
	return h
}

// TestGrowthBookCases checks every case of the hash, getBucketRange and
// chooseVariation sections of GrowthBook's cases.json.
func TestGrowthBookCases(t *testing.T) {
	var cases struct {
		Hash           [][]any `json:"hash"`
		GetBucketRange [][]any `json:"getBucketRange"`
		ChooseVariaton [][]any `json:"chooseVariation"`
	}
	readJSON(t, "testdata/growthbook-cases.json", &cases)
	if len(cases.Hash) < 15 || len(cases.GetBucketRange) < 13 || len(cases.ChooseVariaton) < 13 {
		t.Fatalf("cases.json sections are short: %d, %d, %d", len(cases.Hash), len(cases.GetBucketRange), len(cases.ChooseVariaton))
	}
	v2 := 0
	for i, c := range cases.Hash {
		seed, value, version := c[0].(string), c[1].(string), int(c[2].(float64))
		n, ok := GrowthBookHash(seed, value, version)
		if c[3] == nil {
			if ok {
				t.Errorf("hash[%d] (%q, %q, v%d) = %v, want null", i, seed, value, version, n)
			}
			continue
		}
		if version == 2 {
			v2++
		}
		if want := c[3].(float64); !ok || n != want {
			t.Errorf("hash[%d] (%q, %q, v%d) = %v, want %v", i, seed, value, version, n, want)
		}
	}
	if v2 < 7 {
		t.Errorf("only %d version 2 hash cases", v2)
	}
	round := func(x float64) float64 { return math.Round(x*1e6) / 1e6 }
	for _, c := range cases.GetBucketRange {
		name, args := c[0].(string), c[1].([]any)
		var weights []float64
		if args[2] != nil {
			for _, w := range args[2].([]any) {
				weights = append(weights, w.(float64))
			}
		}
		got := BucketRanges(int(args[0].(float64)), args[1].(float64), weights)
		want := c[2].([]any)
		if len(got) != len(want) {
			t.Errorf("getBucketRange %q = %v, want %v", name, got, want)
			continue
		}
		for j, w := range want {
			r := w.([]any)
			if round(got[j][0]) != round(r[0].(float64)) || round(got[j][1]) != round(r[1].(float64)) {
				t.Errorf("getBucketRange %q = %v, want %v", name, got, want)
				break
			}
		}
	}
	for _, c := range cases.ChooseVariaton {
		name, n := c[0].(string), c[1].(float64)
		var ranges [][2]float64
		for _, r := range c[2].([]any) {
			rr := r.([]any)
			ranges = append(ranges, [2]float64{rr[0].(float64), rr[1].(float64)})
		}
		if got, want := ChooseVariation(n, ranges), int(c[3].(float64)); got != want {
			t.Errorf("chooseVariation %q = %d, want %d", name, got, want)
		}
	}
}

// TestGrowthBookSDK checks graygate's GrowthBook mode against decisions of
// GrowthBook's JavaScript SDK itself (testdata/growthbook-sdk.mjs), with
// non-ASCII ids and seeds: the hash value, the experiment variation for
// several weight sets, and rollout inclusion at several coverages,
// including ids exactly at the coverage's edge.
func TestGrowthBookSDK(t *testing.T) {
	var sdk struct {
		Hash []struct {
			Seed, ID string
			N        float64
		} `json:"hash"`
		Experiments []struct {
			Seed, ID  string
			Weights   []float64 // percentages, some not whole
			Variation int
		} `json:"experiments"`
		Rollouts []struct {
			Seed, ID   string
			Hundredths int
			On         bool
		} `json:"rollouts"`
	}
	readJSON(t, "testdata/growthbook-sdk.json", &sdk)
	nonASCII, wide := 0, 0
	for _, c := range sdk.Hash {
		n, _ := GrowthBookHash(c.Seed, c.ID, 2)
		if n != c.N {
			t.Errorf("hash(%q, %q) = %v, the SDK says %v", c.Seed, c.ID, n, c.N)
		}
		if b := New(GrowthBook, c.Seed).Bucket(c.ID); float64(b)/10000 != c.N {
			t.Errorf("Bucket(%q, %q) = %d, the SDK says n = %v", c.Seed, c.ID, b, c.N)
		}
		for _, r := range c.ID {
			if r >= 0x80 {
				nonASCII++
			}
			if r >= 0x100 {
				wide++
			}
		}
	}
	if nonASCII == 0 || wide == 0 {
		t.Fatal("the SDK vectors hold no non-ASCII ids")
	}
	for _, c := range sdk.Experiments {
		_, got := NewSplitter(GrowthBook, c.Seed, hundredths(c.Weights)).Split(c.ID)
		if got != c.Variation {
			t.Errorf("experiment %q weights %v, id %q: group %d, the SDK says %d", c.Seed, c.Weights, c.ID, got, c.Variation)
		}
	}
	for _, c := range sdk.Rollouts {
		in := New(GrowthBook, c.Seed).Bucket(c.ID) < GrowthBook.Threshold(c.Hundredths)
		if in != c.On {
			t.Errorf("rollout %q at %d/100 %%, id %q: in = %v, the SDK says %v", c.Seed, c.Hundredths, c.ID, in, c.On)
		}
	}
	if len(sdk.Experiments) < 100 || len(sdk.Rollouts) < 100 {
		t.Fatalf("only %d experiment and %d rollout vectors", len(sdk.Experiments), len(sdk.Rollouts))
	}
}

// TestFNVUTF16 pins the code-unit detail: below U+0100 a code unit is one
// byte and FNV-1a over code units equals hash/fnv over bytes (Latin-1);
// from U+0100 on the whole 16-bit unit is XORed in, and runes above the
// BMP are two surrogate units.
func TestFNVUTF16(t *testing.T) {
	latin1 := func(s string) []byte {
		var b []byte
		for _, r := range s {
			b = append(b, byte(r))
		}
		return b
	}
	for _, s := range []string{"", "a", "seed123", "naïve", "\u00ff\u00e9"} {
		h := fnv.New32a()
		h.Write(latin1(s))
		if got := fnvUTF16(fnvOffset32, s); got != h.Sum32() {
			t.Errorf("fnvUTF16(%q) = %d, hash/fnv over Latin-1 = %d", s, got, h.Sum32())
		}
	}
	// A reference that hashes the code units utf16.Encode produces.
	units := func(s string) uint32 {
		h := uint32(fnvOffset32)
		for _, u := range utf16.Encode([]rune(s)) {
			h = (h ^ uint32(u)) * fnvPrime32
		}
		return h
	}
	for _, s := range []string{"\u0100", "用户", "😀", "x😀y", "𝄞"} {
		if got, want := fnvUTF16(fnvOffset32, s), units(s); got != want {
			t.Errorf("fnvUTF16(%q) = %d, over utf16.Encode = %d", s, got, want)
		}
		h := fnv.New32a()
		h.Write([]byte(s))
		if fnvUTF16(fnvOffset32, s) == h.Sum32() {
			t.Errorf("fnvUTF16(%q) equals FNV-1a over UTF-8 bytes; the code units are not being used", s)
		}
	}
}

// TestGrowthBookSplitMatchesChooseVariation holds the precomputed bucket
// bounds of a GrowthBook split to the SDK's float comparison for every
// bucket, with weights whose cumulative sums are not exact in binary.
func TestGrowthBookSplitMatchesChooseVariation(t *testing.T) {
	for _, weights := range [][]int{{1000, 2000, 7000}, {3300, 3300, 3400}, {100, 200, 300, 9400}, {0, 5000, 0, 5000}, {700, 1300, 1700, 1900, 4400}, {10000},
		{3340, 3330, 3330}, {1429, 1429, 1428, 1429, 1428, 1429, 1428}, {1, 9999}} {
		s := NewSplitter(GrowthBook, "x", weights)
		fr := make([]float64, len(weights))
		for i, w := range weights {
			fr[i] = float64(w) / 10000
		}
		ranges := BucketRanges(len(weights), 1, fr)
		for b := uint64(0); b < 10000; b++ {
			want := ChooseVariation(float64(b)/10000, ranges)
			got := -1
			for i := range s.lo {
				if s.lo[i] <= b && b < s.hi[i] {
					got = i
					break
				}
			}
			if got != want || want < 0 {
				t.Fatalf("weights %v bucket %d: bounds say %d, chooseVariation %d", weights, b, got, want)
			}
		}
	}
}

// TestUnleashSpec checks the normalized values of two Unleash SDKs' tests,
// the gradual and flexible rollout cases and the variant cases of Unleash's
// client-specification, and UTF-8 vectors for non-ASCII ids and group ids.
func TestUnleashSpec(t *testing.T) {
	var spec struct {
		Normalized []struct {
			ID         string
			GroupID    string `json:"group_id"`
			Seed       uint32
			Normalizer uint32
			Value      uint32
		} `json:"normalized"`
		Rollouts []struct {
			Spec, Toggle string
			GroupID      string `json:"group_id"`
			Percentage   int
			ID           string
			Expected     bool
		} `json:"rollouts"`
		Variants []struct {
			Spec, Toggle string
			GroupID      string `json:"group_id"`
			ID           string
			Weights      []int
			Names        []string
			Expected     string
		} `json:"variants"`
	}
	readJSON(t, "testdata/unleash-spec.json", &spec)
	var utf8 struct {
		Normalized []struct {
			ID         string
			GroupID    string `json:"group_id"`
			Seed       uint32
			Normalizer uint32
			Value      uint32
		} `json:"normalized"`
	}
	readJSON(t, "testdata/unleash-utf8.json", &utf8)
	for _, c := range append(spec.Normalized, utf8.Normalized...) {
		if got := UnleashNormalized(c.ID, c.GroupID, c.Normalizer, c.Seed); got != c.Value {
			t.Errorf("normalizedValue(%q, %q, %d, seed %d) = %d, want %d", c.ID, c.GroupID, c.Normalizer, c.Seed, got, c.Value)
		}
		if c.Normalizer == 100 {
			h := newHasher(Unleash, c.GroupID, c.Seed, 100)
			if got := h.Bucket(c.ID); got != uint64(c.Value) {
				t.Errorf("Bucket(%q, %q, seed %d) = %d, want %d", c.ID, c.GroupID, c.Seed, got, c.Value)
			}
		}
	}
	for _, c := range spec.Rollouts {
		in := New(Unleash, c.GroupID).Bucket(c.ID) < Unleash.Threshold(c.Percentage*100)
		if in != c.Expected {
			t.Errorf("%s %s: id %q at %d%% enabled = %v, want %v", c.Spec, c.Toggle, c.ID, c.Percentage, in, c.Expected)
		}
	}
	// The specification's variants carry weights of their own totals (100,
	// 2, 1), not the 0..1000 scale the Unleash server stores, so they are
	// checked at the bucket level: Unleash's variant hash normalized by
	// their total, and its walk.
	for _, c := range spec.Variants {
		total := 0
		for _, w := range c.Weights {
			total += w
		}
		i := UnleashVariant(UnleashNormalized(c.ID, c.GroupID, uint32(total), UnleashVariantSeed), c.Weights)
		if i < 0 || c.Names[i] != c.Expected {
			t.Errorf("%s %s: id %q gets variant %d, want %s", c.Spec, c.Toggle, c.ID, i, c.Expected)
		}
	}
	if len(spec.Rollouts) < 15 || len(spec.Variants) < 15 || len(utf8.Normalized) < 50 {
		t.Fatalf("only %d rollout, %d variant and %d UTF-8 vectors", len(spec.Rollouts), len(spec.Variants), len(utf8.Normalized))
	}
}

// TestUnleashVariantsAsStored holds an Unleash-mode split to what an
// Unleash SDK picks for the same flag defined in Unleash with the rule's
// percentages, which the server stores ×10 (500/500 for 50/50) and the SDK
// normalizes by their total, 1000: testdata/unleash-variants.json, made by
// unleash-variants.py with nothing but Python's standard library. User 1001
// of group id checkout-feature at 50/50 is the case that normalizing by 100
// got wrong.
func TestUnleashVariantsAsStored(t *testing.T) {
	var doc struct {
		Variants []struct {
			GroupID        string `json:"group_id"`
			ID             string
			Percents       []float64 // some not whole
			UnleashWeights []int     `json:"unleash_weights"`
			Names          []string
			Target         uint64
			Expected       string
		} `json:"variants"`
	}
	readJSON(t, "testdata/unleash-variants.json", &doc)
	if len(doc.Variants) < 1000 {
		t.Fatalf("only %d vectors", len(doc.Variants))
	}
	seen1001 := false
	for _, c := range doc.Variants {
		s := NewSplitter(Unleash, c.GroupID, hundredths(c.Percents))
		b, i := s.Split(c.ID)
		if b != c.Target || c.Names[i] != c.Expected {
			t.Errorf("NewSplitter(Unleash, %q, %v).Split(%q) = bucket %d, %s; Unleash (weights %v): target %d, %s",
				c.GroupID, c.Percents, c.ID, b, c.Names[i], c.UnleashWeights, c.Target, c.Expected)
		}
		if s.Size() != 1000 {
			t.Errorf("Size() = %d, want 1000", s.Size())
		}
		if c.GroupID == "checkout-feature" && c.ID == "1001" && c.Percents[0] == 50 && c.Percents[1] == 50 {
			seen1001 = c.Expected == "control"
		}
	}
	if !seen1001 {
		t.Errorf("the vectors lack user 1001 of checkout-feature at 50/50 in control")
	}
}

func TestUnleashVariantWalk(t *testing.T) {
	tests := []struct {
		name    string
		target  uint32
		weights []int
		want    int
	}{
		{"first", 1, []int{50, 50}, 0},
		{"last of first", 50, []int{50, 50}, 0},
		{"first of second", 51, []int{50, 50}, 1},
		{"top", 100, []int{50, 50}, 1},
		{"zero weight skipped", 1, []int{0, 100}, 1},
		{"beyond the total", 101, []int{50, 50}, -1},
		{"uneven", 2, []int{1, 49, 50}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := UnleashVariant(tt.target, tt.weights); got != tt.want {
				t.Errorf("UnleashVariant(%d, %v) = %d, want %d", tt.target, tt.weights, got, tt.want)
			}
		})
	}
}

func TestThresholdCompatibleModes(t *testing.T) {
	tests := []struct {
		mode       Mode
		hundredths int
		want       uint64
		everyone   bool
	}{
		{GrowthBook, 0, 0, false}, {GrowthBook, 1, 2, false}, {GrowthBook, 1000, 1001, false},
		{GrowthBook, 9999, 10000, true}, {GrowthBook, 10000, 10000, true},
		{Unleash, 0, 0, false}, {Unleash, 50, 1, false}, {Unleash, 100, 2, false}, {Unleash, 1050, 11, false},
		{Unleash, 9950, 100, false}, {Unleash, 10000, 101, true},
	}
	for _, tt := range tests {
		got := tt.mode.Threshold(tt.hundredths)
		if got != tt.want || tt.mode.Everyone(got) != tt.everyone {
			t.Errorf("%v.Threshold(%d) = %d (everyone %v), want %d (%v)", tt.mode, tt.hundredths, got, tt.mode.Everyone(got), tt.want, tt.everyone)
		}
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range []Mode{XXH64, CRC32, GrowthBook, Unleash} {
		if got, ok := ParseMode(m.String()); !ok || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m.String(), got, ok)
		}
	}
	for _, s := range []string{"md5", "GrowthBook", "murmur3"} {
		if _, ok := ParseMode(s); ok {
			t.Errorf("ParseMode(%q) accepted", s)
		}
	}
}

// TestCompatibleModesDoNotAllocate holds every mode's per-request work to 0
// allocations, non-ASCII and astral ids included.
func TestCompatibleModesDoNotAllocate(t *testing.T) {
	for _, m := range []Mode{XXH64, CRC32, GrowthBook, Unleash} {
		h := New(m, "exp_用户")
		s := NewSplitter(m, "exp_用户", []int{1000, 2000, 7000})
		for _, uid := range []string{"user-1234567", "用户42😀", strconv.Itoa(1 << 30)} {
			if a := testing.AllocsPerRun(100, func() { h.Bucket(uid); s.Split(uid) }); a != 0 {
				t.Errorf("%v: Bucket and Split(%q) allocate %v times", m, uid, a)
			}
		}
	}
}

func BenchmarkBucketGrowthBook(b *testing.B) {
	h := New(GrowthBook, "gray_v2")
	b.ReportAllocs()
	for b.Loop() {
		_ = h.Bucket("user-1234567")
	}
}

func BenchmarkBucketGrowthBookNonASCII(b *testing.B) {
	h := New(GrowthBook, "gray_v2")
	b.ReportAllocs()
	for b.Loop() {
		_ = h.Bucket("用户1234567😀")
	}
}

func BenchmarkBucketUnleash(b *testing.B) {
	h := New(Unleash, "gray_v2")
	b.ReportAllocs()
	for b.Loop() {
		_ = h.Bucket("user-1234567")
	}
}
