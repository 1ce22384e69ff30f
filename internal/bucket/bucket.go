// Package bucket maps a user id to a stable bucket and walks weights over it.
//
// Two modes exist. XXH64, the default, hashes salt + ":" + uid with xxhash64
// into 10000 buckets, so percentages have 0.01% steps and different decisions
// (a gray gate, an experiment) never share a salt. CRC32 reproduces seed 000's
// PHP functions exactly (crc32(uid . "_" . key) % 1000), for teams migrating
// from that gateway: crc32 is linear, so two experiments salted that way are
// measurably correlated, which is why it is not the default.
//
// Everything here is pure and allocation-free.
package bucket

import (
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
)

// String returns the mode's config name.
func (m Mode) String() string {
	if m == CRC32 {
		return "crc32"
	}
	return "xxh64"
}

// ParseMode parses a config name; "" is XXH64.
func ParseMode(s string) (Mode, bool) {
	switch s {
	case "", "xxh64":
		return XXH64, true
	case "crc32":
		return CRC32, true
	}
	return 0, false
}

// Size returns the number of buckets in the mode: 10000 or 1000.
func (m Mode) Size() uint64 {
	if m == CRC32 {
		return 1000
	}
	return 10000
}

// Hasher computes buckets for one salt. The zero value is not usable; build
// one with New. A Hasher is immutable and safe for concurrent use.
type Hasher struct {
	mode   Mode
	prefix xxhash.Digest // state after writing salt + ":" (XXH64)
	suffix []byte        // "_" + salt (CRC32)
	salt   string
}

// New returns a Hasher for salt in mode.
func New(mode Mode, salt string) *Hasher {
	h := &Hasher{mode: mode, salt: salt}
	switch mode {
	case CRC32:
		h.suffix = []byte("_" + salt)
	default:
		h.prefix.Reset()
		_, _ = h.prefix.WriteString(salt)
		_, _ = h.prefix.WriteString(":")
	}
	return h
}

// Mode returns the hasher's mode.
func (h *Hasher) Mode() Mode { return h.mode }

// Bucket returns the user's bucket in [0, Mode.Size()).
func (h *Hasher) Bucket(uid string) uint64 {
	if h.mode == CRC32 {
		c := crc32.Update(0, crc32.IEEETable, unsafe.Slice(unsafe.StringData(uid), len(uid)))
		c = crc32.Update(c, crc32.IEEETable, h.suffix)
		return uint64(c) % 1000
	}
	d := h.prefix
	_, _ = d.WriteString(uid)
	return d.Sum64() % 10000
}

// Threshold converts a percentage in hundredths (0..10000, i.e. 12.34% is
// 1234) into the bucket bound of the mode: a user is in when Bucket < Threshold.
// In CRC32 mode this is floor(percent*10), which equals the seed's
// intval(percent)*10 for whole percentages and keeps 0.1% steps.
func (m Mode) Threshold(hundredths int) uint64 {
	if hundredths <= 0 {
		return 0
	}
	if m == CRC32 {
		return uint64(hundredths / 10)
	}
	return uint64(hundredths)
}

// Walk picks the index of the weight range that bucket b falls in. weights
// are non-negative and sum to total (> 0). In XXH64 mode the bucket is scaled
// exactly over the total; in CRC32 mode the seed's floating-point walk
// (hit = bucket/1000*total, subtract weights while hit >= weight) is
// reproduced operation for operation, including its last-group fallback.
func (m Mode) Walk(b uint64, weights []int, total int) int {
	if len(weights) == 0 || total <= 0 {
		return -1
	}
	if m == CRC32 {
		hit := float64(b) / 1000 * float64(total)
		for i, w := range weights {
			if hit < float64(w) {
				return i
			}
			hit -= float64(w)
		}
		return len(weights) - 1
	}
	// b*total/size without floating point: exact and monotonic.
	scaled := b * uint64(total) / m.Size()
	var acc uint64
	for i, w := range weights {
		acc += uint64(w)
		if scaled < acc {
			return i
		}
	}
	return len(weights) - 1
}
