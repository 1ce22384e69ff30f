package breaker

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestSetKeepsStateAcrossConfigChange(t *testing.T) {
	clk := newClock()
	var mu sync.Mutex
	var events []string
	var s *Set
	s = NewSet(SetOptions{Now: clk.Now, OnTransition: func(key string, from, to State, reason string) {
		mu.Lock()
		events = append(events, fmt.Sprintf("%s %v→%v: %s", key, from, to, reason))
		mu.Unlock()
		// The hook may call back into the set.
		_ = s.Snapshots()
	}})
	const key = "rule-a|10.0.0.2:8080"
	b, err := s.Get(key, Config{})
	if err != nil {
		t.Fatal(err)
	}
	send(b, clk, 20, true, fast)
	if got := b.State(); got != Open {
		t.Fatalf("State() = %v, want open", got)
	}
	since := b.Snapshot().Since

	// A reload with a changed config for the same key.
	clk.Advance(10 * time.Second)
	b2, err := s.Get(key, Config{ErrorRate: 40, HalfOpenProbes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if b2 != b {
		t.Fatal("Get with a changed config returned a new breaker")
	}
	snap := b.Snapshot()
	if snap.State != Open || !snap.Since.Equal(since) || snap.Config.ErrorRate != 40 || snap.Config.HalfOpenProbes != 2 {
		t.Fatalf("after the reload: %v since %v, config %+v", snap.State, snap.Since, snap.Config)
	}
	// The new probe count applies to the next half-open period.
	clk.Advance(50 * time.Second)
	send(b, clk, 2, false, fast)
	if got := b.State(); got != Closed {
		t.Errorf("State() after 2 probes = %v, want closed", got)
	}

	// An invalid config is reported and leaves the breaker as it was.
	if _, err := s.Get(key, Config{Window: Duration(time.Millisecond)}); err == nil {
		t.Error("Get with an invalid config succeeded")
	}
	if got := b.Config().ErrorRate; got != 40 {
		t.Errorf("error_rate = %v after a rejected reload, want 40", got)
	}
	if _, err := s.Get("", Config{}); err == nil {
		t.Error("Get with an empty key succeeded")
	}

	want := []string{
		key + " closed→open: error rate 100% > 20% over 30s (20 of 20 requests)",
		key + " open→half-open: open for 1m0s; letting 2 probes through",
		key + " half-open→closed: 2 of 2 probes succeeded",
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(events, want) {
		t.Errorf("hook events =\n%q\nwant\n%q", events, want)
	}
}

func TestSetRetainAndSnapshots(t *testing.T) {
	clk := newClock()
	s := NewSet(SetOptions{Now: clk.Now})
	keys := []string{"r2|b:80", "r1|a:80", "r1|b:80"}
	for _, k := range keys {
		if _, err := s.Get(k, Config{}); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := s.Lookup("r1|a:80")
	send(b, clk, 20, true, fast)

	snaps := s.Snapshots()
	var names []string
	for _, sn := range snaps {
		names = append(names, sn.Name)
	}
	if want := []string{"r1|a:80", "r1|b:80", "r2|b:80"}; !slices.Equal(names, want) {
		t.Fatalf("Snapshots names = %q, want %q", names, want)
	}
	if snaps[0].State != Open || snaps[1].State != Closed {
		t.Errorf("states = %v, %v; want open, closed", snaps[0].State, snaps[1].State)
	}

	// The reload keeps only rule r1.
	dropped := s.Retain(func(key string) bool { return key[:2] == "r1" })
	if want := []string{"r2|b:80"}; !slices.Equal(dropped, want) {
		t.Errorf("Retain dropped %q, want %q", dropped, want)
	}
	if s.Len() != 2 {
		t.Errorf("Len() = %d, want 2", s.Len())
	}
	if _, ok := s.Lookup("r2|b:80"); ok {
		t.Error("a dropped key is still there")
	}
	// A dropped breaker still works for whoever holds it.
	if _, ok := b.Allow(); ok {
		t.Error("the open breaker allowed a request")
	}
	// The open breaker survived the Retain.
	if b2, _ := s.Get("r1|a:80", Config{}); b2 != b || b2.State() != Open {
		t.Error("Retain lost the state of a kept key")
	}
	// A key that comes back starts fresh.
	fresh, _ := s.Get("r2|b:80", Config{})
	if fresh.State() != Closed || fresh.Snapshot().Window.Requests != 0 {
		t.Error("a re-added key did not start fresh")
	}
}

// TestSetRetainSilencesDroppedBreakers: a breaker that Retain dropped
// still serves the requests in flight on the old snapshot, but a
// transition they cause is not reported: it concerns a target its rule
// no longer uses, and the caller has forgotten its metrics. Retain waits
// for a report already under way, so none lands after it returns.
func TestSetRetainSilencesDroppedBreakers(t *testing.T) {
	clk := newClock()
	var mu sync.Mutex
	var events []string
	entered, release := make(chan struct{}), make(chan struct{})
	s := NewSet(SetOptions{Now: clk.Now, OnTransition: func(key string, from, to State, reason string) {
		mu.Lock()
		events = append(events, fmt.Sprintf("%s %v→%v", key, from, to))
		mu.Unlock()
		if key == "slow|b" {
			close(entered)
			<-release
		}
	}})
	dropped, _ := s.Get("gone|a", Config{})
	kept, _ := s.Get("kept|a", Config{})
	if got := s.Retain(func(k string) bool { return k != "gone|a" }); !slices.Equal(got, []string{"gone|a"}) {
		t.Fatalf("Retain dropped %q", got)
	}
	send(dropped, clk, 20, true, fast)
	send(kept, clk, 20, true, fast)
	if dropped.State() != Open || kept.State() != Open {
		t.Fatalf("states %v, %v after 20 failures each, want open", dropped.State(), kept.State())
	}
	mu.Lock()
	got := slices.Clone(events)
	mu.Unlock()
	if want := []string{"kept|a closed→open"}; !slices.Equal(got, want) {
		t.Errorf("reported %q, want %q: the dropped breaker's transition was reported", got, want)
	}

	slowB, _ := s.Get("slow|b", Config{})
	go send(slowB, clk, 20, true, fast)
	<-entered
	retained := make(chan struct{})
	go func() {
		s.Retain(func(k string) bool { return k != "slow|b" })
		close(retained)
	}()
	select {
	case <-retained:
		t.Error("Retain returned while a report on a key it dropped was under way")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	select {
	case <-retained:
	case <-time.After(5 * time.Second):
		t.Fatal("Retain did not return once the report ended")
	}
}
