package geo

import (
	"fmt"
	"net/netip"
	"testing"
)

// benchResolver loads a database of many networks, so that the tree is
// several thousand nodes deep in places: 4096 /24s spread over 1.0.0.0/8 to
// 9.0.0.0/8. It returns an address in each of the first four.
func benchResolver(b *testing.B) (*Resolver, []netip.Addr) {
	places := []place{beijing, shanghai, shenzhen, mountainView}
	var all []place
	var ips []netip.Addr
	for i := range 4096 {
		p := places[i%len(places)]
		p.network = fmt.Sprintf("%d.%d.%d.0/24", 1+i%9, (i/9)%256, (i*7)%256)
		all = append(all, p)
		if i < 4 {
			ips = append(ips, netip.MustParsePrefix(p.network).Addr().Next())
		}
	}
	return newResolver(b, Config{GeoIPPath: cityDB(b, all...)}), ips
}

// BenchmarkLookupIP is the steady state: the record's Region is cached.
func BenchmarkLookupIP(b *testing.B) {
	r, ips := benchResolver(b)
	for _, ip := range ips {
		if _, ok := r.LookupIP(ip); !ok {
			b.Fatalf("LookupIP(%s) not found", ip)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r.LookupIP(ips[i&3])
		i++
	}
}

// BenchmarkLookupIPParallel is BenchmarkLookupIP from all cores at once.
func BenchmarkLookupIPParallel(b *testing.B) {
	r, ips := benchResolver(b)
	ip := ips[0]
	if _, ok := r.LookupIP(ip); !ok {
		b.Fatal("not found")
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.LookupIP(ip)
		}
	})
}

// BenchmarkLookupIPDecode is the cost of a cache miss: decoding a record.
func BenchmarkLookupIPDecode(b *testing.B) {
	r, ips := benchResolver(b)
	res := r.db.Load().reader.Lookup(ips[0])
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.decodeRecord(res); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLookupIPNotFound(b *testing.B) {
	r, _ := benchResolver(b)
	ip := netip.MustParseAddr("200.1.2.3")
	b.ReportAllocs()
	for b.Loop() {
		r.LookupIP(ip)
	}
}

func BenchmarkMatch(b *testing.B) {
	r := newResolver(b, Config{GeoIPPath: cityDB(b, shenzhen, mountainView)})
	sz, _ := r.LookupIP(netip.MustParseAddr("5.6.8.1"))
	mv, _ := r.LookupIP(netip.MustParseAddr("8.8.8.8"))
	long := []string{"北京", "上海", "天津", "重庆", "杭州", "南京", "成都", "武汉", "西安", "苏州", "长沙", "青岛", "深圳"}
	for _, bc := range []struct {
		name   string
		values []string
		region Region
	}{
		{"seed_list_hit", []string{"北京", "上海", "深圳"}, sz},
		{"seed_list_miss", []string{"北京", "上海", "深圳"}, mv},
		{"13_cities_hit", long, sz},
		{"13_cities_miss", long, mv},
	} {
		m, err := NewMatcher(bc.values)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m.Match(bc.region)
			}
		})
	}
}

// BenchmarkLookupPhone measures a repeated number (cached) and the parse
// and geocoding behind a new one.
func BenchmarkLookupPhone(b *testing.B) {
	r := newResolver(b, Config{PhoneHeader: "X-Phone", DefaultPhoneRegion: "CN"})
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := r.LookupPhone("+8613510012345"); !ok {
				b.Fatal("not found")
			}
		}
	})
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := r.lookupPhone("+8613510012345"); !ok {
				b.Fatal("not found")
			}
		}
	})
}

func BenchmarkLookupHeader(b *testing.B) {
	r := newResolver(b, Config{Header: "X-Region"})
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := r.LookupHeader("CN/广东/深圳"); !ok {
				b.Fatal("not found")
			}
		}
	})
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d, _ := r.cat.parseHeader("CN/广东/深圳")
			if _, ok := r.cat.finish(d, SourceHeader); !ok {
				b.Fatal("not found")
			}
		}
	})
}

// BenchmarkResolveLazy is a request whose rule tests the region: the
// trusted header is absent, so the GeoIP source answers.
func BenchmarkResolveLazy(b *testing.B) {
	r, ips := benchResolver(b)
	m, _ := NewMatcher([]string{"北京", "上海", "深圳"})
	b.ReportAllocs()
	for b.Loop() {
		l := r.Lazy(func() Input { return Input{IP: ips[0]} })
		reg, _ := l.Region()
		m.Match(reg)
	}
}
