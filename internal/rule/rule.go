// Package rule defines graygate's routing rules in the two JSON shapes of
// seed 000 section 1.3 (gray and ab), validates them with path-named errors,
// and compiles them into immutable evaluators.
//
// ab rules may share a layer (layer.go): each owns a range of the layer's
// slots, so experiments of one layer never share a user; and the global
// holdout (holdout.go) keeps one stable population out of every
// experiment. Overlap, and ab rules sharing an experiment_id with other
// groups (experiment.go), are cross-rule properties, checked by
// LayerConflicts when a rule is stored and by CheckLayers when a snapshot
// is built.
package rule

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/bucket"
	"github.com/graygate/graygate/internal/match"
	"github.com/graygate/graygate/internal/rulekey"
	"github.com/graygate/graygate/internal/strict"
)

// Rule types.
const (
	TypeGray = "gray"
	TypeAB   = "ab"
	// TypeTag is seed 004's tag rule (section 3.1.3): {"rules": [tag
	// conditions], "target": ...}. Every user whose tags meet all the
	// conditions goes to target; it is a gray rule at 100% scoped by tags.
	TypeTag = "tag"
)

// MaxWhitelist is the most entries one rule's white_list may hold.
const MaxWhitelist = 100000

// Default priorities: gray rules are evaluated before ab rules, then by key.
const (
	DefaultGrayPriority = 100
	DefaultABPriority   = 200
)

// Rule is one rule as stored and exchanged: the union of the gray and ab
// shapes of seed 000, plus graygate's extensions (priority, hash, route, tags,
// control). Field comments are the reference documentation.
type Rule struct {
	// Key identifies the rule; it is also the gray gate's hash salt.
	Key string `json:"key"`
	// Type is "gray" or "ab".
	Type string `json:"type"`
	// RuleName is a human-readable name.
	RuleName string `json:"rule_name,omitempty"`
	// Route limits the rule to one configured route; empty applies it to all.
	Route string `json:"route,omitempty"`
	// Priority orders evaluation, lowest first (default 100 for gray, 200 for ab; ties by key).
	Priority *int `json:"priority,omitempty"`
	// Hash is "xxh64" (default), "crc32" (seed 000 compatible),
	// "growthbook" (GrowthBook's hash version 2) or "unleash" (Unleash's
	// normalized murmur3 hash).
	Hash string `json:"hash,omitempty"`
	// Seed overrides the GrowthBook seed ("hash": "growthbook" only):
	// by default the experiment_id of an ab rule, the key of a gray rule.
	Seed string `json:"seed,omitempty"`
	// GroupID overrides the Unleash group id ("hash": "unleash" only); by
	// default the rule key.
	GroupID string `json:"group_id,omitempty"`
	// Conditions scope the rule; all must match.
	Conditions *match.Conditions `json:"conditions,omitempty"`
	// When is a CEL expression over request, user and client that must
	// also hold; it is type-checked and cost-limited when the rule is stored.
	When string `json:"when,omitempty"`

	// GrayPercent is the share of users sent to the gray target, 0..100 with up to two decimals (gray).
	GrayPercent *float64 `json:"gray_percent,omitempty"`
	// WhiteList holds "uid:ID", "ip:ADDR" or "ip:CIDR" entries that always go gray (gray).
	WhiteList []string `json:"white_list,omitempty"`
	// Targets are the gray and stable upstreams (gray).
	Targets *Targets `json:"targets,omitempty"`
	// TargetTags overrides the X-Gray-Tag coloring value per target (gray); it defaults to the group name.
	TargetTags *TargetTags `json:"target_tags,omitempty"`
	// Breaker tunes the circuit breaker guarding the gray target (gray);
	// unset fields take the config's breaker defaults.
	Breaker *breaker.Config `json:"breaker,omitempty"`
	// Mirror sends shadow copies of some of the requests the rule leaves
	// on stable to a mirror target, and diffs its answers (gray).
	Mirror *Mirror `json:"mirror,omitempty"`
	// Rollout is a progressive delivery plan (gray): steps that raise
	// gray_percent, pause and analyse, with an automatic abort; see
	// rollout.go and package rollout.
	Rollout *Rollout `json:"rollout,omitempty"`

	// Rules are seed 004's tag conditions, ANDed (tag rules).
	Rules []match.TagCond `json:"rules,omitempty"`
	// Target is where a tag rule sends the users it matches (tag rules).
	Target string `json:"target,omitempty"`
	// Stable is a tag rule's fallback target when its target fails or its
	// breaker is open (tag rules; default: the route's default upstream).
	Stable string `json:"stable,omitempty"`

	// ExperimentID salts the ab group assignment (ab).
	ExperimentID string `json:"experiment_id,omitempty"`
	// Groups are the experiment groups; weights sum to 100 (ab).
	Groups []Group `json:"groups,omitempty"`
	// Layer names the layer of mutually exclusive experiments the rule
	// belongs to (ab); it needs LayerRange.
	Layer string `json:"layer,omitempty"`
	// LayerRange is [start, end]: the half-open range of the layer's 10000
	// slots the rule is in scope for (ab). Ranges of one layer must not
	// overlap.
	LayerRange []int `json:"layer_range,omitempty"`
	// LayerSalt salts the layer's slots, xxh64(layer_salt + ":" + uid) %
	// 10000 (ab; default: the layer name). Every rule of a layer must use
	// the same salt.
	LayerSalt string `json:"layer_salt,omitempty"`
	// Metrics are what the experiment measures of its units (ab; see
	// Metric and package experiment).
	Metrics []Metric `json:"metrics,omitempty"`
	// Sequential makes the experiment's confidence intervals and p-values
	// always valid, so that looking at the results often does not inflate
	// false positives (ab).
	Sequential bool `json:"sequential,omitempty"`
	// SequentialTuning is the always-valid interval's tuning parameter
	// (ab, with sequential; default 5000).
	SequentialTuning float64 `json:"sequential_tuning,omitempty"`
}

