package when

import (
	"fmt"
	"reflect"
	"strings"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/interpreter"
)

type objectKind uint8

const (
	objRequest objectKind = iota
	objUser
	objClient
)

type mapKind uint8

const (
	mapHeader mapKind = iota
	mapQuery
	mapCookie
	mapTags
	mapRegion
	mapGRPC
	numMaps
)

var mapNames = [numMaps]string{
	mapHeader: "request.header",
	mapQuery:  "request.query",
	mapCookie: "request.cookie",
	mapTags:   "user.tags",
	mapRegion: "user.region",
	mapGRPC:   "request.grpc",
}

// activation resolves the three top-level names of one evaluation. Its values
// point back into it, so handing them to CEL allocates nothing; it is pooled
// and in is cleared when the evaluation ends.
//
// While bounded is set, every string and key list read from in is checked
// against the size bounds the static cost estimate assumed (see env.go). A
// value beyond them sets oversize and reads as errOversize, which cuts the
// evaluation short; Eval then runs the cost-tracked program instead.
type activation struct {
	in       Input
	bounded  bool
	oversize bool
	objects  [3]object
	maps     [numMaps]strMap
}

// errOversize is what an out-of-bounds value reads as in a bounded
// evaluation. Eval discards the result of such an evaluation, so the error
// never reaches a caller.
var errOversize = types.NewErr("input exceeds the size bounds of the cost estimate")

// str returns s as a CEL string, or errOversize if a bounded evaluation
// finds it longer than limit.
func (a *activation) str(s string, limit int) ref.Val {
	if a.bounded && len(s) > limit {
		a.oversize = true
		return errOversize
	}
	return types.String(s)
}

func newActivation() *activation {
	a := &activation{}
	for k := range a.objects {
		a.objects[k] = object{a: a, kind: objectKind(k)}
	}
	for k := range a.maps {
		a.maps[k] = strMap{a: a, kind: mapKind(k)}
	}
	return a
}

// ResolveName implements interpreter.Activation.
func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case "request":
		return &a.objects[objRequest], true
	case "user":
		return &a.objects[objUser], true
	case "client":
		return &a.objects[objClient], true
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (a *activation) Parent() interpreter.Activation { return nil }

// object is the CEL value of request, user or client. Fields are read through
// the provider's FieldType.GetFrom, which receives Value(), i.e. the object.
type object struct {
	a    *activation
	kind objectKind
}

// ConvertToNative implements ref.Val.
func (o *object) ConvertToNative(t reflect.Type) (any, error) {
	return nil, fmt.Errorf("%s cannot be converted to %v", o.Type().TypeName(), t)
}

// ConvertToType implements ref.Val.
func (o *object) ConvertToType(t ref.Type) ref.Val {
	if t.TypeName() == types.TypeType.TypeName() {
		return objectTypes[o.kind]
	}
	if t.TypeName() == o.Type().TypeName() {
		return o
	}
	return types.NewErr("type conversion error from '%s' to '%s'", o.Type().TypeName(), t.TypeName())
}

// Equal implements ref.Val. Compile admits objects only as the operand of a
// field selection (see inspect), so no expression compares them.
func (o *object) Equal(other ref.Val) ref.Val { return types.Bool(o == other) }

// Type implements ref.Val.
func (o *object) Type() ref.Type { return objectTypes[o.kind] }

// Value implements ref.Val.
func (o *object) Value() any { return o }

// strMap is the CEL value of one of the map(string, string) attributes. It
// looks keys up through Input on demand and never copies the whole map.
type strMap struct {
	a    *activation
	kind mapKind
}

var _ traits.Mapper = (*strMap)(nil)

// valueLimit is the longest value the cost estimate assumes for m.
func (m *strMap) valueLimit() int {
	switch m.kind {
	case mapTags:
		return maxTagValueLen
	case mapRegion:
		return maxRegionLen
	}
	return maxURLLen // request.grpc's values are parts of the path
}

// lookup returns the value for key. Header names arrive lowered when the
// expression wrote them as constants (see inspect); dynamic ones are lowered
// here.
func (m *strMap) lookup(key string) (string, bool) {
	in := m.a.in
	switch m.kind {
	case mapHeader:
		return in.Header(strings.ToLower(key))
	case mapQuery:
		return in.Query(key)
	case mapCookie:
		return in.Cookie(key)
	case mapTags:
		return in.Tag(key)
	case mapRegion:
		country, province, city, ok := in.Region()
		if !ok {
			return "", false
		}
		var v string
		switch key {
		case "country":
			v = country
		case "province":
			v = province
		case "city":
			v = city
		}
		return v, v != ""
	case mapGRPC:
		service, method := grpcCall(in)
		switch key {
		case "service":
			return service, true
		case "method":
			return method, true
		}
	}
	return "", false
}

// grpcCall is the service and method of a gRPC request: Content-Type
// application/grpc (alone, +codec or with parameters), and the path
// /package.Service/Method (gRPC's PROTOCOL-HTTP2.md). Both are empty for
// any other request.
func grpcCall(in Input) (service, method string) {
	ct, _ := in.Header("content-type")
	const g = "application/grpc"
	if len(ct) < len(g) || !strings.EqualFold(ct[:len(g)], g) || (len(ct) > len(g) && ct[len(g)] != '+' && ct[len(g)] != ';') {
		return "", ""
	}
	p := in.Path()
	if len(p) < 4 || p[0] != '/' {
		return "", ""
	}
	i := strings.IndexByte(p[1:], '/')
	if i <= 0 || i+2 >= len(p) || strings.IndexByte(p[i+2:], '/') >= 0 {
		return "", ""
	}
	return p[1 : i+1], p[i+2:]
}

