package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/mirror"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/testport"
	"github.com/graygate/graygate/internal/testserve"
	"github.com/graygate/graygate/internal/upstream"
)

// seenReq is a request as a shadowBackend saw it.
type seenReq struct {
	method, uri, host string
	header, trailer   http.Header
	body              string
}

// shadowBackend answers like one version of a JSON service:
// {"v": version, "uri": ..., "body": ..., "pad": ...} with X-Version set.
// With ?pad=n the pad is n bytes long; with ?stream=1 the answer is sent
// in two flushed pieces (chunked). It speaks HTTP/1.1 and h2c, and
// reports every request it gets on the returned channel.
func shadowBackend(t testing.TB, version int) (*httptest.Server, <-chan seenReq, *atomic.Int64) {
	t.Helper()
	seen := make(chan seenReq, 256)
	var n atomic.Int64
	srv := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		body, _ := io.ReadAll(r.Body)
		select {
		case seen <- seenReq{method: r.Method, uri: r.RequestURI, host: r.Host, header: r.Header.Clone(), trailer: r.Trailer.Clone(), body: string(body)}:
		default:
		}
		pad, _ := strconv.Atoi(r.URL.Query().Get("pad"))
		doc := fmt.Sprintf(`{"v":%d,"uri":%q,"body":%q,"pad":%q}`, version, r.URL.RequestURI(), body, strings.Repeat("x", pad))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Version", strconv.Itoa(version))
		if r.URL.Query().Get("stream") == "" {
			w.Header().Set("Content-Length", strconv.Itoa(len(doc)))
			_, _ = io.WriteString(w, doc)
			return
		}
		_, _ = io.WriteString(w, doc[:len(doc)/2])
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, doc[len(doc)/2:])
	}))
	return srv, seen, &n
}

// newMirror compiles a mirror of rule to target, with diff, in a new set.
func newMirror(t testing.TB, rule string, target *upstream.Pool, methods []string, maxBody int64, opts mirror.Options) (*mirror.Set, *mirror.Spec) {
	t.Helper()
	set := mirror.New(opts)
	t.Cleanup(set.Close)
	sp, err := mirror.NewSpec(mirror.SpecConfig{Rule: rule, Target: target, TargetName: target.Name, Percent: 100,
		Methods: methods, MaxBody: maxBody, HostSuffix: mirror.DefaultHostSuffix, Diff: true, Ignore: []string{"headers.date"}})
	if err != nil {
		t.Fatal(err)
	}
	set.Sync([]*mirror.Spec{sp})
	return set, sp
}

