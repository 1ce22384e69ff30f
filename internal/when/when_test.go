package when

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"cel.dev/cel-go/common/types"
)

// fakeInput is an Input backed by maps. Header keys are stored in lower
// case and matched exactly, so the tests see whether Eval lowers names as the
// Input contract promises. Counters are atomic so one fakeInput can be shared
// by goroutines.
type fakeInput struct {
	path, method string
	headers      map[string]string // lower-case keys
	query        map[string]string
	cookies      map[string]string
	userID       string
	tags         map[string]string
	tagsErr      error // the tags are unknown (TagsErr)
	country      string
	province     string
	city         string
	hasRegion    bool
	ip           string

	headerNames []string // names passed to Header, when recordNames is set
	recordNames bool

	headerCalls, tagCalls, tagNamesCalls, regionCalls atomic.Int64
}

func (f *fakeInput) Path() string   { return f.path }
func (f *fakeInput) Method() string { return f.method }
func (f *fakeInput) Header(name string) (string, bool) {
	f.headerCalls.Add(1)
	if f.recordNames {
		f.headerNames = append(f.headerNames, name)
	}
	v, ok := f.headers[name]
	return v, ok
}
func (f *fakeInput) Query(name string) (string, bool)  { v, ok := f.query[name]; return v, ok }
func (f *fakeInput) Cookie(name string) (string, bool) { v, ok := f.cookies[name]; return v, ok }
func (f *fakeInput) UserID() string                    { return f.userID }
func (f *fakeInput) Tag(name string) (string, bool) {
	f.tagCalls.Add(1)
	v, ok := f.tags[name]
	return v, ok
}
func (f *fakeInput) TagNames() []string {
	f.tagNamesCalls.Add(1)
	names := make([]string, 0, len(f.tags))
	for k := range f.tags {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}
func (f *fakeInput) TagsErr() error { return f.tagsErr }
func (f *fakeInput) Region() (string, string, string, bool) {
	f.regionCalls.Add(1)
	return f.country, f.province, f.city, f.hasRegion
}
func (f *fakeInput) ClientIP() string { return f.ip }

func newFake() *fakeInput {
	return &fakeInput{
		path:    "/api/orders/42",
		method:  "GET",
		headers: map[string]string{"x-beta": "1", "user-agent": "Mozilla/5.0 (iPhone)"},
		query:   map[string]string{"lang": "zh", "Debug": "on"},
		cookies: map[string]string{"session": "abc", "gray": "v2"},
		userID:  "u-1001",
		tags: map[string]string{
			"vip":              "true",
			"multi_loan_index": "0.82",
			"level":            "3",
			"bad":              "abc",
		},
		country:   "CN",
		province:  "Zhejiang",
		city:      "Hangzhou",
		hasRegion: true,
		ip:        "10.1.2.3",
	}
}

func mustCompile(t testing.TB, src string) *Expr {
	t.Helper()
	e, err := Compile(src, Options{})
	if err != nil {
		t.Fatalf("Compile(%q): %v", src, err)
	}
	return e
}

func TestEval(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want bool
	}{
		{"path true", `request.path == "/api/orders/42"`, true},
		{"path false", `request.path == "/api/orders/43"`, false},
		{"path startsWith", `request.path.startsWith("/api/")`, true},
		{"path matches false", `request.path.matches("^/web/")`, false},
		{"method true", `request.method == "GET"`, true},
		{"method false", `request.method in ["POST", "PUT"]`, false},
		{"header true", `request.header["x-beta"] == "1"`, true},
		{"header false", `request.header["x-beta"] == "0"`, false},
		{"header contains", `request.header["user-agent"].contains("iPhone")`, true},
		{"query true", `request.query["lang"] == "zh"`, true},
		{"query case-sensitive", `"debug" in request.query`, false},
		{"query exact case", `request.query["Debug"] == "on"`, true},
		{"cookie true", `request.cookie["gray"] == "v2"`, true},
		{"cookie false", `request.cookie.session == "xyz"`, false},
		{"user id true", `user.id == "u-1001"`, true},
		{"user id false", `user.id.endsWith("2")`, false},
		{"tag string true", `user.tags["vip"] == "true"`, true},
		{"tag double true", `double(user.tags["multi_loan_index"]) > 0.7`, true},
		{"tag double false", `double(user.tags["multi_loan_index"]) > 0.9`, false},
		{"tag int", `int(user.tags["level"]) >= 3`, true},
		{"tag select", `user.tags.vip == "true"`, true},
		{"tags size", `size(user.tags) == 4`, true},
		{"tags exists", `user.tags.exists(k, k.startsWith("multi_"))`, true},
		{"tags all false", `user.tags.all(k, user.tags[k] != "abc")`, false},
		{"tags map", `user.tags.filter(k, k.size() == 3).size() == 2`, true},
		{"tags equal literal false", `user.tags == {"vip": "true"}`, false},
		{"region country", `user.region.country == "CN"`, true},
		{"region index", `user.region["city"] == "Shanghai"`, false},
		{"region equal literal", `user.region == {"country": "CN", "province": "Zhejiang", "city": "Hangzhou"}`, true},
		{"literal equal region", `{"country": "CN", "province": "Zhejiang", "city": "Hangzhou"} == user.region`, true},
		{"region size", `size(user.region) == 3`, true},
		{"region keys", `user.region.all(k, k in ["country", "province", "city"])`, true},
		{"client ip true", `client.ip == "10.1.2.3"`, true},
		{"client ip false", `client.ip.startsWith("192.168.")`, false},
		{"issue example", `request.path.startsWith("/api/") && user.tags["vip"] == "true" && double(user.tags["multi_loan_index"]) > 0.7`, true},
		{"multi line", "request.method == \"GET\" &&\n  user.id != \"\"", true},
		{"ternary", `user.tags["vip"] == "true" ? client.ip != "" : false`, true},
	}
	in := newFake()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := mustCompile(t, tt.src)
			got, err := e.Eval(in)
			if err != nil {
				t.Fatalf("Eval(%q): %v", tt.src, err)
			}
			if got != tt.want {
				t.Errorf("Eval(%q) = %v, want %v", tt.src, got, tt.want)
			}
			if e.Source() != tt.src {
				t.Errorf("Source() = %q, want %q", e.Source(), tt.src)
			}
		})
	}
}

