package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// vectorDeadline bounds one case: writing it and reading every answer.
const vectorDeadline = 3 * time.Second

// vectorConcurrency is how many cases run at once. Most cases take a few
// milliseconds; the ones the gateway leaves unanswered take vectorDeadline,
// so they overlap.
const vectorConcurrency = 24

// never499Concurrency is how many half-closed exchanges run at once. Each
// holds only an idle connection while it waits for the gateway to close it,
// so many can wait together.
const never499Concurrency = 256

// vectorResult is what one exchange with the gateway showed.
type vectorResult struct {
	setupErr   error
	statuses   []int // final responses, in order
	readErr    error // why reading stopped before the expected responses
	closed     bool  // the gateway closed the connection after the last expected response
	afterClose []byte
	closeErr   error
	stopErr    error

	reqs      []upstreamRequest
	received  int64
	complete  int64
	upErrs    []string
	writeErr  error // writing the request; expected when the gateway refused early
	elapsedMS int64
}

// exchangeVector sends one case to a gateway of its own, in front of an
// upstream of its own, over a real TCP connection, and records what came
// back and what the upstream received.
func exchangeVector(c vectorCase) (res vectorResult) {
	start := time.Now()
	defer func() { res.elapsedMS = time.Since(start).Milliseconds() }()
	raw, err := c.bytes()
	if err != nil {
		res.setupErr = err
		return res
	}
	rec, err := throughGateway(Options{}, vectorDeadline, func(conn net.Conn) {
		// A write can fail when the gateway has already refused the
		// request and closed; the answer may still be there to read.
		_, res.writeErr = conn.Write(raw)
		w := c.Want
		n := w.responses()
		methods := requestMethods(raw)
		br := bufio.NewReader(conn)
		for i := range n {
			last := i == n-1
			method := http.MethodGet
			if i < len(methods) && (w.Forward || !last) {
				method = methods[i]
			}
			resp, err := readFinalResponse(br, method)
			if err != nil {
				res.readErr = err
				return
			}
			res.statuses = append(res.statuses, resp.StatusCode)
			_, berr := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if !wantStatusAt(w, i, resp.StatusCode) {
				return // the answers that follow would not be the ones the case is about
			}
			if berr != nil && !(last && !w.Forward) {
				// A rejection's body may be cut by the close that follows
				// it; any other body must be whole.
				res.readErr = fmt.Errorf("reading the body of response %d: %w", i+1, berr)
				return
			}
		}
		if !w.Forward || w.Close {
			res.closed, res.afterClose, res.closeErr = readUntilClosed(br)
		}
	})
	res.setupErr = err
	res.reqs, res.received, res.complete, res.upErrs, res.stopErr = rec.reqs, rec.received, rec.complete, rec.errs, rec.stopErr
	return res
}

// readUntilClosed reads what follows on the connection and reports whether
// it was closed (EOF or reset) with nothing more sent.
func readUntilClosed(br *bufio.Reader) (closed bool, extra []byte, err error) {
	buf := make([]byte, 512)
	for {
		n, err := br.Read(buf)
		if len(extra) < 512 {
			extra = append(extra, buf[:n]...)
		}
		if err != nil {
			closed := errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
			return closed && len(extra) == 0, extra, err
		}
	}
}

// wantStatusAt reports whether status is what the case expects as
// response i.
func wantStatusAt(w vectorWant, i, status int) bool {
	if w.Forward || i < w.responses()-1 {
		return status == http.StatusOK
	}
	return status == w.Status || slices.Contains(w.OrStatus, status)
}

// wantString describes the expected response i.
func wantString(w vectorWant, i int) string {
	if w.Forward || i < w.responses()-1 {
		return "200 from the upstream"
	}
	s := fmt.Sprint(w.Status)
	for _, o := range w.OrStatus {
		s += fmt.Sprintf(" or %d", o)
	}
	return s + " from the gateway"
}

// TestHTTP1Vectors sends every transcribed request vector through the real
// listener (see testdata/http1/README.md) and checks the gateway's answers,
// whether the request reached the upstream, what the upstream received, and
// that every rejection closes the connection.
func TestHTTP1Vectors(t *testing.T) {
	files := loadVectors(t)
	cases := allCases(files)
	results := make([]vectorResult, len(cases))
	runBounded(len(cases), vectorConcurrency, func(i int) { results[i] = exchangeVector(cases[i].vectorCase) })
	forEachCase(t, cases, func(t *testing.T, i int) { checkVectorResult(t, cases[i].vectorCase, results[i]) })
}

// fileCase is a case and the file it came from.
type fileCase struct {
	file string
	vectorCase
}

// allCases lists the cases of all files, files in name order, so that their
// exchanges can share one bounded pool.
func allCases(files map[string]vectorFile) []fileCase {
	var out []fileCase
	for _, name := range sortedKeys(files) {
		for _, c := range files[name].Cases {
			out = append(out, fileCase{file: name, vectorCase: c})
		}
	}
	return out
}

