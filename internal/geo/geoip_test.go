package geo

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func TestLookupIP(t *testing.T) {
	path := cityDB(t, beijing, shanghai, shenzhen, mountainView, countryOnly, ipv6Place, beijingNoCity)
	tests := []struct {
		name      string
		lang      string
		ip        string
		wantOK    bool
		want      Region // Names checked with wantNames instead
		wantNames []string
	}{
		{name: "beijing zh", ip: "1.2.3.4", wantOK: true,
			want:      Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-BJ", Province: "北京", City: "北京", Source: "geoip"},
			wantNames: []string{"cn", "中国", "china", "cn-bj", "北京", "beijing"}},
		{name: "shanghai zh", ip: "5.6.7.200", wantOK: true,
			want:      Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-SH", Province: "上海", City: "上海", Source: "geoip"},
			wantNames: []string{"cn", "cn-sh", "上海", "shanghai"}},
		{name: "shenzhen zh", ip: "5.6.8.1", wantOK: true,
			want:      Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-GD", Province: "广东", City: "深圳", Source: "geoip"},
			wantNames: []string{"cn", "cn-gd", "广东", "guangdong", "深圳", "shenzhen"}},
		{name: "mountain view zh", ip: "8.8.8.8", wantOK: true,
			want:      Region{Country: "US", CountryName: "美国", ProvinceCode: "US-CA", Province: "加利福尼亚州", City: "山景城", Source: "geoip"},
			wantNames: []string{"us", "美国", "united states", "us-ca", "california", "加利福尼亚州", "山景城", "mountain view"}},
		{name: "mountain view en", lang: "en", ip: "8.8.8.8", wantOK: true,
			want:      Region{Country: "US", CountryName: "United States", ProvinceCode: "US-CA", Province: "California", City: "Mountain View", Source: "geoip"},
			wantNames: []string{"us", "united states", "us-ca", "california", "mountain view"}},
		{name: "beijing en keeps chinese names for matching", lang: "en", ip: "1.2.3.4", wantOK: true,
			want:      Region{Country: "CN", CountryName: "China", ProvinceCode: "CN-BJ", Province: "Beijing", City: "Beijing", Source: "geoip"},
			wantNames: []string{"cn", "china", "北京", "beijing"}},
		{name: "language without names in the db falls back to english", lang: "fr", ip: "8.8.8.8", wantOK: true,
			want:      Region{Country: "US", CountryName: "États-Unis", ProvinceCode: "US-CA", Province: "California", City: "Mountain View", Source: "geoip"},
			wantNames: []string{"us", "états-unis", "united states", "california"}},
		{name: "zh base language finds zh-CN", lang: "zh", ip: "5.6.8.1", wantOK: true,
			want:      Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-GD", Province: "广东", City: "深圳", Source: "geoip"},
			wantNames: []string{"深圳"}},
		{name: "municipality without a city is its own city", ip: "1.2.4.4", wantOK: true,
			want:      Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-BJ", Province: "北京", City: "北京", Source: "geoip"},
			wantNames: []string{"北京", "beijing", "cn-bj"}},
		{name: "country only", ip: "2.2.2.2", wantOK: true,
			want:      Region{Country: "CN", CountryName: "中国", Source: "geoip"},
			wantNames: []string{"cn", "中国", "china"}},
		{name: "ipv4-mapped ipv6", ip: "::ffff:1.2.3.4", wantOK: true,
			want:      Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-BJ", Province: "北京", City: "北京", Source: "geoip"},
			wantNames: []string{"北京"}},
		{name: "ipv6", ip: "2a00:1450:4001::42", wantOK: true,
			want:      Region{Country: "DE", CountryName: "德国", ProvinceCode: "DE-BE", Province: "柏林", City: "柏林", Source: "geoip"},
			wantNames: []string{"de", "germany", "de-be", "land berlin", "berlin"}},
		{name: "not in db", ip: "9.9.9.9"},
		{name: "ipv6 not in db", ip: "2a00:1450:4002::1"},
	}
	resolvers := map[string]*Resolver{}
	for _, tt := range tests {
		if resolvers[tt.lang] == nil {
			resolvers[tt.lang] = newResolver(t, Config{GeoIPPath: path, Language: tt.lang})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := resolvers[tt.lang]
			// Twice: the first decodes, the second comes from the cache.
			for pass := range 2 {
				got, ok := r.LookupIP(netip.MustParseAddr(tt.ip))
				if ok != tt.wantOK {
					t.Fatalf("pass %d: LookupIP(%s) ok = %v, want %v (%+v)", pass, tt.ip, ok, tt.wantOK, got)
				}
				if miss := missingNames(got, tt.wantNames...); len(miss) > 0 {
					t.Errorf("pass %d: LookupIP(%s).Names = %q, missing %q", pass, tt.ip, got.Names, miss)
				}
				got.Names = nil
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("pass %d: LookupIP(%s) = %+v, want %+v", pass, tt.ip, got, tt.want)
				}
			}
		})
	}
}

