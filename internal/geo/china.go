package geo

import "strings"

// province is one provincial-level division of mainland China with the
// names the sources spell it with: the short Chinese name (北京), the full
// one (北京市), English and any other common spelling. Hong Kong, Macao and
// Taiwan are left out on purpose: MaxMind and libphonenumber both report
// them as countries of their own (HK, MO, TW), so they match by those codes.
type province struct {
	code         string // ISO 3166-2 subdivision code without the "CN-" prefix
	zh, zhFull   string
	en           string
	aliases      []string
	municipality bool // 直辖市: the province is also the city
}

// chinaProvinces follows ISO 3166-2:CN as revised in 2017 (the letter codes
// MaxMind's GeoIP2 databases use) and GB/T 2260 for the Chinese names.
var chinaProvinces = []province{
	{code: "BJ", zh: "北京", zhFull: "北京市", en: "Beijing", municipality: true},
	{code: "TJ", zh: "天津", zhFull: "天津市", en: "Tianjin", municipality: true},
	{code: "HE", zh: "河北", zhFull: "河北省", en: "Hebei"},
	{code: "SX", zh: "山西", zhFull: "山西省", en: "Shanxi"},
	{code: "NM", zh: "内蒙古", zhFull: "内蒙古自治区", en: "Inner Mongolia", aliases: []string{"Nei Mongol", "Inner Mongolia Autonomous Region"}},
	{code: "LN", zh: "辽宁", zhFull: "辽宁省", en: "Liaoning"},
	{code: "JL", zh: "吉林", zhFull: "吉林省", en: "Jilin"},
	{code: "HL", zh: "黑龙江", zhFull: "黑龙江省", en: "Heilongjiang"},
	{code: "SH", zh: "上海", zhFull: "上海市", en: "Shanghai", municipality: true},
	{code: "JS", zh: "江苏", zhFull: "江苏省", en: "Jiangsu"},
	{code: "ZJ", zh: "浙江", zhFull: "浙江省", en: "Zhejiang"},
	{code: "AH", zh: "安徽", zhFull: "安徽省", en: "Anhui"},
	{code: "FJ", zh: "福建", zhFull: "福建省", en: "Fujian"},
	{code: "JX", zh: "江西", zhFull: "江西省", en: "Jiangxi"},
	{code: "SD", zh: "山东", zhFull: "山东省", en: "Shandong"},
	{code: "HA", zh: "河南", zhFull: "河南省", en: "Henan"},
	{code: "HB", zh: "湖北", zhFull: "湖北省", en: "Hubei"},
	{code: "HN", zh: "湖南", zhFull: "湖南省", en: "Hunan"},
	{code: "GD", zh: "广东", zhFull: "广东省", en: "Guangdong"},
	{code: "GX", zh: "广西", zhFull: "广西壮族自治区", en: "Guangxi", aliases: []string{"Guangxi Zhuang Autonomous Region"}},
	{code: "HI", zh: "海南", zhFull: "海南省", en: "Hainan"},
	{code: "CQ", zh: "重庆", zhFull: "重庆市", en: "Chongqing", municipality: true},
	{code: "SC", zh: "四川", zhFull: "四川省", en: "Sichuan"},
	{code: "GZ", zh: "贵州", zhFull: "贵州省", en: "Guizhou"},
	{code: "YN", zh: "云南", zhFull: "云南省", en: "Yunnan"},
	{code: "XZ", zh: "西藏", zhFull: "西藏自治区", en: "Tibet", aliases: []string{"Xizang", "Tibet Autonomous Region"}},
	{code: "SN", zh: "陕西", zhFull: "陕西省", en: "Shaanxi"},
	{code: "GS", zh: "甘肃", zhFull: "甘肃省", en: "Gansu"},
	{code: "QH", zh: "青海", zhFull: "青海省", en: "Qinghai"},
	{code: "NX", zh: "宁夏", zhFull: "宁夏回族自治区", en: "Ningxia", aliases: []string{"Ningxia Hui Autonomous Region"}},
	{code: "XJ", zh: "新疆", zhFull: "新疆维吾尔自治区", en: "Xinjiang", aliases: []string{"Xinjiang Uyghur Autonomous Region"}},
}

// names returns every spelling of p, the ISO code included.
func (p *province) names() []string {
	out := make([]string, 0, 5+len(p.aliases))
	out = append(out, "CN-"+p.code, p.zh, p.zhFull, p.en)
	return append(out, p.aliases...)
}

// name returns p's name in the language whose base is lang ("zh" or other).
func (p *province) name(lang string) string {
	if lang == "zh" {
		return p.zh
	}
	return p.en
}

// provinceIndex finds a Chinese province by code or by any of its names.
// It is built once per Resolver and never modified afterwards.
type provinceIndex struct {
	byKey  map[string]*province // normalised names and "cn-xx" codes
	byCode map[string]*province // bare upper-case codes such as "BJ"
	// prefixes holds the Chinese names longest first, for splitting
	// libphonenumber's run-together descriptions such as 广东省深圳市.
	prefixes []prefixEntry
}

type prefixEntry struct {
	prefix string
	p      *province
}

func newProvinceIndex() *provinceIndex {
	ix := &provinceIndex{
		byKey:  make(map[string]*province, len(chinaProvinces)*6),
		byCode: make(map[string]*province, len(chinaProvinces)),
	}
	for i := range chinaProvinces {
		p := &chinaProvinces[i]
		for _, n := range p.names() {
			ix.byKey[normalize(n)] = p
		}
		ix.byCode[p.code] = p
		ix.prefixes = append(ix.prefixes, prefixEntry{p.zhFull, p}, prefixEntry{p.zh, p})
	}
	// Longest first so that 内蒙古自治区 wins over 内蒙古.
	for i := 1; i < len(ix.prefixes); i++ {
		for j := i; j > 0 && len(ix.prefixes[j].prefix) > len(ix.prefixes[j-1].prefix); j-- {
			ix.prefixes[j], ix.prefixes[j-1] = ix.prefixes[j-1], ix.prefixes[j]
		}
	}
	return ix
}

// lookup finds a province by its full code ("CN-BJ") or by a name in any
// spelling (北京, 北京市, Beijing).
func (ix *provinceIndex) lookup(s string) *province {
	if s == "" {
		return nil
	}
	return ix.byKey[normalize(s)]
}

// lookupCode finds a province by the part of its code after "CN-", as
// MaxMind stores it in subdivisions[0].iso_code. Bare codes collide with
// country codes (BJ is also Benin), so only call it when the country is CN.
func (ix *provinceIndex) lookupCode(code string) *province {
	return ix.byCode[strings.ToUpper(code)]
}

// splitChinese splits a Chinese description such as 广东省深圳市 or
// 西藏那曲地区、嘉黎县 into its province and the first place named after it.
func (ix *provinceIndex) splitChinese(desc string) (*province, string) {
	for _, e := range ix.prefixes {
		if rest, ok := strings.CutPrefix(desc, e.prefix); ok {
			if i := strings.Index(rest, "、"); i >= 0 {
				rest = rest[:i]
			}
			return e.p, rest
		}
	}
	return nil, ""
}
