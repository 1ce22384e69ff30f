// Package match compiles a rule's scope conditions into predicates over the
// attr.Request view. Seed 000 section 1.3 defines the first three: ua_contains,
// path_prefix and header_exists. A list inside one condition matches if any
// element matches; all present conditions must match.
package match

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/graygate/graygate/internal/geo"
	"github.com/graygate/graygate/internal/strict"
	"github.com/graygate/graygate/internal/tags"
)

// List is a list of strings that also accepts a single JSON string.
type List []string

// UnmarshalJSON accepts "x" as well as ["x", "y"].
func (l *List) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // leaves the zero value, as encoding/json does for null
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*l = List{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("expected a string or a list of strings")
	}
	*l = many
	return nil
}

// Conditions is the JSON shape of a rule's scope.
type Conditions struct {
	// UAContains matches when the User-Agent contains any of the strings.
	UAContains List `json:"ua_contains,omitempty"`
	// PathPrefix matches when the request path starts with any of the prefixes.
	PathPrefix List `json:"path_prefix,omitempty"`
	// HeaderExists matches when any of the named headers is present.
	HeaderExists List `json:"header_exists,omitempty"`
	// RegionIn matches when the request's region (country, province or
	// city, as a name or ISO code) is any of these (seed 004, 3.1.2).
	RegionIn List `json:"region_in,omitempty"`
	// Tags match when every condition on the user's tags holds (seed 004,
	// 3.1.3). Unknown tags (a source failed) match nothing; a user without
	// tags (every source answered) is one whose tags are all absent.
	Tags []TagCond `json:"tags,omitempty"`
}

// Validate reports every problem, each under path.
func (c *Conditions) Validate(path string) error {
	_, err := Compile(c, path, nil)
	return err
}

// Result is what one condition did, for the explain trace.
type Result struct {
	Condition string `json:"condition"`
	Want      any    `json:"want"`
	Got       string `json:"got"`
	Source    string `json:"source,omitempty"`
	Matched   bool   `json:"matched"`
}

// Predicate is a compiled scope. The zero Predicate matches everything. It
// is immutable and safe for concurrent use.
type Predicate struct {
	ua     []string
	prefix []string
	header []string
	region *geo.Matcher
	tags   []tagCond
	// NeedsRegion and NeedsTags say which costly attributes Match may resolve.
	NeedsRegion, NeedsTags bool
}

// Compile validates conditions under path and compiles them. tagTypes
// declares tag kinds ("number", "bool", "string") so that type mismatches
// are found now; undeclared tags are compared by the condition value's type.
func Compile(c *Conditions, path string, tagTypes map[string]string) (Predicate, error) {
	if c == nil {
		return Predicate{}, nil
	}
	var errs []error
	check := func(name string, l List) {
		for i, s := range l {
			if s == "" {
				errs = append(errs, strict.Errorf(strict.Index(strict.Join(path, name), i), "must not be empty"))
			}
		}
	}
	check("ua_contains", c.UAContains)
	check("path_prefix", c.PathPrefix)
	check("header_exists", c.HeaderExists)
	for i, p := range c.PathPrefix {
		if p != "" && !strings.HasPrefix(p, "/") {
			errs = append(errs, strict.Errorf(strict.Index(strict.Join(path, "path_prefix"), i), "must start with \"/\", got %q", p))
		}
	}
	p := Predicate{
		ua:     append([]string(nil), c.UAContains...),
		prefix: append([]string(nil), c.PathPrefix...),
		header: append([]string(nil), c.HeaderExists...),
	}
	if c.RegionIn != nil {
		m, err := geo.NewMatcher(c.RegionIn)
		if err != nil {
			errs = append(errs, strict.Prefix(strict.Join(path, "region_in"), err))
		} else if len(c.RegionIn) == 0 {
			errs = append(errs, strict.Errorf(strict.Join(path, "region_in"), "must list at least one region"))
		} else {
			p.region, p.NeedsRegion = &m, true
		}
	}
	for i, tc := range c.Tags {
		t, err := compileTag(tc, strict.Index(strict.Join(path, "tags"), i), tagTypes)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p.tags = append(p.tags, t)
		p.NeedsTags = true
	}
	if len(errs) > 0 {
		return Predicate{}, errors.Join(errs...)
	}
	return p, nil
}

