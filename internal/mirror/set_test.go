package mirror

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/testport"
	"github.com/graygate/graygate/internal/upstream"
)

// poolOf returns a pool of one instance: the test server srv.
func poolOf(t testing.TB, name, url string, opts upstream.PoolOptions) *upstream.Pool {
	t.Helper()
	in, err := upstream.ParseAddress(url)
	if err != nil {
		t.Fatal(err)
	}
	p, err := upstream.NewPoolWith(name, []*upstream.Instance{in}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newSpec(t testing.TB, c SpecConfig) *Spec {
	t.Helper()
	if c.Rule == "" {
		c.Rule = "r"
	}
	if c.MaxBody == 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.Percent == 0 {
		c.Percent = 100
	}
	sp, err := NewSpec(c)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func newSet(t testing.TB, o Options) *Set {
	t.Helper()
	s := New(o)
	t.Cleanup(s.Close)
	return s
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func statsOf(s *Set, rule string) Stats {
	for _, st := range s.Stats() {
		if st.Rule == rule {
			return st
		}
	}
	return Stats{Rule: rule}
}

// primaryExchange sends a GET to the primary server, as the data plane
// would, and returns the copies the data plane hands to Set.Mirror.
func primaryExchange(t testing.TB, c *http.Client, base, uri string) (Request, Response) {
	t.Helper()
	req, err := http.NewRequest("GET", base+uri, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := Response{Status: resp.StatusCode, Body: body}
	for k, vs := range resp.Header {
		for _, v := range vs {
			out.Header = append(out.Header, Header{k, v})
		}
	}
	return Request{Method: "GET", URI: uri, Host: "api.example.com", Header: []Header{{"Accept", "application/json"}}}, out
}

// TestMirrorNeverWaits: with a mirror target that takes 2 s to answer,
// Mirror returns at once every time, the queue fills, and what does not
// fit is dropped and counted.
func TestMirrorNeverWaits(t *testing.T) {
	release := make(chan struct{})
	var got atomic.Int64
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		select {
		case <-time.After(2 * time.Second):
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, "late")
	}))
	defer slow.Close()
	defer close(release)
	s := newSet(t, Options{Workers: 2, Queue: 4, Timeout: 30 * time.Second})
	sp := newSpec(t, SpecConfig{Target: poolOf(t, "slow", slow.URL, upstream.PoolOptions{}), TargetName: "slow"})
	s.Sync([]*Spec{sp})

	const calls = 50
	accepted := 0
	var slowest time.Duration
	for i := range calls {
		start := time.Now()
		ok := s.Mirror(sp, Request{Method: "GET", URI: fmt.Sprintf("/x?i=%d", i), Host: "h"}, Response{Status: 200})
		if d := time.Since(start); d > slowest {
			slowest = d
		}
		if ok {
			accepted++
		}
	}
	// A call does nothing but a channel send: it never waits for the 2 s
	// target (the bound is generous for a loaded machine, and far below it).
	if slowest > 500*time.Millisecond {
		t.Errorf("the slowest Mirror call took %v while the target takes 2s", slowest)
	}
	if accepted > 4+2 || accepted < 4 {
		t.Errorf("%d copies accepted with 2 workers and a queue of 4", accepted)
	}
	if st := statsOf(s, "r"); st.Dropped != uint64(calls-accepted) {
		t.Errorf("dropped = %d, want %d", st.Dropped, calls-accepted)
	}
	eventually(t, "the workers to reach the target", func() bool { return got.Load() == 2 })
	if d, _ := s.Diff("r"); d.Dropped != uint64(calls-accepted) {
		t.Errorf("document dropped = %d", d.Dropped)
	}
}

// TestMirrorDeadTarget: a mirror target that refuses connections gives the
// caller nothing but a true (queued) or a false (dropped); every copy sent
// is counted as failed, and the target pool's passive health is untouched.
func TestMirrorDeadTarget(t *testing.T) {
	dead := "http://" + testport.Refused(t)
	h := upstream.NewHealth(upstream.HealthOptions{})
	defer h.Close()
	pool := poolOf(t, "dead", dead, upstream.PoolOptions{Health: h, Passive: &upstream.PassiveHealth{ConsecutiveFailures: 1}})
	s := newSet(t, Options{Workers: 2, Queue: 64})
	sp := newSpec(t, SpecConfig{Target: pool, TargetName: "dead", Diff: true})
	s.Sync([]*Spec{sp})
	accepted := 0
	for i := range 20 {
		if s.Mirror(sp, Request{Method: "GET", URI: fmt.Sprintf("/%d", i)}, Response{Status: 200}) {
			accepted++
		}
	}
	if accepted != 20 {
		t.Errorf("%d of 20 accepted into a queue of 64", accepted)
	}
	eventually(t, "every copy to fail", func() bool { return statsOf(s, "r").Failed == 20 })
	if st := statsOf(s, "r"); st.Sent != 0 || st.Dropped != 0 {
		t.Errorf("stats = %+v", st)
	}
	d, _ := s.Diff("r")
	if d.Requests != 20 || d.Failed != 20 || d.Compared != 0 || len(d.Fields) != 0 {
		t.Errorf("document = %+v", d)
	}
	if ps := pool.Stats(); ps.Ejected != 0 || ps.Healthy != 1 || ps.InFlight != 0 {
		t.Errorf("mirror failures touched the pool: %+v", ps)
	}
}

// TestMirroredRequest checks the copy the mirror target gets: with a
// Content-Length, or chunked when trailer fields follow its body (an
// empty one too).
func TestMirroredRequest(t *testing.T) {
	type seen struct {
		method, uri, host, mirror, foo, conn, body, accept, trailer string
		length                                                      int64
	}
	ch := make(chan seen, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- seen{r.Method, r.RequestURI, r.Host, r.Header.Get("X-Gray-Mirror"), r.Header.Get("X-Foo"), r.Header.Get("Keep-Alive"), string(b), r.Header.Get("Accept"),
			r.Trailer.Get("X-T"), r.ContentLength}
	}))
	defer srv.Close()
	s := newSet(t, Options{})
	sp := newSpec(t, SpecConfig{Target: poolOf(t, "c", srv.URL, upstream.PoolOptions{}), TargetName: "c",
		Methods: []string{"POST"}, MaxBody: 8, HostSuffix: "-shadow"})
	s.Sync([]*Spec{sp})
	req := Request{Method: "POST", URI: "/a%2Fb/c?x=1&y=%20", Host: "api.example.com:8443", Body: []byte("12345678"),
		Header: []Header{{"Accept", "text/plain"}, {"Connection", "X-Foo"}, {"X-Foo", "hop"}, {"Keep-Alive", "5"}, {"X-Gray-Mirror", "0"}, {"Content-Length", "99"}}}
	for _, tc := range []struct {
		body, trailer string
		length        int64
	}{{"12345678", "", 8}, {"1234", "t1", -1}, {"", "t2", -1}} {
		req.Body, req.Trailer = []byte(tc.body), nil
		if tc.trailer != "" {
			req.Trailer = []Header{{"X-T", tc.trailer}}
		}
		if !s.Mirror(sp, req, Response{Status: 200}) {
			t.Fatal("not queued")
		}
		var got seen
		select {
		case got = <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("the mirror target got nothing")
		}
		want := seen{"POST", "/a%2Fb/c?x=1&y=%20", "api.example.com-shadow:8443", "1", "", "", tc.body, "text/plain", tc.trailer, tc.length}
		if got != want {
			t.Errorf("mirror got %+v\nwant       %+v", got, want)
		}
	}
	if s.Mirror(sp, Request{Method: "POST", URI: "/", Body: []byte("123456789")}, Response{}) {
		t.Error("a body over max_body was mirrored")
	}
	if s.Mirror(sp, Request{Method: "POST", URI: "/", Body: []byte("1"), BodyTruncated: true}, Response{}) {
		t.Error("a truncated body was mirrored")
	}
	if st := statsOf(s, "r"); st.Dropped != 2 {
		t.Errorf("dropped = %d, want 2", st.Dropped)
	}
}

