package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/upstream"
)

// handlerProgram is a fuzz input read as what a Go handler does with its
// response, one step per byte (some take the next byte as an argument):
// set a header field, announce a trailer, set a Content-Length, write an
// interim or the final status, write bytes, flush, set a trailer, or
// abort (http.ErrAbortHandler). Every step is something real handlers do;
// the values are valid, so that what is judged is the framing.
type handlerProgram []byte

var programStatuses = []int{200, 201, 204, 206, 304, 404, 500, 103}

func (p handlerProgram) run(w http.ResponseWriter) {
	arg := func(i *int) int {
		*i++
		if *i < len(p) {
			return int(p[*i])
		}
		return 0
	}
	for i := 0; i < len(p); i++ {
		switch p[i] % 9 {
		case 0:
			w.Header().Set("X-H"+strconv.Itoa(arg(&i)%4), "v")
		case 1:
			w.Header().Add("Trailer", "X-T"+strconv.Itoa(arg(&i)%4))
		case 2:
			w.Header().Set("Content-Length", strconv.Itoa(arg(&i)*97))
		case 3:
			w.WriteHeader(programStatuses[arg(&i)%len(programStatuses)])
		case 4:
			_, _ = w.Write(bytes.Repeat([]byte("b"), arg(&i)*97))
		case 5:
			w.(http.Flusher).Flush()
		case 6:
			w.Header().Set("X-T"+strconv.Itoa(arg(&i)%4), "t")
		case 7:
			w.Header().Set(http.TrailerPrefix+"X-U"+strconv.Itoa(arg(&i)%4), "u")
		case 8:
			panic(http.ErrAbortHandler)
		}
	}
}

