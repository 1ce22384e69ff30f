package rule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/strict"
)

// Rollout states, as in RolloutStatus.State and the rollout API. They are
// Argo Rollouts' phases without its Degraded one: a failed analysis aborts.
const (
	RolloutProgressing = "progressing"
	RolloutPaused      = "paused"
	RolloutAborted     = "aborted"
	RolloutCompleted   = "completed"
)

// RolloutStates lists the states in a fixed order (for metrics).
var RolloutStates = []string{RolloutProgressing, RolloutPaused, RolloutAborted, RolloutCompleted}

// Why a rollout is paused (RolloutStatus.PausedFor).
const (
	// PausedForPromote: a "pause": {} step waits for promote.
	PausedForPromote = "promote"
	// PausedForOperator: an operator paused it; resume continues.
	PausedForOperator = "operator"
	// PausedForInconclusive: an analysis had more inconclusive
	// measurements than its inconclusive_limit; resume runs it again,
	// promote skips it.
	PausedForInconclusive = "inconclusive"
)

// Built-in metrics of a check, computed from the gateway's own per-group
// traffic windows over the analysis interval.
const (
	// MetricErrorRate is the gray group's share of 5xx answers and
	// transport failures (0..1).
	MetricErrorRate = "error_rate"
	// MetricErrorRateVsStable is the gray error rate minus the stable
	// one over the same window (-1..1).
	MetricErrorRateVsStable = "error_rate_vs_stable"
	// MetricP99Ms is the gray group's 99th percentile latency in
	// milliseconds.
	MetricP99Ms = "p99_ms"
)

// Measurement and check results.
const (
	ResultPassed       = "passed"
	ResultFailed       = "failed"
	ResultInconclusive = "inconclusive"
	// ResultError is a check that could not be made (Prometheus
	// unreachable, a webhook timeout). It counts as a failed measurement:
	// a check that cannot be made must not pass.
	ResultError = "error"
)

// Limits of a plan, so that a rule's rollout stays small.
const (
	MaxRolloutSteps  = 100
	MaxAnalyses      = 20
	MaxChecks        = 20
	minInterval      = time.Second
	maxInterval      = time.Hour
	maxTrafficWindow = 2 * time.Minute // the traffic windows keep 3 minutes, and a fleet publishes a few seconds late
	maxCheckTimeout  = time.Minute
	// DefaultCheckTimeout bounds a prometheus query or a webhook call
	// that sets no timeout.
	DefaultCheckTimeout = 10 * time.Second
)

// Rollout is a gray rule's progressive delivery plan, run by the gateway
// (package rollout): steps that set gray_percent, wait and analyse, in the
// manner of Argo Rollouts' canary steps, with an automatic abort when an
// analysis fails. Field comments are the reference documentation.
type Rollout struct {
	// Steps run in order; each does one thing. At least one.
	Steps []Step `json:"steps"`
	// Analyses are the named analyses steps and background_analysis use.
	Analyses map[string]Analysis `json:"analyses,omitempty"`
	// BackgroundAnalysis names an analysis that measures every interval
	// for the whole rollout, between and during steps; its limits apply
	// to its last count measurements.
	BackgroundAnalysis string `json:"background_analysis,omitempty"`
	// AbortOnBreaker aborts the rollout, with the breaker's reason, when
	// the gray target's breaker opens (default true). When false an open
	// breaker only fails the measurements being taken.
	AbortOnBreaker *bool `json:"abort_on_breaker,omitempty"`
	// AbortWhitelist makes an aborted rollout stop sending whitelisted
	// users to gray as well (default false: the whitelist keeps working,
	// so that testers can still reach the gray version).
	AbortWhitelist bool `json:"abort_whitelist,omitempty"`
	// Status is where the rollout stands. The gateway writes it; a PUT
	// cannot set it (the stored status is carried over, see package
	// rollout).
	Status *RolloutStatus `json:"status,omitempty"`

	// undecoded marks the steps Decode reported a problem in (a field of
	// the wrong type, say): what is left of them is not checked again,
	// so that {"pause": 30} is one problem, not also an empty step.
	undecoded map[int]bool
}

