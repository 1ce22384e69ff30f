package main

import (
	"flag"
	"fmt"
	"slices"
	"time"
)

// hiccup measures how late this process wakes up from a 200 µs sleep, over
// -duration. On an idle machine the overshoot is tens of µs; when other
// jobs keep the CPU busy it grows to the scheduler's slice (milliseconds),
// and every latency percentile measured at that time carries it. run.sh
// runs it on each CPU before each fixed-rate latency measurement, so that a
// tail can be read against the machine's own noise.
func hiccup(args []string) error {
	fs := flag.NewFlagSet("hiccup", flag.ContinueOnError)
	d := fs.Duration("duration", time.Second, "how long to probe")
	if err := fs.Parse(args); err != nil {
		return err
	}
	const nap = 200 * time.Microsecond
	var late []time.Duration
	for end := time.Now().Add(*d); time.Now().Before(end); {
		t := time.Now()
		time.Sleep(nap)
		late = append(late, time.Since(t)-nap)
	}
	slices.Sort(late)
	q := func(p float64) int64 { return late[min(len(late)-1, int(p*float64(len(late))))].Microseconds() }
	fmt.Printf("wakeups=%d late_p50_us=%d late_p99_us=%d late_max_us=%d\n", len(late), q(0.5), q(0.99), late[len(late)-1].Microseconds())
	return nil
}
