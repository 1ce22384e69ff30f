package mirror

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"math"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// answer is one version's answer to a request, as the diff sees it.
type answer struct {
	status int
	header http.Header // canonical keys
	body   []byte
	// truncated says body holds only a prefix of the answer: bodies are
	// then not compared (a prefix of two different bodies may be equal,
	// and of two equal JSON documents does not parse).
	truncated bool
}

// difference is one path at which two answers differ, with the two values
// rendered for examples (lazily, and cut to n bytes: most differences are
// only counted).
type difference struct {
	path string
	a, b func(n int) string
}

// text renders a fixed string.
func text(s string) func(int) string { return func(n int) string { return truncate(s, n) } }

// Thresholds decide when a field's differences are a regression rather
// than noise. They follow Twitter's Diffy (analysis/JoinedDifferences.scala,
// DifferencesFilterFactory): a field is reported when its raw differences
// exceed its noise differences, the relative difference |raw − noise| /
// (raw + noise) is above Relative, and the absolute difference
// |raw − noise| is above Absolute. Diffy counts both over the same
// requests; here raw and noise are rates, raw over the candidate answers
// compared and noise over the secondary answers compared, since either
// target may fail on its own.
type Thresholds struct {
	// Relative bounds (raw_rate − noise_rate) / (raw_rate + noise_rate)
	// from below; Diffy's default is 20% (its -threshold.relative 20.0).
	Relative float64 `json:"relative"`
	// Absolute bounds raw_rate − noise_rate from below. Diffy's default,
	// -threshold.absolute 0.03, is in percent of the requests (0.03%);
	// graygate's default is 3 percentage points (0.03 as a rate), the
	// figure the issue quotes: a shadow sample is small, and a field that
	// changes in fewer than 3% more answers than noise explains is not
	// worth a page.
	Absolute float64 `json:"absolute"`
	// MinCompared is how many candidate answers must have been compared
	// before any field is a regression, so that the first answers do not
	// flag everything (Diffy has no such floor).
	MinCompared uint64 `json:"min_compared"`
}

// DefaultThresholds are graygate's defaults.
var DefaultThresholds = Thresholds{Relative: 0.20, Absolute: 0.03, MinCompared: 10}

// Regression applies the thresholds to a field's raw and noise rates.
func (t Thresholds) Regression(rawRate, noiseRate float64, compared uint64) bool {
	if compared < t.MinCompared || rawRate <= noiseRate {
		return false
	}
	d := rawRate - noiseRate
	return d > t.Absolute && d/(rawRate+noiseRate) > t.Relative
}

// hopByHop are the response fields the diff never compares: the hop-by-hop
// ones of RFC 9110 section 7.6.1 (and the fields Connection names), which
// describe one connection and not the answer, and Content-Length, which
// is framing: a body that differs is reported by path, not also as a
// different length.
var hopByHop = []string{
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length",
}

// connectionTokens returns the fields h's Connection header names.
func connectionTokens(h http.Header) []string {
	var out []string
	for _, v := range h.Values("Connection") {
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				out = append(out, http.CanonicalHeaderKey(t))
			}
		}
	}
	return out
}

// compare lists the paths at which b differs from a (a is the primary's
// answer), skipping what ig ignores, in a stable order.
func compare(a, b *answer, ig *Ignore, limit int) []difference {
	var out []difference
	add := func(d difference) bool {
		out = append(out, d)
		return len(out) < limit
	}
	if a.status != b.status && !ig.ignores([]seg{keySeg("status")}) {
		as, bs := strconv.Itoa(a.status), strconv.Itoa(b.status)
		if !add(difference{path: "status", a: text(as), b: text(bs)}) {
			return out
		}
	}
	if !compareHeaders(a.header, b.header, ig, add) {
		return out
	}
	if a.truncated || b.truncated || ig.ignores([]seg{keySeg("body")}) {
		return out
	}
	ab, aerr := decoded(a)
	bb, berr := decoded(b)
	if aerr != nil || berr != nil {
		if aerr == nil || berr == nil || !bytes.Equal(a.body, b.body) {
			add(bodyDifference(a.body, b.body))
		}
		return out
	}
	if isJSON(a.header) {
		av, aok := parseJSON(ab)
		bv, bok := parseJSON(bb)
		if aok && bok {
			w := walker{ig: ig, add: add, segs: []seg{keySeg("body")}}
			w.walk(av, bv)
			return out
		}
	}
	if !bytes.Equal(ab, bb) {
		add(bodyDifference(ab, bb))
	}
	return out
}

