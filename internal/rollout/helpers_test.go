package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/traffic"
	"github.com/graygate/graygate/internal/upstream"
)

// fakeClock is a Clock that moves only when a test advances it.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), ch: ch})
	return ch
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

// fakeSource serves traffic stats and breaker states a test sets; a
// stats function may vary them per call.
type fakeSource struct {
	mu      sync.Mutex
	stats   map[string]func() traffic.Stats // rule|group
	breaker map[string]BreakerState
	windows []time.Duration
}

func newFakeSource() *fakeSource {
	return &fakeSource{stats: map[string]func() traffic.Stats{}, breaker: map[string]BreakerState{}}
}

func stats(requests, errs uint64, p99ms float64) traffic.Stats {
	s := traffic.Stats{Requests: requests, Errors: errs, P99Ms: p99ms}
	if requests > 0 {
		s.ErrorRate = float64(errs) / float64(requests)
	}
	return s
}

func (f *fakeSource) set(rule, group string, s traffic.Stats) {
	f.setFunc(rule, group, func() traffic.Stats { return s })
}

func (f *fakeSource) setFunc(rule, group string, fn func() traffic.Stats) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats[rule+"|"+group] = fn
}

func (f *fakeSource) setBreaker(rule string, b BreakerState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.breaker[rule] = b
}

func (f *fakeSource) Window(_ context.Context, rule, group string, d time.Duration) (traffic.Stats, error) {
	f.mu.Lock()
	fn := f.stats[rule+"|"+group]
	f.windows = append(f.windows, d)
	f.mu.Unlock()
	if fn == nil {
		return traffic.Stats{}, nil
	}
	return fn(), nil
}

func (f *fakeSource) Breaker(_ context.Context, rule, _ string) (BreakerState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.breaker[rule], nil
}

// notes records notifications.
type notes struct {
	mu  sync.Mutex
	got []note
}

type note struct {
	event, rule, text string
	fields            map[string]any
}

func (n *notes) Notify(event, rule, text string, fields map[string]any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got = append(n.got, note{event, rule, text, fields})
}

func (n *notes) events() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, x := range n.got {
		out = append(out, x.event)
	}
	return out
}

// wait returns the last notification of event, waiting for it (the
// engine notifies right after the write a test may already see).
func (n *notes) wait(t *testing.T, event string) note {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if x, ok := n.last(event); ok {
			return x
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s notification; got %v", event, n.events())
		}
		time.Sleep(time.Millisecond)
	}
}

func (n *notes) last(event string) (note, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := len(n.got) - 1; i >= 0; i-- {
		if n.got[i].event == event {
			return n.got[i], true
		}
	}
	return note{}, false
}

// harness runs an Engine over a real file store, applying every change
// the way the gateway does: a watch of the store's Changes that hands the
// state and its compiled rules to Observe.
type harness struct {
	t      *testing.T
	st     store.Store
	eng    *Engine
	clk    *fakeClock
	src    *fakeSource
	notes  *notes
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{}
	dir    string
	// afterApply, when set, runs at the end of the engine's Apply, as
	// the gateway's reload goes on after handing the rules to Observe.
	afterApply atomic.Pointer[func(ctx context.Context) error]
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return startHarness(t, t.TempDir(), newFakeClock(), newFakeSource())
}

func startHarness(t *testing.T, dir string, clk *fakeClock, src *fakeSource) *harness {
	t.Helper()
	st, err := store.OpenFile(dir, store.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, st: st, clk: clk, src: src, notes: &notes{}, reg: prometheus.NewRegistry(), done: make(chan struct{}), dir: dir}
	h.eng, err = New(Options{Store: st, Clock: clk, Source: src, Notifier: h.notes, Registry: h.reg, Apply: h.engineApply})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	if err := h.apply(ctx); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(h.done)
		var wg sync.WaitGroup
		wg.Go(func() { h.eng.Run(ctx) })
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-st.Changes():
					_ = h.apply(ctx)
				}
			}
		})
		wg.Wait()
	}()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		h.t.Error("the engine did not stop")
	}
	h.cancel = nil
	_ = h.st.Close()
}