func TestInAndHas(t *testing.T) {
	tests := []struct {
		src  string
		want bool
	}{
		{`"vip" in user.tags`, true},
		{`"gold" in user.tags`, false},
		{`has(user.tags.vip)`, true},
		{`has(user.tags.gold)`, false},
		{`"gold" in user.tags && user.tags["gold"] == "true"`, false},
		{`has(user.tags.gold) && double(user.tags.gold) > 1.0`, false},
		{`"X-Beta" in request.header`, true},
		{`"x-missing" in request.header`, false},
		{`has(request.header.accept)`, false},
		{`"lang" in request.query`, true},
		{`has(request.query.page)`, false},
		{`"gray" in request.cookie`, true},
		{`has(request.cookie.gray)`, true},
		{`"city" in user.region`, true},
		{`has(user.region.city)`, true},
		{`has(user.region.province)`, false}, // empty means absent
		{`"province" in user.region || size(user.region) != 2`, false},
		{`has(user.region)`, true},
		{`has(request.path)`, true},
	}
	in := newFake()
	in.province = ""
	for _, tt := range tests {
		e := mustCompile(t, tt.src)
		got, err := e.Eval(in)
		if err != nil || got != tt.want {
			t.Errorf("Eval(%q) = %v, %v; want %v, nil", tt.src, got, err, tt.want)
		}
	}
}

func TestRegionUnknown(t *testing.T) {
	in := newFake()
	in.hasRegion = false
	for _, tt := range []struct {
		src  string
		want bool
	}{
		{`has(user.region)`, false},
		{`"country" in user.region`, false},
		{`size(user.region) == 0`, true},
		{`!has(user.region.country)`, true},
	} {
		got, err := mustCompile(t, tt.src).Eval(in)
		if err != nil || got != tt.want {
			t.Errorf("Eval(%q) = %v, %v; want %v, nil", tt.src, got, err, tt.want)
		}
	}
	if _, err := mustCompile(t, `user.region.country == "CN"`).Eval(in); err == nil {
		t.Errorf(`Eval(user.region.country == "CN") without a region: want an error, got none`)
	}
}

