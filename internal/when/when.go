// Package when compiles and evaluates the CEL expressions that routing rules
// carry in their "when" field.
//
// An expression is written against a typed environment:
//
//	request.path, request.method          string
//	request.header, request.query,
//	request.cookie                        map(string, string), lookup only
//	request.grpc                          map(string, string) with the keys
//	                                      service and method: "pkg.Service"
//	                                      and "Method" for a gRPC call
//	                                      (Content-Type application/grpc,
//	                                      path /pkg.Service/Method), ""
//	                                      for any other request
//	user.id                               string
//	user.tags                             map(string, string), values are raw strings
//	user.region                           map(string, string) with the keys
//	                                      country, province, city when known
//	client.ip                             string
//
// Header names are case-insensitive (RFC 9110, section 5.1):
// request.header["X-Beta"] and request.header["x-beta"] are the same lookup.
// Query and cookie names are case-sensitive.
//
// Indexing a missing key is an evaluation error, and Eval reports an error as
// "no match". So is any read of user.tags while the tags are unknown (a
// source failed; see Input.TagsErr): like a tag condition, an expression
// fails closed rather than decide on the tags it happened to get, unless
// its result does not depend on them (false && …, true || …). Guard optional keys with `"vip" in user.tags && ...` or
// `has(user.tags.vip) && ...`; both work on every map above. Tag values are
// strings: compare them as strings (user.tags["vip"] == "true") or convert
// them (double(user.tags["score"]) > 0.7; a value that does not parse is an
// error, so no match).
//
// The request maps can only be looked up (index, has(), in): the data plane
// can answer "what is header X" cheaply but would have to copy every header to
// iterate them, so size(), comprehensions and equality over them are rejected
// when the rule is compiled. The objects request, user and client must always
// be followed by a field, so Uses reports exactly what an expression reads.
//
// Compile parses, type-checks and cost-checks an expression once, when the
// rule is stored; the result must be bool. The cost check uses cel-go's static
// estimate under size bounds for every attribute (env.go). Within those
// bounds the estimate caps the actual cost, so Eval tracks cost only when an
// input exceeds them; then cel-go's runtime limit, set to the same value,
// stops an evaluation that would run long.
//
// Evaluation does not build Go maps per request. The activation hands CEL
// values that call back into Input only for what the expression touches, and
// Uses tells the caller, before evaluating, whether it needs to resolve tags
// or region at all.
//
// Unlike the rest of graygate, this package keeps two package-level values
// besides constant tables: the CEL environment and a sync.Pool of
// activations. Every cel.Program keeps its environment (about 9 KiB) alive,
// so one shared environment, built on first use and immutable afterwards,
// keeps a rule's footprint to its own program. Neither value is configurable
// or observable from outside: they are caches, not global state.
package when

import (
	"errors"
	"fmt"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common"
	"cel.dev/cel-go/common/types"
)

// DefaultMaxCost is the cost limit used when Options.MaxCost is zero. It
// admits a handful of regular expressions over the path or one comprehension
// over the tags, and rejects nested comprehensions.
const DefaultMaxCost = 10000

// Options configures Compile.
type Options struct {
	// MaxCost is the largest estimated cost an expression may have, in
	// cel-go cost units (roughly one per operation, one per ten bytes a
	// string function scans). The same value limits the actual cost of each
	// evaluation. Zero means DefaultMaxCost.
	MaxCost uint64
}

// Expr is a compiled "when" expression. It is immutable and safe for
// concurrent use.
type Expr struct {
	src  string
	fast cel.Program // no cost tracking, for inputs within the size bounds
	safe cel.Program // cost-tracked and limited, for all other inputs
	uses Uses
	cost uint64
}

// Error is a compile error at a position in the source. Line and Column are
// 1-based; Column counts Unicode code points, as CEL does.
type Error struct {
	Line    int
	Column  int
	Message string
}

// Error formats the error as "line L, column C: message"; the caller adds the
// path of the field ("rules[2].when: ...").
func (e *Error) Error() string {
	return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Message)
}

