package experiment

import (
	"context"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/tags/redistest"
)

const window = int64(72 * time.Hour / time.Millisecond)

// storeCase is one event and what the store must say about it.
type storeCase struct {
	ev   Event
	want status
}

func expose(unit, group string, ts int64) Event {
	return Event{Kind: Exposure, Experiment: "e:1", Unit: unit, Group: group, TS: ts, Version: 3}
}

func conv(unit, metric string, binomial bool, ts, value int64) Event {
	return Event{Kind: Conversion, Experiment: "e:1", Unit: unit, Metric: metric, Binomial: binomial, TS: ts, Value: value}
}

// scenario is the contract every store meets: first exposure wins and
// keeps its group, conversions count inside [exposure, exposure+window),
// the earliest exposure time counts (group and version are the first
// recorded), a binomial unit converts once, a mean unit's total is the exact sum of
// its values, a conversion that comes before its unit's exposure waits
// for it, and a total that would overflow is refused.
var scenario = []storeCase{
	{expose("u1", "A", 1000), stFresh},
	{expose("u1", "B", 900), stDup},
	{conv("u1", "p", true, 500, 1), stOutside},
	{conv("u1", "p", true, 950, 1), stCounted}, // the earlier exposure at 900 counts
	{conv("u1", "p", true, 1600, 1), stDup},
	{conv("u1", "r", false, 1500, 2_500_000), stCounted},
	{conv("u1", "r", false, 1600, 1_000_001), stCounted},
	{conv("u1", "r", false, 1000+window, 7), stOutside},
	{conv("u2", "r", false, 3000, 5_000_000), stPending},
	{conv("u2", "p", true, 3000, 1), stPending},
	{expose("u2", "B", 2500), stFresh},
	{conv("u3", "p", true, 100, 1), stPending},
	{expose("u3", "B", 200), stFresh},
	{conv("u3", "r", false, 300, -4_000_000), stCounted},
	{conv("u3", "r", false, 301, 4_000_000), stCounted}, // back to 0: no longer a non-zero unit
	{expose("用户 4", "holdout", 10), stFresh},
	{conv("用户 4", "r", false, 11, math.MaxInt64-5), stCounted},
	{conv("用户 4", "r", false, 12, 10), stOverflow},
	{Event{Kind: Exposure, Experiment: "other", Unit: "u1", Group: "A", TS: 1}, stFresh},
	// A request that exposed u5 at 1500 and converted finished after a
	// concurrent one that started at 2000: its conversion counts, and so
	// does a later one at 1600.
	{expose("u5", "A", 2000), stFresh},
	{Event{Kind: Conversion, Experiment: "e:1", Unit: "u5", Metric: "p", Binomial: true, TS: 1500, Value: 1, Exposes: true}, stCounted},
	{conv("u5", "r", false, 1600, 1_000_000), stCounted},
	// The same before the exposure is recorded at all: parked, then moved.
	{Event{Kind: Conversion, Experiment: "e:1", Unit: "u6", Metric: "r", TS: 700, Value: 2_000_000, Exposes: true}, stPending},
	{conv("u6", "r", false, 800, 1_000_000), stPending},
	{expose("u6", "B", 900), stFresh},
}

func runScenario(t *testing.T, s backend) {
	t.Helper()
	ctx := context.Background()
	events := make([]Event, len(scenario))
	for i, c := range scenario {
		events[i] = c.ev
	}
	// Apply in two calls, as two flushes would.
	st := make([]status, len(events))
	for _, part := range [][2]int{{0, 9}, {9, 22}, {22, len(events)}} {
		n, err := s.apply(ctx, events[part[0]:part[1]], window, st[part[0]:part[1]])
		if err != nil || n != part[1]-part[0] {
			t.Fatalf("apply = %d, %v", n, err)
		}
	}
	for i, c := range scenario {
		if st[i] != c.want {
			t.Errorf("event %d %+v: status %d, want %d", i, c.ev, st[i], c.want)
		}
	}
	checkScenarioCounts(t, s)
}