// TestTagsUnknown: while a tag source has failed, an expression that
// depends on user.tags fails closed (an error, so no match), however it
// reads them, as a tag condition does; one whose result does not depend on
// them still decides.
func TestTagsUnknown(t *testing.T) {
	in := newFake()
	in.tags = map[string]string{"vip": "true"} // what the sources that answered said
	in.tagsErr = errors.New("redis: tags unknown")
	for _, src := range []string{
		`!("blacklist_flag" in user.tags)`,
		`!has(user.tags.blacklist_flag)`,
		`"vip" in user.tags`,
		`user.tags.vip == "true"`,
		`size(user.tags) < 3`,
		`user.tags.all(k, k != "blacklist_flag")`,
		`!user.tags.exists(k, k == "blacklist_flag")`,
		`request.path.startsWith("/api/") && !("blacklist_flag" in user.tags)`,
	} {
		got, err := mustCompile(t, src).Eval(in)
		if got || err == nil || !strings.Contains(err.Error(), "redis: tags unknown") {
			t.Errorf("Eval(%q) with unknown tags = %v, %v; want false and the reason", src, got, err)
		}
	}
	for _, tt := range []struct {
		src  string
		want bool
	}{
		{`request.path.startsWith("/web/") && !("blacklist_flag" in user.tags)`, false},
		{`request.path.startsWith("/api/") || "vip" in user.tags`, true},
		{`user.id == "u-1001"`, true},
	} {
		got, err := mustCompile(t, tt.src).Eval(in)
		if err != nil || got != tt.want {
			t.Errorf("Eval(%q) with unknown tags = %v, %v; want %v, nil", tt.src, got, err, tt.want)
		}
	}
	in.tagsErr = nil
	for _, src := range []string{`!("blacklist_flag" in user.tags)`, `"vip" in user.tags`} {
		if got, err := mustCompile(t, src).Eval(in); !got || err != nil {
			t.Errorf("Eval(%q) with known tags = %v, %v; want true, nil", src, got, err)
		}
	}
}

func TestHeaderCaseInsensitive(t *testing.T) {
	in := newFake()
	in.tags["hdr"] = "X-BETA"
	for _, src := range []string{
		`request.header["x-beta"] == "1"`,
		`request.header["X-Beta"] == "1"`,
		`request.header["X-BETA"] == "1"`,
		`"X-Beta" in request.header`,
		`has(request.header.X_Missing) == false && request.header["x-Beta"] == "1"`,
		`request.header[user.tags["hdr"]] == "1"`, // dynamic name
	} {
		t.Run(src, func(t *testing.T) {
			e := mustCompile(t, src)
			in.recordNames, in.headerNames = true, nil
			got, err := e.Eval(in)
			if err != nil || !got {
				t.Fatalf("Eval(%q) = %v, %v; want true, nil", src, got, err)
			}
			for _, n := range in.headerNames {
				if n != strings.ToLower(n) {
					t.Errorf("Eval(%q) called Header(%q); want lower case", src, n)
				}
			}
		})
	}

	// Constant names are lowered when compiling, so an upper-case constant
	// costs no allocation per evaluation.
	if raceEnabled {
		return
	}
	in.recordNames = false
	lower, upper := mustCompile(t, `request.header["x-beta"] == "1"`), mustCompile(t, `request.header["X-Beta"] == "1"`)
	al := testing.AllocsPerRun(100, func() { _, _ = lower.Eval(in) })
	au := testing.AllocsPerRun(100, func() { _, _ = upper.Eval(in) })
	if au > al {
		t.Errorf("allocs per Eval: %q %.0f, %q %.0f; want equal", upper.Source(), au, lower.Source(), al)
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want string
	}{
		{"undeclared", `request.method == "GET" || requst.path == "/"`,
			`line 1, column 28: undeclared reference to 'requst' (did you mean 'request'?)`},
		{"undefined field", `request.pth == "/"`, `line 1, column 8: undefined field 'pth'`},
		{"second line", "request.path == \"/\" &&\n  user.idd == \"x\"", `line 2, column 7: undefined field 'idd'`},
		{"syntax", `request.path == `,
			`line 1, column 17: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}`},
		{"result string", `request.path`, `result must be bool, got string`},
		{"result map", `user.tags`, `result must be bool, got map(string, string)`},
		{"result dyn", `dyn(true)`, `result must be bool, got dyn`},
		{"argument type", `request.path.startsWith(1)`,
			`line 1, column 24: found no matching overload for 'startsWith' applied to 'string.(int)'`},
		{"tag without conversion", `user.tags["score"] > 0.7`,
			`line 1, column 20: found no matching overload for '_>_' applied to '(string, double)'`},
		{"header size", `size(request.header) > 1`,
			`line 1, column 13: request.header can only be looked up: use request.header["name"], has(request.header.name) or "name" in request.header`},
		{"query iteration", `request.query.exists(k, k == "a")`,
			`line 1, column 8: request.query can only be looked up: use request.query["name"], has(request.query.name) or "name" in request.query`},
		{"cookie equality", `request.cookie == {"a": "b"}`,
			`line 1, column 8: request.cookie can only be looked up: use request.cookie["name"], has(request.cookie.name) or "name" in request.cookie`},
		{"whole object", `[user].size() == 1`, `line 1, column 2: user must be followed by a field, e.g. user.id`},
		{"construct object", `graygate.Client{ip: "1.2.3.4"}.ip == "1.2.3.4"`,
			`line 1, column 16: graygate.Client cannot be constructed; use the client variable`},
		{"two errors", `request == request`,
			"line 1, column 1: request must be followed by a field, e.g. request.path\nline 1, column 12: request must be followed by a field, e.g. request.path"},
		{"bad regex", `request.path.matches("^/api/(v1|v2")`,
			"line 1, column 22: invalid regular expression: missing closing ): `^/api/(v1|v2`"},
		{"bad regex global", "matches(user.id,\n  \"[z-a]\")",
			"line 2, column 3: invalid regular expression: invalid character class range: `z-a`"},
		{"dynamic regex too costly", `request.path.matches(user.id)`,
			"estimated cost 26225 exceeds the limit 10000 (nested loops and regular expressions over long values cost the most)"},
		{"too long", strings.Repeat(" ", maxSourceLen) + "true",
			fmt.Sprintf("expression code point size exceeds limit: size: %d, limit %d", maxSourceLen+4, maxSourceLen)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Compile(tt.src, Options{})
			if err == nil {
				t.Fatalf("Compile(%q) = %v, want error %q", tt.src, e.Source(), tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("Compile(%q) error:\n got %q\nwant %q", tt.src, err.Error(), tt.want)
			}
		})
	}
}

