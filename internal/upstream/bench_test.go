package upstream

import (
	"fmt"
	"testing"
)

func benchPool(tb testing.TB, bal Balancer) *Pool {
	insts := make([]*Instance, 8)
	for i := range insts {
		insts[i] = &Instance{Addr: fmt.Sprintf("10.0.0.%d:80", i+1), Weight: i%3 + 1,
			Metadata: map[string]string{"version": fmt.Sprint(i % 2)}}
	}
	return mustPool(tb, "svc", insts, PoolOptions{Balancer: bal, Health: NewHealth(HealthOptions{}), Passive: &PassiveHealth{}})
}

var benchBalancers = []Balancer{RoundRobin, Weighted, LeastRequest}

// benchPicks runs one sub-benchmark per balancer: pick, then the Report
// that ends the request, on a benchPool that setup (if set) prepares.
func benchPicks(b *testing.B, setup func(*Pool), pick func(*Pool) (*Instance, error)) {
	for _, bal := range benchBalancers {
		b.Run(string(bal), func(b *testing.B) {
			p := benchPool(b, bal)
			if setup != nil {
				setup(p)
			}
			b.ReportAllocs()
			for b.Loop() {
				in, err := pick(p)
				if err != nil {
					b.Fatal(err)
				}
				p.Report(in, true)
			}
		})
	}
}

// BenchmarkPick measures one request's worth of balancing: Pick and the
// Report that ends it, on a healthy pool of 8 with passive health on.
func BenchmarkPick(b *testing.B) { benchPicks(b, nil, (*Pool).Pick) }

func BenchmarkPickVersion(b *testing.B) {
	benchPicks(b, nil, func(p *Pool) (*Instance, error) { return p.PickVersion("1") })
}

// BenchmarkPickEjected has two of the 8 instances ejected, so some picks
// take the slow path.
func BenchmarkPickEjected(b *testing.B) {
	benchPicks(b, func(p *Pool) {
		fail(p, p.Instances[2], 5)
		fail(p, p.Instances[5], 5)
	}, (*Pool).Pick)
}

func BenchmarkPickParallel(b *testing.B) {
	for _, bal := range benchBalancers {
		b.Run(string(bal), func(b *testing.B) {
			p := benchPool(b, bal)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					in, err := p.Pick()
					if err != nil {
						b.Error(err)
						return
					}
					p.Report(in, true)
				}
			})
		})
	}
}

// TestPickDoesNotAllocate keeps the 0 allocs/op target a test, not only a
// benchmark number.
func TestPickDoesNotAllocate(t *testing.T) {
	for _, bal := range benchBalancers {
		p := benchPool(t, bal)
		fail(p, p.Instances[2], 5) // include the slow paths
		n := testing.AllocsPerRun(1000, func() {
			in, _ := p.PickVersion("0")
			p.Report(in, true)
			in, _ = p.Pick()
			p.Report(in, true)
		})
		if n != 0 {
			t.Errorf("%s: %v allocs per Pick/Report", bal, n)
		}
	}
}
