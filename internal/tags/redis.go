package tags

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// MaxUIDLen bounds the user ids Redis looks up. A longer id (identity may
// come from a client header) is answered Unknown without a lookup, so it can
// neither build huge keys nor flood the cache.
const MaxUIDLen = 256

// waitGrace is how long past the timeout a caller waits for the client to
// report its own timeout before giving up on it; it only matters if the
// client library ever overran its deadline.
const waitGrace = 5 * time.Millisecond

// Redis reads a user's tags with HGETALL from one hash per user, behind a
// bounded TTL cache (answers with no tags are cached too), per-user request
// coalescing, a timeout and a circuit breaker. Get never fails a request: a
// slow, failing or skipped lookup answers Unknown and is counted.
//
// Redis is safe for concurrent use. The counters are atomics that the caller
// exports (Stats); the cache and breaker live under one mutex that a cache
// hit holds for a map lookup and a list move.
type Redis struct {
	client  *redis.Client
	prefix  string // key = prefix + uid + suffix
	suffix  string
	timeout time.Duration
	ttl     time.Duration
	log     *slog.Logger
	now     func() time.Time // cache expiry and breaker cooldown

	mu      sync.Mutex
	cache   *lru
	flights map[string]*flight
	br      breaker

	hits, misses, lookups, coalesced, errs, unknown, rejected atomic.Uint64
}

// flight is one HGETALL in progress; callers for the same uid wait on it
// instead of sending their own (singleflight).
type flight struct {
	done     chan struct{}
	deadline time.Time // wall clock: when waiters stop waiting
	set      Set       // written before done is closed
	status   Status
}

// Stats is a snapshot of the Redis counters, which only grow.
type Stats struct {
	Hits      uint64 // Gets answered from the cache, tags or no tags
	Misses    uint64 // Gets not answered from the cache
	Lookups   uint64 // HGETALL calls sent
	Coalesced uint64 // misses that waited on a lookup already in flight
	Errors    uint64 // lookups that failed or timed out
	Unknown   uint64 // Gets answered Unknown, for any reason
	Rejected  uint64 // misses answered Unknown because the breaker was open
	Opens     uint64 // times the breaker opened
	// Breaker is "closed", "open" or "half-open".
	Breaker string
}

