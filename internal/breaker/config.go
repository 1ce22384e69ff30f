package breaker

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/graygate/graygate/internal/jsondur"
	"github.com/graygate/graygate/internal/strict"
)

// Config is the breaker section of a rule. The zero value of every field
// means "use the default", and the defaults are the thresholds of seed 004
// §3.3.1, so a rule that only says {} gets the documented behaviour. Field
// comments are the user documentation.
type Config struct {
	// Enabled turns the breaker on (default true). A disabled breaker allows
	// every request and records nothing; disabling an open breaker closes it.
	Enabled *bool `json:"enabled,omitempty"`
	// Window is how far back the trip conditions look (default "30s",
	// 1s to 1h). It is kept as 30 buckets of Window/30 each, so requests
	// age out in steps of Window/30.
	Window Duration `json:"window,omitempty"`
	// ErrorRate is the failure percentage over the window above which the
	// breaker opens (default 20; 0.01 to 100, so 100 never trips).
	ErrorRate float64 `json:"error_rate,omitempty"`
	// P99Latency is the 99th percentile latency over the window above which
	// the breaker opens (default "500ms", 1ms to 60s). It is judged only
	// once the window holds LatencyMinRequests requests.
	P99Latency Duration `json:"p99_latency,omitempty"`
	// MinRequests is how many requests the window must hold before either
	// condition can trip the breaker (default 20).
	MinRequests int `json:"min_requests,omitempty"`
	// LatencyMinRequests is how many requests the window must hold before
	// the p99 latency is judged at all (default 100, at most 1000000). A
	// 99th percentile needs at least 100 samples to be more than the
	// slowest one: with 20, a single slow request would be "the p99" and
	// open the breaker for open_for. Below this count only the error rate
	// can trip the breaker.
	LatencyMinRequests int `json:"latency_min_requests,omitempty"`
	// OpenFor is how long the breaker stays open before it lets probes
	// through (default "60s", 1s to 24h).
	OpenFor Duration `json:"open_for,omitempty"`
	// HalfOpenProbes is how many requests a half-open breaker lets through
	// (default 5, at most 1000). All of them must succeed, that is not fail
	// and not be slower than P99Latency, for the breaker to close; one
	// failure reopens it.
	HalfOpenProbes int `json:"half_open_probes,omitempty"`
	// ErrorStatuses are the response status codes that count as failures,
	// as codes (503), ranges ("500-599") or classes ("5xx"). Absent or null
	// means 500-599; an empty list means no status is a failure and only
	// connection errors and timeouts count.
	ErrorStatuses []StatusRange `json:"error_statuses"`
	// GRPCErrorCodes are the gRPC status codes (grpc-status, by name such
	// as "UNAVAILABLE" or by number) that count as failures of a gRPC
	// call, whatever its HTTP status. Absent or null means UNAVAILABLE,
	// INTERNAL, DEADLINE_EXCEEDED and RESOURCE_EXHAUSTED; an empty list
	// means none.
	GRPCErrorCodes []GRPCCode `json:"grpc_error_codes,omitzero"`
}

// Limits of the configurable values.
const (
	minWindow   = time.Second
	maxWindow   = time.Hour
	minP99      = time.Millisecond
	maxP99      = time.Minute
	minOpenFor  = time.Second
	maxOpenFor  = 24 * time.Hour
	maxProbes   = 1000
	maxLatMin   = 1000000
	minRateBP   = 1 // basis points, 0.01%
	maxRateBP   = 10000
	minStatus   = 100
	maxStatus   = 599
	defaultRate = 20
)

// Defaults returns the seed 004 §3.3.1 configuration with every field set.
func Defaults() Config {
	on := true
	return Config{
		Enabled:     &on,
		Window:      Duration(30 * time.Second),
		ErrorRate:   defaultRate,
		P99Latency:  Duration(500 * time.Millisecond),
		MinRequests: 20,
		// 100 samples is the least for which the nearest-rank p99 is not
		// the maximum (rank ceil(0.99 n) < n only from n = 100).
		LatencyMinRequests: 100,
		OpenFor:            Duration(60 * time.Second),
		HalfOpenProbes:     5,
		ErrorStatuses:      []StatusRange{{Lo: 500, Hi: 599}},
		GRPCErrorCodes:     slices.Clone(defaultGRPCCodes),
	}
}

