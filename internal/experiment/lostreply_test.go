package experiment

import (
	"context"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
