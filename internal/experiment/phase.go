package experiment

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"strconv"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Phases of an experiment's sample-ratio check.
//
// The check compares the units of each group with the shares the
// allocation (the groups' weights, and the holdout's share) expects. Units
// keep the group they were first exposed in for good, so when the
// allocation changes (new weights, a holdout added, removed or resized;
// both apply live) the units assigned before cannot fit the new shares,
// and judging them against it flags and freezes every experiment at once
// with no new traffic. Like GrowthBook, which starts a new phase when an
// experiment's traffic split changes, the check then judges only the units
// assigned under the current allocation: those first exposed at or after
// the phase began, by a gateway whose catalog had that allocation (so a
// request decided before the change and finished after it, or a fleet
// member still serving the old allocation, does not count in it). A weight-0
// group that receives units in the phase is a mismatch outright, as
// before; its units of an earlier phase are not. Groups, conversions and
// comparisons keep counting every unit.
//
// A new phase also starts when an operator lifts a freeze the check made
// (graygate resume of a rule frozen by experiments.srm_action: freeze):
// the cause is taken as fixed, and only a new mismatch, among the units
// assigned from then on, flags the rule again. The phase records which
// rules the check froze, so that a restart, or another gateway of a fleet,
// neither alerts again nor freezes the resumed rule again. The first
// phase (since 0) is the whole experiment.
//
// The phase lives with the experiment's data (the data dir's journal, or
// Redis), written compare-and-set, so restarts and every gateway of a
// fleet judge the same units.
type phase struct {
	// Alloc is the allocation's id (Spec.alloc, hex) and Weights the
	// allocation itself, for people reading the store.
	Alloc   string             `json:"alloc"`
	Weights map[string]float64 `json:"weights"`
	// Since is when the phase began, Unix ms; 0 for the first phase.
	Since int64 `json:"since,omitempty"`
	// Frozen lists the rules the check froze in this phase, each with
	// the version whose split it judged; the freeze made version+1.
	Frozen map[string]int64 `json:"frozen,omitempty"`
}

// allocOf identifies an allocation: the groups and their shares in order.
func allocOf(groups []string, weights []float64) uint64 {
	d := xxhash.New()
	for i, g := range groups {
		_, _ = d.WriteString(g)
		_, _ = d.Write([]byte{0})
		_, _ = d.WriteString(strconv.FormatFloat(weights[i], 'g', -1, 64))
		_, _ = d.Write([]byte{0})
	}
	return d.Sum64()
}

// parsePhase decodes a stored phase; nil or damaged is the zero phase,
// which the next check replaces.
func parsePhase(raw []byte) phase {
	var p phase
	if len(raw) > 0 && json.Unmarshal(raw, &p) != nil {
		return phase{}
	}
	return p
}

func (p *phase) encode() []byte {
	b, _ := json.Marshal(p) // map keys sorted: equal phases encode alike
	return b
}

// nextPhase is the phase sp's experiment is in given its stored phase cur,
// the catalog and the freezes the check made that cur does not record yet
// (pending: rule → version judged), at now (Unix ms). It is cur unless:
// nothing is stored yet (the first phase, since 0); the allocation
// changed; or a rule the check froze was resumed since (not rolled back
// at a version past the freeze); the last two begin a phase at now.
// Markers of rules still frozen are kept; those of rules gone from the
// experiment are dropped.
func nextPhase(cat *Catalog, sp *Spec, cur phase, pending map[string]int64, now int64) phase {
	next := phase{Alloc: strconv.FormatUint(sp.alloc, 16), Weights: map[string]float64{}, Since: cur.Since}
	for i, g := range sp.Groups {
		if sp.Weights[i] > 0 { // Alloc covers the others; this keeps the record short
			next.Weights[g] = sp.Weights[i]
		}
	}
	restart := cur.Alloc != "" && cur.Alloc != next.Alloc
	if cur.Alloc == "" {
		next.Since = 0
	}
	marks := maps.Clone(cur.Frozen)
	for k, v := range pending {
		if marks == nil {
			marks = map[string]int64{}
		}
		marks[k] = max(marks[k], v)
	}
	for k, v := range marks {
		o := cat.byRule[k]
		switch {
		case o == nil || o.ID != sp.ID:
			// no longer a rule of this experiment
		case !o.RolledBack && o.Version > v+1:
			restart = true // resumed after the freeze
		default:
			if next.Frozen == nil {
				next.Frozen = map[string]int64{}
			}
			next.Frozen[k] = v
		}
	}
	if restart {
		next.Since = now
	}
	return next
}

// judged returns the units per group the sample-ratio check judges in
// phase next, given the stored phase cur and the store's counts: every
// unit in the first phase, the phase's units in a later one, and none in
// a phase not stored yet (it begins now).
func judged(next, cur phase, c counts) map[string]int64 {
	switch {
	case next.Since != cur.Since:
		return map[string]int64{}
	case next.Since == 0:
		return c.units
	}
	return c.phaseUnits
}

// frozeAt is a freeze the check made (rule → frozeAt in Recorder.froze),
// until the experiment's phase records it.
type frozeAt struct {
	id      string
	version int64
}

// phaseCheck is what reconcile found for one experiment.
type phaseCheck struct {
	ok    bool
	c     counts
	ph    phase
	units map[string]int64 // judged
}

// reconcile reads sp's experiment's counts and phase and, when the phase
// must change (nextPhase), writes it compare-and-set. It runs on the
// writer. ok is false when the store could not be read or written, or
// another gateway changed the phase meanwhile: the next check judges then.
func (r *Recorder) reconcile(ctx context.Context, cat *Catalog, sp *Spec, now time.Time) phaseCheck {
	r.storeBegin()
	c, err := r.store.counts(ctx, sp.ID)
	r.storeEnd()
	if err != nil {
		return phaseCheck{}
	}
	cur := parsePhase(c.phase)
	pending := map[string]int64{}
	r.froze.Range(func(k, v any) bool {
		if f := v.(frozeAt); f.id == sp.ID {
			pending[k.(string)] = f.version
		}
		return true
	})
	next := nextPhase(cat, sp, cur, pending, now.UnixMilli())
	raw := next.encode()
	if !bytes.Equal(raw, c.phase) {
		reset := cur.Alloc == "" || next.Since != cur.Since
		r.storeBegin()
		ok, err := r.store.setPhase(ctx, sp.ID, c.phase, raw, next.Since, sp.alloc, reset)
		r.storeEnd()
		if err != nil {
			r.log.Error("experiment store: record the phase of an experiment", "experiment", sp.ID, "err", err)
			return phaseCheck{}
		}
		if !ok {
			return phaseCheck{}
		}
		if reset && next.Since != 0 {
			why := "its allocation changed (weights or the holdout's share)"
			if cur.Alloc == next.Alloc {
				why = "a rule frozen for a sample ratio mismatch was resumed"
			}
			r.log.Info("experiment: a new phase begins; the sample-ratio check judges only the units assigned from now on",
				"experiment", sp.ID, "reason", why, "weights", next.Weights, "since", time.UnixMilli(next.Since).UTC())
		}
		if reset {
			c.phaseUnits = map[string]int64{}
		}
		cur = next
	}
	for k := range pending {
		r.froze.Delete(k)
	}
	return phaseCheck{ok: true, c: c, ph: next, units: judged(next, cur, c)}
}
