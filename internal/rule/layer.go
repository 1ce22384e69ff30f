package rule

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/graygate/graygate/internal/bucket"
	"github.com/graygate/graygate/internal/strict"
)

// LayerSlots is the number of slots in every layer.
const LayerSlots = 10000

// layer is an ab rule's place in a layer of mutually exclusive experiments
// (Tang et al., "Overlapping Experiment Infrastructure", KDD 2010): a user's
// slot is xxh64(layer_salt + ":" + uid) % 10000, the same for every rule of
// the layer, and the rule is in scope only for slots in [start, end). Group
// assignment inside the range keeps the rule's own salt, so it is
// independent of the slot; different layers have different salts, so they
// are orthogonal.
type layer struct {
	name, salt string
	slots      *bucket.Hasher
	start, end uint64
}

func newLayer(r *Rule) *layer {
	if r.Layer == "" {
		return nil
	}
	salt := r.LayerSalt
	if salt == "" {
		salt = r.Layer
	}
	return &layer{name: r.Layer, salt: salt, slots: bucket.New(bucket.XXH64, salt), start: uint64(r.LayerRange[0]), end: uint64(r.LayerRange[1])}
}

// holds reports the user's slot and whether the rule's range holds it.
func (l *layer) holds(uid string) (uint64, bool) {
	s := l.slots.Bucket(uid)
	return s, l.start <= s && s < l.end
}

func (l *layer) String() string { return fmt.Sprintf("[%d, %d]", l.start, l.end) }

// LayerName returns the rule's layer, or "" if it has none.
func (c *Compiled) LayerName() string {
	if c.layer == nil {
		return ""
	}
	return c.layer.name
}

// LayerConflicts reports what keeps c from serving beside others (the
// rules that serve): a layer_range that overlaps another rule's, or a
// layer_salt that differs from the layer's, or an experiment_id that
// another ab rule uses with other groups, weights, hashing or metric types
// (experimentConflicts), each naming the other rule. A rule of others with
// c's key is the version c replaces and is skipped. Every cross-rule check
// (a PUT, a config file, graygate validate, the snapshot) comes here.
func LayerConflicts(c *Compiled, others []*Compiled) error {
	errs := experimentConflicts(c, others)
	if c.layer == nil {
		return errors.Join(errs...)
	}
	var mates []*Compiled
	for _, o := range others {
		if o.Key == c.Key || o.layer == nil || o.layer.name != c.layer.name {
			continue
		}
		mates = append(mates, o)
	}
	slices.SortFunc(mates, func(a, b *Compiled) int { return cmp.Compare(a.layer.start, b.layer.start) })
	for _, o := range mates {
		if o.layer.salt != c.layer.salt {
			errs = append(errs, strict.Errorf("layer_salt", "%q differs from the salt %q that rule %q uses in layer %q; every rule of a layer must use the same slots",
				c.layer.salt, o.layer.salt, o.Key, c.layer.name))
		}
		if c.layer.start < o.layer.end && o.layer.start < c.layer.end {
			errs = append(errs, strict.Errorf("layer_range", "%s overlaps %s of rule %q in layer %q (free slots: %s)",
				c.layer, o.layer, o.Key, c.layer.name, formatRanges(freeRanges(mates))))
		}
	}
	return errors.Join(errs...)
}

// CheckLayers reports every pair of rules that overlap in a layer or
// disagree on its salt, or share an experiment they disagree on. The router refuses to build a snapshot from such a
// set, so that a store that somehow holds one keeps the old rules serving.
func CheckLayers(rules []*Compiled) error {
	var errs []error
	for i, c := range rules {
		if err := LayerConflicts(c, rules[:i]); err != nil {
			errs = append(errs, fmt.Errorf("rule %q: %w", c.Key, err))
		}
	}
	return errors.Join(errs...)
}

// Layer describes one layer for GET /api/v1/layers.
type Layer struct {
	Name  string      `json:"name"`
	Salt  string      `json:"layer_salt"`
	Slots int         `json:"slots"`
	Rules []LayerRule `json:"rules"`
	// Free lists the half-open slot ranges no rule holds.
	Free      [][2]int `json:"free"`
	FreeSlots int      `json:"free_slots"`
}

// LayerRule is one rule's share of a layer.
type LayerRule struct {
	Key        string `json:"key"`
	Experiment string `json:"experiment_id"`
	Route      string `json:"route,omitempty"`
	Range      [2]int `json:"layer_range"`
	Slots      int    `json:"slots"`
}

// Layers lists the layers the rules use, by name, each with its rules in
// slot order and its free slots.
func Layers(rules []*Compiled) []Layer {
	by := map[string][]*Compiled{}
	for _, c := range rules {
		if c.layer != nil {
			by[c.layer.name] = append(by[c.layer.name], c)
		}
	}
	out := make([]Layer, 0, len(by))
	for name, rs := range by {
		slices.SortFunc(rs, func(a, b *Compiled) int {
			return cmp.Or(cmp.Compare(a.layer.start, b.layer.start), cmp.Compare(a.Key, b.Key))
		})
		l := Layer{Name: name, Salt: rs[0].layer.salt, Slots: LayerSlots, Rules: []LayerRule{}}
		for _, c := range rs {
			l.Rules = append(l.Rules, LayerRule{Key: c.Key, Experiment: c.Source.ExperimentID, Route: c.Route,
				Range: [2]int{int(c.layer.start), int(c.layer.end)}, Slots: int(c.layer.end - c.layer.start)})
		}
		l.Free = freeRanges(rs)
		for _, f := range l.Free {
			l.FreeSlots += f[1] - f[0]
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b Layer) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// freeRanges returns the slots of [0, LayerSlots) that none of rules (sorted
// by start) holds.
func freeRanges(rules []*Compiled) [][2]int {
	free := [][2]int{}
	at := uint64(0)
	for _, c := range rules {
		if c.layer.start > at {
			free = append(free, [2]int{int(at), int(c.layer.start)})
		}
		at = max(at, c.layer.end)
	}
	if at < LayerSlots {
		free = append(free, [2]int{int(at), LayerSlots})
	}
	return free
}

func formatRanges(rs [][2]int) string {
	if len(rs) == 0 {
		return "none"
	}
	s := ""
	for i, r := range rs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("[%d, %d]", r[0], r[1])
	}
	return s
}
