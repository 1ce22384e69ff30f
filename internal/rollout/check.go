package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/traffic"
)

// measurer takes measurements: every check of an analysis, in parallel.
type measurer struct {
	source Source
	// client makes prometheus queries and webhook calls; each call has
	// its own deadline, the check's timeout.
	client *http.Client
	now    func() time.Time
}

// WebhookPayload is the JSON body a webhook check receives: the rollout's
// state when the measurement is taken. Every field is always present
// (background too, false for a step's analysis), as the README lists
// them, so that a receiver can rely on each key.
type WebhookPayload struct {
	Rule          string    `json:"rule"`
	State         string    `json:"state"`
	Step          int       `json:"step"`
	Steps         int       `json:"steps"`
	Percent       float64   `json:"percent"`
	Analysis      string    `json:"analysis"`
	Background    bool      `json:"background"`
	Check         string    `json:"check"`
	Measurement   int       `json:"measurement"`
	StartedAt     time.Time `json:"started_at"`
	StepStartedAt time.Time `json:"step_started_at"`
}

// measure runs every check of analysis a once.
func (m *measurer) measure(ctx context.Context, r *rule.Rule, name string, a rule.Analysis, index int, background bool) rule.Measurement {
	st := r.Rollout.Status
	out := rule.Measurement{Analysis: name, Background: background, Step: st.Step, Index: index, At: m.now().UTC(),
		Checks: make([]rule.CheckResult, len(a.Checks))}
	// Every built-in check of a measurement reads the same windows.
	var w windows
	for _, c := range a.Checks {
		if c.Metric != "" {
			w = m.windows(ctx, r.Key, a.Interval.Std())
			break
		}
	}
	var wg sync.WaitGroup
	for i, c := range a.Checks {
		wg.Go(func() {
			switch {
			case c.Metric != "":
				out.Checks[i] = builtin(c, w)
			case c.Prometheus != nil:
				out.Checks[i] = m.prometheus(ctx, c)
			case c.Webhook != nil:
				p := WebhookPayload{Rule: r.Key, State: st.State, Step: st.Step, Steps: len(r.Rollout.Steps), Percent: percentOf(r),
					Analysis: name, Background: background, Check: c.Label(), Measurement: index, StartedAt: st.StartedAt, StepStartedAt: st.StepStartedAt}
				out.Checks[i] = m.webhook(ctx, c, p)
			}
		})
	}
	wg.Wait()
	out.Result = combine(out.Checks)
	return out
}

// combine is a measurement's result: failed if a check failed, error if
// one could not be made, inconclusive if one was, passed otherwise.
func combine(rs []rule.CheckResult) string {
	rank := map[string]int{rule.ResultPassed: 0, rule.ResultInconclusive: 1, rule.ResultError: 2, rule.ResultFailed: 3}
	best := rule.ResultPassed
	for _, r := range rs {
		if rank[r.Result] > rank[best] {
			best = r.Result
		}
	}
	return best
}

// failing returns the first check result that made a measurement fail.
func failing(m rule.Measurement) *rule.CheckResult {
	for _, want := range []string{rule.ResultFailed, rule.ResultError, rule.ResultInconclusive} {
		for i := range m.Checks {
			if m.Checks[i].Result == want {
				return &m.Checks[i]
			}
		}
	}
	return nil
}

