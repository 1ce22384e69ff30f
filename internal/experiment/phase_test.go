package experiment

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/tags/redistest"
)

// runPhaseScenario is the phase contract every store meets: the phase is
// replaced compare-and-set; with reset its units count again from 0, and
// then only first exposures of its allocation dated at or after its since;
// without reset the count goes on.
func runPhaseScenario(t *testing.T, s backend) {
	t.Helper()
	ctx := context.Background()
	const exp = "ph:1"
	ex := func(unit, group string, ts int64, alloc uint64) Event {
		return Event{Kind: Exposure, Experiment: exp, Unit: unit, Group: group, TS: ts, Version: 1, Alloc: alloc}
	}
	apply := func(evs ...Event) {
		t.Helper()
		st := make([]status, len(evs))
		if _, err := s.apply(ctx, evs, window, st); err != nil {
			t.Fatal(err)
		}
	}
	phaseUnits := func() (map[string]int64, []byte) {
		t.Helper()
		c, err := s.counts(ctx, exp)
		if err != nil {
			t.Fatal(err)
		}
		return c.phaseUnits, c.phase
	}
	set := func(old, next string, since int64, alloc uint64, reset bool) bool {
		t.Helper()
		ok, err := s.setPhase(ctx, exp, []byte(old), []byte(next), since, alloc, reset)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	apply(ex("a", "A", 100, 7))
	if u, raw := phaseUnits(); len(u) != 0 || raw != nil {
		t.Fatalf("before any phase: units %v, phase %q", u, raw)
	}
	if !set("", `{"p":1}`, 0, 7, true) || set("", `{"p":2}`, 0, 7, true) {
		t.Fatal("the first phase: compare-and-set from nothing must succeed once")
	}
	apply(ex("b", "A", 200, 7))
	if u, _ := phaseUnits(); len(u) != 0 {
		t.Errorf("the first phase counts nothing of its own: %v", u)
	}
	if !set(`{"p":1}`, `{"p":3}`, 1000, 9, true) {
		t.Fatal("a new phase")
	}
	apply(ex("c", "B", 999, 9), // assigned before the phase began
		ex("d", "B", 1000, 7), // assigned under the old allocation
		ex("e", "B", 1000, 9), // counts
		ex("a", "B", 1500, 9), // not a first exposure
		ex("f", "A", 2000, 9)) // counts
	if u, raw := phaseUnits(); u["A"] != 1 || u["B"] != 1 || len(u) != 2 || string(raw) != `{"p":3}` {
		t.Errorf("phase units = %v (phase %s), want A 1, B 1", u, raw)
	}
	if set(`{"p":1}`, `{"p":4}`, 3000, 9, true) {
		t.Error("a compare-and-set from a stale phase succeeded")
	}
	if !set(`{"p":3}`, `{"p":5}`, 0, 0, false) {
		t.Fatal("a phase rewritten without reset")
	}
	apply(ex("g", "A", 2500, 9))
	if u, raw := phaseUnits(); u["A"] != 2 || u["B"] != 1 || string(raw) != `{"p":5}` {
		t.Errorf("after a rewrite without reset: %v (%s), want the count going on: A 2, B 1", u, raw)
	}
}

func TestLocalStorePhases(t *testing.T) {
	dir := t.TempDir()
	s := openTestLocal(t, dir, localOptions{})
	runPhaseScenario(t, s)
	want, _ := s.counts(context.Background(), "ph:1")
	s.close()
	// The journal replays it, and so does a snapshot.
	for _, compact := range []int64{0, 1} {
		s = openTestLocal(t, dir, localOptions{CompactBytes: compact})
		got, _ := s.counts(context.Background(), "ph:1")
		if fmt.Sprint(got.phaseUnits) != fmt.Sprint(want.phaseUnits) || string(got.phase) != string(want.phase) {
			t.Errorf("reopened (compact %d): phase %s units %v, want %s %v", compact, got.phase, got.phaseUnits, want.phase, want.phaseUnits)
		}
		// Counting goes on after a reopen.
		st := make([]status, 1)
		s.apply(context.Background(), []Event{{Kind: Exposure, Experiment: "ph:1", Unit: "h" + strconv.FormatInt(compact, 10), Group: "B", TS: 4000, Alloc: 9}}, window, st)
		want, _ = s.counts(context.Background(), "ph:1")
		if want.phaseUnits["B"] != 2+compact {
			t.Errorf("reopened (compact %d): a new exposure in the phase: %v", compact, want.phaseUnits)
		}
		s.close()
	}
}

func TestRedisStorePhases(t *testing.T) {
	srv := redistest.Start(t)
	s, err := openRedis("redis://"+srv.Addr()+"/4", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	runPhaseScenario(t, s)
}

// weightsRule is checkoutRule with the weights a and b.
func weightsRule(a, b int) string {
	return strings.Replace(checkoutRule, `"weight":50,"target":"a"},{"name":"B","weight":50`, fmt.Sprintf(`"weight":%d,"target":"a"},{"name":"B","weight":%d`, a, b), 1)
}

// srmWatch records the recorder's OnSRM calls and Freeze calls; Freeze
// succeeds.
type srmWatch struct {
	mu     sync.Mutex
	alerts []SRMAlert
	frozen []string
}

func (w *srmWatch) options(o Options) Options {
	o.OnSRM = func(a SRMAlert) { w.mu.Lock(); w.alerts = append(w.alerts, a); w.mu.Unlock() }
	o.Freeze = func(_ context.Context, rule string, version int64, _ string) error {
		w.mu.Lock()
		w.frozen = append(w.frozen, fmt.Sprintf("%s v%d", rule, version))
		w.mu.Unlock()
		return nil
	}
	return o
}

func (w *srmWatch) counts() (alerts, frozen int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.alerts), len(w.frozen)
}

// waitFor polls cond for up to 10 s, flushing r (which runs the health
// check every 250 ms with a 1 ms flush interval).
func waitFor(t *testing.T, r *Recorder, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		flush(t, r)
		time.Sleep(20 * time.Millisecond)
	}
}

