package experiment

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"
)

// redisStore counts a fleet's exposures and conversions in one Redis, so
// that every gateway's results are the fleet's and a unit that hits two
// gateways counts once: the dedup is HSETNX on the experiment's unit hash,
// done in Redis. An experiment's keys share the prefix
// graygate:exp:<len>:<experiment id>: (the length keeps ids containing ':'
// apart):
//
//	u          hash  unit → "ts version group", its first exposure (the
//	                 earliest time; group and version of the first recorded)
//	n          hash  group → exposed units
//	c:<metric> set   units that converted on a binomial metric
//	k          hash  "<metric>\n<group>" → converted units
//	v:<metric> hash  "<len(group)>:<group><unit>" → the unit's total, µ-units
//	p:<unit>   list  conversions of a unit not (yet) exposed, for pendingTTL
//	pz         zset  unit → when its wait ends (Unix ms): a batch of the
//	                 experiment, or the sweep of the gateway that parked
//	                 the conversion (sweepIdle), drops the lists whose
//	                 wait ended and returns how many conversions they held
//	                 (no_exposure); both expire after twice pendingTTL
//	                 without a batch
//	b:<id>     string  marks a batch as applied, for an hour
//	r:<id>     string  the batch's reply (its codes, then how many parked
//	                   conversions it dropped), for resultTTL
//	ph         string  the experiment's phase (JSON, see phase.go)
//	ps         string  "<since> <alloc>" of the phase: first exposures of
//	                   allocation alloc (hex) dated at or after since
//	                   (Unix ms) count in pn; absent in the first phase
//	pn         hash  group → units counted in the phase
//
// One script applies a batch of one experiment's events atomically. A
// batch carries an id unique to this gateway, so a batch whose reply was
// lost and that is sent again is not counted twice (values are sums, so
// counting twice would be wrong), and gets the reply it had, so that the
// gateway learns each event's status (a first exposure, for the exposure
// log) and the count of expired conversions. It is sent again at once
// (run), and, if that reply is lost too, at the next flush (lost). Scripts name their keys in ARGV, not
// KEYS: this needs a standalone Redis (or a primary behind Sentinel), not
// Redis Cluster.
type redisStore struct {
	c      *redis.Client
	script *redis.Script
	phase  *redis.Script
	id     string
	seq    atomic.Uint64
	// now dates a batch, for the waits of parked conversions; expired is
	// told how many of them a batch found expired and dropped.
	now     func() time.Time
	expired func(n int)
	// parked: experiment → when the wait of the last conversion this
	// gateway parked in it ends (Unix ms), until sweepIdle has found its
	// waits ended. Only the writer uses it.
	parked map[string]int64
	// fleetSwept is when sweepIdle last listed every experiment of the
	// catalog (Unix ms, the gateway's clock). Only the writer uses it.
	fleetSwept int64
	// lost is the batch whose every reply was lost, which Redis may have
	// applied: the next apply sends it again under its id if its events
	// still head the list (the writer keeps the events it could not
	// apply). Only the writer uses it.
	lost lostBatch
	// timeout bounds one call (redisTimeout; tests shorten it).
	timeout time.Duration
}

// lostBatch names a batch by its id, its length and a hash of its events.
type lostBatch struct {
	id  string
	n   int
	sum uint64
}

// batchSum hashes what a batch sends of its events.
func batchSum(events []Event) uint64 {
	d := xxhash.New()
	var b []byte
	for i := range events {
		e := &events[i]
		b = fmt.Appendf(b[:0], "%d\x00%s\x00%s\x00%s\x00%s\x00%d\x00%d\x00%d\x00%d\x00%t\x00%t\n",
			e.Kind, e.Experiment, e.Unit, e.Group, e.Metric, e.TS, e.Value, e.Version, e.Alloc, e.Binomial, e.Exposes)
		_, _ = d.Write(b)
	}
	return d.Sum64()
}

// redisTimeout bounds one Redis call, so that an outage costs the writer
// at most this long per flush; the request path never waits on Redis.
const redisTimeout = 2 * time.Second