// Targets are a gray rule's two upstreams: host:port, a URL, or an upstream name.
type Targets struct {
	Gray   string `json:"gray"`
	Stable string `json:"stable"`
}

// headerValue checks a value the gateway writes into a header (a group
// name goes out in X-Gray-Group and, by default, X-Gray-Tag; a tag in
// X-Gray-Tag): at most 256 bytes of a valid field value (RFC 9110 section
// 5.5), so that no control character (CR, LF, NUL) can end the field early
// or inject another one, and no whitespace at either end that the reader
// would trim away. An empty v is left to the caller.
// weightHundredths converts a group's weight (a percentage) into
// hundredths of a percent, the unit the group walks count in, or says what
// is wrong with it. hash is the rule's "hash": Unleash stores a variant's
// weight as an integer in tenths of a percent (0..1000), so a rule hashed
// "unleash" takes weights in 0.1% steps, the others in 0.01% steps, as
// gray_percent.
func weightHundredths(hash string, w float64) (int, string) {
	if math.IsNaN(w) || w < 0 || w > 100 {
		return 0, fmt.Sprintf("must be 0..100, got %v", w)
	}
	h := math.Round(w * 100)
	if math.Abs(w*100-h) > 1e-6 {
		return 0, fmt.Sprintf("allows at most two decimals, got %v", w)
	}
	if hash == "unleash" && int(h)%(100/bucket.UnleashWeightScale) != 0 {
		return 0, fmt.Sprintf("allows one decimal with \"hash\": \"unleash\" (Unleash stores a variant's weight in tenths of a percent), got %v", w)
	}
	return int(h), ""
}

func headerValue(path, v string) error {
	const maxLen = 256
	switch {
	case len(v) > maxLen:
		return strict.Errorf(path, "is %d bytes; at most %d are allowed", len(v), maxLen)
	case !attr.ValidFieldValue(v):
		return strict.Errorf(path, "must not contain control characters (it goes out in a header), got %q", v)
	case v != strings.Trim(v, " \t"):
		return strict.Errorf(path, "must not start or end with a space (it goes out in a header), got %q", v)
	}
	return nil
}

// TargetTags are a gray rule's coloring values.
type TargetTags struct {
	Gray   string `json:"gray,omitempty"`
	Stable string `json:"stable,omitempty"`
}

// Group is one experiment group of an ab rule.
type Group struct {
	Name string `json:"name"`
	// Weight is the group's share of the users, in percent: 0..100 with
	// up to two decimals (one with "hash": "unleash"); a rule's weights sum
	// to 100.
	Weight float64 `json:"weight"`
	Target string  `json:"target"`
	// Tag is the coloring value (default: the group name).
	Tag string `json:"tag,omitempty"`
	// Control marks the group that one-click rollback sends everyone to (default: the first).
	Control bool `json:"control,omitempty"`
}