// Step is one step of a plan: exactly one of its fields is set.
type Step struct {
	// Percent sets gray_percent (0..100, up to two decimals). Percents
	// of a plan never decrease, and the steps not reached yet are not
	// below the rule's gray_percent: a rollout only adds users.
	Percent *float64 `json:"percent,omitempty"`
	// Pause waits: a duration ("2m"), or {} to wait for promote.
	Pause *Pause `json:"pause,omitempty"`
	// Analysis runs the named analysis: count measurements, interval
	// apart.
	Analysis string `json:"analysis,omitempty"`
}

// Pause is a pause step's length: a duration, or, written {}, until an
// operator promotes the rollout.
type Pause struct {
	Duration time.Duration
	// UntilPromoted is the {} form.
	UntilPromoted bool
}

// UnmarshalJSON accepts a Go duration string or the empty object.
func (p *Pause) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '{' {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil || len(m) > 0 {
			return errors.New(`expected {} (wait for promote) or a duration such as "2m"; an object must be empty`)
		}
		*p = Pause{UntilPromoted: true}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf(`expected a duration such as "2m", or {} to wait for promote; got %s`, b)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf(`expected a duration such as "2m", or {} to wait for promote; got %q`, s)
	}
	*p = Pause{Duration: d}
	return nil
}

// markUndecoded notes the steps that decoding problems err are in (at
// rollout.steps[i] or below).
func (r *Rollout) markUndecoded(err error) {
	for _, f := range strict.Fields(err) {
		rest, ok := strings.CutPrefix(f.Path, "rollout.steps[")
		if !ok {
			continue
		}
		n, _, ok := strings.Cut(rest, "]")
		i, cerr := strconv.Atoi(n)
		if !ok || cerr != nil || i < 0 || i >= len(r.Steps) {
			continue
		}
		if r.undecoded == nil {
			r.undecoded = map[int]bool{}
		}
		r.undecoded[i] = true
	}
}

// MarshalJSON writes {} or the duration string.
func (p Pause) MarshalJSON() ([]byte, error) {
	if p.UntilPromoted {
		return []byte("{}"), nil
	}
	return json.Marshal(p.Duration.String())
}

// String describes the step for people: "percent 5", "pause 2m0s",
// "pause until promoted", "analysis health".
func (s Step) String() string {
	switch {
	case s.Percent != nil:
		return "percent " + strconv.FormatFloat(*s.Percent, 'f', -1, 64)
	case s.Pause != nil && s.Pause.UntilPromoted:
		return "pause until promoted"
	case s.Pause != nil:
		return "pause " + s.Pause.Duration.String()
	case s.Analysis != "":
		return "analysis " + s.Analysis
	}
	return "empty step"
}

// Analysis is a named set of checks measured count times, interval apart.
type Analysis struct {
	// Interval is the time between measurements and the window each
	// built-in metric covers (1s to 1h; with built-in metrics whole
	// seconds and at most 2m, as the traffic windows count by the second
	// and keep 3 minutes).
	Interval breaker.Duration `json:"interval"`
	// Count is how many measurements a step takes (default 1). For the
	// background analysis it is the window its limits apply to.
	Count int `json:"count,omitempty"`
	// FailureLimit: more failed measurements than this fail the step and
	// abort the rollout (default 0).
	FailureLimit int `json:"failure_limit,omitempty"`
	// InconclusiveLimit: more inconclusive measurements than this pause
	// the rollout (default 0).
	InconclusiveLimit int `json:"inconclusive_limit,omitempty"`
	// Checks are measured together; a measurement fails if any check
	// fails (or errs), is inconclusive if any is and none fails, and
	// passes otherwise.
	Checks []Check `json:"checks"`
}

// EffectiveCount returns Count, or 1 when it is unset.
func (a Analysis) EffectiveCount() int { return max(a.Count, 1) }

