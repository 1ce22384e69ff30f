package gateway

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRoutingMatchesReference PUTs seed-shaped rules (some crc32) and checks
// every answer against reference decisions computed by the test itself, for
// identities from headers, cookies and queries, including non-ASCII ids.
func TestRoutingMatchesReference(t *testing.T) {
	e := start(t, baseConfig, "")
	rules := []refRule{
		{Key: "gray_v2", Type: "gray", GrayPercent: pct(10), WhiteList: []string{"uid:10001", "uid:用户甲"},
			Conditions: &refCond{PathPrefix: []string{"/api/user/"}}, Targets: &refTgts{Gray: "gray", Stable: "stable"}},
		{Key: "legacy_gray", Type: "gray", Hash: "crc32", GrayPercent: pct(25),
			Conditions: &refCond{PathPrefix: []string{"/legacy/"}}, Targets: &refTgts{Gray: "gray", Stable: "stable"}},
		{Key: "fine_gray", Type: "gray", GrayPercent: pct(12.34),
			Conditions: &refCond{PathPrefix: []string{"/fine/"}}, Targets: &refTgts{Gray: "gray", Stable: "stable"}},
		{Key: "ab_experiment_1", Type: "ab", Experiment: "exp_user_center_202405",
			Groups: []refGrp{{Name: "A", Weight: 50, Target: "a"}, {Name: "B", Weight: 50, Target: "b"}}},
		{Key: "ab_legacy", Type: "ab", Hash: "crc32", Experiment: "exp_old", Priority: func() *int { p := 150; return &p }(),
			Conditions: &refCond{PathPrefix: []string{"/legacy/ab/"}},
			Groups:     []refGrp{{Name: "A", Weight: 30, Target: "a"}, {Name: "B", Weight: 70, Target: "b"}}},
	}
	for _, r := range rules {
		e.mustPut(r.Key, r)
	}
	paths := []string{"/api/user/profile", "/legacy/x", "/legacy/ab/y", "/fine/z", "/other"}
	users := []string{"10001", "用户甲", "ユーザー", "Ünïcødé"}
	for i := 0; i < 300; i++ {
		users = append(users, fmt.Sprint(i*7919))
	}
	groups := map[string]int{}
	for i, u := range users {
		path := paths[i%len(paths)]
		var a answer
		var err error
		switch i % 3 {
		case 0:
			a, err = e.get(path, "X-User-Id", u)
		case 1:
			a, err = e.get(path, "Cookie", "user_id="+urlEncode(u))
		case 2:
			a, err = e.get(path + "?user_id=" + urlEncode(u))
		}
		if err != nil {
			t.Fatal(err)
		}
		rk, g, be := refDecide(rules, u, path)
		if a.status != 200 || a.rule != rk || a.group != g || a.backend != be {
			t.Errorf("user %q path %s (via %d) = %d rule %q group %q backend %q, reference says rule %q group %q backend %q",
				u, path, i%3, a.status, a.rule, a.group, a.backend, rk, g, be)
		}
		groups[a.group]++
	}
	if groups["gray"] == 0 || groups["A"] == 0 || groups["B"] == 0 {
		t.Errorf("test did not exercise every group: %v", groups)
	}
}

