package rule

import (
	"fmt"
	"math/bits"
	"testing"
)

func TestUIDSet(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 1000, 100_000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			uids := make([]string, n)
			for i := range uids {
				uids[i] = fmt.Sprintf("user-%07d", i)
			}
			s := newUIDSet(uids)
			if (s == nil) != (n == 0) {
				t.Fatalf("newUIDSet of %d ids returned %v", n, s)
			}
			for _, u := range uids {
				if !s.has(u) {
					t.Fatalf("%q is in the set but has says no", u)
				}
			}
			// Ids near the members in every way but not in the set.
			for i := range max(n, 1000) {
				for _, u := range []string{fmt.Sprintf("user-%07d", n+i), fmt.Sprintf("User-%07d", i), fmt.Sprintf("user-%07d ", i), ""} {
					if s.has(u) {
						t.Fatalf("%q is not in the set but has says yes", u)
					}
				}
			}
			if s == nil {
				return
			}
			// The filter has at least 8 bits per id, each id sets at most
			// three, so at most 3 in 8 of its bits are set.
			set := 0
			for _, w := range s.bits {
				set += bits.OnesCount64(w)
			}
			if total := 64 * len(s.bits); total < 8*n || set*8 > 3*total {
				t.Errorf("filter of %d bits with %d set for %d ids", total, set, n)
			}
			// Most misses never reach the map: with three bits per id in
			// one word, about 4% of them pass the filter (with one bit
			// per id, 12%).
			if n >= 1000 {
				passed := 0
				const probes = 100_000
				for i := range probes {
					if s.mayHave(fmt.Sprint(1_000_000_000 + i*7919)) {
						passed++
					}
				}
				if passed*100 > 6*probes {
					t.Errorf("%d of %d ids not in the set passed the filter (%.1f%%), want under 6%%", passed, probes, 100*float64(passed)/probes)
				}
			}
		})
	}
}

func BenchmarkUIDSetMiss(b *testing.B) {
	uids := make([]string, 100_000)
	for i := range uids {
		uids[i] = fmt.Sprintf("wl-%07d", i)
	}
	s := newUIDSet(uids)
	probe := make([]string, 4096)
	for i := range probe {
		probe[i] = fmt.Sprint(1_000_000_000 + i*7919)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if s.has(probe[i&4095]) {
			b.Fatal("hit")
		}
	}
}
