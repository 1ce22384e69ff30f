package experiment

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Files of the data-dir store, under <data_dir>/experiments.
const (
	lockFile     = "lock"
	snapshotFile = "snapshot"
	journalGlob  = "journal-*"
)

// DefaultCompactBytes is the journal size past which the data-dir store
// writes a new snapshot and starts an empty journal.
const DefaultCompactBytes = 64 << 20

// maxPending bounds the conversions of not (yet) exposed units the store
// parks, and pendingTTL how long one waits for its unit's exposure.
const (
	maxPending = 100_000
	pendingTTL = time.Minute
)

// localStore keeps every experiment's units and values in memory and
// persists them in the data dir: a snapshot and a journal that every
// apply appends to and fsyncs before it returns. It is one process's
// store; a second opener of the directory gets an error.
type localStore struct {
	dir      string
	log      *slog.Logger
	now      func() time.Time
	maxUnits int
	compact  int64
	expired  func(n int)

	mu        sync.Mutex
	lock      *os.File
	exps      map[string]*expState
	units     int
	pending   int
	lastSweep time.Time
	journal   *os.File
	gen       uint64
	size      int64
	buf       []byte
	broken    error // a write that failed; later applies keep trying
}

// expState is one experiment's units and values.
type expState struct {
	id      string
	units   map[uint64]unitRec
	groups  []string
	gidx    map[string]uint16
	metrics []string
	midx    map[string]uint16
	perG    []int64                 // exposed units by group index
	conv    map[unitMetric]struct{} // binomial conversions
	cnt     map[[2]uint16]int64     // converted units by (metric, group)
	vals    map[unitMetric]int64    // mean metric totals in µ-units, non-zero only
	pending map[uint64][]pend
	// phase is the stored phase (JSON, phase.go); first exposures of
	// allocation phAlloc dated at or after phSince (0: none) count in
	// perP, by group index.
	phase   []byte
	phSince int64
	phAlloc uint64
	perP    []int64
}

// unitRec is one exposed unit: 16 bytes, plus its map slot's key.
type unitRec struct {
	ts    int64 // first exposure, Unix ms
	ver   uint32
	group uint16
}

type unitMetric struct {
	unit   uint64
	metric uint16
}

// pend is a conversion parked until its unit's exposure arrives. It is
// journaled (opPark), so a restart keeps it; its wait is measured on the
// wall clock, so time spent down counts.
type pend struct {
	at       int64 // when it was parked, Unix ms
	ts       int64
	metric   string
	binomial bool
	exposes  bool
	value    int64
}

type localOptions struct {
	Dir          string
	MaxUnits     int
	CompactBytes int64
	Logger       *slog.Logger
	Now          func() time.Time
	// Expired is told how many parked conversions expired, their units
	// never exposed (nil: not told); it is called with the store's lock
	// held.
	Expired func(n int)
}

// openLocal opens (creating it if needed) the store in dir and loads its
// snapshot and journals. A torn last frame of a journal, which a crash
// leaves, is cut off; any other damage is an error, so that nothing is
// silently lost.
func openLocal(o localOptions) (*localStore, error) {
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", o.Dir, err)
	}
	lock, err := lockDir(filepath.Join(o.Dir, lockFile))
	if err != nil {
		return nil, err
	}
	s := &localStore{dir: o.Dir, log: o.Logger, now: o.Now, maxUnits: o.MaxUnits, compact: o.CompactBytes, expired: o.Expired, lock: lock, exps: map[string]*expState{}}
	if s.compact <= 0 {
		s.compact = DefaultCompactBytes
	}
	if err := s.load(); err != nil {
		lock.Close()
		return nil, err
	}
	// Conversions whose wait ended while the store was closed expire now;
	// the journal says so, so that the next start neither keeps nor
	// counts them again.
	s.buf = s.buf[:0]
	if s.pending > 0 {
		s.sweep(s.now())
	}
	if s.size > s.compact {
		s.buf = s.buf[:0] // the snapshot holds the sweep
		err = s.compactNow()
	} else if err = s.openJournal(s.gen + 1); err == nil {
		err = s.persist()
	}
	if err != nil {
		lock.Close()
		return nil, err
	}
	return s, nil
}

func (s *localStore) kind() string { return "file" }