// resultTTL is how long Redis keeps a batch's reply for a batch sent
// again (r:<id>): a reply lost on both tries is asked for at the next
// flush, a second or so later, unless Redis stays unreachable. A batch
// sent again after that is still applied once (b:<id>), with its
// statuses unknown.
const resultTTL = 10 * time.Minute

// fleetSweepEvery is how often each gateway sweeps every experiment for
// parked conversions whose wait ended (see sweepIdle): within Redis's
// expiry of them, twice the wait.
const fleetSweepEvery = pendingTTL / 2

// maxBatch is the most events one script call applies.
const maxBatch = 512

// openRedis opens the store at rawURL. now is the gateway's clock (nil
// for time.Now); expired, if not nil, is told how many parked conversions
// expired.
func openRedis(rawURL string, now func() time.Time, expired func(n int)) (*redisStore, error) {
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("experiments.store: %w", err)
	}
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = time.Second, redisTimeout, redisTimeout
	o.MaxRetries = -1 // the writer retries whole batches itself
	o.PoolSize = 4
	o.ContextTimeoutEnabled = true
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("batch id: %w", err)
	}
	if now == nil {
		now = time.Now
	}
	return &redisStore{c: redis.NewClient(o), script: redis.NewScript(applyScript), phase: redis.NewScript(phaseScript), id: hex.EncodeToString(id[:]),
		now: now, expired: expired, parked: map[string]int64{}, timeout: redisTimeout}, nil
}

func (s *redisStore) kind() string { return "redis" }

func prefix(exp string) string { return "graygate:exp:" + strconv.Itoa(len(exp)) + ":" + exp + ":" }

