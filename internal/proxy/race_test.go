package proxy

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/identity"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/upstream"
)

// TestConcurrentDecisions runs many requests at once through real sockets
// (keep-alive connections, pooled exchanges, pooled upstream connections)
// while every request gets a different decision, and checks that each
// response, each upstream request and each OnDone call carries its own
// request's decision. The decision's tag and identity value alias the
// request's header bytes, as a router's may. Run with -race, which also
// checks the watcher, the body streams and the pools for data races.
func TestConcurrentDecisions(t *testing.T) {
	names := []string{"stable", "gray", "exp-a"}
	pools := make([]*upstream.Pool, len(names))
	for i, n := range names {
		srv, _ := echoBackend(t, n)
		pools[i] = poolOf(n, addrOf(srv))
	}
	rules := []string{"", "r1", "r2", "r3", "r4"}
	decide := deciderFunc(func(r attr.Request) router.Decision {
		v, _ := r.Header("X-Req")
		n, _ := strconv.Atoi(v)
		return router.Decision{
			Rule: rules[n%len(rules)], Group: names[n%len(names)], Target: pools[n%len(names)],
			Tag:      v, // aliases the request buffer on purpose
			Identity: identity.ID{Value: v, Source: "header:X-Req", Issued: n%2 == 0, Cookie: "gg"},
		}
	})

	var doneCalls, doneBad atomic.Int64
	var firstBad atomic.Value
	onDone := func(done *Done) {
		d, status := done.Decision, done.Status
		doneCalls.Add(1)
		n, err := strconv.Atoi(d.Tag)
		if err != nil || status != 200 || d.Identity.Value != d.Tag ||
			d.Rule != rules[n%len(rules)] || d.Group != names[n%len(names)] {
			if doneBad.Add(1) == 1 {
				firstBad.Store(fmt.Sprintf("status %d tag %q value %q rule %q group %q",
					status, d.Tag, d.Identity.Value, d.Rule, d.Group))
			}
		}
	}
	_, addr := startProxy(t, Options{OnDone: onDone}, decide)

	const workers, perWorker = 12, 30
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := httpClient(t)
			for i := range perWorker {
				n := w*perWorker + i
				v := strconv.Itoa(n)
				req, _ := http.NewRequest("GET", "http://"+addr+"/r/"+v, nil)
				req.Header.Set("X-Req", v)
				resp, e := getEcho(t, c, req)
				var problems []string
				if got := resp.Header.Get("X-Backend"); got != names[n%len(names)] {
					problems = append(problems, "X-Backend "+got)
				}
				if got := resp.Header.Get("X-Gray-Rule"); got != rules[n%len(rules)] {
					problems = append(problems, "X-Gray-Rule "+got)
				}
				if got := e.Header.Get("X-Gray-Tag"); got != v {
					problems = append(problems, "upstream X-Gray-Tag "+got)
				}
				if got, want := resp.Header.Get("Set-Cookie"), "gg="+v+"; Path=/"; (n%2 == 0) != strings.HasPrefix(got, want) {
					problems = append(problems, "Set-Cookie "+got)
				}
				if len(problems) > 0 {
					errs <- fmt.Errorf("request %d: %s", n, strings.Join(problems, ", "))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// OnDone for the last responses runs after their bodies are written,
	// which may be just after the client has read them.
	deadline := time.Now().Add(5 * time.Second)
	for doneCalls.Load() < workers*perWorker && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := doneCalls.Load(); n != workers*perWorker {
		t.Errorf("OnDone called %d times, want %d", n, workers*perWorker)
	}
	if n := doneBad.Load(); n > 0 {
		t.Errorf("%d OnDone calls saw a corrupted decision, first: %v", n, firstBad.Load())
	}
}