// ValidKey reports whether k is a valid rule key; the store enforces the
// same form.
func ValidKey(k string) bool { return rulekey.Valid(k) }

// Decode strictly decodes one rule: unknown fields and type mismatches are
// errors named by path. On error the returned rule holds what did decode,
// so that its semantics can be checked too (see Parse). Decode does not
// validate semantics; see Validate.
func Decode(data []byte) (Rule, error) {
	var r Rule
	err := strict.Decode(data, &r)
	if err != nil && r.Rollout != nil {
		r.Rollout.markUndecoded(err)
	}
	return r, err
}

// EffectivePriority returns the priority the rule is evaluated with.
func (r *Rule) EffectivePriority() int {
	if r.Priority != nil {
		return *r.Priority
	}
	if r.Type == TypeAB {
		return DefaultABPriority
	}
	return DefaultGrayPriority
}

// EffectiveType returns the rule's type; seed 004's shape has no "type"
// field and is a tag rule.
func (r *Rule) EffectiveType() string {
	if r.Type == "" && (r.Rules != nil || r.Target != "") {
		return TypeTag
	}
	return r.Type
}

// Validate reports every semantic problem of r, each named by its JSON path.
// Targets are only checked for syntax here; Compile resolves them.
func (r *Rule) Validate() error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, strict.Errorf(path, format, args...))
	}
	switch {
	case r.Key == "":
		add("key", "is required")
	case !ValidKey(r.Key):
		add("key", "must match %s, got %q", rulekey.Pattern, r.Key)
	}
	mode, ok := bucket.ParseMode(r.Hash)
	if !ok {
		add("hash", "must be %s, got %q", bucket.ModeNames, r.Hash)
	}
	if r.Seed != "" && (!ok || mode != bucket.GrowthBook) {
		add("seed", "is only for \"hash\": \"growthbook\"; this rule hashes with %q", cmp.Or(r.Hash, "xxh64"))
	}
	if r.GroupID != "" && (!ok || mode != bucket.Unleash) {
		add("group_id", "is only for \"hash\": \"unleash\"; this rule hashes with %q", cmp.Or(r.Hash, "xxh64"))
	}
	if err := r.Conditions.Validate("conditions"); err != nil {
		errs = append(errs, err)
	}
	typ := r.EffectiveType()
	if typ != TypeTag && (r.Rules != nil || r.Target != "" || r.Stable != "") {
		add("rules", "rules, target and stable belong to tag rules (seed 004's shape); this rule is of type %q", typ)
	}
	switch typ {
	case TypeGray:
		errs = append(errs, r.validateGray()...)
	case TypeAB:
		errs = append(errs, r.validateAB()...)
	case TypeTag:
		errs = append(errs, r.validateTag()...)
	case "":
		add("type", "is required: \"gray\" or \"ab\" (or seed 004's {\"rules\": [...], \"target\": ...})")
	default:
		add("type", "must be \"gray\", \"ab\" or \"tag\", got %q", r.Type)
	}
	return errors.Join(errs...)
}

