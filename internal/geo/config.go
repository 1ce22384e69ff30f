package geo

import (
	"errors"
	"slices"

	"github.com/nyaruka/phonenumbers"
	"golang.org/x/text/language"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/strict"
)

// Source names, in the order Config.Sources uses by default.
const (
	SourceHeader = "header"
	SourceGeoIP  = "geoip"
	SourcePhone  = "phone"
)

// DefaultLanguage is the language of Region's display names when
// Config.Language is empty. English is always the fallback.
const DefaultLanguage = "zh-CN"

// Config says where a request's region comes from. The zero Config resolves
// nothing, which turns region conditions into conditions that never match.
type Config struct {
	// Header is a request header that a CDN or load balancer sets to the
	// client's region, such as "X-Region". It is honoured only when the
	// request came through a trusted proxy, since any client can send it.
	// Its value is country[/province[/city]], each level an ISO code or a
	// name, or a single name or code: "CN/广东/深圳", "CN-BJ", "北京", "US".
	Header string `json:"header,omitempty"`
	// GeoIPPath is a MaxMind DB file (GeoIP2 or GeoLite2 City or Country, or
	// a compatible one). It is reloaded when the file changes, including
	// when a new file is renamed over it; a file that fails to load or
	// verify keeps the previous database in service.
	GeoIPPath string `json:"geoip_db,omitempty"`
	// Language is the BCP 47 tag for display names; default "zh-CN".
	// Matching does not depend on it: names in it and in English both match.
	Language string `json:"language,omitempty"`
	// PhoneHeader is a request header carrying the user's phone number, as
	// the client's own app sends it. Like a user ID header it is the
	// client's word; prefer PhoneClaim where a signed token carries the number.
	PhoneHeader string `json:"phone_header,omitempty"`
	// PhoneClaim is a JWT claim carrying the user's phone number. The
	// identity layer verifies the token and reads the claim; this package
	// only keeps its name.
	PhoneClaim string `json:"phone_claim,omitempty"`
	// DefaultPhoneRegion is the ISO country whose national format applies
	// to numbers written without "+", such as "CN" for 13800138000. Without
	// it only international numbers resolve.
	DefaultPhoneRegion string `json:"default_phone_region,omitempty"`
	// Sources is the order in which sources are tried; the first one that
	// yields a region wins. Default: every configured source in the order
	// header, geoip, phone.
	Sources []string `json:"sources,omitempty"`
}

// configured reports whether the source name has what it needs in c.
func (c *Config) configured(source string) bool {
	switch source {
	case SourceHeader:
		return c.Header != ""
	case SourceGeoIP:
		return c.GeoIPPath != ""
	case SourcePhone:
		return c.PhoneHeader != "" || c.PhoneClaim != ""
	}
	return false
}

// sources returns the effective source order.
func (c *Config) sources() []string {
	if len(c.Sources) > 0 {
		return c.Sources
	}
	var out []string
	for _, s := range []string{SourceHeader, SourceGeoIP, SourcePhone} {
		if c.configured(s) {
			out = append(out, s)
		}
	}
	return out
}

// language returns the configured language or the default.
func (c *Config) language() string {
	if c.Language == "" {
		return DefaultLanguage
	}
	return c.Language
}

// Validate reports every problem, each under path (such as "region").
// It does not open the GeoIP file; New does.
func (c *Config) Validate(path string) error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, strict.Errorf(strict.Join(path, field), format, args...))
	}
	for _, f := range []struct{ name, v string }{{"header", c.Header}, {"phone_header", c.PhoneHeader}} {
		if f.v != "" && !attr.ValidToken(f.v) {
			add(f.name, "must be a header name (RFC 9110 token), got %q", f.v)
		}
	}
	if c.Language != "" {
		if _, err := language.Parse(c.Language); err != nil {
			add("language", "must be a BCP 47 language tag such as \"zh-CN\" or \"en\", got %q", c.Language)
		}
	}
	if c.DefaultPhoneRegion != "" && phonenumbers.GetCountryCodeForRegion(c.DefaultPhoneRegion) == 0 {
		add("default_phone_region", "must be an upper-case ISO 3166-1 country code with a calling code, such as \"CN\", got %q", c.DefaultPhoneRegion)
	}
	seen := map[string]int{}
	for i, s := range c.Sources {
		p := strict.Index(strict.Join(path, "sources"), i)
		switch {
		case !slices.Contains([]string{SourceHeader, SourceGeoIP, SourcePhone}, s):
			errs = append(errs, strict.Errorf(p, "must be \"header\", \"geoip\" or \"phone\", got %q", s))
		case seen[s] > 0:
			errs = append(errs, strict.Errorf(p, "duplicates sources[%d] %q", seen[s]-1, s))
		case !c.configured(s):
			errs = append(errs, strict.Errorf(p, "%q is listed but not configured (%s)", s, needs(s)))
		}
		if seen[s] == 0 {
			seen[s] = i + 1
		}
	}
	return errors.Join(errs...)
}

func needs(source string) string {
	switch source {
	case SourceHeader:
		return "set header"
	case SourceGeoIP:
		return "set geoip_db"
	}
	return "set phone_header or phone_claim"
}
