package geo

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzLookupHeader feeds the region header parser arbitrary values. It must
// not panic, must be deterministic, and what it finds must survive a round
// trip through Region.String, the header format.
func FuzzLookupHeader(f *testing.F) {
	for _, s := range []string{
		"北京", "北京市", "CN-BJ", "cn-gd/深圳", "CN/北京/北京", "CN/广东省/深圳市", "中国/GD/深圳", "CN//深圳",
		"US/CA/Mountain View", "广东/深圳", "China", "/", "//", "///", "CN-", "-", "a/b/c/d", "\x00", "\xff",
		" CN / 上海 ", "Atlantis/North/Capital", strings.Repeat("/x", 200),
	} {
		f.Add(s)
	}
	r := newResolver(f, Config{Header: "X-Region"})
	f.Fuzz(func(t *testing.T, v string) {
		reg, ok := r.LookupHeader(v)
		again, ok2 := r.LookupHeader(v)
		if ok != ok2 || !regionEqual(reg, again) {
			t.Fatalf("LookupHeader(%q) not deterministic: %+v, %+v", v, reg, again)
		}
		if !ok {
			return
		}
		checkRegion(t, reg, SourceHeader)
		back, ok := r.LookupHeader(reg.String())
		if !ok || back.Country != reg.Country || back.ProvinceCode != reg.ProvinceCode ||
			back.Province != reg.Province || back.City != reg.City {
			t.Fatalf("LookupHeader(%q) = %+v, but LookupHeader(%q) = %+v, %v", v, reg, reg.String(), back, ok)
		}
	})
}

// FuzzLookupPhone feeds libphonenumber and the description parsing
// arbitrary numbers, in national format too.
func FuzzLookupPhone(f *testing.F) {
	for _, s := range []string{
		"+8613800138000", "13800138000", "010-62345678", "+86 755 1234 5678", "+864711234567", "+16502530000",
		"+852 2123 4567", "+800 1234 5678", "tel:+86-10-6234-5678;ext=12", "+", "+86", "00861062345678", "٠١٢٣",
	} {
		f.Add(s)
	}
	r := newResolver(f, Config{PhoneHeader: "X-Phone", DefaultPhoneRegion: "CN"})
	f.Fuzz(func(t *testing.T, phone string) {
		reg, ok := r.LookupPhone(phone)
		if !ok {
			return
		}
		checkRegion(t, reg, SourcePhone)
		if len(reg.Country) != 2 || !strings.Contains(strings.Join(reg.Names, "\n"), strings.ToLower(reg.Country)) {
			t.Fatalf("LookupPhone(%q) = %+v: country code missing", phone, reg)
		}
	})
}

// FuzzNewMatcher checks that any accepted value matches a region carrying
// that name, however it is spelt.
func FuzzNewMatcher(f *testing.F) {
	for _, s := range []string{"北京", "北京市", "CN-BJ", "  Mountain View ", "", " ", "市", "\u3000北京\u3000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		m, err := NewMatcher([]string{v})
		if (err != nil) != (strings.TrimSpace(v) == "") {
			t.Fatalf("NewMatcher(%q) error = %v", v, err)
		}
		if err != nil {
			return
		}
		var names nameSet
		names.add(v)
		if !m.Match(Region{Names: names.list}) {
			t.Fatalf("NewMatcher(%q) does not match Names %q", v, names.list)
		}
	})
}

func checkRegion(t *testing.T, reg Region, source string) {
	t.Helper()
	if reg.Source != source || len(reg.Names) == 0 {
		t.Fatalf("region %+v: want source %q and names", reg, source)
	}
	for _, n := range reg.Names {
		if n == "" || !utf8.ValidString(n) {
			t.Fatalf("region %+v: bad name %q", reg, n)
		}
	}
}
