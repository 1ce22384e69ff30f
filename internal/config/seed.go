package config

import (
	"bytes"
	"encoding/json"

	"github.com/graygate/graygate/internal/rule"
)

// NotApplied is a rule of the config file that does not serve: the store
// held its key before the file was seeded, and seeding never overwrites
// the store (see Config.Rules).
type NotApplied struct {
	Key string
	// Deleted says that the store deleted the rule. Otherwise the store's
	// version, which differs from the file's, serves.
	Deleted bool
}

// RulesNotApplied returns, in file order, the rules of c that are not what
// the store holds, given held: the store's rules by key. Call it after
// seeding, which creates every key the store never held, so that a key of
// the file that held lacks is one the store deleted. A rule is compared as
// the rule it decodes to, so that its formatting, the order of its keys
// and an empty field written out do not count, and without what the
// gateway writes as a rollout runs: rollout.status, and gray_percent once
// the stored rule's rollout has started (it has a status), since moving
// gray_percent is the rollout's job, not an edit. A rule of the file that
// does not decode is left out: it was refused before anything was seeded.
func (c *Config) RulesNotApplied(held map[string]json.RawMessage) []NotApplied {
	var out []NotApplied
	for _, raw := range c.Rules {
		file, err := rule.Decode(raw)
		if err != nil {
			continue
		}
		stored, found := held[file.Key]
		if !found {
			out = append(out, NotApplied{Key: file.Key, Deleted: true})
			continue
		}
		s, err := rule.Decode(stored)
		if err != nil || !sameRule(file, s) {
			out = append(out, NotApplied{Key: file.Key})
		}
	}
	return out
}

// sameRule reports whether the file's rule f is what the store holds, s,
// apart from what a rollout writes (see RulesNotApplied).
func sameRule(f, s rule.Rule) bool {
	rolled := s.Rollout != nil && s.Rollout.Status != nil
	a, okA := canonicalRule(f, rolled)
	b, okB := canonicalRule(s, rolled)
	return okA && okB && bytes.Equal(a, b)
}

// canonicalRule is r as the admin API stores it (its JSON), without
// rollout.status, and without gray_percent if rolled; ok is false if it
// does not encode.
func canonicalRule(c rule.Rule, rolled bool) (json.RawMessage, bool) {
	if c.Rollout != nil {
		ro := *c.Rollout
		ro.Status = nil
		c.Rollout = &ro
	}
	if rolled {
		c.GrayPercent = nil
	}
	b, err := json.Marshal(&c)
	return b, err == nil
}
