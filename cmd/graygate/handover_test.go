package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/graygate/graygate/internal/certs/certstest"
)

// migrateReqPath is the sysctl that makes Linux (5.14 and later) move the
// connections in a closing SO_REUSEPORT listener's accept queue to another
// listener of the group instead of resetting them.
const migrateReqPath = "/proc/sys/net/ipv4/tcp_migrate_req"

// setMigrateReq sets net.ipv4.tcp_migrate_req to v for the rest of the
// test and restores the value it had. It reports whether the sysctl now
// holds v; when the kernel lacks it or it cannot be written (not root, a
// read-only /proc/sys) it logs why and changes nothing.
func setMigrateReq(t *testing.T, v string) bool {
	t.Helper()
	old, err := os.ReadFile(migrateReqPath)
	if err != nil {
		t.Logf("net.ipv4.tcp_migrate_req is not available: %v", err)
		return false
	}
	was := strings.TrimSpace(string(old))
	if was == v {
		return true
	}
	if err := os.WriteFile(migrateReqPath, []byte(v), 0o644); err != nil {
		t.Logf("cannot set net.ipv4.tcp_migrate_req=%s (it is %s): %v", v, was, err)
		return false
	}
	t.Cleanup(func() {
		if err := os.WriteFile(migrateReqPath, []byte(was), 0o644); err != nil {
			t.Errorf("restore net.ipv4.tcp_migrate_req=%s: %v", was, err)
		}
	})
	return true
}

// TestReusePortHandover restarts graygate the way the README's
// zero-downtime section says (lifecycle.reuse_port: true; start B on the
// same --listen, wait for its /readyz, SIGTERM A) while clients keep
// opening new connections, one request each and no retries, and other
// clients keep requests flowing on keep-alive connections, and one request
// is in flight on A across its shutdown. Every request is classified; none
// may fail with net.ipv4.tcp_migrate_req=1. Without it the kernel resets
// the connections still in A's accept queue when A closes its listener
// (see the package doc of internal/proxy): the test then reports how many,
// and asserts what stays true, that those resets are the only failures.
func TestReusePortHandover(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("SO_REUSEPORT handover is Linux only")
	}
	old, err := os.ReadFile(migrateReqPath)
	if err != nil {
		t.Logf("net.ipv4.tcp_migrate_req is not available (%v): the handover runs as the kernel does it", err)
		t.Run("kernel default", func(t *testing.T) { handover(t, false, overTCP) })
		return
	}
	if strings.TrimSpace(string(old)) == "0" {
		// The kernel's default: measure the race it leaves, without
		// changing anything.
		t.Run("tcp_migrate_req=0", func(t *testing.T) { handover(t, false, overTCP) })
	}
	for _, mode := range []handoverMode{overTCP, overTLS, overH2, overH2C} {
		name := "tcp_migrate_req=1"
		if mode != overTCP {
			name += "/" + string(mode)
		}
		t.Run(name, func(t *testing.T) {
			if !setMigrateReq(t, "1") {
				t.Log("the handover runs without tcp_migrate_req")
				handover(t, false, mode)
				return
			}
			handover(t, true, mode)
		})
	}
}

// handoverMode is what the clients of a handover speak.
type handoverMode string

const (
	overTCP handoverMode = "" // HTTP/1.1 in clear, on the data-plane listener
	// overTLS: HTTP/1.1 over TLS (ALPN http/1.1), on tls_listen. The TLS
	// listener takes a connection from the kernel before its handshake,
	// so a connection it took just before it closed is handed on after.
	overTLS handoverMode = "tls"
	// overH2: the one-request clients speak HTTP/2 over TLS, each on a new
	// connection, and the keep-alive clients over one connection each;
	// the in-flight request speaks HTTP/1.1 over TLS.
	overH2 handoverMode = "h2"
	// overH2C: with h2c on, the data-plane listener too looks at each
	// connection's first bytes before it hands it on. The clients speak
	// HTTP/2 with prior knowledge, as in overH2; the in-flight request
	// HTTP/1.1.
	overH2C handoverMode = "h2c"
)

// tls reports whether the clients of mode go to tls_listen.
func (m handoverMode) tls() bool { return m == overTLS || m == overH2 }

// h2 reports whether the clients of mode speak HTTP/2 (but the in-flight
// request, which speaks HTTP/1.1).
func (m handoverMode) h2() bool { return m == overH2 || m == overH2C }

