package experiment

import (
	"sync"
)

// The request path hands exposures and conversions to the writer through
// shards: a unit's (experiment, unit) key picks one, so requests on
// different cores rarely share a lock, and the events of one unit in one
// experiment stay in order. A shard holds
//
//   - a seen set: the keys of exposures it queued, so that a unit's later
//     requests queue nothing. It is a cache in front of the store, which
//     deduplicates for good: it grows by doubling up to maxSeenSlots and
//     is then cleared, which only costs re-queueing a unit's exposure once;
//   - a queue: fixed-size slots and an arena holding their units' bytes.
//     The writer swaps it for its spare pair, so neither allocates after
//     the first use.
const (
	shardBits = 6
	shards    = 1 << shardBits
	// queueSlots and arenaBytes bound one shard's queue; 64 shards hold
	// 32,768 events (and 1.5 MiB of ids) between two flushes.
	queueSlots = 512
	arenaBytes = queueSlots * 48
	// minSeenSlots and maxSeenSlots bound one shard's seen set: 64 × 8 KiB
	// slots of 8 bytes, 4 MiB in all, for ~390,000 units before a shard
	// clears.
	minSeenSlots = 256
	maxSeenSlots = 8192
)

// slot is one queued event. Strings come from the Spec (immutable) and the
// arena.
type slot struct {
	spec   *Spec
	ts     int64
	value  int64
	off    uint32
	n      uint16
	kind   Kind
	group  uint8
	metric uint8
	// exposes marks a conversion of a request that the experiment's rule
	// claimed: the unit was exposed at ts at the latest.
	exposes bool
}

type shard struct {
	mu    sync.Mutex
	seen  []uint64 // open addressing, linear probing; 0 is empty
	used  int
	queue []slot
	arena []byte
	// spare is the writer's pair, swapped in at each flush; only the
	// writer touches it.
	spareQueue []slot
	spareArena []byte
	_          [64]byte // keep neighbouring shards' locks off one cache line
}

// seenOrAdd reports whether key is in the seen set, adding it if not.
// The caller holds mu.
func (s *shard) seenOrAdd(key uint64) bool {
	if len(s.seen) == 0 {
		s.seen = make([]uint64, minSeenSlots)
	}
	mask := uint64(len(s.seen) - 1)
	i := key & mask
	for ; s.seen[i] != 0; i = (i + 1) & mask {
		if s.seen[i] == key {
			return true
		}
	}
	if (s.used+1)*4 > len(s.seen)*3 {
		s.grow()
		mask = uint64(len(s.seen) - 1)
		for i = key & mask; s.seen[i] != 0; i = (i + 1) & mask {
		}
	}
	s.seen[i] = key
	s.used++
	return false
}

// forget removes key (an exposure that could not be queued), so that the
// unit's next request tries again. Linear probing deletes by moving the
// later entries of the cluster back.
func (s *shard) forget(key uint64) {
	if len(s.seen) == 0 {
		return
	}
	mask := uint64(len(s.seen) - 1)
	i := key & mask
	for s.seen[i] != key {
		if s.seen[i] == 0 {
			return
		}
		i = (i + 1) & mask
	}
	s.seen[i] = 0
	s.used--
	for j := (i + 1) & mask; s.seen[j] != 0; j = (j + 1) & mask {
		k := s.seen[j]
		home := k & mask
		// The entry at j stays if its home lies cyclically in (i, j];
		// otherwise the hole at i is on its probe path and it moves there.
		stays := home > i && home <= j
		if i > j {
			stays = home > i || home <= j
		}
		if !stays {
			s.seen[i], s.seen[j] = k, 0
			i = j
		}
	}
}

// grow doubles the seen set, or clears it at its bound.
func (s *shard) grow() {
	if len(s.seen) >= maxSeenSlots {
		clear(s.seen)
		s.used = 0
		return
	}
	old := s.seen
	s.seen = make([]uint64, 2*len(old))
	mask := uint64(len(s.seen) - 1)
	for _, k := range old {
		if k == 0 {
			continue
		}
		i := k & mask
		for s.seen[i] != 0 {
			i = (i + 1) & mask
		}
		s.seen[i] = k
	}
}

// mix is splitmix64's finalizer: a bijection that spreads the bits of a
// hash, so that the low bits of a key are as good as the high ones.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
