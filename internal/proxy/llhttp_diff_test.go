package proxy

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// llhttpCasesFile holds request byte strings and how llhttp in strict
// mode reads them, made by gen.js beside it (its header says how).
const llhttpCasesFile = "testdata/llhttp-diff/cases.json"

// llhttpCase is one request byte string and llhttp's reading of it: the
// whole messages it read, in order, and the error that stopped it ("" when
// it read every byte as whole messages).
type llhttpCase struct {
	Raw      string `json:"raw"`
	From     string `json:"from"`
	Mutation string `json:"mutation"`
	LLHTTP   struct {
		Error    string `json:"error"`
		Messages []struct {
			Method  string `json:"method"`
			URL     string `json:"url"`
			Version string `json:"version"`
			Body    string `json:"body"`
		} `json:"messages"`
	} `json:"llhttp"`
}

// bytes returns the request bytes: each character of Raw is one byte.
func (c llhttpCase) bytes() ([]byte, error) { return octets(c.Raw) }

// newerLLHTTP reports a refusal by the llhttp that made the cases
// (9.3.1, in Node.js 20) that later llhttp takes back, and so does the
// gateway: a Content-Length value with a tab beside it, which is optional
// whitespace (RFC 9110 section 5.5) and which llhttp v9.4.2's own test
// "Tabs in `Content-Length` (surrounding)" accepts (transcribed in
// ../http1/llhttp-strict.json). It is the first Content-Length line
// llhttp can refuse that decides: one with a tab beside digits, before any
// that is not digits. What comes after it (a later request's malformed
// Content-Length, which the gateway refuses in its turn) has no verdict
// from this llhttp to compare with.
func newerLLHTTP(c llhttpCase, raw []byte) bool {
	if c.LLHTTP.Error != "HPE_INVALID_CONTENT_LENGTH" {
		return false
	}
	for _, line := range strings.Split(string(raw), "\r\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || !strings.EqualFold(name, "Content-Length") {
			continue
		}
		v := strings.Trim(value, " \t")
		if v == "" || strings.Trim(v, "0123456789") != "" {
			return false
		}
		if strings.ContainsRune(value, '\t') {
			return true
		}
	}
	return false
}

// sameTarget reports whether the upstream's request target is llhttp's
// URL. A fragment is not part of a request target (RFC 9112 section 3.2):
// llhttp reads it with the URL, the gateway forwards the target without
// it. An absolute-form target is forwarded in origin form, so only the
// origin form is compared.
func sameTarget(upstream, llhttp string) bool {
	if !strings.HasPrefix(llhttp, "/") {
		return true
	}
	llhttp, _, _ = strings.Cut(llhttp, "#")
	return upstream == llhttp
}

// llhttpResult is what the gateway made of one case, and how many of its
// requests Go's net/http server answered 200 after reading them whole.
type llhttpResult struct {
	setupErr   error
	goAccepted int
	goStatuses []int
	statuses   []int
	readErr    error
	up         upstreamRecord
}

