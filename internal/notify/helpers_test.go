package notify

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// counts is a Counters that remembers everything.
type counts struct {
	mu       sync.Mutex
	sent     map[[2]string]int
	failed   map[[2]string]int
	dropped  map[string]int
	declared map[string][]string
}

func newCounts() *counts {
	return &counts{sent: map[[2]string]int{}, failed: map[[2]string]int{}, dropped: map[string]int{}, declared: map[string][]string{}}
}

func (c *counts) Declare(r string, events []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.declared[r] = events
}
func (c *counts) Sent(r, e string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent[[2]string{r, e}]++
}
func (c *counts) Failed(r, e string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failed[[2]string{r, e}]++
}
func (c *counts) Dropped(r string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropped[r]++
}

// total returns receiver r's sent, failed and dropped counts.
func (c *counts) total(r string) (sent, failed, dropped int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, n := range c.sent {
		if k[0] == r {
			sent += n
		}
	}
	for k, n := range c.failed {
		if k[0] == r {
			failed += n
		}
	}
	return sent, failed, c.dropped[r]
}

// delivery is one request a test receiver got.
type delivery struct {
	header http.Header
	raw    []byte
	body   map[string]any
}

// sink is a webhook receiver on 127.0.0.1 that records every request and
// answers with what answer returns (200 when answer is nil).
type sink struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	got    []delivery
	answer func(d delivery, n int) int // n counts requests from 1
}

func newSink(t *testing.T, answer func(d delivery, n int) int) *sink {
	s := &sink{t: t, answer: answer}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(400)
			return
		}
		d := delivery{header: r.Header.Clone(), raw: raw}
		if err := json.Unmarshal(raw, &d.body); err != nil {
			t.Errorf("receiver got a body that is not a JSON object: %q: %v", raw, err)
		}
		s.mu.Lock()
		s.got = append(s.got, d)
		n := len(s.got)
		s.mu.Unlock()
		code := 200
		if s.answer != nil {
			code = s.answer(d, n)
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sink) url() string { return s.srv.URL + "/hook/T000/B000/secret-path" }

// requests returns a copy of what the receiver got so far.
func (s *sink) requests() []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]delivery(nil), s.got...)
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// hmacHex is the test's own HMAC-SHA256, independent of Sign.
func hmacHex(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// hanging is a receiver that accepts requests and never answers until the
// client gives up or the test ends.
type hanging struct {
	srv     *httptest.Server
	mu      sync.Mutex
	arrived int
	release chan struct{}
}

func newHanging(t testing.TB) *hanging {
	h := &hanging{release: make(chan struct{})}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.arrived++
		h.mu.Unlock()
		select {
		case <-r.Context().Done():
		case <-h.release:
		}
	}))
	t.Cleanup(func() { close(h.release); h.srv.Close() })
	return h
}

func (h *hanging) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.arrived
}

// noWait is a Sleep that records the waits and returns at once.
type noWait struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (n *noWait) sleep(ctx context.Context, d time.Duration) error {
	n.mu.Lock()
	n.waits = append(n.waits, d)
	n.mu.Unlock()
	return ctx.Err()
}

func (n *noWait) recorded() []time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]time.Duration(nil), n.waits...)
}

func fixedNow() time.Time { return time.Date(2026, 11, 30, 10, 30, 0, 123456789, time.UTC) }

// newSender builds a Sender that Cleanup closes.
func newSender(t *testing.T, o Options) *Sender {
	t.Helper()
	if o.Gateway == "" {
		o.Gateway = "gw-test"
	}
	if o.Now == nil {
		o.Now = fixedNow
	}
	s, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}