// storedPhase is the phase the store holds for experiment id.
func storedPhase(t *testing.T, r *Recorder, id string) phase {
	t.Helper()
	c, err := r.store.counts(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return parsePhase(c.phase)
}

// settle lets the health check run a few more times.
func settle(t *testing.T, r *Recorder) {
	t.Helper()
	for range 4 {
		flush(t, r)
		time.Sleep(300 * time.Millisecond)
	}
	flush(t, r)
}

// TestSRMNewPhaseOnAllocationChange: removing the holdout (a live
// setting) or changing the weights must not flag an experiment whose units
// were assigned under the old allocation; the check judges the units
// assigned since, the results say since when, and a mismatch among those
// is still found. A request decided before a change and finished after it
// does not count in the new phase; a weight-0 group that gets units in the
// phase is a mismatch outright.
func TestSRMNewPhaseOnAllocationChange(t *testing.T) {
	var w srmWatch
	clk := newClock()
	r := newRecorder(t, w.options(Options{FlushInterval: time.Millisecond, Now: clk.Now}))
	set := Settings{Freeze: true}
	serveN := func(snap *router.Snapshot, prefix string, n int) {
		for i := range n {
			serve(r, snap, "GET", "/shop/", prefix+strconv.Itoa(i), 200)
		}
	}
	held := snapshot(t, router.Input{Holdout: rule.NewHoldout(10, ""), Versions: map[string]int64{"checkout": 1}}, checkoutRule)
	r.SetCatalog(NewCatalog(held, set))
	serveN(held, "h", 3000)
	settle(t, r)
	if res := results(t, r, "checkout"); !res.SRM.Judged || !res.SRM.OK || res.SRMSince != "" {
		t.Fatalf("with the holdout: srm %+v since %q", res.SRM, res.SRMSince)
	}
	// The holdout ends: a config reload, no new traffic.
	clk.Add(time.Minute)
	plain := snapshot(t, router.Input{Versions: map[string]int64{"checkout": 1}}, checkoutRule)
	r.SetCatalog(NewCatalog(plain, set))
	settle(t, r)
	res := results(t, r, "checkout")
	if a, f := w.counts(); a != 0 || f != 0 || res.SRM.Alert || !res.SRM.OK {
		t.Fatalf("the holdout removed: %d alerts, %d freezes, srm %+v", a, f, res.SRM)
	}
	if res.SRMSince != clk.Now().UTC().Format(time.RFC3339Nano) || res.SRMUnits["A"] != 0 || res.SRMUnits["B"] != 0 || res.SRM.Judged {
		t.Errorf("the holdout removed: since %q (want %s), srm units %v, judged %v", res.SRMSince, clk.Now().UTC().Format(time.RFC3339Nano), res.SRMUnits, res.SRM.Judged)
	}
	if n, _ := groupOf(res, GroupHoldout); n == 0 {
		t.Errorf("the held-out units are gone from the results")
	}
	// New traffic under 50/50 is judged on its own.
	clk.Add(time.Second)
	serveN(plain, "p", 2000)
	settle(t, r)
	res = results(t, r, "checkout")
	if res.SRMUnits["A"]+res.SRMUnits["B"] != 2000 || !res.SRM.Judged || !res.SRM.OK {
		t.Errorf("2,000 units after the holdout ended: srm units %v, srm %+v", res.SRMUnits, res.SRM)
	}
	// New weights, 80/20, by a PUT: the same.
	clk.Add(time.Minute)
	eighty := snapshot(t, router.Input{Versions: map[string]int64{"checkout": 2}}, weightsRule(80, 20))
	r.SetCatalog(NewCatalog(eighty, set))
	settle(t, r)
	if a, f := w.counts(); a != 0 || f != 0 {
		t.Fatalf("weights 50/50 → 80/20: %d alerts, %d freezes", a, f)
	}
	clk.Add(time.Second)
	serveN(eighty, "e", 2000)
	settle(t, r)
	res = results(t, r, "checkout")
	if a, f := w.counts(); a != 0 || f != 0 || !res.SRM.Judged || !res.SRM.OK || res.SRMUnits["A"] < 1500 {
		t.Fatalf("2,000 units at 80/20: %d alerts, %d freezes, srm units %v, srm %+v", a, f, res.SRMUnits, res.SRM)
	}
	// Ship A: 100/0. Requests decided at 80/20 before the change finish
	// after it: not in the new phase.
	var late []router.Decision
	for i := range 400 {
		late = append(late, eighty.Decide(request("/shop/", "GET", "late"+strconv.Itoa(i)), nil))
	}
	before := clk.Now()
	clk.Add(time.Minute)
	shipped := snapshot(t, router.Input{Versions: map[string]int64{"checkout": 3}}, weightsRule(100, 0))
	r.SetCatalog(NewCatalog(shipped, set))
	waitFor(t, r, "the new phase", func() bool { return storedPhase(t, r, "exp_checkout").Since == clk.Now().UnixMilli() })
	for i := range late {
		r.Observe(&late[i], 200, "GET", "/shop/", nil, before)
	}
	clk.Add(time.Second)
	serveN(shipped, "s", 100)
	settle(t, r)
	res = results(t, r, "checkout")
	if a, f := w.counts(); a != 0 || f != 0 || res.SRMUnits["A"] != 100 || res.SRMUnits["B"] != 0 {
		t.Fatalf("100/0 with stragglers of 80/20: %d alerts, %d freezes, srm units %v, srm %+v", a, f, res.SRMUnits, res.SRM)
	}
	// A unit assigned to the weight-0 group in the phase is a mismatch
	// outright.
	var b router.Decision
	for i := 0; b.Group != "B"; i++ {
		b = eighty.Decide(request("/shop/", "GET", "stray"+strconv.Itoa(i)), nil)
	}
	r.Observe(&b, 200, "GET", "/shop/", nil, clk.Now())
	waitFor(t, r, "the mismatch", func() bool { a, f := w.counts(); return a == 1 && f == 1 })
	if res = results(t, r, "checkout"); res.SRM.OK || !strings.Contains(res.SRM.Reason, `group "B" has weight 0 but 1 units`) {
		t.Errorf("a unit of a weight-0 group in the phase: srm %+v", res.SRM)
	}
}

// TestSRMResumeSurvivesRestart: a rule frozen for a sample-ratio mismatch
// and then resumed by an operator stays resumed across restarts, and the
// alert is not sent again; only a new mismatch, among units assigned after
// the resume, freezes it again. Frozen and not resumed, a restart does not
// alert again either.
func TestSRMResumeSurvivesRestart(t *testing.T) {
	var w srmWatch
	clk := newClock()
	dir := t.TempDir()
	open := func() *Recorder {
		return newRecorder(t, w.options(Options{Dir: dir, FlushInterval: time.Millisecond, Now: clk.Now}))
	}
	set := Settings{Freeze: true}
	at := func(version int64, rolledBack bool) *router.Snapshot {
		return snapshot(t, router.Input{Versions: map[string]int64{"checkout": version}, RolledBack: map[string]bool{"checkout": rolledBack}}, checkoutRule)
	}
	// 20% of group B's requests never arrive.
	planted := func(r *Recorder, snap *router.Snapshot, prefix string, n int) {
		for i := range n {
			d := snap.Decide(request("/shop/", "GET", prefix+strconv.Itoa(i)), nil)
			if d.Group == "B" && i%5 == 0 {
				continue
			}
			r.Observe(&d, 200, "GET", "/shop/", nil, clk.Now())
		}
	}
	r := open()
	r.SetCatalog(NewCatalog(at(1, false), set))
	planted(r, at(1, false), "s", 3000)
	waitFor(t, r, "the freeze", func() bool { _, f := w.counts(); return f == 1 })
	// The freeze applies: version 2, rolled back. Restarted frozen, the
	// gateway does not alert again.
	r.SetCatalog(NewCatalog(at(2, true), set))
	settle(t, r)
	r.Close()
	r = open()
	r.SetCatalog(NewCatalog(at(2, true), set))
	settle(t, r)
	if a, f := w.counts(); a != 1 || f != 1 {
		t.Fatalf("restarted while frozen: %d alerts, %d freezes, want 1 and 1", a, f)
	}
	// The operator resumes it (version 3): a new phase, no freeze.
	clk.Add(time.Minute)
	r.SetCatalog(NewCatalog(at(3, false), set))
	settle(t, r)
	res := results(t, r, "checkout")
	if a, f := w.counts(); a != 1 || f != 1 || res.SRMSince != clk.Now().UTC().Format(time.RFC3339Nano) {
		t.Fatalf("resumed: %d alerts, %d freezes, srm since %q", a, f, res.SRMSince)
	}
	// Restarts keep it resumed and silent.
	for range 2 {
		r.Close()
		r = open()
		r.SetCatalog(NewCatalog(at(3, false), set))
		settle(t, r)
		if a, f := w.counts(); a != 1 || f != 1 {
			t.Fatalf("resumed and restarted: %d alerts, %d freezes, want still 1 and 1", a, f)
		}
	}
	// Clean traffic after the resume is judged on its own and passes.
	clk.Add(time.Second)
	for i := range 2000 {
		serve(r, at(3, false), "GET", "/shop/", "clean"+strconv.Itoa(i), 200)
	}
	settle(t, r)
	if res = results(t, r, "checkout"); !res.SRM.Judged || !res.SRM.OK {
		t.Fatalf("clean units after the resume: %+v (units %v)", res.SRM, res.SRMUnits)
	}
	// A new mismatch among new units freezes it again.
	planted(r, at(3, false), "again", 6000)
	waitFor(t, r, "the second freeze", func() bool { a, f := w.counts(); return a == 2 && f == 2 })
	w.mu.Lock()
	if w.frozen[1] != "checkout v3" || w.alerts[1].Since.IsZero() {
		t.Errorf("second freeze %q, alert %+v", w.frozen[1], w.alerts[1])
	}
	w.mu.Unlock()
}
