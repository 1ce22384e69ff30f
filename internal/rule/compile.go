package rule

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/bucket"
	"github.com/graygate/graygate/internal/match"
	"github.com/graygate/graygate/internal/mirror"
	"github.com/graygate/graygate/internal/strict"
	"github.com/graygate/graygate/internal/upstream"
	"github.com/graygate/graygate/internal/when"
)

// Env is what Compile needs from the rest of the configuration.
type Env struct {
	// Resolve turns a target string into a pool.
	Resolve func(target string) (*upstream.Pool, error)
	// HasRoute reports whether a route name is configured.
	HasRoute func(name string) bool
	// TagTypes declares the kind of known user tags ("number", "bool",
	// "string"), so that tag conditions are type-checked when stored.
	TagTypes map[string]string
}

// Target is a resolved destination with its coloring tag.
type Target struct {
	Group string
	Tag   string
	Pool  *upstream.Pool
}

// Compiled is an immutable, evaluable rule. It must not be modified after
// it has been published in a snapshot, and is safe for concurrent use.
type Compiled struct {
	Source   Rule
	Key      string
	Type     string
	Route    string
	Priority int
	Mode     bucket.Mode

	scope    match.Predicate
	tagRules match.Predicate // a tag rule's "rules"
	when     *when.Expr

	// gray
	gate      *bucket.Hasher
	threshold uint64
	wlUID     *uidSet
	wlIP      map[netip.Addr]struct{}
	wlNets    []netip.Prefix
	Gray      Target
	Stable    Target
	// Mirror is the gray rule's compiled mirror (nil: none).
	Mirror *mirror.Spec

	// ab
	split  *bucket.Splitter
	layer  *layer
	Groups []Target
	// weights are the groups' weights in percent, and hundredths the
	// same in hundredths of a percent, which the split counts in.
	weights    []float64
	hundredths []int
	control    int
	// Metrics are an ab rule's compiled metrics, in the rule's order.
	Metrics []CompiledMetric
	// ReportHeaders name the response headers of the rule's from_header
	// metrics, in the order of Metrics; the router hands them to the data
	// plane (router.Report), which captures and strips them.
	ReportHeaders []string
}

// Parse decodes, validates and compiles one rule, reporting every problem.
func Parse(data []byte, env Env) (*Compiled, error) {
	r, err := Decode(data)
	if err != nil {
		// Report semantic problems of the fields that did decode as well.
		return nil, strict.Merge(err, r.Validate())
	}
	return Compile(r, env)
}

