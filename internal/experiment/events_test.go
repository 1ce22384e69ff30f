package experiment

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/tags/redistest"
	"github.com/graygate/graygate/internal/testproc"
)

// TestBinomialTinyValues: a binomial metric converts on any value but 0,
// however small, posted or reported in a response header; values that
// round to 0 µ-units are no exception.
func TestBinomialTinyValues(t *testing.T) {
	const js = `{"key":"tiny","type":"ab","experiment_id":"exp_tiny","conditions":{"path_prefix":["/shop/"]},
	"groups":[{"name":"A","weight":50,"target":"a"},{"name":"B","weight":50,"target":"b"}],
	"metrics":[{"name":"signup","type":"binomial"},{"name":"paid","type":"binomial","from_header":"X-Paid"},{"name":"amount","type":"mean"}]}`
	r := newRecorder(t, Options{})
	snap := snapshot(t, router.Input{}, js)
	r.SetCatalog(NewCatalog(snap, Settings{}))
	units := []string{"t1", "t2", "t3", "t4", "t5", "t6"}
	for _, u := range units {
		serve(r, snap, "GET", "/shop/", u, 200)
	}
	// Reported in the response header of a request the rule claimed.
	serve(r, snap, "GET", "/shop/pay", "t1", 200, "0.0000001")
	serve(r, snap, "GET", "/shop/pay", "t2", 200, "1e-9")
	serve(r, snap, "GET", "/shop/pay", "t3", 200, "0.000000")
	res, err := r.PostEvents(context.Background(), []byte(`{"events":[
	  {"unit":"t4","metric":"signup","value":1e-7},
	  {"unit":"t5","metric":"signup","value":-4e-10},
	  {"unit":"t6","metric":"signup","value":0},
	  {"unit":"t6","metric":"amount","value":1e-7}]}`))
	if err != nil || res.Accepted != 4 || res.Conversions != 2 {
		t.Fatalf("PostEvents = %+v, %v; want 4 accepted, 2 conversions (t4, t5)", res, err)
	}
	flush(t, r)
	out := results(t, r, "tiny")
	count := func(metric string) (n int64) {
		for _, g := range out.Groups {
			n += g.Metrics[metric].Count
		}
		return n
	}
	if got := count("signup"); got != 2 {
		t.Errorf("signups = %d, want 2: 1e-7 and -4e-10 convert, 0 does not", got)
	}
	if got := count("paid"); got != 2 {
		t.Errorf("paid = %d, want 2: \"0.0000001\" and \"1e-9\" convert, \"0.000000\" does not", got)
	}
	if got := count("amount"); got != 0 {
		t.Errorf("amount units = %d, want 0: 1e-7 adds nothing at µ-unit precision", got)
	}
}

// redisPID returns the process id of the redis-server at addr.
func redisPID(t *testing.T, addr string) int {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
	}
	t.Fatalf("no process_id in INFO server:\n%s", info)
	return 0
}

