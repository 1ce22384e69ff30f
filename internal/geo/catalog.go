package geo

import (
	"golang.org/x/text/language"
	"golang.org/x/text/language/display"
)

// catalog holds what a Resolver knows independently of any source: the
// configured language in each library's spelling, country names from CLDR
// (through golang.org/x/text) and the Chinese provinces. It is built once in
// New and never modified afterwards, so lookups share it without locks.
type catalog struct {
	lang      string // as configured, the key MaxMind uses: "zh-CN"
	base      string // base language: "zh"
	phoneLang string // libphonenumber's data file name: "zh", "zh_Hant", "ja"

	countries     map[string]countryNames // "CN" → 中国, China
	countryByName map[string]string       // normalised name → "CN"
	provinces     *provinceIndex
	// phoneFallback names countries the way libphonenumber's geocoder does
	// when it has nothing finer, per language it is asked in.
	phoneFallback map[string]display.Namer
}

type countryNames struct {
	local, en string
	aliases   []string
}

// notPlaces are codes that CLDR counts as countries but that no source
// reports as where a request comes from.
var notPlaces = map[string]bool{"EZ": true, "UN": true}

// countryAliases are names in common use that CLDR does not give as the
// country's name in every configuration: CLDR calls Hong Kong
// 中国香港特别行政区 where MaxMind says 香港, and a zh-TW configuration
// would otherwise know China only as 中國.
var countryAliases = map[string][]string{
	"CN": {"中国", "中國"},
	"HK": {"香港", "Hong Kong"},
	"MO": {"澳门", "澳門", "Macao", "Macau"},
	"TW": {"台湾", "臺灣"},
	"GB": {"UK"},
}

func newCatalog(lang string) (*catalog, error) {
	tag, err := language.Parse(lang)
	if err != nil {
		return nil, err
	}
	base, _ := tag.Base()
	script, _ := tag.Script()
	c := &catalog{
		lang:          lang,
		base:          base.String(),
		phoneLang:     base.String(),
		countries:     make(map[string]countryNames, 300),
		countryByName: make(map[string]string, 600),
		provinces:     newProvinceIndex(),
	}
	// libphonenumber names its files by base language, except for
	// Traditional Chinese, which it keeps in zh_Hant.
	if c.base == "zh" && script.String() == "Hant" {
		c.phoneLang = "zh_Hant"
	}
	local := display.Regions(tag)
	en := display.Regions(language.English)
	var code [2]byte
	for a := byte('A'); a <= 'Z'; a++ {
		for b := byte('A'); b <= 'Z'; b++ {
			code[0], code[1] = a, b
			r, err := language.ParseRegion(string(code[:]))
			if err != nil || !r.IsCountry() || r.String() != string(code[:]) || notPlaces[r.String()] {
				continue
			}
			// CLDR keeps withdrawn codes (DD, FX, UK, ZR) as countries
			// with their successor's name; they would steal the name.
			if r.Canonicalize() != r {
				continue
			}
			n := countryNames{local: local.Name(r), en: en.Name(r), aliases: countryAliases[r.String()]}
			if n.en == "" {
				continue // withdrawn and split, such as AN and CS
			}
			if n.local == "" {
				n.local = n.en
			}
			c.countries[r.String()] = n
			for _, name := range append([]string{n.local, n.en}, n.aliases...) {
				c.countryByName[normalize(name)] = r.String()
			}
		}
	}
	c.phoneFallback = map[string]display.Namer{}
	for _, l := range []string{c.phoneLang, "zh", "en"} {
		t, err := language.Parse(l)
		if err != nil {
			t = language.English // as libphonenumber does
		}
		c.phoneFallback[l] = display.Regions(t)
	}
	return c, nil
}

// countryCode returns the ISO code for s, which may be a code ("cn") or a
// country's name in the configured language or English.
func (c *catalog) countryCode(s string) (string, bool) {
	if len(s) == 2 {
		up := string([]byte{upper(s[0]), upper(s[1])})
		if _, ok := c.countries[up]; ok {
			return up, true
		}
	}
	code, ok := c.countryByName[normalize(s)]
	return code, ok
}

func upper(b byte) byte {
	if 'a' <= b && b <= 'z' {
		return b - 'a' + 'A'
	}
	return b
}

// pick returns the name in the configured language, then in another
// variant of the same base language ("zh-CN" for "zh", the smallest key if
// there are several, so that the choice is stable), then in English, from a
// MaxMind names map.
func (c *catalog) pick(names map[string]string) (local, en string) {
	en = names["en"]
	if local = names[c.lang]; local != "" {
		return local, en
	}
	best := ""
	for k, v := range names {
		if v == "" || (best != "" && k > best) {
			continue
		}
		if t, err := language.Parse(k); err == nil {
			if b, _ := t.Base(); b.String() == c.base {
				best, local = k, v
			}
		}
	}
	if local == "" {
		local = en
	}
	return local, en
}