// applyScript applies one batch of one experiment's events; see redisStore.
// ARGV: window (ms), pending TTL (s), key prefix, batch id, the gateway's
// time (Unix ms), the reply's TTL (s), then six fields
// per event: kind ("e" exposure, "b" binomial, "m" mean), unit, and for an
// exposure group, ts, version, alloc (hex); for a conversion metric, ts,
// value, "".
// A conversion's kind is upper-case ("B", "M") when its request exposed the
// unit too (Event.Exposes).
// It returns one code per event (1 fresh or counted, 0 repeated, 2 parked,
// 3 outside the window, 4 overflow) and then how many parked conversions
// it dropped because their wait had ended. A batch applied before gets
// the reply it had, or {-1} once that has expired.
const applyScript = `
local W = tonumber(ARGV[1])
local TTL = tonumber(ARGV[2])
local P = ARGV[3]
local BID = ARGV[4]
local NOW = tonumber(ARGV[5])
if BID ~= "" then
  local done = redis.call("GET", P .. "r:" .. BID)
  if done then
    local out = {}
    for v in string.gmatch(done, "[^,]+") do out[#out+1] = tonumber(v) end
    return out
  end
  if not redis.call("SET", P .. "b:" .. BID, "1", "NX", "EX", 3600) then
    return {-1}
  end
end
local PS, PA
local ps = redis.call("GET", P .. "ps")
if ps then
  local s, a = string.match(ps, "^(%-?%d+) (%S+)$")
  PS, PA = tonumber(s), a
end
local function conv(unit, kind, metric, ts, val, rec)
  local ets, ver, group = string.match(rec, "^(%-?%d+) (%d+) (.*)$")
  ets = tonumber(ets)
  if kind == "B" or kind == "M" then
    -- an exposing conversion: its request exposed the unit at ts at the latest
    if ts < ets then
      redis.call("HSET", P .. "u", unit, ts .. " " .. ver .. " " .. group)
      ets = ts
    end
    kind = string.lower(kind)
  end
  if ts < ets or ts - ets >= W then return 3 end
  if kind == "b" then
    if redis.call("SADD", P .. "c:" .. metric, unit) == 1 then
      redis.call("HINCRBY", P .. "k", metric .. "\n" .. group, 1)
      return 1
    end
    return 0
  end
  local field = #group .. ":" .. group .. unit
  local r = redis.pcall("HINCRBY", P .. "v:" .. metric, field, val)
  if type(r) == "table" and r.err then return 4 end
  if r == 0 then redis.call("HDEL", P .. "v:" .. metric, field) end
  return 1
end
local out = {}
local i = 7
while i + 5 <= #ARGV do
  local kind, unit, a, b, c, f = ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+3], ARGV[i+4], ARGV[i+5]
  i = i + 6
  if kind == "e" then
    local rec = b .. " " .. c .. " " .. a
    if redis.call("HSETNX", P .. "u", unit, rec) == 1 then
      redis.call("HINCRBY", P .. "n", a, 1)
      if PS and tonumber(b) >= PS and f == PA then
        redis.call("HINCRBY", P .. "pn", a, 1)
      end
      local pk = P .. "p:" .. unit
      local ps = redis.call("LRANGE", pk, 0, -1)
      if #ps > 0 then
        redis.call("DEL", pk)
        redis.call("ZREM", P .. "pz", unit)
        for _, p in ipairs(ps) do
          local k, m, t, v = string.match(p, "^(%a) (%S+) (%-?%d+) (%-?%d+)$")
          if k then conv(unit, k, m, tonumber(t), v, redis.call("HGET", P .. "u", unit)) end
        end
      end
      out[#out+1] = 1
    else
      -- The first exposure is the earliest: keep the recorded group and
      -- version, and an earlier time that arrived later.
      local old = redis.call("HGET", P .. "u", unit)
      local ets, rest = string.match(old, "^(%-?%d+) (.*)$")
      if tonumber(b) < tonumber(ets) then
        redis.call("HSET", P .. "u", unit, b .. " " .. rest)
      end
      out[#out+1] = 0
    end
  else
    local rec = redis.call("HGET", P .. "u", unit)
    if rec then
      out[#out+1] = conv(unit, kind, a, tonumber(b), c, rec)
    else
      local pk = P .. "p:" .. unit
      redis.call("RPUSH", pk, kind .. " " .. a .. " " .. b .. " " .. c)
      redis.call("LTRIM", pk, -100, -1)
      -- The wait is pz's, from the last conversion parked; EXPIRE only
      -- cleans up after an experiment that no batch comes for.
      redis.call("EXPIRE", pk, 2 * TTL)
      redis.call("ZADD", P .. "pz", NOW + TTL * 1000, unit)
      redis.call("EXPIRE", P .. "pz", 2 * TTL)
      out[#out+1] = 2
    end
  end
end
local expired = 0
for _, unit in ipairs(redis.call("ZRANGEBYSCORE", P .. "pz", "-inf", NOW, "LIMIT", 0, 1000)) do
  local pk = P .. "p:" .. unit
  expired = expired + redis.call("LLEN", pk)
  redis.call("DEL", pk)
  redis.call("ZREM", P .. "pz", unit)
end
out[#out+1] = expired
if BID ~= "" then
  redis.call("SET", P .. "r:" .. BID, table.concat(out, ","), "EX", tonumber(ARGV[6]))
end
return out
`

// scriptHead appends applyScript's first six ARGV to args: window (ms),
// pending TTL (s), exp's key prefix, the batch id ("": none), the
// gateway's time (Unix ms) and resultTTL (s).
func scriptHead(args []any, window int64, exp, batch string, now int64) []any {
	return append(args, window, int64(pendingTTL/time.Second), prefix(exp), batch, now, int64(resultTTL/time.Second))
}