// grpcKeys are request.grpc's keys, present on every request.
var grpcKeys = []string{"service", "method"}

// keys lists the map's keys, or returns an error value: the request maps can
// only be looked up, and a bounded evaluation gets errOversize for a tag set
// beyond the bounds.
func (m *strMap) keys() ([]string, ref.Val) {
	switch m.kind {
	case mapTags:
		names := m.a.in.TagNames()
		if m.a.bounded {
			if len(names) > maxTags {
				m.a.oversize = true
				return nil, errOversize
			}
			for _, n := range names {
				if len(n) > maxTagNameLen {
					m.a.oversize = true
					return nil, errOversize
				}
			}
		}
		return names, nil
	case mapRegion:
		country, province, city, ok := m.a.in.Region()
		if !ok {
			return nil, nil
		}
		keys := make([]string, 0, 3)
		for _, kv := range [...]struct{ k, v string }{{"country", country}, {"province", province}, {"city", city}} {
			if kv.v != "" {
				keys = append(keys, kv.k)
			}
		}
		return keys, nil
	case mapGRPC:
		return grpcKeys, nil
	}
	return nil, types.NewErr("%s can only be looked up", mapNames[m.kind])
}

// Find implements traits.Mapper.
func (m *strMap) Find(key ref.Val) (ref.Val, bool) {
	k, ok := key.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(key), false
	}
	v, found := m.lookup(string(k))
	if !found {
		return nil, false
	}
	return m.a.str(v, m.valueLimit()), true
}

// Get implements traits.Indexer.
func (m *strMap) Get(key ref.Val) ref.Val {
	v, found := m.Find(key)
	if !found {
		return types.ValOrErr(v, "no such key: %v", key)
	}
	return v
}

// Contains implements traits.Container; it backs the `in` operator. The
// value is not needed, so it is neither converted nor bounded.
func (m *strMap) Contains(key ref.Val) ref.Val {
	k, ok := key.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(key)
	}
	_, found := m.lookup(string(k))
	return types.Bool(found)
}

// Size implements traits.Sizer.
func (m *strMap) Size() ref.Val {
	keys, err := m.keys()
	if err != nil {
		return err
	}
	return types.Int(len(keys))
}

// Iterator implements traits.Iterable.
func (m *strMap) Iterator() traits.Iterator {
	// An iterator cannot fail, so an error yields no keys: inspect rejects
	// iterating the request maps when compiling, and an oversize tag set
	// makes Eval discard this evaluation.
	keys, _ := m.keys()
	return &keyIterator{keys: keys}
}

// ConvertToNative implements ref.Val.
func (m *strMap) ConvertToNative(t reflect.Type) (any, error) {
	return nil, fmt.Errorf("%s cannot be converted to %v", mapNames[m.kind], t)
}

// ConvertToType implements ref.Val.
func (m *strMap) ConvertToType(t ref.Type) ref.Val {
	switch t.TypeName() {
	case types.TypeType.TypeName():
		return types.MapType
	case types.MapType.TypeName():
		return m
	}
	return types.NewErr("type conversion error from 'map' to '%s'", t.TypeName())
}

// Equal implements ref.Val with CEL map equality: same keys, equal values.
func (m *strMap) Equal(other ref.Val) ref.Val {
	o, ok := other.(traits.Mapper)
	if !ok {
		return types.False
	}
	keys, err := m.keys()
	if err != nil {
		return err
	}
	if types.Int(len(keys)) != o.Size() {
		return types.False
	}
	for _, k := range keys {
		v, found := m.Find(types.String(k))
		if !found {
			return types.False
		}
		if types.IsError(v) {
			return v
		}
		ov, found := o.Find(types.String(k))
		if !found || types.Equal(v, ov) != types.True {
			return types.False
		}
	}
	return types.True
}

// Type implements ref.Val.
func (m *strMap) Type() ref.Type { return types.MapType }

// Value implements ref.Val.
func (m *strMap) Value() any { return m }

// keyIterator walks a map's keys.
type keyIterator struct {
	keys []string
	i    int
}

// HasNext implements traits.Iterator.
func (it *keyIterator) HasNext() ref.Val {
	return types.Bool(it.i < len(it.keys))
}

// Next implements traits.Iterator.
func (it *keyIterator) Next() ref.Val {
	if it.i >= len(it.keys) {
		return types.NewErr("no more keys")
	}
	k := it.keys[it.i]
	it.i++
	return types.String(k)
}

// ConvertToNative implements ref.Val.
func (it *keyIterator) ConvertToNative(t reflect.Type) (any, error) {
	return nil, fmt.Errorf("iterator cannot be converted to %v", t)
}

// ConvertToType implements ref.Val.
func (it *keyIterator) ConvertToType(ref.Type) ref.Val {
	return types.NewErr("iterator cannot be converted")
}

// Equal implements ref.Val.
func (it *keyIterator) Equal(other ref.Val) ref.Val { return types.Bool(it == other) }

// Type implements ref.Val.
func (it *keyIterator) Type() ref.Type { return types.IteratorType }

// Value implements ref.Val.
func (it *keyIterator) Value() any { return it }
