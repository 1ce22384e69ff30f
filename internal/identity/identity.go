// Package identity answers "who is this request" from an ordered list of
// sources (header, cookie, query), falling back to an anonymous id. The
// default order is seed 000's: header X-User-Id, cookie user_id, query
// user_id. Seed 000 fell back to "ip_" + client IP; graygate's default
// fallback instead issues a random id in a gg_uid cookie, so an anonymous
// visitor keeps the same buckets behind NAT and across networks.
//
// Every value a client supplies (a header, a cookie, a query argument, the
// anonymous cookie, or a verified token's identity claim) is limited to
// Config.MaxLength bytes (default 256). A longer value is refused rather
// than cut: a cut id would silently merge distinct users into one bucket,
// and the identity is kept by the per-identity rate limiter, so its length
// is client-controlled memory. The length is that of the decoded value, the
// string the rest of the gateway would keep. Ids the gateway makes itself
// (an issued anonymous id, "ip_" + address) are short and never refused.
package identity

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/strict"
)

// Source is one place to look for the user id. Exactly one field is set.
type Source struct {
	Header string `json:"header,omitempty"`
	Cookie string `json:"cookie,omitempty"`
	Query  string `json:"query,omitempty"`
}

// Config is the identity section of the config file.
type Config struct {
	// Sources are tried in order; the first non-empty value wins. Unset
	// means DefaultSources; an empty list means none (always anonymous).
	Sources []Source `json:"sources,omitempty"`
	// Anonymous is the fallback: "cookie" (default) or "ip".
	Anonymous string `json:"anonymous,omitempty"`
	// AnonymousCookie names the cookie that carries an issued id (default gg_uid).
	AnonymousCookie string `json:"anonymous_cookie,omitempty"`
	// JWT takes the identity from a verified token (configured under
	// targeting.tags.jwt): "first" tries it before the sources, "only"
	// ignores the sources, so a spoofed X-User-Id counts for nothing.
	JWT string `json:"jwt,omitempty"`
	// MaxLength is the longest identity value accepted, in bytes (default
	// DefaultMaxLength). A request offering a longer one is answered 400.
	MaxLength int `json:"max_length,omitempty"`
	// IPv6Prefix is how many leading bits of an IPv6 client address make
	// its address id (anonymous: ip, and the per-identity rate limit's key
	// for a client that keeps no anonymous cookie): 64 gives a whole /64,
	// which one host or subscriber usually holds and can rotate through,
	// one id. Default 128: the whole address. IPv4 addresses are whole.
	IPv6Prefix int `json:"ipv6_prefix,omitempty"`
}

// SourceJWT names identities taken from a verified token.
const SourceJWT = "jwt"

// Defaults used when the config leaves them empty.
var (
	DefaultSources = []Source{{Header: "X-User-Id"}, {Cookie: "user_id"}, {Query: "user_id"}}
)

const (
	// DefaultMaxLength is Config.MaxLength's default: room for any UUID,
	// email address or numeric id, far below a header's 16 KiB.
	DefaultMaxLength = 256
	// MinIPv6Prefix bounds Config.IPv6Prefix from below: a shorter prefix
	// (a registry's allocation) would put unrelated networks in one id.
	MinIPv6Prefix = 32
	// MaxMaxLength bounds Config.MaxLength: every identity is a key of the
	// rate limiter, the experiment store and the exposure log, and no
	// user id, email address or token subject needs more.
	MaxMaxLength = 4096
	// DefaultAnonymousCookie is the cookie an anonymous visitor's id lives in.
	DefaultAnonymousCookie = "gg_uid"
	// SourceAnonymousCookie and SourceAnonymousIP name the fallbacks.
	SourceAnonymousCookie = "anonymous-cookie"
	SourceAnonymousIP     = "anonymous-ip"
)

// Effective returns c with its defaults filled in, as NewResolver reads
// it: unset sources are DefaultSources (an empty list stays empty: no
// source), and the anonymous fallback, its cookie and the maximum length
// take their defaults. Two configs with the same Effective resolve alike.
func (c Config) Effective() Config {
	if c.Sources == nil {
		c.Sources = slices.Clone(DefaultSources)
	}
	if c.Anonymous == "" {
		c.Anonymous = "cookie"
	}
	if c.AnonymousCookie == "" {
		c.AnonymousCookie = DefaultAnonymousCookie
	}
	if c.MaxLength == 0 {
		c.MaxLength = DefaultMaxLength
	}
	if c.IPv6Prefix == 0 {
		c.IPv6Prefix = 128
	}
	return c
}

