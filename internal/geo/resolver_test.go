package geo

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/strict"
)

func TestResolveSources(t *testing.T) {
	path := cityDB(t, beijing, mountainView)
	all := Config{Header: "X-Region", GeoIPPath: path, PhoneHeader: "X-Phone", DefaultPhoneRegion: "CN"}
	phoneFirst := all
	phoneFirst.Sources = []string{"phone", "geoip"}
	in := Input{HeaderValue: "CN/广东/深圳", IP: netip.MustParseAddr("8.8.8.8"), Phone: "13816123456"}
	tests := []struct {
		name       string
		cfg        Config
		in         Input
		wantCity   string
		wantSource string
	}{
		{"trusted header wins", all, with(in, func(i *Input) { i.HeaderTrusted = true }), "深圳", "header"},
		{"untrusted header is ignored", all, in, "山景城", "geoip"},
		{"unparsable header falls through", all, with(in, func(i *Input) { i.HeaderTrusted, i.HeaderValue = true, "/" }), "山景城", "geoip"},
		{"ip not in db falls through to phone", all, with(in, func(i *Input) { i.IP = netip.MustParseAddr("9.9.9.9") }), "上海", "phone"},
		{"no ip falls through to phone", all, with(in, func(i *Input) { i.IP = netip.Addr{} }), "上海", "phone"},
		{"configured order", phoneFirst, with(in, func(i *Input) { i.HeaderTrusted = true }), "上海", "phone"},
		{"configured order, phone invalid", phoneFirst, with(in, func(i *Input) { i.Phone = "12" }), "山景城", "geoip"},
		{"nothing found", all, Input{IP: netip.MustParseAddr("9.9.9.9"), Phone: "nope"}, "", ""},
		{"zero config finds nothing", Config{}, with(in, func(i *Input) { i.HeaderTrusted = true }), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newResolver(t, tt.cfg)
			got, ok := r.Resolve(tt.in)
			if ok != (tt.wantSource != "") || got.City != tt.wantCity || got.Source != tt.wantSource {
				t.Errorf("Resolve(%+v) = %s from %q, %v; want city %q from %q", tt.in, got, got.Source, ok, tt.wantCity, tt.wantSource)
			}
		})
	}
}

func with(in Input, f func(*Input)) Input {
	f(&in)
	return in
}

func TestDefaultSources(t *testing.T) {
	tests := []struct {
		cfg  Config
		want []string
	}{
		{Config{}, nil},
		{Config{Header: "X-Region"}, []string{"header"}},
		{Config{PhoneClaim: "phone", Header: "X-Region"}, []string{"header", "phone"}},
		{Config{PhoneClaim: "phone", Header: "X-Region", Sources: []string{"phone", "header"}}, []string{"phone", "header"}},
	}
	for _, tt := range tests {
		r := newResolver(t, tt.cfg)
		if got := r.Sources(); !slices.Equal(got, tt.want) {
			t.Errorf("New(%+v).Sources() = %q, want %q", tt.cfg, got, tt.want)
		}
	}
}

func TestInputFrom(t *testing.T) {
	r := newResolver(t, Config{Header: "X-Region", PhoneHeader: "X-Phone", PhoneClaim: "phone_number"})
	req := &attr.Map{
		Headers: map[string]string{"x-region": "CN/北京", "X-Phone": "+8613800138000"},
		IP:      netip.MustParseAddr("1.2.3.4"),
	}
	claims := func(name string) (string, bool) {
		if name == "phone_number" {
			return "+862162345678", true
		}
		return "", false
	}
	tests := []struct {
		name    string
		req     *attr.Map
		trusted bool
		want    Input
	}{
		{"trusted", req, true, Input{HeaderValue: "CN/北京", HeaderTrusted: true, IP: req.IP, Phone: "+8613800138000"}},
		{"untrusted drops the region header", req, false, Input{IP: req.IP, Phone: "+8613800138000"}},
		{"claim when no phone header", &attr.Map{IP: req.IP}, false, Input{IP: req.IP, Phone: "+862162345678"}},
	}
	for _, tt := range tests {
		if got := r.InputFrom(tt.req, tt.trusted, claims); got != tt.want {
			t.Errorf("%s: InputFrom = %+v, want %+v", tt.name, got, tt.want)
		}
	}
	if got := r.InputFrom(&attr.Map{}, true, nil); got != (Input{HeaderTrusted: true}) {
		t.Errorf("InputFrom(empty, nil claims) = %+v", got)
	}
}

