package tags

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/graygate/graygate/internal/tags/redistest"
	"github.com/graygate/graygate/internal/testport"
)

// margin is what a Get may take beyond its timeout on a loaded 2-core CI
// machine running the race detector next to other packages' tests (a
// goroutine can wait that long to be scheduled). Every slow case here would
// otherwise take the whole 3s pause, so the bound still tells them apart.
const margin = 400 * time.Millisecond

// slowPause is how long the server holds commands in the timeout tests.
const slowPause = 3 * time.Second

// fakeClock drives cache expiry and breaker cooldown without sleeping.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestRedis(t testing.TB, addr string, edit func(*RedisConfig)) (*Redis, *fakeClock) {
	t.Helper()
	// The longest timeout allowed, so that only the tests about timeouts
	// (which set their own) ever see one on a loaded machine.
	cfg := RedisConfig{Addr: addr, Timeout: Duration(time.Second), BreakerFailures: 100}
	if edit != nil {
		edit(&cfg)
	}
	r, err := NewRedis(cfg, nil)
	if err != nil {
		t.Fatalf("NewRedis(%+v) = %v", cfg, err)
	}
	t.Cleanup(func() { r.Close() })
	clk := newFakeClock()
	r.now = clk.now
	return r, clk
}

func adminClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	t.Cleanup(func() { c.Close() })
	return c
}

func hset(t testing.TB, c *redis.Client, key string, kv ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.HSet(ctx, key, kv).Err(); err != nil {
		t.Fatalf("HSET %s: %v", key, err)
	}
}

// pause makes the server hold every client's commands for d (CLIENT PAUSE
// ALL): a slow Redis, on demand.
func pause(t *testing.T, c *redis.Client, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Do(ctx, "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
}

// waitUnpaused blocks until the server answers again.
func waitUnpaused(t *testing.T, c *redis.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after pause: %v", err)
	}
}

