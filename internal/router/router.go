// Package router decides, for every request, which upstream serves it. The
// decision is a pure function of an immutable Snapshot and the request's
// attributes; Router holds the current Snapshot behind an atomic.Pointer so
// that a reload swaps the whole rule set at once and no request ever sees
// half of one. Explain runs the same code with a Trace attached, over the
// same indexed candidates, so what it says is what live traffic gets.
package router

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/identity"
	"github.com/graygate/graygate/internal/match"
	"github.com/graygate/graygate/internal/mirror"
	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/tracing"
	"github.com/graygate/graygate/internal/upstream"
)

// TagHeader is the coloring header (seed 004 section 3.2).
const TagHeader = "X-Gray-Tag"

// RouteSpec is one configured route.
type RouteSpec struct {
	Name string
	// Host matches the request's Host without port; "" matches any host.
	Host string
	// PathPrefix matches the start of the path; "" means "/".
	PathPrefix string
	// Default serves requests no rule claims.
	Default *upstream.Pool
	// UpstreamHost sends the instance address as Host instead of the client's.
	UpstreamHost bool
	// Policy holds the route's limits (nil: none).
	Policy *Policy
	// VersionHeader enables seed 003's version-header routing on the route.
	VersionHeader string
}

// Input is everything a Snapshot is built from.
type Input struct {
	Revision int64
	Identity identity.Config
	// Random feeds anonymous ids; nil means crypto/rand.
	Random io.Reader
	Routes []RouteSpec
	// Default serves requests that match no route and that no global rule claims.
	Default      *upstream.Pool
	UpstreamHost bool
	Rules        []*rule.Compiled
	// RolledBackAll is the global one-click rollback; RolledBack holds per-rule flags.
	RolledBackAll bool
	RolledBack    map[string]bool
	// TrustGrayTag honours an inbound X-Gray-Tag (east-west hops).
	TrustGrayTag bool
	// Breakers guard gray targets, by rule key. They live outside the
	// snapshot (breaker.Set) so that their state survives reloads.
	Breakers map[string]*breaker.Breaker
	// Policy holds the limits of requests no route owns (nil: none).
	Policy *Policy
	// Sources resolve regions and user tags for conditions (nil: none).
	Sources *match.Sources
	// Holdout keeps a stable share of users out of every ab rule (config
	// experiments.holdout; nil: none).
	Holdout *rule.Holdout
	// Versions holds each rule's stored version, by key, for the
	// experiments that record the rule version a unit was exposed under.
	Versions map[string]int64
}

// Snapshot is a compiled, immutable routing table. It must not be modified
// after publication and is safe for concurrent use.
type Snapshot struct {
	Revision int64
	RuleSet  map[string]*rule.Compiled

	identity      *identity.Resolver
	sources       *match.Sources
	hosts         map[string][]*route // exact host → routes, longest prefix first
	anyHost       []*route
	fallback      *route
	trustTag      bool
	rolledBackAll bool
	rolledBack    map[string]bool
	holdout       *rule.Holdout
	versions      map[string]int64
	// reports holds one Report per rule that asks for one, shared by every
	// decision of the snapshot so that a request allocates none.
	reports map[string]*Report
	// strip names every response header a rule reads metric values from
	// (once each, whatever its case), for Decision.Strip; nil when no
	// rule reads any.
	strip *Strip
}

type route struct {
	name, host, prefix string
	def                *upstream.Pool
	upstreamHost       bool
	policy             *Policy
	versionHeader      string
	// entries are the route's rules in evaluation order. bySegment holds,
	// for each first path segment some rule pins, the entries that can
	// match a path starting with that segment (in order); unpinned holds
	// those that can match any path. This keeps a decision over thousands
	// of rules spread over paths to the few that could apply.
	entries   []entry
	bySegment map[string][]entry
	unpinned  []entry
}

