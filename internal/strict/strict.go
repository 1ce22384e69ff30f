// Package strict decodes JSON into typed structs and names every problem by
// its path: unknown keys, wrong types and syntax errors all come back as
// FieldErrors joined with errors.Join, so a caller can show them all at once.
//
// encoding/json stops at the first problem and matches keys
// case-insensitively; Caddy and Traefik both taught users to expect an error
// naming the exact key that is wrong, so this package walks the generic value
// against the target type first and only then lets encoding/json fill it in.
package strict

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// FieldError is one problem at one path, such as "groups[1].weight".
type FieldError struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func (e *FieldError) Error() string {
	if e.Path == "" {
		return e.Message
	}
	return e.Path + ": " + e.Message
}

// Errorf returns a *FieldError at path.
func Errorf(path, format string, args ...any) *FieldError {
	return &FieldError{Path: path, Message: fmt.Sprintf(format, args...)}
}

// Join returns the path for a field below prefix.
func Join(prefix, field string) string {
	if prefix == "" {
		return field
	}
	return prefix + "." + field
}

// Index returns the path for an element below prefix.
func Index(prefix string, i int) string { return prefix + "[" + strconv.Itoa(i) + "]" }

// Fields flattens an error made of FieldErrors (possibly joined and wrapped)
// into a list. Errors that are not FieldErrors become entries with an empty path.
func Fields(err error) []FieldError {
	if err == nil {
		return nil
	}
	var out []FieldError
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		var fe *FieldError
		if errors.As(e, &fe) {
			out = append(out, *fe)
			return
		}
		out = append(out, FieldError{Message: e.Error()})
	}
	walk(err)
	return out
}

// Prefix puts prefix in front of the path of every FieldError in err.
func Prefix(prefix string, err error) error {
	if err == nil || prefix == "" {
		return err
	}
	fs := Fields(err)
	errs := make([]error, len(fs))
	for i, f := range fs {
		p := prefix
		if f.Path != "" {
			if strings.HasPrefix(f.Path, "[") {
				p = prefix + f.Path
			} else {
				p = prefix + "." + f.Path
			}
		}
		errs[i] = &FieldError{Path: p, Message: f.Message}
	}
	return errors.Join(errs...)
}

// Decode decodes data into v (a pointer to a struct, usually) and reports
// every unknown key and type mismatch by path.
func Decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return syntaxError(data, err)
	}
	if dec.More() {
		return &FieldError{Message: "unexpected data after the JSON value"}
	}
	var errs []error
	check(generic, reflect.TypeOf(v), "", &errs)
	if len(errs) > 0 {
		// Fill in what can be decoded, so that callers may validate the
		// rest and report every problem at once (see Merge). check has
		// dropped the bad values from generic: decoding data itself
		// would stop at the first one a custom decoder refuses, and leave
		// every field after it unset, which validation would then report
		// as missing.
		if clean, err := json.Marshal(generic); err == nil {
			_ = json.Unmarshal(clean, v)
		}
		return errors.Join(errs...)
	}
	if err := json.Unmarshal(data, v); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return Errorf(ute.Field, "expected %s, got JSON %s", ute.Type, ute.Value)
		}
		return &FieldError{Message: err.Error()}
	}
	return nil
}

func syntaxError(data []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := 1, 1
		for _, c := range data[:max(0, min(int(se.Offset)-1, len(data)))] {
			if c == '\n' {
				line++
				col = 1
			} else {
				col++
			}
		}
		return &FieldError{Message: fmt.Sprintf("invalid JSON at line %d, column %d: %v", line, col, se)}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return &FieldError{Message: "invalid JSON: unexpected end of input"}
	}
	if errors.Is(err, io.EOF) {
		return &FieldError{Message: "empty body: a JSON value is required"}
	}
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) {
		return Errorf(ute.Field, "expected %s, got JSON %s", ute.Type, ute.Value)
	}
	return &FieldError{Message: "invalid JSON: " + err.Error()}
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	rawMessage      = reflect.TypeFor[json.RawMessage]()
)

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return strconv.Quote(x)
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%v", v)
}

