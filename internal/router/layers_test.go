package router

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/graygate/graygate/internal/rule"
)

func abRule(t testing.TB, key, extra string) *rule.Compiled {
	t.Helper()
	if extra != "" {
		extra = "," + extra
	}
	return compile(t, fmt.Sprintf(`{"key":%q,"type":"ab","experiment_id":"exp_%s"%s,"groups":[
		{"name":"A","weight":50,"target":"a","control":true},{"name":"B","weight":50,"target":"b"}]}`, key, key, extra))
}

func slotOf(salt, uid string) uint64 { return xxhash.Sum64String(salt+":"+uid) % 10000 }

// TestAddingExperimentToFreeSlots adds an experiment, evaluated first, to
// the free slots of a running one's layer: no user of the running
// experiment moves.
func TestAddingExperimentToFreeSlots(t *testing.T) {
	running := abRule(t, "running", `"layer":"checkout","layer_range":[0,4000]`)
	before := build(t, Input{Rules: []*rule.Compiled{running}})
	added := abRule(t, "added", `"priority":1,"layer":"checkout","layer_range":[4000,7000],"hash":"unleash"`)
	after := build(t, Input{Rules: []*rule.Compiled{running, added}})
	r := get("/", "X-User-Id", "")
	moved, kept, joined := 0, 0, 0
	for u := 0; u < 50000; u++ {
		r.Headers["X-User-Id"] = strconv.Itoa(u)
		d0, d1 := before.Decide(r, nil), after.Decide(r, nil)
		switch {
		case d0.Rule == "running" && (d1.Rule != "running" || d1.Group != d0.Group):
			moved++
		case d0.Rule == "running":
			kept++
		case d1.Rule == "added":
			joined++
		}
	}
	if moved != 0 || kept < 15000 || joined < 10000 {
		t.Errorf("adding an experiment moved %d users of the running one (kept %d, %d joined the new one)", moved, kept, joined)
	}
}

// TestHoldoutDecisions: a held-out user is claimed by no experiment and is
// answered by the ab rule that would have claimed them, with its control
// target and group "holdout"; gray rules are unaffected.
func TestHoldoutDecisions(t *testing.T) {
	gray := compile(t, `{"key":"canary","type":"gray","gray_percent":30,"conditions":{"path_prefix":["/api/"]},"targets":{"gray":"gray","stable":"stable"}}`)
	first := abRule(t, "first", `"layer":"l","layer_range":[0,5000]`)
	second := abRule(t, "second", `"layer":"l","layer_range":[5000,10000]`)
	ho := rule.NewHoldout(20, "ho")
	s := build(t, Input{Rules: []*rule.Compiled{gray, first, second}, Holdout: ho})
	plain := build(t, Input{Rules: []*rule.Compiled{gray, first, second}})
	r := get("/", "X-User-Id", "")
	held := 0
	for u := 0; u < 5000; u++ {
		uid := strconv.Itoa(u)
		r.Headers["X-User-Id"], r.PathV = uid, "/shop"
		d, p := s.Decide(r, nil), plain.Decide(r, nil)
		isHeld := slotOf("ho", uid) < 2000
		if d.Rule != p.Rule {
			t.Fatalf("user %s: the holdout changed the answering rule from %q to %q", uid, p.Rule, d.Rule)
		}
		if isHeld {
			held++
			if d.Group != GroupHoldout || d.Target.Name != "a" || d.Tag != "A" || d.Degraded != "" {
				t.Fatalf("held-out user %s: %+v, want group holdout on the control target a", uid, d)
			}
		} else if d != p {
			t.Fatalf("user %s is not held out but the decision changed: %+v vs %+v", uid, d, p)
		}
		r.PathV = "/api/x" // the gray rule first: the holdout does not touch it
		if d, p := s.Decide(r, nil), plain.Decide(r, nil); p.Rule == "canary" && d != p {
			t.Fatalf("gray decision of user %s changed under the holdout: %+v vs %+v", uid, d, p)
		}
	}
	if held < 850 || held > 1150 {
		t.Errorf("%d of 5000 users held out at 20%%", held)
	}
	var tr Trace
	uid := userWhere(t, s, "/shop", func(d Decision) bool { return d.Group == GroupHoldout })
	s.Decide(get("/shop", "X-User-Id", uid), &tr)
	last := tr.Rules[len(tr.Rules)-1]
	if !strings.HasPrefix(tr.Reason, "held out of every experiment") || !last.HeldOut || !strings.HasPrefix(last.Reason, "held out: ") || last.Group != GroupHoldout {
		t.Errorf("trace of a held-out user = %+v", tr)
	}
}