// Check is one check of an analysis: exactly one of metric, prometheus
// and webhook.
type Check struct {
	// Name labels the check in measurements, metrics and notifications
	// (default: the metric's name, "prometheus" or "webhook").
	Name string `json:"name,omitempty"`
	// Metric is a built-in metric: error_rate, error_rate_vs_stable or
	// p99_ms.
	Metric string `json:"metric,omitempty"`
	// Max and Min bound a built-in metric's value (at least one).
	Max *float64 `json:"max,omitempty"`
	Min *float64 `json:"min,omitempty"`
	// MinRequests: a window with fewer gray (and, for
	// error_rate_vs_stable, stable) requests is inconclusive. A window
	// without requests is always inconclusive, never a pass.
	MinRequests int `json:"min_requests,omitempty"`
	// Prometheus is an instant query against a Prometheus HTTP API.
	Prometheus *PrometheusCheck `json:"prometheus,omitempty"`
	// Webhook POSTs the rollout's state; a 2xx answer passes.
	Webhook *WebhookCheck `json:"webhook,omitempty"`
}

// Label returns the check's name in measurements and metrics.
func (c Check) Label() string {
	switch {
	case c.Name != "":
		return c.Name
	case c.Metric != "":
		return c.Metric
	case c.Prometheus != nil:
		return "prometheus"
	case c.Webhook != nil:
		return "webhook"
	}
	return "check"
}

// PrometheusCheck runs an instant query (GET /api/v1/query) and compares
// its one value with Min and/or Max. An empty result or NaN is
// inconclusive; more than one series is an error.
type PrometheusCheck struct {
	// Address is the server's base URL, such as http://127.0.0.1:9090.
	Address string `json:"address"`
	// Query is PromQL that yields a scalar or one series.
	Query string   `json:"query"`
	Min   *float64 `json:"min,omitempty"`
	Max   *float64 `json:"max,omitempty"`
	// Timeout bounds the query (default 10s, at most 1m).
	Timeout breaker.Duration `json:"timeout,omitempty"`
}

// WebhookCheck POSTs the rollout's state as JSON to URL. A 2xx answer
// passes, any other answer fails, and no answer within Timeout is an
// error (Flagger's webhook contract).
type WebhookCheck struct {
	URL string `json:"url"`
	// Timeout bounds the call (default 10s, at most 1m).
	Timeout breaker.Duration `json:"timeout,omitempty"`
}

// RolloutStatus is where a rollout stands. It lives in the rule document,
// so it survives restarts; every change of it is a rule version.
type RolloutStatus struct {
	// State is progressing, paused, aborted or completed.
	State string `json:"state"`
	// Step is the index of the current step; len(steps) once completed.
	Step int `json:"step"`
	// StartedAt is when the rollout (or its last retry) started.
	StartedAt time.Time `json:"started_at"`
	// StepStartedAt is when the current step started.
	StepStartedAt time.Time `json:"step_started_at"`
	// PauseUntil is when a running timed pause ends.
	PauseUntil *time.Time `json:"pause_until,omitempty"`
	// PauseLeft is what a timed pause had left when an operator paused
	// the rollout; resume runs that much more.
	PauseLeft breaker.Duration `json:"pause_left,omitempty"`
	// PausedFor says why a paused rollout waits: promote, operator or
	// inconclusive.
	PausedFor string `json:"paused_for,omitempty"`
	// Message says what is happening, for people.
	Message string `json:"message,omitempty"`
	// Failure is the check that aborted the rollout.
	Failure *Failure `json:"failure,omitempty"`
	// Measurements are the latest measurements when the status was
	// written, oldest first.
	Measurements []Measurement `json:"measurements,omitempty"`
}

// Measurement is one measurement of an analysis: every check once.
type Measurement struct {
	Analysis string `json:"analysis"`
	// Background marks a measurement of the background analysis.
	Background bool `json:"background,omitempty"`
	// Step is the step it was taken in.
	Step int `json:"step"`
	// Index counts the measurements of its analysis run, from 1.
	Index  int           `json:"index"`
	At     time.Time     `json:"at"`
	Result string        `json:"result"`
	Checks []CheckResult `json:"checks"`
}

// CheckResult is the outcome of one check in one measurement.
type CheckResult struct {
	Check  string   `json:"check"`
	Result string   `json:"result"`
	Value  *float64 `json:"value,omitempty"`
	// Threshold is what the value was held to: "max 0.01", "min 1, max 5".
	Threshold string `json:"threshold,omitempty"`
	// Requests is the gray requests the window held (built-in metrics).
	Requests *uint64 `json:"requests,omitempty"`
	Message  string  `json:"message,omitempty"`
}

