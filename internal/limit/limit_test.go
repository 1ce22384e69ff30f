package limit

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestRouteLimit(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := New(Config{RPS: 10, Burst: 2}, c.now)
	ok1, _ := l.Allow("a")
	ok2, _ := l.Allow("b")
	ok3, retry := l.Allow("c")
	if !ok1 || !ok2 || ok3 {
		t.Fatalf("burst of 2: %v %v %v", ok1, ok2, ok3)
	}
	if retry <= 0 || retry > 100*time.Millisecond {
		t.Errorf("retry after = %v, want about 100ms", retry)
	}
	c.t = c.t.Add(100 * time.Millisecond)
	if ok, _ := l.Allow("a"); !ok {
		t.Error("a token must be back after 100ms at 10 rps")
	}
	// Over one simulated second at 10 rps exactly 10 more are admitted.
	n := 0
	for i := 0; i < 100; i++ {
		c.t = c.t.Add(10 * time.Millisecond)
		if ok, _ := l.Allow("x"); ok {
			n++
		}
	}
	if n != 10 {
		t.Errorf("admitted %d in 1s at 10 rps, want 10", n)
	}
}

func TestPerIdentity(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := New(Config{RPS: 1, Burst: 1, PerIdentity: true, MaxIdentities: 2}, c.now)
	for _, id := range []string{"a", "b"} {
		if ok, _ := l.Allow(id); !ok {
			t.Errorf("first request of %s refused", id)
		}
	}
	if ok, _ := l.Allow("a"); ok {
		t.Error("a's second request admitted")
	}
	l.Allow("c") // evicts b, the least recently used
	if ok, _ := l.Allow("b"); !ok {
		t.Error("b should have a fresh bucket after eviction")
	}
}

func TestConfigureKeepsState(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	s := NewSet(c.now)
	l := s.Limiter("api", Config{RPS: 1, Burst: 1})
	l.Allow("")
	if l2 := s.Limiter("api", Config{RPS: 1, Burst: 1}); l2 != l {
		t.Fatal("Set must return the same limiter for a key")
	}
	if ok, _ := l.Allow(""); ok {
		t.Error("reconfiguring refilled the bucket")
	}
	s.Retain(func(string) bool { return false }, func(string) bool { return false })
	if l3 := s.Limiter("api", Config{RPS: 1, Burst: 1}); l3 == l {
		t.Error("Retain did not drop the limiter")
	}
}

// TestSetRetainDropsLimiters is what a gateway does on every reload: it
// asks for the limiters of the routes there are, then retains only those.
// Through ever new route names the set holds only the current ones; a kept
// route's bucket stays spent, one that comes back after it was dropped
// starts full, and gates are left to their own keep function.
func TestSetRetainDropsLimiters(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	s := NewSet(c.now)
	cfg := Config{RPS: 0.001, Burst: 1}
	kept := s.Limiter("route:kept", cfg)
	kept.Allow("")
	gone := s.Limiter("route:gone", cfg)
	gone.Allow("")
	s.Gate("pool", 10)
	for i := range 100 {
		live := map[string]bool{"route:kept": true, fmt.Sprintf("route:r%d", i): true}
		for k := range live {
			s.Limiter(k, cfg)
		}
		s.Retain(func(k string) bool { return live[k] }, func(string) bool { return true })
		if limiters, gates := s.Len(); limiters != 2 || gates != 1 {
			t.Fatalf("reload %d: Len() = %d limiters, %d gates; want 2 and 1", i, limiters, gates)
		}
	}
	if l := s.Limiter("route:kept", cfg); l != kept {
		t.Error("the kept route got a new limiter")
	} else if ok, _ := l.Allow(""); ok {
		t.Error("the kept route's spent bucket was refilled")
	}
	if l := s.Limiter("route:gone", cfg); l == gone {
		t.Error("the route that came back got its dropped limiter again")
	} else if ok, _ := l.Allow(""); !ok {
		t.Error("the route that came back does not start with a full bucket")
	}
}

