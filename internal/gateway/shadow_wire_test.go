package gateway

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// jsonVersion is a backend answering like one version of a JSON service:
// {"id": <id>, "price": <price>, "ts": <random>} for GET /item?id=<id>.
// price is 10 × id, or what change returns for the id when it says so;
// ts is random in every answer, as a timestamp is. It records the
// requests it gets.
type jsonVersion struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []*http.Request
}

func newJSONVersion(t *testing.T, change func(id int) (int, bool)) *jsonVersion {
	v := &jsonVersion{}
	v.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		v.mu.Lock()
		v.seen = append(v.seen, r.Clone(r.Context()))
		v.mu.Unlock()
		id, _ := strconv.Atoi(r.URL.Query().Get("id"))
		price := 10 * id
		if change != nil {
			if p, ok := change(id); ok {
				price = p
			}
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%d,"price":%d,"ts":%d}`, id, price, rand.Int64())
	}))
	t.Cleanup(v.srv.Close)
	return v
}

func (v *jsonVersion) addr() string { return strings.TrimPrefix(v.srv.URL, "http://") }

func (v *jsonVersion) requests() []*http.Request {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.seen)
}

// waitRuleDiff polls GET /api/v1/rules/{key}/diff until done holds.
func (e *env) waitRuleDiff(key string, done func(map[string]any) bool) map[string]any {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, doc := e.api("GET", "/api/v1/rules/"+key+"/diff", nil)
		if code == 200 && done(doc) {
			return doc
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("GET /api/v1/rules/%s/diff = %d %v", key, code, doc)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestShadowDiffThroughTheGateway is issue 18's diff test through the
// data listener and the admin API: of 100 users' GETs, all served by
// stable, every one is also sent to the candidate and to a second stable
// instance. The candidate changes one JSON field (price) in 30% of its
// answers; every version's ts is random. GET /api/v1/rules/{key}/diff
// reports a regression on exactly body.price, at a raw rate of 0.30, and
// body.ts, which differs everywhere, is cancelled by the secondary.
func TestShadowDiffThroughTheGateway(t *testing.T) {
	stableA := newJSONVersion(t, nil)
	stableB := newJSONVersion(t, nil)
	cand := newJSONVersion(t, func(id int) (int, bool) { return 10*id + 1, id%10 < 3 })
	cfg := fmt.Sprintf(`
default_upstream: stable
upstreams:
  stable:   {instances: [{addr: "%s"}]}
  stable-b: {instances: [{addr: "%s"}]}
  candidate: {instances: [{addr: "%s"}]}
`, stableA.addr(), stableB.addr(), cand.addr())
	e := start(t, cfg, "")
	e.mustPut("shop_v2", map[string]any{"type": "gray", "gray_percent": 0, "targets": map[string]any{"gray": "candidate", "stable": "stable"},
		"mirror": map[string]any{"percent": 100, "diff": map[string]any{"secondary": "stable-b", "ignore": []string{"headers.date"}}}})
	const n = 100
	for i := range n {
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/item?id=%d", e.data, i), nil)
		req.Header.Set("X-User-Id", "user-"+strconv.Itoa(i))
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf(`{"id":%d,"price":%d,`, i, 10*i); resp.StatusCode != 200 || !strings.HasPrefix(string(body), want) {
			t.Fatalf("GET /item?id=%d = %d %s, want stable's answer", i, resp.StatusCode, body)
		}
		if (i+1)%20 == 0 {
			// Well under the queue of 64: no copy is dropped however
			// slowly a loaded machine sends them.
			e.waitRuleDiff("shop_v2", func(d map[string]any) bool { return d["requests"] == float64(i+1) })
		}
	}
	doc := e.waitRuleDiff("shop_v2", func(d map[string]any) bool { return d["compared"] == float64(n) && d["noise_compared"] == float64(n) })
	if doc["requests"] != float64(n) || doc["status_mismatch"] != 0.0 {
		t.Errorf("diff = %v, want %d requests and no status mismatch", doc, n)
	}
	var regressions []string
	fields := map[string]map[string]any{}
	for _, f := range doc["fields"].([]any) {
		m := f.(map[string]any)
		fields[m["path"].(string)] = m
		if m["regression"] == true {
			regressions = append(regressions, m["path"].(string))
		}
	}
	if !slices.Equal(regressions, []string{"body.price"}) {
		t.Fatalf("regressions %v, want exactly [body.price]; fields %v", regressions, doc["fields"])
	}
	if p := fields["body.price"]; p["raw_rate"] != 0.3 || p["noise_rate"] != 0.0 || len(p["examples"].([]any)) == 0 {
		t.Errorf("body.price = %v, want raw_rate 0.3, noise_rate 0, examples", p)
	}
	if ts := fields["body.ts"]; ts == nil || ts["raw_rate"] != 1.0 || ts["noise_rate"] != 1.0 || ts["regression"] != false {
		t.Errorf("body.ts = %v, want raw and noise rates 1 and no regression", ts)
	}
	// The secondary and the candidate each got every copy, marked.
	for name, v := range map[string]*jsonVersion{"candidate": cand, "stable-b": stableB} {
		got := v.requests()
		if len(got) != n {
			t.Errorf("%s got %d copies, want %d", name, len(got), n)
			continue
		}
		for _, r := range got {
			if r.Header.Get("X-Gray-Mirror") != "1" || !strings.HasSuffix(hostOnly(r.Host), "-shadow") {
				t.Errorf("%s got Host %q X-Gray-Mirror %q, want the -shadow host and 1", name, r.Host, r.Header.Get("X-Gray-Mirror"))
				break
			}
		}
	}
	for _, r := range stableA.requests() {
		if r.Header.Get("X-Gray-Mirror") != "" || strings.Contains(r.Host, "-shadow") {
			t.Fatalf("the primary got Host %q X-Gray-Mirror %q", r.Host, r.Header.Get("X-Gray-Mirror"))
		}
	}
}

func hostOnly(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		return h[:i]
	}
	return h
}

// TestShadowMethodsAndAccounting: through the data listener, of a rule
// sending half its users to gray behind a breaker and mirroring the
// other half to the same gray pool with host_suffix "-canary": only the
// GETs are mirrored (POST is not, by default), with X-Gray-Mirror: 1 and
// the -canary host; gray fails every copy, yet the copies never reach
// the primary's accounting: the breaker stays closed (no gray user is
// degraded) and graygate_requests_total counts the client requests only
// (stable's unclaimed, gray's under the rule).
func TestShadowMethodsAndAccounting(t *testing.T) {
	stable := newJSONVersion(t, nil)
	var (
		mu     sync.Mutex
		copies []string // method host
	)
	gray := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Gray-Mirror") == "1" {
			mu.Lock()
			copies = append(copies, r.Method+" "+r.Host)
			mu.Unlock()
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "gray")
	}))
	t.Cleanup(gray.Close)
	cfg := fmt.Sprintf(`
default_upstream: stable
upstreams:
  stable: {instances: [{addr: "%s"}]}
  gray:   {instances: [{addr: "%s"}]}
`, stable.addr(), strings.TrimPrefix(gray.URL, "http://"))
	e := start(t, cfg, "")
	e.mustPut("canary", map[string]any{"type": "gray", "gray_percent": 50, "targets": map[string]any{"gray": "gray", "stable": "stable"},
		"breaker": map[string]any{"window": "30s", "min_requests": 5},
		"mirror":  map[string]any{"percent": 100, "host_suffix": "-canary"}})
	const users = 40
	stableGETs, grayServed := 0, 0
	for i := range users {
		for _, method := range []string{"GET", "POST"} {
			req, _ := http.NewRequest(method, e.data+"/item?id=1", strings.NewReader("x"))
			req.Host = "shop.test:8080"
			req.Header.Set("X-User-Id", "u"+strconv.Itoa(i))
			resp, err := e.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("X-Gray-Degraded") != "" {
				t.Fatalf("%s as u%d = %d degraded %q", method, i, resp.StatusCode, resp.Header.Get("X-Gray-Degraded"))
			}
			switch resp.Header.Get("X-Gray-Group") {
			case "gray":
				grayServed++
			default:
				if method == "GET" {
					stableGETs++
				}
			}
		}
		if i%10 == 9 { // paced under the queue: no copy is dropped
			want := stableGETs
			e.waitRuleDiff("canary", func(d map[string]any) bool { return d["requests"] == float64(want) })
		}
	}
	if stableGETs == 0 || grayServed == 0 {
		t.Fatalf("%d stable GETs, %d gray answers: want both", stableGETs, grayServed)
	}
	mu.Lock()
	got := slices.Clone(copies)
	mu.Unlock()
	if len(got) != stableGETs {
		t.Errorf("gray got %d copies, want one per stable GET (%d)", len(got), stableGETs)
	}
	for _, c := range got {
		if c != "GET shop.test-canary:8080" {
			t.Fatalf("a copy was %q, want GET to shop.test-canary:8080 (POST is not mirrored by default)", c)
		}
	}
	total := 0
	for _, l := range strings.Split(e.metricsText(), "\n") {
		if strings.HasPrefix(l, "graygate_requests_total{") {
			v, _ := strconv.Atoi(l[strings.LastIndexByte(l, ' ')+1:])
			total += v
		}
	}
	if total != 2*users {
		t.Errorf("graygate_requests_total = %d, want the %d client requests", total, 2*users)
	}
}

// TestShadowMethodInLowerCase: a rule's mirror.methods ["post"] mirrors
// the POSTs that reach the listener (which takes upper-case methods only),
// where taken as written it would have mirrored nothing.
func TestShadowMethodInLowerCase(t *testing.T) {
	stable := newJSONVersion(t, nil)
	var copies atomic.Int64
	gray := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Gray-Mirror") == "1" && r.Method == "POST" {
			copies.Add(1)
		}
		_, _ = io.WriteString(w, "gray")
	}))
	t.Cleanup(gray.Close)
	cfg := fmt.Sprintf(`
default_upstream: stable
upstreams:
  stable: {instances: [{addr: "%s"}]}
  gray:   {instances: [{addr: "%s"}]}
`, stable.addr(), strings.TrimPrefix(gray.URL, "http://"))
	e := start(t, cfg, "")
	e.mustPut("canary", map[string]any{"type": "gray", "gray_percent": 0, "targets": map[string]any{"gray": "gray", "stable": "stable"},
		"mirror": map[string]any{"percent": 100, "methods": []string{"post"}}})
	const posts = 5
	for i := range posts {
		req, _ := http.NewRequest("POST", e.data+"/item", strings.NewReader("x"))
		req.Header.Set("X-User-Id", "u"+strconv.Itoa(i))
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("POST as u%d = %d", i, resp.StatusCode)
		}
	}
	e.waitRuleDiff("canary", func(d map[string]any) bool { return d["requests"] == float64(posts) })
	if n := copies.Load(); n != posts {
		t.Errorf("gray got %d POST copies, want %d", n, posts)
	}
}
