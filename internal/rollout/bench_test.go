package rollout

import (
	"context"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/upstream"
)

// BenchmarkRecord is what the rollout adds to every request's OnDone: with
// no rollout active (one atomic load), and for a request of a rule under
// rollout that its stable target answered.
func BenchmarkRecord(b *testing.B) {
	stable := upstream.NewPool("stable", nil)
	d := &router.Decision{Rule: "canary", Group: router.GroupGray, Target: upstream.NewPool("gray", nil)}
	other := &router.Decision{Rule: "", Group: router.GroupDefault, Target: stable}
	b.Run("no rollout", func(b *testing.B) {
		rec, _ := NewRecorder(time.Now)
		b.ReportAllocs()
		for b.Loop() {
			rec.Record(d, 200, time.Millisecond)
		}
	})
	for _, tc := range []struct {
		name string
		d    *router.Decision
	}{{"gray request", d}, {"stable request", other}} {
		b.Run(tc.name, func(b *testing.B) {
			rec, _ := NewRecorder(time.Now)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go rec.Run(ctx)
			rec.watchRules(map[string]string{"canary": "stable"})
			rec.Record(tc.d, 200, time.Millisecond)
			b.ReportAllocs()
			for b.Loop() {
				rec.Record(tc.d, 200, time.Millisecond)
			}
		})
	}
}