// Failure classes of handover's clients.
const (
	failDial = "dial" // connection refused, or the dial timed out
	// failBeforeResp is the accept-queue race: a connection reset (or
	// closed) before any response byte, during the handshake or after it.
	failBeforeResp = "reset before response"
	failShort      = "short read" // a response cut off
	failStatus     = "non-2xx"
)

// dialFailure classifies a failed dial: a reset during the handshake is
// the accept-queue race too (the connection was still a request socket in
// the closing listener's queue), and so is a TLS handshake the server
// ended with a close (a connection its listener took, then dropped).
func dialFailure(err error) string {
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) {
		return failBeforeResp
	}
	return failDial
}

// handoverStats counts one handover's requests.
type handoverStats struct {
	mu       sync.Mutex
	ok       map[string]int // by the backend that answered: "A" or "B"
	failures map[string]int // by class, of requests on a new connection
	kaFail   map[string]int // by class, of requests on a reused keep-alive connection
	// kaRetries counts keep-alive requests sent again on a new connection
	// because the server closed the reused one before answering any byte
	// (RFC 9112 section 9.3.1; net/http, curl and browsers do the same).
	kaRetries int
	// goAwayRetries counts HTTP/2 requests sent again on a new connection
	// because a graceful GOAWAY said they were not processed.
	goAwayRetries int
	first         []string
}

func (s *handoverStats) record(backend, class string, reused bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if class == "" {
		s.ok[backend]++
		return
	}
	if reused {
		s.kaFail[class]++
	} else {
		s.failures[class]++
	}
	if len(s.first) < 5 {
		s.first = append(s.first, fmt.Sprintf("%s (reused connection %v): %v", class, reused, err))
	}
}

func (s *handoverStats) served(backend string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ok[backend]
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// exchange sends one GET on c and reads the answer. It returns the backend
// that answered ("A" or "B"), whether the server asked to close, and the
// failure class ("" for a 200 with its whole body).
func exchange(c net.Conn, br *bufio.Reader, cr *countingReader, path string, close bool) (backend string, closing bool, class string, err error) {
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // the slow request waits for B's start
	req := "GET " + path + " HTTP/1.1\r\nHost: handover.test\r\n"
	if close {
		req += "Connection: close\r\n"
	}
	startN, startBuf := cr.n, br.Buffered()
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		return "", true, failBeforeResp, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		if cr.n == startN && startBuf == 0 {
			return "", true, failBeforeResp, err
		}
		return "", true, failShort, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	closing = resp.Close
	backend = resp.Header.Get("X-Backend")
	switch {
	case err != nil || int64(len(body)) != resp.ContentLength:
		return backend, true, failShort, fmt.Errorf("status %d, body %q (%d of %d bytes): %v", resp.StatusCode, body, len(body), resp.ContentLength, err)
	case resp.StatusCode/100 != 2:
		return backend, closing, failStatus, fmt.Errorf("status %d: %q", resp.StatusCode, body)
	case string(body) != "ok "+backend:
		return backend, true, failShort, fmt.Errorf("body %q from backend %q", body, backend)
	}
	return backend, closing, "", nil
}

// h2Unprocessed reports whether err, from an HTTP/2 ClientConn's
// RoundTrip, says that the server did not process the request, which may
// then go on a new connection (RFC 9113 section 6.8); every HTTP/2 client
// sends it again. It is x/net's own rule for that (its Transport's
// canRetryError, whose errors are not exported): the stream was refused,
// it came after the last one a graceful GOAWAY let through, or the GOAWAY
// came before the request went out at all ("client conn not usable").
// The last two count only if the server did send a GOAWAY (goAway): x/net
// says "not usable" of a connection the server dropped too, and that is a
// failure.
func h2Unprocessed(err error, goAway bool) bool {
	var se http2.StreamError
	if errors.As(err, &se) {
		return se.Code == http2.ErrCodeRefusedStream
	}
	msg := err.Error()
	return goAway && (strings.Contains(msg, "graceful shutdown GOAWAY") || strings.Contains(msg, "client conn not usable"))
}

// goAwayWatch is an HTTP/2 client's connection that watches the frames
// the server sends for a GOAWAY: it reads each frame's 9-byte header
// (RFC 9113 section 4.1) and skips its payload.
type goAwayWatch struct {
	net.Conn
	hdr    [9]byte
	n      int    // bytes of the current frame header read
	skip   uint32 // payload bytes of the current frame still to come
	goAway atomic.Bool
}

func (w *goAwayWatch) Read(p []byte) (int, error) {
	n, err := w.Conn.Read(p)
	for b := p[:n]; len(b) > 0; {
		if w.skip > 0 {
			k := min(uint32(len(b)), w.skip)
			w.skip -= k
			b = b[k:]
			continue
		}
		k := copy(w.hdr[w.n:], b)
		w.n += k
		b = b[k:]
		if w.n == len(w.hdr) {
			w.n = 0
			w.skip = uint32(w.hdr[0])<<16 | uint32(w.hdr[1])<<8 | uint32(w.hdr[2])
			if http2.FrameType(w.hdr[3]) == http2.FrameGoAway {
				w.goAway.Store(true)
			}
		}
	}
	return n, err
}

// h2Answer reads resp, an answer to an HTTP/2 client, as exchange reads
// one: the backend that answered and the failure class ("" for a 2xx
// with the backend's whole body).
func h2Answer(resp *http.Response) (backend, class string, err error) {
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	backend = resp.Header.Get("X-Backend")
	switch {
	case err != nil:
		return backend, failShort, err
	case resp.StatusCode/100 != 2:
		return backend, failStatus, fmt.Errorf("status %d: %q", resp.StatusCode, body)
	case string(body) != "ok "+backend:
		return backend, failShort, fmt.Errorf("body %q from backend %q", body, backend)
	}
	return backend, "", nil
}

// listening reports whether process pid holds a listening TCP socket on
// port, from /proc/PID/fd and /proc/net/tcp{,6}.
func listening(t *testing.T, pid, port int) bool {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false // the process is gone
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if ino, ok := strings.CutPrefix(link, "socket:["); ok && err == nil {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	hexPort := fmt.Sprintf(":%04X", port)
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode
			if len(f) >= 10 && strings.HasSuffix(f[1], hexPort) && f[3] == "0A" && inodes[f[9]] {
				return true
			}
		}
	}
	return false
}

