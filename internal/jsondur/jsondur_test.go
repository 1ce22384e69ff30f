package jsondur

import (
	"encoding/json"
	"testing"
	"time"
)

func TestUnmarshal(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		err  string
	}{
		{`"500ms"`, 500 * time.Millisecond, ""},
		{`"1h2m"`, time.Hour + 2*time.Minute, ""},
		{`"0s"`, 0, ""},
		{`null`, 7, ""}, // left as it was
		{`30`, 7, `expected a duration string such as "500ms" or "30s", got 30`},
		{`"30"`, 7, `expected a non-negative duration such as "500ms" or "30s", got "30"`},
		{`"-1s"`, 7, `expected a non-negative duration such as "500ms" or "30s", got "-1s"`},
		{`true`, 7, `expected a duration string such as "500ms" or "30s", got true`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			d := Duration(7)
			err := json.Unmarshal([]byte(tt.in), &d)
			if got := errString(err); got != tt.err {
				t.Fatalf("error %q, want %q", got, tt.err)
			}
			if d.Std() != tt.want {
				t.Errorf("got %v, want %v", d.Std(), tt.want)
			}
		})
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	in := struct {
		D Duration `json:"d"`
	}{Duration(1500 * time.Millisecond)}
	b, err := json.Marshal(in)
	if err != nil || string(b) != `{"d":"1.5s"}` {
		t.Fatalf("%s %v", b, err)
	}
	in.D = 0
	if err := json.Unmarshal(b, &in); err != nil || in.D.Std() != 1500*time.Millisecond {
		t.Fatalf("%v %v", in.D, err)
	}
}

func FuzzUnmarshal(f *testing.F) {
	for _, s := range []string{`"500ms"`, `30`, `"-1s"`, `null`, `"1h"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var d Duration
		if err := d.UnmarshalJSON(b); err != nil {
			return
		}
		if d < 0 {
			t.Fatalf("%q gave a negative duration %v", b, d.Std())
		}
		out, err := d.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var back Duration
		if err := back.UnmarshalJSON(out); err != nil || back != d {
			t.Fatalf("%q: %s does not read back (%v, %v)", b, out, back, err)
		}
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