// index fills bySegment and unpinned from entries.
func (r *route) index() {
	r.bySegment = map[string][]entry{}
	pinned := make([][]string, len(r.entries))
	for i, e := range r.entries {
		if segs, ok := e.rule.PathSegments(); ok {
			pinned[i] = segs
			for _, s := range segs {
				r.bySegment[s] = nil
			}
		}
	}
	for i, e := range r.entries {
		if pinned[i] == nil {
			r.unpinned = append(r.unpinned, e)
			for s := range r.bySegment {
				r.bySegment[s] = append(r.bySegment[s], e)
			}
			continue
		}
		for _, s := range pinned[i] {
			if l := r.bySegment[s]; len(l) == 0 || l[len(l)-1].rule != e.rule {
				r.bySegment[s] = append(l, e)
			}
		}
	}
}

// skipped returns the keys of the route's rules that are not in cands, the
// candidates the index chose, for explain.
func (r *route) skipped(cands []entry) []string {
	if len(cands) == len(r.entries) {
		return nil
	}
	in := make(map[*rule.Compiled]bool, len(cands))
	for _, e := range cands {
		in[e.rule] = true
	}
	var out []string
	for _, e := range r.entries {
		if !in[e.rule] {
			out = append(out, e.rule.Key)
		}
	}
	return out
}

// candidates returns the entries that can match path, in order.
func (r *route) candidates(path string) []entry {
	if len(r.bySegment) == 0 {
		return r.entries
	}
	if seg, ok := match.FirstSegment(path); ok {
		if l, ok := r.bySegment[seg]; ok {
			return l
		}
	}
	return r.unpinned
}

type entry struct {
	rule       *rule.Compiled
	rolledBack bool
	breaker    *breaker.Breaker
	// stable is where degraded requests go: the rule's stable target, or
	// for a tag rule without one, the route's default upstream.
	stable *upstream.Pool
	// report is what the rule asks the data plane to collect (nil: nothing).
	report *Report
}

// Build compiles an Input into a Snapshot.
func Build(in Input) (*Snapshot, error) {
	s := &Snapshot{
		Revision:      in.Revision,
		RuleSet:       make(map[string]*rule.Compiled, len(in.Rules)),
		identity:      identity.NewResolver(in.Identity, in.Random),
		sources:       in.Sources,
		hosts:         map[string][]*route{},
		trustTag:      in.TrustGrayTag,
		rolledBackAll: in.RolledBackAll,
		rolledBack:    in.RolledBack,
		holdout:       in.Holdout,
		versions:      in.Versions,
		reports:       map[string]*Report{},
	}
	stripped := map[string]bool{}
	for _, r := range in.Rules {
		if len(r.ReportHeaders) > 0 {
			s.reports[r.Key] = &Report{Headers: r.ReportHeaders}
		}
		for _, h := range r.ReportHeaders {
			if k := strings.ToLower(h); !stripped[k] {
				stripped[k] = true
				if s.strip == nil {
					s.strip = &Strip{}
				}
				s.strip.Headers = append(s.strip.Headers, h)
			}
		}
	}
	sorted := slices.Clone(in.Rules)
	slices.SortFunc(sorted, func(a, b *rule.Compiled) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.Key, b.Key))
	})
	entriesFor := func(routeName string, def *upstream.Pool) []entry {
		var out []entry
		for _, r := range sorted {
			if r.Route == "" || r.Route == routeName {
				e := entry{rule: r, rolledBack: in.RolledBackAll || in.RolledBack[r.Key], breaker: in.Breakers[r.Key], stable: stableOf(r), report: s.reports[r.Key]}
				if e.stable == nil {
					e.stable = def
				}
				out = append(out, e)
			}
		}
		return out
	}
	names := map[string]bool{}
	for _, r := range sorted {
		if _, dup := s.RuleSet[r.Key]; dup {
			return nil, fmt.Errorf("rule %q is defined twice", r.Key)
		}
		s.RuleSet[r.Key] = r
	}
	if err := rule.CheckLayers(sorted); err != nil {
		return nil, fmt.Errorf("layers: %w", err)
	}
	for _, rs := range in.Routes {
		if names[rs.Name] {
			return nil, fmt.Errorf("route %q is defined twice", rs.Name)
		}
		names[rs.Name] = true
		rt := &route{name: rs.Name, host: strings.ToLower(rs.Host), prefix: rs.PathPrefix, def: rs.Default, upstreamHost: rs.UpstreamHost, policy: orNoPolicy(rs.Policy), versionHeader: rs.VersionHeader}
		if rt.prefix == "" {
			rt.prefix = "/"
		}
		if rt.def == nil {
			rt.def = in.Default
		}
		if rt.def == nil {
			rt.def = emptyDefault
		}
		rt.entries = entriesFor(rs.Name, rt.def)
		rt.index()
		if rt.host == "" {
			s.anyHost = append(s.anyHost, rt)
		} else {
			s.hosts[rt.host] = append(s.hosts[rt.host], rt)
		}
	}
	byPrefix := func(a, b *route) int { return cmp.Compare(len(b.prefix), len(a.prefix)) }
	for _, rs := range s.hosts {
		slices.SortStableFunc(rs, byPrefix)
	}
	slices.SortStableFunc(s.anyHost, byPrefix)
	def := in.Default
	if def == nil {
		def = emptyDefault
	}
	s.fallback = &route{def: def, upstreamHost: in.UpstreamHost, policy: orNoPolicy(in.Policy), entries: entriesFor("", def)}
	s.fallback.index()
	for _, r := range sorted {
		if r.Route != "" && !names[r.Route] {
			return nil, fmt.Errorf("rule %q: no route named %q is configured", r.Key, r.Route)
		}
	}
	return s, nil
}