func TestLookupIPWithoutDatabase(t *testing.T) {
	r := newResolver(t, Config{Header: "X-Region"})
	if got, ok := r.LookupIP(netip.MustParseAddr("1.2.3.4")); ok {
		t.Errorf("LookupIP without geoip_db = %+v, want not found", got)
	}
	if err := r.Reload(); err == nil {
		t.Error("Reload without geoip_db: want an error")
	}
	if err := r.Watch(t.Context()); err != nil {
		t.Errorf("Watch without geoip_db = %v, want nil", err)
	}
}

func TestLookupIPInvalidAddr(t *testing.T) {
	r := newResolver(t, Config{GeoIPPath: cityDB(t, beijing)})
	if got, ok := r.LookupIP(netip.Addr{}); ok {
		t.Errorf("LookupIP(zero Addr) = %+v, want not found", got)
	}
}

func TestCountryDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "GeoLite2-Country.mmdb")
	us := mountainView
	us.sub, us.cityEn = "", ""
	renameOver(t, path, buildDB(t, "GeoLite2-Country", us))
	r := newResolver(t, Config{GeoIPPath: path})
	got, ok := r.LookupIP(netip.MustParseAddr("8.8.8.8"))
	if !ok || got.Country != "US" || got.CountryName != "美国" || got.Province != "" || got.City != "" {
		t.Fatalf("LookupIP(8.8.8.8) = %+v, %v; want US only", got, ok)
	}
	if st := r.GeoIPStatus(); st.DatabaseType != "GeoLite2-Country" || st.Loads != 1 || st.Err != nil || st.BuildTime.Year() != 2025 {
		t.Errorf("GeoIPStatus() = %+v", st)
	}
}

func TestNewRejectsBadDatabases(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := buildDB(t, "GeoLite2-City", beijing)
	tests := []struct {
		name, path, wantErr string
	}{
		{"missing", filepath.Join(dir, "nope.mmdb"), "no such file"},
		{"empty", write("empty.mmdb", nil), "load geoip_db"},
		{"garbage", write("garbage.mmdb", []byte(strings.Repeat("not a database ", 100))), "load geoip_db"},
		{"truncated", write("truncated.mmdb", good[:len(good)/2]), "load geoip_db"},
		{"asn database", write("asn.mmdb", buildDB(t, "GeoLite2-ASN", beijing)), "no country or city data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(Config{GeoIPPath: tt.path}, nil)
			if err == nil {
				r.Close()
				t.Fatalf("New(%s) succeeded, want error containing %q", tt.name, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("New(%s) = %v, want error containing %q", tt.name, err, tt.wantErr)
			}
		})
	}
}

// TestWatchReloadsOnRename replaces the file the way geoipupdate does and
// expects the new mapping; then a corrupt replacement, which must keep the
// good database in service and be reported; then a good one again.
func TestWatchReloadsOnRename(t *testing.T) {
	path := cityDB(t, beijing, mountainView)
	r := newResolver(t, Config{GeoIPPath: path})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if err := r.Watch(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Watch(ctx); err == nil {
		t.Error("second Watch: want an error")
	}
	ip := netip.MustParseAddr("1.2.3.4")
	city := func() string { reg, _ := r.LookupIP(ip); return reg.City }
	if got := city(); got != "北京" {
		t.Fatalf("before reload: city(%s) = %q, want 北京", ip, got)
	}

	moved := shanghai
	moved.network = beijing.network
	renameOver(t, path, buildDB(t, "GeoLite2-City", moved, mountainView))
	eventually(t, "the renamed database to be loaded", func() bool { return city() == "上海" })
	if st := r.GeoIPStatus(); st.Loads != 2 || st.Err != nil {
		t.Errorf("after reload: GeoIPStatus() = %+v, want 2 loads and no error", st)
	}

	renameOver(t, path, []byte("corrupt"))
	eventually(t, "the corrupt database to be reported", func() bool { return r.GeoIPStatus().Err != nil })
	if got := city(); got != "上海" {
		t.Errorf("after corrupt replacement: city(%s) = %q, want the old 上海", ip, got)
	}
	if st := r.GeoIPStatus(); st.Loads != 2 {
		t.Errorf("after corrupt replacement: Loads = %d, want 2", st.Loads)
	}

	renameOver(t, path, buildDB(t, "GeoLite2-City", beijing, mountainView))
	eventually(t, "the good database to be loaded again", func() bool { return city() == "北京" && r.GeoIPStatus().Err == nil })
	if st := r.GeoIPStatus(); st.Loads != 3 {
		t.Errorf("after recovery: Loads = %d, want 3", st.Loads)
	}
}

// TestWatchReloadsOnInPlaceWrite covers cp over the file, which a
// memory-mapped reader would not survive.
func TestWatchReloadsOnInPlaceWrite(t *testing.T) {
	path := cityDB(t, beijing)
	r := newResolver(t, Config{GeoIPPath: path})
	if err := r.Watch(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buildDB(t, "GeoLite2-City", beijing, mountainView), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the rewritten database to be loaded", func() bool {
		_, ok := r.LookupIP(netip.MustParseAddr("8.8.8.8"))
		return ok
	})
}