// fmtValue writes a value for people; infinities as Prometheus writes
// them, +Inf and -Inf.
func fmtValue(v float64) string {
	if math.IsInf(v, 0) {
		return model.SampleValue(v).String()
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// judge holds v to minV and maxV. An infinity is a value like any other
// (+Inf is above every max, -Inf below every min), as Argo Rollouts
// compares it; JSON has no number for it, so it is kept in the message
// only and Value is left out, which keeps the status encodable.
func judge(res rule.CheckResult, v float64, minV, maxV *float64) rule.CheckResult {
	if !math.IsInf(v, 0) {
		res.Value = &v
	}
	switch {
	case maxV != nil && v > *maxV:
		res.Result, res.Message = rule.ResultFailed, fmt.Sprintf("%s is above max %s", fmtValue(v), fmtValue(*maxV))
	case minV != nil && v < *minV:
		res.Result, res.Message = rule.ResultFailed, fmt.Sprintf("%s is below min %s", fmtValue(v), fmtValue(*minV))
	default:
		res.Result, res.Message = rule.ResultPassed, fmt.Sprintf("%s within %s", fmtValue(v), res.Threshold)
	}
	return res
}

// windows are the gray and stable traffic of one measurement's window.
type windows struct {
	d                  time.Duration
	gray, stable       traffic.Stats
	grayErr, stableErr error
}

func (m *measurer) windows(ctx context.Context, key string, d time.Duration) windows {
	w := windows{d: d}
	w.gray, w.grayErr = m.source.Window(ctx, key, GroupGray, d)
	w.stable, w.stableErr = m.source.Window(ctx, key, GroupStable, d)
	return w
}

// builtin computes a built-in metric from the gray (and stable) traffic
// of the measurement's window.
func builtin(c rule.Check, w windows) rule.CheckResult {
	res := rule.CheckResult{Check: c.Label(), Threshold: rule.Threshold(c.Min, c.Max)}
	gray, window := w.gray, w.d
	// Counters that cannot be read (a fleet's etcd away) say nothing of
	// the gray version: inconclusive, like a window without requests.
	if w.grayErr != nil {
		res.Result, res.Message = rule.ResultInconclusive, "could not read the gray traffic: "+w.grayErr.Error()
		return res
	}
	n := gray.Requests
	res.Requests = &n
	need := uint64(max(c.MinRequests, 1))
	if n < need {
		res.Result = rule.ResultInconclusive
		res.Message = fmt.Sprintf("%d gray request(s) in %s, fewer than min_requests %d", n, window, need)
		return res
	}
	var v float64
	switch c.Metric {
	case rule.MetricErrorRate:
		v = gray.ErrorRate
	case rule.MetricP99Ms:
		v = gray.P99Ms
	case rule.MetricErrorRateVsStable:
		stable := w.stable
		if w.stableErr != nil {
			res.Result, res.Message = rule.ResultInconclusive, "could not read the stable traffic: "+w.stableErr.Error()
			return res
		}
		if stable.Requests < need {
			res.Result = rule.ResultInconclusive
			res.Message = fmt.Sprintf("%d stable request(s) in %s, fewer than min_requests %d", stable.Requests, window, need)
			return res
		}
		v = gray.ErrorRate - stable.ErrorRate
	default:
		res.Result, res.Message = rule.ResultError, "unknown metric "+strconv.Quote(c.Metric)
		return res
	}
	return judge(res, v, c.Min, c.Max)
}

func timeoutOf(d time.Duration) time.Duration {
	if d <= 0 {
		return rule.DefaultCheckTimeout
	}
	return d
}

// prometheus runs an instant query and holds its one value to the
// check's bounds: an empty result or NaN is inconclusive, more than one
// series or a failed query is an error.
func (m *measurer) prometheus(ctx context.Context, c rule.Check) rule.CheckResult {
	pc := c.Prometheus
	res := rule.CheckResult{Check: c.Label(), Threshold: rule.Threshold(pc.Min, pc.Max)}
	cli, err := api.NewClient(api.Config{Address: pc.Address, Client: m.client})
	if err != nil {
		res.Result, res.Message = rule.ResultError, "prometheus client: "+err.Error()
		return res
	}
	timeout := timeoutOf(pc.Timeout.Std())
	qctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The zero time lets the server evaluate at its own now.
	val, _, _, err := promv1.NewAPI(cli).Query(qctx, pc.Query, time.Time{}, promv1.WithTimeout(timeout))
	if err != nil {
		res.Result = rule.ResultError
		if errors.Is(qctx.Err(), context.DeadlineExceeded) {
			res.Message = fmt.Sprintf("prometheus %s gave no answer within %s", pc.Address, timeout)
		} else {
			res.Message = fmt.Sprintf("prometheus %s: %v", pc.Address, err)
		}
		return res
	}
	var v float64
	switch x := val.(type) {
	case *model.Scalar:
		v = float64(x.Value)
	case model.Vector:
		switch len(x) {
		case 0:
			res.Result, res.Message = rule.ResultInconclusive, "the query returned an empty result"
			return res
		case 1:
			v = float64(x[0].Value)
		default:
			res.Result, res.Message = rule.ResultError, fmt.Sprintf("the query returned %d series; it must yield one value (aggregate it, e.g. with sum)", len(x))
			return res
		}
	default:
		res.Result, res.Message = rule.ResultError, fmt.Sprintf("the query returned a %s; it must yield a scalar or one series", val.Type())
		return res
	}
	if math.IsNaN(v) {
		res.Result, res.Message = rule.ResultInconclusive, "the query returned NaN (no data, such as a rate over no requests)"
		return res
	}
	res = judge(res, v, pc.Min, pc.Max)
	if math.IsInf(v, 0) {
		res.Message += " (the query returned an infinity, such as a ratio over zero; JSON has no number for it, so the measurement records no value)"
	}
	return res
}

// webhook POSTs p: a 2xx answer passes, any other answer fails, no answer
// within the timeout (or no connection) is an error.
func (m *measurer) webhook(ctx context.Context, c rule.Check, p WebhookPayload) rule.CheckResult {
	wc := c.Webhook
	res := rule.CheckResult{Check: c.Label(), Threshold: "2xx"}
	body, _ := json.Marshal(p)
	timeout := timeoutOf(wc.Timeout.Std())
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(wctx, http.MethodPost, wc.URL, bytes.NewReader(body))
	if err != nil {
		res.Result, res.Message = rule.ResultError, "webhook request: "+err.Error()
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "graygate-rollout")
	// The webhook's own answer is the verdict: a redirect is not 2xx, and
	// followed it could end on any page that is.
	client := *m.client
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(req)
	if err != nil {
		res.Result = rule.ResultError
		if errors.Is(wctx.Err(), context.DeadlineExceeded) {
			res.Message = fmt.Sprintf("webhook %s gave no answer within %s", wc.URL, timeout)
		} else {
			res.Message = fmt.Sprintf("webhook %s: %v", wc.URL, err)
		}
		return res
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	code := float64(resp.StatusCode)
	res.Value = &code
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		res.Result, res.Message = rule.ResultPassed, fmt.Sprintf("webhook answered %d", resp.StatusCode)
		return res
	}
	res.Result = rule.ResultFailed
	res.Message = fmt.Sprintf("webhook answered %d", resp.StatusCode)
	if s := strings.TrimSpace(string(snippet)); s != "" {
		res.Message += ": " + s
	}
	return res
}
