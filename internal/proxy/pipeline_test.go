package proxy

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestPipeliningShapes drives the shapes real clients produce, with raw
// sockets, in a loop of 1,000 connections: several requests written back
// to back in one segment, one request split over several segments,
// requests written with gaps of 0 to 50 ms without waiting for answers,
// bodies with Content-Length and chunked, and a half-close after the last
// request. Every request must be answered, in order, on the same
// connection (RFC 9112 section 9.3.2), and after a half-close the gateway
// must answer and then close. The write hold-back that once saved a
// system call per request made the second of two quick writes hang.
func TestPipeliningShapes(t *testing.T) {
	backend, _ := echoBackend(t, "stable")
	_, addr := startProxy(t, Options{}, staticDecider{Group: "stable", Target: poolOf("stable", addrOf(backend))})
	rng := rand.New(rand.NewPCG(11, 12))
	for it := range shortened(1000) {
		reqs := pipelineRequests(rng, it)
		segs := splitRequests(rng, reqs)
		gap := pipelineGap(rng)
		halfClose := rng.IntN(4) == 0
		if err := pipelined(addr, segs, gap, halfClose, func(br *bufio.Reader) error { return readAnswers(br, reqs, halfClose) }); err != nil {
			t.Fatalf("iteration %d (%d requests in %d segments, gap %v, half-close %v): %v", it, len(reqs), len(segs), gap, halfClose, err)
		}
	}
}

// shortened is n, or a fifth of it under -short.
func shortened(n int) int {
	if testing.Short() {
		return n / 5
	}
	return n
}

// pipelineGap is the pause between a connection's writes: none (60%), a
// yield (20%: a few microseconds, inside the gateway's turnaround), 50 µs
// to 5 ms, or 5 to 50 ms.
func pipelineGap(rng *rand.Rand) time.Duration {
	switch r := rng.IntN(100); {
	case r < 60:
		return 0
	case r < 80:
		return -1
	case r < 97:
		return time.Duration(50+rng.IntN(5000)) * time.Microsecond
	default:
		return time.Duration(5+rng.IntN(46)) * time.Millisecond
	}
}

// pipelined writes segs on one connection with gap between them (and
// half-closes it after the last when halfClose), while read reads and
// checks the answers.
func pipelined(addr string, segs []string, gap time.Duration, halfClose bool, read func(*bufio.Reader) error) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	go func() {
		for i, s := range segs {
			if _, err := io.WriteString(c, s); err != nil {
				return
			}
			if i < len(segs)-1 {
				switch {
				case gap < 0:
					time.Sleep(0)
				case gap > 0:
					time.Sleep(gap)
				}
			}
		}
		if halfClose {
			_ = c.(*net.TCPConn).CloseWrite()
		}
	}()
	return read(bufio.NewReader(c))
}

// pipelineRequests makes one to four requests for iteration it, each
// without a body, with a Content-Length body or chunked, and each with a
// path of its own for readAnswers to find in its answer.
func pipelineRequests(rng *rand.Rand, it int) []string {
	var reqs []string
	for i := range 1 + rng.IntN(4) {
		path := fmt.Sprintf("/it%d/req%d", it, i)
		switch rng.IntN(3) {
		case 0:
			reqs = append(reqs, "GET "+path+" HTTP/1.1\r\nHost: a\r\n\r\n")
		case 1:
			reqs = append(reqs, "POST "+path+" HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello")
		default:
			reqs = append(reqs, "POST "+path+" HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
		}
	}
	return reqs
}

// splitRequests cuts the stream of reqs at random points: all of it
// together, a request a piece, or requests cut into pieces of 1 to 40
// bytes.
func splitRequests(rng *rand.Rand, reqs []string) []string {
	stream := strings.Join(reqs, "")
	switch rng.IntN(3) {
	case 0:
		return []string{stream}
	case 1:
		return reqs
	}
	var segs []string
	for rest := stream; len(rest) > 0; {
		k := min(len(rest), 1+rng.IntN(40))
		segs = append(segs, rest[:k])
		rest = rest[k:]
	}
	return segs
}

// readAnswers reads len(reqs) answers from br and checks that each echoes
// its request's path, in order; after a half-close, that the connection
// then closes.
func readAnswers(br *bufio.Reader, reqs []string, halfClose bool) error {
	return readAnswersWith(br, len(reqs), halfClose, func(i int, status int, body string) error {
		r := reqs[i]
		path := r[strings.IndexByte(r, ' ')+1:]
		path = path[:strings.IndexByte(path, ' ')]
		if status != 200 || !strings.Contains(body, `"uri":"`+path+`"`) {
			return fmt.Errorf("%d %q, want 200 echoing %s", status, body, path)
		}
		return nil
	})
}

// readAnswersWith reads n final answers from br, in order (skipping
// interim ones: a 100 Continue), and has check judge each one's status
// and body; after a half-close, it checks that the connection then
// closes.
func readAnswersWith(br *bufio.Reader, n int, halfClose bool, check func(i, status int, body string) error) error {
	for i := range n {
		resp, err := readFinalResponse(br, http.MethodGet)
		if err != nil {
			return fmt.Errorf("answer %d of %d: %w", i+1, n, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("answer %d body: %w", i+1, err)
		}
		if err := check(i, resp.StatusCode, string(body)); err != nil {
			return fmt.Errorf("answer %d of %d: %w", i+1, n, err)
		}
	}
	if halfClose {
		// The gateway answered everything; now it must close.
		if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil {
			return fmt.Errorf("after a half-close and all answers: read %d bytes, %v; want the connection closed", n, err)
		}
	}
	return nil
}
