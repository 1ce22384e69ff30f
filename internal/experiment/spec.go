package experiment

import (
	"cmp"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/rule"
)

// GroupHoldout is the group of held-out units (router.GroupHoldout): the
// holdout's units of an experiment are counted as a group of their own.
const GroupHoldout = router.GroupHoldout

// Spec is one ab rule's experiment as one snapshot describes it. It is
// immutable once in a Catalog.
type Spec struct {
	// Rule is the rule key; ID the experiment_id the data is kept under.
	Rule, ID string
	// Version is the rule's stored version, recorded with each first
	// exposure.
	Version int64
	// Groups are the rule's groups in order, then GroupHoldout.
	Groups []string
	// Weights are each group's expected share of the units, in percent:
	// the rule's weights scaled by what the holdout leaves, and the
	// holdout's percent last.
	Weights []float64
	// Control names the control group.
	Control string
	Metrics []MetricSpec
	// Sequential and Tuning are the rule's statistics options.
	Sequential bool
	Tuning     float64
	// RolledBack is true while one-click rollback sends everyone to
	// control: new units are then not exposed (they were not randomized).
	RolledBack bool
	// HoldoutPercent is the configured holdout (0: none).
	HoldoutPercent float64

	report *router.Report // the snapshot's shared Report for the rule
	seed   uint64         // xxh64 of ID, mixed into the dedup key
	// alloc identifies the allocation (Groups and Weights, the holdout's
	// share included), which first exposures carry: when it changes, the
	// sample-ratio check starts a new phase (see phase.go).
	alloc uint64
}

// MetricSpec is one metric of a Spec.
type MetricSpec struct {
	Name     string
	Binomial bool
	Match    *rule.Matcher
	// Header is the index of the metric's header in the rule's Report, or -1.
	Header int
	header string
}

// Catalog is every experiment of one snapshot, indexed for the request
// path, with the settings that may change on reload. It is immutable and
// safe for concurrent use.
type Catalog struct {
	byRule   map[string]*Spec
	byID     map[string][]*Spec
	matchers []matcher
	// byMetric lists, per metric name, the experiments that declare it
	// (once per experiment id), for events.
	byMetric map[string][]metricRef
	rules    []string // rule keys, sorted
	// Window is the conversion window.
	Window time.Duration
	// Freeze is whether a sample-ratio mismatch rolls the rule back.
	Freeze bool
}

// matcher is a metric whose matching requests convert units.
type matcher struct {
	spec   *Spec
	metric uint8
	m      *rule.Matcher
}

type metricRef struct {
	spec   *Spec
	metric int
}

// Settings are the experiment settings of the config that may change live.
type Settings struct {
	// Window is the conversion window (default 72h).
	Window time.Duration
	// Freeze rolls an experiment back on a sample-ratio mismatch
	// (experiments.srm_action: freeze).
	Freeze bool
}

// DefaultWindow is the conversion window when Settings leave it 0.
const DefaultWindow = 72 * time.Hour

// NewCatalog describes the ab rules of snap. Rules are taken in key order,
// so that when two rules share an experiment id the same one defines its
// metrics on every gateway.
func NewCatalog(snap *router.Snapshot, set Settings) *Catalog {
	c := &Catalog{byRule: map[string]*Spec{}, byID: map[string][]*Spec{}, byMetric: map[string][]metricRef{}, Window: cmp.Or(set.Window, DefaultWindow), Freeze: set.Freeze}
	if snap == nil {
		return c
	}
	keys := make([]string, 0, len(snap.RuleSet))
	for k, r := range snap.RuleSet {
		if r.Type == rule.TypeAB && r.Source.ExperimentID != "" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	c.rules = keys
	hold := 0.0
	if h := snap.Holdout(); h != nil {
		hold = h.Percent
	}
	type expMetric struct{ id, name string }
	seen := map[expMetric]bool{}
	for _, k := range keys {
		r := snap.RuleSet[k]
		sp := &Spec{Rule: k, ID: r.Source.ExperimentID, Version: snap.Version(k), RolledBack: snap.RolledBack(k),
			Sequential: r.Source.Sequential, Tuning: r.Source.SequentialTuning, HoldoutPercent: hold,
			report: snap.Report(k), seed: xxhash.Sum64String(r.Source.ExperimentID)}
		for i, g := range r.Groups {
			sp.Groups = append(sp.Groups, g.Group)
			sp.Weights = append(sp.Weights, r.Weights()[i]*(100-hold)/100)
		}
		sp.Groups = append(sp.Groups, GroupHoldout)
		sp.Weights = append(sp.Weights, hold)
		sp.alloc = allocOf(sp.Groups, sp.Weights)
		if cg := r.ControlGroup(); cg != nil {
			sp.Control = cg.Group
		}
		for _, m := range r.Metrics {
			ms := MetricSpec{Name: m.Name, Binomial: m.Binomial, Match: m.Match, Header: m.Header}
			if m.Header >= 0 {
				ms.header = r.ReportHeaders[m.Header]
			}
			sp.Metrics = append(sp.Metrics, ms)
		}
		c.byRule[k] = sp
		c.byID[sp.ID] = append(c.byID[sp.ID], sp)
		for i, m := range sp.Metrics {
			em := expMetric{sp.ID, m.Name}
			if seen[em] {
				continue // another rule of this experiment declared it first
			}
			seen[em] = true
			c.byMetric[m.Name] = append(c.byMetric[m.Name], metricRef{sp, i})
			if m.Match != nil {
				c.matchers = append(c.matchers, matcher{spec: sp, metric: uint8(i), m: m.Match})
			}
		}
	}
	return c
}

// Spec returns the experiment of rule key, or of the experiment id key
// when no rule has that key; nil if neither.
func (c *Catalog) Spec(key string) *Spec {
	if sp := c.byRule[key]; sp != nil {
		return sp
	}
	if l := c.byID[key]; len(l) > 0 {
		return l[0]
	}
	return nil
}

// Rules returns the keys of the catalog's ab rules, sorted.
func (c *Catalog) Rules() []string { return c.rules }

// experiments lists the catalog's experiment ids.
func (c *Catalog) experiments() []string {
	ids := make([]string, 0, len(c.byID))
	for id := range c.byID {
		ids = append(ids, id)
	}
	return ids
}

// group returns the index of the group name in sp.Groups, or -1.
func (sp *Spec) group(name string) int {
	for i, g := range sp.Groups {
		if g == name {
			return i
		}
	}
	return -1
}

// headerMetric returns the metric that reads the response header name, or
// -1; header names compare case-insensitively.
func (sp *Spec) headerMetric(name string) int {
	for i := range sp.Metrics {
		if h := sp.Metrics[i].header; h != "" && equalFold(h, name) {
			return i
		}
	}
	return -1
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