func urlEncode(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// TestInvalidRulesKeepServing sends many kinds of invalid rules: each gets a
// 400 naming every bad field, and the rules that were serving keep serving.
func TestInvalidRulesKeepServing(t *testing.T) {
	e := start(t, baseConfig, "")
	e.mustPut("g", refRule{Key: "g", Type: "gray", GrayPercent: pct(100), Targets: &refTgts{Gray: "gray", Stable: "stable"}})
	tests := []struct {
		name, body string
		paths      []string
	}{
		{"weights", `{"type":"ab","experiment_id":"e","groups":[{"name":"A","weight":60,"target":"a"},{"name":"B","weight":60,"target":"b"}]}`, []string{"groups"}},
		{"percent", `{"type":"gray","gray_percent":101,"targets":{"gray":"gray","stable":"stable"}}`, []string{"gray_percent"}},
		{"several", `{"type":"gray","gray_percent":"ten","white_list":["bogus"],"targets":{"gray":"nowhere"},"extra":1}`, []string{"gray_percent", "extra"}},
		{"semantic several", `{"type":"gray","gray_percent":10,"white_list":["bogus"],"targets":{"gray":"nowhere"}}`, []string{"white_list[0]", "targets.stable"}},
		{"unknown upstream", `{"type":"gray","gray_percent":10,"targets":{"gray":"nowhere","stable":"stable"}}`, []string{"targets.gray"}},
		{"not json", `{"type":`, []string{""}},
		{"key mismatch", `{"key":"other","type":"gray","gray_percent":1,"targets":{"gray":"gray","stable":"stable"}}`, []string{"key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := e.api("PUT", "/api/v1/rules/g", tt.body)
			if code != 400 {
				t.Fatalf("PUT %s = %d %v, want 400", tt.body, code, out)
			}
			details, _ := out["details"].([]any)
			got := map[string]bool{}
			for _, d := range details {
				m := d.(map[string]any)
				got[m["path"].(string)] = true
				if m["message"] == "" {
					t.Errorf("empty message in %v", m)
				}
			}
			for _, p := range tt.paths {
				if !got[p] {
					t.Errorf("details %v lack path %q", details, p)
				}
			}
			a, err := e.get("/", "X-User-Id", "u1")
			if err != nil || a.group != "gray" || a.rule != "g" {
				t.Errorf("after invalid PUT, serving rule changed: %+v %v", a, err)
			}
		})
	}
	code, out := e.api("GET", "/api/v1/rules/g", nil)
	if code != 200 || out["version"].(float64) != 1 {
		t.Errorf("invalid PUTs changed the stored rule: %d %v", code, out)
	}
}

func TestAdminAuth(t *testing.T) {
	e := start(t, baseConfig+`
admin:
  tokens:
    - {name: viewer1, token: look, role: viewer}
`, "")
	for _, tc := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer wrong", 401}, {"Basic " + token, 401}, {"Bearer look", 200}, {"Bearer " + token, 200}} {
		req, _ := newReq("GET", e.admin+"/api/v1/rules", tc.auth, "")
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET rules with %q = %d, want %d", tc.auth, resp.StatusCode, tc.want)
		}
	}
	req, _ := newReq("PUT", e.admin+"/api/v1/rules/x", "Bearer look", `{"type":"gray","gray_percent":1,"targets":{"gray":"gray","stable":"stable"}}`)
	resp, _ := e.client.Do(req)
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("viewer PUT = %d, want 403", resp.StatusCode)
	}
	// Tokens are never read from the query string.
	req, _ = newReq("GET", e.admin+"/api/v1/rules?token="+token, "", "")
	resp, _ = e.client.Do(req)
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("query token = %d, want 401", resp.StatusCode)
	}
	resp, _ = e.client.Get(e.admin + "/healthz")
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("healthz = %d", resp.StatusCode)
	}
}

