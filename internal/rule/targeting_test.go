package rule

import (
	"strings"
	"testing"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/geo"
	"github.com/graygate/graygate/internal/match"
	"github.com/graygate/graygate/internal/tags"
)

// combined is the README's worked example: 10% of users in 北京 and 上海
// whose multi_loan_index > 0.7, never blacklisted users, plus a CEL check.
const combined = `{"key":"credit_v21","type":"gray","gray_percent":10,"white_list":["uid:tester"],
 "conditions":{"region_in":["北京","上海"],"tags":[
   {"tag":"multi_loan_index","operator":"gt","value":0.7},
   {"tag":"blacklist_flag","operator":"eq","value":false},
   {"tag":"vip","operator":"exists"}]},
 "when":"request.path.startsWith('/api/credit/') && user.tags['vip'] == 'true'",
 "targets":{"gray":"127.0.0.1:2","stable":"127.0.0.1:1"}}`

func sources(t testing.TB) *match.Sources {
	g, err := geo.New(geo.Config{Header: "X-Region"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := tags.New(tags.Config{Header: "X-User-Tags"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &match.Sources{Geo: g, Tags: tg}
}

func creditReq(path, region, tagHeader string) *attr.Map {
	return &attr.Map{MethodV: "GET", PathV: path, Trusted: true,
		Headers: map[string]string{"X-Region": region, "X-User-Tags": tagHeader}}
}

func TestCombinedStrategies(t *testing.T) {
	c := mustParse(t, combined)
	src := sources(t)
	good := "multi_loan_index=0.82;blacklist_flag=false;vip=true"
	tests := []struct {
		name, path, region, tags, uid string
		claimed                       bool
		failed                        string // the condition that fails, for out-of-scope cases
	}{
		{"whitelisted in scope", "/api/credit/apply", "北京", good, "tester", true, ""},
		{"wrong region", "/api/credit/apply", "深圳", good, "tester", false, "region_in"},
		{"region by ISO code", "/api/credit/apply", "CN-SH", good, "tester", true, ""},
		{"low index", "/api/credit/apply", "上海", "multi_loan_index=0.5;blacklist_flag=false;vip=true", "tester", false, "tag"},
		{"blacklisted", "/api/credit/apply", "上海", "multi_loan_index=0.9;blacklist_flag=true;vip=true", "tester", false, "tag"},
		{"cel path", "/api/other", "北京", good, "tester", false, "when"},
		{"cel tag value", "/api/credit/apply", "北京", "multi_loan_index=0.9;blacklist_flag=false;vip=no", "tester", false, "when"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := match.NewFacts(creditReq(tt.path, tt.region, tt.tags), tt.uid, src)
			var tr Trace
			_, ok := c.Eval(&f, false, nil, &tr)
			if ok != tt.claimed {
				t.Fatalf("claimed = %v, want %v; trace %+v", ok, tt.claimed, tr)
			}
			if tt.failed != "" {
				last := tr.Conditions[len(tr.Conditions)-1]
				if last.Condition != tt.failed || last.Matched {
					t.Errorf("the failing condition is %+v, want %s", last, tt.failed)
				}
			}
			for _, cnd := range tr.Conditions {
				if cnd.Condition == "region_in" && cnd.Source != "header" {
					t.Errorf("region source = %q, want header", cnd.Source)
				}
			}
		})
	}
	// Within scope, the percentage decides for everyone else, and the
	// bucket does not depend on the region: a traveller keeps it.
	in := 0
	for i := 0; i < 2000; i++ {
		uid := "u" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('0'+i%10)) + string(rune('A'+i/260))
		f1 := match.NewFacts(creditReq("/api/credit/x", "北京", good), uid, src)
		f2 := match.NewFacts(creditReq("/api/credit/x", "上海", good), uid, src)
		_, ok1 := c.Eval(&f1, false, nil, nil)
		_, ok2 := c.Eval(&f2, false, nil, nil)
		if ok1 != ok2 {
			t.Fatalf("user %s: gray in 北京 %v, in 上海 %v", uid, ok1, ok2)
		}
		if ok1 {
			in++
		}
	}
	if in < 120 || in > 280 {
		t.Errorf("%d of 2000 in-scope users gray at 10%%", in)
	}
}

func TestWhenErrors(t *testing.T) {
	tests := []struct{ when, want string }{
		{"requst.path == '/'", "when: line 1, column 1: undeclared reference to 'requst'"},
		{"request.path", "when: result must be bool"},
		{"request.path.startsWith(", "when: line 1, column"},
	}
	for _, tt := range tests {
		js := `{"key":"a","type":"gray","gray_percent":1,"when":` + quote(tt.when) + `,"targets":{"gray":"h:1","stable":"h:2"}}`
		_, err := Parse([]byte(js), testEnv())
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("when %q: %v, want %q", tt.when, err, tt.want)
		}
	}
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// BenchmarkCombinedRule is a rule with a region, three tag conditions and a
// CEL expression, the tags already parsed for the request (as they are
// after the first condition asks for them).
func BenchmarkCombinedRule(b *testing.B) {
	c, err := Parse([]byte(combined), testEnv())
	if err != nil {
		b.Fatal(err)
	}
	src := sources(b)
	r := creditReq("/api/credit/apply", "北京", "multi_loan_index=0.82;blacklist_flag=false;vip=true")
	f := match.NewFacts(r, "someone", src)
	f.Tags()
	f.Region()
	b.ReportAllocs()
	for b.Loop() {
		g := f // resolved attributes, as within one request
		c.Eval(&g, false, nil, nil)
	}
}