// compareHeaders adds a difference for every header whose values differ.
func compareHeaders(a, b http.Header, ig *Ignore, add func(difference) bool) bool {
	skip := slices.Concat(hopByHop, connectionTokens(a), connectionTokens(b))
	names := make([]string, 0, len(a)+len(b))
	for k := range a {
		names = append(names, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	for _, k := range names {
		if slices.Contains(skip, k) {
			continue
		}
		lk := strings.ToLower(k)
		if ig.ignores([]seg{keySeg("headers"), keySeg(lk)}) {
			continue
		}
		av, aok := a[k]
		bv, bok := b[k]
		as, bs := strings.Join(av, ", "), strings.Join(bv, ", ")
		if aok == bok && as == bs {
			continue
		}
		if !aok {
			as = absent
		}
		if !bok {
			bs = absent
		}
		if !add(difference{path: "headers." + lk, a: text(as), b: text(bs)}) {
			return false
		}
	}
	return true
}

// absent renders a value one side does not have.
const absent = "(absent)"

// bodyDifference reports two bodies that differ as a whole; the examples
// show their beginnings.
func bodyDifference(a, b []byte) difference {
	cut := func(body []byte) func(int) string {
		return func(n int) string {
			if len(body) > n+utf8.UTFMax {
				body = body[:n+utf8.UTFMax]
			}
			return truncate(string(body), n)
		}
	}
	return difference{path: "body", a: cut(a), b: cut(b)}
}

// errUndecodable marks a body whose Content-Encoding the diff cannot undo.
var errUndecodable = errors.New("undecodable body")

// decoded returns the answer's body with a gzip Content-Encoding undone
// (both sides get the client's Accept-Encoding, so both may compress);
// bodies in other encodings are compared as sent.
func decoded(a *answer) ([]byte, error) {
	switch strings.ToLower(strings.TrimSpace(a.header.Get("Content-Encoding"))) {
	case "", "identity":
		return a.body, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bytes.NewReader(a.body))
		if err != nil {
			return nil, errUndecodable
		}
		out, err := io.ReadAll(io.LimitReader(zr, maxDecoded))
		if err != nil || len(out) == maxDecoded {
			return nil, errUndecodable
		}
		return out, nil
	}
	return a.body, nil
}

// maxDecoded bounds a decompressed body (a gzip bomb stays small).
const maxDecoded = 8 << 20

// isJSON reports whether the Content-Type is JSON: application/json or a
// +json suffix (RFC 6839).
func isJSON(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// parseJSON decodes one JSON document with numbers kept as written.
func parseJSON(b []byte) (any, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil || dec.More() {
		return nil, false
	}
	return v, true
}

// walker compares two JSON values field by field, arrays element-wise.
type walker struct {
	ig   *Ignore
	add  func(difference) bool
	segs []seg
	full bool // add refused more
}

func (w *walker) walk(a, b any) {
	if w.full || w.ig.ignores(w.segs) {
		return
	}
	switch av := a.(type) {
	case map[string]any:
		if bv, ok := b.(map[string]any); ok {
			keys := make([]string, 0, len(av)+len(bv))
			for k := range av {
				keys = append(keys, k)
			}
			for k := range bv {
				if _, ok := av[k]; !ok {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				w.segs = append(w.segs, keySeg(k))
				w.child(av, bv, k)
				w.segs = w.segs[:len(w.segs)-1]
			}
			return
		}
	case []any:
		if bv, ok := b.([]any); ok {
			for i := range max(len(av), len(bv)) {
				w.segs = append(w.segs, indexSeg(i))
				switch {
				case i >= len(av):
					w.differ(nil, bv[i], true, false)
				case i >= len(bv):
					w.differ(av[i], nil, false, true)
				default:
					w.walk(av[i], bv[i])
				}
				w.segs = w.segs[:len(w.segs)-1]
			}
			return
		}
	default:
		if scalarEqual(a, b) {
			return
		}
	}
	w.differ(a, b, false, false)
}

// child compares the values under key k of two objects.
func (w *walker) child(a, b map[string]any, k string) {
	av, aok := a[k]
	bv, bok := b[k]
	if aok && bok {
		w.walk(av, bv)
		return
	}
	w.differ(av, bv, !aok, !bok)
}

func (w *walker) differ(a, b any, aAbsent, bAbsent bool) {
	if w.full || w.ig.ignores(w.segs) {
		return
	}
	path := string(appendPath(nil, w.segs))
	if !w.add(difference{path: path, a: render(a, aAbsent), b: render(b, bAbsent)}) {
		w.full = true
	}
}

// scalarEqual compares two JSON scalars (or a scalar with a compound
// value, which is never equal); see numberEqual for numbers.
func scalarEqual(a, b any) bool {
	switch av := a.(type) {
	case json.Number:
		bv, ok := b.(json.Number)
		return ok && numberEqual(av, bv)
	case string:
		bv, ok := b.(string)
		return ok && av == bv
	case bool:
		bv, ok := b.(bool)
		return ok && av == bv
	case nil:
		return b == nil
	}
	return false
}

// numberEqual compares two JSON numbers. They are equal when they are the
// same decimal however written (1, 1.0, 1e0, 10e-1). Integers are compared
// exactly: ids beyond 2^53 (9007199254740993 and 9007199254740992) are the
// same float64, and a candidate that rounds an id is a regression the diff
// must show. Other numbers are also equal when they are the same float64,
// so that two serializers that print a float with more or fewer digits
// (0.1 and 0.10000000000000001) do not differ.
func numberEqual(a, b json.Number) bool {
	if a == b {
		return true
	}
	ad, aok := decimalOf(string(a))
	bd, bok := decimalOf(string(b))
	if aok && bok {
		if ad == bd {
			return true
		}
		if ad.exp >= 0 && bd.exp >= 0 {
			return false // two integers that differ
		}
	}
	af, aerr := a.Float64()
	bf, berr := b.Float64()
	return aerr == nil && berr == nil && af == bf
}

// decimal is a JSON number as sign × digits × 10^exp, digits without
// leading or trailing zeros ("" for zero, whose sign is dropped).
type decimal struct {
	neg    bool
	digits string
	exp    int64
}

// decimalOf parses a number of JSON's grammar (RFC 8259 section 6); ok is
// false for anything else, or an exponent beyond int64.
func decimalOf(s string) (decimal, bool) {
	var d decimal
	if strings.HasPrefix(s, "-") {
		d.neg, s = true, s[1:]
	}
	mant := s
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.ParseInt(s[i+1:], 10, 64)
		if err != nil {
			return decimal{}, false
		}
		mant, d.exp = s[:i], e
	}
	ip, fp, _ := strings.Cut(mant, ".")
	digits := ip + fp
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return decimal{}, false
	}
	if d.exp < math.MinInt64+int64(len(fp)) {
		return decimal{}, false
	}
	d.exp -= int64(len(fp))
	digits = strings.TrimLeft(digits, "0")
	trimmed := strings.TrimRight(digits, "0")
	if d.exp > math.MaxInt64-int64(len(digits)-len(trimmed)) {
		return decimal{}, false
	}
	d.exp += int64(len(digits) - len(trimmed))
	d.digits = trimmed
	if d.digits == "" {
		return decimal{}, true // zero: -0, 0.0 and 0e5 alike
	}
	return d, true
}

// render returns a function that renders a JSON value for an example.
func render(v any, isAbsent bool) func(int) string {
	return func(n int) string {
		if isAbsent {
			return absent
		}
		b, err := json.Marshal(v)
		if err != nil {
			return "?"
		}
		return truncate(string(b), n)
	}
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