// waitDiff polls the rule's diff until pred holds, for at most 10s.
func waitDiff(t testing.TB, set *mirror.Set, rule string, pred func(mirror.Document) bool) mirror.Document {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		doc, ok := set.Diff(rule)
		if !ok {
			t.Fatalf("no diff for rule %q", rule)
		}
		if pred(doc) {
			return doc
		}
		if time.Now().After(deadline) {
			t.Fatalf("diff of %q never got there: %+v", rule, doc)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func fieldPaths(doc mirror.Document) []string {
	var out []string
	for _, f := range doc.Fields {
		out = append(out, f.Path)
	}
	slices.Sort(out)
	return out
}

// clientFor returns the client for one of the two codecs.
func clientFor(t testing.TB, h2 bool) *http.Client {
	if h2 {
		return h2cClient(t)
	}
	return httpClient(t)
}

// TestMirrorThroughBothCodecs: a mirrored request reaches the mirror
// target as the primary sent it (request line, body, the gateway's
// X-Request-Id, X-Forwarded-For and baggage, and the trailer fields after
// a chunked body) with X-Gray-Mirror: 1 and the -shadow host, and its
// answer is diffed against the primary's, for an HTTP/1.1 and an HTTP/2
// client, to an http1 and an h2c pool, with an answer copied whole, one
// streamed in pieces, a HEAD, a POST, and a POST with a trailer field
// (which the copy lost: it went with a Content-Length). The client gets
// the primary's answer only.
func TestMirrorThroughBothCodecs(t *testing.T) {
	stable, stableSeen, _ := shadowBackend(t, 1)
	cand, candSeen, _ := shadowBackend(t, 2)
	tests := []struct {
		name, method, path, body string
		trailer                  string // X-T's value, sent after a chunked body
		wantFields               []string
	}{
		{"small answer", "GET", "/item?id=1", "", "", []string{"body.v", "headers.x-version"}},
		{"streamed answer", "GET", "/item?id=2&pad=40000&stream=1", "", "", []string{"body.v", "headers.x-version"}},
		{"HEAD", "HEAD", "/item?id=3", "", "", []string{"headers.x-version"}},
		{"POST with a body", "POST", "/item?id=4", "hello", "", []string{"body.v", "headers.x-version"}},
		{"POST with a trailer field", "POST", "/item?id=5", "hello", "t1", []string{"body.v", "headers.x-version"}},
	}
	n := 0
	for _, h2 := range []bool{false, true} {
		for _, proto := range []upstream.Protocol{upstream.HTTP1, upstream.H2C} {
			for _, tt := range tests {
				n++
				rule := fmt.Sprintf("r%d", n)
				name := fmt.Sprintf("%s client/%s pool/%s", map[bool]string{false: "HTTP1.1", true: "HTTP2"}[h2], proto, tt.name)
				t.Run(name, func(t *testing.T) {
					target := poolOf("stable", addrOf(stable))
					target.Protocol = proto
					candPool := poolOf("candidate", addrOf(cand))
					set, sp := newMirror(t, rule, candPool, []string{"GET", "HEAD", "POST"}, 1<<10, mirror.Options{})
					rec := newDoneRecorder()
					d := staticDecider{Group: "default", Tag: "stable", Target: target, Mirror: sp}
					_, addr := startProxyWith(t, Options{Mirrors: set, OnDone: rec.onDone}, d, listener.Protocols{H2C: true})
					var body io.Reader
					if tt.body != "" {
						body = strings.NewReader(tt.body)
					}
					req, _ := http.NewRequest(tt.method, "http://"+addr+tt.path, body)
					if tt.trailer != "" {
						req.ContentLength, req.Trailer = -1, http.Header{"X-T": {tt.trailer}}
					}
					req.Host = "app.test"
					req.Header.Set("Baggage", "k=v,gray.tag=forged")
					resp, err := clientFor(t, h2).Do(req)
					if err != nil {
						t.Fatal(err)
					}
					got, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 || resp.Header.Get("X-Version") != "1" || (tt.method != "HEAD" && !bytes.HasPrefix(got, []byte(`{"v":1`))) {
						t.Fatalf("%s %s = %d %v %.40q: want stable's answer", tt.method, tt.path, resp.StatusCode, resp.Header, got)
					}
					primary, copyOf := <-stableSeen, <-candSeen
					for _, h := range []string{"X-Request-Id", "X-Forwarded-For", "X-Gray-Tag", "Baggage", "Via"} {
						if copyOf.header.Get(h) != primary.header.Get(h) || primary.header.Get(h) == "" {
							t.Errorf("the copy's %s = %q, the primary's %q", h, copyOf.header.Get(h), primary.header.Get(h))
						}
					}
					if primary.header.Get("Baggage") != "k=v,gray.tag=stable" {
						t.Errorf("upstream baggage %q, want the client's other members and gray.tag=stable", primary.header.Get("Baggage"))
					}
					if copyOf.method != tt.method || copyOf.uri != tt.path || copyOf.body != tt.body || copyOf.host != "app.test-shadow" ||
						copyOf.header.Get("X-Gray-Mirror") != "1" || primary.header.Get("X-Gray-Mirror") != "" {
						t.Errorf("the copy was %s %s Host %s body %q X-Gray-Mirror %q; want %s %s to app.test-shadow with %q and X-Gray-Mirror: 1",
							copyOf.method, copyOf.uri, copyOf.host, copyOf.body, copyOf.header.Get("X-Gray-Mirror"), tt.method, tt.path, tt.body)
					}
					if primary.trailer.Get("X-T") != tt.trailer || copyOf.trailer.Get("X-T") != tt.trailer {
						t.Errorf("trailer X-T: the primary got %q, the copy %q; want %q", primary.trailer.Get("X-T"), copyOf.trailer.Get("X-T"), tt.trailer)
					}
					doc := waitDiff(t, set, rule, func(d mirror.Document) bool { return d.Compared == 1 })
					if got := fieldPaths(doc); !slices.Equal(got, tt.wantFields) {
						t.Errorf("diff fields %v, want %v (%+v)", got, tt.wantFields, doc.Fields)
					}
					if c := rec.next(t, 5*time.Second); c.status != 200 || c.target != "stable" {
						t.Errorf("OnDone %+v", c)
					}
					select {
					case c := <-rec.ch:
						t.Errorf("a second OnDone call: %+v", c)
					default:
					}
				})
			}
		}
	}
}

// TestMirrorResponseBound: of a long answer only Options.MaxResponseBody
// is kept, and the bodies are then not compared, only the status and the
// headers; the client still gets all of it.
func TestMirrorResponseBound(t *testing.T) {
	stable, _, _ := shadowBackend(t, 1)
	cand, _, _ := shadowBackend(t, 2)
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "HTTP1.1", true: "HTTP2"}[h2], func(t *testing.T) {
			set, sp := newMirror(t, "bound", poolOf("candidate", addrOf(cand)), nil, 1<<10, mirror.Options{MaxResponseBody: 1 << 10})
			d := staticDecider{Group: "default", Target: poolOf("stable", addrOf(stable)), Mirror: sp}
			_, addr := startProxyWith(t, Options{Mirrors: set}, d, listener.Protocols{H2C: true})
			resp, err := clientFor(t, h2).Get("http://" + addr + "/item?pad=50000&stream=1")
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if len(got) < 50000 {
				t.Fatalf("the client got %d bytes", len(got))
			}
			doc := waitDiff(t, set, "bound", func(d mirror.Document) bool { return d.Compared == 1 })
			if got := fieldPaths(doc); !slices.Equal(got, []string{"headers.x-version"}) {
				t.Errorf("diff fields %v, want only headers.x-version: a truncated body is not compared", got)
			}
		})
	}
}