// Failure is the check that aborted a rollout.
type Failure struct {
	Analysis string `json:"analysis,omitempty"`
	CheckResult
}

// AbortsOnBreaker reports abort_on_breaker with its default (true).
func (r *Rollout) AbortsOnBreaker() bool { return r.AbortOnBreaker == nil || *r.AbortOnBreaker }

// Active reports whether the rollout still has work: not started,
// progressing or paused.
func (r *Rollout) Active() bool {
	return r.Status == nil || r.Status.State == RolloutProgressing || r.Status.State == RolloutPaused
}

// Plan returns the rollout without its status, for comparing plans.
func (r *Rollout) Plan() []byte {
	c := *r
	c.Status = nil
	b, _ := json.Marshal(c)
	return b
}

// SamePlan reports whether a and b are the same plan, statuses aside.
func SamePlan(a, b *Rollout) bool {
	if a == nil || b == nil {
		return a == b
	}
	return bytes.Equal(a.Plan(), b.Plan())
}

// FinalPercent returns the percent of the plan's last percent step.
func (r *Rollout) FinalPercent() (float64, bool) {
	for i := len(r.Steps) - 1; i >= 0; i-- {
		if p := r.Steps[i].Percent; p != nil {
			return *p, true
		}
	}
	return 0, false
}

// Threshold describes min and max for people: "max 0.01", "min 1, max 5".
func Threshold(minV, maxV *float64) string {
	var parts []string
	if minV != nil {
		parts = append(parts, "min "+strconv.FormatFloat(*minV, 'g', -1, 64))
	}
	if maxV != nil {
		parts = append(parts, "max "+strconv.FormatFloat(*maxV, 'g', -1, 64))
	}
	return strings.Join(parts, ", ")
}