func TestCompileErrorPosition(t *testing.T) {
	_, err := Compile("user.id == \"a\" ||\n\tuser.tags.vip == requst.path", Options{})
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("Compile error %v (%T) is not a *Error", err, err)
	}
	if pe.Line != 2 || pe.Column != 19 || !strings.HasPrefix(pe.Message, "undeclared reference to 'requst'") {
		t.Errorf("error = %+v, want line 2, column 19, undeclared reference to 'requst'", *pe)
	}
}

func TestCost(t *testing.T) {
	re := `"^/api/v[0-9]+/(orders|users)/[0-9]+$"`
	tests := []struct {
		name    string
		src     string
		maxCost uint64
		ok      bool
	}{
		{"cheap", `request.method == "GET"`, 0, true},
		{"issue example", `request.path.startsWith("/api/") && user.tags["vip"] == "true" && double(user.tags["multi_loan_index"]) > 0.7`, 0, true},
		{"one regex", `request.path.matches(` + re + `)`, 0, true},
		{"repeated regex", strings.Repeat(`request.path.matches(`+re+`) || `, 8) + "false", 0, false},
		{"one loop over tags", `user.tags.exists(k, k.startsWith("ab_"))`, 0, true},
		{"nested loops over tags", `user.tags.exists(k, user.tags.exists(j, j == k + "_x"))`, 0, false},
		{"nested with regex", `user.tags.all(k, user.tags.all(j, user.tags[j].matches(user.tags[k])))`, 0, false},
		{"low limit rejects regex", `request.path.matches(` + re + `)`, 100, false},
		{"high limit admits nested", `user.tags.exists(k, user.tags.exists(j, j == k))`, 10_000_000, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Compile(tt.src, Options{MaxCost: tt.maxCost})
			if tt.ok {
				if err != nil {
					t.Fatalf("Compile(%q): %v", tt.src, err)
				}
				limit := tt.maxCost
				if limit == 0 {
					limit = DefaultMaxCost
				}
				if e.Cost() > limit {
					t.Errorf("Cost() = %d, above the limit %d", e.Cost(), limit)
				}
				return
			}
			if err == nil {
				t.Fatalf("Compile(%q) succeeded with cost %d, want a cost error", tt.src, e.Cost())
			}
			if !strings.Contains(err.Error(), "exceeds the limit") {
				t.Errorf("Compile(%q) error = %v, want a cost error", tt.src, err)
			}
		})
	}
}

// TestRuntimeCostLimit: the static estimate assumes at most maxTags tags; an
// input far beyond that is stopped by the runtime limit.
func TestRuntimeCostLimit(t *testing.T) {
	e := mustCompile(t, `user.tags.all(k, k.matches("^[a-z_0-9]+$"))`)
	in := newFake()
	if got, err := e.Eval(in); err != nil || !got {
		t.Fatalf("Eval with %d tags = %v, %v; want true, nil", len(in.tags), got, err)
	}
	in.tags = make(map[string]string, 50*maxTags)
	for i := range 50 * maxTags {
		in.tags[fmt.Sprintf("tag_%05d", i)] = "x"
	}
	got, err := e.Eval(in)
	if err == nil || got {
		t.Fatalf("Eval with %d tags = %v, %v; want false and a cost limit error", len(in.tags), got, err)
	}
	if !strings.Contains(err.Error(), "cost limit exceeded") {
		t.Errorf("Eval error = %v, want cost limit exceeded", err)
	}
}

