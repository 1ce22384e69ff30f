package when

import (
	"fmt"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// CEL type names of the three objects. Users see them only in error messages
// ("graygate.Client cannot be constructed").
const (
	requestTypeName = "graygate.Request"
	userTypeName    = "graygate.User"
	clientTypeName  = "graygate.Client"
)

// Size bounds used by the static cost estimate. cel-go's estimate is an upper
// bound of the actual cost for inputs within them, so an evaluation that only
// reads values within them needs no cost tracking; one that reads a larger
// value is rerun under cel-go's cost tracker and limit (see Expr.Eval). The
// string bounds follow the data plane's 4 KiB read buffer, which holds the
// request line and all headers.
const (
	maxURLLen      = 4096 // request.path, header/query/cookie values
	maxMethodLen   = 16
	maxNameLen     = 256 // header, query and cookie names
	maxTagNameLen  = 64
	maxUserIDLen   = 256
	maxTagValueLen = 256
	maxTags        = 256
	maxRegionLen   = 64 // each of country, province, city
	maxIPLen       = 45 // longest textual IPv6 address
)

// objectTypes holds the CEL types of the objects, indexed by objectKind.
var objectTypes = [...]*types.Type{
	objRequest: types.NewObjectType(requestTypeName),
	objUser:    types.NewObjectType(userTypeName),
	objClient:  types.NewObjectType(clientTypeName),
}

// stringMap is the declared type of every map in the environment.
var stringMap = types.NewMapType(types.StringType, types.StringType)

// fieldDef describes one field of an object: its type, how to read it and
// which Uses flag it sets.
type fieldDef struct {
	t     *types.Type
	get   func(a *activation) ref.Val
	isSet func(a *activation) bool // nil: always set
	use   func(u *Uses)
}

// objectFields lists the fields of each object, indexed by objectKind. It is
// a function, not a variable, so nothing is built before the first Compile.
func objectFields() [3]map[string]fieldDef {
	str := func(f func(in Input) string, limit int) func(a *activation) ref.Val {
		return func(a *activation) ref.Val { return a.str(f(a.in), limit) }
	}
	return [3]map[string]fieldDef{
		objRequest: {
			"path":   {t: types.StringType, get: str(Input.Path, maxURLLen), use: func(u *Uses) { u.Path = true }},
			"method": {t: types.StringType, get: method, use: func(u *Uses) { u.Method = true }},
			"header": {t: stringMap, get: func(a *activation) ref.Val { return &a.maps[mapHeader] }, use: func(u *Uses) { u.Headers = true }},
			"query":  {t: stringMap, get: func(a *activation) ref.Val { return &a.maps[mapQuery] }, use: func(u *Uses) { u.Queries = true }},
			"cookie": {t: stringMap, get: func(a *activation) ref.Val { return &a.maps[mapCookie] }, use: func(u *Uses) { u.Cookies = true }},
			"grpc": {t: stringMap, get: func(a *activation) ref.Val { return &a.maps[mapGRPC] }, use: func(u *Uses) {
				u.Path, u.Headers = true, true
			}},
		},
		objUser: {
			"id":   {t: types.StringType, get: str(Input.UserID, maxUserIDLen), use: func(u *Uses) { u.UserID = true }},
			"tags": {t: stringMap, get: tagsMap, use: func(u *Uses) { u.Tags = true }},
			"region": {
				t:     stringMap,
				get:   func(a *activation) ref.Val { return &a.maps[mapRegion] },
				isSet: func(a *activation) bool { _, _, _, ok := a.in.Region(); return ok },
				use:   func(u *Uses) { u.Region = true },
			},
		},
		objClient: {
			"ip": {t: types.StringType, get: str(Input.ClientIP, maxIPLen), use: func(u *Uses) { u.ClientIP = true }},
		},
	}
}

// tagsMap reads user.tags: the map, or an error value while the tags are
// unknown (Input.TagsErr), which fails every use of it.
func tagsMap(a *activation) ref.Val {
	if err := a.in.TagsErr(); err != nil {
		return types.NewErr("user.tags: unknown: %v", err)
	}
	return &a.maps[mapTags]
}

// method reads request.method. The standard methods (RFC 9110, section 9;
// RFC 5789) are returned as constants, which Go boxes statically, so the
// common case allocates nothing.
func method(a *activation) ref.Val {
	switch s := a.in.Method(); s {
	case "GET":
		return types.String("GET")
	case "HEAD":
		return types.String("HEAD")
	case "POST":
		return types.String("POST")
	case "PUT":
		return types.String("PUT")
	case "DELETE":
		return types.String("DELETE")
	case "OPTIONS":
		return types.String("OPTIONS")
	case "PATCH":
		return types.String("PATCH")
	default:
		return a.str(s, maxMethodLen)
	}
}

// objectKindOf maps a CEL type to the object it declares.
func objectKindOf(t *types.Type) (objectKind, bool) {
	if t == nil || t.Kind() != types.StructKind {
		return 0, false
	}
	for k, ot := range objectTypes {
		if ot.TypeName() == t.TypeName() {
			return objectKind(k), true
		}
	}
	return 0, false
}

// provider adds the three object types to a standard registry. cel-go asks
// the provider for struct types and their fields both when checking (field
// names and types) and when planning (a field's GetFrom is called directly on
// the object's Value).
type provider struct {
	*types.Registry
	fields [3]map[string]*types.FieldType
	names  [3][]string
	kinds  map[string]objectKind
}

func newProvider() (*provider, error) {
	reg, err := types.NewRegistry()
	if err != nil {
		return nil, err
	}
	p := &provider{Registry: reg, kinds: make(map[string]objectKind, len(objectTypes))}
	for k, defs := range objectFields() {
		kind := objectKind(k)
		p.kinds[objectTypes[kind].TypeName()] = kind
		p.fields[kind] = make(map[string]*types.FieldType, len(defs))
		for name, def := range defs {
			p.names[kind] = append(p.names[kind], name)
			p.fields[kind][name] = fieldType(kind, name, def)
		}
	}
	return p, nil
}

func fieldType(kind objectKind, name string, def fieldDef) *types.FieldType {
	get, isSet := def.get, def.isSet
	return &types.FieldType{
		Type: def.t,
		IsSet: func(v any) bool {
			o, ok := v.(*object)
			if !ok || o.kind != kind {
				return false
			}
			return isSet == nil || isSet(o.a)
		},
		GetFrom: func(v any) (any, error) {
			o, ok := v.(*object)
			if !ok || o.kind != kind {
				return nil, fmt.Errorf("field %s of %s read from %T", name, objectTypes[kind].TypeName(), v)
			}
			return get(o.a), nil
		},
	}
}

// FindStructType implements types.Provider.
func (p *provider) FindStructType(name string) (*types.Type, bool) {
	if k, ok := p.kinds[name]; ok {
		return types.NewTypeTypeWithParam(objectTypes[k]), true
	}
	return p.Registry.FindStructType(name)
}

// FindStructFieldNames implements types.Provider.
func (p *provider) FindStructFieldNames(name string) ([]string, bool) {
	if k, ok := p.kinds[name]; ok {
		return append([]string(nil), p.names[k]...), true
	}
	return p.Registry.FindStructFieldNames(name)
}

// FindStructFieldType implements types.Provider.
func (p *provider) FindStructFieldType(name, field string) (*types.FieldType, bool) {
	if k, ok := p.kinds[name]; ok {
		ft, ok := p.fields[k][field]
		return ft, ok
	}
	return p.Registry.FindStructFieldType(name, field)
}

// NewValue implements types.Provider. The objects describe the request being
// served; an expression cannot construct one.
func (p *provider) NewValue(name string, fields map[string]ref.Val) ref.Val {
	if _, ok := p.kinds[name]; ok {
		return types.NewErr("%s cannot be constructed", name)
	}
	return p.Registry.NewValue(name, fields)
}

// sharedEnv is the environment every expression compiles in (see the package
// doc for why it is shared). cel.Env is safe for concurrent use.
var sharedEnv = sync.OnceValues(newEnv)

func newEnv() (*cel.Env, error) {
	p, err := newProvider()
	if err != nil {
		return nil, err
	}
	return cel.NewEnv(
		cel.CustomTypeProvider(p),
		cel.CustomTypeAdapter(p),
		cel.Variable("request", objectTypes[objRequest]),
		cel.Variable("user", objectTypes[objUser]),
		cel.Variable("client", objectTypes[objClient]),
		// Rules are one line in practice; the bound keeps a hostile admin
		// request from making the parser work hard.
		cel.ParserExpressionSizeLimit(maxSourceLen),
	)
}

// maxSourceLen is the longest expression, in code points, Compile accepts.
const maxSourceLen = 8192

// estimator gives cel-go's cost estimate the size bounds above; without them
// every string and map would be of unknown size and any regular expression
// or comprehension would be rejected.
type estimator struct{}

// EstimateSize implements cost.Estimator.
func (estimator) EstimateSize(n cost.AstNode) *cost.SizeEstimate {
	path := n.Path()
	if len(path) < 2 {
		return nil
	}
	var se cost.SizeEstimate
	switch strings.Join(path, ".") {
	case "request.path":
		se = upTo(maxURLLen)
	case "request.method":
		se = upTo(maxMethodLen)
	case "request.header", "request.query", "request.cookie":
		// Only looked up, never iterated: the size matters only for the
		// elements a lookup returns.
		se = mapOf(maxTags, maxNameLen, maxURLLen)
	case "request.header.@keys", "request.query.@keys", "request.cookie.@keys":
		se = upTo(maxNameLen)
	case "request.header.@values", "request.query.@values", "request.cookie.@values":
		se = upTo(maxURLLen)
	case "user.id":
		se = upTo(maxUserIDLen)
	case "user.tags":
		se = mapOf(maxTags, maxTagNameLen, maxTagValueLen)
	case "user.tags.@keys":
		se = upTo(maxTagNameLen)
	case "user.tags.@values":
		se = upTo(maxTagValueLen)
	case "request.grpc":
		se = mapOf(2, uint64(len("service")), maxURLLen)
	case "request.grpc.@keys":
		se = upTo(uint64(len("service")))
	case "request.grpc.@values":
		se = upTo(maxURLLen)
	case "user.region":
		se = mapOf(3, uint64(len("province")), maxRegionLen)
	case "user.region.@keys":
		se = upTo(uint64(len("province")))
	case "user.region.@values":
		se = upTo(maxRegionLen)
	case "client.ip":
		se = upTo(maxIPLen)
	default:
		return nil
	}
	return &se
}

// EstimateCallCost implements cost.Estimator; the standard costs apply.
func (estimator) EstimateCallCost(function, overloadID string, target *cost.AstNode, args []cost.AstNode) *cost.CallEstimate {
	return nil
}

func upTo(n uint64) cost.SizeEstimate { return cost.RangedSizeEstimate(0, n) }

func mapOf(n, key, val uint64) cost.SizeEstimate {
	se := upTo(n)
	k, v := upTo(key), upTo(val)
	se.Key, se.Elem = &k, &v
	return se
}
