package tags

import (
	"context"
	"errors"
	"log/slog"

	"github.com/graygate/graygate/internal/attr"
)

// Resolver combines the configured sources into one answer per request. It
// is safe for concurrent use.
type Resolver struct {
	header string
	jwt    *JWT
	redis  *Redis
}

// Result is the tags of one request.
type Result struct {
	// Tags merges the sources; when one source alone supplied tags it is that
	// source's Set, shared and read-only.
	Tags Set
	// Status is Unknown if any configured source that applied failed, Known
	// if some source supplied tags, None otherwise.
	Status Status
	// Claims holds the verified token, or nil when there was no valid token.
	// The identity resolver can take the user id from Claims.Identity
	// rather than verify the token again.
	Claims *Claims
	// Err says why the status is Unknown: a malformed header, a refused
	// token (errors.Is with the Err* reasons) or a Redis lookup that did
	// not answer. Nil otherwise.
	Err error
}

// ErrRedisUnknown reports a Redis lookup that answered Unknown.
var ErrRedisUnknown = errors.New("redis: tags unknown (timeout, error or open breaker)")

// New builds the sources that cfg configures. logger may be nil.
func New(cfg Config, logger *slog.Logger) (*Resolver, error) {
	cfg.Defaults()
	if err := cfg.Validate("tags"); err != nil {
		return nil, err
	}
	r := &Resolver{header: cfg.Header}
	if cfg.JWT != nil {
		j, err := NewJWTWith(*cfg.JWT, JWTOptions{Logger: logger})
		if err != nil {
			return nil, err
		}
		r.jwt = j
	}
	if cfg.Redis != nil {
		rd, err := NewRedis(*cfg.Redis, logger)
		if err != nil {
			r.Close()
			return nil, err
		}
		r.redis = rd
	}
	return r, nil
}

// JWT returns the token verifier, or nil when none is configured.
func (r *Resolver) JWT() *JWT { return r.jwt }

// Redis returns the Redis source, or nil when none is configured; its
// Stats feed the metrics.
func (r *Resolver) Redis() *Redis { return r.redis }

// Resolve reads the tags of req. trusted says whether the peer may set the
// tags header (its address is a configured trusted proxy); from anyone else
// the header is ignored. uid keys the Redis lookup; when it is empty, the
// identity of a verified token is used.
//
// Sources are layered so that the more authoritative wins a name that
// appears twice: Redis (the profile store) first, then the trusted header,
// then the signed token. A source that is configured but absent from the
// request (no header, no token) is not a failure; one that was present and
// bad, or a Redis lookup that did not answer, makes the Status Unknown, so
// tag conditions fail closed.
func (r *Resolver) Resolve(ctx context.Context, req attr.Request, trusted bool, uid string) Result {
	return r.ResolveWith(ctx, req, trusted, uid, r.Token(req))
}

// Token is the outcome of verifying the token a request carries. The zero
// Token means there is none (or no verifier is configured).
type Token struct {
	// Claims holds the verified token; nil when there is none or it was
	// refused.
	Claims *Claims
	// Err says why a token the request carried was refused.
	Err error
}

// Token finds and verifies the request's token, without reading any other
// source. The identity resolver asks it for the token's identity before the
// user id is known, and hands the answer to ResolveWith once it is: looking
// Redis up then would key it by no user at all.
func (r *Resolver) Token(req attr.Request) Token {
	if r.jwt == nil {
		return Token{}
	}
	tok, ok := r.jwt.Token(req)
	if !ok {
		return Token{}
	}
	c, err := r.jwt.Verify(tok)
	if err != nil {
		return Token{Err: err}
	}
	return Token{Claims: &c}
}

// ResolveWith is Resolve with the request's token already verified by
// Token, so that it is verified once per request.
func (r *Resolver) ResolveWith(ctx context.Context, req attr.Request, trusted bool, uid string, tok Token) Result {
	var res Result
	var sets [3]Set
	failed := false

	switch {
	case tok.Err != nil:
		failed, res.Err = true, tok.Err
	case tok.Claims != nil:
		res.Claims = tok.Claims
		sets[2] = tok.Claims.Tags
		if uid == "" {
			uid = tok.Claims.Identity
		}
	}
	if r.header != "" && trusted {
		if v, ok := req.TrustedHeader(r.header); ok {
			s, err := ParseHeader(v)
			if err != nil {
				failed, res.Err = true, joinErr(res.Err, err)
			}
			sets[1] = s
		}
	}
	if r.redis != nil {
		s, st := r.redis.Get(ctx, uid)
		if st == Unknown {
			failed, res.Err = true, joinErr(res.Err, ErrRedisUnknown)
		}
		sets[0] = s
	}

	res.Tags = merge(sets[:])
	switch {
	case failed:
		res.Status = Unknown
	case len(res.Tags) > 0:
		res.Status = Known
	default:
		res.Status = None
	}
	return res
}

// merge layers sets, later ones winning. It shares the only non-empty set
// instead of copying it, so the common one-source case does not allocate.
func merge(sets []Set) Set {
	var only Set
	n, total := 0, 0
	for _, s := range sets {
		if len(s) > 0 {
			only = s
			n++
			total += len(s)
		}
	}
	if n <= 1 {
		return only
	}
	out := make(Set, total)
	for _, s := range sets {
		for k, v := range s {
			out[k] = v
		}
	}
	return out
}

// joinErr joins without allocating when there is only one error.
func joinErr(a, b error) error {
	if a == nil {
		return b
	}
	return errors.Join(a, b)
}

// Close releases the Redis connections and stops a JWKS fetch in flight,
// if any.
func (r *Resolver) Close() error {
	if r.jwt != nil {
		r.jwt.Close()
	}
	if r.redis != nil {
		return r.redis.Close()
	}
	return nil
}

// SourceOf says which source supplied tag in res, for the explain trace:
// "jwt", "header" or "redis", in the order Resolve lets them win. It parses
// the header again, so it is meant for explain, not the hot path.
func (r *Resolver) SourceOf(req attr.Request, trusted bool, res Result, tag string) string {
	if res.Claims != nil {
		if _, ok := res.Claims.Tags[tag]; ok {
			return "jwt"
		}
	}
	if r.header != "" && trusted {
		if v, ok := req.TrustedHeader(r.header); ok {
			if s, err := ParseHeader(v); err == nil {
				if _, ok := s[tag]; ok {
					return "header"
				}
			}
		}
	}
	if r.redis != nil {
		return "redis"
	}
	return ""
}