func checkScenarioCounts(t *testing.T, s backend) {
	t.Helper()
	ctx := context.Background()
	c, err := s.counts(ctx, "e:1")
	if err != nil {
		t.Fatal(err)
	}
	if c.units["A"] != 2 || c.units["B"] != 3 || c.units["holdout"] != 1 || len(c.units) != 3 {
		t.Errorf("units = %v, want A 2, B 3, holdout 1", c.units)
	}
	if c.converted[metricGroup{"p", "A"}] != 2 || c.converted[metricGroup{"p", "B"}] != 1 || len(c.converted) != 2 {
		t.Errorf("converted = %v, want p: A 2, B 1 (u3's conversion came before its exposure)", c.converted)
	}
	got := map[string]int64{}
	if err := s.values(ctx, "e:1", "r", func(g string, v int64) { got[g] += v }); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"A": 4_500_001, "B": 8_000_000, "holdout": math.MaxInt64 - 5}
	if len(got) != len(want) || got["A"] != want["A"] || got["B"] != want["B"] || got["holdout"] != want["holdout"] {
		t.Errorf("values = %v, want %v", got, want)
	}
	if o, _ := s.counts(ctx, "other"); o.units["A"] != 1 {
		t.Errorf("another experiment with the same unit: %v", o.units)
	}
	if o, _ := s.counts(ctx, "nothing"); len(o.units) != 0 {
		t.Errorf("an unknown experiment: %v", o.units)
	}
}

