package geo

import (
	"strings"
	"testing"
)

func TestLookupHeader(t *testing.T) {
	r := newResolver(t, Config{Header: "X-Region"})
	tests := []struct {
		value     string
		want      Region // Names checked with wantNames
		wantNames []string
		notFound  bool
	}{
		{value: "北京",
			want:      Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-BJ", Province: "北京", City: "北京", Source: "header"},
			wantNames: []string{"cn", "中国", "cn-bj", "北京", "beijing"}},
		{value: "北京市",
			want: Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-BJ", Province: "北京", City: "北京", Source: "header"}},
		{value: "Guangdong",
			want:      Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-GD", Province: "广东", Source: "header"},
			wantNames: []string{"cn-gd", "广东", "guangdong"}},
		{value: "CN-BJ",
			want: Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-BJ", Province: "北京", City: "北京", Source: "header"}},
		{value: "cn-gd/深圳",
			want:      Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-GD", Province: "广东", City: "深圳", Source: "header"},
			wantNames: []string{"cn", "cn-gd", "广东", "深圳"}},
		{value: "CN/北京/北京",
			want: Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-BJ", Province: "北京", City: "北京", Source: "header"}},
		{value: "CN/广东省/深圳市",
			want:      Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-GD", Province: "广东", City: "深圳市", Source: "header"},
			wantNames: []string{"深圳"}},
		{value: "中国/GD/深圳",
			want: Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-GD", Province: "广东", City: "深圳", Source: "header"}},
		{value: " CN / 上海 ",
			want: Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-SH", Province: "上海", City: "上海", Source: "header"}},
		{value: "CN//深圳",
			want:      Region{Country: "CN", CountryName: "中国", City: "深圳", Source: "header"},
			wantNames: []string{"cn", "深圳"}},
		{value: "US",
			want:      Region{Country: "US", CountryName: "美国", Source: "header"},
			wantNames: []string{"us", "美国", "united states"}},
		{value: "UK",
			want:      Region{Country: "GB", CountryName: "英国", Source: "header"},
			wantNames: []string{"gb", "uk", "united kingdom", "英国"}},
		{value: "China",
			want: Region{Country: "CN", CountryName: "中国", Source: "header"}},
		{value: "US/CA/Mountain View",
			want:      Region{Country: "US", CountryName: "美国", ProvinceCode: "US-CA", City: "Mountain View", Source: "header"},
			wantNames: []string{"us-ca", "mountain view"}},
		{value: "US/California",
			want:      Region{Country: "US", CountryName: "美国", Province: "California", Source: "header"},
			wantNames: []string{"california"}},
		{value: "广东/深圳",
			want: Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-GD", Province: "广东", City: "深圳", Source: "header"}},
		{value: "北京/朝阳",
			want: Region{Country: "CN", CountryName: "中国", ProvinceCode: "CN-BJ", Province: "北京", City: "朝阳", Source: "header"}},
		{value: "US/ca",
			want:      Region{Country: "US", CountryName: "美国", ProvinceCode: "US-CA", Source: "header"},
			wantNames: []string{"us-ca"}},
		{value: "深圳",
			want:      Region{City: "深圳", Source: "header"},
			wantNames: []string{"深圳"}},
		{value: "Atlantis/North/Capital",
			want:      Region{CountryName: "Atlantis", Province: "North", City: "Capital", Source: "header"},
			wantNames: []string{"atlantis", "north", "capital"}},
		{value: "", notFound: true},
		{value: " / / ", notFound: true},
		{value: "CN/北京/北京/朝阳", notFound: true},
		{value: "CN-GD/广东/深圳", notFound: true},
		{value: "CN\n北京", notFound: true},
		{value: "\xff\xfe", notFound: true},
		{value: strings.Repeat("北", 100), notFound: true},
	}
	for _, tt := range tests {
		got, ok := r.LookupHeader(tt.value)
		if ok == tt.notFound {
			t.Errorf("LookupHeader(%q) = %+v, %v; want found=%v", tt.value, got, ok, !tt.notFound)
			continue
		}
		if tt.notFound {
			continue
		}
		if miss := missingNames(got, tt.wantNames...); len(miss) > 0 {
			t.Errorf("LookupHeader(%q).Names = %q, missing %q", tt.value, got.Names, miss)
		}
		got.Names = nil
		if !regionEqual(got, tt.want) {
			t.Errorf("LookupHeader(%q) = %+v, want %+v", tt.value, got, tt.want)
		}
	}
}

// TestRegionStringRoundTrip checks that String writes the header format.
func TestRegionStringRoundTrip(t *testing.T) {
	r := newResolver(t, Config{Header: "X-Region"})
	for _, v := range []string{"CN/北京/北京", "CN/广东/深圳", "US", "CN/江苏", "US/CA/Mountain View", "US/CA", "//深圳", "Atlantis/North"} {
		reg, ok := r.LookupHeader(v)
		if !ok {
			t.Fatalf("LookupHeader(%q) not found", v)
		}
		if got := reg.String(); got != v {
			t.Errorf("LookupHeader(%q).String() = %q", v, got)
		}
		again, _ := r.LookupHeader(reg.String())
		if !regionEqual(again, reg) {
			t.Errorf("LookupHeader(%q) = %+v, want %+v", reg.String(), again, reg)
		}
	}
}

// TestCountryCode checks the country table built from CLDR, which also
// lists withdrawn codes under their successors' names.
func TestCountryCode(t *testing.T) {
	c, err := newCatalog("zh-CN")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ in, want string }{
		{"CN", "CN"}, {"cn", "CN"}, {"中国", "CN"}, {"中國", "CN"}, {"China", "CN"},
		{"美国", "US"}, {"United States", "US"}, {"香港", "HK"}, {"Hong Kong", "HK"},
		{"Germany", "DE"}, {"France", "FR"}, {"Benin", "BJ"}, {"Panama", "PA"}, {"Burkina Faso", "BF"},
		{"Timor-Leste", "TL"}, {"United Kingdom", "GB"}, {"UK", "GB"}, {"英国", "GB"}, {"Vietnam", "VN"},
		{"DD", ""}, {"FX", ""}, {"EZ", ""}, {"UN", ""}, {"ZZ", ""}, {"Atlantis", ""}, {"", ""},
	}
	for _, tt := range tests {
		got, ok := c.countryCode(tt.in)
		if ok != (tt.want != "") || got != tt.want {
			t.Errorf("countryCode(%q) = %q, %v; want %q", tt.in, got, ok, tt.want)
		}
	}
}
