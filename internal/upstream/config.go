package upstream

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/jsondur"
	"github.com/graygate/graygate/internal/strict"
)

// Config is an upstream's balancing and health section, for the process
// config to embed. The zero value is a round-robin pool without health
// checks. Field comments are the user documentation.
type Config struct {
	// Balancer is "round_robin" (default; the gateway's config makes a
	// pool whose instances have weights "weighted"), "weighted" (smooth
	// weighted round robin by instance weight) or "least_request" (the
	// fewer requests in flight of two random instances; weights are
	// ignored).
	Balancer Balancer `json:"balancer,omitempty"`
	// VersionHeader turns on seed 003 version routing: true uses the
	// header "version", a string names another header. A request whose
	// header names a version goes to the healthy instances whose metadata
	// "version" equals it; without the header, with an empty one, or when
	// no healthy instance has that version, it goes to any healthy instance.
	VersionHeader VersionHeader `json:"version_header,omitempty"`
	// PassiveHealth ejects instances that fail requests; present (even as
	// {}) turns it on.
	PassiveHealth *PassiveHealth `json:"passive_health,omitempty"`
	// ActiveHealth probes every instance over HTTP; present (even as {})
	// turns it on.
	ActiveHealth *ActiveHealth `json:"active_health,omitempty"`
}

// PassiveHealth ejects an instance after a run of failed requests
// (connection errors, timeouts and 5xx answers) and lets it back after a
// backoff that doubles on every ejection until a request succeeds again.
type PassiveHealth struct {
	// ConsecutiveFailures in a row eject an instance (default 5, 1 to 1000).
	ConsecutiveFailures int `json:"consecutive_failures,omitempty"`
	// BaseEjection is how long the first ejection lasts (default "10s",
	// 1ms to 1h).
	BaseEjection Duration `json:"base_ejection,omitempty"`
	// MaxEjection caps the doubled backoff (default "5m", up to 24h; not
	// less than base_ejection).
	MaxEjection Duration `json:"max_ejection,omitempty"`
}

// ActiveHealth sends GET requests to every instance; a 2xx or 3xx answer
// within the timeout passes. Instances start healthy.
type ActiveHealth struct {
	// Path is requested on every instance (default "/healthz").
	Path string `json:"path,omitempty"`
	// Interval between probes of one instance (default "5s", 10ms to 1h).
	Interval Duration `json:"interval,omitempty"`
	// Timeout of one probe (default "1s", 1ms to 1m).
	Timeout Duration `json:"timeout,omitempty"`
	// HealthyThreshold passes in a row bring a failing instance back
	// (default 2, 1 to 100).
	HealthyThreshold int `json:"healthy_threshold,omitempty"`
	// UnhealthyThreshold failures in a row take an instance out (default
	// 3, 1 to 100).
	UnhealthyThreshold int `json:"unhealthy_threshold,omitempty"`
}

// Defaults.
const (
	DefaultConsecutiveFailures = 5
	DefaultBaseEjection        = 10 * time.Second
	DefaultMaxEjection         = 5 * time.Minute
	DefaultProbePath           = "/healthz"
	DefaultProbeInterval       = 5 * time.Second
	DefaultProbeTimeout        = time.Second
	DefaultHealthyThreshold    = 2
	DefaultUnhealthyThreshold  = 3
	DefaultVersionHeader       = "version"
)

func (c PassiveHealth) withDefaults() PassiveHealth {
	if c.ConsecutiveFailures == 0 {
		c.ConsecutiveFailures = DefaultConsecutiveFailures
	}
	if c.BaseEjection == 0 {
		c.BaseEjection = Duration(DefaultBaseEjection)
	}
	if c.MaxEjection == 0 {
		c.MaxEjection = Duration(max(DefaultMaxEjection, c.BaseEjection.Std()))
	}
	return c
}

func (c ActiveHealth) withDefaults() ActiveHealth {
	if c.Path == "" {
		c.Path = DefaultProbePath
	}
	if c.Interval == 0 {
		c.Interval = Duration(DefaultProbeInterval)
	}
	if c.Timeout == 0 {
		c.Timeout = Duration(DefaultProbeTimeout)
	}
	if c.HealthyThreshold == 0 {
		c.HealthyThreshold = DefaultHealthyThreshold
	}
	if c.UnhealthyThreshold == 0 {
		c.UnhealthyThreshold = DefaultUnhealthyThreshold
	}
	return c
}