func TestLazy(t *testing.T) {
	r := newResolver(t, Config{Header: "X-Region"})
	calls := 0
	input := func() Input { calls++; return Input{HeaderValue: "CN/上海", HeaderTrusted: true} }

	unused := r.Lazy(input)
	_ = unused
	if calls != 0 {
		t.Fatalf("Lazy called input %d times before Region", calls)
	}
	l := r.Lazy(input)
	for range 3 {
		reg, ok := l.Region()
		if !ok || reg.Province != "上海" {
			t.Fatalf("Lazy.Region() = %s, %v; want 上海", reg, ok)
		}
	}
	if calls != 1 {
		t.Errorf("input called %d times, want 1", calls)
	}
	var zero Lazy
	if reg, ok := zero.Region(); ok {
		t.Errorf("zero Lazy.Region() = %s, want none", reg)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string // "path: message" prefixes, in order
	}{
		{"zero", Config{}, nil},
		{"full", Config{Header: "X-Region", GeoIPPath: "/x.mmdb", Language: "en", PhoneHeader: "X-Phone", PhoneClaim: "phone",
			DefaultPhoneRegion: "CN", Sources: []string{"phone", "geoip", "header"}}, nil},
		{"bad header names", Config{Header: "X Region", PhoneHeader: "X-Phone:"}, []string{
			"region.header: must be a header name", "region.phone_header: must be a header name"}},
		{"bad language", Config{Language: "not a language!"}, []string{"region.language: must be a BCP 47"}},
		{"bad phone region", Config{DefaultPhoneRegion: "XX"}, []string{"region.default_phone_region: must be"}},
		{"lower-case phone region", Config{DefaultPhoneRegion: "cn"}, []string{"region.default_phone_region: must be"}},
		{"sources", Config{Header: "X-Region", Sources: []string{"header", "cookie", "header", "geoip", "phone"}}, []string{
			`region.sources[1]: must be "header", "geoip" or "phone", got "cookie"`,
			`region.sources[2]: duplicates sources[0] "header"`,
			`region.sources[3]: "geoip" is listed but not configured (set geoip_db)`,
			`region.sources[4]: "phone" is listed but not configured (set phone_header or phone_claim)`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := strict.Fields(tt.cfg.Validate("region"))
			if len(fs) != len(tt.want) {
				t.Fatalf("Validate() = %v, want %d errors %q", fs, len(tt.want), tt.want)
			}
			for i, f := range fs {
				if got := f.Error(); len(got) < len(tt.want[i]) || got[:len(tt.want[i])] != tt.want[i] {
					t.Errorf("Validate()[%d] = %q, want prefix %q", i, got, tt.want[i])
				}
			}
		})
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	if r, err := New(Config{Sources: []string{"geoip"}}, nil); err == nil {
		r.Close()
		t.Fatal("New with an unconfigured source succeeded")
	} else if fmt.Sprint(err) != `sources[0]: "geoip" is listed but not configured (set geoip_db)` {
		t.Errorf("New error = %v", err)
	}
}

// TestConcurrentLookups runs every source from several goroutines at once,
// so that -race sees the caches and libphonenumber's lazy loading shared.
func TestConcurrentLookups(t *testing.T) {
	r := newResolver(t, Config{Header: "X-Region", GeoIPPath: cityDB(t, beijing, shanghai, shenzhen),
		PhoneClaim: "phone", DefaultPhoneRegion: "CN"})
	m, err := NewMatcher([]string{"北京", "上海", "深圳"})
	if err != nil {
		t.Fatal(err)
	}
	inputs := []Input{
		{HeaderValue: "CN/北京", HeaderTrusted: true},
		{IP: netip.MustParseAddr("5.6.7.8")},
		{Phone: "13510012345"},
		{Phone: "+8613816123456"},
		{HeaderValue: "广东/深圳", HeaderTrusted: true},
	}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				in := inputs[(g+i)%len(inputs)]
				if reg, ok := r.Resolve(in); !ok || !m.Match(reg) {
					errs <- fmt.Sprintf("Resolve(%+v) = %s, %v", in, reg, ok)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