// load reads the snapshot and the journals newer than it.
func (s *localStore) load() error {
	path := filepath.Join(s.dir, snapshotFile)
	data, err := os.ReadFile(path)
	var covered uint64
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read %s: %w", path, err)
	default:
		n, trailer, header := int64(0), int64(-1), false
		if _, err := readFrames(data, func(r *record) error {
			switch r.op {
			case opHeader:
				covered, header = uint64(r.value), true
			case opTrailer:
				trailer = r.value
			default:
				n++
				return s.replay(r)
			}
			return nil
		}); err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		if !header || trailer != n {
			return fmt.Errorf("read %s: incomplete snapshot (%d records, trailer %d)", path, n, trailer)
		}
	}
	s.gen = covered
	names, err := filepath.Glob(filepath.Join(s.dir, journalGlob))
	if err != nil {
		return err
	}
	type jf struct {
		gen  uint64
		path string
	}
	var js []jf
	for _, p := range names {
		g, err := strconv.ParseUint(strings.TrimPrefix(filepath.Base(p), "journal-"), 10, 64)
		if err != nil {
			continue
		}
		js = append(js, jf{g, p})
	}
	slices.SortFunc(js, func(a, b jf) int { return cmp.Compare(a.gen, b.gen) })
	for _, j := range js {
		if j.gen <= covered {
			_ = os.Remove(j.path) // held in the snapshot already
			continue
		}
		data, err := os.ReadFile(j.path)
		if err != nil {
			return fmt.Errorf("read %s: %w", j.path, err)
		}
		good, err := readFrames(data, s.replay)
		if errors.Is(err, errTorn) {
			s.log.Warn("experiment journal: dropping a torn last frame (a flush cut short by a crash)", "file", j.path, "bytes", len(data)-good)
			if err := os.Truncate(j.path, int64(good)); err != nil {
				return fmt.Errorf("truncate %s: %w", j.path, err)
			}
		} else if err != nil {
			return fmt.Errorf("read %s: %w; move the file away to start without it", j.path, err)
		}
		s.size += int64(good)
		s.gen = max(s.gen, j.gen)
	}
	return nil
}

// replay applies one persisted record.
func (s *localStore) replay(r *record) error {
	e := s.exp(r.exp)
	switch r.op {
	case opExpose, opExposeP:
		if u, dup := e.units[r.key]; dup {
			if r.ts < u.ts { // an earlier exposure that arrived later
				u.ts = r.ts
				e.units[r.key] = u
			}
			return nil
		}
		g := e.groupIdx(r.group)
		e.units[r.key] = unitRec{ts: r.ts, ver: uint32(min(max(r.ver, 0), 1<<32-1)), group: g}
		e.perG[g]++
		s.units++
		if r.op == opExposeP {
			e.perP[g]++
		}
		// A first exposure moved the unit's parked conversions; the
		// frames after it hold what they counted.
		if ps, ok := e.pending[r.key]; ok {
			delete(e.pending, r.key)
			s.pending -= len(ps)
		}
	case opPark:
		if _, ok := e.units[r.key]; ok {
			return fmt.Errorf("parked conversion of unit %016x that experiment %q exposed", r.key, r.exp)
		}
		if e.pending == nil {
			e.pending = map[uint64][]pend{}
		}
		e.pending[r.key] = append(e.pending[r.key], pend{at: r.at, ts: r.ts, metric: r.metric,
			binomial: r.flags&parkBinomial != 0, exposes: r.flags&parkExposes != 0, value: r.value})
		s.pending++
	case opExpire:
		s.expire(e, r.key, r.ts)
	case opPhase:
		e.setPhase([]byte(r.phase), r.ts, r.key, r.units)
	case opBinomial:
		u, ok := e.units[r.key]
		if !ok {
			return fmt.Errorf("conversion of unit %016x that experiment %q never exposed", r.key, r.exp)
		}
		k := unitMetric{r.key, e.metricIdx(r.metric)}
		if _, dup := e.conv[k]; !dup {
			e.conv[k] = struct{}{}
			e.cnt[[2]uint16{k.metric, u.group}]++
		}
	case opValue:
		if _, ok := e.units[r.key]; !ok {
			return fmt.Errorf("value of unit %016x that experiment %q never exposed", r.key, r.exp)
		}
		k := unitMetric{r.key, e.metricIdx(r.metric)}
		v, ok := addExact(e.vals[k], r.value)
		if !ok {
			return fmt.Errorf("value of unit %016x overflows", r.key)
		}
		e.setVal(k, v)
	default:
		return fmt.Errorf("unexpected record %q", r.op)
	}
	return nil
}