// FuzzHandlerAgainstNetHTTP judges the gateway's paths from a Go backend,
// as an http1 and as an h2c pool, to an HTTP/1.1 and an h2c client, for a
// GET, a POST (which an h2c client's takes over net/http's transport to an
// http1 pool) and a HEAD: the backend runs a handlerProgram for each, and
// what each client gets through the
// gateway's real listener is held against what the same client gets from
// the backend directly (the oracle). With the oracle's status, the client
// gets that status, or the gateway's 502 or 504; a body the oracle reads
// whole arrives whole and unchanged, with the trailers the oracle reads
// (on HTTP/2, where an HTTP/1.1 answer with a length cannot carry them);
// one it cannot read whole never arrives as a complete body. Nothing may
// hang: every answer ends within the gateway's read timeout and a margin.
func FuzzHandlerAgainstNetHTTP(f *testing.F) {
	for _, s := range [][]byte{
		{4, 3},                    // a body
		{1, 0, 4, 3, 6, 0},        // an announced trailer, sent
		{1, 0, 4, 3},              // announced, never sent
		{2, 40, 3, 4},             // a 304 with a Content-Length
		{2, 40, 3, 2},             // a 204 with one
		{2, 200, 4, 10, 5, 8},     // a long body that breaks off early
		{2, 200, 3, 0, 5, 8},      // ... before its first byte
		{2, 200, 4, 200},          // a long body with a length, whole
		{2, 200, 4, 1, 5, 4, 199}, // ... its first bytes flushed alone
		{3, 7, 3, 7, 4, 1},        // two 103s, then the body
		{4, 1, 5, 7, 0, 4, 1},     // flushed, then an undeclared trailer
		{0, 1, 1, 2, 6, 2, 4, 3},  // header, trailer, body
	} {
		f.Add(s)
	}
	var program atomic.Pointer[handlerProgram]
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		(*program.Load()).run(w)
	}))
	backend.Config.Protocols = new(http.Protocols)
	backend.Config.Protocols.SetHTTP1(true)
	backend.Config.Protocols.SetUnencryptedHTTP2(true)
	backend.Config.ErrorLog = log.New(io.Discard, "", 0) // superfluous WriteHeader calls and the like
	backend.Start()
	f.Cleanup(backend.Close)

	pools := map[string]*upstream.Pool{"http1": poolOf("h1", addrOf(backend)), "h2c": poolOf("h2c", addrOf(backend))}
	pools["h2c"].Protocol = upstream.H2C
	d := deciderFunc(func(r attr.Request) router.Decision {
		return router.Decision{Rule: "r", Group: "stable", Target: pools[strings.Trim(r.Path(), "/")]}
	})
	const readTimeout = time.Second
	_, gw := startProxyWith(f, Options{UpstreamReadTimeout: readTimeout}, d, listener.Protocols{H2C: true})
	h1, h2 := httpClient(f), h2cClient(f)
	// The oracle for a pool is the client that speaks its protocol; on
	// HTTP/1.1 without keep-alive, since Go's client does not send a POST
	// again on a connection the backend closed after its last answer
	// (as it does after writing more than its Content-Length).
	oracles := map[string]*http.Client{"http1": {Transport: &http.Transport{DisableKeepAlives: true}}, "h2c": h2}
	clients := map[string]*http.Client{"HTTP/1.1": h1, "h2c": h2}

	type answer struct {
		status   int
		body     []byte
		whole    bool // the body ended as framed
		byLength bool // and was framed by a Content-Length
		trailer  http.Header
		fromGate bool // the gateway's own error answer
	}
	get := func(c *http.Client, method, url string, limit time.Duration) (answer, error) {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(map[string]string{"POST": "up"}[method]))
		req.Header.Set("Te", "trailers")
		resp, err := c.Do(req)
		if err != nil {
			return answer{}, err
		}
		defer resp.Body.Close()
		body, berr := io.ReadAll(resp.Body)
		return answer{
			status:   resp.StatusCode,
			body:     body,
			whole:    berr == nil,
			byLength: resp.ContentLength >= 0 && int64(len(body)) == resp.ContentLength,
			trailer:  resp.Trailer,
			fromGate: bytes.Contains(body, []byte("(request id "+resp.Header.Get("X-Request-Id")+")")),
		}, nil
	}

	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 64 {
			return
		}
		p := handlerProgram(raw)
		program.Store(&p)
		for _, c := range [][2]string{{"http1", "GET"}, {"h2c", "GET"}, {"http1", "POST"}, {"h2c", "POST"}, {"http1", "HEAD"}, {"h2c", "HEAD"}} {
			up, method := c[0], c[1]
			want, err := get(oracles[up], method, "http://"+addrOf(backend)+"/", readTimeout+500*time.Millisecond)
			if err != nil {
				// The backend's own answer has no head Go's client takes
				// (an abort before it): the gateway's 502 is all a client
				// can get, checked below as any status.
				want = answer{status: http.StatusBadGateway}
			}
			for _, cl := range []string{"HTTP/1.1", "h2c"} {
				via := fmt.Sprintf("%s %s from %s pool", cl, method, up)
				got, err := get(clients[cl], method, "http://"+gw+"/"+up, readTimeout+2*time.Second)
				switch {
				case err != nil:
					t.Fatalf("%s: no answer: %v\nprogram %v; the backend answers %d %q (whole %v)", via, err, raw, want.status, want.body, want.whole)
				case (got.fromGate || method == "HEAD" && got.status != want.status) &&
					(got.status == http.StatusBadGateway || got.status == http.StatusGatewayTimeout):
					// stricter than the client, or the backend broke off
					// (a HEAD's answer has no body to tell the gateway's
					// own by: any 502 or 504 the backend did not send)
				case got.status != want.status:
					t.Fatalf("%s: status %d, the backend answers %d\nprogram %v; body %q", via, got.status, want.status, raw, got.body)
				case method == "HEAD" || !hasBody(got.status):
					// A HEAD's answer, a 204 or a 304 has no body to be
					// whole or not: one whose stream the backend reset
					// after its header is still whole on HTTP/1.1, and may
					// end cleanly on HTTP/2 (trailers lost, which the
					// reset lost too).
					if len(got.body) > 0 {
						t.Fatalf("%s: a %d with a body of %d bytes\nprogram %v", via, got.status, len(got.body), raw)
					}
				case want.whole && (!got.whole || !bytes.Equal(got.body, want.body)):
					t.Fatalf("%s: body %d bytes (whole %v), the backend's is %d bytes, whole\nprogram %v", via, len(got.body), got.whole, len(want.body), raw)
				case !want.whole && got.whole && !(got.byLength && bytes.Equal(got.body, want.body)):
					// Only an abort after the body's last byte may go
					// unseen: a client that reads a length has the body
					// whole by then.
					t.Fatalf("%s: the backend's body breaks off after %d bytes, the client got a complete one of %d\nprogram %v", via, len(want.body), len(got.body), raw)
				}
				if want.whole && got.whole && !got.fromGate && cl == "h2c" {
					for k, v := range want.trailer {
						if len(v) > 0 && strings.Join(got.trailer[k], ",") != strings.Join(v, ",") {
							t.Fatalf("%s: trailer %s = %q, the backend sends %q\nprogram %v", via, k, got.trailer[k], v, raw)
						}
					}
				}
			}
		}
	})
}