// TestHotUpdatesUnderLoad keeps a few hundred requests per second flowing
// for 30 s (5 s with -short) while 500 rule updates land. No request may
// fail, and each answer must equal the reference decision of a rule set
// that was live at some moment during that request.
func TestHotUpdatesUnderLoad(t *testing.T) {
	dur := 30 * time.Second
	if testing.Short() {
		dur = 5 * time.Second
	}
	e := start(t, baseConfig, "")
	type version struct {
		rules      []refRule
		start, end time.Time // the PUT that made it current was in flight between these
	}
	var mu sync.Mutex
	initial := []refRule{
		{Key: "canary", Type: "gray", GrayPercent: pct(10), WhiteList: []string{"uid:vip"}, Targets: &refTgts{Gray: "gray", Stable: "stable"}},
		{Key: "exp", Type: "ab", Experiment: "e1", Groups: []refGrp{{Name: "A", Weight: 50, Target: "a"}, {Name: "B", Weight: 50, Target: "b"}}},
	}
	for _, r := range initial {
		e.mustPut(r.Key, r)
	}
	versions := []version{{rules: initial}}
	current := func() []refRule { return append([]refRule(nil), versions[len(versions)-1].rules...) }

	var failures atomic.Int64
	var checked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			tick := time.NewTicker(10 * time.Millisecond) // 4 workers × 100/s
			defer tick.Stop()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				uid := fmt.Sprint(rng.IntN(5000))
				if rng.IntN(50) == 0 {
					uid = "vip"
				}
				t0 := time.Now()
				a, err := e.get("/api/x", "X-User-Id", uid)
				t1 := time.Now()
				if err != nil || a.status != 200 {
					failures.Add(1)
					t.Errorf("request failed during updates: %+v %v", a, err)
					continue
				}
				mu.Lock()
				ok := false
				var seen []string
				for i, v := range versions {
					// v was current from v.start (at the earliest) until the
					// next version's end (at the latest).
					if !v.start.IsZero() && v.start.After(t1) {
						continue
					}
					if i+1 < len(versions) && !versions[i+1].end.IsZero() && versions[i+1].end.Before(t0) {
						continue
					}
					rk, g, be := refDecide(v.rules, uid, "/api/x")
					seen = append(seen, rk+"/"+g+"/"+be)
					if a.rule == rk && a.group == g && a.backend == be {
						ok = true
						break
					}
				}
				mu.Unlock()
				if !ok {
					t.Errorf("user %s got %s/%s/%s, which no live rule set gives (%v)", uid, a.rule, a.group, a.backend, seen)
				}
				checked.Add(1)
			}
		}(w)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	interval := dur / 500
	for i := 0; i < 500; i++ {
		next := current()
		switch i % 5 {
		case 0, 1: // percent change
			next[0].GrayPercent = pct(float64(rng.IntN(10001)) / 100)
		case 2: // whitelist edit
			next[0].WhiteList = []string{"uid:vip", fmt.Sprint("uid:", rng.IntN(5000))}
		case 3: // create a rule in front
			p := 50
			next = append(next, refRule{Key: "front", Type: "gray", Priority: &p, GrayPercent: pct(30), Targets: &refTgts{Gray: "b", Stable: "stable"}})
		case 4: // delete it again
			for j, r := range next {
				if r.Key == "front" {
					next = append(next[:j], next[j+1:]...)
					break
				}
			}
		}
		var changed *refRule
		deleted := ""
		switch i % 5 {
		case 0, 1, 2:
			changed = &next[0]
		case 3:
			changed = &next[len(next)-1]
		case 4:
			deleted = "front"
		}
		t0 := time.Now()
		mu.Lock()
		versions = append(versions, version{rules: next, start: t0})
		mu.Unlock()
		if deleted != "" {
			code, out := e.api("DELETE", "/api/v1/rules/"+deleted, nil)
			if code != 200 {
				t.Fatalf("DELETE = %d %v", code, out)
			}
		} else {
			e.mustPut(changed.Key, *changed)
		}
		mu.Lock()
		versions[len(versions)-1].end = time.Now()
		mu.Unlock()
		if d := interval - time.Since(t0); d > 0 {
			time.Sleep(d)
		}
	}
	close(stop)
	wg.Wait()
	if failures.Load() > 0 {
		t.Fatalf("%d requests failed", failures.Load())
	}
	if n := checked.Load(); n < int64(dur.Seconds())*100 {
		t.Errorf("only %d requests checked in %v", n, dur)
	}
	t.Logf("%d requests checked across %d rule-set versions", checked.Load(), len(versions))
}

func newReq(method, url, auth, body string) (*http.Request, error) {
	var rd *strings.Reader
	if body != "" {
		rd = strings.NewReader(body)
	} else {
		rd = strings.NewReader("")
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return nil, err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	return req, nil
}
