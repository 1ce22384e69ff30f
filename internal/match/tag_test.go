package match

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/tags"
)

// seed004 is seed 004's tag rule example, verbatim.
const seed004 = `[{"tag":"multi_loan_index","operator":"gt","value":0.7},{"tag":"blacklist_flag","operator":"eq","value":false}]`

func headerSources(t *testing.T) *Sources {
	t.Helper()
	r, err := tags.New(tags.Config{Header: "X-User-Tags"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &Sources{Tags: r}
}

func compileTags(t *testing.T, js string, types map[string]string) (Predicate, error) {
	t.Helper()
	var tc []TagCond
	if err := json.Unmarshal([]byte(js), &tc); err != nil {
		t.Fatal(err)
	}
	return Compile(&Conditions{Tags: tc}, "conditions", types)
}

func TestTagConditions(t *testing.T) {
	src := headerSources(t)
	tests := []struct {
		conds, header string
		trusted, want bool
	}{
		{seed004, "multi_loan_index=0.82;blacklist_flag=false", true, true},
		{seed004, "multi_loan_index=0.7;blacklist_flag=false", true, false},
		{seed004, "multi_loan_index=0.9;blacklist_flag=true", true, false},
		{seed004, "multi_loan_index=0.9", true, false}, // a missing tag never matches
		{seed004, "multi_loan_index=high;blacklist_flag=false", true, false},
		{seed004, "multi_loan_index=0.82;blacklist_flag=false", false, false}, // untrusted peer: no tags
		{`[{"tag":"vip","operator":"eq","value":true}]`, "vip=true", true, true},
		{`[{"tag":"vip","operator":"ne","value":true}]`, "vip=false", true, true},
		{`[{"tag":"tier","operator":"in","value":["gold","silver"]}]`, "tier=gold", true, true},
		{`[{"tag":"tier","operator":"not_in","value":["gold","silver"]}]`, "tier=bronze", true, true},
		{`[{"tag":"tier","operator":"not_in","value":["gold","silver"]}]`, "vip=1", true, false},
		{`[{"tag":"score","operator":"in","value":[1,2,3]}]`, "score=2.0", true, true},
		{`[{"tag":"city","operator":"contains","value":"jing"}]`, "city=beijing", true, true},
		{`[{"tag":"age","operator":"gte","value":18},{"tag":"age","operator":"lt","value":30}]`, "age=18", true, true},
		{`[{"tag":"age","operator":"lte","value":17}]`, "age=18", true, false},
		// A number tag is a plain decimal: not a digit-separated, hex or
		// infinite one, which strconv would read as 10, 16 and +Inf.
		{`[{"tag":"score","operator":"gt","value":5}]`, "score=1_0", true, false},
		{`[{"tag":"score","operator":"gt","value":5}]`, "score=0x1p4", true, false},
		{`[{"tag":"score","operator":"gt","value":5}]`, "score=Inf", true, false},
		{`[{"tag":"score","operator":"gt","value":5}]`, "score=1e999", true, false},
		{`[{"tag":"score","operator":"gt","value":5}]`, "score=1e1", true, true},
		{`[{"tag":"name","operator":"gt","value":"m"}]`, "name=zed", true, true},
		{`[{"tag":"vip","operator":"exists"}]`, "vip=0", true, true},
		{`[{"tag":"vip","operator":"not_exists"}]`, "other=1", true, true},
		{`[{"tag":"vip","operator":"not_exists"}]`, "vip=1", true, false},
	}
	for _, tt := range tests {
		p, err := compileTags(t, tt.conds, nil)
		if err != nil {
			t.Fatalf("Compile(%s): %v", tt.conds, err)
		}
		f := NewFacts(&attr.Map{Headers: map[string]string{"X-User-Tags": tt.header}, Trusted: tt.trusted}, "u1", src)
		var trace []Result
		if got := p.Match(&f, &trace); got != tt.want {
			t.Errorf("%s with %q (trusted %v) = %v, want %v; trace %+v", tt.conds, tt.header, tt.trusted, got, tt.want, trace)
		}
	}
}

func TestUnknownTagsMatchNothing(t *testing.T) {
	src := headerSources(t)
	p, _ := compileTags(t, `[{"tag":"vip","operator":"not_exists"}]`, nil)
	// A malformed header from a trusted peer makes the tags unknown.
	f := NewFacts(&attr.Map{Headers: map[string]string{"X-User-Tags": "vip=true;vip=false"}, Trusted: true}, "u1", src)
	var trace []Result
	if p.Match(&f, &trace) {
		t.Error("unknown tags must not match, not even not_exists")
	}
	if !strings.HasPrefix(trace[0].Got, "unknown") {
		t.Errorf("trace = %+v", trace)
	}
}

// TestNoTagsIsAnAnswer: a user for whom every source answered and none
// had tags (status None) has every tag absent, exactly like a user with
// other tags: not_exists holds and the rest fail. Before, not_exists
// failed for None, so "not blacklisted" claimed users with some tags and
// refused users with none.
func TestNoTagsIsAnAnswer(t *testing.T) {
	src := headerSources(t)
	tests := []struct {
		name, conds string
		headers     map[string]string
		trusted     bool
		want        bool
		got         string
	}{
		{"no header", `[{"tag":"blacklist_flag","operator":"not_exists"}]`, nil, true, true, "(absent)"},
		{"blank header", `[{"tag":"blacklist_flag","operator":"not_exists"}]`, map[string]string{"X-User-Tags": " ; "}, true, true, "(absent)"},
		{"other tags", `[{"tag":"blacklist_flag","operator":"not_exists"}]`, map[string]string{"X-User-Tags": "vip"}, true, true, "(absent)"},
		{"the tag", `[{"tag":"blacklist_flag","operator":"not_exists"}]`, map[string]string{"X-User-Tags": "blacklist_flag"}, true, false, "true"},
		{"no header, exists", `[{"tag":"vip","operator":"exists"}]`, nil, true, false, "(absent)"},
		{"no header, eq", `[{"tag":"blacklist_flag","operator":"eq","value":false}]`, nil, true, false, "(absent)"},
		{"no header, ne", `[{"tag":"vip","operator":"ne","value":true}]`, nil, true, false, "(absent)"},
		{"untrusted header", `[{"tag":"vip","operator":"exists"}]`, map[string]string{"X-User-Tags": "vip"}, false, false, "(absent)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := compileTags(t, tt.conds, nil)
			if err != nil {
				t.Fatal(err)
			}
			f := NewFacts(&attr.Map{Headers: tt.headers, Trusted: tt.trusted}, "u1", src)
			var trace []Result
			if got := p.Match(&f, &trace); got != tt.want {
				t.Errorf("Match(%s) with %v = %v, want %v; trace %+v", tt.conds, tt.headers, got, tt.want, trace)
			}
			if len(trace) != 1 || trace[0].Got != tt.got {
				t.Errorf("trace = %+v, want got %q", trace, tt.got)
			}
		})
	}
	// Without a tag source nothing is known, and tag conditions never
	// match (see Sources).
	p, _ := compileTags(t, `[{"tag":"blacklist_flag","operator":"not_exists"}]`, nil)
	f := NewFacts(&attr.Map{}, "u1", &Sources{})
	if p.Match(&f, nil) {
		t.Error("not_exists without a tag source: want no match")
	}
}

func TestTagValidation(t *testing.T) {
	types := map[string]string{"multi_loan_index": KindNumber, "blacklist_flag": KindBool}
	tests := []struct{ conds, want string }{
		{`[{"tag":"","operator":"eq","value":1}]`, "conditions.tags[0].tag: must be a tag name"},
		{`[{"tag":"a","operator":"greater","value":1}]`, `conditions.tags[0].operator: must be one of eq ne gt gte lt lte in not_in contains exists not_exists, got "greater"`},
		{`[{"tag":"a","operator":"gt","value":true}]`, `conditions.tags[0].value: type mismatch: "gt" compares numbers or strings, got boolean true`},
		{`[{"tag":"a","operator":"in","value":[1,"x"]}]`, `conditions.tags[0].value[1]: type mismatch: the list holds numbers, got string "x"`},
		{`[{"tag":"a","operator":"in","value":1}]`, `conditions.tags[0].value: must be a non-empty list for "in", got number 1`},
		{`[{"tag":"a","operator":"exists","value":1}]`, `conditions.tags[0].value: must be absent for "exists"`},
		{`[{"tag":"a","operator":"contains","value":1}]`, `conditions.tags[0].value: must be a string for "contains"`},
		{`[{"tag":"a","operator":"eq","value":{"x":1}}]`, `conditions.tags[0].value: must be a number, boolean or string`},
		{`[{"tag":"multi_loan_index","operator":"gt","value":"0.7"}]`, `conditions.tags[0].value: type mismatch: tag "multi_loan_index" is declared a number, got a string`},
		{`[{"tag":"blacklist_flag","operator":"eq","value":0}]`, `conditions.tags[0].value: type mismatch: tag "blacklist_flag" is declared a bool, got a number`},
	}
	for _, tt := range tests {
		_, err := compileTags(t, tt.conds, types)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Compile(%s) = %v\nwant %q", tt.conds, err, tt.want)
		}
	}
	if _, err := compileTags(t, seed004, types); err != nil {
		t.Errorf("seed 004's example with declared types: %v", err)
	}
}

func FuzzTagCond(f *testing.F) {
	f.Add(seed004, "multi_loan_index=0.82;blacklist_flag=false")
	f.Add(`[{"tag":"a","operator":"in","value":[1,2]}]`, "a=1")
	f.Fuzz(func(t *testing.T, conds, header string) {
		var tc []TagCond
		if json.Unmarshal([]byte(conds), &tc) != nil {
			return
		}
		p, err := Compile(&Conditions{Tags: tc}, "", nil)
		if err != nil {
			return
		}
		r, _ := tags.New(tags.Config{Header: "X-User-Tags"}, nil)
		fc := NewFacts(&attr.Map{Headers: map[string]string{"X-User-Tags": header}, Trusted: true}, "u", &Sources{Tags: r})
		p.Match(&fc, &[]Result{})
	})
}
