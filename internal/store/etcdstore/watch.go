package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/graygate/graygate/internal/store"
)

// view is the watch goroutine's working copy of everything under meta/ and
// rules/. Only that goroutine (or Open, before it starts) touches it; it
// publishes immutable snapshots of it.
type view struct {
	keys       layout
	rules      map[string]store.Entry
	revision   int64     // store revision, from meta/revision
	at         time.Time // when the change that set revision was made
	counterMod int64     // etcd revision of that change (meta/revision's mod revision), 0 if none
	rolledBack bool
	etcdRev    int64 // every event up to this etcd revision is applied
	epoch      int64 // store.State.Epoch
	gen        int64 // which resync (connect) the view comes from
}

func newView(keys layout) *view {
	return &view{keys: keys, rules: make(map[string]store.Entry)}
}

// clone returns a copy of v that can be changed without changing v.
func (v *view) clone() *view {
	c := *v
	c.rules = maps.Clone(v.rules)
	return &c
}

// put applies the new value of an etcd key in the view's range, written at
// etcd revision mod. A value that does not decode leaves the view as it
// was; the caller logs it.
func (v *view) put(k, val []byte, mod int64) error {
	key := string(k)
	switch {
	case key == v.keys.revision:
		var r revisionRecord
		if err := json.Unmarshal(val, &r); err != nil {
			return fmt.Errorf("decode revision record: %w", err)
		}
		v.revision, v.at, v.counterMod = r.Revision, r.At, mod
	case key == v.keys.global:
		var g globalRecord
		if err := json.Unmarshal(val, &g); err != nil {
			return fmt.Errorf("decode global flag: %w", err)
		}
		v.rolledBack = g.RolledBack
	case strings.HasPrefix(key, v.keys.rulesDir):
		name := key[len(v.keys.rulesDir):]
		if !validKey(name) {
			return fmt.Errorf("%q is not a rule key", name)
		}
		var e store.Entry
		if err := json.Unmarshal(val, &e); err != nil {
			return fmt.Errorf("decode rule: %w", err)
		}
		if e.Key != name || !store.IsObject(e.Rule) {
			return fmt.Errorf("entry of rule %q names %q or holds no JSON object", name, e.Key)
		}
		v.rules[name] = e
	}
	return nil
}

// del applies the deletion of an etcd key in the view's range. Only a rule
// delete is part of the protocol; meta keys disappear only when someone
// wipes the prefix, which then reads as an empty store (the watch takes
// that for a replaced history: see follows).
func (v *view) del(k []byte) {
	key := string(k)
	switch {
	case key == v.keys.revision:
		v.revision, v.at, v.counterMod = 0, time.Time{}, 0
	case key == v.keys.global:
		v.rolledBack = false
	case strings.HasPrefix(key, v.keys.rulesDir):
		delete(v.rules, key[len(v.keys.rulesDir):])
	}
}