// handover runs one restart under load and checks it; migrated says
// whether tcp_migrate_req=1 is in force.
func handover(t *testing.T, migrated bool, mode handoverMode) {
	const (
		freshClients     = 16
		keepAliveClients = 2
		maxRequests      = 40000 // a bound, far above the 2,000-7,000 a run sends
	)
	release := make(chan struct{})
	slowArrived := make(chan struct{}, 1)
	backendFor := func(name string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				slowArrived <- struct{}{}
				<-release
			}
			w.Header().Set("X-Backend", name)
			io.WriteString(w, "ok "+name)
		}))
		t.Cleanup(srv.Close)
		t.Cleanup(func() {
			select {
			case <-release:
			default:
				close(release)
			}
		})
		return strings.TrimPrefix(srv.URL, "http://")
	}
	beA, beB := backendFor("A"), backendFor("B")
	dir := t.TempDir()
	var ca *certstest.CA
	var pair certstest.Pair
	if mode.tls() {
		ca = certstest.NewCA(t, dir, "handover")
		pair = ca.Server("gw.pem", "gw.key", "gw.test")
	}
	// A takes a port the kernel picks; B shares it (reuse_port).
	data, tlsData := "127.0.0.1:0", "127.0.0.1:0"
	writeConfig := func(name string) string {
		cfg := filepath.Join(dir, name+".yaml")
		yaml := "lifecycle: {reuse_port: true, drain_delay: 300ms, shutdown_timeout: 15s}\n"
		if mode == overH2C {
			yaml += "h2c: true\n"
		}
		if mode.tls() {
			yaml += fmt.Sprintf("tls_listen: %q\ntls: {certificates: [{cert_file: %q, key_file: %q}]}\n", tlsData, pair.CertFile, pair.KeyFile)
		}
		if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		return cfg
	}

	type server struct {
		cmd    *exec.Cmd
		admin  string
		done   chan struct{}
		stderr *bytes.Buffer
		mu     sync.Mutex
	}
	startAt := func(name, upstream string) *server {
		s := &server{done: make(chan struct{}), stderr: &bytes.Buffer{}}
		s.cmd = exec.Command(binary, "serve", "--config", writeConfig(name), "--listen", data, "--admin-listen", "127.0.0.1:0",
			"--data-dir", filepath.Join(dir, name), "--default-upstream", upstream)
		s.cmd.Stderr = &lockedWriter{w: s.stderr, mu: &s.mu}
		if err := s.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = s.cmd.Wait(); close(s.done) }()
		t.Cleanup(func() {
			select {
			case <-s.done:
			default:
				_ = s.cmd.Process.Kill()
				<-s.done
			}
		})
		l := waitServing(t, func() string { s.mu.Lock(); defer s.mu.Unlock(); return s.stderr.String() })
		s.admin = l.AdminListen
		if data == "127.0.0.1:0" { // A: B shares the port A took
			data, tlsData = l.Listen, l.TLSListen
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := http.Get("http://" + s.admin + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return s
				}
			}
			select {
			case <-s.done:
				t.Fatalf("graygate %s exited: %s", name, s.stderr)
			default:
			}
			if time.Now().After(deadline) {
				s.mu.Lock()
				defer s.mu.Unlock()
				t.Fatalf("graygate %s not ready: %v\n%s", name, err, s.stderr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	a := startAt("a", beA)
	addr := data
	if mode.tls() {
		addr = tlsData
	}
	_, portStr, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portStr)
	st := &handoverStats{ok: map[string]int{}, failures: map[string]int{}, kaFail: map[string]int{}}
	var sent atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	more := func() bool {
		select {
		case <-stop:
			return false
		default:
			return sent.Add(1) <= maxRequests
		}
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	// A connection lives at most connLife, which outlasts the handover: a
	// keep-alive one is used from its dial to the end. (The handshake's
	// deadline used to stay on the connection, and a keep-alive HTTP/2
	// connection older than 5 s failed its next read on a slow machine.)
	const connLife = 60 * time.Second
	dialProto := func(proto string) (net.Conn, error) {
		c, err := dialer.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		if !mode.tls() {
			_ = c.SetDeadline(time.Now().Add(connLife))
			return c, nil
		}
		tc := tls.Client(c, &tls.Config{RootCAs: ca.Pool, ServerName: "gw.test", NextProtos: []string{proto}})
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, err
		}
		_ = tc.SetDeadline(time.Now().Add(connLife))
		return tc, nil
	}
	dial := func() (net.Conn, error) { return dialProto("http/1.1") }
	url := func(path string) string {
		if mode.tls() {
			return "https://gw.test" + path
		}
		return "http://gw.test" + path
	}
	// sendFresh sends one request on a new connection.
	sendFresh := func() (backend, class string, err error) {
		if !mode.h2() {
			c, err := dial()
			if err != nil {
				return "", dialFailure(err), err
			}
			defer c.Close()
			cr := &countingReader{r: c}
			backend, _, class, err := exchange(c, bufio.NewReader(cr), cr, "/fresh", true)
			return backend, class, err
		}
		var resp *http.Response
		for attempt := 0; ; attempt++ {
			c, err := dialProto("h2")
			if err != nil {
				return "", dialFailure(err), err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			fw := &goAwayWatch{Conn: c}
			cc, err := (&http2.Transport{AllowHTTP: true}).NewClientConn(fw)
			if err != nil {
				return "", failBeforeResp, err
			}
			req, _ := http.NewRequest("GET", url("/fresh"), nil)
			resp, err = cc.RoundTrip(req)
			if err != nil && attempt == 0 && h2Unprocessed(err, fw.goAway.Load()) {
				st.mu.Lock()
				st.goAwayRetries++
				st.mu.Unlock()
				continue
			}
			if err != nil {
				return "", failBeforeResp, err
			}
			break
		}
		return h2Answer(resp)
	}
	for range freshClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for more() {
				backend, class, err := sendFresh()
				st.record(backend, class, false, err)
			}
		}()
	}
	for range keepAliveClients {
		if mode.h2() {
			// An HTTP/2 client keeps one connection, as net/http's does;
			// after a graceful GOAWAY it opens a new one, and sends again
			// the requests the GOAWAY said were not processed.
			tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(context.Context, string, string, *tls.Config) (net.Conn, error) {
				return dialProto("h2")
			}}
			client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer tr.CloseIdleConnections()
				for more() {
					resp, err := client.Get(url("/keepalive"))
					if err != nil {
						st.record("", failBeforeResp, true, err)
						continue
					}
					backend, class, err := h2Answer(resp)
					st.record(backend, class, true, err)
				}
			}()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c net.Conn
			var br *bufio.Reader
			var cr *countingReader
			reused := false
			defer func() {
				if c != nil {
					c.Close()
				}
			}()
			for more() {
				for attempt := 0; ; attempt++ {
					if c == nil {
						var err error
						if c, err = dial(); err != nil {
							st.record("", dialFailure(err), false, err)
							break
						}
						cr = &countingReader{r: c}
						br, reused = bufio.NewReader(cr), false
					}
					backend, closing, class, err := exchange(c, br, cr, "/keepalive", false)
					if closing {
						c.Close()
						c = nil
					}
					if class == failBeforeResp && reused && attempt == 0 {
						// The server closed the idle connection as the request
						// went out; an idempotent request is sent again.
						st.mu.Lock()
						st.kaRetries++
						st.mu.Unlock()
						if c != nil {
							c.Close()
							c = nil
						}
						continue
					}
					// A request on a connection it opened counts with the
					// one-request clients': the accept-queue race can reset it.
					st.record(backend, class, reused, err)
					reused = true
					break
				}
			}
		}()
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopLoad)
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitUntil("traffic on A", func() bool { return st.served("A") >= 200 })

	// A request in flight on A across its shutdown.
	slowDone := make(chan error, 1)
	go func() {
		c, err := dial()
		if err != nil {
			slowDone <- err
			return
		}
		defer c.Close()
		cr := &countingReader{r: c}
		backend, _, class, err := exchange(c, bufio.NewReader(cr), cr, "/slow", true)
		if class != "" || backend != "A" {
			err = fmt.Errorf("the in-flight request: backend %q, %s: %v", backend, class, err)
		}
		slowDone <- err
	}()
	// The slow request may land on A only while A is the only listener.
	select {
	case <-slowArrived:
	case <-time.After(15 * time.Second):
		t.Fatal("the slow request never reached A's upstream")
	}

	startAt("b", beB)
	waitUntil("traffic on B", func() bool { return st.served("B") >= 50 })
	servedA := st.served("A")
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitUntil("A to close its listener", func() bool { return !listening(t, a.cmd.Process.Pid, port) })
	select {
	case <-a.done:
		t.Fatal("A exited with a request in flight")
	default:
	}
	close(release)
	if err := <-slowDone; err != nil {
		t.Error(err)
	}
	select {
	case <-a.done:
	case <-time.After(20 * time.Second):
		t.Fatal("A did not exit after SIGTERM")
	}
	if code := a.cmd.ProcessState.ExitCode(); code != 0 {
		a.mu.Lock()
		t.Errorf("A exited with %d: %s", code, a.stderr)
		a.mu.Unlock()
	}
	afterB := st.served("B")
	waitUntil("traffic on B alone", func() bool { return st.served("B") >= afterB+300 })
	stopLoad()

	st.mu.Lock()
	defer st.mu.Unlock()
	fresh := 0
	for _, n := range st.failures {
		fresh += n
	}
	kaFailed := 0
	for _, n := range st.kaFail {
		kaFailed += n
	}
	total := st.ok["A"] + st.ok["B"] + fresh + kaFailed
	t.Logf("served %d (A %d, %d of them after SIGTERM; B %d); failed: %d on new connections %v, %d on reused ones %v; %d keep-alive requests resent after an idle close; %d HTTP/2 requests resent after a graceful GOAWAY",
		st.ok["A"]+st.ok["B"], st.ok["A"], st.ok["A"]-servedA, st.ok["B"], fresh, st.failures, kaFailed, st.kaFail, st.kaRetries, st.goAwayRetries)
	for _, f := range st.first {
		t.Logf("failure: %s", f)
	}
	if sent.Load() > maxRequests {
		t.Errorf("the clients hit their bound of %d requests before the handover was over", maxRequests)
	}
	if kaFailed != 0 {
		t.Errorf("%d requests on reused keep-alive connections failed: %v", kaFailed, st.kaFail)
	}
	if migrated {
		if fresh != 0 {
			t.Errorf("with tcp_migrate_req=1, %d requests on new connections failed: %v", fresh, st.failures)
		}
		return
	}
	// Without migration the accept-queue race may reset new connections,
	// and nothing else may fail.
	for class, n := range st.failures {
		if class != failBeforeResp {
			t.Errorf("%d requests on new connections failed with %q; only resets before the response are expected without tcp_migrate_req", n, class)
		}
	}
	if fresh > 0 {
		t.Logf("without tcp_migrate_req, %d of %d requests on new connections were reset: the accept-queue race", fresh, total)
	}
}
