package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// pace is an open-loop (wrk2-style) load generator: request i is due at
// start + i/rate whatever happened to the requests before it, and its
// latency is measured from that due time, so a stalled server is charged
// for the requests that queued behind the stall (no coordinated omission).
// Every request carries a random X-User-Id.
//
// It exists because vegeta, on this 2-core machine, cannot hold 50% of
// nginx's capacity while sharing a core with the upstream: it falls behind
// and the latency it reports is its own queueing. A fasthttp client costs a
// few µs per request.
//
// The first -warmup of requests are paced like the rest but not counted.
// It prints one line of key=value pairs; latencies are in µs. max_backlog is
// the most requests that were due but not yet picked up by a connection.
func pace(args []string) error {
	fs := flag.NewFlagSet("pace", flag.ContinueOnError)
	target := fs.String("url", "http://127.0.0.1:18080/api/x", "`URL` to request")
	rate := fs.Float64("rate", 1000, "requests per second")
	dur := fs.Duration("duration", 10*time.Second, "how long to send")
	conns := fs.Int("c", 64, "connections (one worker each)")
	warmup := fs.Duration("warmup", time.Second, "paced requests sent first and not counted (connections, caches, the pacer settling)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	u, err := url.Parse(*target)
	if err != nil {
		return fmt.Errorf("parse -url: %w", err)
	}
	skip := int(*rate * warmup.Seconds())
	total := skip + int(*rate*dur.Seconds())
	if total <= skip {
		return fmt.Errorf("rate × duration is no request")
	}
	hc := &fasthttp.HostClient{
		Addr:                u.Host,
		MaxConns:            *conns,
		ReadTimeout:         5 * time.Second,
		WriteTimeout:        5 * time.Second,
		MaxIdleConnDuration: time.Minute,
	}
	ids := make([][]byte, 1<<16)
	for i := range ids {
		ids[i] = strconv.AppendUint(nil, rand.Uint64N(1_000_000_000)+1, 10)
	}
	interval := float64(time.Second) / *rate
	var (
		due     = make(chan int, total) // sequence numbers, sent when due
		corr    = make([]int64, total)  // due time → response, ns
		service = make([]int64, total)  // actual send → response, ns
		codes   = make([]int, total)    // status, or -1 for a transport error
		wg      sync.WaitGroup
		start   = time.Now()
	)
	for w := 0; w < *conns; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI(*target)
			for seq := range due {
				req.Header.SetBytesV("X-User-Id", ids[seq&(len(ids)-1)])
				sent := time.Now()
				err := hc.Do(req, resp)
				done := time.Now()
				corr[seq] = int64(done.Sub(start) - time.Duration(float64(seq)*interval))
				service[seq] = int64(done.Sub(sent))
				if err != nil {
					codes[seq] = -1
				} else {
					codes[seq] = resp.StatusCode()
				}
			}
		}()
	}
	// The pacer releases every request whose due time has passed, then
	// sleeps briefly; due is buffered for all of them, so it never blocks.
	maxBacklog := 0
	for sent := 0; sent < total; {
		n := min(total, int(float64(time.Since(start))/interval)+1)
		for ; sent < n; sent++ {
			due <- sent
		}
		maxBacklog = max(maxBacklog, len(due))
		time.Sleep(100 * time.Microsecond)
	}
	close(due)
	wg.Wait()
	elapsed := time.Since(start) - *warmup
	corr, service, codes = corr[skip:], service[skip:], codes[skip:]
	n := total - skip

	bad, errs := 0, 0
	for _, c := range codes {
		switch {
		case c < 0:
			errs++
		case c < 200 || c > 299:
			bad++
		}
	}
	slices.Sort(corr)
	slices.Sort(service)
	q := func(v []int64, p float64) int64 {
		i := int(p*float64(len(v))+0.999999) - 1
		return v[max(0, min(len(v)-1, i))] / 1000
	}
	fmt.Printf("n=%d achieved_rps=%.0f non2xx=%d errors=%d p50_us=%d p99_us=%d p999_us=%d max_us=%d svc_p50_us=%d svc_p99_us=%d svc_p999_us=%d max_backlog=%d\n",
		n, float64(n)/elapsed.Seconds(), bad, errs,
		q(corr, 0.5), q(corr, 0.99), q(corr, 0.999), q(corr, 1),
		q(service, 0.5), q(service, 0.99), q(service, 0.999), maxBacklog)
	return nil
}
