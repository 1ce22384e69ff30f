package bucket

import (
	"unsafe"

	"github.com/twmb/murmur3"
)

// Unleash's murmur3 seeds: 0 for strategies (gradual rollout), 86028157 for
// variants (unleash-client-node src/strategy/util.ts, unleash-client-go
// internal/strategies/helpers.go).
const (
	UnleashStrategySeed uint32 = 0
	UnleashVariantSeed  uint32 = 86028157
)

// UnleashWeightScale converts a percentage into an Unleash variant weight:
// the Unleash server stores variant weights on a 0..1000 scale (its
// variantSchema: "an integer between 0 and 1000"; weights of type
// "variable" are spread so that they add up to 1000), and the SDKs normalize
// the variant hash by the total of the weights. A rule's 50/50 is the flag's
// 500/500, normalized by 1000.
const UnleashWeightScale = 10

// murmurSum is murmur3_x86_32(prefix + uid, seed) over UTF-8 bytes, as
// Unleash's Go, Java and Python SDKs hash. (The Node SDK's murmurhash3js
// hashes the low byte of each UTF-16 code unit instead, so for non-ASCII
// ids the Node SDK disagrees with the others; see testdata/README.md.) The
// streaming digest is inlined and stays on the stack.
func murmurSum(seed uint32, prefix []byte, uid string) uint32 {
	d := murmur3.SeedNew32(seed)
	_, _ = d.Write(prefix)
	_, _ = d.Write(unsafe.Slice(unsafe.StringData(uid), len(uid)))
	return d.Sum32()
}

// UnleashNormalized is Unleash's normalizedValue(id, groupId, normalizer,
// seed): murmur3_x86_32(groupId + ":" + id, seed) % normalizer + 1. With
// seed 0 and normalizer 100 it is the gradual-rollout value a strategy
// compares with its percentage; with seed 86028157 and the total weight it
// is the variant target.
func UnleashNormalized(id, groupID string, normalizer, seed uint32) uint32 {
	d := murmur3.SeedNew32(seed)
	_, _ = d.Write(unsafe.Slice(unsafe.StringData(groupID), len(groupID)))
	_, _ = d.Write([]byte{':'})
	_, _ = d.Write(unsafe.Slice(unsafe.StringData(id), len(id)))
	return d.Sum32()%normalizer + 1
}

// UnleashVariant is Unleash's selectVariantDefinition walk: skipping
// weight-0 variants, add each weight to a counter and pick the first variant
// at which the counter reaches target (1..total). It returns -1 when none
// does.
func UnleashVariant(target uint32, weights []int) int {
	counter := 0
	for i, w := range weights {
		if w == 0 {
			continue
		}
		counter += w
		if counter >= int(target) {
			return i
		}
	}
	return -1
}
