package geo

import (
	"errors"
	"slices"

	"github.com/graygate/graygate/internal/strict"
)

// matcherMapMin is the list length from which Match uses a map; below it,
// comparing a handful of short strings is faster than hashing.
const matcherMapMin = 8

// Matcher is a compiled region_in list: ISO codes ("CN", "CN-BJ", "US") and
// names ("北京", "北京市", "Beijing", "Mountain View") of countries,
// provinces or cities, in any language. A region matches when any value
// names it at any level. It is immutable and safe for concurrent use; the
// zero Matcher matches nothing.
type Matcher struct {
	values []string
	keys   []string
	set    map[string]struct{}
}

// NewMatcher compiles values. Every empty or blank value is reported, each
// as a strict.FieldError at its index ("[2]"), for the caller to prefix.
func NewMatcher(values []string) (Matcher, error) {
	var errs []error
	m := Matcher{values: slices.Clone(values)}
	for i, v := range values {
		k := normalize(v)
		if k == "" {
			errs = append(errs, strict.Errorf(strict.Index("", i), "must not be empty"))
			continue
		}
		if !slices.Contains(m.keys, k) {
			m.keys = append(m.keys, k)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Matcher{}, err
	}
	if len(m.keys) >= matcherMapMin {
		m.set = make(map[string]struct{}, len(m.keys))
		for _, k := range m.keys {
			m.set[k] = struct{}{}
		}
	}
	return m, nil
}

// Match reports whether r is in the list.
func (m Matcher) Match(r Region) bool {
	if m.set != nil {
		for _, n := range r.Names {
			if _, ok := m.set[n]; ok {
				return true
			}
		}
		return false
	}
	for _, n := range r.Names {
		for _, k := range m.keys {
			if n == k {
				return true
			}
		}
	}
	return false
}

// Values returns the list as written, for explain traces.
func (m Matcher) Values() []string { return slices.Clone(m.values) }
