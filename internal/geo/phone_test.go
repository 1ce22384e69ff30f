package geo

import (
	"slices"
	"strings"
	"testing"

	"github.com/nyaruka/phonenumbers"
)

// TestGeocoderChineseData pins what libphonenumber v1.8.1 itself returns for
// Chinese numbers, which LookupPhone's parsing depends on: Chinese data
// lives under "zh" (not "zh-CN", which silently falls back to English), in
// run-together 省+市 form, and the country's name when it knows no finer.
func TestGeocoderChineseData(t *testing.T) {
	tests := []struct {
		number, lang, want string
	}{
		{"+861062345678", "zh", "北京市"},
		{"+862162345678", "zh", "上海市"},
		{"+8675512345678", "zh", "广东省深圳市"},
		{"+8613800138000", "zh", "北京市"},
		{"+8613816123456", "zh", "上海市"},
		{"+8613510012345", "zh", "广东省深圳市"},
		{"+864711234567", "zh", "内蒙古呼和浩特市"},
		{"+8675512345678", "en", "Shenzhen, Guangdong"},
		{"+861062345678", "en", "Beijing"},
		{"+861062345678", "zh-CN", "Beijing"},
		{"+8619912345678", "zh", "中国"},
		{"+8619912345678", "en", "China"},
	}
	for _, tt := range tests {
		num, err := phonenumbers.Parse(tt.number, "")
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.number, err)
		}
		got, err := phonenumbers.GetGeocodingForNumber(num, tt.lang)
		if err != nil || got != tt.want {
			t.Errorf("GetGeocodingForNumber(%s, %q) = %q, %v; want %q", tt.number, tt.lang, got, err, tt.want)
		}
	}
}