func (r *Rule) validateTag() []error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, strict.Errorf(path, format, args...))
	}
	if len(r.Rules) == 0 {
		add("rules", "a tag rule needs at least one tag condition")
	} else if _, err := match.Compile(&match.Conditions{Tags: r.Rules}, "", nil); err != nil {
		errs = append(errs, renamePaths(err, "tags", "rules"))
	}
	if r.Target == "" {
		add("target", "is required for a tag rule")
	}
	for _, f := range []struct {
		set  bool
		name string
	}{{r.GrayPercent != nil, "gray_percent"}, {r.WhiteList != nil, "white_list"}, {r.Targets != nil, "targets"}, {r.ExperimentID != "", "experiment_id"}, {r.Groups != nil, "groups"}, {r.Rollout != nil, "rollout"}} {
		if f.set {
			add(f.name, "is not for tag rules; use a gray rule with conditions.tags to combine tags with a percentage")
		}
	}
	errs = append(errs, r.layerOnlyForAB()...)
	if r.Mirror != nil {
		add("mirror", "is only for gray rules: it shadows the requests a gray rule leaves on stable")
	}
	errs = append(errs, r.metricsOnlyForAB()...)
	if r.Breaker != nil {
		if err := r.Breaker.Validate("breaker"); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func (r *Rule) validateGray() []error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, strict.Errorf(path, format, args...))
	}
	if r.GrayPercent == nil {
		add("gray_percent", "is required for a gray rule")
	} else if p := *r.GrayPercent; math.IsNaN(p) || p < 0 || p > 100 {
		add("gray_percent", "must be 0..100, got %v", p)
	} else if h := p * 100; math.Abs(h-math.Round(h)) > 1e-6 {
		add("gray_percent", "allows at most two decimals, got %v", p)
	}
	if len(r.WhiteList) > MaxWhitelist {
		add("white_list", "has %d entries; at most %d are allowed (use a percentage or a tag rule for larger audiences)", len(r.WhiteList), MaxWhitelist)
	} else {
		for i, w := range r.WhiteList {
			if _, err := parseWhitelistEntry(w); err != nil {
				add(strict.Index("white_list", i), "%v", err)
			}
		}
	}
	if r.Targets == nil {
		add("targets", "is required for a gray rule: {\"gray\": ..., \"stable\": ...}")
	} else {
		if r.Targets.Gray == "" {
			add("targets.gray", "is required")
		}
		if r.Targets.Stable == "" {
			add("targets.stable", "is required")
		}
	}
	if r.Breaker != nil {
		if err := r.Breaker.Validate("breaker"); err != nil {
			errs = append(errs, err)
		}
	}
	if t := r.TargetTags; t != nil {
		for _, f := range []struct{ path, v string }{{"target_tags.gray", t.Gray}, {"target_tags.stable", t.Stable}} {
			if err := headerValue(f.path, f.v); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if r.ExperimentID != "" {
		add("experiment_id", "is only for ab rules")
	}
	if r.Groups != nil {
		add("groups", "are only for ab rules")
	}
	errs = append(errs, r.validateMirror()...)
	if r.Rollout != nil {
		errs = append(errs, r.validateRollout()...)
	}
	errs = append(errs, r.metricsOnlyForAB()...)
	return append(errs, r.layerOnlyForAB()...)
}

// metricsOnlyForAB reports experiment fields on a rule that is not an ab
// rule.
func (r *Rule) metricsOnlyForAB() []error {
	var errs []error
	for _, f := range []struct {
		set  bool
		name string
	}{{r.Metrics != nil, "metrics"}, {r.Sequential, "sequential"}, {r.SequentialTuning != 0, "sequential_tuning"}} {
		if f.set {
			errs = append(errs, strict.Errorf(f.name, "is only for ab rules: it describes an experiment's results"))
		}
	}
	return errs
}

// layerOnlyForAB reports layer fields on a rule that is not an ab rule.
func (r *Rule) layerOnlyForAB() []error {
	var errs []error
	for _, f := range []struct {
		set  bool
		name string
	}{{r.Layer != "", "layer"}, {r.LayerRange != nil, "layer_range"}, {r.LayerSalt != "", "layer_salt"}} {
		if f.set {
			errs = append(errs, strict.Errorf(f.name, "is only for ab rules: layers make experiments mutually exclusive"))
		}
	}
	return errs
}

// validateLayer reports the problems of an ab rule's layer fields.
func (r *Rule) validateLayer() []error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, strict.Errorf(path, format, args...))
	}
	if r.Layer == "" {
		if r.LayerRange != nil {
			add("layer_range", "needs \"layer\": a range is a share of a named layer's slots")
		}
		if r.LayerSalt != "" {
			add("layer_salt", "needs \"layer\"")
		}
		return errs
	}
	if !ValidKey(r.Layer) {
		add("layer", "must match %s, got %q", rulekey.Pattern, r.Layer)
	}
	switch {
	case r.LayerRange == nil:
		add("layer_range", "is required with \"layer\": [start, end], a half-open range of the layer's %d slots", LayerSlots)
	case len(r.LayerRange) != 2:
		add("layer_range", "must be [start, end], got %d numbers", len(r.LayerRange))
	case r.LayerRange[0] < 0 || r.LayerRange[1] > LayerSlots || r.LayerRange[0] > LayerSlots || r.LayerRange[1] < 0:
		add("layer_range", "must be within 0..%d, got [%d, %d]", LayerSlots, r.LayerRange[0], r.LayerRange[1])
	case r.LayerRange[0] >= r.LayerRange[1]:
		add("layer_range", "must not be empty: start %d must be below end %d, got [%d, %d]", r.LayerRange[0], r.LayerRange[1], r.LayerRange[0], r.LayerRange[1])
	}
	return errs
}