// TestWatchStopsOnClose checks that Close waits for the watcher and that
// lookups after it find nothing.
func TestWatchStopsOnClose(t *testing.T) {
	path := cityDB(t, beijing)
	r, err := New(Config{GeoIPPath: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Watch(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.Close()
	r.Close()
	if _, ok := r.LookupIP(netip.MustParseAddr("1.2.3.4")); ok {
		t.Error("LookupIP after Close found a region")
	}
	renameOver(t, path, buildDB(t, "GeoLite2-City", shanghai))
	if err := r.Reload(); err == nil || r.db.Load() != nil {
		t.Errorf("Reload after Close = %v, want an error and no database", err)
	}
}

// TestReloadRace serves lookups from many goroutines while the database is
// swapped; run with -race. Every answer must come from one of the two
// databases, never a mix.
func TestReloadRace(t *testing.T) {
	path := cityDB(t, beijing, mountainView)
	r := newResolver(t, Config{GeoIPPath: path})
	moved := shanghai
	moved.network = beijing.network
	dbs := [][]byte{buildDB(t, "GeoLite2-City", moved, mountainView), buildDB(t, "GeoLite2-City", beijing, mountainView)}

	stop := make(chan struct{})
	errs := make(chan string, 8)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			ip := netip.MustParseAddr("1.2.3.4")
			for {
				select {
				case <-stop:
					return
				default:
				}
				reg, ok := r.LookupIP(ip)
				if !ok || !(reg.Province == "北京" && reg.City == "北京" || reg.Province == "上海" && reg.City == "上海") {
					select {
					case errs <- reg.String():
					default:
					}
					return
				}
			}
		})
	}
	for i := range 20 {
		renameOver(t, path, dbs[i%2])
		if err := r.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("lookup during reload returned %q", e)
	}
	if got := r.GeoIPStatus().Loads; got != 21 {
		t.Errorf("Loads = %d, want 21", got)
	}
}

func TestRegionCacheGenerations(t *testing.T) {
	const limit = 4
	c := newRegionCache[uintptr](limit)
	regs := make([]*Region, 10)
	for i := range regs {
		regs[i] = &Region{City: string(rune('a' + i))}
		c.put(uintptr(i), regs[i])
	}
	size := func() int {
		n := 0
		for _, g := range []*cacheGen{c.cur.Load(), c.prev.Load()} {
			if g != nil {
				g.m.Range(func(any, any) bool { n++; return true })
			}
		}
		return n
	}
	if n := size(); n > 2*limit {
		t.Errorf("cache holds %d entries, want at most %d", n, 2*limit)
	}
	// The newest entries are there and are the very pointers stored.
	for _, i := range []int{9, 8, 7} {
		if got := c.get(uintptr(i)); got != regs[i] {
			t.Errorf("get(%d) = %v, want %v", i, got, regs[i])
		}
	}
	// The oldest generation was dropped.
	for i := range 4 {
		if got := c.get(uintptr(i)); got != nil {
			t.Errorf("get(%d) = %v, want evicted", i, got)
		}
	}
	if n := size(); n > 2*limit {
		t.Errorf("after gets, cache holds %d entries, want at most %d", n, 2*limit)
	}
}
