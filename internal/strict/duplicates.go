package strict

import (
	"bytes"
	"encoding/json"
	"errors"
)

// DuplicateKeys names, by path, every member name that appears more than
// once in one JSON object of body. encoding/json silently keeps the last
// one, so {"version": 1, "version": 2} would revert to version 2 and a
// rule with gray_percent twice would serve whichever came last; RFC 8259
// section 4 leaves such an object's meaning to the parser, and an
// operator's write must never depend on that. A body that is not valid
// JSON is left to the strict decoder, which names where it breaks.
//
// Decode does not call it: the events API decodes a batch whose events
// are judged one by one, and a duplicate inside one event must not refuse
// the batch. Callers that decode a whole document ask for it.
func DuplicateKeys(body []byte) error {
	type frame struct {
		object    bool
		path      string
		seen      map[string]int
		key       string // the member being read (objects)
		expectKey bool   // the next token is a member name (objects)
		index     int    // the element being read (arrays)
	}
	var (
		stack []*frame
		errs  []error
	)
	// valuePath is the path of the value about to be read.
	valuePath := func() string {
		if len(stack) == 0 {
			return ""
		}
		f := stack[len(stack)-1]
		if f.object {
			return Join(f.path, f.key)
		}
		return Index(f.path, f.index)
	}
	// valueDone moves past the value just read.
	valueDone := func() {
		if len(stack) == 0 {
			return
		}
		if f := stack[len(stack)-1]; f.object {
			f.expectKey = true
		} else {
			f.index++
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil { // io.EOF, or a syntax error the strict decoder reports
			return errors.Join(errs...)
		}
		if len(stack) > 0 {
			if f := stack[len(stack)-1]; f.object && f.expectKey {
				if d, ok := tok.(json.Delim); ok && d == '}' {
					stack = stack[:len(stack)-1]
					valueDone()
					continue
				}
				k, _ := tok.(string)
				if f.seen[k]++; f.seen[k] == 2 {
					errs = append(errs, Errorf(Join(f.path, k), "duplicate key: %q is given more than once in the same object", k))
				}
				f.key, f.expectKey = k, false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, path: valuePath(), seen: map[string]int{}, expectKey: true})
		case json.Delim('['):
			stack = append(stack, &frame{path: valuePath()})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueDone()
		default:
			valueDone()
		}
	}
}
