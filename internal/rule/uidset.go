package rule

import (
	"math/bits"

	"github.com/cespare/xxhash/v2"
)

// uidSet is a gray rule's set of whitelisted user ids. Nearly every lookup
// misses: the whitelist is the exception, and every request of the rule's
// route asks. A Go map of 100,000 strings spans megabytes, so each miss
// was a few random memory reads (about 300 ns under load). The set keeps a
// filter of the ids' hashes in front of the map, 8 bits per id (128 KiB for
// 100,000), which stays in cache: each id sets three bits of one 64-bit
// word (a blocked Bloom filter), so a lookup reads one word and turns away
// about 96% of the misses; the rest, and every hit, are answered by the
// map. (With one bit per id, as before, it turned away 88%: the map was
// asked three times as often.)
type uidSet struct {
	bits  []uint64
	shift uint // 64 - log2(the number of words)
	m     map[string]struct{}
}

// newUIDSet returns the set of uids, or nil if there are none.
func newUIDSet(uids []string) *uidSet {
	if len(uids) == 0 {
		return nil
	}
	// A power of two of words, with at least 8 bits per id.
	logWords := max(0, bits.Len(uint(len(uids))*8-1)-6)
	s := &uidSet{
		bits:  make([]uint64, 1<<logWords),
		shift: uint(64 - logWords),
		m:     make(map[string]struct{}, len(uids)),
	}
	for _, u := range uids {
		s.m[u] = struct{}{}
		w, mask := s.slot(u)
		s.bits[w] |= mask
	}
	return s
}

// slot returns the word of the filter that uid hashes to, and its three
// bits there. The word comes from the hash's top bits, the bits from its
// low 18, so the two do not overlap for any size the filter can have.
func (s *uidSet) slot(uid string) (int, uint64) {
	h := xxhash.Sum64String(uid)
	// With one word, shift is 64 and the word is 0 (a shift by the width
	// or more gives 0).
	return int(h >> s.shift), 1<<(h&63) | 1<<(h>>6&63) | 1<<(h>>12&63)
}

// mayHave reports whether the filter lets uid through to the map.
func (s *uidSet) mayHave(uid string) bool {
	w, mask := s.slot(uid)
	return s.bits[w]&mask == mask
}

func (s *uidSet) has(uid string) bool {
	if s == nil || !s.mayHave(uid) {
		return false
	}
	_, ok := s.m[uid]
	return ok
}