var checkName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$`)

// validateRollout reports the problems of a gray rule's rollout.
func (r *Rule) validateRollout() []error {
	ro := r.Rollout
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, strict.Errorf(path, format, args...))
	}
	switch {
	case len(ro.Steps) == 0:
		add("rollout.steps", "needs at least one step")
	case len(ro.Steps) > MaxRolloutSteps:
		add("rollout.steps", "has %d steps; at most %d are allowed", len(ro.Steps), MaxRolloutSteps)
	}
	if len(ro.Analyses) > MaxAnalyses {
		add("rollout.analyses", "has %d analyses; at most %d are allowed", len(ro.Analyses), MaxAnalyses)
	}
	// The steps not reached yet must not lower gray_percent: all of them
	// before the rollout starts (or a new plan starts over), those from
	// the current one while it runs (the percent steps done set
	// gray_percent); an aborted or completed rollout sets nothing more.
	from := len(ro.Steps)
	if st := ro.Status; st == nil {
		from = 0
	} else if st.State == RolloutProgressing || st.State == RolloutPaused {
		from = st.Step
	}
	last, lastAt := -1.0, -1
	for i, s := range ro.Steps {
		p := strict.Index("rollout.steps", i)
		if ro.undecoded[i] {
			continue // Decode said what is wrong with it
		}
		var set []string
		if s.Percent != nil {
			set = append(set, "percent")
		}
		if s.Pause != nil {
			set = append(set, "pause")
		}
		if s.Analysis != "" {
			set = append(set, "analysis")
		}
		switch len(set) {
		case 0:
			add(p, "needs one of percent, pause or analysis")
			continue
		case 1:
		default:
			add(p, "sets %s; a step does one thing", strings.Join(set, " and "))
			continue
		}
		switch {
		case s.Percent != nil:
			v := *s.Percent
			switch {
			case math.IsNaN(v) || v < 0 || v > 100:
				add(p+".percent", "must be 0..100, got %v", v)
			case math.Abs(v*100-math.Round(v*100)) > 1e-6:
				add(p+".percent", "allows at most two decimals, got %v", v)
			case v < last:
				add(p+".percent", "%v is below the %v of steps[%d] before it: percents never decrease (a rollout only adds users; abort or a PUT lowers gray_percent)", v, last, lastAt)
			case i >= from && r.GrayPercent != nil && v < *r.GrayPercent:
				add(p+".percent", "%v is below the rule's gray_percent %v: a rollout only adds users (lower gray_percent first, or start the plan at %v or more)", v, *r.GrayPercent, *r.GrayPercent)
				last, lastAt = v, i
			default:
				last, lastAt = v, i
			}
		case s.Pause != nil:
			if !s.Pause.UntilPromoted && s.Pause.Duration <= 0 {
				add(p+".pause", "must be a positive duration, or {} to wait for promote, got %s", s.Pause.Duration)
			}
		default:
			if _, ok := ro.Analyses[s.Analysis]; !ok {
				add(p+".analysis", "no analysis named %q in rollout.analyses%s", s.Analysis, known(ro.Analyses))
			}
		}
	}
	if b := ro.BackgroundAnalysis; b != "" {
		if _, ok := ro.Analyses[b]; !ok {
			add("rollout.background_analysis", "no analysis named %q in rollout.analyses%s", b, known(ro.Analyses))
		}
	}
	names := make([]string, 0, len(ro.Analyses))
	for n := range ro.Analyses {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		errs = append(errs, validateAnalysis(strict.Join("rollout.analyses", n), n, ro.Analyses[n])...)
	}
	if st := ro.Status; st != nil {
		if !slices.Contains(RolloutStates, st.State) {
			add("rollout.status.state", "must be one of %s, got %q", strings.Join(RolloutStates, ", "), st.State)
		}
		if st.Step < 0 || st.Step > len(ro.Steps) {
			add("rollout.status.step", "must be 0..%d, got %d", len(ro.Steps), st.Step)
		}
	}
	return errs
}

func known(m map[string]Analysis) string {
	if len(m) == 0 {
		return " (it defines none)"
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, strconv.Quote(n))
	}
	slices.Sort(names)
	return " (it defines " + strings.Join(names, ", ") + ")"
}

func validateAnalysis(p, name string, a Analysis) []error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, strict.Errorf(path, format, args...))
	}
	if !checkName.MatchString(name) {
		add(p, "analysis name must match %s, got %q", checkName, name)
	}
	builtin := false
	for _, c := range a.Checks {
		builtin = builtin || c.Metric != ""
	}
	iv := a.Interval.Std()
	switch {
	case iv == 0:
		add(p+".interval", "is required: the time between measurements, such as \"30s\"")
	case iv < minInterval || iv > maxInterval:
		add(p+".interval", "must be between %s and %s, got %s", minInterval, maxInterval, iv)
	case builtin && iv > maxTrafficWindow:
		add(p+".interval", "must be at most %s with built-in metrics (the traffic windows keep 3m, and a fleet publishes its counters a few seconds late), got %s", maxTrafficWindow, iv)
	case iv%time.Second != 0 && builtin:
		add(p+".interval", "must be a whole number of seconds with built-in metrics (the traffic windows count by the second), got %s", iv)
	}
	if a.Count < 0 {
		add(p+".count", "must be at least 1, got %d", a.Count)
	}
	if a.FailureLimit < 0 {
		add(p+".failure_limit", "must not be negative, got %d", a.FailureLimit)
	}
	if a.InconclusiveLimit < 0 {
		add(p+".inconclusive_limit", "must not be negative, got %d", a.InconclusiveLimit)
	}
	switch {
	case len(a.Checks) == 0:
		add(p+".checks", "needs at least one check")
	case len(a.Checks) > MaxChecks:
		add(p+".checks", "has %d checks; at most %d are allowed", len(a.Checks), MaxChecks)
	}
	labels := map[string]int{}
	for i, c := range a.Checks {
		cp := strict.Index(p+".checks", i)
		errs = append(errs, validateCheck(cp, c)...)
		if c.Name != "" && !checkName.MatchString(c.Name) {
			add(cp+".name", "must match %s, got %q", checkName, c.Name)
		}
		l := c.Label()
		if j, dup := labels[l]; dup {
			add(cp+".name", "checks[%d] is also called %q; give the checks distinct names", j, l)
		} else {
			labels[l] = i
		}
	}
	return errs
}

func validateCheck(p string, c Check) []error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, strict.Errorf(path, format, args...))
	}
	var kinds []string
	if c.Metric != "" {
		kinds = append(kinds, "metric")
	}
	if c.Prometheus != nil {
		kinds = append(kinds, "prometheus")
	}
	if c.Webhook != nil {
		kinds = append(kinds, "webhook")
	}
	switch len(kinds) {
	case 0:
		add(p, "needs one of metric, prometheus or webhook")
		return errs
	case 1:
	default:
		add(p, "sets %s; a check is exactly one kind", strings.Join(kinds, " and "))
		return errs
	}
	if c.Metric == "" {
		// Say where the bound goes instead, for the kind the check is.
		instead := "a prometheus check has its own min and max"
		if c.Webhook != nil {
			instead = "a webhook check passes on a 2xx answer"
		}
		for _, f := range []struct {
			set  bool
			name string
		}{{c.Max != nil, "max"}, {c.Min != nil, "min"}, {c.MinRequests != 0, "min_requests"}} {
			if f.set {
				add(p+"."+f.name, "is only for metric checks (%s)", instead)
			}
		}
	}
	switch {
	case c.Metric != "":
		lo, hi := 0.0, 1.0
		switch c.Metric {
		case MetricErrorRate:
		case MetricErrorRateVsStable:
			lo = -1
		case MetricP99Ms:
			hi = math.Inf(1)
		default:
			add(p+".metric", "must be %s, %s or %s, got %q", MetricErrorRate, MetricErrorRateVsStable, MetricP99Ms, c.Metric)
			return errs
		}
		errs = append(errs, bounds(p, c.Min, c.Max, lo, hi, c.Metric)...)
		if c.MinRequests < 0 {
			add(p+".min_requests", "must not be negative, got %d", c.MinRequests)
		}
	case c.Prometheus != nil:
		pc := c.Prometheus
		pp := p + ".prometheus"
		if err := httpURL(pc.Address); err != nil {
			add(pp+".address", "%v", err)
		}
		if strings.TrimSpace(pc.Query) == "" {
			add(pp+".query", "is required: PromQL that yields one value")
		}
		errs = append(errs, bounds(pp, pc.Min, pc.Max, math.Inf(-1), math.Inf(1), "")...)
		errs = append(errs, timeout(pp+".timeout", pc.Timeout)...)
	case c.Webhook != nil:
		wp := p + ".webhook"
		if err := httpURL(c.Webhook.URL); err != nil {
			add(wp+".url", "%v", err)
		}
		errs = append(errs, timeout(wp+".timeout", c.Webhook.Timeout)...)
	}
	return errs
}

func bounds(p string, minV, maxV *float64, lo, hi float64, metric string) []error {
	var errs []error
	if minV == nil && maxV == nil {
		return []error{strict.Errorf(p, "needs max and/or min: the bound a measurement is held to")}
	}
	what := ""
	switch metric {
	case MetricErrorRate:
		what = " (error rates are fractions: 0.01 is 1%)"
	case MetricErrorRateVsStable:
		what = " (a difference of error rates, as a fraction)"
	}
	for _, b := range []struct {
		v    *float64
		name string
	}{{minV, "min"}, {maxV, "max"}} {
		switch {
		case b.v == nil:
		case math.IsNaN(*b.v) || math.IsInf(*b.v, 0):
			errs = append(errs, strict.Errorf(p+"."+b.name, "must be a finite number, got %v (leave the bound out for none)", *b.v))
		case *b.v < lo || *b.v > hi:
			errs = append(errs, strict.Errorf(p+"."+b.name, "must be %v..%v%s, got %v", lo, hi, what, *b.v))
		}
	}
	if minV != nil && maxV != nil && *minV > *maxV {
		errs = append(errs, strict.Errorf(p+".min", "%v is above max %v", *minV, *maxV))
	}
	return errs
}

func timeout(p string, d breaker.Duration) []error {
	if d != 0 && (d.Std() <= 0 || d.Std() > maxCheckTimeout) {
		return []error{strict.Errorf(p, "must be between 1ms and %s (0 or unset means %s), got %s", maxCheckTimeout, DefaultCheckTimeout, d)}
	}
	return nil
}

func httpURL(s string) error {
	if s == "" {
		return errors.New("is required: an http:// or https:// URL")
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("must be an http:// or https:// URL with a host, got %q", s)
	}
	return nil
}
