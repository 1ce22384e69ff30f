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
// and an empty field written out do not count, and without rollout.status,
// which the gateway writes as a rollout advances. A rule of the file that
// does not decode is left out: it was refused before anything was seeded.
func (c *Config) RulesNotApplied(held map[string]json.RawMessage) []NotApplied {
	var out []NotApplied
	for _, raw := range c.Rules {
		file, ok := canonicalRule(raw)
		if !ok {
			continue
		}
		var key struct {
			Key string `json:"key"`
		}
		_ = json.Unmarshal(file, &key)
		stored, found := held[key.Key]
		if !found {
			out = append(out, NotApplied{Key: key.Key, Deleted: true})
			continue
		}
		if s, ok := canonicalRule(stored); !ok || !bytes.Equal(s, file) {
			out = append(out, NotApplied{Key: key.Key})
		}
	}
	return out
}

// canonicalRule is raw as the admin API stores a rule (the JSON of the
// rule it decodes to), without rollout.status; ok is false for JSON that
// is not a rule.
func canonicalRule(raw json.RawMessage) (json.RawMessage, bool) {
	r, err := rule.Decode(raw)
	if err != nil {
		return nil, false
	}
	if r.Rollout != nil {
		ro := *r.Rollout
		ro.Status = nil
		r.Rollout = &ro
	}
	b, err := json.Marshal(r)
	return b, err == nil
}