// TestOversizeInput: values beyond the estimate's size bounds are rerun
// under the cost tracker, which gives the same answers for cheap expressions
// and stops expensive ones.
func TestOversizeInput(t *testing.T) {
	longPath := "/api/" + strings.Repeat("a", 1<<20)
	manyTags := make(map[string]string, 2*maxTags)
	for i := range 2 * maxTags {
		manyTags[fmt.Sprintf("t%04d", i)] = "v"
	}
	manyTags["vip"] = "true"
	tests := []struct {
		name    string
		src     string
		edit    func(*fakeInput)
		want    bool
		wantErr string
	}{
		{"long path cheap", `request.path.startsWith("/api/")`, func(f *fakeInput) { f.path = longPath }, true, ""},
		{"long path unused by result", `request.path.startsWith("/web/") || user.id == "u-1001"`, func(f *fakeInput) { f.path = longPath }, true, ""},
		{"long path regex", `request.path.matches("^/api/a+$")`, func(f *fakeInput) { f.path = longPath }, false, "cost limit exceeded"},
		{"long header", `request.header["x-beta"].endsWith("1")`, func(f *fakeInput) { f.headers["x-beta"] = strings.Repeat("1", 10000) }, true, ""},
		{"long tag value", `size(user.tags["vip"]) == 300`, func(f *fakeInput) { f.tags["vip"] = strings.Repeat("x", 300) }, true, ""},
		{"long tag name", `user.tags.exists(k, k.size() > 100)`, func(f *fakeInput) { f.tags[strings.Repeat("k", 101)] = "" }, true, ""},
		{"many tags size", `size(user.tags) == 2 * 256 + 1`, func(f *fakeInput) { f.tags = manyTags }, true, ""},
		{"many tags lookup", `user.tags.vip == "true"`, func(f *fakeInput) { f.tags = manyTags }, true, ""},
		{"long method", `request.method.size() > 16`, func(f *fakeInput) { f.method = strings.Repeat("M", 17) }, true, ""},
		{"long region", `user.region.city.size() > 64`, func(f *fakeInput) { f.city = strings.Repeat("c", 65) }, true, ""},
		{"long region equality", `user.region != {"country": "CN"}`, func(f *fakeInput) { f.city = strings.Repeat("c", 65) }, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := newFake()
			tt.edit(in)
			got, err := mustCompile(t, tt.src).Eval(in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || got {
					t.Errorf("Eval(%q) = %v, %v; want false, error containing %q", tt.src, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Eval(%q) = %v, %v; want %v, nil", tt.src, got, err, tt.want)
			}
		})
	}
}

// TestEstimateBoundsActualCost checks the premise of the untracked fast
// path: with every attribute at its size bound, the tracked cost stays
// within the estimate Compile admitted.
func TestEstimateBoundsActualCost(t *testing.T) {
	in := newFake()
	in.path = "/" + strings.Repeat("a", maxURLLen-1)
	in.method = strings.Repeat("M", maxMethodLen)
	in.headers["x-beta"] = strings.Repeat("b", maxURLLen)
	in.query["lang"] = strings.Repeat("q", maxURLLen)
	in.userID = strings.Repeat("u", maxUserIDLen)
	in.tags = make(map[string]string, maxTags)
	for i := range maxTags {
		in.tags[fmt.Sprintf("%0*d", maxTagNameLen, i)] = strings.Repeat("v", maxTagValueLen)
	}
	in.country = strings.Repeat("c", maxRegionLen)
	in.ip = strings.Repeat("f", maxIPLen)
	for _, src := range []string{
		`request.path.matches("^/a+b$")`,
		`request.path.contains("/api/v2/") || request.header["x-beta"].endsWith("x") || request.query["lang"].endsWith("x")`,
		`request.method.startsWith("G") || user.id.contains("x") || client.ip == "::1"`,
		`user.tags.exists(k, k.matches("^[0-9]+x$") || user.tags[k].contains("x"))`,
		`user.tags.all(k, user.tags[k].size() < 100)`,
		`user.region.exists(k, user.region[k] == "CN")`,
		`size(request.path + request.header["x-beta"]) > 10000`,
	} {
		e := mustCompile(t, src)
		a := newActivation()
		a.in = in
		_, det, err := e.safe.Eval(a)
		if err != nil {
			t.Errorf("Eval(%q): %v", src, err)
			continue
		}
		got := *det.ActualCost()
		if got > e.Cost() {
			t.Errorf("Eval(%q) cost %d, above the estimate %d", src, got, e.Cost())
		}
		t.Logf("%s: actual cost %d, estimate %d", src, got, e.Cost())
		// The untracked run must not have needed the tracked one.
		a.bounded = true
		if _, _, err := e.fast.Eval(a); err != nil || a.oversize {
			t.Errorf("bounded Eval(%q) = %v, oversize %v; want no error within the bounds", src, err, a.oversize)
		}
	}
}

// TestEvalAllocs pins the allocations of a bounded evaluation: none for a
// method check, one per string or double produced otherwise. Cost tracking
// on every evaluation would add at least three.
func TestEvalAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	in := newFake()
	for _, tt := range []struct {
		src  string
		want float64
	}{
		{`request.method == "GET"`, 0},
		{`"x-beta" in request.header`, 0},
		{`request.path.startsWith("/api/") && user.tags["vip"] == "true" && double(user.tags["multi_loan_index"]) > 0.7`, 4},
	} {
		e := mustCompile(t, tt.src)
		if got := testing.AllocsPerRun(200, func() { _, _ = e.Eval(in) }); got > tt.want {
			t.Errorf("Eval(%q) allocates %.0f times, want at most %.0f", tt.src, got, tt.want)
		}
	}
}

