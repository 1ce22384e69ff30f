package gateway

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRateLimitStorm: clients that hit a rate-limited route
// all at once must get what the limit promises. At 1 rps (burst 5) sixteen
// clients hammer the route: about the burst is admitted, every 429 says
// "Retry-After: 1" (a token comes back within a second), and once the
// clock has moved 5 s the full burst is admitted again. A refused request
// that spent a token would leave the bucket in debt: Retry-After would
// grow, and after 5 s nothing would be admitted.
func TestRateLimitStorm(t *testing.T) {
	var offset atomic.Int64 // added to the real clock, so network deadlines stay real
	e := startWith(t, baseConfig+`
routes:
  - {name: api, path_prefix: /api/, upstream: stable, rate_limit: {rps: 1, burst: 5}}
`, "", func(o *Options) {
		o.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	})
	storm := func() (admitted int64, retryAfter map[string]int, err error) {
		var ok atomic.Int64
		var mu sync.Mutex
		retryAfter = map[string]int{}
		errs := make(chan error, 16)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range 25 {
					resp, err := e.client.Get(e.data + "/api/x")
					if err != nil {
						errs <- err
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					switch resp.StatusCode {
					case 200:
						ok.Add(1)
					case 429:
						mu.Lock()
						retryAfter[resp.Header.Get("Retry-After")]++
						mu.Unlock()
					default:
						errs <- fmt.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			}()
		}
		begin := time.Now()
		close(start)
		wg.Wait()
		close(errs)
		// Real time passes during the storm: one token per second of it.
		t.Logf("storm of 400 requests took %v", time.Since(begin))
		return ok.Load(), retryAfter, <-errs
	}
	for round := range 3 {
		n, ra, err := storm()
		if err != nil {
			t.Fatal(err)
		}
		if n < 5 {
			t.Errorf("round %d: admitted %d at once, want the burst of 5 (Retry-After values: %v)", round, n, ra)
		}
		for v, count := range ra {
			if v != "1" {
				t.Errorf("round %d: %d answers 429 with Retry-After %q, want \"1\" (a token comes back within 1 s at 1 rps)", round, count, v)
			}
		}
		offset.Add(int64(5 * time.Second)) // refills the burst
	}
}

// TestPerIdentityLimitWithoutCookie: a client that keeps no anonymous
// cookie (curl, most scripts) is issued a new id on every request. Its
// per_identity bucket is its address's, as with anonymous: ip, so it is
// limited; before, each request came with a fresh id and a full bucket,
// and such a client was never limited. Clients that name themselves keep
// their own buckets.
func TestPerIdentityLimitWithoutCookie(t *testing.T) {
	e := start(t, baseConfig+`
routes:
  - {name: api, path_prefix: /api/, upstream: stable, rate_limit: {rps: 0.1, burst: 2, per_identity: true}}
`, "")
	codes := map[int]int{}
	for range 6 {
		resp, err := e.client.Get(e.data + "/api/x") // no cookie jar: every request is cookie-less
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	if codes[200] != 2 || codes[429] != 4 {
		t.Errorf("6 cookie-less requests: %v, want the burst of 2 admitted and 4 refused", codes)
	}
	// The refusals are counted, by route and reason.
	series := `graygate_refused_requests_total{reason="rate_limit",route="api"}`
	if v := metricValue(metricsText(t, e), series); v != 4 {
		t.Errorf("%s = %v, want 4", series, v)
	}
	for _, id := range []string{"alice", "bob"} {
		if a, err := e.get("/api/x", "X-User-Id", id); err != nil || a.status != 200 {
			t.Errorf("%s, named, after the cookie-less storm: %+v %v, want its own bucket", id, a, err)
		}
	}
}

// TestPerIdentityLimitWithoutCookieIPv6: a cookie-less client is limited
// by its address, and with identity.ipv6_prefix: 64 by its /64. A client
// that sends each request from another address of its own network (as
// one host with a /64 can) shares one bucket; another /64 has its own.
func TestPerIdentityLimitWithoutCookieIPv6(t *testing.T) {
	e := start(t, baseConfig+`
trusted_proxies: ["127.0.0.1/32"]
identity: {ipv6_prefix: 64}
routes:
  - {name: api, path_prefix: /api/, upstream: stable, rate_limit: {rps: 0.1, burst: 2, per_identity: true}}
`, "")
	var got []int
	for i := range 4 {
		a, err := e.get("/api/x", "X-Forwarded-For", fmt.Sprintf("2001:db8:1:2::%x", i+1))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, a.status)
	}
	if fmt.Sprint(got) != "[200 200 429 429]" {
		t.Errorf("4 cookie-less requests from 4 addresses of one /64: %v, want the burst of 2 admitted, then 429", got)
	}
	if a, err := e.get("/api/x", "X-Forwarded-For", "2001:db8:1:3::1"); err != nil || a.status != 200 {
		t.Errorf("another /64 after the storm: %+v %v, want its own bucket", a, err)
	}
}
