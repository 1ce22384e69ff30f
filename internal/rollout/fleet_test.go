package rollout

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/traffic"
	"github.com/graygate/graygate/internal/upstream"
)

// TestPublishedSize measures what a gateway writes to etcd per rule under
// rollout every publish period (README: the etcd cost of a fleet): its
// running totals after 200 s of gray and stable traffic with latencies
// spread from 1 to 80 ms, added up the way the publisher does.
func TestPublishedSize(t *testing.T) {
	clk := newFakeClock()
	rec, err := NewRecorder(clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	rec.watchRules(map[string]string{"canary": "stable"})
	stable, gray := upstream.NewPool("stable", nil), upstream.NewPool("gray", nil)
	rng := rand.New(rand.NewPCG(1, 2))
	tot := &totals{since: clk.Now(), counts: map[string]traffic.Counts{}, end: rec.export("canary", time.Second).End}
	var want uint64
	for s := 1; s <= 200; s++ {
		for range 50 {
			lat := time.Duration(1+rng.IntN(80)) * time.Millisecond
			rec.Record(&router.Decision{Rule: "canary", Group: router.GroupGray, Target: gray}, 200, lat)
			rec.Record(&router.Decision{Rule: "", Group: router.GroupDefault, Target: stable}, 200, lat)
			want++
		}
		clk.Advance(time.Second)
		if s%2 == 0 {
			tot.add(rec.export("canary", 7*time.Second))
		}
	}
	if got := tot.counts[GroupGray].Requests; got != want {
		t.Errorf("totals count %d gray requests, %d were recorded", got, want)
	}
	b, _ := json.Marshal(published{Gateway: "gw-host-12345-0a1b2c3d", Boot: "gw-host-12345-0a1b2c3d@mx0x1e6v", Since: tot.since, At: clk.Now(), Counts: tot.counts, End: tot.end,
		Breaker: BreakerState{LastOpen: clk.Now(), Reason: "error rate 34% > 20% over 30s (41 of 120 requests)"}})
	t.Logf("a gateway publishes %d bytes per rule under rollout per period", len(b))
	if len(b) > 1024 {
		t.Errorf("%d bytes per write", len(b))
	}
}

// TestWindowOf sums what the gateways' totals grew by between two
// readings: restarted gateways count from their new boot, gateways the
// old reading missed are left out.
func TestWindowOf(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	c := func(req, errs uint64, lat ...uint64) map[string]traffic.Counts {
		return map[string]traffic.Counts{GroupGray: {Requests: req, Errors: errs, Latency: lat}}
	}
	doc := func(gw, boot string, since time.Time, counts map[string]traffic.Counts) published {
		return published{Gateway: gw, Boot: boot, Since: since, Counts: counts}
	}
	docs := func(ps ...published) map[string]published {
		m := map[string]published{}
		for _, p := range ps {
			m[p.id()] = p
		}
		return m
	}
	old := reading{at: t0, docs: docs(
		doc("a", "1", t0.Add(-time.Hour), c(1000, 10, 500, 500)),
		doc("b", "1", t0.Add(-time.Hour), c(2000, 0, 2000)),
	)}
	cur := reading{at: t0.Add(30 * time.Second), docs: docs(
		doc("a", "1", t0.Add(-time.Hour), c(1300, 40, 600, 700)), // +300, +30 errors
		doc("b", "2", t0.Add(10*time.Second), c(100, 0, 100)),    // restarted within the window: all 100
		doc("c", "1", t0.Add(-time.Hour), c(5000, 5000, 5000)),   // not in the old reading: left out
	)}
	st := windowOf(old, cur, GroupGray)
	if st.Requests != 400 || st.Errors != 30 || st.Seconds != 30 || st.ErrorRate != 30.0/400 {
		t.Errorf("window = %+v", st)
	}
	if got := st.Counts.Latency; len(got) != 2 || got[0] != 200 || got[1] != 200 {
		t.Errorf("latency = %v", got)
	}
	if st := windowOf(old, cur, GroupStable); st.Requests != 0 {
		t.Errorf("stable window = %+v", st)
	}
}
