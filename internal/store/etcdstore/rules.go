package etcdstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/graygate/graygate/internal/store"
)

// The checks in this file are the file store's, word for word, because the
// two stores must accept the same calls and fail them with the same
// messages. They are copied rather than shared because package store keeps
// them unexported; the conformance tests run the file store's tables
// against both to keep the copies honest.

// keyPattern is the documented form of a rule key, used in error messages.
const keyPattern = `^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`

// validKey is store.ValidKey: keys never hold a slash, which is what
// lets them be used as etcd key segments unescaped.
var validKey = store.ValidKey

// normalizeRule checks that rule is one JSON object in UTF-8 of at most limit
// bytes and returns it compacted, in a fresh slice.
func normalizeRule(rule json.RawMessage, limit int) (json.RawMessage, error) {
	if len(rule) > limit {
		return nil, fmt.Errorf("rule is %d bytes, limit is %d: %w", len(rule), limit, store.ErrInvalid)
	}
	if !utf8.Valid(rule) {
		return nil, fmt.Errorf("rule is not valid UTF-8: %w", store.ErrInvalid)
	}
	var buf bytes.Buffer
	buf.Grow(len(rule))
	if err := json.Compact(&buf, rule); err != nil {
		return nil, fmt.Errorf("rule is not valid JSON (%v): %w", err, store.ErrInvalid)
	}
	if !isObject(buf.Bytes()) {
		return nil, fmt.Errorf("rule is not a JSON object: %w", store.ErrInvalid)
	}
	return buf.Bytes(), nil
}

// isObject reports whether b, known to be valid JSON, is an object.
func isObject(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && b[0] == '{'
}

// casCheck applies the ifVersion precondition of Put (forPut) or Delete to a
// key whose last version is version and which exists or not.
func casCheck(key string, version int64, exists bool, ifVersion int64, forPut bool) error {
	switch {
	case ifVersion == store.AnyVersion:
		return nil
	case ifVersion == 0 && exists:
		what := "put"
		if !forPut {
			what = "delete"
		}
		return fmt.Errorf("rule %q: version is %d, If-Match wanted 0 (%s only if absent): %w", key, version, what, store.ErrConflict)
	case ifVersion == 0:
		return nil
	case !exists && version > 0:
		return fmt.Errorf("rule %q: deleted at version %d, If-Match wanted %d: %w", key, version, ifVersion, store.ErrConflict)
	case !exists:
		return fmt.Errorf("rule %q: does not exist, If-Match wanted %d: %w", key, ifVersion, store.ErrConflict)
	case version != ifVersion:
		return fmt.Errorf("rule %q: version is %d, If-Match wanted %d: %w", key, version, ifVersion, store.ErrConflict)
	}
	return nil
}

func notFound(key string) error {
	return fmt.Errorf("rule %q: %w", key, store.ErrNotFound)
}

// marshal encodes v as compact JSON without HTML escaping, so that a rule's
// bytes read back exactly as the file store returns them ("<" stays "<").
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func cloneEntry(e store.Entry) store.Entry {
	e.Rule = bytes.Clone(e.Rule)
	return e
}