// NewRedis applies defaults to cfg, validates it and creates the client. It
// does not connect: Redis may be down at startup, and Get then answers
// Unknown until it is up.
func NewRedis(cfg RedisConfig, logger *slog.Logger) (*Redis, error) {
	cfg.defaults()
	if err := cfg.validate("redis"); err != nil {
		return nil, err
	}
	var password string
	if cfg.PasswordEnv != "" {
		password = os.Getenv(cfg.PasswordEnv)
		if password == "" {
			return nil, fmt.Errorf("redis: environment variable %s (password_env) is empty or unset", cfg.PasswordEnv)
		}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	timeout := cfg.Timeout.Std()
	prefix, suffix, _ := strings.Cut(cfg.KeyPattern, "{uid}")
	r := &Redis{
		client: redis.NewClient(&redis.Options{
			Addr:     cfg.Addr,
			DB:       cfg.DB,
			Password: password,
			// Every wait in the client is bounded by the lookup timeout:
			// honour context deadlines, never retry (a retry would only
			// spend the same budget again), and dial once.
			ContextTimeoutEnabled: true,
			MaxRetries:            -1,
			DialerRetries:         1,
			DialTimeout:           timeout,
			ReadTimeout:           timeout,
			WriteTimeout:          timeout,
			PoolTimeout:           timeout,
			// No handshake extras: fewer round trips inside the budget of
			// a request that has to open a connection.
			DisableIdentity:          true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		}),
		prefix:  prefix,
		suffix:  suffix,
		timeout: timeout,
		ttl:     cfg.CacheTTL.Std(),
		log:     logger.With("component", "tags.redis", "addr", cfg.Addr),
		now:     time.Now,
		cache:   newLRU(cfg.CacheSize),
		flights: make(map[string]*flight),
		br:      breaker{threshold: cfg.BreakerFailures, cooldown: cfg.BreakerCooldown.Std()},
	}
	return r, nil
}

// Get returns the tags of uid: Known with the Set, None when the hash is
// empty or missing, Unknown when Redis did not answer within the timeout,
// failed, or is being skipped by the open breaker, or when ctx ends first.
// An empty uid is None without a lookup. Get waits at most about the
// timeout, whatever Redis does.
//
// The returned Set is shared with the cache and must not be modified.
func (r *Redis) Get(ctx context.Context, uid string) (Set, Status) {
	if uid == "" {
		return nil, None
	}
	if len(uid) > MaxUIDLen {
		r.unknown.Add(1)
		return nil, Unknown
	}
	now := r.now()
	r.mu.Lock()
	if e, ok := r.cache.get(uid, now); ok {
		set, status := e.set, e.status
		r.mu.Unlock()
		r.hits.Add(1)
		return set, status
	}
	f, joined := r.flights[uid]
	if !joined {
		if !r.br.allow(now) {
			r.mu.Unlock()
			r.misses.Add(1)
			r.rejected.Add(1)
			r.unknown.Add(1)
			return nil, Unknown
		}
		// uid may alias a request buffer that the server reuses; the
		// flight and the cache outlive the request.
		uid = strings.Clone(uid)
		f = &flight{done: make(chan struct{}), deadline: time.Now().Add(r.timeout + waitGrace)}
		r.flights[uid] = f
	}
	r.mu.Unlock()
	r.misses.Add(1)
	if joined {
		r.coalesced.Add(1)
	} else {
		r.lookups.Add(1)
		go r.fetch(uid, f)
	}

	timer := time.NewTimer(time.Until(f.deadline))
	defer timer.Stop()
	select {
	case <-f.done:
		if f.status == Unknown {
			r.unknown.Add(1)
		}
		return f.set, f.status
	case <-timer.C:
	case <-ctx.Done():
	}
	r.unknown.Add(1)
	return nil, Unknown
}

// fetch runs one HGETALL for a flight, detached from any caller's context so
// that a caller who gives up does not fail the others waiting on it.
func (r *Redis) fetch(uid string, f *flight) {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	m, err := r.client.HGetAll(ctx, r.prefix+uid+r.suffix).Result()
	cancel()

	now := r.now()
	var changed bool
	r.mu.Lock()
	delete(r.flights, uid)
	if err != nil {
		f.status = Unknown
		changed = r.br.failure(now)
	} else {
		f.status = None
		if len(m) > 0 {
			f.set, f.status = Set(m), Known
		}
		r.cache.put(uid, f.set, f.status, now.Add(r.ttl))
		changed = r.br.success()
	}
	state, failures := r.br.state, r.br.failures
	r.mu.Unlock()
	if err != nil {
		r.errs.Add(1) // before done: a caller who saw Unknown sees the error counted
	}
	close(f.done)

	switch {
	case changed && state == open:
		r.log.Warn("redis tag lookups failing: breaker open, tags are unknown until a probe succeeds",
			"err", err, "consecutive_failures", failures, "cooldown", r.br.cooldown)
	case changed && state == closed:
		r.log.Info("redis tag lookups answering again: breaker closed")
	}
}

// Stats returns the counters and the breaker state.
func (r *Redis) Stats() Stats {
	r.mu.Lock()
	state, opens := r.br.state, r.br.opens
	r.mu.Unlock()
	return Stats{
		Hits:      r.hits.Load(),
		Misses:    r.misses.Load(),
		Lookups:   r.lookups.Load(),
		Coalesced: r.coalesced.Load(),
		Errors:    r.errs.Load(),
		Unknown:   r.unknown.Load(),
		Rejected:  r.rejected.Load(),
		Opens:     opens,
		Breaker:   state.String(),
	}
}

// CacheLen returns the number of cached users, live or expired.
func (r *Redis) CacheLen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cache.len()
}

// Close closes the client's connections. Gets after Close answer Unknown.
func (r *Redis) Close() error { return r.client.Close() }

// RedisLogger adapts a slog.Logger to go-redis's logger, which is
// process-wide: go-redis reports dial failures through it and would
// otherwise write them to stderr with the standard log package. Only main
// sets globals, so main installs it: redis.SetLogger(tags.RedisLogger{L: logger}).
type RedisLogger struct{ L *slog.Logger }

// Printf logs one go-redis message at warning level.
func (l RedisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.L.WarnContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}