// TestMirrorSkipped: the cases where no copy goes out, and how the set
// counts them: a method the mirror does not allow is never selected (the
// router's part, see TestMirror in package router), a body over max_body
// is dropped and counted, and nothing is sent when the primary failed, its
// answer broke off, or mirroring is off.
func TestMirrorSkipped(t *testing.T) {
	stable, _, _ := shadowBackend(t, 1)
	cand, _, candN := shadowBackend(t, 2)
	// broken promises 100,000 bytes (too many to copy: the body is
	// streamed), sends 10 and closes the connection.
	broken := testserve.Conns(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n0123456789")
		}
	})
	dead := testport.Refused(t) // connections are refused, until the test ends
	tests := []struct {
		name        string
		target      string
		noSet       bool
		method      string
		body        string
		chunked     bool
		wantStatus  int
		wantDropped uint64
	}{
		{name: "body over max_body", target: addrOf(stable), method: "POST", body: "0123456789", wantStatus: 200, wantDropped: 1},
		{name: "chunked body over max_body", target: addrOf(stable), method: "POST", body: "0123456789", chunked: true, wantStatus: 200, wantDropped: 1},
		{name: "the primary is unreachable", target: dead, method: "GET", wantStatus: 502},
		{name: "the primary's answer broke off", target: broken, method: "GET", wantStatus: -1},
		{name: "mirroring off", target: addrOf(stable), noSet: true, method: "GET", wantStatus: 200},
	}
	for _, h2 := range []bool{false, true} {
		for i, tt := range tests {
			t.Run(fmt.Sprintf("%s/%s", map[bool]string{false: "HTTP1.1", true: "HTTP2"}[h2], tt.name), func(t *testing.T) {
				rule := fmt.Sprintf("skip%d", i)
				set, sp := newMirror(t, rule, poolOf("candidate", addrOf(cand)), []string{"GET", "POST"}, 4, mirror.Options{})
				opts := Options{Mirrors: set}
				if tt.noSet {
					opts.Mirrors = nil
				}
				rec := newDoneRecorder()
				opts.OnDone = rec.onDone
				_, addr := startProxyWith(t, opts, staticDecider{Group: "default", Target: poolOf("stable", tt.target), Mirror: sp}, listener.Protocols{H2C: true})
				before := candN.Load()
				var body io.Reader
				if tt.body != "" {
					body = strings.NewReader(tt.body)
					if tt.chunked {
						body = io.MultiReader(body) // unknown length: chunked, or no content-length on HTTP/2
					}
				}
				req, _ := http.NewRequest(tt.method, "http://"+addr+"/x", body)
				resp, err := clientFor(t, h2).Do(req)
				status := -1
				if err == nil {
					_, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					if rerr == nil {
						status = resp.StatusCode
					}
				}
				if status != tt.wantStatus {
					t.Fatalf("%s = %d (%v), want %d", tt.method, status, err, tt.wantStatus)
				}
				rec.next(t, 5*time.Second) // the request is finished: any copy has been handed over
				var st mirror.Stats
				for _, s := range set.Stats() {
					if s.Rule == rule {
						st = s
					}
				}
				if st.Dropped != tt.wantDropped || st.Sent != 0 || st.Failed != 0 {
					t.Errorf("mirror stats %+v, want %d dropped and nothing sent", st, tt.wantDropped)
				}
				// Nothing reaches the candidate (given time to arrive).
				time.Sleep(50 * time.Millisecond)
				if n := candN.Load() - before; n != 0 {
					t.Errorf("the candidate got %d copies", n)
				}
			})
		}
	}
}