func TestEvalErrors(t *testing.T) {
	tests := []struct {
		src  string
		want string
	}{
		{`user.tags["gold"] == "true"`, "no such key: gold"},
		{`user.tags.gold == "true"`, "no such key: gold"},
		{`double(user.tags["bad"]) > 0.7`, "type conversion error from 'string' to 'double'"},
		{`int(user.tags["multi_loan_index"]) > 0`, "type conversion error from 'string' to 'int'"},
		{`request.header["x-missing"] == ""`, "no such key: x-missing"},
		{`request.query["page"] == "1"`, "no such key: page"},
		{`request.cookie["nope"] == "1"`, "no such key: nope"},
		{`user.region["district"] == "x"`, "no such key: district"},
		// all() is false only if some element is false; here "true" and
		// "abc" do not convert and no element is false, so the error stays.
		{`user.tags.all(k, double(user.tags[k]) >= 0.0)`, "type conversion error"},
	}
	in := newFake()
	for _, tt := range tests {
		got, err := mustCompile(t, tt.src).Eval(in)
		if got || err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Eval(%q) = %v, %v; want false, error containing %q", tt.src, got, err, tt.want)
		}
	}
}

func TestUses(t *testing.T) {
	tests := []struct {
		src  string
		want Uses
	}{
		{`request.method == "GET"`, Uses{Method: true}},
		{`request.path.startsWith("/a") && request.header["x"] == "1"`, Uses{Path: true, Headers: true}},
		{`"a" in request.query || has(request.cookie.b)`, Uses{Queries: true, Cookies: true}},
		{`user.id == "" || has(user.tags.vip)`, Uses{UserID: true, Tags: true}},
		{`user.region.country == "CN" && client.ip != ""`, Uses{Region: true, ClientIP: true}},
		{`[1, 2].exists(x, x == 2)`, Uses{}},
		{`[request.path].exists(p, p == user.tags[p])`, Uses{Path: true, Tags: true}},
	}
	for _, tt := range tests {
		if got := mustCompile(t, tt.src).Uses(); got != tt.want {
			t.Errorf("Compile(%q).Uses() = %+v, want %+v", tt.src, got, tt.want)
		}
	}
}

// TestLazy: an expression that does not mention tags or region never asks
// for them, and && stops at the first false operand.
func TestLazy(t *testing.T) {
	tests := []struct {
		src                   string
		tag, tagNames, region bool
		header                bool
	}{
		{`request.method == "GET" && request.path.startsWith("/api/")`, false, false, false, false},
		{`client.ip == "10.1.2.3" || user.id == "x"`, false, false, false, false},
		{`request.method == "POST" && user.tags["vip"] == "true"`, false, false, false, false},
		{`request.method == "GET" && user.tags["vip"] == "true"`, true, false, false, false},
		{`size(user.tags) > 0`, false, true, false, false},
		{`user.region.country == "CN"`, false, false, true, false},
		{`request.header["x-beta"] == "1"`, false, false, false, true},
	}
	for _, tt := range tests {
		in := newFake()
		if _, err := mustCompile(t, tt.src).Eval(in); err != nil {
			t.Fatalf("Eval(%q): %v", tt.src, err)
		}
		got := [4]bool{in.tagCalls.Load() > 0, in.tagNamesCalls.Load() > 0, in.regionCalls.Load() > 0, in.headerCalls.Load() > 0}
		want := [4]bool{tt.tag, tt.tagNames, tt.region, tt.header}
		if got != want {
			t.Errorf("Eval(%q) called Tag/TagNames/Region/Header = %v, want %v", tt.src, got, want)
		}
	}
}