// waitStats polls Stats until done accepts them or a deadline passes, and
// returns the last ones.
func waitStats(t *testing.T, r *Redis, done func(Stats) bool) Stats {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := r.Stats()
		if done(s) || time.Now().After(deadline) {
			return s
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type getResult struct {
	set     Set
	status  Status
	elapsed time.Duration
}

func timedGet(r *Redis, ctx context.Context, uid string) getResult {
	start := time.Now()
	s, st := r.Get(ctx, uid)
	return getResult{s, st, time.Since(start)}
}

func TestRedisGetAndCache(t *testing.T) {
	srv := redistest.Start(t)
	admin := adminClient(t, srv.Addr())
	r, clk := newTestRedis(t, srv.Addr(), func(c *RedisConfig) {
		c.KeyPattern = "gg:{uid}:tags"
		c.CacheTTL = Duration(30 * time.Second)
	})
	ctx := context.Background()
	hset(t, admin, "gg:u1:tags", "vip", "true", "multi_loan_index", "0.82")

	check := func(uid string, wantStatus Status, want Set) {
		t.Helper()
		got, st := r.Get(ctx, uid)
		if st != wantStatus || !maps.Equal(got, want) {
			t.Fatalf("Get(%q) = %v, %v; want %v, %v", uid, got, st, want, wantStatus)
		}
	}
	checkStats := func(hits, lookups uint64) {
		t.Helper()
		s := r.Stats()
		if s.Hits != hits || s.Lookups != lookups || s.Errors != 0 || s.Unknown != 0 {
			t.Fatalf("Stats() = %+v; want hits %d, lookups %d, no errors", s, hits, lookups)
		}
	}

	check("u1", Known, Set{"vip": "true", "multi_loan_index": "0.82"})
	check("u2", None, nil)
	check("", None, nil)
	checkStats(0, 2)

	// Changes in Redis are not seen until the TTL passes: these are cache
	// hits, for tags and for "no tags" alike.
	hset(t, admin, "gg:u1:tags", "vip", "false")
	hset(t, admin, "gg:u2:tags", "vip", "true")
	clk.advance(29 * time.Second)
	check("u1", Known, Set{"vip": "true", "multi_loan_index": "0.82"})
	check("u2", None, nil)
	checkStats(2, 2)
	if s := r.Stats(); s.Misses != 2 {
		t.Errorf("Stats().Misses = %d, want 2", s.Misses)
	}

	clk.advance(time.Second)
	check("u1", Known, Set{"vip": "false", "multi_loan_index": "0.82"})
	check("u2", Known, Set{"vip": "true"})
	checkStats(2, 4)
	if n := r.CacheLen(); n != 2 {
		t.Errorf("CacheLen() = %d, want 2", n)
	}
}

func TestRedisCacheSizeBound(t *testing.T) {
	srv := redistest.Start(t)
	r, _ := newTestRedis(t, srv.Addr(), func(c *RedisConfig) { c.CacheSize = 3 })
	ctx := context.Background()
	for i := range 10 {
		if _, st := r.Get(ctx, fmt.Sprintf("u%d", i)); st != None {
			t.Fatalf("Get(u%d) status %v, want none", i, st)
		}
	}
	if n := r.CacheLen(); n != 3 {
		t.Errorf("CacheLen() = %d, want 3", n)
	}
	// The three most recent are cached, the first is not.
	r.Get(ctx, "u9")
	r.Get(ctx, "u0")
	if s := r.Stats(); s.Hits != 1 || s.Lookups != 11 {
		t.Errorf("Stats() = %+v; want 1 hit (u9) and 11 lookups (u0 again)", s)
	}
}

func TestRedisSlowIsUnknownWithinTimeout(t *testing.T) {
	srv := redistest.Start(t)
	admin := adminClient(t, srv.Addr())
	hset(t, admin, "tags:u1", "vip", "true")
	r, _ := newTestRedis(t, srv.Addr(), func(c *RedisConfig) { c.Timeout = Duration(50 * time.Millisecond) })
	ctx := context.Background()
	// A warm connection and a cached user, so the pause below is the only
	// slowness.
	if _, st := r.Get(ctx, "warm"); st != None {
		t.Fatalf("Get(warm) = %v, want none", st)
	}

	pause(t, admin, slowPause)
	got := timedGet(r, ctx, "u1")
	if got.status != Unknown || got.set != nil {
		t.Errorf("Get(u1) while Redis is paused = %v, %v; want nil, unknown", got.set, got.status)
	}
	if got.elapsed > 50*time.Millisecond+margin {
		t.Errorf("Get(u1) while Redis is paused took %v; want about the 50ms timeout", got.elapsed)
	}
	// A cached answer does not need Redis.
	if hit := timedGet(r, ctx, "warm"); hit.status != None || hit.elapsed > margin {
		t.Errorf("cached Get(warm) while paused = %v in %v", hit.status, hit.elapsed)
	}
	// The caller may stop waiting a moment before the lookup itself reports
	// its timeout; the error is counted when it does.
	s := waitStats(t, r, func(s Stats) bool { return s.Errors == 1 })
	if s.Errors != 1 || s.Unknown != 1 {
		t.Errorf("Stats() = %+v; want 1 error, 1 unknown", s)
	}

	waitUnpaused(t, admin)
	if got := timedGet(r, ctx, "u1"); got.status != Known || got.set["vip"] != "true" {
		t.Errorf("Get(u1) after the pause = %v, %v; want vip=true, known", got.set, got.status)
	}
}

func TestRedisCoalescesConcurrentMisses(t *testing.T) {
	srv := redistest.Start(t)
	admin := adminClient(t, srv.Addr())
	hset(t, admin, "tags:burst", "vip", "true")
	r, _ := newTestRedis(t, srv.Addr(), nil)

	// With Redis paused, every Get below misses the cache at the same time;
	// without coalescing each would send its own HGETALL.
	pause(t, admin, 200*time.Millisecond)
	const n = 20
	results := make(chan getResult, n)
	var start sync.WaitGroup
	start.Add(1)
	for range n {
		go func() {
			start.Wait()
			results <- timedGet(r, context.Background(), "burst")
		}()
	}
	start.Done()
	for range n {
		if got := <-results; got.status != Known || got.set["vip"] != "true" {
			t.Errorf("Get(burst) = %v, %v; want vip=true, known", got.set, got.status)
		}
	}
	s := r.Stats()
	if s.Lookups != 1 || s.Coalesced+s.Hits != n-1 {
		t.Errorf("Stats() = %+v; want 1 lookup, the other %d coalesced or cached", s, n-1)
	}
}

func TestRedisCallerGivingUpDoesNotFailOthers(t *testing.T) {
	srv := redistest.Start(t)
	admin := adminClient(t, srv.Addr())
	hset(t, admin, "tags:u1", "vip", "true")
	r, _ := newTestRedis(t, srv.Addr(), nil)

	pause(t, admin, 700*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if got := timedGet(r, ctx, "u1"); got.status != Unknown || got.elapsed > 20*time.Millisecond+margin {
		t.Errorf("Get(u1) with a 20ms context = %v after %v; want unknown within the context", got.status, got.elapsed)
	}
	// The lookup went on without the caller, and its answer is cached.
	deadline := time.Now().Add(5 * time.Second)
	for r.CacheLen() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if set, st := r.Get(context.Background(), "u1"); st != Known || set["vip"] != "true" {
		t.Errorf("Get(u1) after the lookup finished = %v, %v; want vip=true, known", set, st)
	}
	if s := r.Stats(); s.Errors != 0 || s.Lookups != 1 || s.Hits != 1 {
		t.Errorf("Stats() = %+v; want no error, 1 lookup, 1 hit", s)
	}
}

func TestRedisOutageAndRecovery(t *testing.T) {
	srv := redistest.Start(t)
	admin := adminClient(t, srv.Addr())
	hset(t, admin, "tags:cached", "vip", "true")
	const cooldown = 10 * time.Second
	r, clk := newTestRedis(t, srv.Addr(), func(c *RedisConfig) {
		// A refused connection fails at once; the longer timeout only keeps
		// a stalled CI machine from turning it into a timeout.
		c.Timeout = Duration(200 * time.Millisecond)
		c.BreakerFailures = 3
		c.BreakerCooldown = Duration(cooldown)
		c.CacheTTL = Duration(time.Hour)
	})
	ctx := context.Background()
	if _, st := r.Get(ctx, "cached"); st != Known {
		t.Fatalf("Get(cached) = %v, want known", st)
	}

	srv.Stop()
	for i := range 10 {
		uid := fmt.Sprintf("down%d", i)
		got := timedGet(r, ctx, uid)
		if got.status != Unknown || got.set != nil {
			t.Fatalf("Get(%s) with Redis down = %v, %v; want nil, unknown", uid, got.set, got.status)
		}
		if got.elapsed > 200*time.Millisecond+margin {
			t.Errorf("Get(%s) with Redis down took %v; want at most about the 200ms timeout", uid, got.elapsed)
		}
	}
	// Normally exactly 3 lookups fail and 7 Gets are rejected. A lookup
	// that a stalled machine delays past the wait lets one more Get through
	// before the breaker opens, so the bounds allow for one straggler.
	s := waitStats(t, r, func(s Stats) bool { return s.Errors == s.Lookups-1 })
	if s.Breaker != "open" || s.Opens != 1 || s.Errors < 3 || s.Errors > 4 || s.Errors+s.Rejected != 10 || s.Unknown != 10 {
		t.Fatalf("Stats() after 10 Gets with Redis down = %+v; want the breaker open after 3 errors, the rest rejected", s)
	}
	lookups := s.Lookups
	if _, st := r.Get(ctx, "cached"); st != Known {
		t.Errorf("Get(cached) with Redis down = %v; want the cached answer", st)
	}

	srv.Restart() // same port, empty data
	hset(t, admin, "tags:back", "tier", "gold")
	if _, st := r.Get(ctx, "back"); st != Unknown {
		t.Errorf("Get(back) with the breaker open = %v; want unknown until the cooldown ends", st)
	}
	if got := r.Stats().Lookups; got != lookups {
		t.Errorf("Lookups = %d with the breaker open, want still %d", got, lookups)
	}

	// After each cooldown one probe goes through; the first may still fail
	// on a connection the client had not yet found dead.
	deadline := time.Now().Add(10 * time.Second)
	for {
		clk.advance(cooldown)
		set, st := r.Get(ctx, "back")
		if st == Known {
			if set["tier"] != "gold" {
				t.Errorf("Get(back) = %v, want tier=gold", set)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("breaker did not recover: Stats() = %+v", r.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s := r.Stats(); s.Breaker != "closed" {
		t.Errorf("Stats().Breaker = %q after a successful probe, want closed", s.Breaker)
	}
	if _, st := r.Get(ctx, "fresh"); st != None {
		t.Errorf("Get(fresh) after recovery = %v, want none", st)
	}
}

// TestRedisUnreachable needs no redis-server: nothing listens on the port, as
// when Redis is down at startup.
func TestRedisUnreachable(t *testing.T) {
	addr := testport.Refused(t) // a closed listener's port may be given to another test's server
	r, _ := newTestRedis(t, addr, func(c *RedisConfig) {
		c.Timeout = Duration(200 * time.Millisecond)
		c.BreakerFailures = 2
	})
	for i := range 5 {
		got := timedGet(r, context.Background(), fmt.Sprintf("u%d", i))
		if got.status != Unknown || got.elapsed > 200*time.Millisecond+margin {
			t.Errorf("Get(u%d) with nothing listening = %v in %v; want unknown within the timeout", i, got.status, got.elapsed)
		}
	}
	s := waitStats(t, r, func(s Stats) bool { return s.Errors == s.Lookups })
	if s.Breaker != "open" || s.Errors < 2 || s.Errors > 3 || s.Errors+s.Rejected != 5 {
		t.Errorf("Stats() = %+v; want the breaker open after 2 failed lookups, the rest rejected", s)
	}
}

func TestRedisRefusesLongUIDAndClosed(t *testing.T) {
	r, _ := newTestRedis(t, "127.0.0.1:1", nil)
	if _, st := r.Get(context.Background(), strings.Repeat("x", MaxUIDLen+1)); st != Unknown {
		t.Errorf("Get(long uid) = %v, want unknown", st)
	}
	if s := r.Stats(); s.Lookups != 0 || s.Unknown != 1 {
		t.Errorf("Stats() = %+v; want no lookup for a long uid", s)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, st := r.Get(context.Background(), "u1"); st != Unknown {
		t.Errorf("Get after Close = %v, want unknown", st)
	}
}

func TestNewRedisErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  RedisConfig
		want string
	}{
		{name: "no addr", cfg: RedisConfig{}, want: "redis.addr"},
		{name: "slow timeout", cfg: RedisConfig{Addr: "a:1", Timeout: Duration(5 * time.Second)}, want: "redis.timeout"},
		{name: "password env unset", cfg: RedisConfig{Addr: "a:1", PasswordEnv: "GG_TEST_UNSET_VARIABLE"}, want: "empty or unset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewRedis(tt.cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewRedis() = %v, %v; want error containing %q", r, err, tt.want)
			}
		})
	}
}

func BenchmarkRedisGetCacheHit(b *testing.B) {
	srv := redistest.Start(b)
	hset(b, adminClient(b, srv.Addr()), "tags:u1", "vip", "true", "multi_loan_index", "0.82")
	r, _ := newTestRedis(b, srv.Addr(), nil)
	r.now = time.Now
	ctx := context.Background()
	if _, st := r.Get(ctx, "u1"); st != Known {
		b.Fatalf("Get(u1) = %v", st)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, st := r.Get(ctx, "u1"); st != Known {
			b.Fatalf("Get(u1) = %v", st)
		}
	}
	if s := r.Stats(); s.Lookups != 1 {
		b.Fatalf("Lookups = %d, want 1", s.Lookups)
	}
}

func BenchmarkRedisGetCacheHitParallel(b *testing.B) {
	srv := redistest.Start(b)
	hset(b, adminClient(b, srv.Addr()), "tags:u1", "vip", "true")
	r, _ := newTestRedis(b, srv.Addr(), nil)
	r.now = time.Now
	ctx := context.Background()
	r.Get(ctx, "u1")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, st := r.Get(ctx, "u1"); st != Known {
				b.Errorf("Get(u1) = %v", st)
				return
			}
		}
	})
}

