package experiment

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/tags/redistest"
)

// replyGate relays connections to a Redis server and, while dropping is
// set, reads Redis's replies without passing them on: a command is
// carried out and its reply is lost, as when Redis answers after the
// client's timeout.
type replyGate struct {
	ln       net.Listener
	dropping atomic.Bool
	wg       sync.WaitGroup
}

func newReplyGate(t *testing.T, redisAddr string) *replyGate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &replyGate{ln: ln}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", redisAddr)
			if err != nil {
				c.Close()
				continue
			}
			g.wg.Add(2)
			go func() { defer g.wg.Done(); _, _ = io.Copy(u, c); u.Close() }()
			go func() {
				defer g.wg.Done()
				buf := make([]byte, 32<<10)
				for {
					n, err := u.Read(buf)
					if n > 0 && !g.dropping.Load() {
						if _, werr := c.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				c.Close()
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); g.wg.Wait() })
	return g
}

func (g *replyGate) addr() string { return g.ln.Addr().String() }

// TestRedisLostReply: a batch that Redis applied but whose reply was lost
// on both tries (Redis answered after the client's timeout) stays with the
// writer, which sends it again at the next flush. It is applied once,
// values included, and gets the statuses it had: its first exposures are
// first exposures (the exposure log's lines), its conversions counted.
// Events queued behind it are applied after it, under an id of their own.
func TestRedisLostReply(t *testing.T) {
	srv := redistest.Start(t)
	gate := newReplyGate(t, srv.Addr())
	s, err := openRedis("redis://"+gate.addr()+"/5", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	s.timeout = 300 * time.Millisecond
	ctx := context.Background()
	batch := []Event{
		expose("u1", "A", 1000),
		expose("u2", "B", 1000),
		{Kind: Conversion, Experiment: "e:1", Unit: "u1", Metric: "r", TS: 1100, Value: 2_000_000},
		conv("u2", "p", true, 1100, 1),
		conv("u9", "p", true, 1100, 1), // not exposed: parked
	}
	want := []status{stFresh, stFresh, stCounted, stCounted, stPending}

	// Redis knows the script (EVALSHA), so the batch whose reply is lost
	// is carried out.
	if err := s.script.Load(ctx, s.c).Err(); err != nil {
		t.Fatal(err)
	}
	gate.dropping.Store(true)
	st := make([]status, len(batch))
	n, err := s.apply(ctx, batch, window, st)
	if n != 0 || err == nil || !isTimeout(err) {
		t.Fatalf("with every reply lost: apply = %d, %v; want 0 and a timeout", n, err)
	}
	gate.dropping.Store(false)

	// The writer keeps what it could not apply, and more came since.
	later := []Event{expose("u3", "A", 1200), {Kind: Conversion, Experiment: "e:1", Unit: "u3", Metric: "r", TS: 1300, Value: 500_000}}
	events := append(slices.Clone(batch), later...)
	st = make([]status, len(events))
	if n, err := s.apply(ctx, events, window, st); n != len(events) || err != nil {
		t.Fatalf("apply again = %d, %v", n, err)
	}
	if got := st[:len(batch)]; !slices.Equal(got, want) {
		t.Errorf("the batch sent again: statuses %v, want %v (the first try's)", got, want)
	}
	if got := st[len(batch):]; !slices.Equal(got, []status{stFresh, stCounted}) {
		t.Errorf("the events behind it: statuses %v, want fresh and counted", got)
	}
	revenue := map[string]int64{}
	if err := s.values(ctx, "e:1", "r", func(g string, v int64) { revenue[g] += v }); err != nil {
		t.Fatal(err)
	}
	if revenue["A"] != 2_500_000 {
		t.Errorf("revenue of A = %d, want 2500000 (u1's 2 counted once, and u3's 0.5)", revenue["A"])
	}
	c, err := s.counts(ctx, "e:1")
	if err != nil {
		t.Fatal(err)
	}
	if c.units["A"] != 2 || c.units["B"] != 1 || c.converted[metricGroup{"p", "B"}] != 1 {
		t.Errorf("counts %v %v, want A 2, B 1 units and B's one conversion", c.units, c.converted)
	}

	// A batch that is not the one lost is not taken for it: the memory of
	// the lost batch is used once, and only for the same events.
	gate.dropping.Store(true)
	_, err = s.apply(ctx, []Event{expose("u4", "A", 1400)}, window, st[:1])
	gate.dropping.Store(false)
	if err == nil {
		t.Fatal("with every reply lost: apply succeeded")
	}
	other := []Event{expose("u5", "B", 1500)}
	if n, err := s.apply(ctx, other, window, st[:1]); n != 1 || err != nil || st[0] != stFresh {
		t.Fatalf("another batch after a lost one: %d, %v, %v; want it applied, fresh", n, err, st[0])
	}
	if s.lost.n != 0 {
		t.Errorf("the lost batch is still remembered: %+v", s.lost)
	}
}

// TestRedisLostReplyOverflow: when the buffer overflows while the writer
// holds a batch whose reply was lost on both tries, the oldest events
// behind that batch are dropped, not the batch's own: the batch goes
// again whole under its id, and Redis, which had applied it, counts it
// once. Dropping its first events instead sent the rest under a new id,
// and they counted twice.
func TestRedisLostReplyOverflow(t *testing.T) {
	srv := redistest.Start(t)
	gate := newReplyGate(t, srv.Addr())
	r := newRecorder(t, Options{Store: "redis://" + gate.addr() + "/6", BufferEvents: 8})
	rs := r.store.(*redisStore)
	rs.timeout = 300 * time.Millisecond
	ctx := context.Background()
	if err := rs.script.Load(ctx, rs.c).Err(); err != nil {
		t.Fatal(err)
	}
	snap := snapshot(t, router.Input{}, checkoutRule)
	r.SetCatalog(NewCatalog(snap, Settings{}))
	var exp string
	for i := range 11 {
		exp = serve(r, snap, "GET", "/shop/", "u"+strconv.Itoa(i), 200).Experiment
		if i%4 == 3 || i == 10 {
			flush(t, r) // the buffer bounds what one flush sends
		}
	}
	if c, err := rs.counts(ctx, exp); err != nil || c.units["A"]+c.units["B"] != 11 {
		t.Fatalf("exposed units: %v, %v; want 11", c.units, err)
	}
	post := func(from, to int) {
		t.Helper()
		var b strings.Builder
		b.WriteString(`{"events":[`)
		for i := from; i < to; i++ {
			if i > from {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"unit":"u%d","metric":"revenue","value":%d}`, i, 1<<i)
		}
		b.WriteString("]}")
		if res, err := r.PostEvents(ctx, []byte(b.String())); err != nil || res.Accepted != to-from {
			t.Fatalf("POST of units %d to %d: %+v, %v", from, to-1, res, err)
		}
	}
	// Revenue 1, 2, 4, 8 and 16 for u0..u4: applied, every reply lost.
	gate.dropping.Store(true)
	post(0, 5)
	flush(t, r) // the writer has tried, and holds the batch
	if r.storeDown.Load() != true || rs.lost.n != 5 {
		t.Fatalf("with every reply lost: store down %v, lost batch %+v; want down and the 5 events held", r.storeDown.Load(), rs.lost)
	}
	gate.dropping.Store(false)
	// Six more (32 to 1024) make 11 for a buffer of 8: three are dropped,
	// the oldest after the held batch (32, 64 and 128).
	before := r.Dropped(DropStoreUnavailable)
	post(5, 11)
	flush(t, r)
	if got := r.Dropped(DropStoreUnavailable) - before; got != 3 {
		t.Errorf("dropped for the buffer = %d, want 3", got)
	}
	var sum int64
	if err := rs.values(ctx, exp, "revenue", func(_ string, v int64) { sum += v }); err != nil {
		t.Fatal(err)
	}
	if want := int64(1+2+4+8+16+256+512+1024) * 1_000_000; sum != want {
		t.Errorf("revenue = %d, want %d: the held batch once, and the three newest", sum, want)
	}
}

// TestDropOldestKeepsTheLostBatch: the buffer's bound drops the oldest
// events after the held batch, or, when it cuts into that batch, the
// batch whole (and forgets it) with the oldest after it.
func TestDropOldestKeepsTheLostBatch(t *testing.T) {
	tests := []struct {
		name        string
		n, lost     int
		limit       int
		want        []string
		wantDropped uint64
		wantLost    int
	}{
		{"within the bound", 6, 3, 8, []string{"0", "1", "2", "3", "4", "5"}, 0, 3},
		{"no batch held", 6, 0, 4, []string{"2", "3", "4", "5"}, 2, 0},
		{"behind the held batch", 8, 3, 5, []string{"0", "1", "2", "6", "7"}, 3, 3},
		{"everything behind it", 8, 3, 3, []string{"0", "1", "2"}, 5, 3},
		{"into the held batch", 8, 3, 2, []string{"6", "7"}, 6, 0},
		{"the held batch alone is over", 8, 6, 4, []string{"6", "7"}, 6, 0},
		{"a held batch longer than the backlog", 4, 9, 2, []string{"2", "3"}, 2, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := &redisStore{lost: lostBatch{id: "g-1", n: tt.lost}}
			r := &Recorder{store: rs}
			var backlog []Event
			for i := range tt.n {
				backlog = append(backlog, Event{Unit: strconv.Itoa(i)})
			}
			got := r.dropOldest(backlog, tt.limit)
			var units []string
			for _, e := range got {
				units = append(units, e.Unit)
			}
			if !slices.Equal(units, tt.want) || r.Dropped(DropStoreUnavailable) != tt.wantDropped || rs.lost.n != tt.wantLost {
				t.Errorf("kept %v, dropped %d, held %d; want %v, %d, %d", units, r.Dropped(DropStoreUnavailable), rs.lost.n, tt.want, tt.wantDropped, tt.wantLost)
			}
		})
	}
}
