package notify

import (
	"context"
	"testing"
	"time"
)

// BenchmarkSend is what a breaker transition costs the request that
// causes it: serializing the event and offering it to a receiver whose
// queue is full (the worst case: a dead receiver), and nothing when no
// receiver subscribes to the type.
func BenchmarkSend(b *testing.B) {
	hang := newHanging(b)
	b.Run("full queue", func(b *testing.B) {
		s, err := New(Options{Gateway: "gw", Delivery: Delivery{QueueSize: 1, Timeout: time.Hour},
			Receivers: []Receiver{{Name: "hung", URL: hang.srv.URL, Secret: []byte("s")}}})
		if err != nil {
			b.Fatal(err)
		}
		defer func() {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = s.Close(ctx)
		}()
		ev := Event{Type: BreakerOpen, Rule: "canary", Text: "breaker opened for rule canary (gray target gray): error rate 34% > 20% over 30s (41 of 120 requests)",
			Fields: map[string]any{"target": "gray", "from": "closed", "to": "open", "reason": "error rate 34% > 20% over 30s (41 of 120 requests)"}}
		b.ReportAllocs()
		for b.Loop() {
			s.Send(ev)
		}
	})
	b.Run("not subscribed", func(b *testing.B) {
		s, err := New(Options{Gateway: "gw", Receivers: []Receiver{{Name: "r", URL: hang.srv.URL, Events: []string{SRM}}}})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = s.Close(context.Background()) }()
		b.ReportAllocs()
		for b.Loop() {
			s.Send(Event{Type: BreakerOpen, Rule: "canary"})
		}
	})
}