// snapshot returns an immutable State of the view. Rule bytes are shared
// with the view, which never modifies them: it replaces whole entries.
func (v *view) snapshot() *snapshot {
	keys := make([]string, 0, len(v.rules))
	for k := range v.rules {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	rules := make([]store.Entry, len(keys))
	for i, k := range keys {
		rules[i] = v.rules[k]
	}
	return &snapshot{
		state:      store.State{Revision: v.revision, Rules: rules, RolledBack: v.rolledBack, Epoch: v.epoch},
		etcdRev:    v.etcdRev,
		counterMod: v.counterMod,
		gen:        v.gen,
	}
}

func (v *view) pos() position {
	return position{etcdRev: v.etcdRev, storeRev: v.revision, counterMod: v.counterMod}
}

// errHistory marks what shows that etcd no longer holds the history the
// store applied: its revision, or the store's, went back, or a change
// appeared that does not follow the last one applied. etcd restored from
// a backup does this (its revision goes back, and may climb past the old
// one again before anyone looks), and so does a prefix rewritten around
// the store.
var errHistory = errors.New("etcd's history is not the one applied (was etcd restored from a backup?)")

// position is where a state stands in etcd's history: the etcd revision it
// was read at (or applied up to), its store revision, and the etcd revision
// at which that store revision was committed (0 for none).
type position struct {
	etcdRev, storeRev, counterMod int64
}

// leadsTo reports whether q, found by a quorum read made after p was
// reached (which sees every revision committed before it), can come after
// p in one etcd history. It cannot if etcd's revision or the store
// revision went back, if the same store revision was committed at another
// etcd revision, or if a later store revision was committed at an etcd
// revision that p had already passed without seeing it.
func (p position) leadsTo(q position) bool {
	switch {
	case q.etcdRev < p.etcdRev, q.storeRev < p.storeRev:
		return false
	case q.storeRev == p.storeRev:
		// A cache file written before the mod revision was kept has 0.
		return q.counterMod == p.counterMod || p.counterMod == 0 && p.storeRev > 0
	default:
		return q.counterMod > p.etcdRev
	}
}

func (p position) String() string {
	return fmt.Sprintf("etcd revision %d, store revision %d (committed at etcd revision %d)", p.etcdRev, p.storeRev, p.counterMod)
}

// follows checks that an event of meta/revision continues the view's
// history: within one history every change raises the store revision by
// exactly one and names the etcd revision of the change it follows (which
// its transaction compared), and meta/revision is never deleted.
func (v *view) follows(ev *clientv3.Event) error {
	if ev.Type == clientv3.EventTypeDelete {
		return fmt.Errorf("meta/revision was deleted at etcd revision %d: %w", ev.Kv.ModRevision, errHistory)
	}
	var r revisionRecord
	if json.Unmarshal(ev.Kv.Value, &r) != nil {
		return nil // put reports it
	}
	if r.Revision != v.revision+1 || r.Follows != 0 && r.Follows != v.counterMod {
		return fmt.Errorf("store revision %d, committed at etcd revision %d after the change at %d, does not follow store revision %d committed at %d: %w",
			r.Revision, ev.Kv.ModRevision, r.Follows, v.revision, v.counterMod, errHistory)
	}
	return nil
}

// run is the watch loop: watch from the view's revision, and whenever the
// watch ends (compaction, lost connection, a probe that went unanswered, a
// watch that fell behind), re-read the whole range and watch again from
// there, with backoff while etcd does not answer. v is nil if Open could not
// reach etcd.
func (s *Store) run(v *view) {
	defer s.bg.Done()
	bo := retryDelay{max: s.opts.MaxBackoff}
	// replaced says that the watch ended on evidence that etcd's history
	// was replaced, so that the next resync starts a new epoch.
	replaced := false
	for {
		if v == nil {
			var err error
			v, err = s.connect(s.ctx, true, replaced)
			if s.ctx.Err() != nil {
				return
			}
			if err != nil {
				s.markUnsynced(err)
				s.log.Debug("resync failed", "error", err)
				if !s.sleep(bo.next()) {
					return
				}
				continue
			}
			replaced = false
			s.log.Info("resynced from etcd", "revision", v.revision, "etcd_revision", v.etcdRev)
		}
		started := time.Now()
		err := s.watch(v)
		if s.ctx.Err() != nil {
			return
		}
		replaced = errors.Is(err, errHistory)
		n := s.restarts.Add(1)
		s.log.Warn("watch ended; re-reading the rules", "error", err, "watch_restarts", n)
		v = nil
		// A watch that fails at once (a compaction racing the re-read,
		// a permission problem) must not spin.
		if time.Since(started) < s.opts.MaxBackoff {
			if !s.sleep(bo.next()) {
				return
			}
		} else {
			bo.reset()
		}
	}
}

func (s *Store) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// minStuck is the least time a watch may lag behind a change a probe saw
// before it is abandoned as stuck: long enough for a loaded etcd to create
// a watch and deliver, short enough that a gateway does not serve an old
// state for long.
const minStuck = 2 * time.Second

type probeResult struct {
	// from is where the view stood when the probe was sent; at is what
	// the probe read. known is false if meta/revision did not decode.
	from, at position
	known    bool
	err      error
}

// watch applies the changes under meta/ and rules/ from v.etcdRev+1 on. It
// returns why it stopped; it never returns while all is well.
//
// The etcd client resumes a watch by itself after a broken connection and
// keeps silent while it cannot; a quorum read every ProbeInterval finds
// that silence. The probe also reads the revision of the last store change,
// and a watch that has not delivered a change some probe saw within
// max(2*ProbeInterval, 2s) is abandoned as stuck.
//
// A watch resumed by the client on an etcd restored from a backup waits
// for revisions the restored history has not reached, or, once it has,
// delivers that history's changes as if they followed the view's. The
// probe (whose etcd or store revision went back, or whose change does not
// fit the view's history), a change that does not follow the view's last
// one, and a write that read such a state (Store.resync) each end the
// watch with errHistory.
func (s *Store) watch(v *view) error {
	from := v.etcdRev + 1
	var fake clientv3.WatchChan
	if s.opts.watchHook != nil {
		fake = s.opts.watchHook(from)
	}
	var helpers sync.WaitGroup // the watch creation and the probes
	defer helpers.Wait()
	// WithRequireLeader makes a member cut off from its leader end the
	// watch instead of leaving it silently stale.
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
	defer cancel()
	// Creating a watch waits until the stream to etcd is up, however long
	// that takes; it is done aside so that probing starts at once and an
	// etcd that dies meanwhile is noticed. wch stays nil (never ready)
	// until then.
	created := make(chan clientv3.WatchChan, 1)
	helpers.Go(func() {
		if fake != nil {
			created <- fake
			return
		}
		created <- s.cli.Load().Watch(ctx, s.keys.viewStart, clientv3.WithRange(s.keys.viewEnd), clientv3.WithRev(from))
	})
	var wch clientv3.WatchChan
	tick := time.NewTicker(s.opts.ProbeInterval)
	defer tick.Stop()
	results := make(chan probeResult, 1)
	inflight := false
	// behind is a store change a probe saw that the watch had not
	// delivered yet, first seen at behindAt.
	var behind int64
	var behindAt time.Time
	stuckAfter := max(2*s.opts.ProbeInterval, minStuck)
	for {
		select {
		case <-s.ctx.Done():
			return s.ctx.Err()
		case wch = <-created:
		case resp, ok := <-wch:
			if !ok {
				return errors.New("watch channel closed")
			}
			if err := resp.Err(); err != nil {
				if resp.CompactRevision != 0 {
					return fmt.Errorf("watch from etcd revision %d: compacted up to %d: %w", from, resp.CompactRevision, err)
				}
				return fmt.Errorf("watch from etcd revision %d: %w", from, err)
			}
			switch {
			case resp.Created:
			case resp.IsProgressNotify():
				v.etcdRev = max(v.etcdRev, resp.Header.Revision)
				s.markSynced()
			default:
				if err := s.apply(v, resp.Events); err != nil {
					return err
				}
				s.markSynced()
			}
		case <-s.resync:
			return fmt.Errorf("a write read a state of etcd that does not follow %s: %w", v.pos(), errHistory)
		case <-tick.C:
			if !inflight {
				inflight = true
				from := v.pos()
				helpers.Go(func() { results <- s.probe(ctx, from) })
			}
		case r := <-results:
			inflight = false
			if r.err != nil {
				s.markUnsynced(r.err)
				return fmt.Errorf("probe: %w", r.err)
			}
			if r.known && !r.from.leadsTo(r.at) {
				return fmt.Errorf("probe: etcd is at %s, which does not follow %s: %w", r.at, r.from, errHistory)
			}
			s.markSynced()
			lastChange := r.at.counterMod
			switch {
			case lastChange <= v.etcdRev:
				behind = 0
			case behind == 0 || behind <= v.etcdRev:
				behind, behindAt = lastChange, time.Now()
			case time.Since(behindAt) >= stuckAfter:
				return fmt.Errorf("watch is stuck: etcd has had a store change at revision %d for %v, applied up to %d",
					behind, time.Since(behindAt).Round(time.Millisecond), v.etcdRev)
			}
		}
	}
}

// probe reads meta/revision with a quorum read, sent when the view stood at
// from.
func (s *Store) probe(ctx context.Context, from position) probeResult {
	ctx, cancel := context.WithTimeout(ctx, s.opts.ProbeTimeout)
	defer cancel()
	resp, err := s.cli.Load().Get(ctx, s.keys.revision)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %v: %w", s.opts.ProbeTimeout, err)
		}
		return probeResult{err: err}
	}
	r := probeResult{from: from, at: position{etcdRev: resp.Header.Revision}, known: true}
	if len(resp.Kvs) > 0 {
		var rec revisionRecord
		r.known = json.Unmarshal(resp.Kvs[0].Value, &rec) == nil
		r.at.storeRev, r.at.counterMod = rec.Revision, resp.Kvs[0].ModRevision
	}
	return r
}