func (s *redisStore) apply(ctx context.Context, events []Event, window int64, st []status) (int, error) {
	done := 0
	args := make([]any, 0, 4+6*maxBatch)
	for done < len(events) {
		exp := events[done].Experiment
		end := done + 1
		for end < len(events) && end-done < maxBatch && events[end].Experiment == exp {
			end++
		}
		id := ""
		if l := s.lost; l.n > 0 {
			// The batch whose reply was lost goes again first, whole and
			// alone, under its id, if the events still start with it.
			s.lost = lostBatch{}
			if done == 0 && l.n <= len(events) && sameExperiment(events[:l.n]) && batchSum(events[:l.n]) == l.sum {
				end, id = l.n, l.id
			}
		}
		if id == "" {
			id = s.id + "-" + strconv.FormatUint(s.seq.Add(1), 10)
		}
		now := s.now().UnixMilli()
		args = scriptHead(args[:0], window, exp, id, now)
		for i := done; i < end; i++ {
			e := &events[i]
			if e.Kind == Exposure {
				args = append(args, "e", e.Unit, e.Group, e.TS, e.Version, strconv.FormatUint(e.Alloc, 16))
				continue
			}
			kind, v := "m", e.Value
			if e.Binomial {
				kind, v = "b", 1
			}
			if e.Exposes {
				kind = strings.ToUpper(kind)
			}
			args = append(args, kind, e.Unit, e.Metric, e.TS, v, "")
		}
		codes, err := s.run(ctx, args)
		if err != nil {
			if isTimeout(err) {
				s.lost = lostBatch{id: id, n: end - done, sum: batchSum(events[done:end])}
			}
			return done, err
		}
		for i := done; i < end; i++ {
			st[i] = stNone
			if j := i - done; j < len(codes) {
				st[i] = decodeStatus(events[i].Kind, codes[j])
			}
			if st[i] == stPending {
				s.parked[exp] = now + pendingTTL.Milliseconds()
			}
		}
		if n := end - done; len(codes) == n+1 && codes[n] > 0 && s.expired != nil {
			s.expired(int(codes[n]))
		}
		done = end
	}
	return done, nil
}

// sweepIdle runs the apply script without events (and without a batch
// id: a sweep repeated finds nothing left to count) for each experiment
// in which this gateway parked conversions whose wait has now ended, so
// that they are counted (no_exposure) even if no batch of the experiment
// comes again. An experiment stays listed, swept again a second later,
// until a sweep finds nothing more (one sweep drops at most 1000 units).
//
// Conversions another gateway parked are its to sweep, or any batch's;
// and, every fleetSweepEvery, every gateway sweeps every experiment of
// its catalog, so that those of a gateway that stopped before their wait
// ended are counted too, before Redis expires them (2 × pendingTTL after
// the last one parked).
func (s *redisStore) sweepIdle(ctx context.Context, experiments func() []string) error {
	now := s.now().UnixMilli()
	if now-s.fleetSwept >= fleetSweepEvery.Milliseconds() {
		s.fleetSwept = now
		for _, exp := range experiments() {
			if _, ok := s.parked[exp]; !ok {
				s.parked[exp] = now // due: swept now, and unlisted if nothing is there
			}
		}
	}
	for exp, ends := range s.parked {
		if ends > now {
			continue
		}
		codes, err := s.run(ctx, scriptHead(nil, 0, exp, "", now))
		if err != nil {
			return err
		}
		if len(codes) != 1 || codes[0] == 0 {
			delete(s.parked, exp)
			continue
		}
		if s.expired != nil {
			s.expired(int(codes[0]))
		}
		s.parked[exp] = now + time.Second.Milliseconds() // more may be left: look again in a second
	}
	return nil
}

// sameExperiment reports whether events are all of one experiment, as a
// batch's are.
func sameExperiment(events []Event) bool {
	for i := range events {
		if events[i].Experiment != events[0].Experiment {
			return false
		}
	}
	return true
}

// run sends one batch; a reply lost to a timeout is retried once with the
// same batch id, which the script recognises if the first attempt landed.
func (s *redisStore) run(ctx context.Context, args []any) ([]int64, error) {
	var last error
	for range 2 {
		cctx, cancel := context.WithTimeout(ctx, s.timeout)
		codes, err := s.script.Run(cctx, s.c, nil, args...).Int64Slice()
		cancel()
		if err == nil {
			if len(codes) == 1 && codes[0] == -1 {
				return nil, nil // applied before: its statuses are unknown now
			}
			return codes, nil
		}
		last = err
		if !isTimeout(err) {
			break
		}
	}
	return nil, fmt.Errorf("redis: apply a batch: %w", last)
}

func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

func decodeStatus(k Kind, code int64) status {
	switch code {
	case 0:
		return stDup
	case 1:
		if k == Exposure {
			return stFresh
		}
		return stCounted
	case 2:
		return stPending
	case 3:
		return stOutside
	case 4:
		return stOverflow
	}
	return stNone
}