// Compile parses and type-checks src, rejects it if it does not evaluate to
// bool or its estimated cost exceeds opts.MaxCost, and plans it for
// evaluation. Problems at a position in the source are *Error values, joined
// with errors.Join when there are several.
func Compile(src string, opts Options) (*Expr, error) {
	maxCost := opts.MaxCost
	if maxCost == 0 {
		maxCost = DefaultMaxCost
	}
	env, err := sharedEnv()
	if err != nil {
		return nil, fmt.Errorf("build environment: %w", err)
	}
	checked, iss := env.Compile(src)
	if iss.Err() != nil {
		return nil, issuesError(iss.Errors())
	}
	if t := checked.OutputType(); !t.IsExactType(types.BoolType) {
		return nil, fmt.Errorf("result must be bool, got %s", typeString(t))
	}
	uses, err := inspect(checked.NativeRep())
	if err != nil {
		return nil, err
	}
	est, err := env.EstimateCost(checked, estimator{})
	if err != nil {
		return nil, fmt.Errorf("estimate cost: %w", err)
	}
	if est.Max > maxCost {
		return nil, fmt.Errorf("estimated cost %s exceeds the limit %d (nested loops and regular expressions over long values cost the most)", costString(est.Max), maxCost)
	}
	fast, err := env.Program(checked, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	safe, err := env.Program(checked, cel.EvalOptions(cel.OptOptimize), cel.CostLimit(maxCost))
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	return &Expr{src: src, fast: fast, safe: safe, uses: uses, cost: est.Max}, nil
}

// Eval evaluates the expression against in. Evaluation errors (a missing map
// key, double("abc"), the cost limit) return false and the error; callers
// treat them as "no match" and log or trace the error.
//
// cel-go's runtime cost tracking costs more than the rest of a typical
// evaluation (it doubles the time of the issue's example and adds two
// allocations per evaluation and one per function call), so Eval first runs
// an untracked program whose values refuse to exceed the size bounds the
// static estimate was made with; within them the estimate, at most MaxCost,
// bounds the actual cost. If the input reads a larger value, that run is
// discarded and the tracked program, limited to MaxCost, decides.
//
// in is only used during the call and never retained.
func (e *Expr) Eval(in Input) (bool, error) {
	a := activations.Get().(*activation)
	a.in, a.bounded, a.oversize = in, true, false
	out, _, err := e.fast.Eval(a)
	if a.oversize {
		a.bounded, a.oversize = false, false
		out, _, err = e.safe.Eval(a)
	}
	a.in = nil
	activations.Put(a)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		// The checker proved the result is bool; reaching this is a bug.
		return false, fmt.Errorf("result is %s, not bool", out.Type().TypeName())
	}
	return bool(b), nil
}

// Source returns the expression as it was compiled.
func (e *Expr) Source() string { return e.src }

// Uses reports which attributes the expression reads.
func (e *Expr) Uses() Uses { return e.uses }

// Cost returns the estimated worst-case cost the expression was admitted
// with, for diagnostics.
func (e *Expr) Cost() uint64 { return e.cost }

// Uses lists the attributes an expression reads, so the caller can skip
// resolving what it does not need (tags need a lookup, region a GeoIP query).
type Uses struct {
	Path     bool // request.path
	Method   bool // request.method
	Headers  bool // request.header
	Queries  bool // request.query
	Cookies  bool // request.cookie
	UserID   bool // user.id
	Tags     bool // user.tags
	Region   bool // user.region
	ClientIP bool // client.ip
}

// Input is the request the expression is evaluated against. Implementations
// resolve each value lazily and may alias request buffers.
//
// A method may be called several times during one evaluation (once per
// reference in the expression), so implementations that do real work on a
// call, such as a tag lookup, should remember the result. An Input is used by
// one evaluation at a time; Eval never retains it.
type Input interface {
	Path() string
	Method() string
	// Header returns the value of the named header. name is always in
	// lower case (ASCII); Eval lowers what the expression wrote.
	Header(name string) (string, bool)
	Query(name string) (string, bool)
	Cookie(name string) (string, bool)
	UserID() string
	// Tag returns the named user tag, resolving the tags on first call.
	Tag(name string) (value string, ok bool)
	// TagNames returns the names of all user tags, for iteration and size;
	// it may resolve the tags. Eval does not modify the slice.
	TagNames() []string
	// TagsErr reports, resolving the tags on first call, why they are
	// unknown (a source failed: Redis did not answer, a token was
	// refused), or nil when they are known or the user has none. While it
	// is non-nil every read of user.tags is an evaluation error, so an
	// expression whose result depends on the tags does not match: without
	// it, !("blacklist_flag" in user.tags) would hold for a blacklisted
	// user whenever Redis is down.
	TagsErr() error
	// Region returns where the client is. An empty part is reported as
	// absent from user.region; ok false means nothing is known.
	Region() (country, province, city string, ok bool)
	ClientIP() string
}

// activations recycles the per-evaluation activation (see the package doc).
var activations = sync.Pool{New: func() any { return newActivation() }}

// issuesError converts cel issues into errors.
func issuesError(errs []*common.Error) error {
	if len(errs) == 0 {
		return errors.New("invalid expression")
	}
	out := make([]error, 0, len(errs))
	for _, e := range errs {
		out = append(out, errorAt(e.Location, e.Message))
	}
	return errors.Join(out...)
}

// errorAt returns an *Error at loc, whose column cel counts from 0, or a
// plain error if loc is unknown: whole-source problems, such as the size
// limit, have no position.
func errorAt(loc common.Location, msg string) error {
	if loc == nil || loc.Line() < 1 {
		return errors.New(msg)
	}
	return &Error{Line: loc.Line(), Column: loc.Column() + 1, Message: msg}
}

// typeString names a CEL type the way users write it.
func typeString(t *cel.Type) string {
	if t == nil {
		return "unknown"
	}
	return t.String()
}

func costString(c uint64) string {
	if c == ^uint64(0) {
		return "unbounded"
	}
	return fmt.Sprint(c)
}
