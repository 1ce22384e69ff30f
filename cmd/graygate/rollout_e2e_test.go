package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/graygate/graygate/internal/store/etcdstore/etcdtest"
)

var apiClient = &http.Client{Timeout: 10 * time.Second}

// apiCall sends a request with the e2e token and decodes the JSON answer.
func apiCall(t *testing.T, method, admin, path, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+admin+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := apiClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rolloutStatus returns the stored rollout.status of key.
func rolloutStatus(t *testing.T, admin, key string) map[string]any {
	t.Helper()
	code, r := apiCall(t, "GET", admin, "/api/v1/rules/"+key, "")
	if code != 200 {
		return nil
	}
	ro, _ := r["rollout"].(map[string]any)
	st, _ := ro["status"].(map[string]any)
	return st
}

func historyOf(t *testing.T, admin, key string) []map[string]any {
	t.Helper()
	_, h := apiCall(t, "GET", admin, "/api/v1/rules/"+key+"/history", "")
	var out []map[string]any
	items, _ := h["history"].([]any)
	for _, it := range items {
		out = append(out, it.(map[string]any))
	}
	return out
}

func dataGet(addr, uid string) (string, error) {
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	req.Header.Set("X-User-Id", uid)
	resp, err := apiClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestRolloutKill9DuringPause kills `graygate serve` with SIGKILL in the
// middle of a timed pause: the restarted gateway resumes at the same step
// and the pause ends at the deadline it had, not a whole pause after the
// restart. Then a pause: {} waits for the CLI's promote, and
// `graygate rollout get --watch` follows it to completion.
func TestRolloutKill9DuringPause(t *testing.T) {
	dataDir := t.TempDir()
	gray, stable := backend(t, "gray"), backend(t, "stable")
	p := startServe(t, "--data-dir", dataDir, "--default-upstream", stable)
	body := fmt.Sprintf(`{"type":"gray","gray_percent":0,"targets":{"gray":%q,"stable":%q},"breaker":{"p99_latency":"30s"},
		"rollout":{"steps":[{"percent":5},{"pause":"12s"},{"percent":50},{"pause":{}},{"percent":100}]}}`, gray, stable)
	if code, out, err := put(p.admin, "canary", body); err != nil || code != 201 {
		t.Fatalf("PUT = %d %v %v", code, out, err)
	}
	var until string
	waitUntil(t, "the pause to have at most 8s left", 30*time.Second, func() bool {
		st := rolloutStatus(t, p.admin, "canary")
		u, _ := st["pause_until"].(string)
		d, err := time.Parse(time.RFC3339Nano, u)
		if st["step"] != 1.0 || err != nil {
			return false
		}
		until = u
		return time.Until(d) <= 8*time.Second
	})
	p.kill(syscall.SIGKILL)
	p = startServe(t, "--data-dir", dataDir, "--default-upstream", stable)
	st := rolloutStatus(t, p.admin, "canary")
	if st["step"] != 1.0 || st["state"] != "progressing" || st["pause_until"] != until {
		t.Fatalf("after kill -9: %v, want step 1 with pause_until %s", st, until)
	}
	env := []string{"GRAYGATE_ADMIN=" + p.admin, "GRAYGATE_ADMIN_TOKEN=tok"}
	out, code := runCLI(t, env, "rollout", "get", "canary")
	if code != 0 || !strings.Contains(out, "◌ progressing") || !strings.Contains(out, "►  1  pause 12s") || !strings.Contains(out, "✔  0  percent 5") {
		t.Errorf("rollout get = %d\n%s", code, out)
	}
	waitUntil(t, "the pause until promoted", 30*time.Second, func() bool {
		st := rolloutStatus(t, p.admin, "canary")
		return st["state"] == "paused" && st["step"] == 3.0
	})
	deadline, _ := time.Parse(time.RFC3339Nano, until)
	for _, h := range historyOf(t, p.admin, "canary") {
		if r, _ := h["reason"].(string); strings.Contains(r, "(pause 12s) done") {
			at, _ := time.Parse(time.RFC3339Nano, h["at"].(string))
			if at.Before(deadline) || at.After(deadline.Add(3*time.Second)) {
				t.Errorf("the pause ended at %v; its deadline was %v", at, deadline)
			}
		}
	}
	if b, err := dataGet(p.data, "someone"); err != nil || (b != "gray" && b != "stable") {
		t.Errorf("data plane: %q %v", b, err)
	}
	out, code = runCLI(t, env, "rollout", "resume", "canary")
	if code != 1 || !strings.Contains(out, "waits for promote") || !strings.Contains(out, "HTTP 409") {
		t.Errorf("rollout resume at a pause until promoted = %d %s", code, out)
	}
	out, code = runCLI(t, env, "rollout", "promote", "canary", "--reason", "ship it")
	if code != 0 || !strings.Contains(out, "rollout canary promoted") {
		t.Errorf("rollout promote = %d %s", code, out)
	}
	out, code = runCLI(t, env, "rollout", "get", "canary", "--watch", "--interval", "200ms")
	if code != 0 || !strings.Contains(out, ansiHome) || !strings.Contains(out, "✔ completed") || !strings.Contains(out, "✔  4  percent 100") {
		t.Errorf("rollout get --watch = %d\n%q", code, out)
	}
	if b, err := dataGet(p.data, "someone"); err != nil || b != "gray" {
		t.Errorf("at 100%%: %q %v", b, err)
	}
	var byRollout, byOperator int
	for _, h := range historyOf(t, p.admin, "canary") {
		switch h["by"] {
		case "rollout":
			byRollout++
		case "default":
			byOperator++
		}
	}
	if byRollout != 5 || byOperator != 2 { // start, 5%, pause done, 50%, 100%; the PUT and the promote
		t.Errorf("versions by the rollout %d, by the operator %d", byRollout, byOperator)
	}
}

// TestRolloutFleetTakeover runs three `graygate serve` on one real etcd.
// Exactly one drives the rollout; requests go only to the other two, so
// the analysis passes only if the driver sums the fleet's counters. The
// driver is killed with SIGKILL during a pause; another gateway takes
// over within its lease and finishes the rollout.
func TestRolloutFleetTakeover(t *testing.T) {
	srv := etcdtest.Start(t)
	gray, stable := backend(t, "gray"), backend(t, "stable")
	var gws []*proc
	for range 3 {
		gws = append(gws, startServe(t, "--store", srv.URL("/graygate"), "--data-dir", t.TempDir(), "--default-upstream", stable))
	}
	// Each measurement needs 20 gray requests. Under CI's load (other
	// packages' tests with -race beside it) the four client loops below
	// have sent as few as 13 gray requests a second, so the interval is
	// 3 s: a measurement is inconclusive only if the fleet is slower still.
	body := fmt.Sprintf(`{"type":"gray","gray_percent":0,"targets":{"gray":%q,"stable":%q},"breaker":{"p99_latency":"30s"},
		"rollout":{"steps":[{"pause":{}},{"percent":20},{"analysis":"a"},{"pause":"6s"},{"analysis":"a"},{"percent":100}],
		"analyses":{"a":{"interval":"3s","count":3,"inconclusive_limit":3,"checks":[{"metric":"error_rate","max":0.05,"min_requests":20}]}}}}`, gray, stable)
	if code, out, err := put(gws[0].admin, "canary", body); err != nil || code != 201 {
		t.Fatalf("PUT = %d %v %v", code, out, err)
	}
	driverOf := func(among []*proc) int {
		d := -1
		for i, g := range among {
			_, s := apiCall(t, "GET", g.admin, "/api/v1/status", "")
			ro, _ := s["rollouts"].(map[string]any)
			if ro["canary"] == "driving" {
				if d >= 0 {
					t.Fatalf("two gateways drive the rollout: %d and %d", d, i)
				}
				d = i
			}
		}
		return d
	}
	driver := -1
	waitUntil(t, "a driver", 30*time.Second, func() bool { driver = driverOf(gws); return driver >= 0 })
	var others []*proc
	for i, g := range gws {
		if i != driver {
			others = append(others, g)
		}
	}
	waitUntil(t, "the pause until promoted", 30*time.Second, func() bool {
		st := rolloutStatus(t, others[0].admin, "canary")
		return st["state"] == "paused" && st["step"] == 0.0
	})
	// Traffic only to the gateways that do not drive.
	var stopped atomic.Bool
	var wg sync.WaitGroup
	var sent atomic.Int64
	for w := range 4 {
		wg.Go(func() {
			for n := 0; !stopped.Load() && n < 200000; n++ {
				if _, err := dataGet(others[(w+n)%2].data, fmt.Sprintf("u-%d-%d-%d", w, n, rand.IntN(1<<30))); err == nil {
					sent.Add(1)
				}
			}
		})
	}
	defer func() { stopped.Store(true); wg.Wait() }()
	if code, out := apiCall(t, "POST", others[1].admin, "/api/v1/rules/canary/rollout/promote", `{}`); code != 200 {
		t.Fatalf("promote on a following gateway = %d %v", code, out)
	}
	waitUntil(t, "the first analysis to pass", 60*time.Second, func() bool {
		st := rolloutStatus(t, others[0].admin, "canary")
		if st["state"] == "aborted" || (st["state"] == "paused" && st["step"] != 0.0) {
			t.Fatalf("the rollout stopped: %v", st)
		}
		return st["step"] == 3.0
	})
	st := rolloutStatus(t, others[0].admin, "canary")
	var fleetRequests float64
	for _, m := range st["measurements"].([]any) {
		mm := m.(map[string]any)
		c := mm["checks"].([]any)[0].(map[string]any)
		if mm["result"] == "passed" {
			fleetRequests = max(fleetRequests, c["requests"].(float64))
		}
	}
	if cli := srv.Client(t); fleetRequests < 20 {
		resp, _ := cli.Get(context.Background(), "/graygate/fleet/", clientv3.WithPrefix())
		for _, kv := range resp.Kvs {
			t.Logf("etcd %s = %s", kv.Key, kv.Value)
		}
		t.Fatalf("the driver's passed measurements saw %v gray requests; the others served them all: %v", fleetRequests, st["measurements"])
	}
	gws[driver].kill(syscall.SIGKILL)
	next := -1
	waitUntil(t, "another gateway to take over", 30*time.Second, func() bool { next = driverOf(others); return next >= 0 })
	waitUntil(t, "the rollout to complete", 90*time.Second, func() bool {
		st := rolloutStatus(t, others[next].admin, "canary")
		if st["state"] == "aborted" || st["state"] == "paused" {
			t.Fatalf("the rollout stopped: %v", st)
		}
		return st["state"] == "completed"
	})
	stopped.Store(true)
	wg.Wait()
	for i, g := range others {
		waitUntil(t, "the 100% rule on every survivor", 10*time.Second, func() bool {
			b, err := dataGet(g.data, "after")
			return err == nil && b == "gray"
		})
		_, v := apiCall(t, "GET", g.admin, "/api/v1/rules/canary/rollout", "")
		if v["state"] != "completed" || v["percent"] != 100.0 {
			t.Errorf("survivor %d sees %v", i, v)
		}
	}
	var byRollout int
	for _, h := range historyOf(t, others[0].admin, "canary") {
		if h["by"] == "rollout" {
			byRollout++
		}
	}
	if byRollout < 6 {
		t.Errorf("%d versions by the rollout", byRollout)
	}
	t.Logf("%d requests through the two followers", sent.Load())
}
