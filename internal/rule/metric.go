package rule

import (
	"math"
	"strconv"
	"strings"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/strict"
)

// Metric types (issue 14): a binomial metric is 0 or 1 per unit (did the
// unit convert); a mean metric is the sum of the values a unit reported.
const (
	MetricBinomial = "binomial"
	MetricMean     = "mean"
)

// MaxMetrics is the most metrics one ab rule may declare. It keeps the
// per-request matching short and the response headers the data plane reads
// for from_header metrics within what it captures (16).
const MaxMetrics = 16

// Metric is one measurement an ab rule's experiment makes of its units.
// A metric converts a unit (or adds to its value) in one of three ways:
// a request of the unit that Match describes, a value the upstream reports
// in the response header FromHeader of a request the rule claimed, or an
// event posted to the events API (every metric can receive events).
type Metric struct {
	// Name identifies the metric in results and in posted events.
	Name string `json:"name"`
	// Type is "binomial" or "mean".
	Type string `json:"type"`
	// Match, when set, makes every matching request of an exposed unit a
	// conversion (binomial) or adds 1 to the unit's value (mean).
	Match *MetricMatch `json:"match,omitempty"`
	// FromHeader names a response header in which the upstream reports a
	// number for the unit; graygate adds it to the unit's value (a
	// binomial metric converts on any non-zero value) and removes the
	// header before the client sees the response.
	FromHeader string `json:"from_header,omitempty"`
}

// MetricMatch describes the requests that convert a unit. Every field set
// must hold.
type MetricMatch struct {
	// Method is the request method, such as "POST".
	Method string `json:"method,omitempty"`
	// PathPrefix is a prefix of the request's decoded path.
	PathPrefix string `json:"path_prefix,omitempty"`
	// Status is the status sent to the client: a class ("2xx") or a code
	// ("201").
	Status string `json:"status,omitempty"`
}

// CompiledMetric is a Metric ready for the request path. It is immutable.
type CompiledMetric struct {
	Name string
	// Binomial is true for a binomial metric, false for a mean metric.
	Binomial bool
	// Match is nil when requests do not convert the metric.
	Match *Matcher
	// Header is the index of the metric's header in Compiled.ReportHeaders,
	// or -1 when it has none.
	Header int
}

// Matcher is a compiled MetricMatch. It is immutable and safe for
// concurrent use; Matches does not allocate.
type Matcher struct {
	Method     string
	PathPrefix string
	// StatusMin and StatusMax bound the status (inclusive); 0 and 999 when
	// the match names no status.
	StatusMin, StatusMax int
}

// Matches reports whether a request with this method, decoded path and
// final status matches.
func (m *Matcher) Matches(method, path string, status int) bool {
	return status >= m.StatusMin && status <= m.StatusMax &&
		(m.Method == "" || m.Method == method) && strings.HasPrefix(path, m.PathPrefix)
}

// validateMetrics reports every problem of an ab rule's metrics and
// sequential fields.
func (r *Rule) validateMetrics() []error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, strict.Errorf(path, format, args...))
	}
	if len(r.Metrics) > MaxMetrics {
		add("metrics", "at most %d metrics per rule, got %d", MaxMetrics, len(r.Metrics))
	}
	names := map[string]int{}
	headers := map[string]int{}
	for i, m := range r.Metrics {
		p := strict.Index("metrics", i)
		switch {
		case m.Name == "":
			add(p+".name", "is required")
		case !validMetricName(m.Name):
			add(p+".name", "must match ^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$, got %q", m.Name)
		default:
			if j, dup := names[m.Name]; dup {
				add(p+".name", "duplicates metrics[%d].name %q", j, m.Name)
			} else {
				names[m.Name] = i
			}
		}
		switch m.Type {
		case MetricBinomial, MetricMean:
		case "":
			add(p+".type", "is required: %q or %q", MetricBinomial, MetricMean)
		default:
			add(p+".type", "must be %q or %q, got %q", MetricBinomial, MetricMean, m.Type)
		}
		if m.Match != nil && m.FromHeader != "" {
			add(p, "set at most one of match and from_header: a metric converts on a request or on a reported value, not both")
		}
		if m.Match != nil {
			errs = append(errs, m.Match.validate(p+".match")...)
		}
		if h := m.FromHeader; h != "" {
			lower := strings.ToLower(h)
			switch {
			case !attr.ValidToken(h):
				add(p+".from_header", "must be a header name (letters, digits and !#$%%&'*+-.^_`|~), got %q", h)
			case strings.HasPrefix(lower, "x-gray-rule") || strings.HasPrefix(lower, "x-gray-group") || strings.HasPrefix(lower, "x-gray-degraded") || reservedHeader[lower]:
				add(p+".from_header", "%q is a header graygate or HTTP itself manages; name another one, such as X-Gray-Metric-%s", h, m.Name)
			default:
				if j, dup := headers[lower]; dup {
					add(p+".from_header", "%q duplicates metrics[%d].from_header %q (header names ignore case)", h, j, r.Metrics[j].FromHeader)
				} else {
					headers[lower] = i
				}
			}
		}
	}
	if r.SequentialTuning != 0 {
		switch t := r.SequentialTuning; {
		case !r.Sequential:
			add("sequential_tuning", "needs \"sequential\": true")
		case math.IsNaN(t) || math.IsInf(t, 0) || t <= 0:
			add("sequential_tuning", "must be a positive number, got %v", t)
		}
	}
	return errs
}

