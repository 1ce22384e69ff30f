package breaker

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/strict"
)

func TestDefaults(t *testing.T) {
	d := Defaults()
	if err := d.Validate("breaker"); err != nil {
		t.Fatalf("Defaults().Validate: %v", err)
	}
	if d.LatencyMinRequests != 100 {
		t.Errorf("Defaults().LatencyMinRequests = %d, want 100: a p99 needs 100 samples", d.LatencyMinRequests)
	}
	if got := (Config{}).WithDefaults(); !got.equal(d) {
		t.Errorf("Config{}.WithDefaults() = %+v, want %+v", got, d)
	}
	s := newSettings(Config{})
	type units struct {
		enabled                                     bool
		window, p99, openFor, probeTimeout          time.Duration
		rateBP, minRequests, probes                 uint64
		failure500, failure599, failure499, fail600 bool
	}
	got := units{s.enabled, s.window, s.p99, s.openFor, s.probeTimeout, s.rateBP, s.minRequests, s.probes,
		s.statuses.Contains(500), s.statuses.Contains(599), s.statuses.Contains(499), s.statuses.Contains(600)}
	want := units{true, 30 * time.Second, 500 * time.Millisecond, time.Minute, time.Minute, 2000, 20, 5, true, true, false, false}
	if got != want {
		t.Errorf("settings of the defaults = %+v, want %+v", got, want)
	}
	// WithDefaults copies: changing the result leaves the input alone.
	in := Config{ErrorStatuses: []StatusRange{{502, 502}}}
	out := in.WithDefaults()
	out.ErrorStatuses[0].Lo = 400
	if in.ErrorStatuses[0].Lo != 502 {
		t.Error("WithDefaults shares error_statuses with its receiver")
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string // "path: message", in order
	}{
		{name: "zero is valid", cfg: Config{}},
		{name: "every field set", cfg: Config{
			Enabled: new(false), Window: Duration(time.Minute), ErrorRate: 2.5, P99Latency: Duration(time.Second),
			MinRequests: 100, OpenFor: Duration(10 * time.Second), HalfOpenProbes: 1,
			ErrorStatuses: []StatusRange{{502, 504}, {429, 429}},
		}},
		{name: "limits are inclusive", cfg: Config{
			Window: Duration(time.Hour), ErrorRate: 100, P99Latency: Duration(time.Minute),
			OpenFor: Duration(24 * time.Hour), HalfOpenProbes: maxProbes, ErrorStatuses: []StatusRange{{100, 599}},
		}},
		{name: "everything wrong", cfg: Config{
			Window: Duration(500 * time.Millisecond), ErrorRate: 120, P99Latency: Duration(2 * time.Minute),
			MinRequests: -1, LatencyMinRequests: -1, OpenFor: Duration(-time.Second), HalfOpenProbes: 1001,
			ErrorStatuses: []StatusRange{{500, 599}, {99, 99}, {599, 500}, {500, 600}},
		}, want: []string{
			"rules[3].breaker.window: must be between 1s and 1h0m0s, got 500ms",
			"rules[3].breaker.p99_latency: must be between 1ms and 1m0s, got 2m0s",
			"rules[3].breaker.open_for: must be between 1s and 24h0m0s, got -1s",
			"rules[3].breaker.error_rate: must be a percentage between 0.01 and 100, got 120",
			"rules[3].breaker.min_requests: must not be negative, got -1",
			"rules[3].breaker.latency_min_requests: must be between 1 and 1000000, got -1",
			"rules[3].breaker.half_open_probes: must be between 1 and 1000, got 1001",
			"rules[3].breaker.error_statuses[1]: status codes must be between 100 and 599, got 99",
			"rules[3].breaker.error_statuses[2]: range must go from low to high, got 599-500",
			"rules[3].breaker.error_statuses[3]: status codes must be between 100 and 599, got 500-600",
		}},
		{name: "error rate too fine", cfg: Config{ErrorRate: 0.001}, want: []string{
			"rules[3].breaker.error_rate: must be a percentage between 0.01 and 100, got 0.001",
		}},
		{name: "error rate NaN", cfg: Config{ErrorRate: math.NaN()}, want: []string{
			"rules[3].breaker.error_rate: must be a percentage between 0.01 and 100, got NaN",
		}},
		{name: "negative probes", cfg: Config{HalfOpenProbes: -2}, want: []string{
			"rules[3].breaker.half_open_probes: must be between 1 and 1000, got -2",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate("rules[3].breaker")
			var got []string
			for _, f := range strict.Fields(err) {
				got = append(got, f.Path+": "+f.Message)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Validate() =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if _, err := New(tt.cfg, Options{}); (err == nil) != (tt.want == nil) {
				t.Errorf("New() error = %v, want an error: %v", err, tt.want != nil)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	const doc = `{
		"enabled": false,
		"window": "10s",
		"error_rate": 34.5,
		"p99_latency": "800ms",
		"min_requests": 50,
		"latency_min_requests": 200,
		"open_for": "2m",
		"half_open_probes": 3,
		"error_statuses": [502, "503", "520-599", "4xx", " 429 "]
	}`
	var c Config
	if err := strict.Decode([]byte(doc), &c); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	want := Config{
		Enabled: new(false), Window: Duration(10 * time.Second), ErrorRate: 34.5, P99Latency: Duration(800 * time.Millisecond),
		MinRequests: 50, LatencyMinRequests: 200, OpenFor: Duration(2 * time.Minute), HalfOpenProbes: 3,
		ErrorStatuses: []StatusRange{{502, 502}, {503, 503}, {520, 599}, {400, 499}, {429, 429}},
	}
	if !c.equal(want) {
		t.Fatalf("Decode = %+v, want %+v", c, want)
	}
	if err := c.Validate(""); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	// And back: a marshalled config decodes to itself.
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	const wantJSON = `{"enabled":false,"window":"10s","error_rate":34.5,"p99_latency":"800ms","min_requests":50,"latency_min_requests":200,"open_for":"2m0s","half_open_probes":3,"error_statuses":[502,503,"520-599","400-499",429]}`
	if string(data) != wantJSON {
		t.Errorf("Marshal =\n%s\nwant\n%s", data, wantJSON)
	}
	var back Config
	if err := strict.Decode(data, &back); err != nil || !back.equal(c) {
		t.Errorf("round trip = %+v, %v", back, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		doc  string
		want []string
	}{
		{`{"window": 30}`, []string{`window: expected a duration string such as "500ms" or "30s", got 30`}},
		{`{"window": "30"}`, []string{`window: expected a non-negative duration such as "500ms" or "30s", got "30"`}},
		{`{"p99_latency": "-1s"}`, []string{`p99_latency: expected a non-negative duration such as "500ms" or "30s", got "-1s"`}},
		{`{"error_rate": "20%"}`, []string{`error_rate: expected a number, got "20%"`}},
		{`{"enabled": "yes"}`, []string{`enabled: expected true or false, got "yes"`}},
		{`{"error_statuses": [500.5, "5xx", "abc", "500-", true]}`, []string{
			`error_statuses[0]: expected a status code, got 500.5`,
			`error_statuses[2]: expected a status code or a range such as "500-599" or "5xx", got "abc"`,
			`error_statuses[3]: expected a status code or a range such as "500-599" or "5xx", got "500-"`,
			`error_statuses[4]: expected a status code or a range such as "500-599"`,
		}},
		{`{"error_statuse": ["5xx"]}`, []string{`error_statuse: unknown field`}},
	}
	for _, tt := range tests {
		var c Config
		var got []string
		for _, f := range strict.Fields(strict.Decode([]byte(tt.doc), &c)) {
			got = append(got, f.Path+": "+f.Message)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Decode(%s) =\n%s\nwant\n%s", tt.doc, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
		}
	}
}

func TestNullAndEmptyErrorStatuses(t *testing.T) {
	for _, tt := range []struct {
		doc  string
		want bool // is 503 a failure
	}{
		{`{}`, true},
		{`{"error_statuses": null}`, true},
		{`{"error_statuses": []}`, false},
		{`{"error_statuses": ["502-504"]}`, true},
		{`{"error_statuses": [502]}`, false},
	} {
		var c Config
		if err := strict.Decode([]byte(tt.doc), &c); err != nil {
			t.Fatalf("Decode(%s): %v", tt.doc, err)
		}
		s := NewStatusSet(c.WithDefaults().ErrorStatuses)
		if got := s.Contains(503); got != tt.want {
			t.Errorf("%s: 503 is a failure = %v, want %v", tt.doc, got, tt.want)
		}
	}
}

func TestStatusSet(t *testing.T) {
	s := NewStatusSet([]StatusRange{{500, 599}, {429, 429}, {0, 150}, {590, 700}})
	for code, want := range map[int]bool{
		99: false, 100: true, 150: true, 151: false, 428: false, 429: true, 430: false,
		499: false, 500: true, 563: true, 599: true, 600: false, 640: false, 1000: false, -1: false,
	} {
		if got := s.Contains(code); got != want {
			t.Errorf("Contains(%d) = %v, want %v", code, got, want)
		}
	}
	var empty StatusSet
	if empty.Contains(500) {
		t.Error("the zero StatusSet contains 500")
	}
}

// FuzzConfig decodes arbitrary JSON as a Config. It must never panic; a
// config that validates must build a breaker and survive a JSON round trip.
func FuzzConfig(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"window":"10s","error_rate":34.5,"p99_latency":"800ms","min_requests":50,"open_for":"2m","half_open_probes":3,"error_statuses":[502,"503","520-599","4xx"],"enabled":false}`,
		`{"error_statuses":[]}`,
		`{"error_statuses":["599-500"," 5XX ","-1","1-2-3"]}`,
		`{"window":"1h0m0.000000001s","error_rate":1e-300}`,
		`{"p99_latency":"9223372036854775807ns"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var c Config
		if err := strict.Decode(data, &c); err != nil {
			return
		}
		if c.Validate("breaker") != nil {
			return
		}
		b, err := New(c, Options{})
		if err != nil {
			t.Fatalf("New after Validate: %v", err)
		}
		tk, ok := b.Allow()
		if !ok {
			t.Fatal("a new breaker refused a request")
		}
		b.Record(tk, Outcome{Latency: time.Millisecond, Failed: true})
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		var back Config
		if err := strict.Decode(out, &back); err != nil {
			t.Fatalf("Decode(%s): %v", out, err)
		}
		if !back.WithDefaults().equal(c.WithDefaults()) {
			t.Fatalf("round trip: %+v != %+v", back, c)
		}
	})
}

func TestOver(t *testing.T) {
	off := false
	defaults := Config{Window: Duration(10 * time.Second), ErrorRate: 5, MinRequests: 50, LatencyMinRequests: 300, ErrorStatuses: []StatusRange{{Lo: 503, Hi: 503}}}
	var none *Config
	if got := none.Over(defaults); got.Window != defaults.Window || got.ErrorRate != 5 {
		t.Errorf("nil over defaults = %+v", got)
	}
	rule := &Config{Enabled: &off, ErrorRate: 30, ErrorStatuses: []StatusRange{}}
	got := rule.Over(defaults)
	if *got.Enabled || got.ErrorRate != 30 || got.Window != defaults.Window || got.MinRequests != 50 || got.LatencyMinRequests != 300 || len(got.ErrorStatuses) != 0 || got.ErrorStatuses == nil {
		t.Errorf("rule over defaults = %+v", got)
	}
	rule = &Config{LatencyMinRequests: 150}
	if got := rule.Over(defaults); got.LatencyMinRequests != 150 {
		t.Errorf("a rule's latency_min_requests over defaults = %d, want 150", got.LatencyMinRequests)
	}
}