func (s *redisStore) counts(ctx context.Context, exp string) (counts, error) {
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	c := counts{units: map[string]int64{}, converted: map[metricGroup]int64{}}
	p := prefix(exp)
	pipe := s.c.Pipeline()
	n := pipe.HGetAll(ctx, p+"n")
	k := pipe.HGetAll(ctx, p+"k")
	ph := pipe.Get(ctx, p+"ph")
	pn := pipe.HGetAll(ctx, p+"pn")
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return c, fmt.Errorf("redis: read the counts of experiment %q: %w", exp, err)
	}
	for _, cmd := range []redis.Cmder{n, k, pn} {
		if err := cmd.Err(); err != nil {
			return c, fmt.Errorf("redis: read the counts of experiment %q: %w", exp, err)
		}
	}
	switch raw, err := ph.Bytes(); {
	case err == nil:
		c.phase = raw
	case !errors.Is(err, redis.Nil):
		return c, fmt.Errorf("redis: read the phase of experiment %q: %w", exp, err)
	}
	c.phaseUnits = map[string]int64{}
	for g, v := range pn.Val() {
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return c, fmt.Errorf("redis: %spn field %q: %q is not a count", p, g, v)
		}
		c.phaseUnits[g] = x
	}
	for g, v := range n.Val() {
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return c, fmt.Errorf("redis: %sn field %q: %q is not a count", p, g, v)
		}
		c.units[g] = x
	}
	for f, v := range k.Val() {
		m, g, ok := strings.Cut(f, "\n")
		x, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil {
			return c, fmt.Errorf("redis: %sk field %q: %q is not a count", p, f, v)
		}
		c.converted[metricGroup{m, g}] = x
	}
	return c, nil
}

// phaseScript replaces an experiment's phase compare-and-set. ARGV: key
// prefix, the phase expected, the new phase, reset ("1": count the phase's
// units again from 0), since (Unix ms; "0": count none, the first phase),
// alloc (hex). It returns 1 if it replaced the phase, 0 if the phase was
// not the one expected. Running in Redis, it is atomic with the batches:
// a first exposure counts in the phase the batch finds.
const phaseScript = `
local P = ARGV[1]
local cur = redis.call("GET", P .. "ph") or ""
if cur ~= ARGV[2] then return 0 end
redis.call("SET", P .. "ph", ARGV[3])
if ARGV[4] == "1" then
  redis.call("DEL", P .. "pn")
  if ARGV[5] ~= "0" then
    redis.call("SET", P .. "ps", ARGV[5] .. " " .. ARGV[6])
  else
    redis.call("DEL", P .. "ps")
  end
end
return 1
`

func (s *redisStore) setPhase(ctx context.Context, exp string, old, next []byte, since int64, alloc uint64, reset bool) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	r := "0"
	if reset {
		r = "1"
	}
	n, err := s.phase.Run(ctx, s.c, nil, prefix(exp), string(old), string(next), r, since, strconv.FormatUint(alloc, 16)).Int()
	if err != nil {
		return false, fmt.Errorf("redis: write the phase of experiment %q: %w", exp, err)
	}
	return n == 1, nil
}

func (s *redisStore) values(ctx context.Context, exp, metric string, fn func(group string, total int64)) error {
	ctx, cancel := context.WithTimeout(ctx, 10*redisTimeout)
	defer cancel()
	key := prefix(exp) + "v:" + metric
	// HSCAN may return a field twice (when the hash is rehashed meanwhile);
	// seen keeps each unit counted once.
	seen := map[string]struct{}{}
	var cursor uint64
	for {
		kv, next, err := s.c.HScan(ctx, key, cursor, "", 1000).Result()
		if err != nil {
			return fmt.Errorf("redis: scan %s: %w", key, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			f, v := kv[i], kv[i+1]
			if _, dup := seen[f]; dup {
				continue
			}
			seen[f] = struct{}{}
			ls, rest, ok := strings.Cut(f, ":")
			n, err := strconv.Atoi(ls)
			if !ok || err != nil || n < 0 || n > len(rest) {
				return fmt.Errorf("redis: %s field %q is not <len>:<group><unit>", key, f)
			}
			t, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("redis: %s field %q: %q is not a total", key, f, v)
			}
			if t != 0 {
				fn(rest[:n], t)
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

func (s *redisStore) close() error { return s.c.Close() }
