package router

import (
	"github.com/graygate/graygate/internal/rule"
	"strconv"
	"strings"
	"testing"
)

const mirroredRule = `{"key":"shadowed","type":"gray","gray_percent":20,"conditions":{"path_prefix":["/api/"]},
	"targets":{"gray":"gray","stable":"stable"},"mirror":{"target":"gray","percent":%s}}`

func mirrored(t testing.TB, percent string) *Snapshot {
	return build(t, Input{Rules: []*rule.Compiled{compile(t, strings.Replace(mirroredRule, "%s", percent, 1))}})
}

func TestMirrorDecision(t *testing.T) {
	s := mirrored(t, "100")
	grayUser := userWhere(t, s, "/api/x", func(d Decision) bool { return d.Group == GroupGray })
	stableUser := userWhere(t, s, "/api/x", func(d Decision) bool { return d.Group == GroupDefault })
	tests := []struct {
		name, method, path, uid string
		mirrored                bool
	}{
		{"stable user, GET", "GET", "/api/x", stableUser, true},
		{"stable user, HEAD", "HEAD", "/api/x", stableUser, true},
		{"POST is not mirrored by default", "POST", "/api/x", stableUser, false},
		{"PUT is not mirrored by default", "PUT", "/api/x", stableUser, false},
		{"gray user: served by gray", "GET", "/api/x", grayUser, false},
		{"out of the rule's scope", "GET", "/web/x", stableUser, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := get(tt.path, "X-User-Id", tt.uid)
			r.MethodV = tt.method
			d := s.Decide(r, nil)
			if got := d.Mirror != nil; got != tt.mirrored {
				t.Fatalf("Decide(%s %s, user %s).Mirror = %v, want mirrored %v (decision %+v)", tt.method, tt.path, tt.uid, d.Mirror, tt.mirrored, d)
			}
			if tt.mirrored && (d.Mirror.Rule != "shadowed" || d.Mirror.Target.Name != "gray" || d.Target.Name != "stable") {
				t.Errorf("mirror %+v for a decision to %s", d.Mirror, d.Target.Name)
			}
			var tr Trace
			if e := s.Decide(r, &tr); (e.Mirror != nil) != tt.mirrored {
				t.Errorf("explain decides the mirror differently: %v", e.Mirror)
			}
			if tt.mirrored && !strings.Contains(tr.Mirror, `mirrored by rule "shadowed" to gray`) {
				t.Errorf("trace.Mirror = %q", tr.Mirror)
			}
		})
	}
}

// TestMirrorMethods: a mirror that names POST mirrors it.
func TestMirrorMethods(t *testing.T) {
	c := compile(t, `{"key":"w","type":"gray","gray_percent":0,"targets":{"gray":"gray","stable":"stable"},"mirror":{"percent":100,"methods":["POST"]}}`)
	s := build(t, Input{Rules: []*rule.Compiled{c}})
	r := get("/x", "X-User-Id", "u")
	if s.Decide(r, nil).Mirror != nil {
		t.Error("GET is mirrored by a mirror of POST only")
	}
	r.MethodV = "POST"
	if s.Decide(r, nil).Mirror == nil {
		t.Error("POST is not mirrored by a mirror of POST")
	}
}

// TestMirrorPercent: percent picks that share of the stable users, by a
// bucket of its own, and a user is mirrored consistently.
func TestMirrorPercent(t *testing.T) {
	s := mirrored(t, "30")
	stable, picked := 0, 0
	for i := range 4000 {
		r := get("/api/x", "X-User-Id", "user-"+strconv.Itoa(i))
		d := s.Decide(r, nil)
		if d.Group == GroupGray {
			if d.Mirror != nil {
				t.Fatal("a gray request is mirrored")
			}
			continue
		}
		stable++
		if d.Mirror != nil {
			picked++
		}
		for range 3 {
			if again := s.Decide(r, nil); (again.Mirror != nil) != (d.Mirror != nil) {
				t.Fatalf("user-%d is mirrored inconsistently", i)
			}
		}
	}
	if share := float64(picked) / float64(stable); share < 0.27 || share > 0.33 {
		t.Errorf("mirror 30%%: %d of %d stable users (%.3f)", picked, stable, share)
	}
	// Independent of the gray gate: the gray share is still 20%.
	if g := 4000 - stable; g < 700 || g > 900 {
		t.Errorf("gray users: %d of 4000", g)
	}
}

// TestMirrorOnlyForStable: a request the rule lets fall through to an
// experiment, or that the rule's rollback sends to stable, is not mirrored.
func TestMirrorOnlyForStable(t *testing.T) {
	gray := compile(t, strings.Replace(mirroredRule, "%s", "100", 1))
	ab := compile(t, `{"key":"exp","type":"ab","experiment_id":"e","conditions":{"path_prefix":["/api/"]},
		"groups":[{"name":"A","weight":50,"target":"a"},{"name":"B","weight":50,"target":"stable"}]}`)
	s := build(t, Input{Rules: []*rule.Compiled{gray, ab}})
	for i := range 200 {
		d := s.Decide(get("/api/x", "X-User-Id", strconv.Itoa(i)), nil)
		if want := d.Target.Name == "stable" && d.Group != GroupGray; (d.Mirror != nil) != want {
			t.Fatalf("user %d served by %s (group %s): mirrored %v", i, d.Target.Name, d.Group, d.Mirror != nil)
		}
	}
	rolled := build(t, Input{Rules: []*rule.Compiled{gray}, RolledBack: map[string]bool{"shadowed": true}})
	for i := range 200 {
		if d := rolled.Decide(get("/api/x", "X-User-Id", strconv.Itoa(i)), nil); d.Mirror != nil {
			t.Fatalf("a rolled-back rule mirrors user %d", i)
		}
	}
}

func TestMirrorDecideAllocs(t *testing.T) {
	s := mirrored(t, "100")
	u := userWhere(t, s, "/api/x", func(d Decision) bool { return d.Mirror != nil })
	r := get("/api/x", "X-User-Id", u)
	if a := testing.AllocsPerRun(200, func() { s.Decide(r, nil) }); a != 0 {
		t.Errorf("Decide with a mirror allocates %v times", a)
	}
}

func BenchmarkDecideMirrored(b *testing.B) {
	s := mirrored(b, "100")
	r := get("/api/x", "X-User-Id", "not-gray-user")
	b.ReportAllocs()
	for b.Loop() {
		s.Decide(r, nil)
	}
}