func (r *Rule) validateAB() []error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, strict.Errorf(path, format, args...))
	}
	if r.ExperimentID == "" {
		add("experiment_id", "is required for an ab rule")
	}
	if len(r.Groups) == 0 {
		add("groups", "needs at least one group")
	}
	sum, weightsOK := 0, true
	seen := map[string]int{}
	controls := 0
	for i, g := range r.Groups {
		p := strict.Index("groups", i)
		if g.Name == "" {
			add(p+".name", "is required")
		} else if err := headerValue(p+".name", g.Name); err != nil {
			errs = append(errs, err)
		} else if g.Name == GroupHoldout {
			add(p+".name", "%q is reserved: it is the group of the users the holdout (experiments.holdout) keeps out of every experiment, whose units the results count apart", g.Name)
		} else if j, dup := seen[g.Name]; dup {
			add(p+".name", "duplicates groups[%d].name %q", j, g.Name)
		} else {
			seen[g.Name] = i
		}
		if err := headerValue(p+".tag", g.Tag); err != nil {
			errs = append(errs, err)
		}
		if h, err := weightHundredths(r.Hash, g.Weight); err != "" {
			add(p+".weight", "%s", err)
			weightsOK = false
		} else {
			sum += h
		}
		if g.Target == "" {
			add(p+".target", "is required")
		}
		if g.Control {
			controls++
		}
	}
	if len(r.Groups) > 0 && weightsOK && sum != 100*100 {
		add("groups", "weights must sum to 100, got %v", float64(sum)/100)
	}
	if controls > 1 {
		add("groups", "at most one group may be \"control\": true, got %d", controls)
	}
	if r.GrayPercent != nil {
		add("gray_percent", "is only for gray rules")
	}
	if r.WhiteList != nil {
		add("white_list", "is only for gray rules")
	}
	if r.Targets != nil {
		add("targets", "are only for gray rules; ab rules put a target in each group")
	}
	if r.Breaker != nil {
		add("breaker", "is only for gray rules: it guards the gray target")
	}
	if r.TargetTags != nil {
		add("target_tags", "are only for gray rules; ab rules put a tag in each group")
	}
	if r.Mirror != nil {
		add("mirror", "is only for gray rules: it shadows the requests a gray rule leaves on stable")
	}
	if r.Rollout != nil {
		add("rollout", "is only for gray rules: a rollout raises gray_percent step by step")
	}
	errs = append(errs, r.validateMetrics()...)
	return append(errs, r.validateLayer()...)
}

type whitelistEntry struct {
	uid    string
	ip     netip.Addr
	prefix netip.Prefix
}

func parseWhitelistEntry(s string) (whitelistEntry, error) {
	kind, v, ok := strings.Cut(s, ":")
	if !ok || v == "" {
		return whitelistEntry{}, fmt.Errorf("must be \"uid:ID\", \"ip:ADDR\" or \"ip:CIDR\", got %q", s)
	}
	switch kind {
	case "uid":
		return whitelistEntry{uid: v}, nil
	case "ip":
		if strings.Contains(v, "/") {
			p, err := netip.ParsePrefix(v)
			if err != nil {
				return whitelistEntry{}, fmt.Errorf("invalid CIDR in %q", s)
			}
			p = p.Masked()
			if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
				// Client addresses are compared unmapped (::ffff:10.1.2.3
				// is 10.1.2.3), so an IPv4-mapped prefix is its IPv4
				// prefix: kept as written it would match no client.
				p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
			}
			return whitelistEntry{prefix: p}, nil
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return whitelistEntry{}, fmt.Errorf("invalid IP address in %q", s)
		}
		if a.Zone() != "" {
			// A client address never has one: the entry would match no one.
			return whitelistEntry{}, fmt.Errorf("an IP address with a zone (%%%s) matches no client, in %q", a.Zone(), s)
		}
		return whitelistEntry{ip: a.Unmap()}, nil
	}
	return whitelistEntry{}, fmt.Errorf("must start with \"uid:\" or \"ip:\", got %q", s)
}
