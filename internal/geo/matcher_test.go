package geo

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/graygate/graygate/internal/strict"
)

func TestMatcher(t *testing.T) {
	path := cityDB(t, beijing, shanghai, shenzhen, mountainView, countryOnly)
	zh := newResolver(t, Config{GeoIPPath: path})
	en := newResolver(t, Config{GeoIPPath: path, Language: "en"})
	ip := func(r *Resolver, s string) Region {
		t.Helper()
		reg, ok := r.LookupIP(netip.MustParseAddr(s))
		if !ok {
			t.Fatalf("LookupIP(%s) not found", s)
		}
		return reg
	}
	tests := []struct {
		name   string
		values []string
		region Region
		want   bool
	}{
		{"seed list, beijing", []string{"北京", "上海", "深圳"}, ip(zh, "1.2.3.4"), true},
		{"seed list, shanghai", []string{"北京", "上海", "深圳"}, ip(zh, "5.6.7.8"), true},
		{"seed list, shenzhen city", []string{"北京", "上海", "深圳"}, ip(zh, "5.6.8.8"), true},
		{"seed list, mountain view", []string{"北京", "上海", "深圳"}, ip(zh, "8.8.8.8"), false},
		{"seed list, country only", []string{"北京", "上海", "深圳"}, ip(zh, "2.2.2.2"), false},
		{"seed list, english resolver", []string{"北京", "上海", "深圳"}, ip(en, "5.6.8.8"), true},
		{"full name 北京市", []string{"北京市"}, ip(zh, "1.2.3.4"), true},
		{"english name", []string{"Beijing"}, ip(zh, "1.2.3.4"), true},
		{"english name, other case and spaces", []string{"  mountain   VIEW "}, ip(zh, "8.8.8.8"), true},
		{"iso country", []string{"CN"}, ip(zh, "5.6.7.8"), true},
		{"iso country lower case", []string{"us"}, ip(zh, "8.8.8.8"), true},
		{"iso country, other country", []string{"US"}, ip(zh, "1.2.3.4"), false},
		{"iso subdivision", []string{"CN-BJ"}, ip(zh, "1.2.3.4"), true},
		{"iso subdivision, other province", []string{"CN-BJ"}, ip(zh, "5.6.7.8"), false},
		{"province matches its cities", []string{"广东"}, ip(zh, "5.6.8.8"), true},
		{"province full name", []string{"广东省"}, ip(zh, "5.6.8.8"), true},
		{"city does not match its province's other cities", []string{"深圳"}, ip(en, "1.2.3.4"), false},
		{"country name zh", []string{"中国"}, ip(en, "2.2.2.2"), true},
		{"country name en", []string{"United States"}, ip(zh, "8.8.8.8"), true},
		{"bare subdivision code is not a country", []string{"CA"}, ip(zh, "8.8.8.8"), false},
		{"state name zh", []string{"加利福尼亚州"}, ip(zh, "8.8.8.8"), true},
		{"no region", []string{"北京"}, Region{}, false},
		{"empty list", nil, ip(zh, "1.2.3.4"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := NewMatcher(tt.values)
			if err != nil {
				t.Fatalf("NewMatcher(%q): %v", tt.values, err)
			}
			if got := m.Match(tt.region); got != tt.want {
				t.Errorf("NewMatcher(%q).Match(%s %q) = %v, want %v", tt.values, tt.region, tt.region.Names, got, tt.want)
			}
			// A long list takes the map path; it must agree.
			long := append([]string{}, tt.values...)
			for i := len(long); i < 2*matcherMapMin; i++ {
				long = append(long, fmt.Sprintf("nowhere-%d", i))
			}
			lm, err := NewMatcher(long)
			if err != nil {
				t.Fatal(err)
			}
			if lm.set == nil {
				t.Fatalf("NewMatcher(%d values) did not build a map", len(long))
			}
			if got := lm.Match(tt.region); got != tt.want {
				t.Errorf("long list: Match(%s) = %v, want %v", tt.region, got, tt.want)
			}
		})
	}
}

func TestNewMatcherErrors(t *testing.T) {
	_, err := NewMatcher([]string{"北京", "", "上海", "  "})
	if err == nil {
		t.Fatal("NewMatcher with empty values: want an error")
	}
	got := strict.Fields(strict.Prefix("conditions.region_in", err))
	want := []strict.FieldError{
		{Path: "conditions.region_in[1]", Message: "must not be empty"},
		{Path: "conditions.region_in[3]", Message: "must not be empty"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("NewMatcher errors = %v, want %v", got, want)
	}
	m, err := NewMatcher([]string{"北京", "北京市", "Beijing"})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.keys) != 2 || strings.Join(m.Values(), ",") != "北京,北京市,Beijing" {
		t.Errorf("NewMatcher dedup: keys %q, values %q", m.keys, m.Values())
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct{ in, want string }{
		{"北京", "北京"},
		{"北京市", "北京"},
		{"广东省", "广东"},
		{"广西壮族自治区", "广西壮族"},
		{"中国香港特别行政区", "中国香港"},
		{"沙市", "沙市"}, // one character would remain
		{"市", "市"},
		{"  Mountain \t View ", "mountain view"},
		{"CN-BJ", "cn-bj"},
		{"États-Unis", "états-unis"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := normalize(tt.in); got != tt.want {
			t.Errorf("normalize(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