// Compile validates r and resolves its targets.
func Compile(r Rule, env Env) (*Compiled, error) {
	if err := r.Validate(); err != nil {
		return nil, errors.Join(err, checkTargets(r, env))
	}
	var errs []error
	resolve := func(path, target string) *upstream.Pool {
		p, err := env.Resolve(target)
		if err != nil {
			errs = append(errs, strict.Errorf(path, "%v", err))
		}
		return p
	}
	if r.Route != "" && env.HasRoute != nil && !env.HasRoute(r.Route) {
		errs = append(errs, strict.Errorf("route", "no route named %q is configured", r.Route))
	}
	mode, _ := bucket.ParseMode(r.Hash)
	gateSalt, walkSalt := hashSalts(&r, mode)
	typ := r.EffectiveType()
	scope, err := match.Compile(r.Conditions, "conditions", env.TagTypes)
	if err != nil {
		errs = append(errs, err)
	}
	var expr *when.Expr
	if r.When != "" {
		if expr, err = when.Compile(r.When, when.Options{}); err != nil {
			errs = append(errs, whenErrors(err))
		}
	}
	var tagRules match.Predicate
	if typ == TypeTag {
		tagRules, err = match.Compile(&match.Conditions{Tags: r.Rules}, "", env.TagTypes)
		if err != nil {
			errs = append(errs, renamePaths(err, "tags", "rules"))
		}
	}
	c := &Compiled{
		Source:   r,
		Key:      r.Key,
		Type:     typ,
		Route:    r.Route,
		Priority: r.EffectivePriority(),
		Mode:     mode,
		scope:    scope,
		tagRules: tagRules,
		when:     expr,
	}
	if typ == TypeTag {
		c.gate = bucket.New(mode, gateSalt)
		c.threshold = mode.Threshold(10000)
		c.Gray = Target{Group: "gray", Tag: "gray", Pool: resolve("target", r.Target)}
		c.Stable = Target{Group: "stable", Tag: "stable"}
		if r.Stable != "" {
			c.Stable.Pool = resolve("stable", r.Stable)
		}
	}
	switch r.Type {
	case TypeGray:
		c.gate = bucket.New(mode, gateSalt)
		c.threshold = mode.Threshold(int(math.Round(*r.GrayPercent * 100)))
		c.Gray = Target{Group: "gray", Tag: "gray", Pool: resolve("targets.gray", r.Targets.Gray)}
		c.Stable = Target{Group: "stable", Tag: "stable", Pool: resolve("targets.stable", r.Targets.Stable)}
		if r.TargetTags != nil {
			if r.TargetTags.Gray != "" {
				c.Gray.Tag = r.TargetTags.Gray
			}
			if r.TargetTags.Stable != "" {
				c.Stable.Tag = r.TargetTags.Stable
			}
		}
		var uids []string
		whitelist := r.WhiteList
		if ro := r.Rollout; ro != nil && ro.AbortWhitelist && ro.Status != nil && ro.Status.State == RolloutAborted {
			// An aborted rollout with abort_whitelist sends nobody to
			// gray; the list is kept in the rule for a retry.
			whitelist = nil
		}
		for _, w := range whitelist {
			e, _ := parseWhitelistEntry(w)
			switch {
			case e.uid != "":
				uids = append(uids, e.uid)
			case e.ip.IsValid():
				if c.wlIP == nil {
					c.wlIP = map[netip.Addr]struct{}{}
				}
				c.wlIP[e.ip] = struct{}{}
			default:
				c.wlNets = append(c.wlNets, e.prefix)
			}
		}
		c.wlUID = newUIDSet(uids)
		if r.Mirror != nil {
			sp, err := compileMirror(&r, resolve)
			if err != nil {
				errs = append(errs, strict.Errorf("mirror", "%v", err))
			}
			c.Mirror = sp
		}
	case TypeAB:
		c.layer = newLayer(&r)
		for i, g := range r.Groups {
			tag := g.Tag
			if tag == "" {
				tag = g.Name
			}
			c.Groups = append(c.Groups, Target{Group: g.Name, Tag: tag, Pool: resolve(strict.Index("groups", i)+".target", g.Target)})
			h, _ := weightHundredths(r.Hash, g.Weight) // validated
			c.weights = append(c.weights, g.Weight)
			c.hundredths = append(c.hundredths, h)
			if g.Control {
				c.control = i
			}
		}
		c.split = bucket.NewSplitter(mode, walkSalt, c.hundredths)
		c.compileMetrics(&r)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// hashSalts returns the salts of a rule's gate and of its group walk: the
// key and the experiment id in XXH64 and CRC32 mode, GrowthBook's seed
// (default: the key for the gate, the experiment id for the walk), and
// Unleash's group id (default: the key) for both.
func hashSalts(r *Rule, mode bucket.Mode) (gate, walk string) {
	switch mode {
	case bucket.GrowthBook:
		return cmp.Or(r.Seed, r.Key), cmp.Or(r.Seed, r.ExperimentID)
	case bucket.Unleash:
		g := cmp.Or(r.GroupID, r.Key)
		return g, g
	}
	return r.Key, r.ExperimentID
}

// Trace is what one rule did with one request, for explain.
type Trace struct {
	Key        string         `json:"key"`
	Type       string         `json:"type"`
	Priority   int            `json:"priority"`
	Hash       string         `json:"hash"`
	Conditions []match.Result `json:"conditions,omitempty"`
	InScope    bool           `json:"in_scope"`
	Whitelist  string         `json:"whitelist_hit,omitempty"`
	Salt       string         `json:"salt,omitempty"`
	Bucket     *uint64        `json:"bucket,omitempty"`
	Buckets    uint64         `json:"buckets,omitempty"`
	Threshold  *uint64        `json:"threshold,omitempty"`
	// Layer, LayerSalt, Slot and LayerRange show where the user sits in
	// the rule's layer (ab rules with a layer).
	Layer      string  `json:"layer,omitempty"`
	LayerSalt  string  `json:"layer_salt,omitempty"`
	Slot       *uint64 `json:"slot,omitempty"`
	LayerRange *[2]int `json:"layer_range,omitempty"`
	// HeldOut says the holdout kept the user out of the experiment;
	// HoldoutBucket is the user's holdout bucket when a holdout is set.
	HeldOut       bool    `json:"held_out,omitempty"`
	HoldoutBucket *uint64 `json:"holdout_bucket,omitempty"`
	RolledBack    bool    `json:"rolled_back,omitempty"`
	Breaker       string  `json:"breaker,omitempty"`
	Claimed       bool    `json:"claimed"`
	Group         string  `json:"group,omitempty"`
	Target        string  `json:"target,omitempty"`
	Reason        string  `json:"reason"`
}

// Outcome is what a rule decided for a request it claimed.
type Outcome struct {
	Target   *Target
	Degraded string // "rollback" when the rollback state changed the answer
	// HeldOut is set when the holdout kept the user out of the experiment:
	// Target is the control group, and the group to report is "holdout".
	HeldOut bool
	// InScope is set on a gray rule's answer when it did not claim a
	// request that met its conditions (the request falls through): the
	// requests a mirror may shadow.
	InScope bool
}

// Eval decides whether the rule claims the request described by f.
// rolledBack applies one-click rollback: a gray rule sends what it would
// have sent to gray to stable instead, and an ab rule sends everyone to its
// control group. ho is the global holdout (nil: none): an ab rule that would
// claim a held-out user answers with its control group and HeldOut set.
// When tr is non-nil it is filled in; on the hot path it is nil and Eval
// does not allocate.
func (c *Compiled) Eval(f *match.Facts, rolledBack bool, ho *Holdout, tr *Trace) (Outcome, bool) {
	var conds *[]match.Result
	if tr != nil {
		*tr = Trace{Key: c.Key, Type: c.Type, Priority: c.Priority, Hash: c.Mode.String(), RolledBack: rolledBack}
		conds = &tr.Conditions
	}
	if !c.scope.Match(f, conds) || !c.tagRules.Match(f, conds) || !c.whenHolds(f, conds) {
		if tr != nil {
			tr.Reason = "out of scope: a condition did not match"
		}
		return Outcome{}, false
	}
	if tr != nil {
		tr.InScope = true
	}
	if c.Type == TypeAB {
		return c.evalAB(f.UID, rolledBack, ho, tr)
	}
	if c.Type == TypeTag {
		return c.grayOutcome(rolledBack, tr, "every tag condition holds")
	}
	return c.evalGray(f, rolledBack, tr)
}

func (c *Compiled) evalGray(f *match.Facts, rolledBack bool, tr *Trace) (Outcome, bool) {
	req, uid := f.Req, f.UID
	if hit := c.whitelisted(req, uid, f.Anonymous); hit != 0 {
		if tr == nil {
			return c.grayOutcome(rolledBack, nil, "")
		}
		if hit == 'u' {
			tr.Whitelist = "uid:" + uid
		} else {
			tr.Whitelist = "ip:" + req.ClientIP().String()
		}
		return c.grayOutcome(rolledBack, tr, "whitelisted ("+tr.Whitelist+")")
	}
	if tr == nil {
		// 0% and 100% need no hash: no bucket is below 0, every one is below the size.
		if c.threshold == 0 {
			return Outcome{InScope: true}, false
		}
		if c.Mode.Everyone(c.threshold) {
			return c.grayOutcome(rolledBack, nil, "")
		}
	}
	b := c.gate.Bucket(uid)
	if b < c.threshold {
		if tr == nil {
			return c.grayOutcome(rolledBack, nil, "")
		}
		tr.Salt = c.gate.Salt()
		tr.Bucket, tr.Threshold, tr.Buckets = ptr(b), ptr(c.threshold), c.Mode.Size()
		return c.grayOutcome(rolledBack, tr, c.Mode.Explain(b, c.threshold))
	}
	if tr != nil {
		tr.Salt = c.gate.Salt()
		tr.Bucket, tr.Threshold, tr.Buckets = ptr(b), ptr(c.threshold), c.Mode.Size()
		tr.Reason = "not claimed: not whitelisted" + c.anonymousNote(f) + " and " + c.Mode.Explain(b, c.threshold) + "; falls through"
	}
	return Outcome{InScope: true}, false
}

// anonymousNote explains, for a trace, why an anonymous visitor whose
// cookie id is on the uid whitelist was not whitelisted.
func (c *Compiled) anonymousNote(f *match.Facts) string {
	if !f.Anonymous || !c.wlUID.has(f.UID) {
		return ""
	}
	return fmt.Sprintf(" (uid:%s is listed, but that is the anonymous cookie's id, which any client can set: it names no user)", f.UID)
}

// whitelisted returns 'u' for a uid hit, 'i' for an IP hit, else 0. An
// anonymous visitor's cookie id (anonymous) never hits a uid entry: the
// client picks it, so gg_uid=10001 would otherwise pass for user 10001.
func (c *Compiled) whitelisted(req attr.Request, uid string, anonymous bool) byte {
	if !anonymous && c.wlUID.has(uid) {
		return 'u'
	}
	if c.wlIP == nil && c.wlNets == nil {
		return 0
	}
	ip := req.ClientIP().Unmap()
	if _, ok := c.wlIP[ip]; ok {
		return 'i'
	}
	for _, p := range c.wlNets {
		if p.Contains(ip) {
			return 'i'
		}
	}
	return 0
}

// InScope reports whether the rule's conditions match the request.
func (c *Compiled) InScope(f *match.Facts) bool {
	return c.scope.Match(f, nil) && c.tagRules.Match(f, nil) && c.whenHolds(f, nil)
}

// whenHolds evaluates the rule's CEL expression; an evaluation error (a
// missing tag, a value that is not a number) is no match, and the trace
// says why.
func (c *Compiled) whenHolds(f *match.Facts, trace *[]match.Result) bool {
	if c.when == nil {
		return true
	}
	ok, err := f.EvalWhen(c.when)
	if trace != nil {
		got := strconv.FormatBool(ok)
		if err != nil {
			got = "error: " + err.Error()
		}
		*trace = append(*trace, match.Result{Condition: "when", Want: c.when.Source(), Got: got, Matched: ok && err == nil})
	}
	return ok && err == nil
}

// whenErrors names every CEL problem by the "when" path.
func whenErrors(err error) error {
	var errs []error
	for _, f := range strict.Fields(err) {
		errs = append(errs, &strict.FieldError{Path: "when", Message: f.Message})
	}
	return errors.Join(errs...)
}

func (c *Compiled) grayOutcome(rolledBack bool, tr *Trace, why string) (Outcome, bool) {
	out := Outcome{Target: &c.Gray}
	if rolledBack {
		out = Outcome{Target: &c.Stable, Degraded: "rollback"}
	}
	if tr != nil {
		tr.Claimed, tr.Group, tr.Target = true, out.Target.Group, out.Target.Pool.Name
		tr.Reason = "claimed: " + why
		if rolledBack {
			tr.Reason += "; rolled back, so stable instead of gray"
		}
	}
	return out, true
}

// evalAB decides an in-scope ab rule: the layer range first (a user whose
// slot is outside it falls through), then the holdout (a held-out user goes
// to the control group, as group "holdout"), then rollback, then the walk.
// The holdout comes before rollback because a held-out user is in no
// experiment, so there is nothing to roll back for them.
func (c *Compiled) evalAB(uid string, rolledBack bool, ho *Holdout, tr *Trace) (Outcome, bool) {
	if c.layer != nil {
		slot, in := c.layer.holds(uid)
		if tr != nil {
			tr.Layer, tr.LayerSalt, tr.Slot = c.layer.name, c.layer.salt, ptr(slot)
			tr.LayerRange = &[2]int{int(c.layer.start), int(c.layer.end)}
		}
		if !in {
			if tr != nil {
				tr.Reason = fmt.Sprintf("not claimed: slot %d of layer %q is outside the rule's layer_range %s; falls through", slot, c.layer.name, c.layer)
			}
			return Outcome{}, false
		}
	}
	if ho != nil {
		hb, held := ho.Holds(uid)
		if tr != nil {
			tr.HoldoutBucket = ptr(hb)
		}
		if held {
			t := &c.Groups[c.control]
			if tr != nil {
				tr.HeldOut, tr.Claimed, tr.Group, tr.Target = true, true, GroupHoldout, t.Pool.Name
				tr.Reason = fmt.Sprintf("held out: holdout bucket %d < %d of 10000 (%v%%, salt %q), so no experiment claims this user; the control group %q answers",
					hb, ho.Threshold(), ho.Percent, ho.Salt, t.Group)
			}
			return Outcome{Target: t, HeldOut: true}, true
		}
	}
	if rolledBack {
		t := &c.Groups[c.control]
		if tr != nil {
			tr.Claimed, tr.Group, tr.Target = true, t.Group, t.Pool.Name
			tr.Reason = "claimed: rolled back, everyone goes to the control group " + strconv.Quote(t.Group)
		}
		return Outcome{Target: t, Degraded: "rollback"}, true
	}
	b, i := c.split.Split(uid)
	t := &c.Groups[i]
	if tr != nil {
		tr.Salt = c.split.Salt()
		tr.Bucket, tr.Buckets = ptr(b), c.split.Size()
		tr.Claimed, tr.Group, tr.Target = true, t.Group, t.Pool.Name
		weights := fmt.Sprint(c.weights)
		if c.Mode == bucket.Unleash {
			scaled := make([]int, len(c.hundredths))
			for i, h := range c.hundredths {
				scaled[i] = h * bucket.UnleashWeightScale / 100
			}
			weights = fmt.Sprintf("%v (the percentages ×%d, as Unleash stores them)", scaled, bucket.UnleashWeightScale)
		}
		tr.Reason = fmt.Sprintf("claimed: %s bucket %d of %d walked over weights %s lands in group %q", c.Mode, b, c.split.Size(), weights, t.Group)
		if c.layer != nil {
			tr.Reason += fmt.Sprintf(" (slot %d of layer %q is in layer_range %s)", *tr.Slot, c.layer.name, c.layer)
		}
	}
	return Outcome{Target: t}, true
}

// Weights returns an ab rule's group weights, in the order of Groups. The
// slice belongs to the rule and must not be modified.
func (c *Compiled) Weights() []float64 { return c.weights }

// ControlGroup returns the group rollback sends everyone to (ab rules).
func (c *Compiled) ControlGroup() *Target {
	if c.Type != TypeAB {
		return nil
	}
	return &c.Groups[c.control]
}

// Colored returns the rule's target whose tag equals tag, for requests that
// arrive already colored by a trusted hop.
func (c *Compiled) Colored(tag string) *Target {
	if c.Type != TypeAB {
		switch {
		case tag == c.Gray.Tag:
			return &c.Gray
		case tag == c.Stable.Tag && c.Stable.Pool != nil:
			return &c.Stable
		}
		return nil
	}
	for i := range c.Groups {
		if c.Groups[i].Tag == tag {
			return &c.Groups[i]
		}
	}
	return nil
}

// checkTargets reports the targets of an invalid rule that do not resolve
// either, so that one answer lists every problem.
func checkTargets(r Rule, env Env) error {
	var errs []error
	check := func(path, target string) {
		if target == "" {
			return
		}
		if _, err := env.Resolve(target); err != nil {
			errs = append(errs, strict.Errorf(path, "%v", err))
		}
	}
	if r.Targets != nil {
		check("targets.gray", r.Targets.Gray)
		check("targets.stable", r.Targets.Stable)
	}
	for i, g := range r.Groups {
		check(strict.Index("groups", i)+".target", g.Target)
	}
	check("target", r.Target)
	check("stable", r.Stable)
	if r.Mirror != nil {
		check("mirror.target", r.Mirror.Target)
		if r.Mirror.Diff != nil {
			check("mirror.diff.secondary", r.Mirror.Diff.Secondary)
		}
	}
	return errors.Join(errs...)
}

// renamePaths rewrites the first path element from to to in every problem.
func renamePaths(err error, from, to string) error {
	var errs []error
	for _, f := range strict.Fields(err) {
		if rest, ok := strings.CutPrefix(f.Path, from); ok {
			f.Path = to + rest
		}
		errs = append(errs, &strict.FieldError{Path: f.Path, Message: f.Message})
	}
	return errors.Join(errs...)
}

// ptr allocates only when the trace asks for it, so b stays on the stack.
func ptr[T any](v T) *T { return &v }

// PathSegments reports the first path segments the rule can match, for the
// router's index; see match.Predicate.Segments.
func (c *Compiled) PathSegments() ([]string, bool) { return c.scope.Segments() }
