package stats

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// split assigns n units to groups at random in proportion to weights: a
// multinomial draw, as a correct hash-based split produces.
func split(rng *rand.Rand, n int, weights []float64) []int64 {
	total := 0.0
	for _, w := range weights {
		total += w
	}
	units := make([]int64, len(weights))
	for range n {
		units[pick(rng, weights, total)]++
	}
	return units
}

// pick draws one unit's group in proportion to weights, which sum to total.
func pick(rng *rand.Rand, weights []float64, total float64) int {
	u := rng.Float64() * total
	i := 0
	for i < len(weights)-1 && u >= weights[i] {
		u -= weights[i]
		i++
	}
	return i
}

func srmOf(t *testing.T, weights []float64, units []int64) SRM {
	t.Helper()
	in := Input{Experiment: "exp", Control: "g0"}
	for i, w := range weights {
		in.Groups = append(in.Groups, Group{Name: fmt.Sprintf("g%d", i), Weight: w, Units: units[i]})
	}
	res, err := Compute(in)
	if err != nil {
		t.Fatalf("Compute: %v", err)
	}
	return res.SRM
}

// TestSRMCleanSplitsPassAndDropsAreFlagged draws 20 clean splits (seeds
// 1..20, PCG) of 20,000 units for each weighting: none may be flagged at the
// default threshold. Dropping 10% of one group's units must then be flagged
// every time: at 20,000 units for 50/50 (issue 14's planted SRM; the χ²
// noncentrality is ≈ 53, so a miss has odds of ~1e-4 per seed), and at
// 200,000 units for every weighting and group. At 20,000 units a 10% drop
// from a 10% group moves only 200 units and is genuinely not detectable
// at p < 0.001 every time, so no test claims it.
func TestSRMCleanSplitsPassAndDropsAreFlagged(t *testing.T) {
	weightings := [][]float64{{50, 50}, {10, 90}, {20, 30, 50}, {25, 25, 25, 25}}
	for _, weights := range weightings {
		t.Run(fmt.Sprint(weights), func(t *testing.T) {
			for seed := uint64(1); seed <= 20; seed++ {
				rng := rand.New(rand.NewPCG(seed, 14))
				units := split(rng, 20000, weights)
				if s := srmOf(t, weights, units); !s.Judged || !s.OK {
					t.Errorf("seed %d: clean split %v flagged: judged %v ok %v p %v", seed, units, s.Judged, s.OK, show(s.PValue))
				}
				large := split(rng, 200000, weights)
				if s := srmOf(t, weights, large); !s.Judged || !s.OK {
					t.Errorf("seed %d: clean split %v flagged: judged %v ok %v p %v", seed, large, s.Judged, s.OK, show(s.PValue))
				}
				flagsDrops := func(units []int64) {
					t.Helper()
					for drop := range weights {
						dropped := append([]int64(nil), units...)
						dropped[drop] -= dropped[drop] / 10
						if s := srmOf(t, weights, dropped); !s.Judged || s.OK || !s.Alert {
							t.Errorf("seed %d: split %v with 10%% of group %d dropped (%v) not flagged: judged %v ok %v alert %v p %v sequential p %v", seed, units, drop, dropped, s.Judged, s.OK, s.Alert, show(s.PValue), show(s.SequentialPValue))
						}
					}
				}
				flagsDrops(large)
				if len(weights) == 2 && weights[0] == weights[1] {
					flagsDrops(units)
				}
			}
		})
	}
}

// TestSRMAlertSurvivesPeeking reads 20 clean splits per weighting after
// every 10 units, up to 20,000 units, as the gateway's health check reads
// a running experiment. χ² alone, read that often, flags clean splits (the
// test counts them, and needs some, or it would show nothing); Alert, which
// also needs the anytime-valid p-value, must never fire.
func TestSRMAlertSurvivesPeeking(t *testing.T) {
	chi2Flags := 0
	for _, weights := range [][]float64{{50, 50}, {10, 90}, {20, 30, 50}} {
		total := 0.0
		for _, w := range weights {
			total += w
		}
		for seed := uint64(1); seed <= 20; seed++ {
			rng := rand.New(rand.NewPCG(seed, 22))
			units := make([]int64, len(weights))
			flagged := false
			for n := 1; n <= 20000; n++ {
				units[pick(rng, weights, total)]++
				if n%10 != 0 {
					continue
				}
				s := srmOf(t, weights, units)
				if s.Judged && !s.OK && !flagged {
					flagged = true
					chi2Flags++
				}
				if s.Alert {
					t.Fatalf("%v seed %d: a clean split %v alerts after %d units: p %v sequential p %v", weights, seed, units, n, show(s.PValue), show(s.SequentialPValue))
				}
			}
		}
	}
	t.Logf("χ² read every 10 units flagged %d of 60 clean splits", chi2Flags)
	if chi2Flags == 0 {
		t.Error("χ² read every 10 units flagged no clean split: the peeking this test guards against did not happen")
	}
}