func TestValidate(t *testing.T) {
	c := Config{RPS: 0, Burst: -1, MaxIdentities: -2, MaxIdentityBytes: 4096}
	err := c.Validate("routes[0].rate_limit")
	for _, want := range []string{"routes[0].rate_limit.rps: must be a positive number, got 0", "routes[0].rate_limit.burst", "routes[0].rate_limit.max_identities",
		"routes[0].rate_limit.max_identity_bytes: must be at least 65536 (64 KiB), got 4096"} {
		if err == nil || !contains(err.Error(), want) {
			t.Errorf("Validate = %v, want %q", err, want)
		}
	}
}

// kept returns which of ids have a bucket, and checks the table's
// bookkeeping: every entry in one segment, the counts and costs add up,
// and both bounds hold.
func kept(t *testing.T, l *Limiter, ids ...string) []string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	n, bytes := 0, int64(0)
	for _, s := range []*segment{&l.probation, &l.protected} {
		for e := s.root.next; e != &s.root; e = e.next {
			if l.users[e.id] != e || e.protected != (s == &l.protected) {
				t.Fatalf("entry %q is in the wrong segment or missing from the map", e.id)
			}
			n++
			bytes += cost(e.id)
		}
	}
	if n != len(l.users) || n != l.probation.n+l.protected.n || bytes != l.probation.bytes+l.protected.bytes {
		t.Fatalf("bookkeeping: %d listed, %d mapped, counts %d+%d, bytes %d listed vs %d+%d",
			n, len(l.users), l.probation.n, l.protected.n, bytes, l.probation.bytes, l.protected.bytes)
	}
	if n > l.cfg.MaxIdentities || bytes > l.cfg.MaxIdentityBytes {
		t.Fatalf("%d entries of %d bytes, over the bounds %d and %d", n, bytes, l.cfg.MaxIdentities, l.cfg.MaxIdentityBytes)
	}
	var out []string
	for _, id := range ids {
		if _, ok := l.users[id]; ok {
			out = append(out, id)
		}
	}
	return out
}

func seq(prefix string, n, width int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%0*d", prefix, width, i)
	}
	return out
}

func twice(ids []string) []string {
	var out []string
	for _, id := range ids {
		out = append(out, id, id)
	}
	return out
}

