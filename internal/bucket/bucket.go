// Package bucket maps a user id to a stable bucket and walks weights over it.
//
// Four modes exist. XXH64, the default, hashes salt + ":" + uid with xxhash64
// into 10000 buckets, so percentages have 0.01% steps and different decisions
// (a gray gate, an experiment, a layer slot, the holdout) never share a salt.
// CRC32 reproduces seed 000's PHP functions exactly (crc32(uid . "_" . key) %
// 1000), for teams migrating from that gateway: crc32 is linear, so two
// experiments salted that way are measurably correlated, which is why it is
// not the default.
//
// GrowthBook and Unleash put a user in the group their SDKs would, so that
// server-side routing and client-side flags agree (see growthbook.go and
// unleash.go; both are checked against the SDKs' own test vectors in
// testdata/).
//
// Everything here is pure, safe for concurrent use and, on the per-request
// path (Bucket, Split), allocation-free.
package bucket

import (
	"fmt"
	"hash/crc32"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// Mode is a hashing mode.
type Mode uint8

const (
	// XXH64 is xxhash64(salt + ":" + uid) % 10000.
	XXH64 Mode = iota
	// CRC32 is crc32-IEEE(uid + "_" + salt) % 1000, as in seed 000.
	CRC32
	// GrowthBook is GrowthBook's hash version 2:
	// fnv1a32(str(fnv1a32(seed + uid))) % 10000, over UTF-16 code units.
	GrowthBook
	// Unleash is Unleash's normalized hash:
	// murmur3_x86_32(group_id + ":" + uid, seed) % normalizer + 1.
	Unleash
)

var modeNames = [...]string{XXH64: "xxh64", CRC32: "crc32", GrowthBook: "growthbook", Unleash: "unleash"}

// ModeNames lists the accepted config names, for error messages.
const ModeNames = `"xxh64", "crc32", "growthbook" or "unleash"`

// String returns the mode's config name.
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("mode(%d)", m)
}

// ParseMode parses a config name; "" is XXH64.
func ParseMode(s string) (Mode, bool) {
	if s == "" {
		return XXH64, true
	}
	for m, name := range modeNames {
		if s == name {
			return Mode(m), true
		}
	}
	return 0, false
}

// Size returns the number of buckets of a gate in the mode: 10000, 1000,
// 10000 or 100. Unleash's buckets are numbered 1..100, the others from 0.
func (m Mode) Size() uint64 {
	switch m {
	case CRC32:
		return 1000
	case Unleash:
		return 100
	}
	return 10000
}

// Hasher computes the buckets of one decision (one salt). The zero value is
// not usable; build one with New. A Hasher is immutable and safe for
// concurrent use.
type Hasher struct {
	mode   Mode
	salt   string
	prefix xxhash.Digest // XXH64: the state after salt + ":"
	suffix []byte        // CRC32: "_" + salt
	fnv    uint32        // GrowthBook: the FNV-1a state after the seed
	murmur []byte        // Unleash: group_id + ":"
	seed   uint32        // Unleash: the murmur3 seed
	norm   uint32        // Unleash: the normalizer (100 for a gate, the total weight for a split)
}

// New returns the gate Hasher for salt in mode: the salt is the rule key (or
// experiment id) in XXH64 and CRC32 mode, the seed in GrowthBook mode and the
// group id in Unleash mode, where the gate is Unleash's strategy hash (seed
// 0, normalized to 1..100).
func New(mode Mode, salt string) *Hasher {
	return newHasher(mode, salt, UnleashStrategySeed, 100)
}

func newHasher(mode Mode, salt string, seed, norm uint32) *Hasher {
	h := &Hasher{mode: mode, salt: salt}
	switch mode {
	case CRC32:
		h.suffix = []byte("_" + salt)
	case GrowthBook:
		h.fnv = fnvUTF16(fnvOffset32, salt)
	case Unleash:
		h.murmur = []byte(salt + ":")
		h.seed, h.norm = seed, norm
	default:
		h.prefix.Reset()
		_, _ = h.prefix.WriteString(salt)
		_, _ = h.prefix.WriteString(":")
	}
	return h
}

// Mode returns the hasher's mode.
func (h *Hasher) Mode() Mode { return h.mode }

