// Package tags supplies user tags (profile labels such as vip=true or
// multi_loan_index=0.82) as a request attribute for tag routing, seed 004
// §3.1.3 ("标签路由": route only users whose multi_loan_index > 0.7 and who
// are not blacklisted).
//
// Tags come from three sources, each optional:
//
//   - a request header such as X-User-Tags, read only when the caller says the
//     peer is trusted (the same rule httputil.ReverseProxy applies to
//     X-Forwarded-*), parsed by ParseHeader;
//   - the claims of a verified JWT (JWT), which can also carry the identity;
//     this is the secure source for production;
//   - a Redis hash per user (Redis), behind a bounded TTL cache, a short
//     timeout and a circuit breaker.
//
// Resolver layers the configured sources per request (Redis, then the
// trusted header, then the token: the more authoritative wins a name) and
// hands back the verified claims, so the identity resolver need not verify
// the token again. Package redistest starts a throwaway redis-server for
// tests of this and other packages.
//
// Values stay raw strings: typed comparison (gt 0.7, eq false) is the
// matcher's job. Every lookup also reports a Status, and Unknown is the
// zero value on purpose: when a source failed, a condition such as
// "blacklist_flag eq false" must not match by accident, so callers fail
// closed unless a source positively answered.
//
// Seed 004 §3.3 asks that a degraded dependency never take the gateway down
// with it: a slow or dead Redis costs a request at most the configured
// timeout, turns its tags Unknown and is counted, and the breaker then skips
// Redis entirely until a single probe succeeds.
package tags

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Set maps a tag name to its raw value. A Set returned by this package may be
// shared (for example with the Redis cache) and must not be modified.
type Set map[string]string

// Status says how much a lookup knows.
type Status uint8

const (
	// Unknown means a source failed (timeout, outage, open breaker, a
	// malformed header, a refused token): the user's tags are not known and
	// tag conditions must not match. It is the zero value so that a forgotten
	// status fails closed.
	Unknown Status = iota
	// None means every source answered and there are no tags.
	None
	// Known means the sources answered and the Set holds the tags.
	Known
)

var statusNames = [...]string{Unknown: "unknown", None: "none", Known: "known"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// MarshalText writes the status name, for logs and the explain endpoint.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Limits on the header format. They bound the work and memory one request
// can cause; a header beyond them is malformed.
const (
	MaxHeaderLen = 4096
	MaxTags      = 64
	MaxKeyLen    = 64
	MaxValueLen  = 256
)

// ParseHeader parses a tags header value.
//
// The format is a list of name=value pairs separated by ';' or ','
// ("vip=true;multi_loan_index=0.82"). A bare name is a flag: "vip" is
// "vip=true", so "X-User-Tags: vip, beta" tags the user with both. Spaces
// and tabs around names and values are ignored, and so are empty pairs (a
// trailing ';'). A name is 1..64 bytes of [A-Za-z0-9_.:-]; a value is
// 0..256 bytes of printable ASCII other than ';' and ',' (it may contain
// '=' and inner spaces). A repeated name, a bad byte or a header over the
// limits is an error: a trusted peer that sends garbage is a bug to
// surface, not to guess around.
// An empty or blank header gives a nil Set and no error.
//
// ParseHeader copies v once, so the Set does not alias the caller's buffer
// (fasthttp reuses header memory after the request).
func ParseHeader(v string) (Set, error) {
	if len(v) > MaxHeaderLen {
		return nil, fmt.Errorf("tags header: %d bytes, more than %d", len(v), MaxHeaderLen)
	}
	n := 0
	for i := 0; i < len(v); i++ {
		if v[i] == '=' {
			n++
		}
	}
	if n == 0 && blank(v) {
		return nil, nil
	}
	v = strings.Clone(v)
	s := make(Set, min(n, MaxTags))
	for pair := 0; v != ""; pair++ {
		end := strings.IndexAny(v, ";,")
		var seg string
		if end < 0 {
			seg, v = v, ""
		} else {
			seg, v = v[:end], v[end+1:]
		}
		seg = trimOWS(seg)
		if seg == "" {
			continue
		}
		k, val, ok := strings.Cut(seg, "=")
		if !ok {
			val = "true" // a flag
		}
		k, val = trimOWS(k), trimOWS(val)
		if err := checkKey(k); err != nil {
			return nil, fmt.Errorf("tags header: pair %d: %w", pair, err)
		}
		if err := checkValue(val); err != nil {
			return nil, fmt.Errorf("tags header: tag %q: %w", k, err)
		}
		if _, dup := s[k]; dup {
			return nil, fmt.Errorf("tags header: tag %q given twice", k)
		}
		if len(s) == MaxTags {
			return nil, fmt.Errorf("tags header: more than %d tags", MaxTags)
		}
		s[k] = val
	}
	if len(s) == 0 {
		return nil, nil
	}
	return s, nil
}

// Format writes s in the canonical header form: pairs sorted by name, joined
// by ';', without spaces. ParseHeader(Format(s)) equals s for every Set that
// ParseHeader accepts; Format refuses a Set that the header cannot carry
// (for example a Redis value with a ';'), so a propagated header is never
// misread downstream.
func Format(s Set) (string, error) {
	if len(s) > MaxTags {
		return "", fmt.Errorf("tags: %d tags, more than %d", len(s), MaxTags)
	}
	keys := make([]string, 0, len(s))
	size := 0
	for k, v := range s {
		if err := checkKey(k); err != nil {
			return "", err
		}
		if err := checkValue(v); err != nil {
			return "", fmt.Errorf("tag %q: %w", k, err)
		}
		if v != trimOWS(v) {
			return "", fmt.Errorf("tag %q: value has leading or trailing spaces", k)
		}
		keys = append(keys, k)
		size += len(k) + len(v) + 2
	}
	slices.Sort(keys)
	var b strings.Builder
	b.Grow(size)
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(s[k])
	}
	if b.Len() > MaxHeaderLen {
		return "", fmt.Errorf("tags: formatted header is %d bytes, more than %d", b.Len(), MaxHeaderLen)
	}
	return b.String(), nil
}

// blank reports whether v holds nothing but separators and whitespace.
func blank(v string) bool {
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case ' ', '\t', ';', ',':
		default:
			return false
		}
	}
	return true
}

// trimOWS strips the optional whitespace of RFC 9110 §5.6.3 (SP and HTAB).
func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

var errEmptyKey = errors.New("empty tag name")

// ValidKey reports whether k can name a tag: 1..64 bytes of [A-Za-z0-9_.:-].
// Rule validation uses it so that a rule cannot name a tag no source can
// deliver.
func ValidKey(k string) bool { return checkKey(k) == nil }

func checkKey(k string) error {
	if k == "" {
		return errEmptyKey
	}
	if len(k) > MaxKeyLen {
		return fmt.Errorf("tag name of %d bytes, more than %d", len(k), MaxKeyLen)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return fmt.Errorf("tag name %q: byte %q not allowed", k, c)
		}
	}
	return nil
}

func checkValue(v string) error {
	if len(v) > MaxValueLen {
		return fmt.Errorf("value of %d bytes, more than %d", len(v), MaxValueLen)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x20 || c > 0x7e || c == ';' || c == ',' {
			return fmt.Errorf("value byte %q not allowed", c)
		}
	}
	return nil
}
