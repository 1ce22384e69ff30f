package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// record is one change as persisted. It is the Change without what can be
// derived from the state it applies to: Before, RolledBackBefore, and the
// rule of rollback, resume and delete changes (which leave the rule as it was
// or remove it). Before and RolledBackBefore are only set on the oldest
// retained record of a key in a checkpoint, where no earlier record exists to
// derive them from.
type record struct {
	Key        string          `json:"key"`
	Op         string          `json:"op"`
	Version    int64           `json:"version"`
	Revision   int64           `json:"revision"`
	At         time.Time       `json:"at"`
	By         string          `json:"by,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	Rule       json.RawMessage `json:"rule,omitempty"`
	RolledBack bool            `json:"rolled_back,omitempty"`

	Before           json.RawMessage `json:"before,omitempty"`
	RolledBackBefore bool            `json:"rolled_back_before,omitempty"`
}

// keyState is everything the store knows about one key, or about the global
// flag. Rule byte slices are shared between entry and history and are never
// modified after they are stored; they are copied on the way out.
type keyState struct {
	// version is the last version ever written; it survives delete so that
	// versions are never reused.
	version    int64
	rule       json.RawMessage // nil while the rule does not exist
	rolledBack bool
	entry      Entry    // meaningful while rule != nil
	history    []Change // oldest first, at most state.limit long
}

// state is the in-memory image of the store. It is mutated only by apply,
// which the file store calls with its writer lock and its state lock held.
type state struct {
	limit    int
	revision int64
	rules    map[string]*keyState
	global   keyState
}

func newState(limit int) *state {
	return &state{limit: limit, rules: make(map[string]*keyState)}
}

// lookup returns the state of key, or nil if the key was never written.
func (st *state) lookup(key string) *keyState {
	if key == GlobalKey {
		return &st.global
	}
	return st.rules[key]
}

// checkNext validates r as the next change of the whole store.
func (st *state) checkNext(r *record) error {
	if r.Revision != st.revision+1 {
		return fmt.Errorf("revision %d does not follow %d", r.Revision, st.revision)
	}
	if r.Before != nil || r.RolledBackBefore {
		return errors.New("journal record carries checkpoint-only fields")
	}
	ks := st.lookup(r.Key)
	if ks == nil {
		ks = &keyState{}
	}
	return checkRecord(ks, r)
}

// checkRecord validates r as the next change of the key whose state is ks.
// It is the single definition of which changes are legal; the writer and
// the loader both go through it, so a file that loads is one the writer
// could have produced.
func checkRecord(ks *keyState, r *record) error {
	if !ValidKey(r.Key) && r.Key != GlobalKey {
		return fmt.Errorf("invalid key %q", r.Key)
	}
	if r.Version != ks.version+1 {
		return fmt.Errorf("key %q: version %d does not follow %d", r.Key, r.Version, ks.version)
	}
	if r.Revision < 1 {
		return fmt.Errorf("key %q: revision %d is not positive", r.Key, r.Revision)
	}
	if r.Rule != nil && !IsObject(r.Rule) {
		return fmt.Errorf("key %q version %d: rule is not a JSON object", r.Key, r.Version)
	}
	bad := func(why string) error {
		return fmt.Errorf("key %q version %d: %s %s", r.Key, r.Version, r.Op, why)
	}
	exists := ks.rule != nil
	if r.Key == GlobalKey {
		if r.Rule != nil {
			return bad("of the global flag carries a rule")
		}
		switch r.Op {
		case OpRollback:
			if ks.rolledBack || !r.RolledBack {
				return bad("must set a cleared flag")
			}
		case OpResume:
			if !ks.rolledBack || r.RolledBack {
				return bad("must clear a set flag")
			}
		default:
			return bad("is not an operation of the global flag")
		}
		return nil
	}
	switch r.Op {
	case OpCreate:
		switch {
		case exists:
			return bad("of an existing rule")
		case r.Rule == nil:
			return bad("without a rule")
		case r.RolledBack:
			return bad("with the rollback flag set")
		}
	case OpUpdate:
		switch {
		case !exists:
			return bad("of a missing rule")
		case r.Rule == nil:
			return bad("without a rule")
		case r.RolledBack != ks.rolledBack:
			return bad("changes the rollback flag")
		}
	case OpRevert:
		switch {
		case r.Rule == nil:
			return bad("without a rule")
		case exists && r.RolledBack != ks.rolledBack:
			return bad("changes the rollback flag")
		case !exists && r.RolledBack:
			return bad("recreates a rule with the rollback flag set")
		}
	case OpDelete:
		switch {
		case !exists:
			return bad("of a missing rule")
		case r.Rule != nil:
			return bad("carries a rule")
		case r.RolledBack:
			return bad("leaves the rollback flag set")
		}
	case OpRollback, OpResume:
		on := r.Op == OpRollback
		switch {
		case !exists:
			return bad("of a missing rule")
		case r.Rule != nil:
			return bad("carries a rule")
		case ks.rolledBack == on || r.RolledBack != on:
			return bad("does not toggle the rollback flag")
		}
	default:
		return fmt.Errorf("key %q version %d: unknown op %q", r.Key, r.Version, r.Op)
	}
	return nil
}

// apply commits r, which must have passed checkRecord, to the state.
func (st *state) apply(r *record) {
	ks := st.lookup(r.Key)
	if ks == nil {
		ks = &keyState{}
		st.rules[r.Key] = ks
	}
	after := r.Rule
	switch r.Op {
	case OpRollback, OpResume:
		after = ks.rule
	case OpDelete:
		after = nil
	}
	ks.history = append(ks.history, Change{
		Key:              r.Key,
		Op:               r.Op,
		Version:          r.Version,
		Revision:         r.Revision,
		At:               r.At,
		By:               r.By,
		Reason:           r.Reason,
		Before:           ks.rule,
		After:            after,
		RolledBackBefore: ks.rolledBack,
		RolledBackAfter:  r.RolledBack,
	})
	if over := len(ks.history) - st.limit; over > 0 {
		clear(ks.history[:over]) // let the pruned rules be collected
		ks.history = ks.history[over:]
	}
	ks.version = r.Version
	ks.rule = after
	ks.rolledBack = r.RolledBack
	ks.entry = Entry{}
	if after != nil {
		ks.entry = Entry{
			Key:        r.Key,
			Rule:       after,
			Version:    r.Version,
			Revision:   r.Revision,
			UpdatedAt:  r.At,
			UpdatedBy:  r.By,
			Reason:     r.Reason,
			RolledBack: r.RolledBack,
		}
	}
	st.revision = max(st.revision, r.Revision)
}

// snapshot returns a deep copy of the current rule set.
func (st *state) snapshot() State {
	keys := make([]string, 0, len(st.rules))
	for k, ks := range st.rules {
		if ks.rule != nil {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	rules := make([]Entry, len(keys))
	for i, k := range keys {
		rules[i] = cloneEntry(st.rules[k].entry)
	}
	return State{Revision: st.revision, Rules: rules, RolledBack: st.global.rolledBack}
}

// historyOf returns a deep copy of the history of ks, newest first.
func historyOf(ks *keyState) []Change {
	out := make([]Change, len(ks.history))
	for i, c := range ks.history {
		c.Before = cloneRaw(c.Before)
		c.After = cloneRaw(c.After)
		out[len(out)-1-i] = c
	}
	return out
}

func cloneEntry(e Entry) Entry {
	e.Rule = cloneRaw(e.Rule)
	return e
}

func cloneRaw(b json.RawMessage) json.RawMessage {
	if b == nil {
		return nil
	}
	return bytes.Clone(b)
}