// reservedHeader holds response headers a metric may not take: framing,
// hop-by-hop and connection management.
var reservedHeader = map[string]bool{
	"content-length": true, "transfer-encoding": true, "connection": true, "keep-alive": true,
	"upgrade": true, "trailer": true, "te": true, "content-type": true, "set-cookie": true,
	"date": true, "server": true, "via": true, "x-request-id": true, "proxy-authenticate": true,
}

func (m *MetricMatch) validate(p string) []error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, strict.Errorf(path, format, args...))
	}
	if m.Method == "" && m.PathPrefix == "" && m.Status == "" {
		add(p, "needs at least one of method, path_prefix and status")
	}
	if m.Method != "" && !validMethod(m.Method) {
		add(p+".method", "must be an upper-case method such as \"POST\", got %q", m.Method)
	}
	if m.PathPrefix != "" && !strings.HasPrefix(m.PathPrefix, "/") {
		add(p+".path_prefix", "must start with \"/\", got %q", m.PathPrefix)
	}
	if m.Status != "" {
		if _, _, ok := parseStatus(m.Status); !ok {
			add(p+".status", "must be a status class such as \"2xx\" or a code such as \"201\", got %q", m.Status)
		}
	}
	return errs
}

// parseStatus turns "2xx" into 200..299 and "201" into 201..201.
func parseStatus(s string) (lo, hi int, ok bool) {
	if len(s) != 3 || s[0] < '1' || s[0] > '5' {
		return 0, 0, false
	}
	if s[1:] == "xx" {
		c := int(s[0]-'0') * 100
		return c, c + 99, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 100 || n > 599 {
		return 0, 0, false
	}
	return n, n, true
}

// compileMetrics fills c.Metrics and c.ReportHeaders from a valid rule.
func (c *Compiled) compileMetrics(r *Rule) {
	for _, m := range r.Metrics {
		cm := CompiledMetric{Name: m.Name, Binomial: m.Type == MetricBinomial, Header: -1}
		if mm := m.Match; mm != nil {
			mt := &Matcher{Method: mm.Method, PathPrefix: mm.PathPrefix, StatusMin: 0, StatusMax: 999}
			if mm.Status != "" {
				mt.StatusMin, mt.StatusMax, _ = parseStatus(mm.Status)
			}
			cm.Match = mt
		}
		if m.FromHeader != "" {
			cm.Header = len(c.ReportHeaders)
			c.ReportHeaders = append(c.ReportHeaders, m.FromHeader)
		}
		c.Metrics = append(c.Metrics, cm)
	}
}

// validMetricName is the form of a metric name: a rule key of at most 64
// bytes, so that it is safe in paths, Redis keys and Prometheus labels.
func validMetricName(s string) bool { return len(s) <= 64 && ValidKey(s) }

// validMethod reports whether s is an upper-case token, as methods are
// written in practice (they are case-sensitive, RFC 9110 section 9.1).
func validMethod(s string) bool {
	if len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return s != ""
}