func openTestLocal(t *testing.T, dir string, o localOptions) *localStore {
	t.Helper()
	o.Dir = dir
	o.MaxUnits = max(o.MaxUnits, 1)
	if o.MaxUnits == 1 {
		o.MaxUnits = 1000
	}
	o.Logger = slog.New(slog.DiscardHandler)
	if o.Now == nil {
		o.Now = time.Now
	}
	s, err := openLocal(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestLocalStore(t *testing.T) {
	dir := t.TempDir()
	s := openTestLocal(t, dir, localOptions{})
	runScenario(t, s)
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	// Everything applied was fsynced: a reopened store counts the same.
	s = openTestLocal(t, dir, localOptions{})
	checkScenarioCounts(t, s)
	// A repeated exposure after the restart is still a repeat.
	st := make([]status, 1)
	if _, err := s.apply(context.Background(), []Event{expose("u1", "B", 5)}, window, st); err != nil || st[0] != stDup {
		t.Errorf("exposure after restart: %v %v", st[0], err)
	}
	s.close()
}

func TestLocalStoreIsLocked(t *testing.T) {
	dir := t.TempDir()
	s := openTestLocal(t, dir, localOptions{})
	defer s.close()
	if _, err := openLocal(localOptions{Dir: dir, MaxUnits: 10, Logger: slog.New(slog.DiscardHandler), Now: time.Now}); err == nil || !strings.Contains(err.Error(), "another graygate process holds this experiment store") {
		t.Errorf("second open: %v", err)
	}
}

func TestLocalStoreCompaction(t *testing.T) {
	dir := t.TempDir()
	s := openTestLocal(t, dir, localOptions{CompactBytes: 600})
	runScenario(t, s)
	// Many more flushes, each compacting once the journal passes 600 bytes.
	for i := range 50 {
		st := make([]status, 2)
		evs := []Event{expose("x"+string(rune('a'+i)), "A", 5000), conv("x"+string(rune('a'+i)), "r", false, 5001, 1_000_000)}
		if _, err := s.apply(context.Background(), evs, window, st); err != nil {
			t.Fatal(err)
		}
	}
	s.close()
	names, _ := filepath.Glob(filepath.Join(dir, "journal-*"))
	if _, err := os.Stat(filepath.Join(dir, snapshotFile)); err != nil || len(names) > 2 {
		t.Fatalf("after compaction: snapshot %v, journals %v", err, names)
	}
	s = openTestLocal(t, dir, localOptions{CompactBytes: 600})
	defer s.close()
	c, _ := s.counts(context.Background(), "e:1")
	if c.units["A"] != 52 || c.units["B"] != 3 {
		t.Errorf("units after compaction and reopen = %v, want A 52, B 3", c.units)
	}
	got := map[string]int64{}
	s.values(context.Background(), "e:1", "r", func(g string, v int64) { got[g] += v })
	if got["A"] != 4_500_001+50_000_000 {
		t.Errorf("revenue of A after compaction = %d", got["A"])
	}
}

// TestLocalStoreTornTail: a flush cut short by a crash leaves part of a
// frame; reopening drops exactly that flush and keeps the rest.
func TestLocalStoreTornTail(t *testing.T) {
	dir := t.TempDir()
	s := openTestLocal(t, dir, localOptions{})
	runScenario(t, s)
	st := make([]status, 1)
	s.apply(context.Background(), []Event{expose("late", "A", 9)}, window, st)
	journal := s.journal.Name()
	s.close()
	data, _ := os.ReadFile(journal)
	if err := os.WriteFile(journal, data[:len(data)-3], 0o644); err != nil {
		t.Fatal(err)
	}
	s = openTestLocal(t, dir, localOptions{})
	checkScenarioCounts(t, s)
	s.close()
	// Damage in the middle of a journal is refused, not skipped.
	data[20] ^= 0xff
	os.WriteFile(journal, data, 0o644)
	if _, err := openLocal(localOptions{Dir: dir, MaxUnits: 10, Logger: slog.New(slog.DiscardHandler), Now: time.Now}); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Errorf("corrupt journal: %v", err)
	}
}

func TestLocalStoreMaxUnits(t *testing.T) {
	s := openTestLocal(t, t.TempDir(), localOptions{MaxUnits: 2})
	defer s.close()
	evs := []Event{expose("a", "A", 1), expose("b", "A", 1), expose("c", "A", 1), expose("a", "A", 2)}
	st := make([]status, len(evs))
	s.apply(context.Background(), evs, window, st)
	if want := []status{stFresh, stFresh, stMaxUnits, stDup}; !slices.Equal(st, want) {
		t.Errorf("statuses = %v, want %v", st, want)
	}
}

func TestRedisStore(t *testing.T) {
	srv := redistest.Start(t)
	s, err := openRedis("redis://"+srv.Addr()+"/3", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	runScenario(t, s)
	// A batch whose reply was lost is sent again under its id: it is not
	// counted twice.
	ctx := context.Background()
	args := []any{window, 60, prefix("e:1"), "replayed-1", time.Now().UnixMilli(), 600, "m", "u1", "r", int64(2000), int64(10), ""}
	var replies [][]int64
	for range 2 {
		codes, err := s.script.Run(ctx, s.c, nil, args...).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		replies = append(replies, codes)
	}
	if !slices.Equal(replies[0], replies[1]) || len(replies[0]) != 2 {
		t.Errorf("a replayed batch got %v, then %v; want the same reply (one code and the expired count)", replies[0], replies[1])
	}
	got := map[string]int64{}
	s.values(ctx, "e:1", "r", func(g string, v int64) { got[g] += v })
	if got["A"] != 4_500_011 {
		t.Errorf("a replayed batch: revenue of A = %d, want 4500011 (counted once)", got["A"])
	}
}

// TestLocalStoreParkedSurvivesRestart: a conversion parked for its unit's
// exposure is in the journal (or the snapshot), so a store closed and
// reopened in between still counts it when the exposure comes; once
// moved, it is not parked again by a later reopen.
func TestLocalStoreParkedSurvivesRestart(t *testing.T) {
	tests := []struct {
		name    string
		compact bool // write a snapshot before closing
	}{
		{"journal", false},
		{"snapshot", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, clk, ctx := t.TempDir(), newClock(), context.Background()
			o := localOptions{Now: clk.Now, Expired: func(n int) { t.Errorf("%d parked conversions expired, want none", n) }}
			s := openTestLocal(t, dir, o)
			evs := []Event{
				conv("p1", "p", true, 1300, 1),
				{Kind: Conversion, Experiment: "e:1", Unit: "p1", Metric: "r", TS: 1100, Value: 2_000_000, Exposes: true},
			}
			st := make([]status, len(evs))
			if _, err := s.apply(ctx, evs, window, st); err != nil || st[0] != stPending || st[1] != stPending {
				t.Fatalf("apply = %v, %v; want both parked", st, err)
			}
			if tt.compact {
				s.mu.Lock()
				err := s.compactNow()
				s.mu.Unlock()
				if err != nil {
					t.Fatal(err)
				}
			}
			s.close()
			clk.Add(10 * time.Second)
			s = openTestLocal(t, dir, o)
			if s.pending != 2 {
				t.Fatalf("after reopening, %d conversions parked, want 2", s.pending)
			}
			st = st[:1]
			if _, err := s.apply(ctx, []Event{expose("p1", "A", 1200)}, window, st); err != nil || st[0] != stFresh {
				t.Fatalf("expose = %v, %v", st[0], err)
			}
			check := func(when string) {
				t.Helper()
				c, _ := s.counts(ctx, "e:1")
				if c.converted[metricGroup{"p", "A"}] != 1 {
					t.Errorf("%s: converted = %v, want p: A 1 (the parked conversion, exposure moved to 1100)", when, c.converted)
				}
				got := map[string]int64{}
				s.values(ctx, "e:1", "r", func(g string, v int64) { got[g] += v })
				if got["A"] != 2_000_000 {
					t.Errorf("%s: values = %v, want A 2000000", when, got)
				}
				if s.pending != 0 {
					t.Errorf("%s: %d conversions still parked, want 0", when, s.pending)
				}
			}
			check("after the exposure")
			s.close()
			s = openTestLocal(t, dir, o)
			defer s.close()
			check("reopened after the exposure")
		})
	}
}

// TestLocalStoreParkedExpiry: a parked conversion whose unit is not
// exposed within pendingTTL is dropped and counted once: while the store
// runs, or at its next open when the wait ended while it was closed; a
// later reopen counts it no more, and the unit's exposure no longer
// converts it.
func TestLocalStoreParkedExpiry(t *testing.T) {
	dir, clk, ctx := t.TempDir(), newClock(), context.Background()
	expired := 0
	o := localOptions{Now: clk.Now, Expired: func(n int) { expired += n }}
	apply := func(s *localStore, evs ...Event) []status {
		t.Helper()
		st := make([]status, len(evs))
		if _, err := s.apply(ctx, evs, window, st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	s := openTestLocal(t, dir, o)
	if st := apply(s, conv("gone", "p", true, 1000, 1)); st[0] != stPending {
		t.Fatalf("status %v, want parked", st[0])
	}
	clk.Add(pendingTTL - time.Second)
	apply(s, expose("other1", "A", 1))
	if expired != 0 || s.pending != 1 {
		t.Fatalf("before its wait ended: expired %d, parked %d; want 0, 1", expired, s.pending)
	}
	clk.Add(time.Second)
	apply(s, expose("other2", "A", 1))
	if expired != 1 || s.pending != 0 {
		t.Fatalf("once its wait ended: expired %d, parked %d; want 1, 0", expired, s.pending)
	}
	s.close()
	s = openTestLocal(t, dir, o)
	if expired != 1 || s.pending != 0 {
		t.Fatalf("reopened: expired %d, parked %d; want 1, 0 (counted once)", expired, s.pending)
	}

	// Its wait ends while the store is closed.
	if st := apply(s, conv("late", "p", true, 1000, 1)); st[0] != stPending {
		t.Fatalf("status %v, want parked", st[0])
	}
	s.close()
	clk.Add(2 * pendingTTL)
	s = openTestLocal(t, dir, o)
	if expired != 2 || s.pending != 0 {
		t.Fatalf("reopened after its wait: expired %d, parked %d; want 2, 0", expired, s.pending)
	}
	s.close()
	s = openTestLocal(t, dir, o)
	defer s.close()
	if expired != 2 || s.pending != 0 {
		t.Fatalf("reopened again: expired %d, parked %d; want 2, 0 (counted once)", expired, s.pending)
	}
	apply(s, expose("late", "A", 900), expose("gone", "A", 900))
	if c, _ := s.counts(ctx, "e:1"); len(c.converted) != 0 {
		t.Errorf("converted = %v, want none: the parked conversions expired", c.converted)
	}
}

// TestLocalStoreRemovedDirIsWrittenBack: the data dir removed under a
// running store (rm -rf, a /tmp cleaner) took every later exposure and
// conversion into a deleted journal, and the next start found nothing.
// The next flush now writes the whole state back, counted once, and
// what follows is kept; another file put in the journal's place is not
// overwritten.
func TestLocalStoreRemovedDirIsWrittenBack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "experiments")
	s := openTestLocal(t, dir, localOptions{})
	runScenario(t, s)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	st := make([]status, 2)
	if _, err := s.apply(context.Background(), []Event{expose("late", "A", 6000), conv("late", "r", false, 6001, 2_000_000)}, window, st); err != nil {
		t.Fatalf("apply after the dir was removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, snapshotFile)); err != nil {
		t.Fatalf("nothing written back: %v", err)
	}
	// Another process cannot take the store over while this one runs.
	if _, err := openLocal(localOptions{Dir: dir, MaxUnits: 10, Logger: slog.New(slog.DiscardHandler), Now: time.Now}); err == nil {
		t.Error("the written-back store is not locked")
	}
	s.close()
	s = openTestLocal(t, dir, localOptions{})
	checkScenarioCountsPlus(t, s, 1, 2_000_000)
	s.close()

	// A file that took the journal's place is kept, and recording stops.
	s = openTestLocal(t, dir, localOptions{})
	defer s.close()
	journal := s.journal.Name()
	if err := os.Remove(journal); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(journal, []byte("someone's backup"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.apply(context.Background(), []Event{expose("later", "A", 7000)}, window, make([]status, 1)); err == nil || !strings.Contains(err.Error(), "replaced by another file") {
		t.Errorf("apply over a replaced journal: %v, want a refusal saying it was replaced", err)
	}
	if b, _ := os.ReadFile(journal); string(b) != "someone's backup" {
		t.Errorf("the file in the journal's place was overwritten: %q", b)
	}
}

// checkScenarioCountsPlus is checkScenarioCounts' unit count of A and
// revenue of A with extra more of each.
func checkScenarioCountsPlus(t *testing.T, s backend, units, revenue int64) {
	t.Helper()
	ctx := context.Background()
	base := openTestLocal(t, t.TempDir(), localOptions{})
	defer base.close()
	runScenario(t, base)
	want, _ := base.counts(ctx, "e:1")
	got, _ := s.counts(ctx, "e:1")
	if got.units["A"] != want.units["A"]+units || got.units["B"] != want.units["B"] {
		t.Errorf("units = %v, want %v with A + %d", got.units, want.units, units)
	}
	sum := func(b backend) int64 {
		var n int64
		_ = b.values(ctx, "e:1", "r", func(g string, v int64) {
			if g == "A" {
				n += v
			}
		})
		return n
	}
	if g, w := sum(s), sum(base); g != w+revenue {
		t.Errorf("revenue of A = %d, want %d + %d", g, w, revenue)
	}
}
