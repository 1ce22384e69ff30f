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