// Validate reports every problem under path.
func (c *Config) Validate(path string) error {
	var errs []error
	for i, s := range c.Sources {
		p := strict.Index(strict.Join(path, "sources"), i)
		n := 0
		for _, v := range []string{s.Header, s.Cookie, s.Query} {
			if v != "" {
				n++
			}
		}
		if n != 1 {
			errs = append(errs, strict.Errorf(p, "set exactly one of header, cookie or query"))
		}
		if s.Header != "" && !attr.ValidToken(s.Header) {
			errs = append(errs, strict.Errorf(strict.Join(p, "header"), "invalid header name %q", s.Header))
		}
		if s.Cookie != "" && !attr.ValidToken(s.Cookie) {
			errs = append(errs, strict.Errorf(strict.Join(p, "cookie"), "invalid cookie name %q", s.Cookie))
		}
	}
	switch c.Anonymous {
	case "", "cookie", "ip":
	default:
		errs = append(errs, strict.Errorf(strict.Join(path, "anonymous"), "must be \"cookie\" or \"ip\", got %q", c.Anonymous))
	}
	if c.JWT != "" && c.JWT != "first" && c.JWT != "only" {
		errs = append(errs, strict.Errorf(strict.Join(path, "jwt"), "must be \"first\" or \"only\", got %q", c.JWT))
	}
	if c.MaxLength < 0 || c.MaxLength > MaxMaxLength {
		errs = append(errs, strict.Errorf(strict.Join(path, "max_length"), "must be 1..%d bytes (0 is the default, %d), got %d", MaxMaxLength, DefaultMaxLength, c.MaxLength))
	}
	if c.IPv6Prefix != 0 && (c.IPv6Prefix < MinIPv6Prefix || c.IPv6Prefix > 128) {
		errs = append(errs, strict.Errorf(strict.Join(path, "ipv6_prefix"), "must be %d..128 bits (0 is the default, 128: the whole address), got %d", MinIPv6Prefix, c.IPv6Prefix))
	}
	if c.AnonymousCookie != "" && !attr.ValidToken(c.AnonymousCookie) {
		errs = append(errs, strict.Errorf(strict.Join(path, "anonymous_cookie"), "invalid cookie name %q", c.AnonymousCookie))
	}
	return errors.Join(errs...)
}

type source struct {
	kind  byte // 'h', 'c', 'q'
	name  string
	label string
	// what names the source in a refusal: "X-User-Id", cookie "user_id".
	what string
}

// Resolver is a compiled Config. It is immutable and safe for concurrent use.
type Resolver struct {
	// JWT is "", "first" or "only" (see Config.JWT); the caller consults the
	// token before calling Resolve, which then skips the sources for "only".
	JWT     string
	sources []source
	anonIP  bool
	cookie  string
	random  io.Reader
	maxLen  int
	v6Bits  uint8
}

// NewResolver compiles a validated config. random supplies bytes for issued
// ids; nil means crypto/rand.
func NewResolver(c Config, random io.Reader) *Resolver {
	if random == nil {
		random = rand.Reader
	}
	srcs := c.Sources
	if srcs == nil {
		// Unset: seed 000's order. An explicit empty list means none:
		// every request is anonymous (no client-supplied id is believed).
		srcs = DefaultSources
	}
	r := &Resolver{anonIP: c.Anonymous == "ip", cookie: c.AnonymousCookie, random: random, JWT: c.JWT, maxLen: c.MaxLength}
	if r.cookie == "" {
		r.cookie = DefaultAnonymousCookie
	}
	if r.maxLen <= 0 {
		r.maxLen = DefaultMaxLength
	}
	r.v6Bits = 128
	if c.IPv6Prefix > 0 {
		r.v6Bits = uint8(c.IPv6Prefix)
	}
	if c.JWT == "only" {
		srcs = nil
	}
	for _, s := range srcs {
		switch {
		case s.Header != "":
			name := http.CanonicalHeaderKey(s.Header)
			r.sources = append(r.sources, source{'h', name, "header:" + name, fmt.Sprintf("%q", name)})
		case s.Cookie != "":
			r.sources = append(r.sources, source{'c', s.Cookie, "cookie:" + s.Cookie, fmt.Sprintf("cookie %q", s.Cookie)})
		case s.Query != "":
			r.sources = append(r.sources, source{'q', s.Query, "query:" + s.Query, fmt.Sprintf("query %q", s.Query)})
		}
	}
	return r
}