// engineApply is the engine's Apply: apply, then afterApply.
func (h *harness) engineApply(ctx context.Context) error {
	if err := h.apply(ctx); err != nil {
		return err
	}
	if f := h.afterApply.Load(); f != nil {
		return (*f)(ctx)
	}
	return nil
}

var applyMu sync.Mutex

// apply compiles the store's rules and hands them to the engine.
func (h *harness) apply(ctx context.Context) error {
	applyMu.Lock()
	defer applyMu.Unlock()
	st, err := h.st.Load(ctx)
	if err != nil {
		return err
	}
	reg := upstream.NewRegistry(nil)
	var rules []*rule.Compiled
	for _, e := range st.Rules {
		r, err := rule.Decode(e.Rule)
		if err != nil {
			return err
		}
		c, err := rule.Compile(r, rule.Env{Resolve: reg.Resolve})
		if err != nil {
			return fmt.Errorf("compile %s: %w", e.Key, err)
		}
		rules = append(rules, c)
	}
	h.eng.Observe(st, rules)
	return nil
}

// put stores a gray rule with the given rollout JSON, as an operator's
// PUT does (Carry).
func (h *harness) put(key, rollout string) store.Entry {
	h.t.Helper()
	js := fmt.Sprintf(`{"key":%q,"type":"gray","gray_percent":0,"white_list":["uid:vip"],"targets":{"gray":"127.0.0.1:2","stable":"127.0.0.1:1"},"rollout":%s}`, key, rollout)
	r, err := rule.Decode([]byte(js))
	if err != nil {
		h.t.Fatalf("decode %s: %v", js, err)
	}
	if err := r.Validate(); err != nil {
		h.t.Fatalf("validate %s: %v", js, err)
	}
	var prev *rule.Rule
	if e, err := h.st.Get(context.Background(), key); err == nil {
		p, _ := rule.Decode(e.Rule)
		prev = &p
	}
	Carry(prev, &r)
	raw, _ := json.Marshal(r)
	e, err := h.st.Put(context.Background(), key, raw, store.AnyVersion, store.Meta{By: "alice", Reason: "test"})
	if err != nil {
		h.t.Fatal(err)
	}
	return e
}

func (h *harness) rule(key string) rule.Rule {
	h.t.Helper()
	e, err := h.st.Get(context.Background(), key)
	if err != nil {
		h.t.Fatal(err)
	}
	r, err := rule.Decode(e.Rule)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

// waitFor advances the fake clock by step until cond holds on the stored
// rule, within a real-time deadline; it returns the rule.
func (h *harness) waitFor(key, what string, step time.Duration, cond func(r rule.Rule) bool) rule.Rule {
	h.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := h.rule(key)
		if cond(r) {
			return r
		}
		if time.Now().After(deadline) {
			b, _ := json.Marshal(r.Rollout)
			h.t.Fatalf("timed out waiting for %s; rollout %s", what, b)
		}
		if step > 0 {
			h.clk.Advance(step)
		}
		time.Sleep(time.Millisecond)
	}
}

func inState(state string, step int) func(rule.Rule) bool {
	return func(r rule.Rule) bool {
		st := r.Rollout.Status
		return st != nil && st.State == state && st.Step == step
	}
}

func (h *harness) history(key string) []store.Change {
	h.t.Helper()
	hs, err := h.st.History(context.Background(), key)
	if err != nil {
		h.t.Fatal(err)
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].Version < hs[j].Version })
	return hs
}

// gather returns the value of every sample of the named metric, by its
// labels ("k=v,k=v").
func (h *harness) gather(name string) map[string]float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			v := m.GetGauge().GetValue()
			if m.Counter != nil {
				v = m.GetCounter().GetValue()
			}
			out[strings.Join(ls, ",")] = v
		}
	}
	return out
}

func isState(err error) bool { return errors.Is(err, ErrState) }