// Options returns the pool options of a validated Config, bound to h.
// With h nil the pool keeps its state to itself and gets no active health:
// that is for tools (such as "graygate validate") that build pools to
// resolve targets but never serve, and must not probe anything.
func (c *Config) Options(h *Health) PoolOptions {
	o := PoolOptions{
		Balancer:      c.Balancer,
		VersionHeader: string(c.VersionHeader),
		Health:        h,
		Passive:       c.PassiveHealth,
	}
	if h != nil {
		o.Active = c.ActiveHealth
	}
	return o
}

// Validate reports every problem under path.
func (c *Config) Validate(path string) error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, strict.Errorf(strict.Join(path, field), format, args...))
	}
	if !c.Balancer.valid() {
		add("balancer", "unknown balancer %q (want %q, %q or %q)", c.Balancer, RoundRobin, Weighted, LeastRequest)
	}
	if h := string(c.VersionHeader); h != "" && !attr.ValidToken(h) {
		add("version_header", "%q is not a valid header name", h)
	}
	if p := c.PassiveHealth; p != nil {
		if p.ConsecutiveFailures < 0 || p.ConsecutiveFailures > 1000 {
			add("passive_health.consecutive_failures", "must be 1..1000, got %d", p.ConsecutiveFailures)
		}
		checkDur := func(field string, d Duration, lo, hi time.Duration) bool {
			if d != 0 && (d.Std() < lo || d.Std() > hi) {
				add("passive_health."+field, "must be %v..%v, got %v", lo, hi, d)
				return false
			}
			return true
		}
		okBase := checkDur("base_ejection", p.BaseEjection, time.Millisecond, time.Hour)
		okMax := checkDur("max_ejection", p.MaxEjection, time.Millisecond, 24*time.Hour)
		if d := p.withDefaults(); okBase && okMax && d.MaxEjection < d.BaseEjection {
			add("passive_health.max_ejection", "must not be less than base_ejection (%v), got %v", d.BaseEjection, d.MaxEjection)
		}
	}
	if a := c.ActiveHealth; a != nil {
		if a.Path != "" && !validProbePath(a.Path) {
			add("active_health.path", "must start with \"/\" and contain no spaces or control characters, got %q", a.Path)
		}
		if a.Interval != 0 && (a.Interval.Std() < 10*time.Millisecond || a.Interval.Std() > time.Hour) {
			add("active_health.interval", "must be 10ms..1h, got %v", a.Interval)
		}
		if a.Timeout != 0 && (a.Timeout.Std() < time.Millisecond || a.Timeout.Std() > time.Minute) {
			add("active_health.timeout", "must be 1ms..1m0s, got %v", a.Timeout)
		}
		if a.HealthyThreshold < 0 || a.HealthyThreshold > 100 {
			add("active_health.healthy_threshold", "must be 1..100, got %d", a.HealthyThreshold)
		}
		if a.UnhealthyThreshold < 0 || a.UnhealthyThreshold > 100 {
			add("active_health.unhealthy_threshold", "must be 1..100, got %d", a.UnhealthyThreshold)
		}
	}
	return errors.Join(errs...)
}

func validProbePath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] <= ' ' || p[i] == 0x7f {
			return false
		}
	}
	return true
}

// VersionHeader is the name of the version routing header, "" when version
// routing is off. In JSON it is true (the header "version"), false (off) or
// a header name.
type VersionHeader string

// UnmarshalJSON accepts true, false or a string.
func (v *VersionHeader) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // leaves the zero value, as encoding/json does for null
	}
	var on bool
	if err := json.Unmarshal(b, &on); err == nil {
		*v = ""
		if on {
			*v = DefaultVersionHeader
		}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("expected true, false or a header name")
	}
	*v = VersionHeader(s)
	return nil
}

// Duration is a time.Duration written as a Go duration string ("500ms",
// "30s"); see jsondur.
type Duration = jsondur.Duration