// MaxLength returns the longest identity value the resolver accepts.
func (r *Resolver) MaxLength() int { return r.maxLen }

// Resolve returns the request's identity. It only allocates when it has to
// issue a new anonymous id, build an "ip_" id, or refuse a value over
// MaxLength (the ID's Refused is then set and its Value empty).
func (r *Resolver) Resolve(req attr.Request) ID {
	for i := range r.sources {
		s := &r.sources[i]
		var v string
		switch s.kind {
		case 'h':
			// A field value excludes the whitespace around it (RFC 9110,
			// section 5.5). The HTTP/1.1 parser drops it but an HTTP/2
			// request hands it over, so without the trim " 42" over h2
			// would be another user, in another bucket, than 42 over
			// HTTP/1.1 or explain.
			v, _ = req.Header(s.name)
			v = strings.Trim(v, " \t")
		case 'c':
			v, _ = req.Cookie(s.name)
		case 'q':
			v, _ = req.Query(s.name)
		}
		if v != "" {
			if len(v) > r.maxLen {
				return r.refuse(s.label, s.what, len(v))
			}
			return ID{Value: v, Source: s.label}
		}
	}
	if r.anonIP {
		return ID{Value: string(AppendAddressID(nil, req.ClientIP(), r.v6Bits)), Source: SourceAnonymousIP, IPv6Prefix: r.v6Bits}
	}
	if v, ok := req.Cookie(r.cookie); ok && v != "" {
		if len(v) > r.maxLen {
			id := r.refuse(SourceAnonymousCookie, fmt.Sprintf("cookie %q", r.cookie), len(v))
			id.Cookie = r.cookie
			return id
		}
		return ID{Value: v, Source: SourceAnonymousCookie, Cookie: r.cookie}
	}
	var b [16]byte
	if _, err := io.ReadFull(r.random, b[:]); err != nil {
		// Without randomness fall back to the seed's behaviour rather than fail.
		return ID{Value: string(AppendAddressID(nil, req.ClientIP(), r.v6Bits)), Source: SourceAnonymousIP, IPv6Prefix: r.v6Bits}
	}
	return ID{Value: hex.EncodeToString(b[:]), Source: SourceAnonymousCookie, Issued: true, Cookie: r.cookie, IPv6Prefix: r.v6Bits}
}

// AppendAddressID appends the id anonymous: ip gives a client at ip to
// dst: "ip_" and the address, "ip_unknown" without one. An IPv6 address
// is cut to its first v6Bits bits (Config.IPv6Prefix) when that is under
// 128, and written as its prefix: "ip_2001:db8:1:2::/64". The per-identity
// rate limit keys a client that keeps no anonymous cookie by it too.
func AppendAddressID(dst []byte, ip netip.Addr, v6Bits uint8) []byte {
	dst = append(dst, "ip_"...)
	if !ip.IsValid() {
		return append(dst, "unknown"...)
	}
	if ip.Is6() && !ip.Is4In6() && v6Bits > 0 && v6Bits < 128 {
		if p, err := ip.WithZone("").Prefix(int(v6Bits)); err == nil {
			return p.AppendTo(dst)
		}
	}
	return ip.AppendTo(dst)
}

// Claim returns the identity taken from a verified token's identity claim
// v, refused like any other value when it is over MaxLength: a signed
// token is no reason to keep an unbounded string.
func (r *Resolver) Claim(v string) ID {
	if len(v) > r.maxLen {
		return r.refuse(SourceJWT, "claim of the verified token", len(v))
	}
	return ID{Value: v, Source: SourceJWT}
}

func (r *Resolver) refuse(label, what string, n int) ID {
	return ID{Source: label, Refused: &Refusal{
		Reason:  ReasonTooLong,
		Message: fmt.Sprintf("identity %s is %d bytes, over identity.max_length %d", what, n, r.maxLen),
	}}
}