// forEachCase runs check as the subtest <file>/<case name> of every case.
func forEachCase(t *testing.T, cases []fileCase, check func(t *testing.T, i int)) {
	for start := 0; start < len(cases); {
		file := cases[start].file
		end := start
		for end < len(cases) && cases[end].file == file {
			end++
		}
		t.Run(file, func(t *testing.T) {
			for i := start; i < end; i++ {
				t.Run(cases[i].Name, func(t *testing.T) { check(t, i) })
			}
		})
		start = end
	}
}

// checkVectorResult reports how res differs from what c wants.
func checkVectorResult(t *testing.T, c vectorCase, res vectorResult) {
	defer func() {
		if t.Failed() {
			t.Logf("source: %s\nwhy: %s\nraw: %q\nwrite error: %v; took %d ms", c.SourceRef, c.Why, c.Raw, res.writeErr, res.elapsedMS)
		}
	}()
	if res.setupErr != nil {
		t.Fatalf("setting up: %v", res.setupErr)
	}
	w := c.Want
	n := w.responses()
	for i, st := range res.statuses {
		if st == 499 {
			t.Errorf("response %d: status 499 on the wire; 499 is only a log code", i+1)
		}
	}
	answered := true // every expected response came, with the expected status
	for i := range n {
		if i >= len(res.statuses) {
			t.Errorf("response %d of %d: none (%v), want %s", i+1, n, res.readErr, wantString(w, i))
			answered = false
			break
		}
		if st := res.statuses[i]; !wantStatusAt(w, i, st) {
			t.Errorf("response %d of %d: status %d, want %s", i+1, n, st, wantString(w, i))
			answered = false
			break
		}
	}
	if answered && res.readErr == nil && (!w.Forward || w.Close) && !res.closed {
		what := "a rejection"
		if w.Forward {
			what = "the last response (close expected)"
		}
		t.Errorf("connection not closed after %s: read %q, %v", what, res.afterClose, res.closeErr)
	}
	if got := len(res.reqs); got != w.forwarded() {
		t.Errorf("upstream received %d requests, want %d", got, w.forwarded())
		for i, r := range res.reqs {
			// Which request it was tells a forwarded one from a stray.
			t.Logf("upstream request %d: %s %s %v, body %q", i+1, r.Method, r.Target, r.Header, r.Body)
		}
	}
	if !w.Forward && res.received != res.complete {
		t.Errorf("upstream received %d bytes beyond the %d bytes of the requests before the rejected one: the rejected request was (partly) forwarded",
			res.received-res.complete, res.complete)
	}
	if w.UpstreamBody != nil && len(res.reqs) > 0 {
		if got := string(res.reqs[len(res.reqs)-1].Body); got != *w.UpstreamBody {
			t.Errorf("upstream body = %q, want %q", got, *w.UpstreamBody)
		}
	}
	for _, h := range w.UpstreamAbsent {
		for i, r := range res.reqs {
			for k, v := range r.Header {
				if strings.EqualFold(k, h) {
					t.Errorf("upstream request %d has %s: %q, want it dropped", i+1, k, v)
				}
			}
		}
	}
	if w.Forward && len(res.upErrs) > 0 {
		t.Errorf("upstream could not parse what the gateway forwarded: %s", strings.Join(res.upErrs, "; "))
	}
	if res.stopErr != nil {
		t.Errorf("stopping the gateway: %v", res.stopErr)
	}
}

// status499 finds a 499 status line anywhere in what a client received.
var status499 = regexp.MustCompile(`HTTP/[0-9]\.[0-9] 499[ \r\n]`)

// TestHTTP1VectorsNever499 sends every vector to one gateway, half-closes
// the connection as a client that has nothing more to send does, and reads
// all that comes back until the gateway closes: no status line may be 499,
// which is a log code for a client that went away (issue 11).
func TestHTTP1VectorsNever499(t *testing.T) {
	files := loadVectors(t)
	up, err := newRecordingUpstream()
	if err != nil {
		t.Fatal(err)
	}
	g, err := startGateway(Options{}, up.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.stop(); err != nil {
			t.Errorf("stopping the gateway: %v", err)
		}
		up.close(2 * time.Second)
	})
	type seen struct {
		data []byte
		err  error
	}
	cases := allCases(files)
	results := make([]seen, len(cases))
	runBounded(len(cases), never499Concurrency, func(i int) {
		raw, err := cases[i].bytes()
		if err != nil {
			results[i].err = err
			return
		}
		results[i].data, results[i].err = halfClosedExchange(g.addr, raw)
	})
	forEachCase(t, cases, func(t *testing.T, i int) {
		r := results[i]
		if r.err != nil {
			t.Logf("exchange ended with %v (not what this test checks)", r.err)
		}
		if loc := status499.FindIndex(r.data); loc != nil {
			t.Errorf("status 499 on the wire at byte %d: %q", loc[0], r.data[loc[0]:min(len(r.data), loc[0]+60)])
		}
	})
}

