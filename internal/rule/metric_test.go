package rule

import (
	"strings"
	"testing"

	"github.com/graygate/graygate/internal/strict"
)

const abWith = `{"key":"exp","type":"ab","experiment_id":"e","groups":[{"name":"A","weight":50,"target":"h:1"},{"name":"B","weight":50,"target":"h:2"}]`

// TestMetricsCompile compiles the example metrics.
func TestMetricsCompile(t *testing.T) {
	c := mustParse(t, abWith+`,"sequential":true,"sequential_tuning":2000,"metrics":[
  {"name": "purchase", "type": "binomial", "match": {"method": "POST", "path_prefix": "/api/order", "status": "2xx"}},
  {"name": "revenue",  "type": "mean",     "from_header": "X-Gray-Metric-Revenue"},
  {"name": "signup",   "type": "binomial"},
  {"name": "views",    "type": "mean", "match": {"status": "200"}},
  {"name": "refund",   "type": "mean", "from_header": "X-Gray-Metric-Refund"}]}`)
	if len(c.Metrics) != 5 {
		t.Fatalf("metrics = %+v", c.Metrics)
	}
	if got := strings.Join(c.ReportHeaders, ","); got != "X-Gray-Metric-Revenue,X-Gray-Metric-Refund" {
		t.Errorf("ReportHeaders = %q", got)
	}
	p, rev, sig, views, ref := c.Metrics[0], c.Metrics[1], c.Metrics[2], c.Metrics[3], c.Metrics[4]
	if !p.Binomial || p.Match == nil || p.Header != -1 || rev.Binomial || rev.Header != 0 || ref.Header != 1 || sig.Match != nil || sig.Header != -1 {
		t.Errorf("compiled metrics = %+v", c.Metrics)
	}
	tests := []struct {
		name         string
		m            *Matcher
		method, path string
		status       int
		want         bool
	}{
		{"post order 201", p.Match, "POST", "/api/order/42", 201, true},
		{"post order 299", p.Match, "POST", "/api/order", 299, true},
		{"get order", p.Match, "GET", "/api/order", 200, false},
		{"post order 500", p.Match, "POST", "/api/order", 500, false},
		{"post order 302", p.Match, "POST", "/api/order", 302, false},
		{"other path", p.Match, "POST", "/api/orders-not", 200, true}, // a prefix is a prefix
		{"elsewhere", p.Match, "POST", "/api/ord", 200, false},
		{"exact status", views.Match, "GET", "/", 200, true},
		{"exact status miss", views.Match, "GET", "/", 201, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.m.Matches(tt.method, tt.path, tt.status); got != tt.want {
				t.Errorf("Matches(%q, %q, %d) = %v, want %v", tt.method, tt.path, tt.status, got, tt.want)
			}
		})
	}
	if !c.Source.Sequential || c.Source.SequentialTuning != 2000 {
		t.Errorf("sequential not kept: %+v", c.Source)
	}
}

func TestMetricsValidation(t *testing.T) {
	tests := []struct {
		name string
		js   string
		want []string
	}{
		{"missing name and type", abWith + `,"metrics":[{}]}`, []string{"metrics[0].name: is required", "metrics[0].type: is required"}},
		{"bad type", abWith + `,"metrics":[{"name":"m","type":"count"}]}`, []string{`metrics[0].type: must be "binomial" or "mean", got "count"`}},
		{"bad name", abWith + `,"metrics":[{"name":"a b","type":"mean"}]}`, []string{`metrics[0].name: must match`}},
		{"duplicate name", abWith + `,"metrics":[{"name":"m","type":"mean"},{"name":"m","type":"binomial"}]}`, []string{`metrics[1].name: duplicates metrics[0].name "m"`}},
		{"both sources", abWith + `,"metrics":[{"name":"m","type":"mean","match":{"method":"GET"},"from_header":"X-M"}]}`, []string{"metrics[0]: set at most one of match and from_header"}},
		{"empty match", abWith + `,"metrics":[{"name":"m","type":"binomial","match":{}}]}`, []string{"metrics[0].match: needs at least one of"}},
		{"bad match fields", abWith + `,"metrics":[{"name":"m","type":"binomial","match":{"method":"post","path_prefix":"api","status":"2x"}}]}`,
			[]string{`metrics[0].match.method: must be an upper-case method such as "POST", got "post"`, `metrics[0].match.path_prefix: must start with "/", got "api"`, `metrics[0].match.status: must be a status class such as "2xx" or a code such as "201", got "2x"`}},
		{"status out of range", abWith + `,"metrics":[{"name":"m","type":"binomial","match":{"status":"600"}}]}`, []string{`metrics[0].match.status: must be a status class`}},
		{"bad header", abWith + `,"metrics":[{"name":"m","type":"mean","from_header":"X M"}]}`, []string{`metrics[0].from_header: must be a header name`}},
		{"reserved header", abWith + `,"metrics":[{"name":"m","type":"mean","from_header":"Content-Length"}]}`, []string{`metrics[0].from_header: "Content-Length" is a header graygate or HTTP itself manages`}},
		{"duplicate header", abWith + `,"metrics":[{"name":"m","type":"mean","from_header":"X-M"},{"name":"n","type":"mean","from_header":"x-m"}]}`, []string{`metrics[1].from_header: "x-m" duplicates metrics[0].from_header "X-M"`}},
		{"tuning without sequential", abWith + `,"sequential_tuning":100}`, []string{`sequential_tuning: needs "sequential": true`}},
		{"bad tuning", abWith + `,"sequential":true,"sequential_tuning":-1}`, []string{`sequential_tuning: must be a positive number, got -1`}},
		{"metrics on gray", `{"key":"g","type":"gray","gray_percent":1,"targets":{"gray":"h:1","stable":"h:2"},"metrics":[{"name":"m","type":"mean"}],"sequential":true}`,
			[]string{"metrics: is only for ab rules", "sequential: is only for ab rules"}},
		{"unknown metric field", abWith + `,"metrics":[{"name":"m","type":"mean","window":"1h"}]}`, []string{"metrics[0].window: unknown field"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.js), testEnv())
			if err == nil {
				t.Fatalf("Parse accepted %s", tt.js)
			}
			var got []string
			for _, f := range strict.Fields(err) {
				got = append(got, f.Path+": "+f.Message)
			}
			all := strings.Join(got, "\n")
			for _, w := range tt.want {
				if !strings.Contains(all, w) {
					t.Errorf("problems\n%s\nlack %q", all, w)
				}
			}
		})
	}
	many := abWith + `,"metrics":[`
	for i := range MaxMetrics + 1 {
		if i > 0 {
			many += ","
		}
		many += `{"name":"m` + string(rune('a'+i)) + `","type":"mean"}`
	}
	if _, err := Parse([]byte(many+"]}"), testEnv()); err == nil || !strings.Contains(err.Error(), "metrics: at most 16 metrics per rule, got 17") {
		t.Errorf("17 metrics: %v", err)
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	c := mustParse(t, abWith+`,"metrics":[{"name":"p","type":"binomial","match":{"method":"POST","path_prefix":"/api/order","status":"2xx"}}]}`)
	m := c.Metrics[0].Match
	if n := testing.AllocsPerRun(100, func() { m.Matches("POST", "/api/order/1", 200) }); n != 0 {
		t.Errorf("Matches allocates %v times", n)
	}
}