// Empty reports whether the predicate matches every request.
func (p *Predicate) Empty() bool {
	return len(p.ua) == 0 && len(p.prefix) == 0 && len(p.header) == 0 && p.region == nil && len(p.tags) == 0
}

// Match reports whether the request is in scope. Cheap conditions run
// first; the region and tags are resolved only if they are still needed.
// When trace is non-nil every evaluated condition is appended to it;
// evaluation stops at the first failure.
func (p *Predicate) Match(f *Facts, trace *[]Result) bool {
	r := f.Req
	if len(p.prefix) > 0 {
		path := r.Path()
		ok := false
		for _, s := range p.prefix {
			if strings.HasPrefix(path, s) {
				ok = true
				break
			}
		}
		if trace != nil {
			*trace = append(*trace, Result{Condition: "path_prefix", Want: p.prefix, Got: path, Matched: ok})
		}
		if !ok {
			return false
		}
	}
	if len(p.ua) > 0 {
		ua, _ := r.Header("User-Agent")
		ok := false
		for _, s := range p.ua {
			if strings.Contains(ua, s) {
				ok = true
				break
			}
		}
		if trace != nil {
			*trace = append(*trace, Result{Condition: "ua_contains", Want: p.ua, Got: ua, Matched: ok})
		}
		if !ok {
			return false
		}
	}
	if len(p.header) > 0 {
		ok := false
		got := ""
		for _, h := range p.header {
			if _, present := r.Header(h); present {
				ok = true
				got = h
				break
			}
		}
		if trace != nil {
			*trace = append(*trace, Result{Condition: "header_exists", Want: p.header, Got: got, Matched: ok})
		}
		if !ok {
			return false
		}
	}
	if p.region != nil {
		reg, found := f.Region()
		ok := found && p.region.Match(reg)
		if trace != nil {
			got := "unknown"
			if found {
				got = reg.String()
			}
			*trace = append(*trace, Result{Condition: "region_in", Want: p.region.Values(), Got: got, Source: reg.Source, Matched: ok})
		}
		if !ok {
			return false
		}
	}
	if len(p.tags) > 0 {
		res := f.Tags()
		// None is an answer: every source replied and the user has no
		// tags, so not_exists holds, as it does for a user with other
		// tags. Unknown (a source failed) matches nothing, and neither
		// does anything without a tag source (see Sources).
		known := f.src != nil && f.src.Tags != nil && res.Status != tags.Unknown
		for i := range p.tags {
			c := &p.tags[i]
			ok := known && c.eval(res.Tags)
			if trace != nil {
				got := res.Status.String()
				if f.src == nil || f.src.Tags == nil {
					got = "no tag source configured"
				} else if known {
					if v, present := res.Tags[c.tag]; present {
						got = v
					} else {
						got = "(absent)"
					}
				} else if res.Err != nil {
					got += ": " + res.Err.Error()
				}
				src := ""
				if f.src != nil && f.src.Tags != nil {
					src = f.src.Tags.SourceOf(f.Req, f.trusted(), res, c.tag)
				}
				*trace = append(*trace, Result{Condition: "tag", Want: c.text, Got: got, Source: src, Matched: ok})
			}
			if !ok {
				return false
			}
		}
	}
	return true
}

// Segments returns the first path segment of every path_prefix, when each
// prefix pins one down ("/api/user/" pins "api"; "/", "/ap" and "/api" pin
// none, since "/api" also matches "/apiary"). The router uses it to index
// rules by the request's first path segment. ok is false when some prefix
// pins nothing or the predicate has no path condition.
func (p *Predicate) Segments() (segs []string, ok bool) {
	if len(p.prefix) == 0 {
		return nil, false
	}
	for _, pre := range p.prefix {
		s, ok := FirstSegment(pre)
		if !ok {
			return nil, false
		}
		segs = append(segs, s)
	}
	return segs, true
}

// FirstSegment returns "api" for "/api/…": the text between the leading
// slash and the next one. ok is false when there is no second slash.
func FirstSegment(path string) (string, bool) {
	if len(path) < 2 || path[0] != '/' {
		return "", false
	}
	i := strings.IndexByte(path[1:], '/')
	if i < 0 {
		return "", false
	}
	return path[1 : 1+i], true
}