func TestLookupPhone(t *testing.T) {
	tests := []struct {
		name, lang, defRegion, phone string
		want                         Region // Names checked with wantNames
		wantNames                    []string
		notFound                     bool
	}{
		{name: "beijing landline", phone: "+86 10 6234 5678",
			want:      Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-BJ", Province: "北京", City: "北京", Source: "phone"},
			wantNames: []string{"cn", "中国", "china", "cn-bj", "北京", "beijing"}},
		{name: "shanghai landline", phone: "+862162345678",
			want:      Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-SH", Province: "上海", City: "上海", Source: "phone"},
			wantNames: []string{"cn-sh", "上海", "shanghai"}},
		{name: "shenzhen landline", phone: "+86-755-1234-5678",
			want:      Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-GD", Province: "广东", City: "深圳", Source: "phone"},
			wantNames: []string{"cn-gd", "广东", "guangdong", "深圳", "shenzhen"}},
		{name: "beijing mobile 138 0013", phone: "+8613800138000",
			want:      Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-BJ", Province: "北京", City: "北京", Source: "phone"},
			wantNames: []string{"北京", "beijing"}},
		{name: "shanghai mobile 138 1612", phone: "+86 138 1612 3456",
			want:      Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-SH", Province: "上海", City: "上海", Source: "phone"},
			wantNames: []string{"上海"}},
		{name: "shenzhen mobile 135 1001", phone: "+8613510012345",
			want:      Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-GD", Province: "广东", City: "深圳", Source: "phone"},
			wantNames: []string{"深圳"}},
		{name: "jiangsu changzhou mobile", phone: "+8613912345678",
			want:      Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-JS", Province: "江苏", City: "常州", Source: "phone"},
			wantNames: []string{"江苏", "jiangsu", "常州", "changzhou"}},
		{name: "autonomous region without 自治区", phone: "+864711234567",
			want:      Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-NM", Province: "内蒙古", City: "呼和浩特", Source: "phone"},
			wantNames: []string{"内蒙古", "inner mongolia", "呼和浩特"}},
		{name: "mobile block without data is country only", phone: "+8619912345678",
			want:      Region{Country: "CN", CountryName: "中国", Source: "phone"},
			wantNames: []string{"cn", "中国", "china"}},
		{name: "national format with default region", defRegion: "CN", phone: "13800138000",
			want:      Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-BJ", Province: "北京", City: "北京", Source: "phone"},
			wantNames: []string{"北京"}},
		{name: "national landline with trunk prefix", defRegion: "CN", phone: "010-62345678",
			want:      Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-BJ", Province: "北京", City: "北京", Source: "phone"},
			wantNames: []string{"北京"}},
		{name: "english display keeps chinese names", lang: "en", phone: "+8675512345678",
			want:      Region{Country: "CN", CountryName: "China", ProvinceCode: "CN-GD", Province: "Guangdong", City: "Shenzhen", Source: "phone"},
			wantNames: []string{"深圳", "shenzhen", "广东", "guangdong"}},
		{name: "traditional chinese display uses simplified data", lang: "zh-TW", phone: "+8675512345678",
			want:      Region{Country: "CN", CountryName: "中國", ProvinceCode: "CN-GD", Province: "广东", City: "深圳", Source: "phone"},
			wantNames: []string{"中国", "中國", "深圳"}},
		{name: "us city and state code", phone: "+1 650-253-0000",
			want:      Region{Country: "US", CountryName: "美国", ProvinceCode: "US-CA", City: "Mountain View", Source: "phone"},
			wantNames: []string{"us", "美国", "united states", "us-ca", "mountain view"}},
		{name: "hong kong is its own country", phone: "+852 2123 4567",
			want:      Region{Country: "HK", CountryName: "中国香港特别行政区", Source: "phone"},
			wantNames: []string{"hk", "香港", "hong kong"}},
		{name: "national format without default region", phone: "13800138000", notFound: true},
		{name: "too short", phone: "+8612345", notFound: true},
		{name: "not a number", phone: "call me", notFound: true},
		{name: "invalid prefix", defRegion: "CN", phone: "+8685212345678", notFound: true},
		{name: "non-geographic", phone: "+800 1234 5678", notFound: true},
		{name: "too long", phone: "+86" + strings.Repeat("1", 64), notFound: true},
		{name: "empty", phone: "", notFound: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newResolver(t, Config{PhoneHeader: "X-Phone", Language: tt.lang, DefaultPhoneRegion: tt.defRegion})
			got, ok := r.LookupPhone(tt.phone)
			if ok == tt.notFound {
				t.Fatalf("LookupPhone(%q) = %+v, %v; want found=%v", tt.phone, got, ok, !tt.notFound)
			}
			if tt.notFound {
				return
			}
			if miss := missingNames(got, tt.wantNames...); len(miss) > 0 {
				t.Errorf("LookupPhone(%q).Names = %q, missing %q", tt.phone, got.Names, miss)
			}
			got.Names = nil
			if !regionEqual(got, tt.want) {
				t.Errorf("LookupPhone(%q) = %+v, want %+v", tt.phone, got, tt.want)
			}
		})
	}
}

// TestPhoneMatchesRegionIn is the seed's example end to end: 北京, 上海 and
// 深圳 numbers match ["北京","上海","深圳"], a 常州 number does not.
func TestPhoneMatchesRegionIn(t *testing.T) {
	r := newResolver(t, Config{PhoneClaim: "phone", DefaultPhoneRegion: "CN"})
	m, err := NewMatcher([]string{"北京", "上海", "深圳"})
	if err != nil {
		t.Fatal(err)
	}
	for phone, want := range map[string]bool{
		"13800138000": true, "13816123456": true, "13510012345": true, "01062345678": true,
		"13912345678": false, "19912345678": false, "+16502530000": false,
	} {
		reg, _ := r.LookupPhone(phone)
		if got := m.Match(reg); got != want {
			t.Errorf("Match(LookupPhone(%s) = %s) = %v, want %v", phone, reg, got, want)
		}
	}
}

func regionEqual(a, b Region) bool {
	return a.Country == b.Country && a.CountryName == b.CountryName && a.ProvinceCode == b.ProvinceCode &&
		a.Province == b.Province && a.City == b.City && a.Source == b.Source && slices.Equal(a.Names, b.Names)
}