// TestMirrorWebSocketNever: a WebSocket handshake whose decision asks for
// a mirror is tunnelled as usual and never copied.
func TestMirrorWebSocketNever(t *testing.T) {
	backend, _ := wsEchoBackend(t, "stable")
	cand, _, candN := shadowBackend(t, 2)
	set, sp := newMirror(t, "ws", poolOf("candidate", addrOf(cand)), nil, 1<<10, mirror.Options{})
	rec := newDoneRecorder()
	_, addr := startProxy(t, Options{Mirrors: set, OnDone: rec.onDone}, staticDecider{Group: "default", Target: poolOf("stable", backend), Mirror: sp})
	c, _, err := dialWS(t, "ws://"+addr+"/chat", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteMessage(1, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := c.ReadMessage(); err != nil || string(msg) != "stable:hi" {
		t.Fatalf("echo %q %v", msg, err)
	}
	c.Close()
	rec.next(t, 5*time.Second)
	for _, s := range set.Stats() {
		if s.Sent+s.Dropped+s.Failed != 0 {
			t.Errorf("mirror stats %+v for a WebSocket", s)
		}
	}
	if n := candN.Load(); n != 0 {
		t.Errorf("the candidate got %d requests", n)
	}
}

// TestMirrorNotThePrimary: half the users go to gray, guarded by a
// breaker, and the other half to stable, mirrored to the same gray pool,
// which fails every copy. The copies never reach the primary's
// accounting: OnDone and the access log see each client request once,
// the gray breaker records the gray requests only (none failed), and
// gray's instance, with passive health on, is not ejected by the failing
// copies.
func TestMirrorNotThePrimary(t *testing.T) {
	stable, _, _ := shadowBackend(t, 1)
	grayBackend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Gray-Mirror") == "1" {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "gray")
	}))
	t.Cleanup(grayBackend.Close)
	gray, err := upstream.NewPoolWith("gray", []*upstream.Instance{{Addr: addrOf(grayBackend)}},
		upstream.PoolOptions{Passive: &upstream.PassiveHealth{ConsecutiveFailures: 2}})
	if err != nil {
		t.Fatal(err)
	}
	stablePool := poolOf("stable", addrOf(stable))
	set, sp := newMirror(t, "canary", gray, nil, 1<<10, mirror.Options{})
	br, err := breaker.New(breaker.Config{}, breaker.Options{Name: "canary"})
	if err != nil {
		t.Fatal(err)
	}
	d := deciderFunc(func(r attr.Request) router.Decision {
		uid, _ := r.Header("X-User-Id")
		if n, _ := strconv.Atoi(uid); n%2 == 0 {
			return router.Decision{Rule: "canary", Group: "gray", Tag: "gray", Target: gray, Stable: stablePool, StableTag: "stable", Breaker: br}
		}
		return router.Decision{Group: "default", Target: stablePool, Mirror: sp}
	})
	var log syncBuffer
	rec := newDoneRecorder()
	_, addr := startProxyWith(t, Options{Mirrors: set, OnDone: rec.onDone, AccessLog: &log, AccessLogFlushInterval: 10 * time.Millisecond},
		d, listener.Protocols{H2C: true})
	const n = 20
	for i := range n {
		req, _ := http.NewRequest("GET", "http://"+addr+"/p", nil)
		req.Header.Set("X-User-Id", strconv.Itoa(i))
		resp, err := clientFor(t, i/2%2 == 1).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	byTarget := map[string]int{}
	for range n {
		c := rec.next(t, 5*time.Second)
		if c.status != 200 {
			t.Errorf("OnDone %+v", c)
		}
		byTarget[c.target]++
	}
	if byTarget["gray"] != n/2 || byTarget["stable"] != n/2 {
		t.Errorf("OnDone by target %v, want %d each", byTarget, n/2)
	}
	doc := waitDiff(t, set, "canary", func(d mirror.Document) bool { return d.Compared == n/2 })
	if doc.StatusMismatch != n/2 {
		t.Errorf("status mismatches %d, want every copy's 500", doc.StatusMismatch)
	}
	select {
	case c := <-rec.ch:
		t.Errorf("OnDone saw a copy: %+v", c)
	default:
	}
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(log.String(), "\n") < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if lines := strings.Count(log.String(), "\n"); lines != n || strings.Contains(log.String(), `"status":500`) {
		t.Errorf("access log has %d lines (want %d, none for copies):\n%s", lines, n, log.String())
	}
	if w := br.Snapshot().Window; w.Requests != n/2 || w.Failures != 0 {
		t.Errorf("the gray breaker's window %+v, want the %d gray requests and no failure", w, n/2)
	}
	if st := gray.Stats(); st.Ejected != 0 || st.Healthy != 1 || st.InFlight != 0 {
		t.Errorf("the mirror target's pool %+v: copies fed passive health", st)
	}
}

