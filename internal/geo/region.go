// Package geo resolves a request's region (country, province, city) from a
// trusted header, a MaxMind GeoIP database or a phone number, and matches it
// against region_in lists. It implements seed 004 section 3.1.2 (地域路由):
// traffic from pilot cities such as 北京, 上海 and 深圳 goes to the gray
// cluster. The region is only a filter: the user's hash bucket never depends
// on it, so a user who travels keeps the same bucket (section 3.1.2's 注意事项).
//
// A Region carries, besides its display fields, Names: every code and name at
// every level, normalised. Matching is then a set intersection with no
// knowledge of levels or languages, and it is the same code for every source:
// 北京 in a rule matches 北京市 from libphonenumber, 北京 from GeoIP, the
// code CN-BJ and the English Beijing.
//
// The GeoIP database is read into memory rather than memory-mapped. A mapped
// file that someone rewrites in place (cp over it instead of mv) changes under
// the reader or faults it with SIGBUS; an in-memory copy cannot, and an
// old reader can be dropped for the garbage collector instead of being closed
// under in-flight lookups. The cost is the file's size in heap. Each load
// also runs the reader's full Verify, so a truncated or corrupt replacement
// is refused before it serves a single lookup; on a full GeoLite2-City that
// takes a moment, spent by the reloading goroutine, not by requests.
//
// Every source's answers are cached (GeoIP by record, phone numbers and
// header values by their exact string) in bounded two-generation maps, so
// the steady state is allocation-free and parsing a phone number, which
// costs libphonenumber tens of microseconds of regular expressions, is paid
// once per number.
package geo

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Region is where one request comes from. It is immutable once returned:
// Names may be shared between lookups and must not be modified.
type Region struct {
	// Country is the ISO 3166-1 alpha-2 code, such as "CN"; empty if unknown.
	Country string `json:"country,omitempty"`
	// CountryName is the country's name in the configured language.
	CountryName string `json:"country_name,omitempty"`
	// ProvinceCode is the ISO 3166-2 code, such as "CN-BJ"; empty if unknown.
	ProvinceCode string `json:"province_code,omitempty"`
	// Province is the first-level subdivision (province, state) in the
	// configured language; Chinese provinces use their short name (广东).
	Province string `json:"province,omitempty"`
	// City is the city in the configured language.
	City string `json:"city,omitempty"`
	// Source is the source that answered: "header", "geoip" or "phone".
	Source string `json:"source"`
	// Names holds every code and name at every level (city first), in the
	// configured language, in English and, for China, in Chinese, each
	// passed through the same normalisation as Matcher's values.
	Names []string `json:"names,omitempty"`
}

// String formats r the way the region header is written,
// country/province/city, with empty levels left empty, so that
// LookupHeader(r.String()) gives r's levels back.
func (r Region) String() string {
	c := r.Country
	if c == "" {
		c = r.CountryName
	}
	p := r.Province
	if p == "" && r.ProvinceCode != "" {
		_, p, _ = strings.Cut(r.ProvinceCode, "-")
	}
	switch {
	case r.City != "":
		return c + "/" + p + "/" + r.City
	case p != "":
		return c + "/" + p
	case r.Country == "" && c != "":
		return c + "/" // a lone name would read as a city
	}
	return c
}

// adminSuffixes are the generic Chinese administrative suffixes that sources
// disagree on: libphonenumber says 北京市 and 广东省, MaxMind's zh-CN names
// say 北京 and 广东, people write either. Stripping them on both sides of a
// comparison lets any spelling match. Longest first.
var adminSuffixes = [...]string{"特别行政区", "自治区", "省", "市"}

// normalize maps s to the form used in Names and by Matcher: spaces trimmed
// and collapsed, lower case, and one generic Chinese administrative suffix
// removed when at least two characters remain (so 沙市 stays whole).
func normalize(s string) string {
	s = strings.TrimSpace(s)
	if needsFold(s) {
		s = strings.ToLower(strings.Join(strings.Fields(s), " "))
	}
	for _, suf := range adminSuffixes {
		if rest, ok := strings.CutSuffix(s, suf); ok && utf8.RuneCountInString(rest) >= 2 {
			return rest
		}
	}
	return s
}

// needsFold reports whether s has upper case letters or runs of spaces.
func needsFold(s string) bool {
	prevSpace := false
	for _, c := range s {
		if unicode.IsUpper(c) {
			return true
		}
		sp := unicode.IsSpace(c)
		if sp && (prevSpace || c != ' ') {
			return true
		}
		prevSpace = sp
	}
	return false
}

// draft collects what one source found before the catalog fills in the
// rest. Name lists hold the configured language first.
type draft struct {
	country       string   // ISO 3166-1 alpha-2, upper case
	countryNames  []string // as the source spelled them
	province      *province
	provinceCode  string // ISO 3166-2, upper case
	provinceNames []string
	cityNames     []string
}

// finish completes d into a Region: country and Chinese province names in
// the configured language and English, the municipality rule, and Names.
// Names lists the city first, then the province, then the country, since
// region_in lists mostly name cities and Match stops at the first hit.
func (c *catalog) finish(d draft, source string) (Region, bool) {
	r := Region{Source: source, Country: d.country}
	cn, knownCountry := c.countries[d.country]
	r.CountryName = cn.local
	if r.CountryName == "" {
		r.CountryName = first(d.countryNames)
	}

	p := d.province
	if p == nil && d.country == "CN" {
		if code, ok := strings.CutPrefix(d.provinceCode, "CN-"); ok {
			p = c.provinces.lookupCode(code)
		}
		for _, n := range d.provinceNames {
			if p != nil {
				break
			}
			p = c.provinces.lookup(n)
		}
	}
	r.ProvinceCode = d.provinceCode
	r.Province = first(d.provinceNames)
	cityNames := d.cityNames
	if p != nil {
		r.ProvinceCode = "CN-" + p.code
		if c.base == "zh" || r.Province == "" {
			r.Province = p.name(c.base)
		}
		if p.municipality && len(cityNames) == 0 {
			cityNames = []string{p.name(c.base), p.zh, p.en}
		}
	}
	r.City = first(cityNames)

	var names nameSet
	names.add(cityNames...)
	names.add(r.ProvinceCode)
	names.add(d.provinceNames...)
	if p != nil {
		names.add(p.names()...)
	}
	names.add(d.country)
	names.add(d.countryNames...)
	if knownCountry {
		names.add(cn.local, cn.en)
		names.add(cn.aliases...)
	}
	r.Names = names.list
	if len(r.Names) == 0 {
		return Region{}, false
	}
	return r, true
}

func first(s []string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// nameSet is a small ordered set of normalised names.
type nameSet struct{ list []string }

func (s *nameSet) add(names ...string) {
	for _, n := range names {
		n = normalize(n)
		if n == "" {
			continue
		}
		dup := false
		for _, have := range s.list {
			if have == n {
				dup = true
				break
			}
		}
		if !dup {
			s.list = append(s.list, n)
		}
	}
}