func (s *localStore) exp(id string) *expState {
	e := s.exps[id]
	if e == nil {
		e = &expState{id: id, units: map[uint64]unitRec{}, gidx: map[string]uint16{}, midx: map[string]uint16{},
			conv: map[unitMetric]struct{}{}, cnt: map[[2]uint16]int64{}, vals: map[unitMetric]int64{}}
		s.exps[id] = e
	}
	return e
}

func (e *expState) groupIdx(name string) uint16 {
	if i, ok := e.gidx[name]; ok {
		return i
	}
	i := uint16(len(e.groups))
	e.groups = append(e.groups, name)
	e.gidx[name] = i
	e.perG = append(e.perG, 0)
	e.perP = append(e.perP, 0)
	return i
}

// setPhase makes phase the experiment's, counting from units (by group).
func (e *expState) setPhase(phase []byte, since int64, alloc uint64, units map[string]int64) {
	e.phase, e.phSince, e.phAlloc = phase, since, alloc
	clear(e.perP)
	for g, n := range units {
		e.perP[e.groupIdx(g)] = n
	}
}

// phaseUnits returns the units per group counted in the phase (non-zero).
func (e *expState) phaseUnits() map[string]int64 {
	out := map[string]int64{}
	for i, n := range e.perP {
		if n != 0 {
			out[e.groups[i]] = n
		}
	}
	return out
}

func (e *expState) metricIdx(name string) uint16 {
	if i, ok := e.midx[name]; ok {
		return i
	}
	i := uint16(len(e.metrics))
	e.metrics = append(e.metrics, name)
	e.midx[name] = i
	return i
}

func (e *expState) setVal(k unitMetric, v int64) {
	if v == 0 {
		delete(e.vals, k)
	} else {
		e.vals[k] = v
	}
}

// apply records events and persists what they changed before it returns,
// so that what results show has reached the disk.
func (s *localStore) apply(_ context.Context, events []Event, window int64, st []status) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = s.buf[:0]
	now := s.now()
	for i := range events {
		st[i] = s.applyOne(&events[i], window, now)
	}
	if s.pending > 0 && now.Sub(s.lastSweep) >= time.Second {
		s.sweep(now)
	}
	if err := s.persist(); err != nil {
		return len(events), err
	}
	return len(events), nil
}

// sweepIdle sweeps while no events come (see backend), at most once a
// second, and persists what it dropped.
func (s *localStore) sweepIdle(context.Context, func() []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.pending == 0 || now.Sub(s.lastSweep) < time.Second {
		return nil
	}
	s.buf = s.buf[:0]
	s.sweep(now)
	if len(s.buf) == 0 {
		return nil // nothing ended: nothing to write, nor to fail
	}
	return s.persist()
}

func (s *localStore) applyOne(ev *Event, window int64, now time.Time) status {
	e := s.exp(ev.Experiment)
	key := xxhash.Sum64String(ev.Unit)
	if ev.Kind == Exposure {
		if u, dup := e.units[key]; dup {
			// The first exposure is the earliest: a concurrent request
			// that started earlier may be recorded later. Group and
			// version stay the first recorded.
			if ev.TS < u.ts {
				u.ts = ev.TS
				e.units[key] = u
				s.buf = appendFrame(s.buf, &record{op: opExpose, exp: e.id, key: key, ts: ev.TS, ver: int64(u.ver), group: e.groups[u.group]})
			}
			return stDup
		}
		if s.units >= s.maxUnits {
			return stMaxUnits
		}
		g := e.groupIdx(ev.Group)
		u := unitRec{ts: ev.TS, ver: uint32(min(max(ev.Version, 0), 1<<32-1)), group: g}
		e.units[key] = u
		e.perG[g]++
		s.units++
		op := byte(opExpose)
		if e.phSince > 0 && ev.TS >= e.phSince && ev.Alloc == e.phAlloc {
			e.perP[g]++
			op = opExposeP
		}
		s.buf = appendFrame(s.buf, &record{op: op, exp: e.id, key: key, ts: ev.TS, ver: ev.Version, group: ev.Group})
		if ps, ok := e.pending[key]; ok {
			delete(e.pending, key)
			s.pending -= len(ps)
			for _, p := range ps {
				u = s.convert(e, key, u, p.metric, p.binomial, p.exposes, p.ts, p.value, window)
			}
		}
		return stFresh
	}
	u, ok := e.units[key]
	if !ok {
		if s.pending >= maxPending {
			return stPendFull
		}
		if e.pending == nil {
			e.pending = map[uint64][]pend{}
		}
		p := pend{at: now.UnixMilli(), ts: ev.TS, metric: ev.Metric, binomial: ev.Binomial, exposes: ev.Exposes, value: ev.Value}
		e.pending[key] = append(e.pending[key], p)
		s.pending++
		s.buf = appendFrame(s.buf, p.record(e.id, key))
		return stPending
	}
	return s.convertStatus(e, key, u, ev.Metric, ev.Binomial, ev.Exposes, ev.TS, ev.Value, window)
}