// TestPostEventsRedisHung: with Redis hung (SIGSTOP: connections open,
// no answer), a POST of events is answered promptly once its events are
// buffered, never after Redis's timeouts; when the buffer is full, at
// once with a BusyError that says why and when to retry, recording
// nothing. Once Redis answers again the buffered events are written, in
// order after the exposures queued before them.
func TestPostEventsRedisHung(t *testing.T) {
	srv := redistest.Start(t)
	pid := redisPID(t, srv.Addr())
	r := newRecorder(t, Options{Store: "redis://" + srv.Addr() + "/0", BufferEvents: 30, FlushInterval: 50 * time.Millisecond})
	snap := snapshot(t, router.Input{}, checkoutRule)
	r.SetCatalog(NewCatalog(snap, Settings{}))
	for i := range 60 {
		serve(r, snap, "GET", "/shop/", "z"+strconv.Itoa(i), 200)
		if i%20 == 19 {
			flush(t, r) // the buffer bounds what one flush sends too
		}
	}
	resume := testproc.Freeze(t, pid)
	post := func(from, to int) (EventsResult, time.Duration, error) {
		var b strings.Builder
		b.WriteString(`{"events":[`)
		for i := from; i < to; i++ {
			if i > from {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"unit":"z%d","metric":"signup"}`, i)
		}
		b.WriteString("]}")
		began := time.Now()
		res, err := r.PostEvents(context.Background(), []byte(b.String()))
		return res, time.Since(began), err
	}
	// Three POSTs while the writer is stuck on Redis: each answered
	// within the stall bound, not after the 2 s read timeouts.
	for i, span := range [][2]int{{0, 10}, {10, 20}, {20, 30}} {
		res, took, err := post(span[0], span[1])
		if err != nil || res.Accepted != 10 || took > 1500*time.Millisecond {
			t.Fatalf("POST %d with Redis hung: %+v, %v after %v; want 10 accepted within 1.5 s", i+1, res, err, took)
		}
	}
	// The writer is still stuck: more than the buffer holds waits, so the
	// next POST is refused at once.
	_, took, err := post(30, 60)
	var busy *BusyError
	if !errors.As(err, &busy) || !errors.Is(err, ErrBusy) || took > 200*time.Millisecond || busy.RetryAfter < time.Second ||
		!strings.Contains(err.Error(), "experiments.buffer_events") || !strings.Contains(err.Error(), "(redis)") {
		t.Fatalf("POST beyond the buffer: %v (%T) after %v; want a prompt BusyError", err, err, took)
	}
	resume()
	deadline := time.Now().Add(30 * time.Second)
	for {
		flush(t, r)
		res, err := r.Results(context.Background(), "checkout")
		n := int64(0)
		if err == nil {
			for _, g := range res.Groups {
				n += g.Metrics["signup"].Count
			}
		}
		if n == 30 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Redis answered again: %d signups (%v), want the 30 buffered", n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPostedEventsDatedAhead: an event's ts may be ahead of the gateway's
// clock by MaxEventSkew, the clocks' disagreement; one dated later has not
// happened yet (its sender's clock is wrong) and is refused by index and
// field, naming the value, where it would otherwise count for every unit
// exposed up to a conversion window before it.
func TestPostedEventsDatedAhead(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	snap := snapshot(t, router.Input{}, checkoutRule)
	cat := NewCatalog(snap, Settings{})
	tests := []struct {
		name string
		ts   time.Time
		ok   bool
	}{
		{"now", now, true},
		{"a week ago", now.Add(-7 * 24 * time.Hour), true},
		{"ahead by the skew taken", now.Add(MaxEventSkew), true},
		{"ahead by a second more", now.Add(MaxEventSkew + time.Second), false},
		{"71 hours ahead", now.Add(71 * time.Hour), false},
		{"in 2099", time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := tt.ts.Format(time.RFC3339Nano)
			body := `{"events": [{"unit": "u1", "metric": "signup", "ts": "` + ts + `"}]}`
			evs, res, err := ParseEvents([]byte(body), cat, now)
			if err != nil {
				t.Fatalf("ParseEvents: %v", err)
			}
			if tt.ok {
				if res.Accepted != 1 || len(evs) != 1 || evs[0].TS != tt.ts.UnixMilli() {
					t.Errorf("ts %s: %+v, events %+v; want it accepted and dated so", ts, res, evs)
				}
				return
			}
			if res.Rejected != 1 || len(evs) != 0 || len(res.Problems) != 1 {
				t.Fatalf("ts %s: %+v, events %+v; want it refused", ts, res, evs)
			}
			p := res.Problems[0]
			if p.Path != "events[0].ts" || !strings.Contains(p.Message, strconv.Quote(ts)) || !strings.Contains(p.Message, "ahead of the gateway's clock") {
				t.Errorf("problem %s: %s; want events[0].ts naming %q and the clock", p.Path, p.Message, ts)
			}
		})
	}
}

// TestPostedConversionSurvivesRestart is the audit's reproduction: an
// event posted for a unit not yet exposed, a graceful restart, then a
// request the ab rule routes: the conversion counts. One whose unit never
// comes is dropped after its wait and counted (no_exposure), also when
// the wait ended while the gateway was down.
func TestPostedConversionSurvivesRestart(t *testing.T) {
	dir, clk, ctx := t.TempDir(), newClock(), context.Background()
	snap := snapshot(t, router.Input{}, checkoutRule)
	open := func() *Recorder {
		r := newRecorder(t, Options{Dir: dir, Now: clk.Now})
		r.SetCatalog(NewCatalog(snap, Settings{}))
		return r
	}
	r := open()
	res, err := r.PostEvents(ctx, []byte(`{"events":[{"unit":"late","metric":"signup"},{"unit":"never","metric":"signup"}]}`))
	if err != nil || res.Accepted != 2 || res.Conversions != 2 {
		t.Fatalf("PostEvents = %+v, %v", res, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r = open()
	serve(r, snap, "GET", "/shop/", "late", 200) // exposed 1 ms before the event
	flush(t, r)
	var signups int64
	for _, g := range results(t, r, "checkout").Groups {
		signups += g.Metrics["signup"].Count
	}
	if signups != 1 {
		t.Errorf("signups after a restart = %d, want 1", signups)
	}
	if n := r.Dropped(DropNoExposure); n != 0 {
		t.Errorf("no_exposure = %d before the wait ended, want 0", n)
	}
	r.Close()
	clk.Add(pendingTTL)
	r = open()
	if n := r.Dropped(DropNoExposure); n != 1 {
		t.Errorf("no_exposure = %d after the wait ended while down, want 1", n)
	}
	// While running: dropped at the first flush after the wait.
	if _, err := r.PostEvents(ctx, []byte(`{"events":[{"unit":"never2","metric":"signup"}]}`)); err != nil {
		t.Fatal(err)
	}
	clk.Add(pendingTTL)
	serve(r, snap, "GET", "/shop/", "someone", 200)
	flush(t, r)
	if n := r.Dropped(DropNoExposure); n != 2 {
		t.Errorf("no_exposure = %d after a wait ended while running, want 2", n)
	}
}