// Over returns c's settings laid over defaults: a field c leaves unset
// takes the default's. A nil c is the defaults. Rules carry a partial
// Config over the config file's breaker section.
func (c *Config) Over(defaults Config) Config {
	if c == nil {
		return defaults
	}
	out := *c
	if out.Enabled == nil {
		out.Enabled = defaults.Enabled
	}
	if out.Window == 0 {
		out.Window = defaults.Window
	}
	if out.ErrorRate == 0 {
		out.ErrorRate = defaults.ErrorRate
	}
	if out.P99Latency == 0 {
		out.P99Latency = defaults.P99Latency
	}
	if out.MinRequests == 0 {
		out.MinRequests = defaults.MinRequests
	}
	if out.LatencyMinRequests == 0 {
		out.LatencyMinRequests = defaults.LatencyMinRequests
	}
	if out.OpenFor == 0 {
		out.OpenFor = defaults.OpenFor
	}
	if out.HalfOpenProbes == 0 {
		out.HalfOpenProbes = defaults.HalfOpenProbes
	}
	if out.ErrorStatuses == nil {
		out.ErrorStatuses = defaults.ErrorStatuses
	}
	if out.GRPCErrorCodes == nil {
		out.GRPCErrorCodes = defaults.GRPCErrorCodes
	}
	return out
}

// WithDefaults returns a copy of c with every unset field taken from
// Defaults. The copy shares nothing with c.
func (c Config) WithDefaults() Config {
	d := Defaults()
	if c.Enabled != nil {
		on := *c.Enabled
		d.Enabled = &on
	}
	if c.Window != 0 {
		d.Window = c.Window
	}
	if c.ErrorRate != 0 {
		d.ErrorRate = c.ErrorRate
	}
	if c.P99Latency != 0 {
		d.P99Latency = c.P99Latency
	}
	if c.MinRequests != 0 {
		d.MinRequests = c.MinRequests
	}
	if c.LatencyMinRequests != 0 {
		d.LatencyMinRequests = c.LatencyMinRequests
	}
	if c.OpenFor != 0 {
		d.OpenFor = c.OpenFor
	}
	if c.HalfOpenProbes != 0 {
		d.HalfOpenProbes = c.HalfOpenProbes
	}
	if c.ErrorStatuses != nil {
		d.ErrorStatuses = slices.Clone(c.ErrorStatuses)
	}
	if c.GRPCErrorCodes != nil {
		d.GRPCErrorCodes = slices.Clone(c.GRPCErrorCodes)
	}
	return d
}

// Validate reports every problem in c, each as a strict.FieldError named by
// its path below path (for example "rules[2].breaker.window"), joined with
// errors.Join. Zero values are valid: they stand for the defaults.
func (c *Config) Validate(path string) error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, strict.Errorf(strict.Join(path, field), format, args...))
	}
	durationIn := func(field string, d Duration, lo, hi time.Duration) {
		if d != 0 && (d.Std() < lo || d.Std() > hi) {
			add(field, "must be between %s and %s, got %s", lo, hi, d)
		}
	}
	durationIn("window", c.Window, minWindow, maxWindow)
	durationIn("p99_latency", c.P99Latency, minP99, maxP99)
	durationIn("open_for", c.OpenFor, minOpenFor, maxOpenFor)
	if r := c.ErrorRate; r != 0 && (math.IsNaN(r) || r < float64(minRateBP)/100 || r > float64(maxRateBP)/100) {
		add("error_rate", "must be a percentage between 0.01 and 100, got %v", r)
	}
	if c.MinRequests < 0 {
		add("min_requests", "must not be negative, got %d", c.MinRequests)
	}
	if c.LatencyMinRequests < 0 || c.LatencyMinRequests > maxLatMin {
		add("latency_min_requests", "must be between 1 and %d, got %d", maxLatMin, c.LatencyMinRequests)
	}
	if c.HalfOpenProbes < 0 || c.HalfOpenProbes > maxProbes {
		add("half_open_probes", "must be between 1 and %d, got %d", maxProbes, c.HalfOpenProbes)
	}
	for i, r := range c.ErrorStatuses {
		p := strict.Index(strict.Join(path, "error_statuses"), i)
		switch {
		case r.Lo < minStatus || r.Hi > maxStatus:
			errs = append(errs, strict.Errorf(p, "status codes must be between %d and %d, got %s", minStatus, maxStatus, r))
		case r.Lo > r.Hi:
			errs = append(errs, strict.Errorf(p, "range must go from low to high, got %s", r))
		}
	}
	return errors.Join(errs...)
}

func (c Config) equal(o Config) bool {
	return (c.Enabled == nil) == (o.Enabled == nil) && (c.Enabled == nil || *c.Enabled == *o.Enabled) &&
		c.Window == o.Window && c.ErrorRate == o.ErrorRate && c.P99Latency == o.P99Latency &&
		c.MinRequests == o.MinRequests && c.LatencyMinRequests == o.LatencyMinRequests && c.OpenFor == o.OpenFor && c.HalfOpenProbes == o.HalfOpenProbes &&
		(c.ErrorStatuses == nil) == (o.ErrorStatuses == nil) && slices.Equal(c.ErrorStatuses, o.ErrorStatuses) &&
		(c.GRPCErrorCodes == nil) == (o.GRPCErrorCodes == nil) && slices.Equal(c.GRPCErrorCodes, o.GRPCErrorCodes)
}

