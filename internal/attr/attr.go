// Package attr defines the small request view that identity, match and
// router read. It exists so that the decision engine never sees a fasthttp
// or net/http type: the data plane adapts its own request to Request, and
// explain decides through that same adapter (proxy.Proxy.View), so that an
// explained request is seen exactly as a live one; unit tests use Map.
package attr

import (
	"math"
	"net/netip"
	"strconv"
	"strings"
)

// Request is the read-only attribute view of one incoming request.
//
// Implementations may return strings that alias request buffers; callers
// must not keep them after the request has been answered.
type Request interface {
	Method() string
	Host() string
	Path() string
	// Header looks a header up case-insensitively: its first field line.
	Header(name string) (string, bool)
	// TrustedHeader looks up a header that only a trusted proxy should set
	// (see PeerTrusted): its last field line. A proxy that appends its own
	// line after one the client sent (as it appends to X-Forwarded-For)
	// puts the value to believe last, and the client's forgery first.
	TrustedHeader(name string) (string, bool)
	// Cookie returns the decoded value of the named cookie.
	Cookie(name string) (string, bool)
	// Query returns the decoded value of the named query argument.
	Query(name string) (string, bool)
	// ClientIP is the client address after trusted-proxy resolution.
	ClientIP() netip.Addr
	// PeerTrusted reports whether the TCP peer is one of the configured
	// trusted proxies. Headers that only a proxy should set (a CDN's
	// region, a gateway's user tags, an east-west hop's X-Gray-Tag) are
	// believed only when it is true. It is part of the contract, not an
	// optional extra found by type assertion, because a view that forgot it
	// silently turned every trusted header off for live traffic.
	PeerTrusted() bool
}

// Map is a Request backed by plain maps. Header keys are matched
// case-insensitively; cookie and query keys exactly.
type Map struct {
	MethodV string
	HostV   string
	PathV   string
	Headers map[string]string
	Cookies map[string]string
	Queries map[string]string
	IP      netip.Addr
	// Trusted says the TCP peer is a trusted proxy (see Request.PeerTrusted).
	Trusted bool
}

func (m *Map) Method() string { return m.MethodV }
func (m *Map) Host() string   { return m.HostV }
func (m *Map) Path() string   { return m.PathV }

func (m *Map) Header(name string) (string, bool) {
	if v, ok := m.Headers[name]; ok {
		return v, true
	}
	for k, v := range m.Headers {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

// TrustedHeader is Header: a Map holds one line per header.
func (m *Map) TrustedHeader(name string) (string, bool) { return m.Header(name) }

func (m *Map) Cookie(name string) (string, bool) { v, ok := m.Cookies[name]; return v, ok }
func (m *Map) Query(name string) (string, bool)  { v, ok := m.Queries[name]; return v, ok }
func (m *Map) ClientIP() netip.Addr              { return m.IP }

// PeerTrusted reports whether the peer is a trusted proxy.
func (m *Map) PeerTrusted() bool { return m.Trusted }

// ValidFieldValue reports whether v may be an HTTP field value (RFC 9110
// section 5.5): no control characters other than HTAB. The admin API's
// explain and the rules' coloring values (which go out in headers) use it.
func ValidFieldValue(v string) bool {
	return !strings.ContainsFunc(v, func(r rune) bool { return (r < ' ' && r != '\t') || r == 0x7f })
}

// ValidToken reports whether s is an RFC 9110 token, the grammar of header
// names and (RFC 6265) cookie names. Config validation uses it wherever a
// header or cookie is named.
func ValidToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '!' || c == '#' || c == '$' || c == '%' || c == '&' || c == '\'' || c == '*' ||
			c == '+' || c == '-' || c == '.' || c == '^' || c == '_' || c == '`' || c == '|' || c == '~':
		default:
			return false
		}
	}
	return true
}

// ParseDecimal reads s as a plain decimal number, the way a person writes
// one in a header or a tag: an optional sign, digits with an optional
// fraction (".5" and "5." too), and an optional exponent ("1e3"). It
// refuses what strconv.ParseFloat accepts beyond that: digit separators
// ("1_0" is not 10), hexadecimal floats ("0x1p3"), "Inf", "NaN", and
// values too large for a float64 ("1e999"). Tag comparisons and the
// experiments' reported values read numbers through it.
func ParseDecimal(s string) (float64, bool) {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := 0
	for ; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
		digits++
	}
	if i < len(s) && s[i] == '.' {
		for i++; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
			digits++
		}
	}
	if digits == 0 {
		return 0, false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		exp := 0
		for ; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
			exp++
		}
		if exp == 0 {
			return 0, false
		}
	}
	if i != len(s) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}
