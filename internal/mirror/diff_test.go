package mirror

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

func jsonAnswer(body string, kv ...string) *answer {
	h := http.Header{"Content-Type": {"application/json"}}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return &answer{status: 200, header: h, body: []byte(body)}
}

func gz(s string) string {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	_, _ = w.Write([]byte(s))
	_ = w.Close()
	return b.String()
}

func paths(ds []difference) []string {
	out := []string{}
	for _, d := range ds {
		out = append(out, d.path)
	}
	return out
}

func TestCompare(t *testing.T) {
	tests := []struct {
		name   string
		a, b   *answer
		ignore []string
		want   []string
	}{
		{"equal", jsonAnswer(`{"a":1}`), jsonAnswer(`{"a":1}`), nil, []string{}},
		{"numbers written differently", jsonAnswer(`{"a":1,"b":1e2}`), jsonAnswer(`{"a":1.0,"b":100}`), nil, []string{}},
		{"integers beyond 2^53 compared exactly", jsonAnswer(`{"id":9007199254740993,"big":12345678901234567890}`),
			jsonAnswer(`{"id":9007199254740992,"big":12345678901234567891}`), nil, []string{"body.big", "body.id"}},
		{"the same decimal written differently", jsonAnswer(`{"a":15,"b":-0,"c":1.50,"d":9007199254740993}`),
			jsonAnswer(`{"a":1.5e1,"b":0.0,"c":15E-1,"d":9007199254740993.000}`), nil, []string{}},
		{"a float printed with more digits", jsonAnswer(`{"f":0.1}`), jsonAnswer(`{"f":0.10000000000000001}`), nil, []string{}},
		{"key order and spacing", jsonAnswer(`{"a":1,"b":2}`), jsonAnswer("{ \"b\" : 2,\n\"a\":1 }"), nil, []string{}},
		{"status", &answer{status: 200, header: http.Header{}}, &answer{status: 500, header: http.Header{}}, nil, []string{"status"}},
		{"scalar, missing and extra", jsonAnswer(`{"a":1,"b":"x","c":true}`), jsonAnswer(`{"a":2,"c":true,"d":null}`), nil, []string{"body.a", "body.b", "body.d"}},
		{"arrays element-wise", jsonAnswer(`{"items":[{"p":1},{"p":2},{"p":3}]}`), jsonAnswer(`{"items":[{"p":1},{"p":5}]}`), nil,
			[]string{"body.items[1].p", "body.items[2]"}},
		{"type change", jsonAnswer(`{"a":{"x":1},"b":[1]}`), jsonAnswer(`{"a":"x","b":{"0":1}}`), nil, []string{"body.a", "body.b"}},
		{"root scalar", jsonAnswer(`1`), jsonAnswer(`2`), nil, []string{"body"}},
		{"odd keys quoted", jsonAnswer(`{"a.b":1,"":2}`), jsonAnswer(`{"a.b":3,"":4}`), nil, []string{`body[""]`, `body["a.b"]`}},
		{"ignore a field and a subtree", jsonAnswer(`{"request_id":"1","meta":{"t":1,"u":2},"v":1}`), jsonAnswer(`{"request_id":"2","meta":{"t":2,"u":3},"v":2}`),
			[]string{"body.request_id", "body.meta"}, []string{"body.v"}},
		{"ignore every element's field", jsonAnswer(`{"items":[{"at":1,"p":1},{"at":2,"p":2}]}`), jsonAnswer(`{"items":[{"at":3,"p":1},{"at":4,"p":9}]}`),
			[]string{"body.items[*].at"}, []string{"body.items[1].p"}},
		{"ignore one index", jsonAnswer(`[1,2,3]`), jsonAnswer(`[0,0,0]`), []string{"body[1]"}, []string{"body[0]", "body[2]"}},
		{"ignore the body", jsonAnswer(`{"a":1}`), jsonAnswer(`{"a":2}`), []string{"body"}, []string{}},
		{"ignore status", &answer{status: 200, header: http.Header{}}, &answer{status: 500, header: http.Header{}}, []string{"status"}, []string{}},
		{"headers: hop-by-hop, Connection-named and Content-Length are not compared",
			jsonAnswer(`{}`, "Connection", "X-Conn-A", "X-Conn-A", "1", "Keep-Alive", "1", "Content-Length", "2", "X-App", "a"),
			jsonAnswer(`{}`, "X-Conn-A", "2", "Transfer-Encoding", "chunked", "Content-Length", "9", "X-App", "b", "X-New", "n"), nil,
			[]string{"headers.x-app", "headers.x-new"}},
		{"ignore a header by any case", jsonAnswer(`{}`, "Date", "1"), jsonAnswer(`{}`, "Date", "2"), []string{"headers.DATE"}, []string{}},
		{"multi-valued headers in order", jsonAnswer(`{}`, "Vary", "a", "Vary", "b"), jsonAnswer(`{}`, "Vary", "b", "Vary", "a"), nil, []string{"headers.vary"}},
		{"non-JSON by hash", &answer{status: 200, header: http.Header{"Content-Type": {"text/html"}}, body: []byte("<p>a</p>")},
			&answer{status: 200, header: http.Header{"Content-Type": {"text/html"}}, body: []byte("<p>b</p>")}, nil, []string{"body"}},
		{"non-JSON equal", &answer{status: 200, header: http.Header{}, body: []byte("x")}, &answer{status: 200, header: http.Header{}, body: []byte("x")}, nil, []string{}},
		{"JSON that does not parse", jsonAnswer(`{"a":1}`), jsonAnswer(`{"a":`), nil, []string{"body"}},
		{"gzip undone", jsonAnswer(gz(`{"a":1,"b":2}`), "Content-Encoding", "gzip"), jsonAnswer(gz(`{"b":2,"a":3}`), "Content-Encoding", "gzip"), nil, []string{"body.a"}},
		{"truncated bodies are not compared", &answer{status: 200, header: http.Header{}, body: []byte("a"), truncated: true},
			&answer{status: 200, header: http.Header{}, body: []byte("b")}, nil, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ig, err := ParseIgnore(tt.ignore)
			if err != nil {
				t.Fatal(err)
			}
			got := paths(compare(tt.a, tt.b, ig, 100))
			slices.Sort(got)
			want := slices.Clone(tt.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("compare = %q, want %q", got, want)
			}
		})
	}
}

