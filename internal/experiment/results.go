package experiment

import (
	"context"
	"fmt"
	"math/big"
	"slices"
	"time"

	"github.com/graygate/graygate/internal/stats"
)

// Results is what GET /api/v1/experiments/{key}/results returns: the
// statistics of package stats, and where they come from.
type Results struct {
	*stats.Results
	// Rule is the ab rule whose groups and metrics the results use.
	Rule string `json:"rule"`
	// Store is "file" (this gateway's data dir) or "redis" (the fleet's).
	Store string `json:"store"`
	// RolledBack is true while the rule is rolled back (or frozen): new
	// units are not exposed.
	RolledBack bool `json:"rolled_back"`
	// ConversionWindow is how long after exposure conversions count.
	ConversionWindow string `json:"conversion_window"`
	// SRMSince, when set, is when the experiment's current phase began
	// (RFC 3339): its allocation (weights, or the holdout's share)
	// changed then, or a freeze for a sample-ratio mismatch was lifted.
	// srm then judges only the units assigned since, SRMUnits per group,
	// as a new phase does in GrowthBook; groups and comparisons count
	// every unit. Absent, srm judges every unit.
	SRMSince string           `json:"srm_since,omitempty"`
	SRMUnits map[string]int64 `json:"srm_units,omitempty"`
}

// Results computes the results of the experiment of rule key (or of the
// experiment id key). Counts come from the store, so with Redis they are
// the fleet's; what the request path queued in the last flush interval is
// not in them yet. Errors wrap ErrUnknown or ErrUnavailable.
func (r *Recorder) Results(ctx context.Context, key string) (*Results, error) {
	cat := r.cat.Load()
	sp := cat.Spec(key)
	if sp == nil {
		return nil, fmt.Errorf("%w: no ab rule or experiment id %q", ErrUnknown, key)
	}
	c, err := r.store.counts(ctx, sp.ID)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	means := map[string]map[string]*acc{}
	for _, m := range sp.Metrics {
		if m.Binomial {
			continue
		}
		byGroup := map[string]*acc{}
		err := r.store.values(ctx, sp.ID, m.Name, func(group string, total int64) {
			a := byGroup[group]
			if a == nil {
				a = &acc{}
				byGroup[group] = a
			}
			a.add(total)
		})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		means[m.Name] = byGroup
	}
	res, err := stats.Compute(input(sp, c, means))
	if err != nil {
		return nil, err
	}
	out := &Results{Results: res, Rule: sp.Rule, Store: r.store.kind(), RolledBack: sp.RolledBack, ConversionWindow: cat.Window.String()}
	// The sample-ratio check of the current phase, as the gateway's own
	// check judges it (a phase it has yet to record begins now).
	cur := parsePhase(c.phase)
	next := nextPhase(cat, sp, cur, nil, r.opts.Now().UnixMilli())
	if next.Since != 0 {
		phased, err := stats.Compute(input(sp, counts{units: judged(next, cur, c)}, nil))
		if err != nil {
			return nil, err
		}
		res.SRM = phased.SRM
		out.SRMSince = time.UnixMilli(next.Since).UTC().Format(time.RFC3339Nano)
		out.SRMUnits = make(map[string]int64, len(phased.Groups))
		for _, g := range phased.Groups {
			out.SRMUnits[g.Name] = g.Units
		}
	}
	return out, nil
}

// input assembles the statistics input of sp from the store's counts and,
// for mean metrics, the exact sums of the units' totals (means: metric →
// group → sums; nil leaves metrics out, for the SRM check). Groups are the
// rule's in order, then the holdout's units (when a holdout is configured
// or it has units), then groups the data holds that the rule no longer
// has, with weight 0, so that their units are neither lost nor hidden.
func input(sp *Spec, c counts, means map[string]map[string]*acc) stats.Input {
	in := stats.Input{Experiment: sp.ID, RuleVersion: sp.Version, Control: sp.Control,
		Options: stats.Options{Sequential: sp.Sequential, SequentialTuning: sp.Tuning}}
	var names []string
	var weights []float64
	for i, g := range sp.Groups {
		if g == GroupHoldout && sp.HoldoutPercent == 0 && c.units[g] == 0 {
			continue
		}
		names, weights = append(names, g), append(weights, sp.Weights[i])
	}
	var extra []string
	for g := range c.units {
		if sp.group(g) < 0 {
			extra = append(extra, g)
		}
	}
	slices.Sort(extra)
	for _, g := range extra {
		names, weights = append(names, g), append(weights, 0)
	}
	for i, g := range names {
		grp := stats.Group{Name: g, Weight: weights[i], Units: c.units[g]}
		if means != nil {
			for _, m := range sp.Metrics {
				sm := stats.Metric{Name: m.Name, Type: stats.Mean, Units: grp.Units}
				if m.Binomial {
					sm.Type = stats.Binomial
					sm.Count = c.converted[metricGroup{m.Name, g}]
					sm.Sum, sm.SumSquares = float64(sm.Count), float64(sm.Count)
				} else if a := means[m.Name][g]; a != nil {
					sm.Count = a.n
					sm.Sum, sm.SumSquares = a.floats()
				}
				grp.Metrics = append(grp.Metrics, sm)
			}
		}
		in.Groups = append(in.Groups, grp)
	}
	return in
}

// acc sums units' totals (µ-units) exactly, so that the sum and the sum of
// squares do not depend on the order the store returns them in: a fleet's
// results and one gateway's agree to the last bit.
type acc struct {
	n           int64
	sum, sq, tm big.Int
}

func (a *acc) add(v int64) {
	a.n++
	a.tm.SetInt64(v)
	a.sum.Add(&a.sum, &a.tm)
	a.tm.Mul(&a.tm, &a.tm)
	a.sq.Add(&a.sq, &a.tm)
}

var (
	bigMicro  = big.NewInt(1e6)
	bigMicro2 = big.NewInt(1e12)
)

// floats returns the sum and the sum of squares in the metric's units,
// each correctly rounded.
func (a *acc) floats() (sum, sq float64) {
	sum, _ = new(big.Rat).SetFrac(&a.sum, bigMicro).Float64()
	sq, _ = new(big.Rat).SetFrac(&a.sq, bigMicro2).Float64()
	return sum, sq
}