// TestIdentityTable drives the per-identity table's segments and bounds
// (see the package doc) and checks which buckets are left.
func TestIdentityTable(t *testing.T) {
	long := seq(strings.Repeat("L", 990), 100, 10) // 1000-byte ids: cost 1000+125+240
	short := seq("s", 1000, 7)                     // 8-byte ids: cost 248
	p := seq("p", 9, 1)                            // p0..p8
	tests := []struct {
		name     string
		cfg      Config
		requests []string
		// then, if set, a Configure with these bounds
		shrinkTo                 *Config
		check                    []string
		wantKept                 []string
		wantProbation, wantProto int
	}{
		{name: "a returning identity outlives newer one-time ones", cfg: Config{MaxIdentities: 3},
			requests: []string{"a", "b", "c", "a", "d"}, check: []string{"a", "b", "c", "d"},
			// a's second request protected it, so b went first
			wantKept: []string{"a", "c", "d"}, wantProbation: 2, wantProto: 1},
		{name: "fresh ids never evict a returning identity", cfg: Config{MaxIdentities: 10},
			requests: append([]string{"alice", "alice"}, seq("rot", 500, 3)...), check: append([]string{"alice"}, seq("rot", 500, 3)...),
			wantKept: append([]string{"alice"}, seq("rot", 500, 3)[491:]...), wantProbation: 9, wantProto: 1},
		{name: "protected overflows into probation's head", cfg: Config{MaxIdentities: 10},
			// nine protected ids, one over protected's 8: p0 is demoted; two
			// fresh ids then evict it first
			requests: append(twice(p), "f0", "f1"), check: append(slices.Clone(p), "f0", "f1"),
			wantKept: append(slices.Clone(p[1:]), "f0", "f1"), wantProbation: 2, wantProto: 8},
		{name: "a demoted identity that returns is protected again", cfg: Config{MaxIdentities: 10},
			requests: append(twice(p), "p0", "f0", "f1"), check: []string{"p0", "p1", "p2", "f0", "f1"},
			// p0 came back and pushed p1 out of protected; then p1 went
			wantKept: []string{"p0", "p2", "f0", "f1"}, wantProbation: 2, wantProto: 8},
		{name: "the byte budget holds fewer long ids", cfg: Config{MaxIdentityBytes: MinMaxIdentityBytes},
			requests: long, check: long,
			wantKept: long[100-48:], wantProbation: 48}, // 65536 / 1365 = 48
		{name: "and more short ones", cfg: Config{MaxIdentityBytes: MinMaxIdentityBytes},
			requests: short, check: short,
			wantKept: short[1000-264:], wantProbation: 264}, // 65536 / 248 = 264
		{name: "long ids in protected are bounded by its byte share", cfg: Config{MaxIdentityBytes: MinMaxIdentityBytes},
			requests: twice(long), check: long,
			// protected holds at most 4/5 of 65536 bytes: 38 ids; 10 more fit
			// in probation, the demoted ones, most recently demoted first
			wantKept: long[100-48:], wantProbation: 10, wantProto: 38},
		{name: "the entry bound", cfg: Config{MaxIdentities: 5},
			requests: short[:50], check: short[:50], wantKept: short[45:50], wantProbation: 5},
		{name: "shrinking evicts probation first", cfg: Config{MaxIdentities: 100},
			requests: append([]string{"alice", "alice", "bob", "bob"}, short[:98]...), shrinkTo: &Config{MaxIdentities: 5},
			check:    []string{"alice", "bob", short[95], short[96], short[97]},
			wantKept: []string{"alice", "bob", short[95], short[96], short[97]}, wantProbation: 3, wantProto: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: time.Unix(1000, 0)}
			cfg := tt.cfg
			cfg.RPS, cfg.Burst, cfg.PerIdentity = 1, 1, true
			l := New(cfg, c.now)
			for _, id := range tt.requests {
				c.t = c.t.Add(time.Millisecond)
				l.Allow(id)
			}
			if tt.shrinkTo != nil {
				cfg.MaxIdentities, cfg.MaxIdentityBytes = tt.shrinkTo.MaxIdentities, tt.shrinkTo.MaxIdentityBytes
				l.Configure(cfg)
			}
			got := kept(t, l, tt.check...)
			if !slices.Equal(got, tt.wantKept) {
				t.Errorf("kept %d: %.60q\nwant %d: %.60q", len(got), got, len(tt.wantKept), tt.wantKept)
			}
			if l.probation.n != tt.wantProbation || l.protected.n != tt.wantProto {
				t.Errorf("probation %d, protected %d; want %d, %d", l.probation.n, l.protected.n, tt.wantProbation, tt.wantProto)
			}
		})
	}
}