// TestBuildRefusesOverlappingLayers keeps the old snapshot serving when
// the rules overlap in a layer.
func TestBuildRefusesOverlappingLayers(t *testing.T) {
	a := abRule(t, "exp_a", `"layer":"checkout","layer_range":[0,5000]`)
	b := abRule(t, "exp_b", `"layer":"checkout","layer_range":[4000,6000]`)
	_, err := Build(Input{Rules: []*rule.Compiled{a, b}})
	if err == nil || !strings.Contains(err.Error(), "layer_range") || !strings.Contains(err.Error(), `"exp_a"`) || !strings.Contains(err.Error(), `"exp_b"`) {
		t.Fatalf("Build = %v, want a layer_range error naming both rules", err)
	}
	s := build(t, Input{Rules: []*rule.Compiled{a}})
	if ls := s.Layers(); len(ls) != 1 || ls[0].FreeSlots != 5000 {
		t.Errorf("Layers = %+v", ls)
	}
}

// TestDecideWithLayerAndHoldoutDoesNotAllocate holds the 0-allocation
// promise with a layer and a holdout in every hash mode.
func TestDecideWithLayerAndHoldoutDoesNotAllocate(t *testing.T) {
	for _, mode := range []string{"xxh64", "crc32", "growthbook", "unleash"} {
		rules := append(manyRules(t, 100), abRule(t, "exp", fmt.Sprintf(`"hash":%q,"layer":"checkout","layer_range":[0,10000]`, mode)))
		s := build(t, Input{Rules: rules, Holdout: rule.NewHoldout(5, "")})
		for _, uid := range []string{"12345", "用户42😀"} {
			r := get("/shop/cart", "X-User-Id", uid)
			if d := s.Decide(r, nil); d.Rule != "exp" {
				t.Fatalf("%s: Decide = %+v", mode, d)
			}
			if a := testing.AllocsPerRun(200, func() { s.Decide(r, nil) }); a != 0 {
				t.Errorf("%s: Decide(%q) allocates %v times", mode, uid, a)
			}
		}
	}
}

// BenchmarkDecideAB and BenchmarkDecideABLayerHoldout are the same ab
// decision without and with a layer and a holdout; the difference is what
// the two cost per request.
func BenchmarkDecideAB(b *testing.B) {
	benchAB(b, abRule(b, "exp", ""), nil)
}

func BenchmarkDecideABLayerHoldout(b *testing.B) {
	benchAB(b, abRule(b, "exp", `"layer":"checkout","layer_range":[0,10000]`), rule.NewHoldout(5, ""))
}

func benchAB(b *testing.B, ab *rule.Compiled, ho *rule.Holdout) {
	s := build(b, Input{Rules: []*rule.Compiled{ab}, Holdout: ho})
	// A user who is not held out, so both benchmarks walk the groups.
	r := get("/shop/cart", "X-User-Id", "user-1234567")
	if d := s.Decide(r, nil); d.Rule != "exp" || d.Group == GroupHoldout {
		b.Fatalf("Decide = %+v", d)
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Decide(r, nil)
	}
}

// BenchmarkLayerHoldoutAdded measures what a layer and a holdout add to an
// ab decision on a shared, loaded machine: it alternates blocks of the
// plain and the layered decision (BenchmarkDecideAB and
// BenchmarkDecideABLayerHoldout's snapshots), so that both see the same
// load, and reports each one's time and the difference per decision.
func BenchmarkLayerHoldoutAdded(b *testing.B) {
	plain := build(b, Input{Rules: []*rule.Compiled{abRule(b, "exp", "")}})
	layered := build(b, Input{Rules: []*rule.Compiled{abRule(b, "exp", `"layer":"checkout","layer_range":[0,10000]`)}, Holdout: rule.NewHoldout(5, "")})
	r := get("/shop/cart", "X-User-Id", "user-1234567")
	if d := layered.Decide(r, nil); d.Rule != "exp" || d.Group == GroupHoldout {
		b.Fatalf("Decide = %+v", d)
	}
	const block = 256
	var tPlain, tLayered time.Duration
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		snaps, spent := [2]*Snapshot{plain, layered}, [2]*time.Duration{&tPlain, &tLayered}
		if n/block%2 == 1 {
			snaps, spent = [2]*Snapshot{layered, plain}, [2]*time.Duration{&tLayered, &tPlain}
		}
		for i := range snaps {
			start := time.Now()
			for range block {
				snaps[i].Decide(r, nil)
			}
			*spent[i] += time.Since(start)
		}
		n += block
	}
	b.ReportMetric(float64(tPlain.Nanoseconds())/float64(n), "plain-ns/decision")
	b.ReportMetric(float64(tLayered.Nanoseconds())/float64(n), "layered-ns/decision")
	b.ReportMetric(float64((tLayered-tPlain).Nanoseconds())/float64(n), "added-ns/decision")
}