// Salt returns the salt (seed, group id) the hasher was built with.
func (h *Hasher) Salt() string { return h.salt }

// Bucket returns the user's bucket: in [0, Size()) in XXH64, CRC32 and
// GrowthBook mode, in [1, normalizer] in Unleash mode.
func (h *Hasher) Bucket(uid string) uint64 {
	switch h.mode {
	case CRC32:
		c := crc32.Update(0, crc32.IEEETable, unsafe.Slice(unsafe.StringData(uid), len(uid)))
		c = crc32.Update(c, crc32.IEEETable, h.suffix)
		return uint64(c) % 1000
	case GrowthBook:
		return uint64(growthBookOuter(fnvUTF16(h.fnv, uid)))
	case Unleash:
		return uint64(murmurSum(h.seed, h.murmur, uid)%h.norm) + 1
	}
	d := h.prefix
	_, _ = d.WriteString(uid)
	return d.Sum64() % 10000
}

// Threshold converts a percentage in hundredths (0..10000, i.e. 12.34% is
// 1234) into the bucket bound of the mode: a gate lets a user in when
// Bucket < Threshold.
//
//   - XXH64: the hundredths themselves.
//   - CRC32: floor(percent*10), which equals the seed's intval(percent)*10
//     for whole percentages and keeps 0.1% steps.
//   - GrowthBook: a rollout rule includes a user when coverage > 0 and
//     n <= coverage, n = bucket/10000, coverage = percent/100 as the exact
//     decimal a GrowthBook rule carries (12.34% is coverage 0.1234), so the
//     buckets 0..hundredths are in: hundredths+1 of them.
//   - Unleash: gradual rollout includes a user when percentage > 0 and the
//     normalized value (1..100) is <= percentage, so the bound is
//     floor(percent)+1.
func (m Mode) Threshold(hundredths int) uint64 {
	if hundredths <= 0 {
		return 0
	}
	switch m {
	case CRC32:
		return uint64(hundredths / 10)
	case GrowthBook:
		return min(uint64(hundredths)+1, 10000)
	case Unleash:
		return uint64(hundredths/100) + 1
	}
	return uint64(hundredths)
}

// Everyone reports whether a gate with threshold lets every bucket in, so
// that the hash can be skipped.
func (m Mode) Everyone(threshold uint64) bool {
	if m == Unleash {
		return threshold > 100
	}
	return threshold >= m.Size()
}

// Explain describes the comparison of bucket b with threshold in the mode's
// own terms, for explain traces.
func (m Mode) Explain(b, threshold uint64) string {
	in := b < threshold
	switch m {
	case GrowthBook:
		if threshold == 0 {
			return fmt.Sprintf("n = %d/10000, and coverage 0 includes nobody", b)
		}
		cov := fmt.Sprintf("%.4f", float64(threshold-1)/10000)
		if in {
			return fmt.Sprintf("n = %d/10000 <= coverage %s", b, cov)
		}
		return fmt.Sprintf("n = %d/10000 > coverage %s", b, cov)
	case Unleash:
		if threshold == 0 {
			return fmt.Sprintf("normalized value %d of 1..100, and percentage 0 includes nobody", b)
		}
		if in {
			return fmt.Sprintf("normalized value %d of 1..100 <= percentage %d", b, threshold-1)
		}
		return fmt.Sprintf("normalized value %d of 1..100 > percentage %d", b, threshold-1)
	}
	if in {
		return fmt.Sprintf("bucket %d < threshold %d of %d", b, threshold, m.Size())
	}
	return fmt.Sprintf("bucket %d >= threshold %d of %d", b, threshold, m.Size())
}

// Walk picks the index of the weight range that bucket b falls in, in XXH64
// and CRC32 mode. weights are in hundredths of a percent (12.5% is 1250):
// non-negative, summing to 10000. In XXH64 mode a group holds the buckets
// below 10000 × its cumulative share, exactly. In CRC32 mode the seed's
// floating-point walk over percentages (hit = bucket/1000*100, subtract
// each weight while hit >= weight) is reproduced operation for operation,
// including its last-group fallback; whole percentages are the numbers the
// seed computed with. GrowthBook and Unleash walks live in Splitter.
func (m Mode) Walk(b uint64, weights []int) int {
	if len(weights) == 0 {
		return -1
	}
	if m == CRC32 {
		hit := float64(b) / 1000 * 100
		for i, w := range weights {
			pct := float64(w) / 100
			if hit < pct {
				return i
			}
			hit -= pct
		}
		return len(weights) - 1
	}
	// b*10000/size without floating point: exact and monotonic.
	scaled := b * 10000 / m.Size()
	var acc uint64
	for i, w := range weights {
		acc += uint64(w)
		if scaled < acc {
			return i
		}
	}
	return len(weights) - 1
}