// TestRotationAttack: an attacker rotating ids against a per-identity
// limit of 1 request per 1000 s (burst 1) while alice, a real user who
// spent her token, keeps sending a request every `every` attacker
// requests. Her bucket is evicted (she would get a fresh burst) only in
// the shapes the package doc names: under plain LRU, which this table
// emulates by sending every id twice, if she is idle longer than the
// protected segment takes to turn over.
func TestRotationAttack(t *testing.T) {
	tests := []struct {
		name        string
		repeat      int // requests per attacker id
		every       int // attacker requests between two of alice's
		wantEvicted bool
	}{
		{"fresh ids, alice every 10", 1, 10, false},
		{"fresh ids, alice every 5000 (more than the whole table)", 1, 5000, false},
		{"every id twice, alice within protected's turnover", 2, 100, false},
		{"every id twice, alice idle past protected's turnover", 2, 5000, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: time.Unix(1000, 0)}
			l := New(Config{RPS: 0.001, Burst: 1, PerIdentity: true, MaxIdentities: 1000}, c.now)
			send := func(id string) bool {
				c.t = c.t.Add(time.Millisecond) // 100 s in all: a tenth of a token
				ok, _ := l.Allow(id)
				return ok
			}
			if !send("alice") || send("alice") {
				t.Fatal("alice's burst of 1")
			}
			evicted := false
			for i := 0; i < 100000; i++ {
				id := fmt.Sprintf("rot-%d", i/tt.repeat)
				send(id)
				if (i+1)%tt.every == 0 && send("alice") {
					evicted = true
					break
				}
			}
			if evicted != tt.wantEvicted {
				t.Errorf("alice's bucket evicted: %v, want %v", evicted, tt.wantEvicted)
			}
			kept(t, l)
		})
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestGate(t *testing.T) {
	s := NewSet(nil)
	g := s.Gate("pool", 3)
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if g.Acquire() {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if admitted != 3 || g.InFlight() != 3 {
		t.Errorf("admitted %d, in flight %d, want 3", admitted, g.InFlight())
	}
	g.Release()
	if !g.Acquire() {
		t.Error("a released slot must be reusable")
	}
	var nilGate *Gate
	if !nilGate.Acquire() {
		t.Error("a nil gate admits everything")
	}
	nilGate.Release()
}

func BenchmarkAllowRoute(b *testing.B) {
	l := New(Config{RPS: 1e9, Burst: 1e9}, nil)
	b.ReportAllocs()
	for b.Loop() {
		l.Allow("u")
	}
}

// BenchmarkAllowIdentity: a known identity (hit: no allocation) and a
// fresh identity per request against a full table (miss: the copy of the
// identity, the bucket and the entry, and one eviction).
func BenchmarkAllowIdentity(b *testing.B) {
	ids := seq(strings.Repeat("u", 246), 1<<16, 10)
	b.Run("hit", func(b *testing.B) {
		l := New(Config{RPS: 1e9, Burst: 1e9, PerIdentity: true}, nil)
		for _, id := range ids[:1000] {
			l.Allow(id)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			l.Allow(ids[i%1000])
			i++
		}
	})
	b.Run("miss", func(b *testing.B) {
		l := New(Config{RPS: 1e9, Burst: 1e9, PerIdentity: true, MaxIdentities: 1000}, nil)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			l.Allow(ids[i%len(ids)])
			i++
		}
	})
}

// TestNewIdentityIsNotItsOwnVictim: with room for one identity, a new one
// used to be evicted to make room for itself (the protected segment held
// the other), so it got a fresh bucket on every request and was never
// limited. It now takes the room, and the older identity goes.
func TestNewIdentityIsNotItsOwnVictim(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := New(Config{RPS: 0.001, Burst: 1, PerIdentity: true, MaxIdentities: 1}, c.now)
	for _, id := range []string{"a", "b", "c"} {
		if ok, _ := l.Allow(id); !ok {
			t.Errorf("first request of %s refused", id)
		}
		if ok, _ := l.Allow(id); ok {
			t.Errorf("second request of %s admitted: its bucket was dropped to make room for itself", id)
		}
	}
	if p, q, _ := l.size(); p+q != 1 {
		t.Errorf("%d identities kept, want 1", p+q)
	}
}

// TestPerIdentityToggleKeepsBuckets: a reload refused after its build
// configures a route's limiter and then configures it back; with
// per_identity toggled, that dropped every identity's bucket, and each
// client got a fresh burst. The buckets are kept now.
func TestPerIdentityToggleKeepsBuckets(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	on := Config{RPS: 0.001, Burst: 1, PerIdentity: true}
	l := New(on, c.now)
	if ok, _ := l.Allow("a"); !ok {
		t.Fatal("a's first request refused")
	}
	off := on
	off.PerIdentity = false
	l.Configure(off)
	l.Configure(on)
	if ok, _ := l.Allow("a"); ok {
		t.Error("a's second request admitted after per_identity went off and on: its bucket was dropped")
	}
}