func TestShadowHost(t *testing.T) {
	tests := []struct{ host, suffix, want string }{
		{"api.example.com", "-shadow", "api.example.com-shadow"},
		{"api.example.com:8080", "-shadow", "api.example.com-shadow:8080"},
		{"127.0.0.1:80", "-dark", "127.0.0.1-dark:80"},
		{"[::1]:8080", "-shadow", "[::1]:8080"},
		{"api", "", "api"},
	}
	for _, tt := range tests {
		if got := ShadowHost(tt.host, tt.suffix); got != tt.want {
			t.Errorf("ShadowHost(%q, %q) = %q, want %q", tt.host, tt.suffix, got, tt.want)
		}
	}
}

// version is a test service: it answers /item?n=N with a JSON document in
// which items[2].price changes when changes(n), and ts is random on every
// answer.
func version(t testing.TB, name string, changes func(n int) bool) *httptest.Server {
	var seq atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n int
		_, _ = fmt.Sscanf(r.URL.Query().Get("n"), "%d", &n)
		price := 30
		if changes(n) {
			price = 31
		}
		doc := map[string]any{
			"id": n, "name": "item", "version": "same",
			"items": []map[string]any{{"price": 10}, {"price": 20}, {"price": price}},
			"ts":    fmt.Sprintf("%s-%d-%d", name, time.Now().UnixNano(), seq.Add(1)),
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Served-By", "stable") // the same everywhere
		_ = json.NewEncoder(w).Encode(doc)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestDiffRegressionAndNoise: a candidate that changes one JSON field in
// 30% of answers is reported as a regression on exactly that field; a
// field that is random in every version (a timestamp) is cancelled by the
// secondary and not reported; without a secondary it would be.
func TestDiffRegressionAndNoise(t *testing.T) {
	never := func(int) bool { return false }
	primary := version(t, "primary", never)
	secondary := version(t, "secondary", never)
	candidate := version(t, "candidate", func(n int) bool { return n%10 < 3 })
	s := newSet(t, Options{Workers: 4, Queue: 256})
	ign := []string{"headers.date"}
	cand := poolOf(t, "candidate", candidate.URL, upstream.PoolOptions{})
	withNoise := newSpec(t, SpecConfig{Rule: "with_secondary", Target: cand, TargetName: "candidate",
		Secondary: poolOf(t, "secondary", secondary.URL, upstream.PoolOptions{}), SecondaryName: "secondary", Diff: true, Ignore: ign})
	noNoise := newSpec(t, SpecConfig{Rule: "without_secondary", Target: cand, TargetName: "candidate", Diff: true, Ignore: ign})
	s.Sync([]*Spec{withNoise, noNoise})

	c := primary.Client()
	const n = 100
	for i := range n {
		req, resp := primaryExchange(t, c, primary.URL, fmt.Sprintf("/item?n=%d", i))
		for _, sp := range []*Spec{withNoise, noNoise} {
			for !s.Mirror(sp, req, resp) { // the queue holds them all; a drop would be a bug here
				t.Fatalf("copy %d for %s dropped", i, sp.Rule)
			}
		}
	}
	eventually(t, "every answer to be compared", func() bool {
		a, _ := s.Diff("with_secondary")
		b, _ := s.Diff("without_secondary")
		return a.Compared == n && a.NoiseCompared == n && b.Compared == n
	})
	d, ok := s.Diff("with_secondary")
	if !ok {
		t.Fatal("no document")
	}
	if d.Requests != n || d.StatusMismatch != 0 || d.Failed != 0 || d.Secondary != "secondary" || !d.Diff {
		t.Errorf("document = %+v", d)
	}
	fields := map[string]Field{}
	var regressions []string
	for _, f := range d.Fields {
		fields[f.Path] = f
		if f.Regression {
			regressions = append(regressions, f.Path)
		}
	}
	if !slices.Equal(regressions, []string{"body.items[2].price"}) {
		t.Errorf("regressions = %v, want exactly [body.items[2].price]; fields %+v", regressions, d.Fields)
	}
	p := fields["body.items[2].price"]
	if p.RawRate != 0.3 || p.NoiseRate != 0 || p.Raw != 30 || len(p.Examples) != 3 {
		t.Errorf("price field = %+v", p)
	}
	if ex := p.Examples[0]; ex.Primary != "30" || ex.Candidate != "31" || !strings.HasPrefix(ex.Request, "GET /item?n=") {
		t.Errorf("example = %+v", ex)
	}
	ts := fields["body.ts"]
	if ts.RawRate != 1 || ts.NoiseRate != 1 || ts.Regression {
		t.Errorf("ts field = %+v: the secondary should cancel it", ts)
	}
	if _, ok := fields["headers.date"]; ok {
		t.Error("an ignored header is reported")
	}
	if len(d.Fields) != 2 {
		t.Errorf("fields = %+v, want price and ts only", d.Fields)
	}
	if d.Fields[0].Path != "body.items[2].price" {
		t.Errorf("the regression is not listed first: %+v", d.Fields)
	}

	b, _ := s.Diff("without_secondary")
	var without []string
	for _, f := range b.Fields {
		if f.Regression {
			without = append(without, f.Path)
		}
	}
	if !slices.Equal(without, []string{"body.ts", "body.items[2].price"}) {
		t.Errorf("without a secondary the regressions are %v, want the timestamp too", without)
	}
}

// TestSyncKeepsState: a reload with the same mirror keeps its statistics,
// a changed target starts them over, and a removed mirror drops copies of
// the specs of older snapshots.
func TestSyncKeepsState(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	s := newSet(t, Options{})
	pool := poolOf(t, "c", srv.URL, upstream.PoolOptions{})
	v1 := newSpec(t, SpecConfig{Rule: "k", Target: pool, TargetName: "c", Diff: true})
	s.Sync([]*Spec{v1})
	s.Mirror(v1, Request{Method: "GET", URI: "/"}, Response{Status: 200})
	eventually(t, "one comparison", func() bool { d, _ := s.Diff("k"); return d.Compared == 1 })

	v2 := newSpec(t, SpecConfig{Rule: "k", Target: pool, TargetName: "c", Diff: true, Percent: 5}) // same key
	s.Sync([]*Spec{v2})
	if d, _ := s.Diff("k"); d.Compared != 1 {
		t.Errorf("a reload with the same mirror lost its statistics: %+v", d)
	}
	if !s.Mirror(v1, Request{Method: "GET", URI: "/"}, Response{Status: 200}) {
		t.Error("a spec of the previous snapshot with the same key is dropped")
	}
	eventually(t, "two comparisons", func() bool { d, _ := s.Diff("k"); return d.Compared == 2 })

	v3 := newSpec(t, SpecConfig{Rule: "k", Target: pool, TargetName: "127.0.0.1:1", Diff: true})
	s.Sync([]*Spec{v3})
	if d, _ := s.Diff("k"); d.Compared != 0 || d.Target != "127.0.0.1:1" {
		t.Errorf("a new target kept the old statistics: %+v", d)
	}
	if s.Mirror(v1, Request{Method: "GET", URI: "/"}, Response{Status: 200}) {
		t.Error("a spec whose mirror was replaced is still mirrored")
	}
	s.Sync(nil)
	if _, ok := s.Diff("k"); ok {
		t.Error("a removed mirror still has a document")
	}
	if s.Mirror(v3, Request{Method: "GET", URI: "/"}, Response{Status: 200}) {
		t.Error("a removed mirror still mirrors")
	}
}

// TestFieldCap: the number of tracked fields per mirror is bounded.
func TestFieldCap(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		doc := map[string]int{}
		for i := range 50 {
			doc[fmt.Sprintf("f%02d", i)] = 1
		}
		_ = json.NewEncoder(w).Encode(doc)
	}))
	defer srv.Close()
	s := newSet(t, Options{MaxFields: 10, MaxExamples: 1, ExampleBytes: 4})
	sp := newSpec(t, SpecConfig{Target: poolOf(t, "c", srv.URL, upstream.PoolOptions{}), TargetName: "c", Diff: true, Ignore: []string{"headers"}})
	s.Sync([]*Spec{sp})
	primary := Response{Status: 200, Header: []Header{{"Content-Type", "application/json"}}, Body: []byte(`{"a_long":"` + strings.Repeat("x", 100) + `"}`)}
	for range 3 {
		s.Mirror(sp, Request{Method: "GET", URI: "/"}, primary)
	}
	eventually(t, "three comparisons", func() bool { d, _ := s.Diff("r"); return d.Compared == 3 })
	d, _ := s.Diff("r")
	if len(d.Fields) != 10 || d.UntrackedDifferences != 3*51-30 {
		t.Errorf("%d fields tracked, %d untracked differences", len(d.Fields), d.UntrackedDifferences)
	}
	for _, f := range d.Fields {
		if len(f.Examples) != 1 {
			t.Errorf("examples of %s: %+v", f.Path, f.Examples)
		}
		if f.Path == "body.a_long" && (f.Examples[0].Primary != `"xxx…` || f.Examples[0].Candidate != "(absent)") {
			t.Errorf("a long value is not cut: %+v", f.Examples[0])
		}
	}
}