// TestRedisConcurrent runs many Gets on a small cache under -race: hits,
// coalesced misses, evictions and expiries all at once.
func TestRedisConcurrent(t *testing.T) {
	srv := redistest.Start(t)
	admin := adminClient(t, srv.Addr())
	for i := range 25 {
		hset(t, admin, fmt.Sprintf("tags:u%d", i), "n", fmt.Sprint(i))
	}
	r, clk := newTestRedis(t, srv.Addr(), func(c *RedisConfig) { c.CacheSize = 10 })
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				n := (g*7 + i) % 50
				set, st := r.Get(context.Background(), fmt.Sprintf("u%d", n))
				switch {
				case n < 25 && (st != Known || set["n"] != fmt.Sprint(n)):
					t.Errorf("Get(u%d) = %v, %v; want n=%d, known", n, set, st, n)
					return
				case n >= 25 && st != None:
					t.Errorf("Get(u%d) = %v; want none", n, st)
					return
				}
				if i%50 == 0 {
					clk.advance(time.Minute)
				}
			}
		}()
	}
	wg.Wait()
	s := r.Stats()
	if s.Hits+s.Misses != 8*200 || s.Lookups+s.Coalesced != s.Misses || s.Errors != 0 {
		t.Errorf("Stats() = %+v; want every Get a hit or a miss, every miss a lookup or coalesced", s)
	}
	if n := r.CacheLen(); n > 10 {
		t.Errorf("CacheLen() = %d, want at most 10", n)
	}
}

// TestRedisKeepsNoAliasOfUID guards the fasthttp case: the uid string may
// point into a request buffer that is reused after the request.
func TestRedisKeepsNoAliasOfUID(t *testing.T) {
	srv := redistest.Start(t)
	hset(t, adminClient(t, srv.Addr()), "tags:alice", "vip", "true")
	r, _ := newTestRedis(t, srv.Addr(), nil)
	buf := []byte("alice")
	if _, st := r.Get(context.Background(), unsafeString(buf)); st != Known {
		t.Fatalf("Get(alice) = %v, want known", st)
	}
	copy(buf, "mallo")
	if _, st := r.Get(context.Background(), "alice"); st != Known || r.Stats().Hits != 1 {
		t.Errorf("Get(alice) after the caller's buffer changed = %v, stats %+v; want a cache hit", st, r.Stats())
	}
}

// unsafeString aliases b, as fasthttp's header accessors do.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
