package mirror

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/graygate/graygate/internal/attr"
)

// A field path names one part of an answer that the diff compares:
//
//	status                  the status code
//	headers.<name>          one response header, name in lower case
//	body                    the whole body (compared by hash unless JSON)
//	body.items[2].price     a JSON value: object keys after ".", array
//	                        indexes in brackets
//	body["a.b"]             an object key that is not a plain name (it
//	                        holds ".", "[", "]", a quote or is empty),
//	                        quoted as a Go string
//
// An ignore path has the same form and also ignores everything under it;
// "[*]" matches any array index, so "body.items[*].updated_at" ignores the
// field in every element.

// seg is one segment of a path: an object key, an array index, or (in an
// ignore path only) any index.
type seg struct {
	key   string
	index int
	kind  byte // 'k' key, 'i' index, '*' any index
}

func keySeg(k string) seg { return seg{key: k, kind: 'k'} }
func indexSeg(i int) seg  { return seg{index: i, kind: 'i'} }

// plainKey reports whether k can be written after a ".".
func plainKey(k string) bool {
	return k != "" && !strings.ContainsAny(k, ".[]\"")
}

// appendPath renders segs (the first is the root: status, headers, body).
func appendPath(b []byte, segs []seg) []byte {
	for i, s := range segs {
		switch {
		case s.kind == 'i':
			b = append(b, '[')
			b = strconv.AppendInt(b, int64(s.index), 10)
			b = append(b, ']')
		case s.kind == '*':
			b = append(b, "[*]"...)
		case i == 0:
			b = append(b, s.key...)
		case plainKey(s.key):
			b = append(b, '.')
			b = append(b, s.key...)
		default:
			b = append(b, '[')
			b = strconv.AppendQuote(b, s.key)
			b = append(b, ']')
		}
	}
	return b
}

// parsePath parses a path of the form above. wildcard allows "[*]".
func parsePath(p string, wildcard bool) ([]seg, error) {
	var segs []seg
	i := strings.IndexAny(p, ".[")
	root := p
	if i >= 0 {
		root = p[:i]
	} else {
		i = len(p)
	}
	switch root {
	case "status", "headers", "body":
	default:
		return nil, fmt.Errorf("must start with \"status\", \"headers.\" or \"body\", got %q", p)
	}
	segs = append(segs, keySeg(root))
	rest := p[i:]
	for rest != "" {
		switch rest[0] {
		case '.':
			rest = rest[1:]
			j := strings.IndexAny(rest, ".[")
			if j < 0 {
				j = len(rest)
			}
			k := rest[:j]
			if !plainKey(k) {
				return nil, fmt.Errorf("empty or invalid name after \".\" in %q", p)
			}
			segs = append(segs, keySeg(k))
			rest = rest[j:]
		case '[':
			if strings.HasPrefix(rest, "[\"") {
				q, err := strconv.QuotedPrefix(rest[1:])
				if err != nil || !strings.HasPrefix(rest[1+len(q):], "]") {
					return nil, fmt.Errorf("invalid quoted name in %q", p)
				}
				k, _ := strconv.Unquote(q)
				segs = append(segs, keySeg(k))
				rest = rest[1+len(q)+1:]
				continue
			}
			j := strings.IndexByte(rest, ']')
			if j < 0 {
				return nil, fmt.Errorf("unclosed \"[\" in %q", p)
			}
			in := rest[1:j]
			if in == "*" && wildcard {
				segs = append(segs, seg{kind: '*'})
			} else {
				n, err := strconv.Atoi(in)
				if err != nil || n < 0 || in != strconv.Itoa(n) {
					return nil, fmt.Errorf("array index must be a non-negative number or *, got [%s] in %q", in, p)
				}
				segs = append(segs, indexSeg(n))
			}
			rest = rest[j+1:]
		default:
			return nil, fmt.Errorf("invalid path %q", p)
		}
	}
	switch root {
	case "status":
		if len(segs) > 1 {
			return nil, fmt.Errorf("\"status\" has no parts, got %q", p)
		}
	case "headers":
		if len(segs) > 2 || len(segs) == 2 && (segs[1].kind != 'k' || !attr.ValidToken(segs[1].key)) {
			return nil, fmt.Errorf("must be headers.<header name>, got %q", p)
		}
		if len(segs) == 2 {
			segs[1].key = strings.ToLower(segs[1].key)
		}
	}
	return segs, nil
}

// Ignore is a compiled ignore list. It is immutable and safe for
// concurrent use; the nil *Ignore ignores nothing.
type Ignore struct {
	paths    []string // normalized, for the Set's key and the document
	patterns [][]seg
}

// ParseIgnore compiles an ignore list. An error names the bad entry by its
// index: "[1]: must start with ...".
func ParseIgnore(paths []string) (*Ignore, error) {
	ig := &Ignore{}
	var errs []error
	for i, p := range paths {
		segs, err := parsePath(p, true)
		if err != nil {
			errs = append(errs, fmt.Errorf("[%d]: %w", i, err))
			continue
		}
		ig.patterns = append(ig.patterns, segs)
		ig.paths = append(ig.paths, string(appendPath(nil, segs)))
	}
	return ig, errors.Join(errs...)
}

// Paths returns the normalized ignore paths.
func (ig *Ignore) Paths() []string {
	if ig == nil {
		return nil
	}
	return ig.paths
}

// ignores reports whether a pattern covers the path segs (the pattern is a
// prefix of it, "[*]" matching any index).
func (ig *Ignore) ignores(segs []seg) bool {
	if ig == nil {
		return false
	}
next:
	for _, pat := range ig.patterns {
		if len(pat) > len(segs) {
			continue
		}
		for i, p := range pat {
			s := segs[i]
			switch p.kind {
			case '*':
				if s.kind != 'i' {
					continue next
				}
			case 'i':
				if s.kind != 'i' || s.index != p.index {
					continue next
				}
			default:
				if s.kind != 'k' || s.key != p.key {
					continue next
				}
			}
		}
		return true
	}
	return false
}

// Ignores reports whether the field path p is ignored. A path that does not
// parse is not ignored.
func (ig *Ignore) Ignores(p string) bool {
	segs, err := parsePath(p, false)
	return err == nil && ig.ignores(segs)
}