// TestCloseStopsWorkers: Close cancels the exchanges in hand and returns.
func TestCloseStopsWorkers(t *testing.T) {
	var wg sync.WaitGroup
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(block)
	s := New(Options{Workers: 1, Timeout: time.Minute})
	sp := newSpec(t, SpecConfig{Target: poolOf(t, "c", srv.URL, upstream.PoolOptions{}), TargetName: "c"})
	s.Sync([]*Spec{sp})
	s.Mirror(sp, Request{Method: "GET", URI: "/"}, Response{})
	wg.Go(s.Close)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waits for a stalled mirror target")
	}
	if s.Mirror(sp, Request{Method: "GET", URI: "/"}, Response{}) {
		t.Error("Mirror queued after Close")
	}
}

func TestMethodsUpperCased(t *testing.T) {
	// The listeners take only upper-case methods: a rule's "get" means
	// GET, and taken as written it would mirror nothing.
	s, err := NewSpec(SpecConfig{Rule: "r", Target: &upstream.Pool{}, Percent: 100, Methods: []string{"get", "Post", "POST"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"GET", "POST"}; !slices.Equal(s.Methods, want) {
		t.Errorf("Methods = %q, want %q", s.Methods, want)
	}
	for _, m := range []string{"GET", "POST"} {
		if !s.Selects(m, "u1") {
			t.Errorf("Selects(%q) = false", m)
		}
	}
	if s.Selects("HEAD", "u1") {
		t.Error("Selects(HEAD) = true, not named")
	}
}
