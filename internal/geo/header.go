package geo

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxHeaderLen bounds a region header value; "CN/新疆维吾尔自治区/克孜勒苏柯尔克孜自治州"
// is 61 bytes.
const maxHeaderLen = 256

// LookupHeader parses the value of the trusted region header. The format is
//
//	country[/province[/city]]   CN/广东/深圳, US/CA/Mountain View, CN//深圳
//	country-subdivision[/city]  CN-GD/深圳, CN-BJ
//	Chinese province/city       广东/深圳, 北京/朝阳
//	country                     CN, cn, 中国, China
//	Chinese province            北京, 广东省, Guangdong
//	city                        深圳 (any other single name)
//
// Each level is an ISO code or a name in any language; empty levels are
// unknown. A province of China is recognised by its code (BJ) or any name
// (北京, 北京市, Beijing) and gains its other names. Values that are empty,
// longer than 256 bytes, not UTF-8, or hold control characters or more than
// three levels are not found. Answers are cached by the exact value. It is
// safe for concurrent use.
func (r *Resolver) LookupHeader(value string) (Region, bool) {
	if value == "" || len(value) > maxHeaderLen {
		return Region{}, false
	}
	if reg := r.headerCache.get(value); reg != nil {
		return *reg, reg.Names != nil
	}
	var reg Region
	ok := false
	if d, parsed := r.cat.parseHeader(value); parsed {
		reg, ok = r.cat.finish(d, SourceHeader)
	}
	if !ok {
		reg = Region{}
	}
	r.headerCache.put(strings.Clone(value), &reg) // value may alias a request buffer
	return reg, ok
}

func (c *catalog) parseHeader(v string) (draft, bool) {
	var d draft
	if v == "" || len(v) > maxHeaderLen || !utf8.ValidString(v) {
		return d, false
	}
	for _, r := range v {
		if unicode.IsControl(r) {
			return d, false
		}
	}
	parts := strings.SplitN(v, "/", 4)
	if len(parts) > 3 {
		return d, false
	}
	empty := true
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
		empty = empty && parts[i] == ""
	}
	if empty {
		return d, false
	}
	if len(parts) == 1 {
		c.headerSingle(&d, parts[0])
		return d, true
	}
	rest := parts[1:]
	if country, sub, ok := c.splitSubdivision(parts[0]); ok {
		if len(rest) > 1 {
			return d, false // CN-GD/广东/深圳 names the province twice
		}
		d.country = country
		c.headerProvince(&d, sub)
	} else if p := c.chineseProvince(parts[0]); p != nil && (len(parts) == 2 || parts[2] == "") {
		d.country, d.province = "CN", p // 广东/深圳: province/city
		rest = rest[:1]
	} else {
		c.headerCountry(&d, parts[0])
		c.headerProvince(&d, rest[0])
		rest = rest[1:]
	}
	if len(rest) > 0 && rest[len(rest)-1] != "" {
		d.cityNames = []string{rest[len(rest)-1]}
	}
	return d, true
}

// headerSingle reads a value with one level, which may be any of them.
func (c *catalog) headerSingle(d *draft, s string) {
	if country, sub, ok := c.splitSubdivision(s); ok {
		d.country = country
		c.headerProvince(d, sub)
		return
	}
	if code, ok := c.countryCode(s); ok {
		d.country = code
		return
	}
	if p := c.provinces.lookup(s); p != nil {
		d.country, d.province = "CN", p
		return
	}
	d.cityNames = []string{s}
}

// chineseProvince returns the Chinese province s names, unless s is also
// a country's name or code.
func (c *catalog) chineseProvince(s string) *province {
	if _, ok := c.countryCode(s); ok {
		return nil
	}
	return c.provinces.lookup(s)
}

func (c *catalog) headerCountry(d *draft, s string) {
	if s == "" {
		return
	}
	if code, ok := c.countryCode(s); ok {
		d.country = code
		return
	}
	d.countryNames = []string{s} // unknown to CLDR, but a rule may still name it
}

func (c *catalog) headerProvince(d *draft, s string) {
	if s == "" {
		return
	}
	if d.country == "CN" {
		if p := c.provinces.lookup(s); p != nil {
			d.province = p
			return
		}
		if p := c.provinces.lookupCode(s); p != nil {
			d.province = p
			return
		}
	}
	if up := strings.ToUpper(s); d.country != "" && isSubdivisionCode(up) {
		d.provinceCode = d.country + "-" + up
		return
	}
	d.provinceNames = []string{s}
}

// splitSubdivision splits an ISO 3166-2 code such as "CN-GD" or "us-ca".
func (c *catalog) splitSubdivision(s string) (country, sub string, ok bool) {
	if len(s) < 4 || s[2] != '-' {
		return "", "", false
	}
	sub = strings.ToUpper(s[3:])
	if !isSubdivisionCode(sub) {
		return "", "", false
	}
	country = string([]byte{upper(s[0]), upper(s[1])})
	if _, known := c.countries[country]; !known {
		return "", "", false
	}
	return country, sub, true
}