// mirrorStats returns the set's totals for rule.
func mirrorStats(set *mirror.Set, rule string) mirror.Stats {
	for _, s := range set.Stats() {
		if s.Rule == rule {
			return s
		}
	}
	return mirror.Stats{Rule: rule}
}

// TestMirrorSlowTargetCostsNothing: a mirror target that sleeps 2 s
// before every answer adds nothing to the primary's latency. 64 requests,
// 8 at a time over HTTP/1.1 and HTTP/2, are all answered by stable well
// within the mirror's sleep (each under 1 s, on a loaded machine under
// -race), while the copies pile up on a queue of 4 behind one worker and
// the rest are dropped and counted. (The p99 comparison is
// BenchmarkMirrorSlowTarget.)
func TestMirrorSlowTargetCostsNothing(t *testing.T) {
	stable, _, _ := shadowBackend(t, 1)
	release := make(chan struct{})
	var slowN atomic.Int64
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		slowN.Add(1)
		select {
		case <-time.After(2 * time.Second):
		case <-release:
		}
		_, _ = io.WriteString(w, `{"v":2}`)
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) }) // runs before slow.Close
	set, sp := newMirror(t, "slow", poolOf("candidate", addrOf(slow)), nil, 1<<10, mirror.Options{Workers: 1, Queue: 4})
	_, addr := startProxyWith(t, Options{Mirrors: set}, staticDecider{Group: "default", Target: poolOf("stable", addrOf(stable)), Mirror: sp},
		listener.Protocols{H2C: true})
	clients := []*http.Client{httpClient(t), h2cClient(t)}
	const n, conc = 64, 8
	var (
		next    atomic.Int64
		worst   atomic.Int64
		failed  atomic.Int64
		answers sync.WaitGroup
	)
	for w := range conc {
		answers.Go(func() {
			c := clients[w%2]
			for i := next.Add(1); i <= n; i = next.Add(1) {
				start := time.Now()
				resp, err := c.Get(fmt.Sprintf("http://%s/item?id=%d", addr, i))
				if err != nil {
					failed.Add(1)
					continue
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				took := time.Since(start)
				if err != nil || resp.StatusCode != 200 || !bytes.HasPrefix(body, []byte(`{"v":1`)) {
					failed.Add(1)
				}
				for {
					old := worst.Load()
					if int64(took) <= old || worst.CompareAndSwap(old, int64(took)) {
						break
					}
				}
			}
		})
	}
	answers.Wait()
	if f := failed.Load(); f != 0 {
		t.Fatalf("%d of %d primary requests failed", f, n)
	}
	if w := time.Duration(worst.Load()); w >= time.Second {
		t.Errorf("the slowest primary answer took %v: the mirror's 2 s sleep leaked into the primary", w)
	}
	// At most one copy is in the worker's hands and four queued: the rest
	// were dropped, and counted, at once.
	st := mirrorStats(set, "slow")
	if st.Dropped < n-5-uint64(slowN.Load()) || st.Dropped == 0 {
		t.Errorf("mirror stats %+v: want the copies beyond the queue dropped", st)
	}
	deadline := time.Now().Add(10 * time.Second)
	for slowN.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no copy ever reached the slow mirror")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMirrorDeadTargetFailsNothing: with a mirror target that refuses
// every connection, 60 primary requests over HTTP/1.1 and HTTP/2 all get
// stable's answer (0 failed), and the copies are counted as failed.
func TestMirrorDeadTargetFailsNothing(t *testing.T) {
	stable, _, _ := shadowBackend(t, 1)
	dead := testport.Refused(t)
	set, sp := newMirror(t, "dead", poolOf("candidate", dead), nil, 1<<10, mirror.Options{})
	_, addr := startProxyWith(t, Options{Mirrors: set}, staticDecider{Group: "default", Target: poolOf("stable", addrOf(stable)), Mirror: sp},
		listener.Protocols{H2C: true})
	clients := []*http.Client{httpClient(t), h2cClient(t)}
	const n = 60
	failed := 0
	for i := range n {
		resp, err := clients[i%2].Get(fmt.Sprintf("http://%s/item?id=%d", addr, i))
		if err != nil {
			failed++
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || !bytes.HasPrefix(body, []byte(`{"v":1`)) {
			failed++
		}
	}
	if failed != 0 {
		t.Fatalf("%d of %d primary requests failed with a dead mirror", failed, n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := mirrorStats(set, "dead")
		if st.Failed+st.Dropped == n {
			if st.Sent != 0 || st.Failed == 0 {
				t.Errorf("mirror stats %+v: want the copies failed", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mirror stats %+v: want %d copies failed or dropped", st, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMirrorNoCopiesOfCopies: a request that is itself a copy (it carries
// X-Gray-Mirror: 1) is served but never mirrored again, over HTTP/1.1 and
// HTTP/2, so a mirror pointed back at a graygate cannot loop.
func TestMirrorNoCopiesOfCopies(t *testing.T) {
	stable, _, _ := shadowBackend(t, 1)
	cand, _, candN := shadowBackend(t, 2)
	set, sp := newMirror(t, "loop", poolOf("candidate", addrOf(cand)), nil, 1<<10, mirror.Options{})
	rec := newDoneRecorder()
	_, addr := startProxyWith(t, Options{Mirrors: set, OnDone: rec.onDone}, staticDecider{Group: "default", Target: poolOf("stable", addrOf(stable)), Mirror: sp},
		listener.Protocols{H2C: true})
	for _, h2 := range []bool{false, true} {
		for _, copied := range []bool{true, false} {
			req, _ := http.NewRequest("GET", "http://"+addr+"/item", nil)
			if copied {
				req.Header.Set("X-Gray-Mirror", "1")
			}
			resp, err := clientFor(t, h2).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			rec.next(t, 5*time.Second)
		}
	}
	// Only the two requests without the marker were copied.
	waitDiff(t, set, "loop", func(d mirror.Document) bool { return d.Requests == 2 })
	if st := mirrorStats(set, "loop"); st.Sent != 2 || st.Dropped != 0 || candN.Load() != 2 {
		t.Errorf("mirror stats %+v, candidate got %d: want the 2 unmarked requests copied", st, candN.Load())
	}
}

// TestMirrorToHTTP10Target: a copy with trailer fields goes chunked, so
// that its trailer section can follow the body; to a mirror instance
// whose last answer came over HTTP/1.0, which may not read chunked (RFC
// 9112 section 6.1), it goes with its length and without the fields, as
// the primary's request does (holdForHTTP10), and chunked again once the
// instance answers over HTTP/1.1. Before, every such copy went chunked.
// The target is a raw server that answers in the version it is set to.
func TestMirrorToHTTP10Target(t *testing.T) {
	stable, _, _ := shadowBackend(t, 1)
	type copySeen struct {
		te      []string
		length  int64
		trailer string
		body    string
	}
	seen := make(chan copySeen, 8)
	var answer10 atomic.Bool
	answer10.Store(true)
	ln := listenLoopback(t)
	testserve.On(t, ln, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			b, err := io.ReadAll(req.Body)
			if err != nil {
				return
			}
			seen <- copySeen{req.TransferEncoding, req.ContentLength, req.Trailer.Get("X-T"), string(b)}
			doc := `{"v":2}`
			if answer10.Load() {
				_, _ = fmt.Fprintf(c, "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nX-Version: 2\r\nContent-Length: %d\r\n\r\n%s", len(doc), doc)
				return
			}
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Version: 2\r\nContent-Length: %d\r\n\r\n%s", len(doc), doc)
		}
	})
	set, sp := newMirror(t, "old", poolOf("candidate", ln.Addr().String()), []string{"POST"}, 1<<10, mirror.Options{})
	_, addr := startProxyWith(t, Options{Mirrors: set}, staticDecider{Group: "default", Target: poolOf("stable", addrOf(stable)), Mirror: sp},
		listener.Protocols{})
	client := httpClient(t)
	chunked := copySeen{te: []string{"chunked"}, length: -1, trailer: "t", body: "hello"}
	counted := copySeen{length: 5, body: "hello"}
	for i, step := range []struct {
		http11 bool // the target answers this copy over HTTP/1.1
		want   copySeen
	}{
		{false, chunked}, // not heard from yet
		{false, counted},
		{true, counted},
		{true, chunked},
	} {
		answer10.Store(!step.http11)
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/item", strings.NewReader("hello"))
		req.ContentLength, req.Trailer = -1, http.Header{"X-T": {"t"}}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("copy %d: the primary answered %d", i+1, resp.StatusCode)
		}
		select {
		case got := <-seen:
			if !slices.Equal(got.te, step.want.te) || got.length != step.want.length || got.trailer != step.want.trailer || got.body != step.want.body {
				t.Errorf("copy %d: the target got %+v, want %+v", i+1, got, step.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("copy %d never reached the mirror target", i+1)
		}
		// The answer is read, and its version noted, before the diff
		// counts it.
		waitDiff(t, set, "old", func(d mirror.Document) bool { return d.Compared == uint64(i+1) })
	}
}
