package geo

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
)

// place is one network of a test GeoIP database, with names in en and zh-CN.
type place struct {
	network              string
	country              string // ISO code
	countryEn, countryZh string
	sub                  string // subdivision ISO code, without the country
	subEn, subZh         string
	cityEn, cityZh       string
}

var (
	beijing = place{network: "1.2.3.0/24", country: "CN", countryEn: "China", countryZh: "中国",
		sub: "BJ", subEn: "Beijing", subZh: "北京市", cityEn: "Beijing", cityZh: "北京"}
	shanghai = place{network: "5.6.7.0/24", country: "CN", countryEn: "China", countryZh: "中国",
		sub: "SH", subEn: "Shanghai", subZh: "上海市", cityEn: "Shanghai", cityZh: "上海"}
	shenzhen = place{network: "5.6.8.0/24", country: "CN", countryEn: "China", countryZh: "中国",
		sub: "GD", subEn: "Guangdong", subZh: "广东", cityEn: "Shenzhen", cityZh: "深圳"}
	mountainView = place{network: "8.8.8.0/24", country: "US", countryEn: "United States", countryZh: "美国",
		sub: "CA", subEn: "California", subZh: "加利福尼亚州", cityEn: "Mountain View", cityZh: "山景城"}
	// beijingNoCity is a network MaxMind knows only to the province.
	beijingNoCity = place{network: "1.2.4.0/24", country: "CN", countryEn: "China", countryZh: "中国",
		sub: "BJ", subEn: "Beijing", subZh: "北京市"}
	// countryOnly is a network MaxMind knows only to the country.
	countryOnly = place{network: "2.2.2.0/24", country: "CN", countryEn: "China", countryZh: "中国"}
	// ipv6Place is an IPv6 network.
	ipv6Place = place{network: "2a00:1450:4001::/48", country: "DE", countryEn: "Germany", countryZh: "德国",
		sub: "BE", subEn: "Land Berlin", subZh: "柏林", cityEn: "Berlin", cityZh: "柏林"}
)

func names(en, zh string) mmdbtype.Map {
	return mmdbtype.Map{"en": mmdbtype.String(en), "zh-CN": mmdbtype.String(zh)}
}

// record builds a GeoIP2-City-shaped record, with the location and postal
// fields a real one has, so that decoding must skip them.
func (p place) record(i int) mmdbtype.Map {
	m := mmdbtype.Map{
		"continent": mmdbtype.Map{"code": mmdbtype.String("AS"), "names": names("Asia", "亚洲")},
		"country": mmdbtype.Map{
			"iso_code":   mmdbtype.String(p.country),
			"geoname_id": mmdbtype.Uint32(1814991 + i),
			"names":      names(p.countryEn, p.countryZh),
		},
		"location": mmdbtype.Map{
			"latitude":        mmdbtype.Float64(39.9 + float64(i)),
			"longitude":       mmdbtype.Float64(116.4),
			"accuracy_radius": mmdbtype.Uint16(50),
			"time_zone":       mmdbtype.String("Asia/Shanghai"),
		},
	}
	if p.sub != "" {
		m["subdivisions"] = mmdbtype.Slice{mmdbtype.Map{
			"iso_code": mmdbtype.String(p.sub),
			"names":    names(p.subEn, p.subZh),
		}}
	}
	if p.cityEn != "" {
		m["city"] = mmdbtype.Map{"geoname_id": mmdbtype.Uint32(1816670 + i), "names": names(p.cityEn, p.cityZh)}
		m["postal"] = mmdbtype.Map{"code": mmdbtype.String("100000")}
	}
	return m
}

// buildDB returns a MaxMind DB of the given type holding places.
func buildDB(t testing.TB, dbType string, places ...place) []byte {
	t.Helper()
	tree, err := mmdbwriter.New(mmdbwriter.Options{
		DatabaseType: dbType,
		Languages:    []string{"en", "zh-CN"},
		RecordSize:   28,
		BuildEpoch:   time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC).Unix(),
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range places {
		_, n, err := net.ParseCIDR(p.network)
		if err != nil {
			t.Fatal(err)
		}
		if err := tree.Insert(n, p.record(i)); err != nil {
			t.Fatalf("insert %s: %v", p.network, err)
		}
	}
	var buf bytes.Buffer
	if _, err := tree.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// renameOver writes data next to path and renames it over path, the way
// geoipupdate replaces a database.
func renameOver(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*.mmdb")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmp.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := tmp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		t.Fatal(err)
	}
}

// cityDB writes a City database with places to a new temporary directory
// and returns its path.
func cityDB(t testing.TB, places ...place) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "GeoLite2-City.mmdb")
	renameOver(t, path, buildDB(t, "GeoLite2-City", places...))
	return path
}

// newResolver returns a Resolver for cfg, closed when the test ends.
func newResolver(t testing.TB, cfg Config) *Resolver {
	t.Helper()
	r, err := New(cfg, nil)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// missingNames reports which of want are missing from r.Names.
func missingNames(r Region, want ...string) []string {
	var miss []string
	for _, w := range want {
		if !slices.Contains(r.Names, w) {
			miss = append(miss, w)
		}
	}
	return miss
}
