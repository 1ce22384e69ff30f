package breaker_test

import (
	"fmt"
	"time"

	"github.com/graygate/graygate/internal/breaker"
)

// The gateway keeps one Set; the reloader gets a breaker per rule and
// target, and the request path asks it before going to gray.
func Example() {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	set := breaker.NewSet(breaker.SetOptions{
		Now: func() time.Time { return now },
		OnTransition: func(key string, from, to breaker.State, reason string) {
			fmt.Printf("%s: %v -> %v: %s\n", key, from, to, reason)
		},
	})
	b, err := set.Get("checkout|10.0.0.7:8080", breaker.Config{})
	if err != nil {
		panic(err)
	}
	toStable := 0
	for i := range 30 {
		t, ok := b.Allow()
		if !ok {
			toStable++
			continue
		}
		status := 200
		if i%3 == 0 {
			status = 503
		}
		b.Record(t, breaker.Outcome{Latency: 20 * time.Millisecond, Failed: b.IsErrorStatus(status), End: now})
	}
	fmt.Println(b.State(), toStable, "sent to stable")
	// Output:
	// checkout|10.0.0.7:8080: closed -> open: error rate 35% > 20% over 30s (7 of 20 requests)
	// open 10 sent to stable
}