// halfClosedExchange writes raw, closes the write side, and returns what
// the gateway sends until it closes the connection or vectorDeadline passes.
func halfClosedExchange(addr string, raw []byte) ([]byte, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(vectorDeadline))
	_, werr := conn.Write(raw)
	if werr == nil {
		werr = conn.(*net.TCPConn).CloseWrite()
	}
	data, rerr := io.ReadAll(io.LimitReader(conn, 1<<20))
	return data, errors.Join(werr, rerr)
}

// netHTTPDeadline bounds one case against net/http's server. A refusal
// comes at once; what takes longer is a request Go is still reading, which
// the check ignores, so a slow machine can only make it miss a refusal,
// never fail a case.
const netHTTPDeadline = time.Second

// TestHTTP1VectorsAgainstNetHTTP checks the tables against Go's own
// server, the reference the team chose: whatever net/http's server refuses,
// a case must refuse too, at the same request and with the same kind of
// answer (505, 431 and 417 as they are; 400 and 501 as 400). Cases may be
// stricter than Go (llhttp's strict mode, CONNECT, the version rules).
func TestHTTP1VectorsAgainstNetHTTP(t *testing.T) {
	files := loadVectors(t)
	ln := listenLoopback(t)
	srv := &http.Server{
		// Go allows MaxHeaderBytes plus 4096 bytes of slack; this makes its
		// limit graygate's default 16 KiB.
		MaxHeaderBytes:    DefaultMaxHeaderBytes - 4096,
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// A body Go's server cannot read (bad chunks, a bad trailer) is
			// its refusal of the request.
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				w.Header().Set("Connection", "close")
				http.Error(w, "bad body: "+err.Error(), http.StatusBadRequest)
				return
			}
			_, _ = io.WriteString(w, "ok")
		}),
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	cases := allCases(files)
	statuses := make([][]int, len(cases))
	runBounded(len(cases), vectorConcurrency, func(i int) {
		raw, err := cases[i].bytes()
		if err != nil {
			return
		}
		statuses[i] = netHTTPStatuses(ln.Addr().String(), raw, cases[i].Want.responses(), netHTTPDeadline, false)
	})
	forEachCase(t, cases, func(t *testing.T, i int) {
		w := cases[i].Want
		for k, st := range statuses[i] {
			if st < 400 {
				continue
			}
			if w.Forward || k != w.responses()-1 {
				t.Errorf("net/http answers request %d with %d; the case must reject that request (want %+v)", k+1, st, w)
				return
			}
			want := st
			if st == http.StatusNotImplemented {
				want = http.StatusBadRequest
			}
			if w.Status != want && !slices.Contains(w.OrStatus, want) {
				t.Errorf("net/http answers request %d with %d; the case wants %d (want %d)", k+1, st, w.Status, want)
			}
			return
		}
	})
}

// netHTTPStatuses sends raw to a net/http server and returns the statuses
// of up to n responses, stopping at the first error status. With
// halfClose, the write side is closed after raw, as by a client with
// nothing more to send, so that the server answers or closes at once.
func netHTTPStatuses(addr string, raw []byte, n int, deadline time.Duration, halfClose bool) []int {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(deadline))
	_, _ = conn.Write(raw)
	if halfClose {
		_ = conn.(*net.TCPConn).CloseWrite()
	}
	methods := requestMethods(raw)
	br := bufio.NewReader(conn)
	var out []int
	for i := range n {
		method := http.MethodGet
		if i < len(methods) {
			method = methods[i]
		}
		resp, err := readFinalResponse(br, method)
		if err != nil {
			return out
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		out = append(out, resp.StatusCode)
		if resp.StatusCode >= 400 {
			return out
		}
	}
	return out
}

// TestVectorBytes pins how a case's raw text becomes bytes.
func TestVectorBytes(t *testing.T) {
	tests := []struct {
		name    string
		c       vectorCase
		want    []byte
		wantErr string
	}{
		{name: "latin-1 characters are single bytes", c: vectorCase{Raw: "a\u00ff\u0000\r\n"}, want: []byte{'a', 0xff, 0, '\r', '\n'}},
		{name: "repeat expands once", c: vectorCase{Raw: "X: @@\r\n", Repeat: &vectorRepeat{At: "@@", Text: "ab", Count: 3}}, want: []byte("X: ababab\r\n")},
		{name: "characters above U+00FF are refused", c: vectorCase{Raw: "\u0100"}, wantErr: "not in U+0000..U+00FF"},
		{name: "repeat marker must be present", c: vectorCase{Raw: "X", Repeat: &vectorRepeat{At: "@@", Text: "a", Count: 1}}, wantErr: "must occur once"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.c.bytes()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("bytes() error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tt.want) {
				t.Fatalf("bytes() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// sortedKeys returns the keys of m in order, so that subtests have a stable
// order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
