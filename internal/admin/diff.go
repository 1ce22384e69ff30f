package admin

import (
	"encoding/json"
	"reflect"
	"slices"

	"github.com/graygate/graygate/internal/strict"
)

// DiffLine is one difference between two versions of a rule.
type DiffLine struct {
	Path   string `json:"path"`
	Op     string `json:"op"` // added, removed, changed
	Before any    `json:"before,omitempty"`
	After  any    `json:"after,omitempty"`
}

// Diff compares two rule JSON documents field by field. Lists of strings
// (white lists) are compared as sets, so adding one user shows as one line.
func Diff(before, after json.RawMessage) []DiffLine {
	var a, b any
	if len(before) > 0 {
		_ = json.Unmarshal(before, &a)
	}
	if len(after) > 0 {
		_ = json.Unmarshal(after, &b)
	}
	out := []DiffLine{}
	diffValue("", a, b, &out)
	return out
}

func diffValue(path string, a, b any, out *[]DiffLine) {
	switch {
	case a == nil && b == nil:
		return
	case a == nil:
		*out = append(*out, DiffLine{Path: path, Op: "added", After: b})
		return
	case b == nil:
		*out = append(*out, DiffLine{Path: path, Op: "removed", Before: a})
		return
	}
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := make([]string, 0, len(am)+len(bm))
		for k := range am {
			keys = append(keys, k)
		}
		for k := range bm {
			if _, ok := am[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			diffValue(strict.Join(path, k), am[k], bm[k], out)
		}
		return
	}
	as, aok := stringSet(a)
	bs, bok := stringSet(b)
	if aok && bok {
		for _, s := range as.order {
			if !bs.has[s] {
				*out = append(*out, DiffLine{Path: path, Op: "removed", Before: s})
			}
		}
		for _, s := range bs.order {
			if !as.has[s] {
				*out = append(*out, DiffLine{Path: path, Op: "added", After: s})
			}
		}
		return
	}
	if !reflect.DeepEqual(a, b) {
		*out = append(*out, DiffLine{Path: path, Op: "changed", Before: a, After: b})
	}
}

type set struct {
	order []string
	has   map[string]bool
}

func stringSet(v any) (set, bool) {
	l, ok := v.([]any)
	if !ok {
		return set{}, false
	}
	s := set{has: make(map[string]bool, len(l))}
	for _, e := range l {
		str, ok := e.(string)
		if !ok {
			return set{}, false
		}
		if !s.has[str] {
			s.has[str] = true
			s.order = append(s.order, str)
		}
	}
	return s, true
}
