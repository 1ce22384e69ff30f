package rule

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"

	"github.com/graygate/graygate/internal/mirror"
	"github.com/graygate/graygate/internal/strict"
	"github.com/graygate/graygate/internal/upstream"
)

// Mirror is a gray rule's shadow traffic: of the requests in the rule's
// scope that it does not send to gray (served by stable), Percent are also
// sent to Target, chosen by the user's mirror bucket, and with Diff the
// answers are compared with the primary's. See package mirror.
type Mirror struct {
	// Target is where shadow copies go: host:port, a URL or an upstream
	// name (default: the rule's targets.gray).
	Target string `json:"target,omitempty"`
	// Percent is the share of the rule's stable users mirrored, 0..100
	// with up to two decimals.
	Percent *float64 `json:"percent"`
	// Methods are the methods mirrored (default ["GET", "HEAD"]: no side
	// effects unless asked for).
	Methods []string `json:"methods,omitempty"`
	// MaxBody is the largest request body mirrored, a size such as
	// "64KiB" or a number of bytes (default "64KiB"); a request with a
	// larger body is not mirrored.
	MaxBody *Size `json:"max_body,omitempty"`
	// HostSuffix is appended to the mirrored request's host (default
	// "-shadow", Envoy's convention; "" keeps the host).
	HostSuffix *string `json:"host_suffix,omitempty"`
	// Diff compares the mirror's answers with the primary's.
	Diff *MirrorDiff `json:"diff,omitempty"`
}

// MirrorDiff configures the comparison of a mirror's answers.
type MirrorDiff struct {
	// Secondary is a second instance of the stable version that gets the
	// same copies: primary-vs-secondary differences are noise.
	Secondary string `json:"secondary,omitempty"`
	// Ignore lists paths left out of the comparison: "status",
	// "headers.<name>", "body" or "body.<json path>" (with [N] or [*]
	// for array elements).
	Ignore []string `json:"ignore,omitempty"`
}

// MaxMirrorBody is the largest max_body a rule may ask for: a mirrored
// body is held in memory until it is sent.
const MaxMirrorBody = 16 << 20

// Size is a number of bytes written as "64KiB", "1MiB", "65536" (IEC and
// SI units, as github.com/dustin/go-humanize parses them) or a JSON number.
type Size int64

// UnmarshalJSON parses a size string or a number of bytes.
func (s *Size) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // leaves the zero value, as encoding/json does for null
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err == nil {
		v, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil || v < 0 {
			return fmt.Errorf("expected a size such as \"64KiB\" or a whole number of bytes, got %s", n)
		}
		*s = Size(v)
		return nil
	}
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return errors.New("expected a size such as \"64KiB\" or a number of bytes")
	}
	v, err := humanize.ParseBytes(str)
	if err != nil || v > math.MaxInt64 {
		return fmt.Errorf("expected a size such as \"64KiB\" or \"1MiB\", got %q", str)
	}
	*s = Size(v)
	return nil
}

// MarshalJSON writes the number of bytes.
func (s Size) MarshalJSON() ([]byte, error) { return json.Marshal(int64(s)) }

// validateMirror reports the problems of a gray rule's mirror field.
func (r *Rule) validateMirror() []error {
	m := r.Mirror
	if m == nil {
		return nil
	}
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, strict.Errorf("mirror."+path, format, args...))
	}
	if m.Percent == nil {
		add("percent", "is required: the share of the rule's stable users mirrored, 0..100")
	} else if p := *m.Percent; math.IsNaN(p) || p < 0 || p > 100 {
		add("percent", "must be 0..100, got %v", p)
	} else if h := p * 100; math.Abs(h-math.Round(h)) > 1e-6 {
		add("percent", "allows at most two decimals, got %v", p)
	}
	if m.Methods != nil && len(m.Methods) == 0 {
		add("methods", "must name at least one method (leave it out for GET and HEAD)")
	}
	seen := map[string]int{}
	for i, meth := range m.Methods {
		p := strict.Index("methods", i)
		switch {
		case !mirror.ValidMethod(meth):
			add(p, "must be a method token such as \"GET\", got %q", meth)
		case strings.EqualFold(meth, "CONNECT"):
			add(p, "CONNECT cannot be mirrored: the gateway does not open tunnels")
		default:
			// Compared upper-cased, as the mirror selects them.
			up := strings.ToUpper(meth)
			if j, dup := seen[up]; dup {
				add(p, "duplicates methods[%d] %q", j, m.Methods[j])
			}
			seen[up] = i
		}
	}
	if m.MaxBody != nil && (*m.MaxBody < 0 || *m.MaxBody > MaxMirrorBody) {
		add("max_body", "must be 0..%s, got %d bytes", humanize.IBytes(MaxMirrorBody), int64(*m.MaxBody))
	}
	if m.HostSuffix != nil && strings.ContainsAny(*m.HostSuffix, " \t\r\n/:@[]") {
		add("host_suffix", "must be characters allowed in a host name, got %q", *m.HostSuffix)
	}
	if m.Diff != nil {
		if _, err := mirror.ParseIgnore(m.Diff.Ignore); err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				idx, msg, _ := strings.Cut(line, ": ")
				errs = append(errs, strict.Errorf("mirror.diff.ignore"+idx, "%s", msg))
			}
		}
	}
	return errs
}

// mirrorTarget is the target a mirror sends to: its own, or the rule's gray.
func (r *Rule) mirrorTarget() (path, target string) {
	if r.Mirror.Target != "" {
		return "mirror.target", r.Mirror.Target
	}
	return "targets.gray", r.Targets.Gray
}

// compileMirror resolves a valid mirror field.
func compileMirror(r *Rule, resolve func(path, target string) *upstream.Pool) (*mirror.Spec, error) {
	m := r.Mirror
	path, target := r.mirrorTarget()
	cfg := mirror.SpecConfig{
		Rule: r.Key, Target: resolve(path, target), TargetName: target, Percent: *m.Percent,
		Methods: m.Methods, MaxBody: mirror.DefaultMaxBody, HostSuffix: mirror.DefaultHostSuffix,
	}
	if m.MaxBody != nil {
		cfg.MaxBody = int64(*m.MaxBody)
	}
	if m.HostSuffix != nil {
		cfg.HostSuffix = *m.HostSuffix
	}
	if m.Diff != nil {
		cfg.Diff, cfg.Ignore = true, m.Diff.Ignore
		if m.Diff.Secondary != "" {
			cfg.Secondary, cfg.SecondaryName = resolve("mirror.diff.secondary", m.Diff.Secondary), m.Diff.Secondary
		}
	}
	if cfg.Target == nil || (m.Diff != nil && m.Diff.Secondary != "" && cfg.Secondary == nil) {
		return nil, nil // resolve reported it
	}
	return mirror.NewSpec(cfg)
}
