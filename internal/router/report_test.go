package router

import (
	"testing"

	"github.com/graygate/graygate/internal/rule"
)

// TestReportSharedPerSnapshot: a rule with from_header metrics makes every
// decision it claims carry one Report, shared (not allocated per request),
// naming the headers in the rule's order; other rules' decisions carry none.
func TestReportSharedPerSnapshot(t *testing.T) {
	exp := compile(t, `{"key":"exp","type":"ab","experiment_id":"e","conditions":{"path_prefix":["/shop/"]},
		"groups":[{"name":"A","weight":50,"target":"a"},{"name":"B","weight":50,"target":"b"}],
		"metrics":[{"name":"rev","type":"mean","from_header":"X-Gray-Metric-Revenue"},{"name":"p","type":"binomial","match":{"method":"POST"}},{"name":"n","type":"mean","from_header":"X-N"}]}`)
	plain := compile(t, `{"key":"plain","type":"ab","experiment_id":"f","conditions":{"path_prefix":["/other/"]},
		"groups":[{"name":"A","weight":100,"target":"a"}]}`)
	s := build(t, Input{Rules: []*rule.Compiled{exp, plain}, Versions: map[string]int64{"exp": 7}, RolledBack: map[string]bool{"plain": true}})
	d1 := s.Decide(get("/shop/x", "X-User-Id", "1"), nil)
	d2 := s.Decide(get("/shop/y", "X-User-Id", "2"), nil)
	if d1.Report == nil || d1.Report != d2.Report || d1.Report != s.Report("exp") {
		t.Fatalf("reports %p %p %p, want one shared pointer", d1.Report, d2.Report, s.Report("exp"))
	}
	if got := d1.Report.Headers; len(got) != 2 || got[0] != "X-Gray-Metric-Revenue" || got[1] != "X-N" {
		t.Errorf("Report.Headers = %q", got)
	}
	if d := s.Decide(get("/other/", "X-User-Id", "1"), nil); d.Rule != "plain" || d.Report != nil {
		t.Errorf("a rule without from_header metrics: %+v", d)
	}
	if d := s.Decide(get("/none", "X-User-Id", "1"), nil); d.Report != nil {
		t.Errorf("an unclaimed request carries a report: %+v", d)
	}
	if s.Version("exp") != 7 || s.Version("plain") != 0 || !s.RolledBack("plain") || s.RolledBack("exp") {
		t.Errorf("Version/RolledBack = %d %d %v %v", s.Version("exp"), s.Version("plain"), s.RolledBack("plain"), s.RolledBack("exp"))
	}
	r := get("/shop/x", "X-User-Id", "12345")
	if a := testing.AllocsPerRun(200, func() { s.Decide(r, nil) }); a != 0 {
		t.Errorf("Decide with a report allocates %v times", a)
	}
}
