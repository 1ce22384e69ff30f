package match

import (
	"context"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/geo"
	"github.com/graygate/graygate/internal/tags"
)

// Sources resolve the request attributes that cost something: the region
// and the user's tags. A nil field means that attribute is not configured
// (region and tag conditions then never match). Sources are immutable and
// shared by every request of a snapshot.
type Sources struct {
	Geo  *geo.Resolver
	Tags *tags.Resolver
}

// Facts is one request as the conditions see it: the attribute view, the
// user id, and the region and tags, each resolved at most once and only
// when a condition asks. A Facts belongs to one request and is not safe for
// concurrent use.
type Facts struct {
	Req attr.Request
	UID string
	// Anonymous says UID is an anonymous visitor's cookie id. The client
	// picks that cookie's value, so it buckets the visitor but names no
	// user: uid whitelists do not match it and the tag store is not asked
	// for its tags (a visitor sending gg_uid=10001 is not user 10001, even
	// where identity.sources is [] or identity.jwt is "only").
	Anonymous bool
	src       *Sources

	regionDone, regionOK bool
	region               geo.Region

	tagsDone bool
	tags     tags.Result

	// tokDone and tok hold the request's verified token, which the user id
	// may come from and so is read before UID is known (JWTIdentity).
	tokDone bool
	tok     tags.Token
}

// NewFacts starts the facts of one request.
func NewFacts(req attr.Request, uid string, src *Sources) Facts {
	return Facts{Req: req, UID: uid, src: src}
}

// trusted says whether headers set by a CDN or load balancer (region,
// tags) are believed: only from a trusted peer.
func (f *Facts) trusted() bool { return f.Req.PeerTrusted() }

// Tags returns the user's tags and whether they are known. Sources that
// fail (Redis down, a bad token) make them Unknown: tag conditions then do
// not match, and the request is still served. The tags are looked up for
// UID, which must be set by then, unless it is Anonymous (then only under
// a verified token's identity); the token, if JWTIdentity already verified
// it, is not verified again.
func (f *Facts) Tags() tags.Result {
	if !f.tagsDone {
		f.tagsDone = true
		if f.src == nil || f.src.Tags == nil {
			f.tags = tags.Result{Status: tags.None}
		} else {
			uid := f.UID
			if f.Anonymous {
				uid = ""
			}
			f.tags = f.src.Tags.ResolveWith(context.Background(), f.Req, f.trusted(), uid, f.token())
		}
	}
	return f.tags
}

// token returns the request's verified token, verifying it on first use.
func (f *Facts) token() tags.Token {
	if !f.tokDone {
		f.tokDone = true
		if f.src != nil && f.src.Tags != nil {
			f.tok = f.src.Tags.Token(f.Req)
		}
	}
	return f.tok
}

// JWTIdentity returns the identity claim of the request's verified token.
// It reads the token alone, not the tags: it is asked before the user id
// is known, and tags resolved then would miss the Redis hash of a user
// whose id comes from another source (identity.jwt "first" with no token).
func (f *Facts) JWTIdentity() (string, bool) {
	if c := f.token().Claims; c != nil && c.Identity != "" {
		return c.Identity, true
	}
	return "", false
}

// Region returns the request's region, from the sources configured in order.
func (f *Facts) Region() (geo.Region, bool) {
	if !f.regionDone {
		f.regionDone = true
		if f.src != nil && f.src.Geo != nil {
			in := f.src.Geo.InputFrom(f.Req, f.trusted(), f.claim)
			f.region, f.regionOK = f.src.Geo.Resolve(in)
		}
	}
	return f.region, f.regionOK
}

// claim looks a phone claim up in the verified token, verifying it if
// needed.
func (f *Facts) claim(string) (string, bool) {
	if f.src == nil || f.src.Tags == nil {
		return "", false
	}
	if c := f.token().Claims; c != nil && c.Phone != "" {
		return c.Phone, true
	}
	return "", false
}