// settings is a validated Config with defaults applied, in the units the
// hot path compares against. It is immutable once published.
type settings struct {
	cfg          Config // with defaults, for Snapshot
	enabled      bool
	window       time.Duration
	rateBP       uint64 // error rate threshold in basis points (1/100 of a percent)
	p99          time.Duration
	minRequests  uint64
	latencyMin   uint64 // requests in the window before the p99 is judged
	openFor      time.Duration
	probes       uint64
	probeTimeout time.Duration
	statuses     StatusSet
	grpc         grpcSet
}

func newSettings(c Config) *settings {
	c = c.WithDefaults()
	return &settings{
		cfg:          c,
		enabled:      *c.Enabled,
		window:       c.Window.Std(),
		rateBP:       uint64(math.Round(c.ErrorRate * 100)),
		p99:          c.P99Latency.Std(),
		minRequests:  uint64(c.MinRequests),
		latencyMin:   uint64(c.LatencyMinRequests),
		openFor:      c.OpenFor.Std(),
		probes:       uint64(c.HalfOpenProbes),
		probeTimeout: max(c.OpenFor.Std(), c.Window.Std()),
		statuses:     NewStatusSet(c.ErrorStatuses),
		grpc:         newGRPCSet(c.GRPCErrorCodes),
	}
}

// Duration is a time.Duration written as a Go duration string ("500ms",
// "30s"); see jsondur.
type Duration = jsondur.Duration

// StatusRange is an inclusive range of HTTP status codes. In JSON it is a
// number (503) or a string: "503", "500-599" or "5xx".
type StatusRange struct {
	Lo, Hi int
}

// UnmarshalJSON accepts 503, "503", "500-599" and "5xx".
func (r *StatusRange) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // leaves the zero value, as encoding/json does for null
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err == nil {
		code, err := strconv.Atoi(string(n))
		if err != nil {
			return fmt.Errorf("expected a status code, got %s", n)
		}
		*r = StatusRange{Lo: code, Hi: code}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New(`expected a status code or a range such as "500-599"`)
	}
	v, err := ParseStatusRange(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// ParseStatusRange parses "503", "500-599" or "5xx". It checks the syntax
// only; Config.Validate checks that the codes are between 100 and 599.
func ParseStatusRange(s string) (StatusRange, error) {
	t := strings.TrimSpace(s)
	if len(t) == 3 && t[0] >= '1' && t[0] <= '9' && strings.EqualFold(t[1:], "xx") {
		lo := int(t[0]-'0') * 100
		return StatusRange{Lo: lo, Hi: lo + 99}, nil
	}
	a, b, isRange := strings.Cut(t, "-")
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi, err2 := lo, error(nil)
	if isRange {
		hi, err2 = strconv.Atoi(strings.TrimSpace(b))
	}
	if err1 != nil || err2 != nil || lo < 0 || hi < 0 {
		return StatusRange{}, fmt.Errorf(`expected a status code or a range such as "500-599" or "5xx", got %q`, s)
	}
	return StatusRange{Lo: lo, Hi: hi}, nil
}

// MarshalJSON writes a single code as a number and a range as "lo-hi".
func (r StatusRange) MarshalJSON() ([]byte, error) {
	if r.Lo == r.Hi {
		return json.Marshal(r.Lo)
	}
	return json.Marshal(r.String())
}

// String returns "503" or "500-599".
func (r StatusRange) String() string {
	if r.Lo == r.Hi {
		return strconv.Itoa(r.Lo)
	}
	return strconv.Itoa(r.Lo) + "-" + strconv.Itoa(r.Hi)
}

// StatusSet is a compiled set of status codes with an O(1), allocation-free
// Contains. The zero value is empty.
type StatusSet struct {
	bits [(maxStatus + 64) / 64]uint64
}

// NewStatusSet compiles ranges; codes outside 100-599 are ignored.
func NewStatusSet(ranges []StatusRange) StatusSet {
	var s StatusSet
	for _, r := range ranges {
		for c := max(r.Lo, minStatus); c <= min(r.Hi, maxStatus); c++ {
			s.bits[c/64] |= 1 << (c % 64)
		}
	}
	return s
}

// Contains reports whether code is in the set.
func (s *StatusSet) Contains(code int) bool {
	if code < minStatus || code > maxStatus {
		return false
	}
	return s.bits[code/64]&(1<<(code%64)) != 0
}
