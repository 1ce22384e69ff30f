package match

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/strict"
	"github.com/graygate/graygate/internal/tags"
)

// TagCond is one condition on a user tag, in seed 004's shape (section
// 3.1.3): {"tag": "multi_loan_index", "operator": "gt", "value": 0.7}.
type TagCond struct {
	Tag      string `json:"tag"`
	Operator string `json:"operator"`
	Value    any    `json:"value,omitempty"`
}

// Tag value kinds, for comparison by the condition value's type.
const (
	KindNumber = "number"
	KindBool   = "bool"
	KindString = "string"
)

var operators = map[string]uint8{
	"eq": opEq, "ne": opNe, "gt": opGt, "gte": opGte, "lt": opLt, "lte": opLte,
	"in": opIn, "not_in": opNotIn, "contains": opContains, "exists": opExists, "not_exists": opNotExists,
}

const (
	opEq uint8 = iota
	opNe
	opGt
	opGte
	opLt
	opLte
	opIn
	opNotIn
	opContains
	opExists
	opNotExists
)

// scalar is a typed condition value.
type scalar struct {
	kind string
	num  float64
	b    bool
	str  string
}

func toScalar(v any) (scalar, bool) {
	switch x := v.(type) {
	case float64:
		return scalar{kind: KindNumber, num: x}, true
	case bool:
		return scalar{kind: KindBool, b: x}, true
	case string:
		return scalar{kind: KindString, str: x}, true
	}
	return scalar{}, false
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "nothing"
	case string:
		return "string " + strconv.Quote(x)
	case float64:
		return "number " + strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return "boolean " + strconv.FormatBool(x)
	case []any:
		return "a list"
	}
	return fmt.Sprintf("%T", v)
}

// tagCond is a compiled TagCond.
type tagCond struct {
	tag  string
	op   uint8
	val  scalar
	set  []scalar
	text string // for traces
}

// compileTag validates c under path. types declares known tag kinds
// (tag → "number", "bool" or "string"), so a type mismatch is found when
// the rule is stored rather than at request time.
func compileTag(c TagCond, path string, types map[string]string) (tagCond, error) {
	var errs []error
	add := func(p, format string, args ...any) { errs = append(errs, strict.Errorf(p, format, args...)) }
	if !tags.ValidKey(c.Tag) {
		add(strict.Join(path, "tag"), "must be a tag name ([A-Za-z0-9_.:-], 1-64 bytes), got %q", c.Tag)
	}
	op, ok := operators[c.Operator]
	if !ok {
		add(strict.Join(path, "operator"), "must be one of eq ne gt gte lt lte in not_in contains exists not_exists, got %q", c.Operator)
	}
	out := tagCond{tag: c.Tag, op: op, text: fmt.Sprintf("%s %s %v", c.Tag, c.Operator, c.Value)}
	vpath := strict.Join(path, "value")
	declared := types[c.Tag]
	checkKind := func(k string) {
		if declared != "" && k != declared {
			add(vpath, "type mismatch: tag %q is declared a %s, got a %s", c.Tag, declared, k)
		}
	}
	if ok {
		switch op {
		case opExists, opNotExists:
			if c.Value != nil {
				add(vpath, "must be absent for %q, got %s", c.Operator, describe(c.Value))
			}
			out.text = c.Tag + " " + c.Operator
		case opIn, opNotIn:
			list, isList := c.Value.([]any)
			if !isList || len(list) == 0 {
				add(vpath, "must be a non-empty list for %q, got %s", c.Operator, describe(c.Value))
				break
			}
			for i, e := range list {
				s, ok := toScalar(e)
				if !ok {
					add(strict.Index(vpath, i), "must be a number, boolean or string, got %s", describe(e))
					continue
				}
				if len(out.set) > 0 && s.kind != out.set[0].kind {
					add(strict.Index(vpath, i), "type mismatch: the list holds %ss, got %s", out.set[0].kind, describe(e))
					continue
				}
				out.set = append(out.set, s)
			}
			if len(out.set) > 0 {
				checkKind(out.set[0].kind)
			}
		case opContains:
			s, ok := c.Value.(string)
			if !ok {
				add(vpath, "must be a string for \"contains\", got %s", describe(c.Value))
			}
			out.val = scalar{kind: KindString, str: s}
			if declared != "" && declared != KindString {
				add(vpath, "type mismatch: \"contains\" needs a string tag, but tag %q is declared a %s", c.Tag, declared)
			}
		default:
			s, ok := toScalar(c.Value)
			if !ok {
				add(vpath, "must be a number, boolean or string for %q, got %s", c.Operator, describe(c.Value))
				break
			}
			if s.kind == KindBool && op != opEq && op != opNe {
				add(vpath, "type mismatch: %q compares numbers or strings, got %s", c.Operator, describe(c.Value))
			}
			out.val = s
			checkKind(s.kind)
		}
	}
	return out, errors.Join(errs...)
}

// parse reads a raw tag value as kind k.
func parse(raw string, k string) (scalar, bool) {
	switch k {
	case KindNumber:
		f, ok := attr.ParseDecimal(strings.TrimSpace(raw))
		if !ok {
			return scalar{}, false
		}
		return scalar{kind: k, num: f}, true
	case KindBool:
		b, err := strconv.ParseBool(strings.TrimSpace(raw))
		if err != nil {
			return scalar{}, false
		}
		return scalar{kind: k, b: b}, true
	}
	return scalar{kind: k, str: raw}, true
}

func compare(a, b scalar) (int, bool) {
	switch a.kind {
	case KindNumber:
		switch {
		case a.num < b.num:
			return -1, true
		case a.num > b.num:
			return 1, true
		}
		return 0, true
	case KindBool:
		if a.b == b.b {
			return 0, true
		}
		return 1, true
	}
	return strings.Compare(a.str, b.str), true
}

// eval tests a tag. A tag that is missing, or whose value does not parse as
// the condition's type, fails every condition but not_exists: a rule never
// claims a user on a guess.
func (c *tagCond) eval(set tags.Set) bool {
	raw, present := set[c.tag]
	switch c.op {
	case opExists:
		return present
	case opNotExists:
		return !present
	}
	if !present {
		return false
	}
	switch c.op {
	case opContains:
		return strings.Contains(raw, c.val.str)
	case opIn, opNotIn:
		in := false
		v, ok := parse(raw, c.set[0].kind)
		if !ok {
			return false
		}
		for _, s := range c.set {
			if r, _ := compare(v, s); r == 0 {
				in = true
				break
			}
		}
		return in == (c.op == opIn)
	}
	v, ok := parse(raw, c.val.kind)
	if !ok {
		return false
	}
	r, _ := compare(v, c.val)
	switch c.op {
	case opEq:
		return r == 0
	case opNe:
		return r != 0
	case opGt:
		return r > 0
	case opGte:
		return r >= 0
	case opLt:
		return r < 0
	case opLte:
		return r <= 0
	}
	return false
}
