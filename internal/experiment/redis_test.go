package experiment

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/tags/redistest"
)

// TestRedisOutage: while Redis is down events wait in the bounded buffer
// and the oldest beyond it are dropped and counted; results say the store
// is unavailable; once Redis is back the buffer is written.
func TestRedisOutage(t *testing.T) {
	srv := redistest.Start(t)
	r := newRecorder(t, Options{Store: "redis://" + srv.Addr() + "/0", BufferEvents: 50})
	snap := snapshot(t, router.Input{}, checkoutRule)
	r.SetCatalog(NewCatalog(snap, Settings{}))
	for i := range 20 {
		serve(r, snap, "GET", "/shop/", "before-"+strconv.Itoa(i), 200)
	}
	flush(t, r)
	if res := results(t, r, "checkout"); res.Store != "redis" || units(res) != 20 {
		t.Fatalf("before the outage: %d units in %s", units(res), res.Store)
	}
	srv.Stop()
	for i := range 100 {
		serve(r, snap, "GET", "/shop/", "during-"+strconv.Itoa(i), 200)
	}
	flush(t, r)
	if got := r.Dropped(DropStoreUnavailable); got != 50 {
		t.Errorf("dropped %d, want 50 (100 events, a buffer of 50)", got)
	}
	if _, err := r.Results(context.Background(), "checkout"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("results while Redis is down: %v", err)
	}
	srv.Restart() // an empty Redis: what it held before is gone with it
	deadline := time.Now().Add(20 * time.Second)
	for {
		flush(t, r)
		if res, err := r.Results(context.Background(), "checkout"); err == nil && units(res) == 50 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("after Redis came back: %v %v", res, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := r.backlogLen.Load(); n != 0 {
		t.Errorf("%d events still buffered", n)
	}
}

func units(res *Results) int64 {
	var n int64
	for _, g := range res.Groups {
		n += g.Units
	}
	return n
}

// TestRedisNoExposure: with the fleet's Redis store, a conversion whose
// unit is never exposed is dropped when its wait ends and counted
// (no_exposure), as the data-dir store counts it; one whose unit comes
// in time is moved and counts, and is never counted as dropped. A second
// gateway sharing the Redis does not count the same drop again.
func TestRedisNoExposure(t *testing.T) {
	srv := redistest.Start(t)
	clk, ctx := newClock(), context.Background()
	store := "redis://" + srv.Addr() + "/5"
	snap := snapshot(t, router.Input{}, checkoutRule)
	r := newRecorder(t, Options{Store: store, Now: clk.Now})
	r.SetCatalog(NewCatalog(snap, Settings{}))
	other := newRecorder(t, Options{Store: store, Now: clk.Now})
	other.SetCatalog(NewCatalog(snap, Settings{}))
	post := func(units ...string) {
		t.Helper()
		for _, u := range units {
			if _, err := r.PostEvents(ctx, []byte(`{"events":[{"unit":"`+u+`","metric":"signup"}]}`)); err != nil {
				t.Fatal(err)
			}
		}
		flush(t, r)
	}
	post("late", "never", "never")
	// In time: the conversion moves. The request came 1 ms before the
	// event (as a client posts a conversion after the page it got).
	serve(r, snap, "GET", "/shop/", "late", 200)
	flush(t, r)
	clk.Add(pendingTTL - time.Millisecond)
	serve(r, snap, "GET", "/shop/", "someone-else", 200)
	flush(t, r)
	if n := r.Dropped(DropNoExposure); n != 0 {
		t.Fatalf("no_exposure = %d before any wait ended, want 0", n)
	}
	clk.Add(time.Millisecond)
	serve(other, snap, "GET", "/shop/", "someone", 200) // a batch of the experiment, on the other gateway
	flush(t, other)
	if n := other.Dropped(DropNoExposure); n != 2 {
		t.Errorf("no_exposure = %d after the wait of two conversions ended, want 2", n)
	}
	serve(r, snap, "GET", "/shop/", "never", 200) // too late: nothing is left to move
	flush(t, r)
	if n, m := r.Dropped(DropNoExposure), other.Dropped(DropNoExposure); n != 0 || m != 2 {
		t.Errorf("no_exposure = %d and %d after a later batch, want 0 and 2 (counted once, in the fleet)", n, m)
	}
	var signups int64
	for _, g := range results(t, r, "checkout").Groups {
		signups += g.Metrics["signup"].Count
	}
	if signups != 1 {
		t.Errorf("signups = %d, want 1 (late's)", signups)
	}
}

// TestNoExposureWhileIdle: a conversion whose unit is never exposed is
// counted (no_exposure) within a second of the end of its wait even if no
// event of its experiment, or none at all, comes after it, in either
// store.
func TestNoExposureWhileIdle(t *testing.T) {
	for _, store := range []string{"file", "redis"} {
		t.Run(store, func(t *testing.T) {
			clk, ctx := newClock(), context.Background()
			o := Options{Now: clk.Now}
			if store == "redis" {
				o.Store = "redis://" + redistest.Start(t).Addr() + "/6"
			}
			r := newRecorder(t, o)
			r.SetCatalog(NewCatalog(snapshot(t, router.Input{}, checkoutRule), Settings{}))
			if _, err := r.PostEvents(ctx, []byte(`{"events":[{"unit":"never","metric":"signup"},{"unit":"never","metric":"signup"}]}`)); err != nil {
				t.Fatal(err)
			}
			flush(t, r)
			clk.Add(pendingTTL - time.Millisecond)
			flush(t, r)
			if n := r.Dropped(DropNoExposure); n != 0 {
				t.Fatalf("no_exposure = %d before the wait ended, want 0", n)
			}
			clk.Add(time.Second) // idle waits are swept once a second
			flush(t, r)          // no events at all
			if n := r.Dropped(DropNoExposure); n != 2 {
				t.Fatalf("no_exposure = %d a second after the wait ended with no events, want 2", n)
			}
			clk.Add(time.Minute)
			flush(t, r)
			flush(t, r)
			if n := r.Dropped(DropNoExposure); n != 2 {
				t.Fatalf("no_exposure = %d after later sweeps, want 2 (counted once)", n)
			}
		})
	}
}

// TestNoExposureAfterItsGatewayStopped: a conversion parked by a gateway
// that stops before its wait ends is counted (no_exposure) by another
// gateway of the fleet, which sweeps every experiment of its catalog
// every fleetSweepEvery (so within that of the end of the wait, and
// before Redis expires it), even if no batch of the experiment comes. Before,
// only the gateway that parked it swept it, and Redis expired it
// uncounted.
func TestNoExposureAfterItsGatewayStopped(t *testing.T) {
	clk, ctx := newClock(), context.Background()
	store := "redis://" + redistest.Start(t).Addr() + "/7"
	snap := snapshot(t, router.Input{}, checkoutRule)
	open := func() *Recorder {
		r := newRecorder(t, Options{Store: store, Now: clk.Now})
		r.SetCatalog(NewCatalog(snap, Settings{}))
		return r
	}
	other := open() // running all along; its first sweep finds nothing
	flush(t, other)
	r := open()
	if _, err := r.PostEvents(ctx, []byte(`{"events":[{"unit":"never","metric":"signup"}]}`)); err != nil {
		t.Fatal(err)
	}
	flush(t, r)
	if err := r.Close(); err != nil { // stops before the wait ends
		t.Fatal(err)
	}
	clk.Add(pendingTTL - time.Millisecond)
	flush(t, other)
	if n := other.Dropped(DropNoExposure); n != 0 {
		t.Fatalf("no_exposure = %d before the wait ended, want 0", n)
	}
	clk.Add(fleetSweepEvery)
	flush(t, other) // no events at all
	if n := other.Dropped(DropNoExposure); n != 1 {
		t.Fatalf("no_exposure on the other gateway = %d within %s of the end of the stopped one's conversion's wait, want 1", n, fleetSweepEvery)
	}
	clk.Add(fleetSweepEvery)
	flush(t, other)
	if n := other.Dropped(DropNoExposure); n != 1 {
		t.Fatalf("no_exposure = %d after a later sweep, want 1 (counted once)", n)
	}
}
