package when

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"

	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
)

// inspect walks a checked expression once to
//   - record which attributes it reads (Uses);
//   - reject the objects used whole (`request == x`) or constructed, and the
//     request maps used other than by lookup (`size(request.header)`), see
//     the package doc;
//   - check constant regular expressions, reporting their position;
//   - lower constant header names, so that request.header["X-Beta"] costs
//     no strings.ToLower allocation per evaluation.
//
// Problems carry the position of the offending node.
func inspect(a *ast.AST) (Uses, error) {
	w := walker{ast: a, fac: ast.NewExprFactory()}
	w.expr(a.Expr(), false)
	return w.uses, errors.Join(w.errs...)
}

type walker struct {
	ast    *ast.AST
	fac    ast.ExprFactory
	fields [3]map[string]fieldDef
	uses   Uses
	errs   []error
}

func (w *walker) fail(e ast.Expr, format string, args ...any) {
	w.errs = append(w.errs, errorAt(w.ast.SourceInfo().GetStartLocation(e.ID()), fmt.Sprintf(format, args...)))
}

// object reports whether e names one of the three objects.
func (w *walker) object(e ast.Expr) (objectKind, bool) {
	if e.Kind() != ast.IdentKind {
		return 0, false
	}
	return objectKindOf(w.ast.GetType(e.ID()))
}

// lookupOnly reports which request map e selects, if any.
func (w *walker) lookupOnly(e ast.Expr) (mapKind, bool) {
	if e.Kind() != ast.SelectKind || e.AsSelect().IsTestOnly() {
		return 0, false
	}
	if k, ok := w.object(e.AsSelect().Operand()); !ok || k != objRequest {
		return 0, false
	}
	switch e.AsSelect().FieldName() {
	case "header":
		return mapHeader, true
	case "query":
		return mapQuery, true
	case "cookie":
		return mapCookie, true
	}
	return 0, false
}

func (w *walker) isHeaderMap(e ast.Expr) bool {
	k, ok := w.lookupOnly(e)
	return ok && k == mapHeader
}

// lowerLiteral lowers e in place if it is a string constant.
func (w *walker) lowerLiteral(e ast.Expr) {
	if e.Kind() != ast.LiteralKind {
		return
	}
	s, ok := e.AsLiteral().(types.String)
	if !ok {
		return
	}
	if l := strings.ToLower(string(s)); l != string(s) {
		e.SetKindCase(w.fac.NewLiteral(e.ID(), types.String(l)))
	}
}

// expr visits e. lookupOK says whether e's parent only looks a key up in e
// (index, select, has(), in), which is the only thing the request maps
// support.
func (w *walker) expr(e ast.Expr, lookupOK bool) {
	switch e.Kind() {
	case ast.IdentKind:
		if k, ok := w.object(e); ok {
			w.fail(e, "%s must be followed by a field, e.g. %s", e.AsIdent(), exampleField[k])
		}
	case ast.SelectKind:
		sel := e.AsSelect()
		op := sel.Operand()
		if k, ok := w.object(op); ok {
			w.use(k, sel.FieldName())
			if m, ok := w.lookupOnly(e); ok && !lookupOK {
				w.fail(e, "%s can only be looked up: use %s[\"name\"], has(%s.name) or \"name\" in %s",
					mapNames[m], mapNames[m], mapNames[m], mapNames[m])
			}
			return
		}
		if w.isHeaderMap(op) {
			if l := strings.ToLower(sel.FieldName()); l != sel.FieldName() {
				if sel.IsTestOnly() {
					e.SetKindCase(w.fac.NewPresenceTest(e.ID(), op, l))
				} else {
					e.SetKindCase(w.fac.NewSelect(e.ID(), op, l))
				}
			}
		}
		w.expr(op, true)
	case ast.CallKind:
		call := e.AsCall()
		args := call.Args()
		switch fn := call.FunctionName(); {
		case fn == operators.Index && len(args) == 2 && w.isHeaderMap(args[0]):
			w.lowerLiteral(args[1])
		case fn == operators.In && len(args) == 2 && w.isHeaderMap(args[1]):
			w.lowerLiteral(args[0])
		case fn == overloads.Matches && len(args) > 0:
			w.checkPattern(args[len(args)-1])
		}
		if call.IsMemberFunction() {
			w.expr(call.Target(), false)
		}
		for i, arg := range args {
			fn := call.FunctionName()
			w.expr(arg, (fn == operators.Index && i == 0) || (fn == operators.In && i == 1))
		}
	case ast.ComprehensionKind:
		c := e.AsComprehension()
		w.expr(c.IterRange(), false)
		w.expr(c.AccuInit(), false)
		w.expr(c.LoopCondition(), false)
		w.expr(c.LoopStep(), false)
		w.expr(c.Result(), false)
	case ast.ListKind:
		for _, el := range e.AsList().Elements() {
			w.expr(el, false)
		}
	case ast.MapKind:
		for _, entry := range e.AsMap().Entries() {
			me := entry.AsMapEntry()
			w.expr(me.Key(), false)
			w.expr(me.Value(), false)
		}
	case ast.StructKind:
		if k, ok := objectKindOf(w.ast.GetType(e.ID())); ok {
			w.fail(e, "%s cannot be constructed; use the %s variable", objectTypes[k].TypeName(), objectNames[k])
		}
		for _, f := range e.AsStruct().Fields() {
			w.expr(f.AsStructField().Value(), false)
		}
	}
}

// checkPattern reports a constant regular expression that does not compile
// at its position; cel-go would report it only when planning, without one.
// CEL's matches uses RE2 syntax, which is Go's regexp.
func (w *walker) checkPattern(e ast.Expr) {
	if e.Kind() != ast.LiteralKind {
		return
	}
	s, ok := e.AsLiteral().(types.String)
	if !ok {
		return
	}
	if _, err := regexp.Compile(string(s)); err != nil {
		msg := err.Error()
		var re *syntax.Error
		if errors.As(err, &re) {
			msg = fmt.Sprintf("%s: `%s`", re.Code, re.Expr)
		}
		w.fail(e, "invalid regular expression: %s", msg)
	}
}

var objectNames = [...]string{
	objRequest: "request",
	objUser:    "user",
	objClient:  "client",
}

var exampleField = [...]string{
	objRequest: "request.path",
	objUser:    "user.id",
	objClient:  "client.ip",
}

func (w *walker) use(k objectKind, field string) {
	if w.fields[k] == nil {
		w.fields = objectFields()
	}
	if def, ok := w.fields[k][field]; ok {
		def.use(&w.uses)
	}
}
