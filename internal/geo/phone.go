package geo

import (
	"strings"
	"unicode/utf8"

	"github.com/nyaruka/phonenumbers"
	"golang.org/x/text/language"
)

// maxPhoneLen bounds the input handed to libphonenumber; a real number with
// spaces, dashes and an extension is far shorter.
const maxPhoneLen = 64

// LookupPhone returns the region of a phone number: its country from the
// calling code, and the place libphonenumber's offline geocoder gives for its
// prefix. Numbers without "+" are read in Config.DefaultPhoneRegion's
// national format; invalid numbers, and numbers that belong to no country
// (+800 and the like), are not found.
//
// For China (+86) the geocoder knows the fixed-line area codes (010 北京市,
// 0755 广东省深圳市) and mobile number blocks by their first seven digits
// (138 0013 → 北京市), in Chinese as a run-together 省+市 string and in
// English as "Shenzhen, Guangdong". LookupPhone splits these into province
// and city, so 北京市 becomes province 北京 and city 北京 and matches 北京.
// Blocks it has no data for (such as 199) resolve to the country only.
// Answers are cached by the exact string. It is safe for concurrent use.
func (r *Resolver) LookupPhone(phone string) (Region, bool) {
	if phone == "" || len(phone) > maxPhoneLen || !utf8.ValidString(phone) {
		return Region{}, false
	}
	if reg := r.phoneCache.get(phone); reg != nil {
		return *reg, reg.Names != nil
	}
	reg, ok := r.lookupPhone(phone)
	r.phoneCache.put(strings.Clone(phone), &reg) // phone may alias a request buffer
	return reg, ok
}

func (r *Resolver) lookupPhone(phone string) (Region, bool) {
	num, err := phonenumbers.Parse(phone, r.cfg.DefaultPhoneRegion)
	if err != nil || !phonenumbers.IsValidNumber(num) {
		return Region{}, false
	}
	region := phonenumbers.GetRegionCodeForNumber(num)
	if _, ok := r.cat.countries[region]; !ok {
		return Region{}, false // "001" (non-geographic) or "ZZ"
	}
	d := draft{country: region}
	for _, lang := range r.cat.phoneLangs(region) {
		desc, err := phonenumbers.GetGeocodingForNumber(num, lang)
		if err != nil || desc == "" || r.cat.isCountryName(desc, region, lang) {
			// The geocoder falls back to the country's name when it has
			// nothing finer; the country is already known.
			continue
		}
		r.cat.addPhoneDescription(&d, desc)
	}
	return r.cat.finish(d, SourcePhone)
}

// phoneLangs returns the geocoder languages to ask for a number of country,
// best first: the configured one and English, and for Chinese numbers also
// Simplified Chinese, first when the configured language is Chinese (the
// geocoder's zh_Hant data has no mainland places) and last otherwise, so
// that a rule saying 深圳 matches whatever the display language.
func (c *catalog) phoneLangs(country string) []string {
	switch {
	case country != "CN" || c.phoneLang == "zh":
		return []string{c.phoneLang, "en"}
	case c.base == "zh":
		return []string{"zh", c.phoneLang, "en"}
	}
	return []string{c.phoneLang, "en", "zh"}
}

// isCountryName reports whether desc, returned by the geocoder for lang,
// is only the country's name: its fallback when it has nothing finer.
func (c *catalog) isCountryName(desc, country, lang string) bool {
	if code, ok := c.countryByName[normalize(desc)]; ok && code == country {
		return true
	}
	if n, ok := c.phoneFallback[lang]; ok {
		if r, err := language.ParseRegion(country); err == nil && n.Name(r) == desc {
			return true
		}
	}
	return false
}

// addPhoneDescription adds one geocoder description to d. The geocoder
// writes Chinese places as 广东省深圳市 or 北京市 and other places as
// "City, Province" or "City, ST"; both forms are split into levels.
func (c *catalog) addPhoneDescription(d *draft, desc string) {
	if p, rest := c.provinces.splitChinese(desc); p != nil && d.country == "CN" {
		d.province = p
		if city := normalize(rest); city != "" {
			d.cityNames = append(d.cityNames, city)
		}
		return
	}
	if i := strings.Index(desc, "、"); i >= 0 {
		desc = desc[:i] // "台中、彰化": the first place named
	}
	city, prov, found := strings.Cut(desc, ", ")
	if !found {
		if d.country == "CN" {
			if p := c.provinces.lookup(desc); p != nil {
				d.province = p // "Beijing"
				return
			}
		}
		d.cityNames = append(d.cityNames, desc)
		return
	}
	if i := strings.LastIndex(prov, ", "); i >= 0 {
		prov = prov[i+2:]
	}
	d.cityNames = append(d.cityNames, city)
	switch {
	case d.country == "CN" && c.provinces.lookup(prov) != nil:
		d.province = c.provinces.lookup(prov)
	case isSubdivisionCode(prov):
		d.provinceCode = d.country + "-" + prov // "Mountain View, CA"
	default:
		d.provinceNames = append(d.provinceNames, prov)
	}
}

// isSubdivisionCode reports whether s looks like the part of an ISO 3166-2
// code after the country: one to three upper-case letters or digits.
func isSubdivisionCode(s string) bool {
	if len(s) == 0 || len(s) > 3 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}
