package traffic

import (
	"context"
	"testing"
	"time"
)

// running returns a Set with its clock keeper running, as the gateway
// runs it.
func running(b *testing.B) *Set {
	s, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	return s
}

// BenchmarkRecord is the data plane's cost per request: one Record into
// an existing series, with Run keeping the clock.
func BenchmarkRecord(b *testing.B) {
	s := running(b)
	for _, g := range []string{"gray", "stable"} {
		s.Record("user_center_v2", g, 200, false, time.Millisecond)
		s.Record("checkout_button", g, 200, false, time.Millisecond)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.Record("user_center_v2", "stable", 200, false, time.Duration(i&1023)*time.Microsecond)
		i++
	}
}

// BenchmarkRecordParallel records from every CPU into the same series,
// the worst case for the shared counters.
func BenchmarkRecordParallel(b *testing.B) {
	s := running(b)
	s.Record("user_center_v2", "gray", 200, false, time.Millisecond)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			s.Record("user_center_v2", "gray", 200, false, time.Duration(i&1023)*time.Microsecond)
			i++
		}
	})
}

// BenchmarkRecordClock is Record without Run: it reads the clock itself.
func BenchmarkRecordClock(b *testing.B) {
	s, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	s.Record("user_center_v2", "stable", 200, false, time.Millisecond)
	b.ReportAllocs()
	for b.Loop() {
		s.Record("user_center_v2", "stable", 200, false, time.Millisecond)
	}
}

// BenchmarkWindow is one overview refresh's cost per series.
func BenchmarkWindow(b *testing.B) {
	s, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	s.Record("user_center_v2", "gray", 200, false, time.Millisecond)
	b.ReportAllocs()
	for b.Loop() {
		s.Window("user_center_v2", "gray", 10*time.Second)
	}
}