// apply applies one watch response: all its events, which etcd never
// splits across responses within one revision, so the result is a state at
// a revision boundary. Then it publishes and notifies. A change of
// meta/revision that does not follow the view's history ends it with an
// error wrapping errHistory, publishing nothing; the view is then useless.
func (s *Store) apply(v *view, events []*clientv3.Event) error {
	before := v.revision
	sawRevision := false
	for _, ev := range events {
		if string(ev.Kv.Key) == s.keys.revision {
			if err := v.follows(ev); err != nil {
				return err
			}
		}
		switch ev.Type {
		case clientv3.EventTypePut:
			if err := v.put(ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision); err != nil {
				s.log.Error("skipping unreadable change", "key", string(ev.Kv.Key), "etcd_revision", ev.Kv.ModRevision, "error", err)
			}
			if string(ev.Kv.Key) == s.keys.revision {
				sawRevision = true
			}
		case clientv3.EventTypeDelete:
			v.del(ev.Kv.Key)
		}
		v.etcdRev = max(v.etcdRev, ev.Kv.ModRevision)
	}
	if sawRevision && !v.at.IsZero() {
		s.lastLag.Store(int64(max(time.Since(v.at), 0)))
	}
	snap := v.snapshot()
	s.publish(snap, v.revision != before)
	if s.cache != nil {
		s.cache.save(snap)
	}
	return nil
}

// retryDelay doubles a wait from 50ms up to max, with jitter so that gateways
// that lost etcd together do not come back in lockstep. The jitter comes
// from the global source: it is not observable in tests.
type retryDelay struct {
	max  time.Duration
	last time.Duration
}

func (b *retryDelay) next() time.Duration {
	b.last = min(max(2*b.last, 50*time.Millisecond), b.max)
	return b.last/2 + rand.N(b.last/2+1)
}

func (b *retryDelay) reset() { b.last = 0 }
