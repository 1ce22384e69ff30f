package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// FuzzAgainstNetHTTP extends TestHTTP1VectorsAgainstNetHTTP beyond the
// tables: whatever request head Go's net/http server refuses, the gateway
// refuses too, through its real listener. For each input whose first
// request Go's server answers with an error status, a gateway of its own
// is sent the same bytes (then a half-close, as a client with nothing more
// to send) and must not forward a byte of it upstream; if it answers, the
// answer is an error status, never 499. The oracle's handler does not read
// bodies, so its error statuses judge the head alone (a body is checked as
// it streams, after the head may have gone upstream).
func FuzzAgainstNetHTTP(f *testing.F) {
	for _, file := range loadVectors(f) {
		for _, c := range file.Cases {
			if raw, err := c.bytes(); err == nil {
				f.Add(raw)
			}
		}
	}
	ln := listenLoopback(f)
	srv := &http.Server{
		MaxHeaderBytes:    DefaultMaxHeaderBytes - 4096, // Go adds 4096 bytes of slack
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }),
	}
	go func() { _ = srv.Serve(ln) }()
	f.Cleanup(func() { _ = srv.Close() })
	oracle := ln.Addr().String()

	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 32<<10 {
			return
		}
		st, ok := oracleStatus(oracle, raw)
		if !ok || st < 400 {
			return
		}
		up, err := newRecordingUpstream()
		if err != nil {
			t.Fatal(err)
		}
		g, err := startGateway(Options{}, up.addr())
		if err != nil {
			up.close(time.Second)
			t.Fatal(err)
		}
		answer, xerr := halfClosedExchange(g.addr, raw)
		stopErr := g.stop()
		up.close(2 * time.Second)
		if stopErr != nil {
			t.Errorf("stopping the gateway: %v", stopErr)
		}
		up.mu.Lock()
		received, reqs := up.received, len(up.reqs)
		up.mu.Unlock()
		if received > 0 {
			t.Errorf("net/http answers %d, but the gateway forwarded %d bytes (%d whole requests) upstream\nraw: %q", st, received, reqs, raw)
		}
		if status499.Match(answer) {
			t.Errorf("a 499 on the wire\nraw: %q\nanswer: %q", raw, answer)
		}
		if len(answer) > 0 {
			resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(answer)), nil)
			if err != nil || resp.StatusCode < 400 {
				t.Errorf("net/http answers %d; the gateway's answer is not an error status (%v)\nraw: %q\nanswer: %q", st, err, raw, answer)
			}
		}
		if errors.Is(xerr, os.ErrDeadlineExceeded) {
			t.Errorf("the gateway had not closed the connection %s after a half-close\nraw: %q\nanswer so far: %q", vectorDeadline, raw, answer)
		}
	})
}

// oracleStatus sends raw to net/http's server at addr, half-closes the
// connection, and returns the status of the first answer, if one comes
// (a head cut short by the half-close gets none).
func oracleStatus(addr string, raw []byte) (int, bool) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return 0, false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(vectorDeadline))
	_, _ = conn.Write(raw)
	_ = conn.(*net.TCPConn).CloseWrite()
	method := http.MethodGet
	if m := requestMethods(raw); len(m) > 0 {
		method = m[0]
	}
	resp, err := readFinalResponse(bufio.NewReader(conn), method)
	if err != nil {
		return 0, false
	}
	resp.Body.Close()
	return resp.StatusCode, true
}