// check reports every problem of v, decoded generically, as a t at path.
// It returns true when v itself cannot be decoded as a t, for the caller
// to drop it; bad values inside v (object members, array elements) are
// dropped by check itself, so that what is left decodes.
func check(v any, t reflect.Type, path string, errs *[]error) (bad bool) {
	for t.Kind() == reflect.Pointer {
		if v == nil {
			return false
		}
		t = t.Elem()
	}
	if t == rawMessage {
		return false
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		raw, _ := json.Marshal(v)
		if err := reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(raw); err != nil {
			*errs = append(*errs, Prefix(path, asField(err)))
			return true
		}
		return false
	}
	if v == nil {
		return false // null leaves the zero value, as encoding/json does
	}
	if reflect.PointerTo(t).Implements(textUnmarshaler) {
		s, ok := v.(string)
		if !ok {
			*errs = append(*errs, Errorf(path, "expected a string, got %s", describe(v)))
			return true
		}
		if err := reflect.New(t).Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			*errs = append(*errs, Errorf(path, "%v", err))
			return true
		}
		return false
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			*errs = append(*errs, Errorf(path, "expected an object, got %s", describe(v)))
			return true
		}
		fields := structFields(t)
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			f, ok := fields[k]
			if !ok {
				*errs = append(*errs, Errorf(Join(path, k), "unknown field"))
				delete(m, k)
				continue
			}
			if check(m[k], f, Join(path, k), errs) {
				delete(m, k)
			}
		}
	case reflect.Slice, reflect.Array:
		a, ok := v.([]any)
		if !ok {
			*errs = append(*errs, Errorf(path, "expected an array, got %s", describe(v)))
			return true
		}
		for i, e := range a {
			if check(e, t.Elem(), Index(path, i), errs) {
				a[i] = nil
			}
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			*errs = append(*errs, Errorf(path, "expected an object, got %s", describe(v)))
			return true
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if check(m[k], t.Elem(), Join(path, k), errs) {
				delete(m, k)
			}
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			*errs = append(*errs, Errorf(path, "expected a string, got %s", describe(v)))
			return true
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			*errs = append(*errs, Errorf(path, "expected true or false, got %s", describe(v)))
			return true
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			*errs = append(*errs, Errorf(path, "expected an integer, got %s", describe(v)))
			return true
		}
		i, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil || reflect.Zero(t).OverflowInt(i) {
			*errs = append(*errs, Errorf(path, "expected an integer, got %s", n))
			return true
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := v.(json.Number)
		if !ok {
			*errs = append(*errs, Errorf(path, "expected a non-negative integer, got %s", describe(v)))
			return true
		}
		u, err := strconv.ParseUint(n.String(), 10, 64)
		if err != nil || reflect.Zero(t).OverflowUint(u) {
			*errs = append(*errs, Errorf(path, "expected a non-negative integer, got %s", n))
			return true
		}
	case reflect.Float32, reflect.Float64:
		n, ok := v.(json.Number)
		if !ok {
			*errs = append(*errs, Errorf(path, "expected a number, got %s", describe(v)))
			return true
		}
		if _, err := strconv.ParseFloat(n.String(), 64); err != nil {
			*errs = append(*errs, Errorf(path, "expected a number, got %s", n))
			return true
		}
	case reflect.Interface:
		// any value is accepted
	}
	return false
}

func asField(err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		return err
	}
	return &FieldError{Message: err.Error()}
}

// structFields maps each JSON key of t (following embedded structs) to its type.
func structFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range structFields(ft) {
					out[k] = v
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// Merge joins decoding problems with validation problems of the partly
// decoded value, leaving out what follows from a decoding problem: a
// validation problem at or below its path (a field of the wrong type is
// not also "required"), and one of the object holding the field that
// names the field (a bound that did not decode does not also leave its
// check with "needs max and/or min").
func Merge(decodeErr, validateErr error) error {
	if decodeErr == nil {
		return validateErr
	}
	bad := Fields(decodeErr)
	errs := []error{decodeErr}
	for _, f := range Fields(validateErr) {
		if !slices.ContainsFunc(bad, func(b FieldError) bool { return follows(f, b.Path) }) {
			errs = append(errs, &FieldError{Path: f.Path, Message: f.Message})
		}
	}
	return errors.Join(errs...)
}

// follows reports whether validation problem f follows from a decoding
// problem at path bad (see Merge).
func follows(f FieldError, bad string) bool {
	if bad == "" || f.Path == bad || strings.HasPrefix(f.Path, bad+".") || strings.HasPrefix(f.Path, bad+"[") {
		return true
	}
	parent, name, ok := cutLast(bad)
	return ok && f.Path == parent && mentions(f.Message, name)
}

// cutLast splits a path at its last object key: "a.b[2].max" is "a.b[2]"
// and "max". A path ending in an index has no key to cut.
func cutLast(path string) (parent, name string, ok bool) {
	i := strings.LastIndexByte(path, '.')
	if i < 0 {
		return "", path, path != "" && !strings.HasSuffix(path, "]")
	}
	name = path[i+1:]
	return path[:i], name, name != "" && !strings.Contains(name, "[")
}

// mentions reports whether msg names the key name as a word of its own.
func mentions(msg, name string) bool {
	word := func(b byte) bool {
		return b == '_' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9'
	}
	for i := 0; ; {
		j := strings.Index(msg[i:], name)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(name)
		if (j == 0 || !word(msg[j-1])) && (end == len(msg) || !word(msg[end])) {
			return true
		}
		i = j + 1
	}
}