// TestConcurrentEval runs one Expr from many goroutines, each with its own
// input, under -race.
func TestConcurrentEval(t *testing.T) {
	e := mustCompile(t, `request.path.startsWith("/api/") && user.tags["vip"] == "true" && double(user.tags["multi_loan_index"]) > 0.7 && request.header["X-Beta"] == "1"`)
	const goroutines, iterations = 16, 300
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			in := newFake()
			want := g%2 == 0
			if !want {
				in.tags["vip"] = "false"
			}
			for range iterations {
				got, err := e.Eval(in)
				if err != nil || got != want {
					errs <- fmt.Errorf("goroutine %d: Eval = %v, %v; want %v, nil", g, got, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestEvalDoesNotRetainInput: a pooled activation must not keep the Input
// of a finished evaluation.
func TestEvalDoesNotRetainInput(t *testing.T) {
	e := mustCompile(t, `request.method == "GET"`)
	for range 10 {
		if _, err := e.Eval(newFake()); err != nil {
			t.Fatal(err)
		}
	}
	a := activations.Get().(*activation)
	defer activations.Put(a)
	if a.in != nil {
		t.Errorf("pooled activation still holds %T", a.in)
	}
}

var fuzzSeeds = []string{
	`request.path.startsWith("/api/") && user.tags["vip"] == "true" && double(user.tags["multi_loan_index"]) > 0.7`,
	`request.method == "GET"`,
	`"x-beta" in request.header || has(request.cookie.gray)`,
	`user.region.country == "CN" && client.ip.startsWith("10.")`,
	`user.tags.exists(k, k.matches("^a"))`,
	`size(request.header) > 0`,
	`request == user`,
	`request.path ==`,
	`[1, 2, 3].map(x, x * 2)[0] == 2`,
	`user.tags.all(k, user.tags.all(j, j == k))`,
	"\"\\u00e9\" == request.path\n&& requst",
	`graygate.User{}.id == ""`,
}

// FuzzCompile: Compile never panics, and an expression it accepts evaluates
// to a bool or an error without touching attributes its Uses leaves out.
func FuzzCompile(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		e, err := Compile(src, Options{})
		if err != nil {
			if e != nil {
				t.Fatalf("Compile(%q) returned both an Expr and %v", src, err)
			}
			return
		}
		in := newFake()
		_, _ = e.Eval(in)
		u := e.Uses()
		if !u.Tags && in.tagCalls.Load()+in.tagNamesCalls.Load() > 0 {
			t.Errorf("Eval(%q) read tags, but Uses().Tags is false", src)
		}
		if !u.Region && in.regionCalls.Load() > 0 {
			t.Errorf("Eval(%q) read the region, but Uses().Region is false", src)
		}
		if !u.Headers && in.headerCalls.Load() > 0 {
			t.Errorf("Eval(%q) read headers, but Uses().Headers is false", src)
		}
	})
}

// FuzzEval evaluates fixed expressions against fuzzed attribute values.
func FuzzEval(f *testing.F) {
	exprs := []*Expr{}
	for _, s := range fuzzSeeds {
		if e, err := Compile(s, Options{}); err == nil {
			exprs = append(exprs, e)
		}
	}
	exprs = append(exprs,
		mustCompile(f, `double(user.tags["multi_loan_index"]) > 0.7 || int(user.tags["vip"]) > 1`),
		mustCompile(f, `request.header[user.tags["vip"]] == request.path`),
	)
	// A regular expression taken from the input costs more than the default
	// limit admits; the fuzzer still wants bad patterns exercised.
	dyn, err := Compile(`request.path.matches(user.tags["vip"])`, Options{MaxCost: 1 << 20})
	if err != nil {
		f.Fatal(err)
	}
	exprs = append(exprs, dyn)
	f.Add("/api/", "x-beta", "true", "0.9", false)
	f.Add("", "", "", "", false)
	f.Add("/\xff", "X-BETA", "(", "1e400", true)
	f.Add("/api/", "x-beta", "?true", "0.9", false)
	f.Fuzz(func(t *testing.T, path, header, vip, index string, long bool) {
		if long {
			// Beyond the estimate's bounds: the tracked program decides.
			path += strings.Repeat("/", maxURLLen)
			vip += strings.Repeat("v", maxTagValueLen)
		}
		in := newFake()
		in.path = path
		in.headers = map[string]string{strings.ToLower(header): path}
		in.tags = map[string]string{"vip": vip, "multi_loan_index": index}
		if strings.HasPrefix(vip, "?") {
			in.tagsErr = errors.New("tags unknown") // a source failed
		}
		for _, e := range exprs {
			got, err := e.Eval(in)
			if err != nil && got {
				t.Errorf("Eval(%q) = true with error %v", e.Source(), err)
			}
			if in.tagsErr != nil && e.Uses() == (Uses{Tags: true}) && (got || err == nil) {
				t.Errorf("Eval(%q) = %v, %v while the tags are unknown; it reads nothing else, so want false and an error", e.Source(), got, err)
			}
			if err != nil && err.Error() == errOversize.(error).Error() {
				t.Errorf("Eval(%q) leaked the internal oversize error", e.Source())
			}
		}
	})
}

func BenchmarkEval(b *testing.B) {
	for _, bm := range []struct{ name, src string }{
		{"issue", `request.path.startsWith("/api/") && user.tags["vip"] == "true" && double(user.tags["multi_loan_index"]) > 0.7`},
		{"method", `request.method == "GET"`},
		{"header", `request.header["X-Beta"] == "1"`},
	} {
		b.Run(bm.name, func(b *testing.B) {
			e := mustCompile(b, bm.src)
			in := newFake()
			b.ReportAllocs()
			for b.Loop() {
				if ok, err := e.Eval(in); !ok || err != nil {
					b.Fatalf("Eval(%q) = %v, %v", bm.src, ok, err)
				}
			}
		})
	}
}

// BenchmarkEvalTracked runs the cost-tracked program on every evaluation,
// which Eval avoids for inputs within the bounds; it is here to show why.
func BenchmarkEvalTracked(b *testing.B) {
	e := mustCompile(b, `request.path.startsWith("/api/") && user.tags["vip"] == "true" && double(user.tags["multi_loan_index"]) > 0.7`)
	a := newActivation()
	a.in = newFake()
	b.ReportAllocs()
	for b.Loop() {
		if out, _, err := e.safe.Eval(a); err != nil || out != types.True {
			b.Fatalf("Eval = %v, %v", out, err)
		}
	}
}

func BenchmarkCompile(b *testing.B) {
	src := `request.path.startsWith("/api/") && user.tags["vip"] == "true" && double(user.tags["multi_loan_index"]) > 0.7`
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile(src, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestGRPCAttributes(t *testing.T) {
	grpcReq := func(ct, path string) *fakeInput {
		f := newFake()
		f.path = path
		f.headers["content-type"] = ct
		return f
	}
	tests := []struct {
		name string
		in   *fakeInput
		expr string
		want bool
	}{
		{"service", grpcReq("application/grpc", "/grpc.testing.TestService/UnaryCall"), `request.grpc.service == "grpc.testing.TestService"`, true},
		{"method", grpcReq("application/grpc+proto", "/grpc.testing.TestService/UnaryCall"), `request.grpc.method == "UnaryCall"`, true},
		{"both", grpcReq("application/grpc; charset=utf-8", "/pkg.Svc/Do"), `request.grpc.service == "pkg.Svc" && request.grpc["method"].startsWith("D")`, true},
		{"not grpc: empty", grpcReq("application/json", "/pkg.Svc/Do"), `request.grpc.service == "" && request.grpc.method == ""`, true},
		{"grpc-web is not grpc", grpcReq("application/grpc-web", "/pkg.Svc/Do"), `request.grpc.service == ""`, true},
		{"not a method path", grpcReq("application/grpc", "/pkg.Svc/Do/more"), `request.grpc.method == ""`, true},
		{"keys", grpcReq("application/grpc", "/a.B/C"), `size(request.grpc) == 2 && "service" in request.grpc`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := mustCompile(t, tt.expr).Eval(tt.in)
			if err != nil || got != tt.want {
				t.Errorf("Eval(%s) = %v, %v; want %v", tt.expr, got, err, tt.want)
			}
		})
	}
	if u := mustCompile(t, `request.grpc.service == "x"`).Uses(); !u.Path || !u.Headers {
		t.Errorf("Uses of request.grpc = %+v, want Path and Headers", u)
	}
}

// FuzzGRPCCall: request.grpc never panics on any path or content type,
// and a service it finds is the path's first segment.
func FuzzGRPCCall(f *testing.F) {
	f.Add("application/grpc", "/a.B/C")
	f.Add("application/grpc+proto", "//")
	f.Add("application/grpcx", "/a/b")
	f.Fuzz(func(t *testing.T, ct, path string) {
		in := newFake()
		in.path = path
		in.headers["content-type"] = ct
		service, method := grpcCall(in)
		if (service == "") != (method == "") {
			t.Fatalf("grpcCall(%q, %q) = %q, %q", ct, path, service, method)
		}
		if service != "" && (path != "/"+service+"/"+method || strings.Contains(service, "/") || strings.Contains(method, "/")) {
			t.Fatalf("grpcCall(%q, %q) = %q, %q", ct, path, service, method)
		}
	})
}