// convert counts one conversion of an exposed unit, inside its window,
// and returns the unit (whose exposure an exposing conversion may move
// earlier).
func (s *localStore) convert(e *expState, key uint64, u unitRec, metric string, binomial, exposes bool, ts, value, window int64) unitRec {
	s.convertStatus(e, key, u, metric, binomial, exposes, ts, value, window)
	return e.units[key]
}

func (s *localStore) convertStatus(e *expState, key uint64, u unitRec, metric string, binomial, exposes bool, ts, value, window int64) status {
	if exposes && ts < u.ts {
		u.ts = ts
		e.units[key] = u
		s.buf = appendFrame(s.buf, &record{op: opExpose, exp: e.id, key: key, ts: ts, ver: int64(u.ver), group: e.groups[u.group]})
	}
	if ts < u.ts || ts-u.ts >= window {
		return stOutside
	}
	k := unitMetric{key, e.metricIdx(metric)}
	if binomial {
		if _, dup := e.conv[k]; dup {
			return stDup
		}
		e.conv[k] = struct{}{}
		e.cnt[[2]uint16{k.metric, u.group}]++
		s.buf = appendFrame(s.buf, &record{op: opBinomial, exp: e.id, key: key, metric: metric})
		return stCounted
	}
	v, ok := addExact(e.vals[k], value)
	if !ok {
		return stOverflow
	}
	e.setVal(k, v)
	s.buf = appendFrame(s.buf, &record{op: opValue, exp: e.id, key: key, metric: metric, value: value})
	return stCounted
}

// record is p as a journal record.
func (p *pend) record(exp string, key uint64) *record {
	var flags uint64
	if p.binomial {
		flags |= parkBinomial
	}
	if p.exposes {
		flags |= parkExposes
	}
	return &record{op: opPark, exp: exp, key: key, at: p.at, ts: p.ts, metric: p.metric, flags: flags, value: p.value}
}

// sweep drops parked conversions that waited pendingTTL: their units were
// never exposed. It journals each unit's expiry and tells s.expired how
// many it dropped.
func (s *localStore) sweep(now time.Time) {
	s.lastSweep = now
	cutoff := now.UnixMilli() - pendingTTL.Milliseconds()
	n := 0
	for _, e := range s.exps {
		for k, ps := range e.pending {
			if !slices.ContainsFunc(ps, func(p pend) bool { return p.at <= cutoff }) {
				continue
			}
			n += s.expire(e, k, cutoff)
			s.buf = appendFrame(s.buf, &record{op: opExpire, exp: e.id, key: k, ts: cutoff})
		}
	}
	if n > 0 && s.expired != nil {
		s.expired(n)
	}
}

// expire drops the unit's conversions parked at or before cutoff (Unix
// ms) and returns how many.
func (s *localStore) expire(e *expState, key uint64, cutoff int64) int {
	ps := e.pending[key]
	keep := slices.DeleteFunc(ps, func(p pend) bool { return p.at <= cutoff })
	n := len(ps) - len(keep)
	s.pending -= n
	if len(keep) == 0 {
		delete(e.pending, key)
	} else {
		e.pending[key] = keep
	}
	return n
}