// route finds the route for host and path: exact host first, then any host,
// longest path prefix first, then the global fallback.
func (s *Snapshot) route(host, path string) *route {
	if len(s.hosts) > 0 {
		h := host
		if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
			h = h[:i]
		}
		rs, ok := s.hosts[h]
		if !ok && hasUpper(h) {
			rs = s.hosts[strings.ToLower(h)]
		}
		for _, r := range rs {
			if strings.HasPrefix(path, r.prefix) {
				return r
			}
		}
	}
	for _, r := range s.anyHost {
		if strings.HasPrefix(path, r.prefix) {
			return r
		}
	}
	return s.fallback
}

// emptyDefault answers 503 when no default upstream is configured.
var emptyDefault = upstream.NewPool("default", nil)

func orNoPolicy(p *Policy) *Policy {
	if p == nil {
		return NoPolicy
	}
	return p
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// Trace explains one decision.
type Trace struct {
	Identity identity.ID `json:"identity"`
	// ClientIP is the client address after trusted-proxy resolution, and
	// PeerTrusted whether the TCP peer is a trusted proxy, whose region,
	// tags and X-Gray-Tag headers are believed.
	ClientIP    string `json:"client_ip,omitempty"`
	PeerTrusted bool   `json:"peer_trusted"`
	Route       string `json:"route"`
	Colored     string `json:"colored,omitempty"`
	// IgnoredColor is an inbound X-Gray-Tag (or baggage gray.tag) that
	// trust_gray_tag would have honoured had the peer been a trusted proxy.
	IgnoredColor string       `json:"ignored_color,omitempty"`
	Rules        []rule.Trace `json:"rules"`
	// SkippedByIndex lists the route's rules that the path index left out
	// because they cannot match the path; like live traffic, explain does
	// not evaluate them.
	SkippedByIndex []string `json:"skipped_by_index,omitempty"`
	// Mirror says whether a gray rule's mirror shadows the request, and why.
	Mirror string `json:"mirror,omitempty"`
	Reason string `json:"reason"`
}

// Decide routes one request. When tr is non-nil it records every rule
// evaluated, and the rules the index skipped; the decision is the same
// either way. On the hot path tr is nil and Decide does not allocate
// (except to issue an anonymous id or to refuse one). A refused identity
// (see identity.ID.Refused) ends the decision before any rule runs.
// Decide never asks a breaker: a decision for a guarded gray target
// carries its Breaker, and the data plane calls Decision.Guard once the
// request has passed its own limits.
func (s *Snapshot) Decide(req attr.Request, tr *Trace) Decision {
	var d Decision
	s.DecideInto(req, tr, &d)
	return d
}

// DecideInto is Decide writing the decision into *d, which it overwrites
// whole. The data plane decides into the request's own Decision, so the
// decision (some 300 bytes) is not copied through the call chain.
func (s *Snapshot) DecideInto(req attr.Request, tr *Trace, d *Decision) {
	f := match.NewFacts(req, "", s.sources)
	id := s.resolveIdentity(req, &f)
	f.UID, f.Anonymous = id.Value, id.Source == identity.SourceAnonymousCookie
	rt := s.route(req.Host(), req.Path())
	*d = Decision{Route: rt.name, Identity: id, UpstreamHost: rt.upstreamHost, Policy: rt.policy, VersionHeader: rt.versionHeader, Strip: s.strip}
	if tr != nil {
		tr.Identity, tr.Route, tr.PeerTrusted = id, rt.name, req.PeerTrusted()
		if ip := req.ClientIP(); ip.IsValid() {
			tr.ClientIP = ip.String()
		}
	}
	if id.Refused != nil {
		d.Reject = id.Refused.Message
		if tr != nil {
			tr.Reason = "refused before any rule (400): " + id.Refused.Message
		}
		return
	}
	// An inbound color is believed only from a trusted hop: anyone else
	// could name gray and skip the whitelist and the bucket.
	if s.trustTag {
		if tag, ok := inboundColor(req); ok {
			if !req.PeerTrusted() {
				if tr != nil {
					tr.IgnoredColor = tag
				}
			} else {
				d.Tag = tag
				if tr != nil {
					tr.Colored = tag
				}
				if s.decideColored(&f, rt, tag, d, tr) {
					return
				}
			}
		}
	}
	cands := rt.candidates(req.Path())
	if tr != nil {
		tr.SkippedByIndex = rt.skipped(cands)
	}
	// shadow is the first gray rule with a mirror that had the request in
	// scope and let it fall through; it may mirror it (mirrorTo).
	var shadow *entry
	for i := range cands {
		e := &cands[i]
		var rtr *rule.Trace
		if tr != nil {
			tr.Rules = append(tr.Rules, rule.Trace{})
			rtr = &tr.Rules[len(tr.Rules)-1]
		}
		out, ok := e.rule.Eval(&f, e.rolledBack, s.holdout, rtr)
		if !ok {
			if out.InScope && shadow == nil && e.rule.Mirror != nil && !e.rolledBack {
				shadow = e
			}
			continue
		}
		d.Rule, d.Group, d.Target, d.Degraded = e.rule.Key, out.Target.Group, out.Target.Pool, out.Degraded
		if out.HeldOut {
			d.Group = GroupHoldout
		}
		if d.Target == nil {
			d.Target = e.stable // a tag rule without a stable target, rolled back
		}
		if d.Tag == "" {
			d.Tag = out.Target.Tag
		}
		d.Stable, d.StableTag, d.Experiment, d.Report = e.stable, e.stableTag(), e.experiment(), e.report
		if out.Degraded != "" && e.rule.Type != rule.TypeAB {
			d.Intended = e.rule.Gray.Pool
		}
		if out.Target == &e.rule.Gray {
			guard(e, d, rtr)
		}
		if tr != nil {
			tr.Reason = fmt.Sprintf("rule %q claimed the request: group %q → %s", e.rule.Key, d.Group, d.Target.Name)
			if out.HeldOut {
				tr.Reason = fmt.Sprintf("held out of every experiment: rule %q answers with its control target → %s", e.rule.Key, d.Target.Name)
			}
		}
		mirrorTo(shadow, req, d, tr)
		return
	}
	d.Group, d.Target = GroupDefault, rt.def
	if tr != nil {
		tr.Reason = fmt.Sprintf("no rule claimed the request: default upstream %s", rt.def.Name)
	}
	mirrorTo(shadow, req, d, tr)
}

// mirrorTo sets d.Mirror when the gray rule e (which had the request in
// scope and did not claim it) mirrors it: the request is served by the
// rule's stable target (it fell through to a rule or default that sends it
// there), the mirror allows its method, and the user's mirror bucket is
// selected. A request served by anything else is not mirrored: its answer
// is not the stable version's, so comparing the mirror's with it would
// say nothing about the candidate. Colored requests (decideColored) and
// rolled-back rules are never mirrored.
func mirrorTo(e *entry, req attr.Request, d *Decision, tr *Trace) {
	if e == nil || d.Target == nil || e.stable == nil || d.Target.Name != e.stable.Name {
		return
	}
	m := e.rule.Mirror
	if !m.Selects(req.Method(), d.Identity.Value) {
		if tr != nil {
			b, th := m.Bucket(d.Identity.Value)
			tr.Mirror = fmt.Sprintf("not mirrored by rule %q: method %s in %v, mirror bucket %d < %d: %v", e.rule.Key, req.Method(), m.Methods, b, th, b < th)
		}
		return
	}
	d.Mirror = m
	if tr != nil {
		b, th := m.Bucket(d.Identity.Value)
		tr.Mirror = fmt.Sprintf("mirrored by rule %q to %s (mirror bucket %d < %d of 10000, salt %q)", e.rule.Key, m.TargetName, b, th, mirror.Salt(e.rule.Key))
	}
}

// inboundColor returns the color a request arrived with: its X-Gray-Tag,
// or else the gray.tag member of its W3C baggage (teams that propagate
// baggage carry the color through every service without code changes).
// Only a trusted peer's color is believed (Decide checks).
func inboundColor(req attr.Request) (string, bool) {
	if tag, ok := req.TrustedHeader(TagHeader); ok && tag != "" {
		return tag, true
	}
	if b, ok := req.Header(tracing.BaggageHeader); ok {
		return tracing.GrayTag(b)
	}
	return "", false
}

// resolveIdentity takes the user id from a verified token when the identity
// config says so, else from the configured sources.
func (s *Snapshot) resolveIdentity(req attr.Request, f *match.Facts) identity.ID {
	if s.identity.JWT != "" {
		if v, ok := f.JWTIdentity(); ok {
			return s.identity.Claim(v)
		}
	}
	return s.identity.Resolve(req)
}

// decideColored routes a request that a trusted hop already colored to the
// first in-scope rule target carrying that tag.
func (s *Snapshot) decideColored(f *match.Facts, rt *route, tag string, d *Decision, tr *Trace) bool {
	for i := range rt.entries {
		e := &rt.entries[i]
		t := e.rule.Colored(tag)
		if t == nil || !e.rule.InScope(f) {
			continue
		}
		d.Rule, d.Group, d.Target = e.rule.Key, t.Group, t.Pool
		d.Stable, d.StableTag, d.Experiment, d.Report = e.stable, e.stableTag(), e.experiment(), e.report
		var rtr *rule.Trace
		if tr != nil {
			tr.Rules = append(tr.Rules, rule.Trace{
				Key: e.rule.Key, Type: e.rule.Type, Priority: e.rule.Priority, Hash: e.rule.Mode.String(), RolledBack: e.rolledBack,
				InScope: true, Claimed: true, Group: t.Group, Target: t.Pool.Name, Reason: fmt.Sprintf("claimed: a target is tagged %q", tag),
			})
			rtr = &tr.Rules[len(tr.Rules)-1]
		}
		switch {
		case e.rolledBack && e.rule.Type != rule.TypeAB && t == &e.rule.Gray:
			d.Group, d.Target, d.Degraded, d.Intended = GroupStable, e.stable, DegradedRollback, t.Pool
		case e.rolledBack && e.rule.Type == rule.TypeAB:
			if c := e.rule.ControlGroup(); c != t {
				d.Group, d.Target, d.Degraded, d.Intended = c.Group, c.Pool, DegradedRollback, t.Pool
			}
		case t == &e.rule.Gray:
			guard(e, d, rtr)
		}
		if tr != nil {
			rtr.Group, rtr.Target = d.Group, d.Target.Name
			tr.Reason = fmt.Sprintf("request arrived colored %q by a trusted hop; rule %q has a target with that tag: group %q → %s", tag, e.rule.Key, d.Group, d.Target.Name)
		}
		return true
	}
	return false
}

// guard attaches the gray target's breaker to a live decision; the data
// plane asks it (Decision.Guard) once the request has passed its own
// limits, and an open breaker sends the request to the rule's stable
// target instead (seed 004 3.3.1). Explain (tr != nil) only reads the
// state, so that it never spends a half-open probe, and shows what an
// open breaker does.
func guard(e *entry, d *Decision, tr *rule.Trace) {
	b := e.breaker
	if b == nil {
		return
	}
	if tr == nil {
		d.Breaker = b
		return
	}
	st := b.State()
	tr.Breaker = st.String()
	if r := b.Snapshot().Reason; r != "" {
		tr.Breaker += ": " + r
	}
	if st != breaker.Open {
		return
	}
	d.Intended = d.Target
	d.Group, d.Target, d.Tag, d.Degraded = GroupStable, e.stable, d.StableTag, DegradedBreaker
	tr.Group, tr.Target = d.Group, d.Target.Name
	tr.Reason += "; the gray target's breaker is open, so stable instead"
}

// stableTag is the X-Gray-Tag of the entry's stable target: the rule's
// stable tag, or for an ab rule the control group's.
func (e *entry) stableTag() string {
	if e.rule.Type == rule.TypeAB {
		if c := e.rule.ControlGroup(); c != nil {
			return c.Tag
		}
		return ""
	}
	return e.rule.Stable.Tag
}

// experiment is the experiment id of an ab rule, "" for other rules.
func (e *entry) experiment() string {
	if e.rule.Type == rule.TypeAB {
		return e.rule.Source.ExperimentID
	}
	return ""
}

func stableOf(c *rule.Compiled) *upstream.Pool {
	if c.Type != rule.TypeAB {
		return c.Stable.Pool
	}
	if g := c.ControlGroup(); g != nil {
		return g.Pool
	}
	return nil
}

// RolledBackAll reports the global rollback flag.
func (s *Snapshot) RolledBackAll() bool { return s.rolledBackAll }

// RolledBack reports whether one-click rollback is on for the rule key,
// globally or for the rule.
func (s *Snapshot) RolledBack(key string) bool { return s.rolledBackAll || s.rolledBack[key] }

// Version returns the stored version of the rule key (0 when unknown).
func (s *Snapshot) Version(key string) int64 { return s.versions[key] }

// Report returns the Report the snapshot's decisions for rule key carry
// (nil when the rule asks for nothing). It is the pointer Decision.Report
// holds, so a consumer can tell a decision of this snapshot from one of an
// older snapshot.
func (s *Snapshot) Report(key string) *Report { return s.reports[key] }

// Holdout returns the snapshot's holdout (nil: none).
func (s *Snapshot) Holdout() *rule.Holdout { return s.holdout }

// Layers lists the layers of the snapshot's rules with their ranges and
// free slots.
func (s *Snapshot) Layers() []rule.Layer {
	rules := make([]*rule.Compiled, 0, len(s.RuleSet))
	for _, r := range s.RuleSet {
		rules = append(rules, r)
	}
	return rule.Layers(rules)
}

// Router holds the current Snapshot. It is safe for concurrent use; only
// the reloader calls Store.
type Router struct {
	snap atomic.Pointer[Snapshot]
}

// New returns a Router serving s.
func New(s *Snapshot) *Router {
	r := &Router{}
	r.snap.Store(s)
	return r
}

// Load returns the current snapshot.
func (r *Router) Load() *Snapshot { return r.snap.Load() }

// Store publishes a new snapshot.
func (r *Router) Store(s *Snapshot) { r.snap.Store(s) }

// Decide routes req against the current snapshot.
func (r *Router) Decide(req attr.Request) Decision { return r.snap.Load().Decide(req, nil) }

// DecideInto is Decide writing the decision into *d (see
// Snapshot.DecideInto).
func (r *Router) DecideInto(req attr.Request, d *Decision) { r.snap.Load().DecideInto(req, nil, d) }