func TestCompareExamples(t *testing.T) {
	ds := compare(jsonAnswer(`{"a":{"deep":[1,2]},"s":"`+strings.Repeat("é", 50)+`"}`), jsonAnswer(`{"s":"x"}`), nil, 100)
	if len(ds) != 2 {
		t.Fatalf("differences = %v", paths(ds))
	}
	if a, b := ds[0].a(100), ds[0].b(100); a != `{"deep":[1,2]}` || b != absent {
		t.Errorf("body.a rendered %q / %q", a, b)
	}
	if a := ds[1].a(9); a != `"éééé…` {
		t.Errorf("cut on a rune boundary: %q", a)
	}
}

func TestThresholds(t *testing.T) {
	th := DefaultThresholds
	tests := []struct {
		name       string
		raw, noise float64
		compared   uint64
		want       bool
	}{
		{"30% against no noise", 0.30, 0, 100, true},
		{"random everywhere", 1, 1, 100, false},
		{"below the absolute threshold", 0.02, 0, 100, false},
		{"just above it", 0.031, 0, 100, true},
		{"relative too small", 0.60, 0.50, 100, false},   // 0.1/1.1 = 9%
		{"relative large enough", 0.60, 0.30, 100, true}, // 0.3/0.9 = 33%
		{"noise above raw", 0.1, 0.5, 100, false},
		{"too few answers", 1, 0, 9, false},
	}
	for _, tt := range tests {
		if got := th.Regression(tt.raw, tt.noise, tt.compared); got != tt.want {
			t.Errorf("%s: Regression(%v, %v, %d) = %v", tt.name, tt.raw, tt.noise, tt.compared, got)
		}
	}
}

func TestParseIgnoreRoundTrip(t *testing.T) {
	for _, p := range []string{"status", "headers", "headers.x-a", "body", "body.a.b[3].c", `body["a.b"][*]`, `body[""]`} {
		ig, err := ParseIgnore([]string{p})
		if err != nil {
			t.Errorf("ParseIgnore(%q): %v", p, err)
			continue
		}
		if got := ig.Paths()[0]; got != p {
			t.Errorf("ParseIgnore(%q) renders %q", p, got)
		}
	}
	ig, _ := ParseIgnore([]string{"body.items[*].at", "headers.date"})
	for p, want := range map[string]bool{"body.items[4].at": true, "body.items[4].at.x": true, "body.items.at": false, "headers.date": true, "headers.dates": false, "status": false} {
		if got := ig.Ignores(p); got != want {
			t.Errorf("Ignores(%q) = %v", p, got)
		}
	}
}

// FuzzParseIgnore: ignore paths come from rule JSON; parsing never panics,
// and what parses renders to a path that parses to the same segments.
func FuzzParseIgnore(f *testing.F) {
	for _, s := range []string{"status", "headers.date", "body.a[1][*]", `body["x\"y"]`, "body[", "body.", "body[-1]", "body[01]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		segs, err := parsePath(p, true)
		if err != nil {
			return
		}
		again, err := parsePath(string(appendPath(nil, segs)), true)
		if err != nil || !slices.Equal(again, segs) {
			t.Fatalf("%q renders %q, which parses to %v (%v)", p, appendPath(nil, segs), again, err)
		}
	})
}

// FuzzCompare: answers come from the mirror targets; comparing any two
// bodies never panics and an answer never differs from itself.
func FuzzCompare(f *testing.F) {
	f.Add([]byte(`{"a":[1,{"b":null}]}`), []byte(`{"a":[1]}`), true)
	f.Add([]byte("\x1f\x8b garbage"), []byte("x"), false)
	f.Fuzz(func(t *testing.T, a, b []byte, gzipped bool) {
		h := http.Header{"Content-Type": {"application/json"}}
		if gzipped {
			h.Set("Content-Encoding", "gzip")
		}
		x, y := &answer{status: 200, header: h, body: a}, &answer{status: 200, header: h, body: b}
		for _, d := range compare(x, y, nil, 50) {
			_, _ = d.a(20), d.b(20)
		}
		if ds := compare(x, x, nil, 50); len(ds) != 0 {
			t.Fatalf("an answer differs from itself at %v", paths(ds))
		}
	})
}

// FuzzNumberEqual: numbers from an upstream's body never panic the diff,
// and equality does not depend on which answer is the primary.
func FuzzNumberEqual(f *testing.F) {
	for _, s := range [][2]string{{"1", "1.0"}, {"9007199254740993", "9007199254740992"}, {"-0", "0e9"}, {"1e9223372036854775807", "10e9223372036854775807"}, {"0.1", "0.10000000000000001"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ab, ba := numberEqual(json.Number(a), json.Number(b)), numberEqual(json.Number(b), json.Number(a))
		if ab != ba {
			t.Errorf("numberEqual(%q, %q) = %v, but %v the other way", a, b, ab, ba)
		}
		if !numberEqual(json.Number(a), json.Number(a)) {
			t.Errorf("numberEqual(%q, itself) = false", a)
		}
	})
}