// persist appends the frames of one apply to the journal and fsyncs it,
// and compacts the journal when it has grown past the bound.
func (s *localStore) persist() error {
	if len(s.buf) == 0 {
		return s.broken
	}
	if err := s.checkLinked(); err != nil {
		s.broken = err
		return err
	}
	if len(s.buf) == 0 {
		s.broken = nil
		return nil // written back: the snapshot holds this apply too
	}
	if s.journal == nil {
		if err := s.openJournal(s.gen + 1); err != nil {
			s.broken = err
			return err
		}
	}
	if _, err := s.journal.Write(s.buf); err != nil {
		s.broken = fmt.Errorf("append to %s: %w", s.journal.Name(), err)
		return s.broken
	}
	if err := s.journal.Sync(); err != nil {
		s.broken = fmt.Errorf("fsync %s: %w", s.journal.Name(), err)
		return s.broken
	}
	s.broken = nil
	s.size += int64(len(s.buf))
	if s.size > s.compact {
		if err := s.compactNow(); err != nil {
			s.log.Error("experiment store: compaction failed; the journal keeps growing", "err", err)
		}
	}
	return nil
}

// checkLinked makes sure that the journal this store appends to is still
// the file at its path, and writes the state back when it is gone, as the
// rule store does (store.FileStore.checkLinked): a data dir removed under
// a running gateway (rm -rf, a /tmp cleaner) would otherwise take every
// exposure and conversion into a deleted file, and the next start would
// find no experiment data at all. The whole state, this apply's included
// (s.buf, which it then empties), is written as a new snapshot, the
// directory and its lock taken again. Another file in the journal's place
// is never overwritten: recording is refused, saying why, until it is
// removed or graygate restarts and reads it. It costs two stat calls per
// flush, next to its fsync.
func (s *localStore) checkLinked() error {
	if s.journal == nil {
		return nil
	}
	name := s.journal.Name()
	open, err := s.journal.Stat()
	if err != nil {
		return nil // the write finds out and says so
	}
	onDisk, err := os.Stat(name)
	switch {
	case err == nil && os.SameFile(open, onDisk):
		return nil
	case err == nil:
		return fmt.Errorf("%s was replaced by another file while graygate was running, so nothing more is recorded: restart graygate to read it, or remove it to have the experiment data written back", name)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("stat %s: %w", name, err)
	}
	gone := fmt.Sprintf("%s was removed while graygate was running", name)
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("%s, and writing the experiment data back failed: %w", gone, err)
	}
	lockPath := filepath.Join(s.dir, lockFile)
	if held, err := s.lock.Stat(); err != nil || !sameFile(held, lockPath) {
		lock, err := lockDir(lockPath)
		if err != nil {
			return fmt.Errorf("%s, and writing the experiment data back failed: %w", gone, err)
		}
		_ = s.lock.Close()
		s.lock = lock
	}
	_ = s.journal.Close()
	s.journal = nil
	if err := s.compactNow(); err != nil {
		return fmt.Errorf("%s, and writing the experiment data back failed: %w", gone, err)
	}
	s.buf = s.buf[:0]
	s.log.Error("the experiment journal was removed while graygate was running (was the data dir deleted?); wrote the experiment data back from memory", "dir", s.dir)
	return nil
}

// sameFile reports whether path names the file fi describes.
func sameFile(fi os.FileInfo, path string) bool {
	pi, err := os.Stat(path)
	return err == nil && os.SameFile(fi, pi)
}

func (s *localStore) openJournal(gen uint64) error {
	path := filepath.Join(s.dir, fmt.Sprintf("journal-%016d", gen))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	if err := syncDir(s.dir); err != nil {
		f.Close()
		return err
	}
	s.journal, s.gen = f, gen
	return nil
}

