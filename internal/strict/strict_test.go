package strict

import (
	"errors"
	"strings"
	"testing"
)

type inner struct {
	N    int               `json:"n"`
	Tags map[string]string `json:"tags,omitempty"`
}

type outer struct {
	Name  string   `json:"name"`
	Ratio float64  `json:"ratio"`
	On    bool     `json:"on"`
	Items []inner  `json:"items"`
	Ptr   *inner   `json:"ptr,omitempty"`
	Any   any      `json:"any,omitempty"`
	U8    uint8    `json:"u8,omitempty"`
	List  []string `json:"list,omitempty"`
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name, js string
		want     []string
	}{
		{"ok", `{"name":"x","ratio":1.5,"on":true,"items":[{"n":1}],"any":[1,"a"]}`, nil},
		{"unknown at every depth", `{"nmae":1,"items":[{"n":1,"m":2}],"ptr":{"x":1}}`, []string{"nmae: unknown field", "items[0].m: unknown field", "ptr.x: unknown field"}},
		{"case matters", `{"Name":"x"}`, []string{"Name: unknown field"}},
		{"types", `{"name":1,"ratio":"a","on":"yes","items":{},"u8":300,"list":[1]}`, []string{
			"name: expected a string, got 1", `ratio: expected a number, got "a"`, `on: expected true or false, got "yes"`,
			"items: expected an array, got an object", "u8: expected a non-negative integer, got 300", "list[0]: expected a string, got 1"}},
		{"int not float", `{"items":[{"n":1.5}]}`, []string{"items[0].n: expected an integer, got 1.5"}},
		{"map values", `{"items":[{"n":1,"tags":{"a":1}}]}`, []string{"items[0].tags.a: expected a string, got 1"}},
		{"syntax", "{\n  \"name\": ,\n}", []string{"invalid JSON at line 2, column 11"}},
		{"trailing", `{} {}`, []string{"unexpected data after the JSON value"}},
		{"empty", ``, []string{"empty body"}},
		{"truncated", `{"name":`, []string{"unexpected end of input"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o outer
			err := Decode([]byte(tt.js), &o)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Decode(%s) = %v", tt.js, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Decode(%s) succeeded", tt.js)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Decode(%s) = %q, want %q", tt.js, err, w)
				}
			}
			if n := len(Fields(err)); n < len(tt.want) {
				t.Errorf("Fields = %d entries, want at least %d", n, len(tt.want))
			}
		})
	}
}

func TestMergeDropsDuplicates(t *testing.T) {
	d := errors.Join(Errorf("a", "expected a number"), Errorf("b.c", "unknown field"))
	v := errors.Join(Errorf("a", "is required"), Errorf("b.c.d", "x"), Errorf("e", "must be set"), Errorf("ab", "kept"))
	got := Fields(Merge(d, v))
	var paths []string
	for _, f := range got {
		paths = append(paths, f.Path)
	}
	if strings.Join(paths, ",") != "a,b.c,e,ab" {
		t.Errorf("Merge paths = %v", paths)
	}
	if Merge(nil, v) != v {
		t.Error("Merge(nil, v) must be v")
	}
	// A problem of the object holding a field that did not decode is left
	// out when it names that field, and only then.
	d = errors.Join(Errorf("checks[0].max", "expected a number, got 1e999"), Errorf("top", "expected an integer"))
	v = errors.Join(Errorf("checks[0]", "needs max and/or min: the bound a measurement is held to"),
		Errorf("checks[0]", "sets metric and webhook; a check does one thing"), Errorf("checks", "needs max"),
		Errorf("checks[0]", "needs maximum"), Errorf("", "top is required"), Errorf("", "other is required"), Errorf("checks[0].min", "x"))
	var msgs []string
	for _, f := range Fields(Merge(d, v))[2:] {
		msgs = append(msgs, f.Path+": "+f.Message)
	}
	want := "checks[0]: sets metric and webhook; a check does one thing|checks: needs max|checks[0]: needs maximum|: other is required|checks[0].min: x"
	if strings.Join(msgs, "|") != want {
		t.Errorf("Merge kept %q, want %q", strings.Join(msgs, "|"), want)
	}
}

func TestPrefix(t *testing.T) {
	err := Prefix("rules[2]", errors.Join(Errorf("groups[1].weight", "bad"), Errorf("", "whole"), Errorf("[0]", "idx")))
	want := "rules[2].groups[1].weight: bad\nrules[2]: whole\nrules[2][0]: idx"
	if err.Error() != want {
		t.Errorf("Prefix = %q, want %q", err, want)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"name":"x","items":[{"n":1}]}`))
	f.Add([]byte(`{"items":[{"tags":{"a":"b"}}],"any":{"x":[null]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var o outer
		if err := Decode(data, &o); err != nil {
			for _, fe := range Fields(err) {
				if fe.Message == "" {
					t.Fatalf("empty message: %v", err)
				}
			}
		}
	})
}
