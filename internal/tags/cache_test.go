package tags

import (
	"testing"
	"time"
)

func TestLRU(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := newLRU(2)
	c.put("a", Set{"k": "a"}, Known, t0.Add(time.Minute))
	c.put("b", nil, None, t0.Add(time.Minute))
	if e, ok := c.get("a", t0); !ok || e.set["k"] != "a" || e.status != Known {
		t.Fatalf("get(a) = %+v, %v", e, ok)
	}
	// a was used last, so c evicts b.
	c.put("c", Set{"k": "c"}, Known, t0.Add(time.Minute))
	if _, ok := c.get("b", t0); ok {
		t.Error("get(b) found it; want it evicted as least recently used")
	}
	for _, k := range []string{"a", "c"} {
		if _, ok := c.get(k, t0); !ok {
			t.Errorf("get(%s) missing after eviction of b", k)
		}
	}
	if c.len() != 2 {
		t.Errorf("len() = %d, want 2", c.len())
	}
	// Replacing keeps one entry and takes the new answer.
	c.put("a", nil, None, t0.Add(2*time.Minute))
	if e, ok := c.get("a", t0); !ok || e.status != None || e.set != nil {
		t.Errorf("get(a) after replace = %+v, %v", e, ok)
	}
	// Expired entries are gone at their expiry instant and free their slot.
	if _, ok := c.get("c", t0.Add(time.Minute)); ok {
		t.Error("get(c) at expiry found it")
	}
	if c.len() != 1 {
		t.Errorf("len() after expiry = %d, want 1", c.len())
	}
	if _, ok := c.get("a", t0.Add(time.Minute)); !ok {
		t.Error("get(a) lost with its later expiry")
	}
}

func TestLRUBounded(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := newLRU(100)
	for i := range 1000 {
		c.put(string(rune('a'+i%26))+string(rune(i)), nil, None, t0.Add(time.Hour))
		if c.len() > 100 {
			t.Fatalf("len() = %d after %d puts, want at most 100", c.len(), i+1)
		}
	}
	// The list and the map agree.
	n := 0
	for e := c.root.next; e != &c.root; e = e.next {
		if c.m[e.key] != e {
			t.Fatalf("list entry %q not in the map", e.key)
		}
		n++
	}
	if n != c.len() {
		t.Errorf("list has %d entries, map %d", n, c.len())
	}
}

func TestBreaker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := breaker{threshold: 3, cooldown: 10 * time.Second}
	step := func(name string, got, want bool) {
		t.Helper()
		if got != want {
			t.Fatalf("%s = %v, want %v (state %s)", name, got, want, b.state)
		}
	}
	step("allow closed", b.allow(t0), true)
	step("failure 1 opens", b.failure(t0), false)
	step("failure 2 opens", b.failure(t0), false)
	step("success closes", b.success(), false) // was closed: no transition
	step("failure 1 opens", b.failure(t0), false)
	step("failure 2 opens", b.failure(t0), false)
	step("failure 3 opens", b.failure(t0), true)
	step("allow open", b.allow(t0.Add(9*time.Second)), false)
	step("straggler failure reopens", b.failure(t0.Add(9*time.Second)), false)
	step("allow after cooldown (probe)", b.allow(t0.Add(10*time.Second)), true)
	step("allow during probe", b.allow(t0.Add(10*time.Second)), false)
	step("probe failure reopens", b.failure(t0.Add(11*time.Second)), true)
	step("allow before new cooldown", b.allow(t0.Add(20*time.Second)), false)
	step("allow after new cooldown", b.allow(t0.Add(21*time.Second)), true)
	step("probe success closes", b.success(), true)
	step("allow closed again", b.allow(t0.Add(21*time.Second)), true)
	if b.opens != 2 {
		t.Errorf("opens = %d, want 2", b.opens)
	}
}
