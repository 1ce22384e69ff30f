package rollout

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/strict"
)

// VetTimeout bounds how long VetQueries waits for each Prometheus.
const VetTimeout = 3 * time.Second

// VetQueries asks the Prometheus server of every prometheus check of r's
// rollout to parse its query (/api/v1/format_query), so that a typo in
// PromQL is refused when the rule is written, naming the check, rather
// than found by the first analysis, whose error fails the measurement and
// aborts the rollout. A server that cannot be asked (unreachable, slow,
// older than Prometheus 2.38, which added format_query) vets nothing: the
// analysis reports what it finds. client makes the calls (nil:
// http.DefaultClient). The checks are asked in parallel, each within
// VetTimeout.
func VetQueries(ctx context.Context, r rule.Rule, client *http.Client) []strict.FieldError {
	if r.Rollout == nil {
		return nil
	}
	if client == nil {
		client = http.DefaultClient
	}
	type job struct {
		path string
		pc   *rule.PrometheusCheck
	}
	var jobs []job
	names := make([]string, 0, len(r.Rollout.Analyses))
	for n := range r.Rollout.Analyses {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		for i, c := range r.Rollout.Analyses[n].Checks {
			if c.Prometheus != nil {
				jobs = append(jobs, job{strict.Index(strict.Join("rollout.analyses", n)+".checks", i) + ".prometheus.query", c.Prometheus})
			}
		}
	}
	found := make([]*strict.FieldError, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() {
			if msg := refusedQuery(ctx, client, j.pc); msg != "" {
				found[i] = &strict.FieldError{Path: j.path, Message: msg}
			}
		})
	}
	wg.Wait()
	var out []strict.FieldError
	for _, fe := range found {
		if fe != nil {
			out = append(out, *fe)
		}
	}
	return out
}

// refusedQuery returns why pc's server refuses its query as PromQL, or ""
// when it accepts it or cannot be asked.
func refusedQuery(ctx context.Context, client *http.Client, pc *rule.PrometheusCheck) string {
	cli, err := api.NewClient(api.Config{Address: pc.Address, Client: client})
	if err != nil {
		return ""
	}
	qctx, cancel := context.WithTimeout(ctx, VetTimeout)
	defer cancel()
	_, err = promv1.NewAPI(cli).FormatQuery(qctx, pc.Query)
	var perr *promv1.Error
	if errors.As(err, &perr) && perr.Type == promv1.ErrBadData {
		return "Prometheus at " + pc.Address + " cannot parse it: " + perr.Msg
	}
	return ""
}

// Vet is VetQueries with the engine's HTTP client, the one its
// prometheus checks use.
func (e *Engine) Vet(ctx context.Context, r rule.Rule) []strict.FieldError {
	return VetQueries(ctx, r, e.opts.HTTPClient)
}
