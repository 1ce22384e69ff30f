package tracing

import (
	"strings"

	"go.opentelemetry.io/otel/baggage"
)

// BaggageHeader is the W3C baggage header.
const BaggageHeader = "baggage"

// GrayTagKey is the baggage member that carries the gray color.
const GrayTagKey = "gray.tag"

// GrayTag returns the value of the gray.tag member of a W3C baggage header
// value (percent-decoded), and whether there is one with a value. The
// router calls it, with trust_gray_tag, for a request from a trusted peer
// that has no X-Gray-Tag: the color is honoured as X-Gray-Tag is. Other
// members are not parsed, so a malformed one elsewhere does not hide the
// color. It allocates only when the member is present.
func GrayTag(header string) (string, bool) {
	for rest := header; rest != ""; {
		var m string
		m, rest, _ = strings.Cut(rest, ",")
		if memberKey(m) != GrayTagKey {
			continue
		}
		b, err := baggage.Parse(strings.TrimSpace(m))
		if err != nil {
			return "", false
		}
		if v := b.Member(GrayTagKey).Value(); v != "" {
			return v, true
		}
		return "", false
	}
	return "", false
}

// memberKey returns the key of one list-member ("key=value;props"),
// without the optional whitespace around it.
func memberKey(m string) string {
	k, _, _ := strings.Cut(m, "=")
	return strings.TrimSpace(k)
}

// AppendBaggage appends to dst the baggage header value the upstream
// request carries: the members of inbound (the client's baggage header,
// "" if none) except any gray.tag, byte for byte and in order, then
// gray.tag=<tag> when tag is not empty. An empty result means the request
// goes without a baggage header. It does not allocate when dst has room
// and tag needs no percent-encoding (letters, digits, "-", ".", "_", "~").
// The data plane calls it for every forwarded request that has a baggage
// header or a tag, tracing on or off: an untrusted client's gray.tag must
// never reach a service that believes it.
func AppendBaggage(dst []byte, inbound, tag string) []byte {
	start := len(dst)
	for rest := inbound; rest != ""; {
		var m string
		m, rest, _ = strings.Cut(rest, ",")
		m = strings.Trim(m, " \t")
		if m == "" || memberKey(m) == GrayTagKey {
			continue
		}
		if len(dst) > start {
			dst = append(dst, ',')
		}
		dst = append(dst, m...)
	}
	if tag == "" {
		return dst
	}
	if len(dst) > start {
		dst = append(dst, ',')
	}
	if plainValue(tag) {
		dst = append(dst, GrayTagKey+"="...)
		return append(dst, tag...)
	}
	m, err := baggage.NewMemberRaw(GrayTagKey, tag)
	if err != nil {
		return dst[:max(start, len(dst)-1)] // cannot happen: the key is valid and any value is encodable
	}
	return append(dst, m.String()...)
}

// plainValue reports whether v needs no percent-encoding in a baggage value.
func plainValue(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '.', c == '_', c == '~':
		default:
			return false
		}
	}
	return true
}