// Splitter assigns experiment groups: one salt, one set of weights. It is
// immutable and safe for concurrent use.
type Splitter struct {
	h *Hasher
	// weights are in hundredths of a percent, and in Unleash mode as
	// Unleash stores them (tenths of a percent).
	weights []int
	// lo and hi are GrowthBook's variation ranges as bucket bounds: group
	// i holds the buckets lo[i] <= b < hi[i].
	lo, hi []uint64
}

// NewSplitter returns the group assignment of an experiment salted with salt
// (experiment id, GrowthBook seed or Unleash group id) over weights in
// hundredths of a percent (33.4% is 3340), which are non-negative and sum
// to 10000.
//
// In GrowthBook mode the weights become GrowthBook's variation ranges
// (getBucketRanges with weights as fractions and coverage 1, then
// chooseVariation's half-open ranges). In Unleash mode the weights are
// percentages of a flag defined in Unleash, which stores variant weights on
// a 0..1000 scale (unleash-server's variantSchema: 50% is 500; its
// fixVariantWeights spreads variable weights so that they add up to 1000,
// an even three-way split being 334/333/333): each becomes tenths of a
// percent (weights that are not whole tenths are rounded down; a rule's
// validation refuses them), and the bucket is Unleash's variant hash (seed
// 86028157) normalized by their total (1000 for a rule), walked over them
// as Unleash's selectVariantDefinition walks them. A user then gets the
// variant an Unleash SDK gives them for that flag; normalizing by 100
// instead would disagree for about half the users.
func NewSplitter(mode Mode, salt string, weights []int) *Splitter {
	s := &Splitter{weights: append([]int(nil), weights...)}
	switch mode {
	case Unleash:
		total := 0
		for i := range s.weights {
			s.weights[i] = s.weights[i] * UnleashWeightScale / 100
			total += s.weights[i]
		}
		s.h = newHasher(mode, salt, UnleashVariantSeed, uint32(max(total, 1)))
	case GrowthBook:
		s.h = New(mode, salt)
		total := 0
		for _, w := range weights {
			total += w
		}
		fractions := make([]float64, len(weights))
		for i, w := range weights {
			fractions[i] = float64(w) / float64(max(total, 1))
		}
		for _, r := range BucketRanges(len(weights), 1, fractions) {
			s.lo = append(s.lo, firstBucketAtLeast(r[0]))
			s.hi = append(s.hi, firstBucketAtLeast(r[1]))
		}
	default:
		s.h = New(mode, salt)
	}
	return s
}

// Mode returns the splitter's mode.
func (s *Splitter) Mode() Mode { return s.h.mode }

// Size returns the number of buckets Split draws from: 10000, 1000,
// 10000, or the total Unleash weight in Unleash mode (buckets 1..1000 for
// a rule's weights).
func (s *Splitter) Size() uint64 {
	if s.h.mode == Unleash {
		return uint64(s.h.norm)
	}
	return s.h.mode.Size()
}

// Split returns the user's bucket and group index. A bucket that no group
// holds (which weights summing to the total cannot produce) goes to the
// last group.
func (s *Splitter) Split(uid string) (b uint64, group int) {
	b = s.h.Bucket(uid)
	switch s.h.mode {
	case GrowthBook:
		for i := range s.lo {
			if s.lo[i] <= b && b < s.hi[i] {
				return b, i
			}
		}
		return b, len(s.weights) - 1
	case Unleash:
		if i := UnleashVariant(uint32(b), s.weights); i >= 0 {
			return b, i
		}
		return b, len(s.weights) - 1
	}
	return b, s.h.mode.Walk(b, s.weights)
}

// Salt returns the salt (experiment id, seed or group id) of the split.
func (s *Splitter) Salt() string { return s.h.salt }
