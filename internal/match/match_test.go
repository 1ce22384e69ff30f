package match

import (
	"encoding/json"
	"testing"

	"github.com/graygate/graygate/internal/attr"
)

func TestPredicate(t *testing.T) {
	var c Conditions
	if err := json.Unmarshal([]byte(`{"ua_contains":"WeChat","path_prefix":["/api/user/","/u/"],"header_exists":["X-Beta"]}`), &c); err != nil {
		t.Fatal(err)
	}
	p, err := Compile(&c, "conditions", nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		path, ua   string
		beta, want bool
	}{
		{"all match", "/api/user/1", "Mozilla WeChat/8", true, true},
		{"second prefix", "/u/1", "WeChat", true, true},
		{"ua fails", "/api/user/1", "Safari", true, false},
		{"path fails", "/api/order", "WeChat", true, false},
		{"header fails", "/api/user/1", "WeChat", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := map[string]string{"User-Agent": tt.ua}
			if tt.beta {
				h["x-beta"] = ""
			}
			var trace []Result
			f := NewFacts(&attr.Map{PathV: tt.path, Headers: h}, "u", nil)
			got := p.Match(&f, &trace)
			if got != tt.want {
				t.Errorf("Match(%s, %s) = %v, want %v (%+v)", tt.path, tt.ua, got, tt.want, trace)
			}
			if !got && trace[len(trace)-1].Matched {
				t.Errorf("trace should end with the failed condition: %+v", trace)
			}
		})
	}
	var empty Predicate
	f := NewFacts(&attr.Map{}, "", nil)
	if !empty.Match(&f, nil) || !empty.Empty() {
		t.Error("the zero predicate must match everything")
	}
}

func TestSegments(t *testing.T) {
	tests := []struct {
		prefixes []string
		want     []string
		ok       bool
	}{
		{[]string{"/api/"}, []string{"api"}, true},
		{[]string{"/api/user/", "/shop/x"}, []string{"api", "shop"}, true},
		{[]string{"/api"}, nil, false},
		{[]string{"/"}, nil, false},
		{[]string{"/api/", "/x"}, nil, false},
		{nil, nil, false},
	}
	for _, tt := range tests {
		p, _ := Compile(&Conditions{PathPrefix: tt.prefixes}, "", nil)
		got, ok := p.Segments()
		if ok != tt.ok || len(got) != len(tt.want) {
			t.Errorf("Segments(%v) = %v %v, want %v %v", tt.prefixes, got, ok, tt.want, tt.ok)
		}
	}
}
