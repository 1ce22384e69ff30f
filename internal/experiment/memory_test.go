package experiment

import (
	"context"
	"runtime"
	"strconv"
	"testing"
)

// TestMemoryPerUnit measures what the data-dir store holds per exposed
// unit and per unit with a mean value (the README and the package doc
// state these bounds).
func TestMemoryPerUnit(t *testing.T) {
	const units = 1_000_000
	s := openTestLocal(t, t.TempDir(), localOptions{MaxUnits: units})
	defer s.close()
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	ids := make([]string, units)
	for i := range ids {
		ids[i] = "user-" + strconv.Itoa(i)
	}
	before := heap()
	batch := make([]Event, 0, 10_000)
	st := make([]status, 10_000)
	apply := func() {
		if _, err := s.apply(context.Background(), batch, window, st); err != nil {
			t.Fatal(err)
		}
		batch = batch[:0]
	}
	for _, u := range ids {
		batch = append(batch, Event{Kind: Exposure, Experiment: "e", Unit: u, Group: "A", TS: 1})
		if len(batch) == cap(batch) {
			apply()
		}
	}
	apply()
	exposed := heap()
	perUnit := float64(exposed-before) / units
	for _, u := range ids[:units/10] {
		batch = append(batch, Event{Kind: Conversion, Experiment: "e", Unit: u, Metric: "revenue", TS: 2, Value: 12_340_000},
			Event{Kind: Conversion, Experiment: "e", Unit: u, Metric: "purchase", Binomial: true, TS: 2, Value: 1})
		if len(batch) >= cap(batch)-1 {
			apply()
		}
	}
	apply()
	perConverter := float64(heap()-exposed) / (units / 10)
	t.Logf("data-dir store: %.1f bytes per exposed unit; %.1f more per unit with a mean value and a binomial conversion", perUnit, perConverter)
	if perUnit > 72 {
		t.Errorf("%.1f bytes per exposed unit, over the 72 the README states", perUnit)
	}
	if perConverter > 128 {
		t.Errorf("%.1f bytes per converted unit, over the 128 the README states", perConverter)
	}
	runtime.KeepAlive(ids)
}
