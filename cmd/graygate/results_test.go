package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestResultsCommandAndKill9 runs `graygate serve` with an experiment,
// sends its users through the data plane, prints the results with
// `graygate results`, kills the gateway with SIGKILL and starts it again
// on the same data dir: every unit and conversion flushed before the kill
// is still counted, and nothing twice.
func TestResultsCommandAndKill9(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "graygate.yaml")
	yaml := fmt.Sprintf(`
default_upstream: ga
upstreams:
  ga: {instances: [{addr: %q}]}
  gb: {instances: [{addr: %q}]}
experiments: {flush_interval: 200ms}
rules:
  - key: checkout
    type: ab
    experiment_id: exp_cli
    groups: [{name: A, weight: 50, target: ga}, {name: B, weight: 50, target: gb}]
    metrics: [{name: purchase, type: binomial, match: {method: POST, path_prefix: /api/order, status: 2xx}}]
`, backend(t, "A"), backend(t, "B"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	p := startServe(t, "--config", cfg, "--data-dir", data)
	env := []string{"GRAYGATE_ADMIN=" + p.admin, "GRAYGATE_ADMIN_TOKEN=tok"}
	client := &http.Client{Timeout: 10 * time.Second}
	send := func(method, path, uid string) {
		req, _ := http.NewRequest(method, "http://"+p.data+path, nil)
		req.Header.Set("X-User-Id", uid)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d", method, path, resp.StatusCode)
		}
	}
	for i := range 300 {
		send("GET", "/shop/", "cli-"+strconv.Itoa(i))
		if i%5 == 0 {
			send("POST", "/api/order", "cli-"+strconv.Itoa(i))
		}
	}
	type counts struct{ units, purchases int64 }
	read := func() (counts, bool) {
		req, _ := http.NewRequest("GET", "http://"+p.admin+"/api/v1/experiments/checkout/results", nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := client.Do(req)
		if err != nil {
			return counts{}, false
		}
		defer resp.Body.Close()
		var r struct {
			Groups []struct {
				Units   int64
				Metrics map[string]struct{ Count int64 }
			}
		}
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&r) != nil {
			return counts{}, false
		}
		var c counts
		for _, g := range r.Groups {
			c.units += g.Units
			c.purchases += g.Metrics["purchase"].Count
		}
		return c, true
	}
	deadline := time.Now().Add(20 * time.Second)
	for c, _ := read(); c != (counts{300, 60}); c, _ = read() {
		if time.Now().After(deadline) {
			t.Fatalf("results never reached 300 units and 60 purchases: %+v", c)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, code := runCLI(t, env, "results", "checkout")
	if code != 0 {
		t.Fatalf("graygate results: %d\n%s", code, out)
	}
	t.Logf("graygate results checkout:\n%s", out)
	for _, want := range []string{"experiment exp_cli (rule checkout, version 1, control A, store file", "GROUP", "UNITS", "PURCHASE", "LIFT (95% CI)", "P-VALUE", "(control)", "SRM: ok (p = ", "; sequential p = "} {
		if !strings.Contains(out, want) {
			t.Errorf("graygate results lacks %q:\n%s", want, out)
		}
	}
	rows := 0
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 3 && (f[0] == "A" || f[0] == "B") {
			rows++
			if n, err := strconv.Atoi(f[2]); err != nil || n < 100 || n > 200 {
				t.Errorf("row %q: units %q", l, f[2])
			}
			if f[0] == "B" && !strings.Contains(l, "%") {
				t.Errorf("row B has no lift: %q", l)
			}
		}
	}
	if rows != 2 {
		t.Errorf("%d group rows:\n%s", rows, out)
	}
	if out, code := runCLI(t, env, "results", "checkout", "-o", "json"); code != 0 || !json.Valid([]byte(out)) || !strings.Contains(out, `"srm"`) {
		t.Errorf("graygate results -o json: %d %s", code, out)
	}
	if out, code := runCLI(t, env, "results", "nope"); code != 1 || !strings.Contains(out, "no such experiment") || !strings.Contains(out, "404") {
		t.Errorf("graygate results nope: %d %s", code, out)
	}
	// 50 more users, then SIGKILL before a flush has to have happened.
	for i := 300; i < 350; i++ {
		send("GET", "/shop/", "cli-"+strconv.Itoa(i))
	}
	p.kill(syscall.SIGKILL)
	p = startServe(t, "--config", cfg, "--data-dir", data)
	c, ok := read()
	if !ok || c.units < 300 || c.units > 350 || c.purchases != 60 {
		t.Fatalf("after kill -9: %+v (%v), want 300 to 350 units and the 60 purchases", c, ok)
	}
	// The users come back: nobody is counted twice.
	for i := range 350 {
		send("GET", "/shop/", "cli-"+strconv.Itoa(i))
	}
	deadline = time.Now().Add(20 * time.Second)
	for c, _ := read(); c != (counts{350, 60}); c, _ = read() {
		if time.Now().After(deadline) {
			t.Fatalf("after the users came back: %+v, want 350 units, 60 purchases", c)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