// compactNow writes the whole state as a snapshot that covers every
// journal so far, then starts a new journal and removes the old ones. A
// crash at any point leaves either the old snapshot and journals or the
// new snapshot (which says which journals it holds), never both counted.
func (s *localStore) compactNow() error {
	covered := s.gen
	tmp := filepath.Join(s.dir, snapshotFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	var b []byte
	written := int64(0)
	b = appendFrame(b, &record{op: opHeader, value: int64(covered)})
	flush := func() error {
		if len(b) < 1<<20 {
			return nil
		}
		_, err := f.Write(b)
		b = b[:0]
		return err
	}
	var werr error
	ids := make([]string, 0, len(s.exps))
	for id := range s.exps {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		e := s.exps[id]
		for k, u := range e.units {
			b = appendFrame(b, &record{op: opExpose, exp: id, key: k, ts: u.ts, ver: int64(u.ver), group: e.groups[u.group]})
			written++
			werr = cmp.Or(werr, flush())
		}
		for k := range e.conv {
			b = appendFrame(b, &record{op: opBinomial, exp: id, key: k.unit, metric: e.metrics[k.metric]})
			written++
			werr = cmp.Or(werr, flush())
		}
		for k, v := range e.vals {
			b = appendFrame(b, &record{op: opValue, exp: id, key: k.unit, metric: e.metrics[k.metric], value: v})
			written++
			werr = cmp.Or(werr, flush())
		}
		if e.phase != nil {
			b = appendFrame(b, &record{op: opPhase, exp: id, phase: string(e.phase), ts: e.phSince, key: e.phAlloc, units: e.phaseUnits()})
			written++
			werr = cmp.Or(werr, flush())
		}
		for k, ps := range e.pending {
			for i := range ps {
				b = appendFrame(b, ps[i].record(id, k))
				written++
				werr = cmp.Or(werr, flush())
			}
		}
	}
	b = appendFrame(b, &record{op: opTrailer, value: written})
	if werr == nil {
		_, werr = f.Write(b)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, filepath.Join(s.dir, snapshotFile))
	}
	if werr == nil {
		werr = syncDir(s.dir)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write the experiment snapshot: %w", werr)
	}
	if s.journal != nil {
		_ = s.journal.Close()
		s.journal = nil
	}
	names, _ := filepath.Glob(filepath.Join(s.dir, journalGlob))
	for _, p := range names {
		if g, err := strconv.ParseUint(strings.TrimPrefix(filepath.Base(p), "journal-"), 10, 64); err == nil && g <= covered {
			_ = os.Remove(p)
		}
	}
	s.size = 0
	s.compact = max(s.compact, written*48)
	return s.openJournal(covered + 1)
}

func (s *localStore) counts(_ context.Context, exp string) (counts, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := counts{units: map[string]int64{}, converted: map[metricGroup]int64{}}
	e := s.exps[exp]
	if e == nil {
		return c, nil
	}
	for i, n := range e.perG {
		c.units[e.groups[i]] = n
	}
	for k, n := range e.cnt {
		c.converted[metricGroup{e.metrics[k[0]], e.groups[k[1]]}] = n
	}
	c.phase, c.phaseUnits = bytes.Clone(e.phase), e.phaseUnits()
	return c, nil
}

// setPhase replaces the experiment's phase if it is still old and
// persists it before it returns.
func (s *localStore) setPhase(_ context.Context, exp string, old, next []byte, since int64, alloc uint64, reset bool) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.exp(exp)
	if !bytes.Equal(e.phase, old) {
		return false, nil
	}
	units := e.phaseUnits()
	if !reset {
		since, alloc = e.phSince, e.phAlloc
	} else {
		units = nil
	}
	frame := appendFrame(nil, &record{op: opPhase, exp: exp, phase: string(next), ts: since, key: alloc, units: units})
	if len(frame)-frameHeader > maxFrame {
		return false, fmt.Errorf("the phase of experiment %q is %d bytes, over %d", exp, len(frame), maxFrame)
	}
	e.setPhase(bytes.Clone(next), since, alloc, units)
	s.buf = append(s.buf[:0], frame...)
	if err := s.persist(); err != nil {
		return true, err
	}
	return true, nil
}

func (s *localStore) values(_ context.Context, exp, metric string, fn func(group string, total int64)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.exps[exp]
	if e == nil {
		return nil
	}
	mi, ok := e.midx[metric]
	if !ok {
		return nil
	}
	for k, v := range e.vals {
		if k.metric == mi {
			fn(e.groups[e.units[k.unit].group], v)
		}
	}
	return nil
}

func (s *localStore) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.journal != nil {
		err = s.journal.Close()
		s.journal = nil
	}
	if s.lock != nil {
		err = cmp.Or(err, s.lock.Close())
		s.lock = nil
	}
	return err
}

// syncDir fsyncs a directory so that a created or renamed file in it
// survives a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