// exchangeLLHTTP writes raw, c's bytes, to a gateway of its own (over
// TLS when vt is not nil), in one write or in pieces (writePieces), then
// half-closes (over TLS, a close_notify), and meanwhile reads every
// answer until the gateway closes.
func exchangeLLHTTP(vt *vectorTLS, c llhttpCase, raw []byte, pieces []piece) (res llhttpResult) {
	res.up, res.setupErr = throughGatewayOver(vt, Options{}, vectorDeadline, func(conn net.Conn) {
		// A write can fail when the gateway has already refused and
		// closed; its answer may still be there to read.
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			writePieces(conn, raw, pieces)
			_ = conn.(interface{ CloseWrite() error }).CloseWrite()
		}()
		br := bufio.NewReader(conn)
		for i := 0; ; i++ {
			method := http.MethodGet
			if m := c.LLHTTP.Messages; i < len(m) {
				method = m[i].Method
			}
			resp, err := readFinalResponse(br, method)
			if err != nil {
				if !errors.Is(err, io.EOF) {
					res.readErr = err
				}
				return
			}
			res.statuses = append(res.statuses, resp.StatusCode)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	return res
}

// goBodyOracle is a net/http server whose handler reads each request's
// body to its end before it answers: 200 when Go reads it whole, 400 when
// reading it fails (a malformed or short body), so that a 200 means Go's
// server framed the whole request.
func goBodyOracle(t *testing.T) string {
	ln := listenLoopback(t)
	srv := &http.Server{
		MaxHeaderBytes:    DefaultMaxHeaderBytes - 4096, // Go adds 4096 bytes of slack
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.ReadAll(r.Body); err != nil {
				http.Error(w, "unreadable body", http.StatusBadRequest)
				return
			}
			_, _ = io.WriteString(w, "ok")
		}),
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// TestHTTP1AgainstLLHTTP checks "whatever Go's net/http server or llhttp
// refuses, graygate refuses" (testdata/http1/README.md, rule 1) on
// thousands of generated requests rather than only the transcribed ones:
// mutations of the vectors that llhttp in strict mode either refuses or
// reads as whole messages (testdata/llhttp-diff/gen.js made them and
// recorded llhttp's reading). Each goes through the real listener in one
// write, then the client half-closes. The gateway may refuse more than
// llhttp does, but what reaches the upstream must be a prefix of what
// llhttp read, message for message (method, target and body): a request
// llhttp refuses, or frames differently, is never forwarded. The same
// bytes go to a net/http server that reads every body: the gateway
// forwards no more requests than Go's server answered 200. Every forwarded
// request is answered 200, in order, and no answer is 499.
func TestHTTP1AgainstLLHTTP(t *testing.T) {
	againstLLHTTP(t, nil, 1, nil)
}

// TestHTTP1AgainstLLHTTPInPieces sends the same corpus as
// TestHTTP1AgainstLLHTTP in pieces: each case is cut at one to five
// places chosen at random (seeded by the case's index, so a failure comes
// back), among them always a place inside a line ending or beside a
// colon, and the pieces go out as separate writes 0 to 2 ms apart while
// the answers are read. The checks are the same: how the bytes arrive
// must not change what reaches the upstream (a prefix of what llhttp and
// Go's server read, message for message), nor make the gateway answer
// anything but the upstream's 200 for what it forwarded, nor put a 499 on
// the wire. The listener's head check and the data plane's fast paths
// (a whole head in one read, a body that came with its head) are each
// skipped by some of these shapes.
func TestHTTP1AgainstLLHTTPInPieces(t *testing.T) {
	againstLLHTTP(t, nil, 1, func(i int, raw []byte) []piece {
		return cutAtRandom(rand.New(rand.NewPCG(uint64(i), 7)), raw)
	})
}

// TestHTTP1AgainstLLHTTPOverTLS sends every fourth case of the corpus to
// the TLS listener, with the checks of TestHTTP1AgainstLLHTTPInPieces:
// in one write, and in pieces, each its own TLS record (the gateway's
// reads then return a record's bytes, and may find the next record
// already read off the socket), ending with a close_notify. The
// listener's head check runs on what TLS hands it, and refuses there
// what it refuses in clear.
func TestHTTP1AgainstLLHTTPOverTLS(t *testing.T) {
	gw := newGatewayTLS(t)
	vt := &vectorTLS{server: gw.conf, client: &tls.Config{RootCAs: gw.ca.Pool, ServerName: "gw.test", NextProtos: []string{"http/1.1"}}}
	againstLLHTTP(t, vt, 4, func(i int, raw []byte) []piece {
		return cutAtRandom(rand.New(rand.NewPCG(uint64(i), 11)), raw)
	})
}

// againstLLHTTP runs every stride-th case of the corpus through the
// gateway (over TLS when vt is not nil), each case in the pieces cut
// returns for it (nil cut, or nil pieces: one write), and judges what the
// gateway did against llhttp and Go's server.
func againstLLHTTP(t *testing.T, vt *vectorTLS, stride int, cut func(i int, raw []byte) []piece) {
	all := loadLLHTTPCases(t)
	if testing.Short() {
		all = all[:len(all)/10]
	}
	var cases []llhttpCase
	for i := 0; i < len(all); i += stride {
		cases = append(cases, all[i])
	}
	raws := make([][]byte, len(cases))
	for i, c := range cases {
		raw, err := c.bytes()
		if err != nil {
			t.Fatalf("%s: cases[%d].raw: %v", llhttpCasesFile, i, err)
		}
		raws[i] = raw
	}
	oracle := goBodyOracle(t)
	results := make([]llhttpResult, len(cases))
	cuts := make([][]piece, len(cases))
	wholes := make([]llhttpResult, len(cases)) // in one write, when cut
	runBounded(len(cases), vectorConcurrency, func(i int) {
		if cut != nil {
			cuts[i] = cut(i, raws[i])
			if cuts[i] != nil {
				wholes[i] = exchangeLLHTTP(vt, cases[i], raws[i], nil)
			}
		}
		results[i] = exchangeLLHTTP(vt, cases[i], raws[i], cuts[i])
		sts := netHTTPStatuses(oracle, raws[i], len(cases[i].LLHTTP.Messages)+1, vectorDeadline, true)
		results[i].goStatuses = sts
		for _, st := range sts {
			if st != http.StatusOK {
				break
			}
			results[i].goAccepted++
		}
	})
	var refusedByBoth, stricter, forwarded, laterLLHTTP, cutOff int
	for i, c := range cases {
		res := results[i]
		if res.setupErr != nil {
			t.Fatalf("case %d: setting up: %v", i, res.setupErr)
		}
		var errs []string
		msgs := c.LLHTTP.Messages
		if newerLLHTTP(c, raws[i]) {
			laterLLHTTP++
			continue
		}
		for j, st := range res.statuses {
			if st == 499 {
				errs = append(errs, fmt.Sprintf("response %d: 499 on the wire", j+1))
			}
		}
		if len(res.up.reqs) > len(msgs) {
			errs = append(errs, fmt.Sprintf("upstream received %d requests; llhttp read %d whole ones before %s", len(res.up.reqs), len(msgs), c.LLHTTP.Error))
		}
		if len(res.up.reqs) > res.goAccepted {
			errs = append(errs, fmt.Sprintf("upstream received %d requests; Go's server read %d whole ones (answers %v)", len(res.up.reqs), res.goAccepted, res.goStatuses))
		}
		for j, r := range res.up.reqs {
			if j >= len(msgs) {
				break
			}
			m := msgs[j]
			body, err := octets(m.Body)
			if err != nil {
				t.Fatalf("case %d: llhttp.messages[%d].body: %v", i, j, err)
			}
			if r.Method != m.Method || string(r.Body) != string(body) || !sameTarget(r.Target, m.URL) {
				errs = append(errs, fmt.Sprintf("request %d reached the upstream as %s %q with body %q; llhttp read %s %q with body %q",
					j+1, r.Method, r.Target, r.Body, m.Method, m.URL, body))
			}
			if j >= len(res.statuses) || res.statuses[j] != http.StatusOK {
				errs = append(errs, fmt.Sprintf("request %d was forwarded but its answer is not the upstream's 200 (answers %v, %v)", j+1, res.statuses, res.readErr))
			}
		}
		upErrs := res.up.errs
		if cuts[i] != nil && len(res.up.cutOff) == 1 && len(upErrs) == 1 {
			// A body that had not all arrived streams: the gateway sends
			// on what it has read and checked, and when the rest turns
			// out malformed it refuses the request and closes the
			// upstream connection, so the upstream reads a body that
			// ends early, which it cannot take for a whole request.
			// That request's answer must be the refusal.
			if j := len(res.up.reqs); j < len(res.statuses) && res.statuses[j] >= 400 && res.statuses[j] < 499 {
				upErrs = nil
				cutOff++
			}
		}
		if cuts[i] != nil && wholes[i].setupErr == nil {
			// The same requests are forwarded however the bytes came: a
			// gateway that refused a request only when it came in pieces
			// would pass the checks above, which let it be stricter
			// than llhttp.
			if w := wholes[i]; len(w.up.reqs) != len(res.up.reqs) || !slices.Equal(w.statuses[:min(len(w.up.reqs), len(w.statuses))], res.statuses[:min(len(res.up.reqs), len(res.statuses))]) {
				errs = append(errs, fmt.Sprintf("in one write, %d requests forwarded and answers %v; in pieces, %d and %v", len(w.up.reqs), w.statuses, len(res.up.reqs), res.statuses))
			}
		}
		if len(upErrs) > 0 {
			errs = append(errs, "the upstream could not read what the gateway sent: "+strings.Join(upErrs, "; "))
		}
		if res.up.stopErr != nil {
			errs = append(errs, fmt.Sprintf("stopping the gateway: %v", res.up.stopErr))
		}
		if len(errs) > 0 {
			t.Errorf("case %d (from %s; %s): %s\nraw: %q%s\nllhttp: %s, %d whole messages; Go's server answers %v; gateway answers %v",
				i, c.From, c.Mutation, strings.Join(errs, "; "), c.Raw, describePieces(raws[i], cuts[i]), orNone(c.LLHTTP.Error), len(msgs), res.goStatuses, res.statuses)
		}
		switch {
		case c.LLHTTP.Error != "" && len(res.up.reqs) == len(msgs):
			refusedByBoth++
		case len(res.up.reqs) < len(msgs):
			stricter++
		}
		forwarded += len(res.up.reqs)
	}
	t.Logf("%d cases: %d refused by llhttp and by the gateway at the same message; %d where the gateway refused earlier than llhttp; %d requests forwarded; %d refused only by this llhttp (a Content-Length with a tab beside it); %d refused after part of the body had gone upstream",
		len(cases), refusedByBoth, stricter, forwarded, laterLLHTTP, cutOff)
	whole := 0 // the cases llhttp read to the end
	for _, c := range cases {
		if c.LLHTTP.Error == "" {
			whole++
		}
	}
	if forwarded < whole/2 {
		// The gateway may refuse more than llhttp does; one that
		// refused everything would pass every check above.
		t.Fatalf("only %d requests forwarded, of %d cases llhttp reads whole", forwarded, whole)
	}
}

func orNone(s string) string {
	if s == "" {
		return "no error"
	}
	return s
}

// loadLLHTTPCases reads the generated corpus (gen.js), strictly.
func loadLLHTTPCases(t *testing.T) []llhttpCase {
	t.Helper()
	data, err := os.ReadFile(llhttpCasesFile)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Source json.RawMessage `json:"source"`
		Cases  []llhttpCase    `json:"cases"`
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("%s: %v", llhttpCasesFile, err)
	}
	if len(file.Cases) < 1000 {
		t.Fatalf("%s: %d cases, want at least 1000", llhttpCasesFile, len(file.Cases))
	}
	return file.Cases
}
