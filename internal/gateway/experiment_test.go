package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/experiment"
)

// shopBackend answers like a shop's group: every answer names the group;
// POST /api/order/ answers 201 and reports the order's amount (the
// request's X-Order-Amount) in X-Gray-Metric-Revenue, or 500 when the
// request asks to fail.
func shopBackend(t *testing.T, name string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", name)
		if r.Method == "POST" && strings.HasPrefix(r.URL.Path, "/api/order") {
			if r.Header.Get("X-Order-Fail") != "" {
				w.WriteHeader(500)
				io.WriteString(w, name)
				return
			}
			if a := r.Header.Get("X-Order-Amount"); a != "" {
				w.Header().Set("X-Gray-Metric-Revenue", a)
			}
			w.WriteHeader(201)
		}
		io.WriteString(w, name)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// shopConfig is a gateway with the checkout experiment of issue 14: a
// purchase is a successful POST to /api/order, revenue comes from a
// response header, signups from the events API. extra goes under
// experiments:.
func shopConfig(t *testing.T, extra string) string {
	return fmt.Sprintf(`
default_upstream: ga
upstreams:
  ga: {instances: [{addr: "%s"}]}
  gb: {instances: [{addr: "%s"}]}
admin:
  tokens: [{name: backend, token: events-token, role: events}, {name: dash, token: viewer-token, role: viewer}]
experiments:
  flush_interval: 100ms
%s
rules:
  - key: checkout
    type: ab
    experiment_id: exp_checkout_2026
    conditions: {path_prefix: [/shop/, /api/order/]}
    groups: [{name: A, weight: 50, target: ga}, {name: B, weight: 50, target: gb}]
    metrics:
      - {name: purchase, type: binomial, match: {method: POST, path_prefix: /api/order, status: 2xx}}
      - {name: revenue, type: mean, from_header: X-Gray-Metric-Revenue}
      - {name: signup, type: binomial}
`, shopBackend(t, "ga"), shopBackend(t, "gb"), extra)
}

// unit is one row of testdata/experiment/units.csv.
type unit struct {
	id, group string
	orders    []string
	failed    bool
	signup    string // "1", "before" or "0"
}

func loadUnits(t *testing.T) []unit {
	f, err := os.Open("testdata/experiment/units.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []unit
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		c := strings.Split(sc.Text(), ",")
		if len(c) != 5 {
			t.Fatalf("units.csv line %q", sc.Text())
		}
		u := unit{id: c[0], group: c[1], failed: c[3] == "1", signup: c[4]}
		if c[2] != "" {
			u.orders = strings.Split(c[2], ";")
		}
		out = append(out, u)
	}
	return out
}

// preq is one request of a pipelined run and what its answer must be.
type preq struct {
	method, path, uid string
	hdr               []string // more header name, value pairs
	status            int
	group             string // the X-Gray-Group the answer must carry
}

// shopRequests are each unit's requests: the exposure, then its orders.
// Every answer must name the unit's group.
func shopRequests(units []unit) []preq {
	var out []preq
	for _, u := range units {
		out = append(out, preq{method: "GET", path: "/shop/item", uid: u.id, status: 200, group: u.group})
		for _, a := range u.orders {
			out = append(out, preq{method: "POST", path: "/api/order/new", uid: u.id, hdr: []string{"X-Order-Amount", a}, status: 201, group: u.group})
		}
		if u.failed {
			out = append(out, preq{method: "POST", path: "/api/order/new", uid: u.id, hdr: []string{"X-Order-Fail", "1"}, status: 500, group: u.group})
		}
	}
	return out
}

// shop sends each unit's traffic through the data plane.
func shop(t *testing.T, e *env, units []unit, workers int) {
	pipeline(t, e, shopRequests(units), workers)
}

// pipeline sends reqs through e's data plane on workers keep-alive
// connections, each pipelining 32 requests at a time (one write, then the
// answers in order, RFC 9112 section 9.3.2), which keeps tens of thousands
// of requests quick under -race. Requests keep their order on a
// connection. Every answer must have the status and group its request
// wants, come from that group's backend, and never carry the revenue
// header the upstream reported.
func pipeline(t *testing.T, e *env, reqs []preq, workers int) {
	t.Helper()
	addr := strings.TrimPrefix(e.data, "http://")
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			var buf []byte
			for {
				first := int(next.Add(32) - 32)
				if first >= len(reqs) {
					return
				}
				chunk := reqs[first:min(first+32, len(reqs))]
				buf = buf[:0]
				for _, r := range chunk {
					buf = fmt.Appendf(buf, "%s %s HTTP/1.1\r\nHost: shop\r\nX-User-Id: %s\r\n", r.method, r.path, r.uid)
					for i := 0; i+1 < len(r.hdr); i += 2 {
						buf = fmt.Appendf(buf, "%s: %s\r\n", r.hdr[i], r.hdr[i+1])
					}
					if r.method == "POST" {
						buf = append(buf, "Content-Length: 0\r\n"...)
					}
					buf = append(buf, "\r\n"...)
				}
				_ = c.SetDeadline(time.Now().Add(60 * time.Second))
				if _, err := c.Write(buf); err != nil {
					errs <- err
					return
				}
				for _, r := range chunk {
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						errs <- fmt.Errorf("%s %s of %s: %w", r.method, r.path, r.uid, err)
						return
					}
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err != nil || resp.StatusCode != r.status || r.group != "" && (resp.Header.Get("X-Gray-Group") != r.group ||
						resp.Header.Get("X-Backend") != "g"+strings.ToLower(r.group)) || resp.Header.Get("X-Gray-Metric-Revenue") != "" {
						errs <- fmt.Errorf("%s %s of %s (group %s), want status %d: %v %v (the revenue header must not reach the client)",
							r.method, r.path, r.uid, r.group, r.status, err, respSummary(resp))
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func respSummary(r *http.Response) string {
	if r == nil {
		return "no answer"
	}
	return fmt.Sprintf("status %d, headers %v", r.StatusCode, r.Header)
}

// postEvents posts events with token and returns the status and answer.
func (e *env) postEvents(token string, events any) (int, map[string]any) {
	e.t.Helper()
	js, _ := json.Marshal(map[string]any{"events": events})
	req, _ := http.NewRequest("POST", e.admin+"/api/v1/events", bytes.NewReader(js))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("POST /api/v1/events: %v", err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

// flushExperiments makes the gateway write what its request path queued:
// the events API writes queued exposures first.
func (e *env) flushExperiments() {
	e.t.Helper()
	if code, out := e.postEvents(token, []any{}); code != 200 {
		e.t.Fatalf("flush through POST /api/v1/events: %d %v", code, out)
	}
}

func (e *env) results(key string) (*experiment.Results, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.admin+"/api/v1/experiments/"+key+"/results", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		e.t.Fatalf("GET results of %s: %d %s", key, resp.StatusCode, raw)
	}
	var res experiment.Results
	if err := json.Unmarshal(raw, &res); err != nil {
		e.t.Fatalf("results %s: %v", raw, err)
	}
	return &res, raw
}

// reference is testdata/experiment/reference.json.
type reference struct {
	Groups      map[string]map[string]refAgg `json:"groups"`
	Comparisons map[string]refCompare        `json:"comparisons"`
	SRM         struct {
		Chi2   float64 `json:"chi2"`
		PValue float64 `json:"p_value"`
	} `json:"srm"`
}

type refAgg struct {
	Units      int64   `json:"units"`
	Count      int64   `json:"count"`
	Sum        float64 `json:"sum"`
	SumSquares float64 `json:"sum_squares"`
}

type refCompare struct {
	BaselineMean float64    `json:"baseline_mean"`
	Mean         float64    `json:"mean"`
	AbsDiff      float64    `json:"abs_diff"`
	Lift         float64    `json:"lift"`
	LiftStdErr   float64    `json:"lift_std_err"`
	CI95         [2]float64 `json:"ci95"`
	DF           float64    `json:"df"`
	TRaw         float64    `json:"t_raw"`
	PValueRaw    float64    `json:"p_value_raw"`
}

func close9(got *float64, want float64) bool {
	return got != nil && math.Abs(*got-want) <= 1e-9*math.Abs(want)
}

// TestExperimentEndToEnd drives the 20,000-unit experiment of
// testdata/experiment through the gateway's listener: exposures, purchases
// by match, revenue reported in a response header (which the client never
// sees), signups through the events API. The planted 2-point lift is
// detected (p < 0.05), and every number agrees with what scipy computes
// from the same unit values, to 1e-9.
func TestExperimentEndToEnd(t *testing.T) {
	units := loadUnits(t)
	if len(units) != 20000 {
		t.Fatalf("%d units in the fixture", len(units))
	}
	var ref reference
	raw, err := os.ReadFile("testdata/experiment/reference.json")
	if err != nil || json.Unmarshal(raw, &ref) != nil {
		t.Fatalf("reference.json: %v", err)
	}
	logPath := t.TempDir() + "/exposures.jsonl"
	e := start(t, shopConfig(t, "  exposure_log: "+logPath+"\n  gateway: gw-e2e"), "")
	began := time.Now()
	shop(t, e, units, 16)
	t.Logf("%d units' traffic through the listener in %v", len(units), time.Since(began).Round(time.Millisecond))
	// Signups: after the exposure, or dated before it (not counted); and
	// some of units the experiment never saw (not counted either).
	var events []map[string]any
	now := time.Now().UTC()
	for _, u := range units {
		switch u.signup {
		case "1":
			events = append(events, map[string]any{"unit": u.id, "metric": "signup", "value": 1, "ts": now.Format(time.RFC3339Nano)})
		case "before":
			events = append(events, map[string]any{"unit": u.id, "metric": "signup", "ts": now.Add(-2 * time.Hour).Format(time.RFC3339)})
		}
	}
	for i := range 50 {
		events = append(events, map[string]any{"unit": "stranger-" + strconv.Itoa(i), "metric": "signup"})
	}
	for len(events) > 0 {
		n := min(len(events), 2000)
		if code, out := e.postEvents("events-token", events[:n]); code != 200 || out["accepted"] != float64(n) {
			t.Fatalf("POST /api/v1/events: %d %v", code, out)
		}
		events = events[n:]
	}
	e.flushExperiments()
	res, body := e.results("checkout")
	if res.Experiment != "exp_checkout_2026" || res.Control != "A" || res.Rule != "checkout" || res.Store != "file" || res.RuleVersion != 1 || len(res.Groups) != 2 {
		t.Fatalf("results: %s", body)
	}
	for _, g := range res.Groups {
		want := ref.Groups[g.Name]
		if g.Units != want["purchase"].Units {
			t.Errorf("group %s: %d units, want %d", g.Name, g.Units, want["purchase"].Units)
		}
		for _, m := range []string{"purchase", "revenue", "signup"} {
			got, w := g.Metrics[m], want[m]
			if got.Units != w.Units || got.Count != w.Count || math.Abs(got.Sum-w.Sum) > 1e-9*w.Sum || math.Abs(got.SumSquares-w.SumSquares) > 1e-9*w.SumSquares {
				t.Errorf("group %s metric %s: %+v, want %+v", g.Name, m, got, w)
			}
		}
	}
	if len(res.Comparisons) != 3 {
		t.Fatalf("comparisons: %s", body)
	}
	for _, c := range res.Comparisons {
		w := ref.Comparisons[c.Metric]
		if c.Group != "B" {
			t.Errorf("comparison of group %s", c.Group)
		}
		checks := []struct {
			name string
			got  *float64
			want float64
		}{
			{"baseline_mean", c.BaselineMean, w.BaselineMean}, {"mean", c.Mean, w.Mean}, {"abs_diff", c.AbsDiff, w.AbsDiff},
			{"lift", c.Lift, w.Lift}, {"lift_std_err", c.LiftStdErr, w.LiftStdErr}, {"t (scipy ttest_ind)", c.T, w.TRaw}, {"df", c.DF, w.DF},
		}
		for _, ck := range checks {
			if !close9(ck.got, ck.want) {
				t.Errorf("%s %s = %v, scipy %v", c.Metric, ck.name, deref(ck.got), ck.want)
			}
		}
		if c.PValue == nil || math.Abs(*c.PValue-w.PValueRaw) > 1e-9 {
			t.Errorf("%s p_value = %v, scipy ttest_ind %v", c.Metric, deref(c.PValue), w.PValueRaw)
		}
		if c.CI95 == nil || !close9(&c.CI95[0], w.CI95[0]) || !close9(&c.CI95[1], w.CI95[1]) {
			t.Errorf("%s ci95 = %v, want %v", c.Metric, c.CI95, w.CI95)
		}
		if c.Metric == "purchase" && (c.PValue == nil || *c.PValue >= 0.05 || *c.Lift <= 0) {
			t.Errorf("the planted lift was not detected: %+v", c)
		}
	}
	if !res.SRM.OK || !res.SRM.Judged || !close9(res.SRM.PValue, ref.SRM.PValue) || !close9(res.SRM.Chi2, ref.SRM.Chi2) {
		t.Errorf("srm = %+v, scipy chisquare %+v", res.SRM, ref.SRM)
	}
	// The exposure log: one line per unit, with the group it was given.
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]string{}
	for _, u := range units {
		groups[u.id] = u.group
	}
	lines := bytes.Split(bytes.TrimSpace(log), []byte("\n"))
	for _, l := range lines {
		var x struct {
			TS, Unit, Experiment, Group, Gateway string
			RuleVersion                          int64 `json:"rule_version"`
		}
		if err := json.Unmarshal(l, &x); err != nil || groups[x.Unit] != x.Group || x.Experiment != "exp_checkout_2026" || x.RuleVersion != 1 || x.Gateway != "gw-e2e" || x.TS == "" {
			t.Fatalf("exposure log line %s (%v)", l, err)
		}
		delete(groups, x.Unit)
	}
	if len(lines) != len(units) || len(groups) != 0 {
		t.Errorf("exposure log: %d lines, %d units never logged", len(lines), len(groups))
	}
	// The metrics: units per group and the SRM p-value.
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := e.metricsText()
		want := fmt.Sprintf(`graygate_experiment_units{experiment="exp_checkout_2026",group="A"} %d`, ref.Groups["A"]["purchase"].Units)
		if strings.Contains(m, want) && strings.Contains(m, `graygate_experiment_srm_p_value{experiment="exp_checkout_2026"} 0.4040`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics lack %s and the SRM p-value:\n%s", want, grepLines(m, "graygate_experiment"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func (e *env) metricsText() string {
	resp, err := e.client.Get(e.admin + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestReportedValuesArePlainDecimals: a value the upstream reports in a
// from_header metric counts only when it is a plain decimal. strconv reads
// "1_0" as 10, "0x1p3" as 8 and "Inf" as +Inf; through the listener they
// are dropped as bad values, and only the decimal ones reach the results.
func TestReportedValuesArePlainDecimals(t *testing.T) {
	e := start(t, shopConfig(t, ""), "")
	var reqs []preq
	for i, a := range []string{"12.5", "1_0", "0x1p3", "Inf", "2e1", "1e999"} {
		uid := fmt.Sprintf("decimal-%d", i)
		reqs = append(reqs,
			preq{method: "GET", path: "/shop/item", uid: uid, status: 200},
			preq{method: "POST", path: "/api/order/new", uid: uid, hdr: []string{"X-Order-Amount", a}, status: 201})
	}
	pipeline(t, e, reqs, 1)
	e.flushExperiments()
	res, body := e.results("checkout")
	var count int64
	var sum float64
	for _, g := range res.Groups {
		count += g.Metrics["revenue"].Count
		sum += g.Metrics["revenue"].Sum
	}
	if count != 2 || sum != 32.5 {
		t.Errorf("revenue: %d values summing to %v, want 12.5 and 2e1 only: %s", count, sum, body)
	}
	if m := e.metricsText(); !strings.Contains(m, `graygate_experiment_events_dropped_total{reason="bad_value"} 4`) {
		t.Errorf("four bad values not counted:\n%s", grepLines(m, "dropped"))
	}
}
