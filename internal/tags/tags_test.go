package tags

import (
	"maps"
	"strconv"
	"strings"
	"testing"
)

func TestParseHeader(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Set
		wantErr string
	}{
		{name: "empty", in: "", want: nil},
		{name: "blank", in: " ; ,\t", want: nil},
		{name: "seed example", in: "vip=true;multi_loan_index=0.82", want: Set{"vip": "true", "multi_loan_index": "0.82"}},
		{name: "comma and spaces", in: " vip = true , blacklist_flag=false ", want: Set{"vip": "true", "blacklist_flag": "false"}},
		{name: "mixed separators and trailing", in: "a=1;b=2,c=3;", want: Set{"a": "1", "b": "2", "c": "3"}},
		{name: "empty value", in: "segment=", want: Set{"segment": ""}},
		{name: "equals in value", in: "sig=YWJj==", want: Set{"sig": "YWJj=="}},
		{name: "inner space in value", in: "city=new york", want: Set{"city": "new york"}},
		{name: "key charset", in: "a.b:c-d_E9=x", want: Set{"a.b:c-d_E9": "x"}},
		{name: "tabs are whitespace", in: "\tvip\t=\ttrue\t", want: Set{"vip": "true"}},
		{name: "bare name is a flag", in: "vip", want: Set{"vip": "true"}},
		{name: "flags and pairs", in: "a=1;vip, beta ", want: Set{"a": "1", "vip": "true", "beta": "true"}},
		{name: "bad flag name", in: "a=1;v p", wantErr: "not allowed"},
		{name: "flag given twice", in: "vip;vip=false", wantErr: "given twice"},
		{name: "empty key", in: "=1", wantErr: "empty tag name"},
		{name: "bad key byte", in: "v p=1", wantErr: "not allowed"},
		{name: "unicode key", in: "标签=1", wantErr: "not allowed"},
		{name: "control byte in value", in: "a=1\x00", wantErr: "not allowed"},
		{name: "tab inside value", in: "a=x\ty", wantErr: "not allowed"},
		{name: "non-ascii value", in: "city=北京", wantErr: "not allowed"},
		{name: "duplicate", in: "vip=true;vip=false", wantErr: "given twice"},
		{name: "key too long", in: strings.Repeat("k", MaxKeyLen+1) + "=1", wantErr: "more than 64"},
		{name: "value too long", in: "k=" + strings.Repeat("v", MaxValueLen+1), wantErr: "more than 256"},
		{name: "header too long", in: strings.Repeat("a", MaxHeaderLen+1), wantErr: "more than 4096"},
		{name: "too many tags", in: manyTags(MaxTags + 1), wantErr: "more than 64 tags"},
		{name: "max tags", in: manyTags(MaxTags), want: parsedMany(MaxTags)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseHeader(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseHeader(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
				}
				if got != nil {
					t.Errorf("ParseHeader(%q) = %v with an error, want nil", tt.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseHeader(%q) error = %v", tt.in, err)
			}
			if !maps.Equal(got, tt.want) || (got == nil) != (tt.want == nil) {
				t.Errorf("ParseHeader(%q) = %#v, want %#v", tt.in, got, tt.want)
			}
		})
	}
}

// TestParseHeaderCopies guards the fasthttp case: the caller's buffer is
// reused after the request, so the Set must not point into it.
func TestParseHeaderCopies(t *testing.T) {
	buf := []byte("vip=true;tier=gold")
	s, err := ParseHeader(string(buf[:]))
	if err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = 'x'
	}
	if s["vip"] != "true" || s["tier"] != "gold" {
		t.Errorf("Set changed with the input buffer: %v", s)
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		name    string
		in      Set
		want    string
		wantErr string
	}{
		{name: "nil", in: nil, want: ""},
		{name: "sorted", in: Set{"vip": "true", "a": "1", "multi_loan_index": "0.82"}, want: "a=1;multi_loan_index=0.82;vip=true"},
		{name: "semicolon in value", in: Set{"a": "x;b=1"}, wantErr: "not allowed"},
		{name: "bad key", in: Set{"a b": "1"}, wantErr: "not allowed"},
		{name: "padded value", in: Set{"a": " 1"}, wantErr: "leading or trailing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Format(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Format(%v) = %q, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Format(%v) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestStatus(t *testing.T) {
	var zero Status
	if zero != Unknown {
		t.Errorf("zero Status = %v, want unknown (fail closed)", zero)
	}
	for s, want := range map[Status]string{Unknown: "unknown", None: "none", Known: "known", 9: "Status(9)"} {
		if got := s.String(); got != want {
			t.Errorf("Status(%d).String() = %q, want %q", s, got, want)
		}
	}
	b, _ := Known.MarshalText()
	if string(b) != "known" {
		t.Errorf("Known.MarshalText() = %q", b)
	}
}

// FuzzParseHeader checks that ParseHeader never panics, that everything it
// accepts obeys the documented limits, and that Format round-trips it.
func FuzzParseHeader(f *testing.F) {
	for _, s := range []string{"", "vip=true;multi_loan_index=0.82", " a = 1 , b=2;", "a", "=", "a=1;a=2", "k=v=w", "a=\x00", ";;,", "x=new york"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseHeader(in)
		if err != nil {
			if s != nil {
				t.Fatalf("ParseHeader(%q) returned %v and error %v", in, s, err)
			}
			return
		}
		if len(s) > MaxTags {
			t.Fatalf("ParseHeader(%q): %d tags", in, len(s))
		}
		for k, v := range s {
			if !ValidKey(k) || checkValue(v) != nil || v != trimOWS(v) {
				t.Fatalf("ParseHeader(%q) accepted %q=%q", in, k, v)
			}
		}
		out, err := Format(s)
		if err != nil {
			t.Fatalf("Format(ParseHeader(%q)) error: %v", in, err)
		}
		back, err := ParseHeader(out)
		if err != nil || !maps.Equal(back, s) {
			t.Fatalf("round trip %q -> %q -> %v, %v; want %v", in, out, back, err, s)
		}
	})
}

func BenchmarkParseHeader(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseHeader("vip=true;multi_loan_index=0.82;blacklist_flag=false"); err != nil {
			b.Fatal(err)
		}
	}
}

func manyTags(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = "t" + strconv.Itoa(i) + "=1"
	}
	return strings.Join(parts, ";")
}

func parsedMany(n int) Set {
	s := make(Set, n)
	for i := range n {
		s["t"+strconv.Itoa(i)] = "1"
	}
	return s
}
