package notify

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/testport"
)

// TestDeliversInOrderSigned: a receiver gets every event once, in the
// order sent, each signed with the HMAC of its exact body, with the text
// and the structured fields.
func TestDeliversInOrderSigned(t *testing.T) {
	secret := []byte("s3cret")
	rcv := newSink(t, nil)
	c := newCounts()
	s := newSender(t, Options{Receivers: []Receiver{{Name: "ops", URL: rcv.url(), Secret: secret}}, Counters: c})
	const n = 100
	types := []string{BreakerOpen, BreakerClose, Rollback, Resume, RolloutStep}
	for i := range n {
		s.Send(Event{Type: types[i%len(types)], Rule: fmt.Sprintf("rule_%d", i%3), Text: fmt.Sprintf("event %d", i),
			Fields: map[string]any{"n": i, "reason": "error rate 34% > 20%"}})
	}
	waitFor(t, "100 deliveries", 10*time.Second, func() bool { return len(rcv.requests()) >= n })
	got := rcv.requests()
	if len(got) != n {
		t.Fatalf("receiver got %d requests, want %d", len(got), n)
	}
	ids := map[string]bool{}
	for i, d := range got {
		b := d.body
		if sig := d.header.Get("X-Graygate-Signature"); sig != "sha256="+hmacHex(secret, d.raw) {
			t.Errorf("request %d: X-Graygate-Signature %q does not sign the body %s", i, sig, d.raw)
		}
		if ct := d.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("request %d: Content-Type %q", i, ct)
		}
		if b["n"] != float64(i) {
			t.Fatalf("request %d carries n=%v: out of order", i, b["n"])
		}
		want := map[string]any{"event": types[i%len(types)], "rule": fmt.Sprintf("rule_%d", i%3), "gateway": "gw-test",
			"text": fmt.Sprintf("[gw-test] event %d", i), "time": "2026-11-30T10:30:00.123456789Z", "reason": "error rate 34% > 20%"}
		for k, v := range want {
			if b[k] != v {
				t.Errorf("request %d: %s = %v, want %v", i, k, b[k], v)
			}
		}
		if h := d.header.Get("X-Graygate-Event"); h != b["event"] {
			t.Errorf("request %d: X-Graygate-Event %q, body event %v", i, h, b["event"])
		}
		id, _ := b["id"].(string)
		if id == "" || ids[id] || d.header.Get("X-Graygate-Delivery") != id {
			t.Errorf("request %d: id %q (header %q) is empty, repeated or differs", i, id, d.header.Get("X-Graygate-Delivery"))
		}
		ids[id] = true
	}
	// The last delivery is counted once its answer is read, which may be
	// just after the receiver has seen it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		sent, failed, dropped := c.total("ops")
		if sent == n && failed == 0 && dropped == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("counted sent %d, failed %d, dropped %d; want %d, 0, 0", sent, failed, dropped, n)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !slices.Equal(c.declared["ops"], Types()) {
		t.Errorf("declared %v, want every type", c.declared["ops"])
	}
}

// TestBodyFields: a field named like a body field cannot override it, a
// value JSON cannot encode is sent as text, an event without text gets a
// generic one, and no signature is sent without a secret.
func TestBodyFields(t *testing.T) {
	rcv := newSink(t, nil)
	s := newSender(t, Options{Receivers: []Receiver{{Name: "ops", URL: rcv.url()}}})
	s.Send(Event{Type: SRM, Rule: "exp", Fields: map[string]any{"text": "forged", "event": "x", "gateway": "evil", "p_value": math.NaN(), "groups": []string{"A", "B"}}})
	s.Send(Event{Type: Rollback, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("CST", 8*3600)), Text: "p99 > 500ms & <b>"})
	waitFor(t, "two deliveries", 10*time.Second, func() bool { return len(rcv.requests()) == 2 })
	got := rcv.requests()
	b := got[0].body
	if b["text"] != "[gw-test] srm on rule exp" || b["event"] != "srm" || b["gateway"] != "gw-test" {
		t.Errorf("body fields overridden: %s", got[0].raw)
	}
	if b["p_value"] != "NaN" || fmt.Sprint(b["groups"]) != "[A B]" {
		t.Errorf("fields: %s", got[0].raw)
	}
	if h := got[0].header.Get("X-Graygate-Signature"); h != "" {
		t.Errorf("signed without a secret: %q", h)
	}
	// The sentence is escaped as Slack asks (a <!channel> in it must not
	// ping anyone), once, and not by JSON's HTML escaping on top.
	if b := got[1].body; b["text"] != "[gw-test] p99 &gt; 500ms &amp; &lt;b&gt;" || b["rule"] != "" || b["time"] != "2026-01-01T19:04:05Z" {
		t.Errorf("global event: %s", got[1].raw)
	}
	if !strings.Contains(string(got[1].raw), `"text":"[gw-test] p99 &gt; 500ms &amp; &lt;b&gt;"`) {
		t.Errorf("the body escapes the text twice: %s", got[1].raw)
	}
	if b := got[0].body; b["text"] != "[gw-test] srm on rule exp" {
		t.Errorf("generic text: %v", b["text"])
	}
}

// TestEventFilter: a receiver gets only the types it lists; unknown types
// go nowhere.
func TestEventFilter(t *testing.T) {
	only := newSink(t, nil)
	all := newSink(t, nil)
	c := newCounts()
	s := newSender(t, Options{Counters: c, Receivers: []Receiver{
		{Name: "breakers", URL: only.url(), Events: []string{BreakerOpen, BreakerClose}},
		{Name: "all", URL: all.url()},
	}})
	for _, typ := range []string{Rollback, BreakerOpen, "brekaer_open", Resume, BreakerClose} {
		s.Send(Event{Type: typ})
	}
	waitFor(t, "deliveries", 10*time.Second, func() bool { return len(all.requests()) == 4 && len(only.requests()) == 2 })
	var a, o []any
	for _, d := range all.requests() {
		a = append(a, d.body["event"])
	}
	for _, d := range only.requests() {
		o = append(o, d.body["event"])
	}
	if fmt.Sprint(a) != "[rollback breaker_open resume breaker_close]" || fmt.Sprint(o) != "[breaker_open breaker_close]" {
		t.Errorf("all got %v, breakers got %v", a, o)
	}
	if !slices.Equal(c.declared["breakers"], []string{BreakerOpen, BreakerClose}) {
		t.Errorf("declared %v", c.declared["breakers"])
	}
}

// TestRetriedUntilRecovered: events sent while the receiver answers 500
// are retried, delivered once it recovers, each exactly once, in order.
func TestRetriedUntilRecovered(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	rcv := newSink(t, func(d delivery, n int) int {
		if down.Load() {
			return 500
		}
		return 200
	})
	c := newCounts()
	s := newSender(t, Options{Counters: c, Receivers: []Receiver{{Name: "ops", URL: rcv.url()}},
		Delivery: Delivery{MaxAttempts: 1000, Backoff: Backoff{Base: time.Millisecond, Max: 10 * time.Millisecond}}})
	s.Send(Event{Type: BreakerOpen, Fields: map[string]any{"n": 1}})
	s.Send(Event{Type: BreakerClose, Fields: map[string]any{"n": 2}})
	waitFor(t, "three failed attempts", 10*time.Second, func() bool { return len(rcv.requests()) >= 3 })
	down.Store(false)
	waitFor(t, "both events delivered", 10*time.Second, func() bool { sent, _, _ := c.total("ops"); return sent == 2 })
	got := rcv.requests()
	// Every request before the last two was a failed attempt of event 1.
	ids := map[string]int{}
	for i, d := range got {
		ids[d.body["id"].(string)]++
		if want := float64(1); i < len(got)-1 && d.body["n"] != want {
			t.Fatalf("request %d carries n=%v before event 1 was delivered", i, d.body["n"])
		}
	}
	if last := got[len(got)-1].body["n"]; last != float64(2) || len(ids) != 2 || ids[got[len(got)-1].body["id"].(string)] != 1 {
		t.Errorf("event 2 should be sent once, after event 1: last n=%v, ids %v", last, ids)
	}
	if _, failed, dropped := c.total("ops"); failed != 0 || dropped != 0 {
		t.Errorf("failed %d, dropped %d", failed, dropped)
	}
}

// TestGivesUpAndMovesOn: an event every attempt of which fails is given
// up on after MaxAttempts, with the backoff schedule between attempts,
// counted as failed; the next event is delivered.
func TestGivesUpAndMovesOn(t *testing.T) {
	rcv := newSink(t, func(d delivery, n int) int {
		if d.body["event"] == Rollback {
			return 502
		}
		return 204
	})
	c := newCounts()
	w := &noWait{}
	s := newSender(t, Options{Counters: c, Receivers: []Receiver{{Name: "ops", URL: rcv.url()}}, Sleep: w.sleep,
		Jitter: func() float64 { return 0.5 }, Delivery: Delivery{MaxAttempts: 4, Backoff: Backoff{Base: 100 * time.Millisecond, Max: 300 * time.Millisecond}}})
	s.Send(Event{Type: Rollback})
	s.Send(Event{Type: Resume})
	waitFor(t, "the second event", 10*time.Second, func() bool { sent, _, _ := c.total("ops"); return sent == 1 })
	var evs []any
	for _, d := range rcv.requests() {
		evs = append(evs, d.body["event"])
	}
	if fmt.Sprint(evs) != "[rollback rollback rollback rollback resume]" {
		t.Errorf("receiver saw %v", evs)
	}
	// 0.5 jitter: d/2 + d/4 for d = 100ms, 200ms, then the 300ms cap.
	if got, want := w.recorded(), []time.Duration{75 * time.Millisecond, 150 * time.Millisecond, 225 * time.Millisecond}; !slices.Equal(got, want) {
		t.Errorf("waits %v, want %v", got, want)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed[[2]string{"ops", Rollback}] != 1 || c.sent[[2]string{"ops", Resume}] != 1 {
		t.Errorf("failed %v, sent %v", c.failed, c.sent)
	}
}

// TestNotRetried: a 4xx refuses the event for good, and a redirect is not
// followed (a POST would arrive as a GET without its body); 429 and 503
// are retried after the Retry-After they ask for, capped by Backoff.Max.
func TestNotRetried(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	t.Cleanup(other.Close)
	tests := []struct {
		name     string
		answers  []int // then 200
		header   http.Header
		attempts int
		failed   bool
		waits    []time.Duration
	}{
		{"400 is final", []int{400}, nil, 1, true, nil},
		{"410 is final", []int{410}, nil, 1, true, nil},
		{"302 is not followed", []int{302}, http.Header{"Location": {other.URL}}, 1, true, nil},
		{"408 is retried", []int{408}, nil, 2, false, []time.Duration{750 * time.Millisecond}},
		{"429 waits as asked", []int{429}, http.Header{"Retry-After": {"7"}}, 2, false, []time.Duration{7 * time.Second}},
		{"503 with a longer Retry-After is capped", []int{503}, http.Header{"Retry-After": {"3600"}}, 2, false, []time.Duration{30 * time.Second}},
		{"a Retry-After shorter than the backoff is not", []int{503}, http.Header{"Retry-After": {"0"}}, 2, false, []time.Duration{750 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				i := int(n.Add(1)) - 1
				if i < len(tt.answers) {
					for k, v := range tt.header {
						w.Header()[k] = v
					}
					w.WriteHeader(tt.answers[i])
					fmt.Fprint(w, "no_service")
					return
				}
				w.WriteHeader(200)
			}))
			t.Cleanup(srv.Close)
			c := newCounts()
			wt := &noWait{}
			s := newSender(t, Options{Counters: c, Receivers: []Receiver{{Name: "r", URL: srv.URL}}, Sleep: wt.sleep,
				Jitter: func() float64 { return 0.5 }, Delivery: Delivery{MaxAttempts: 3}})
			s.Send(Event{Type: Rollback})
			waitFor(t, "an outcome", 10*time.Second, func() bool { sent, failed, _ := c.total("r"); return sent+failed == 1 })
			_, failed, _ := c.total("r")
			if int(n.Load()) != tt.attempts || (failed == 1) != tt.failed || !slices.Equal(wt.recorded(), tt.waits) {
				t.Errorf("attempts %d (want %d), failed %d (want %v), waits %v (want %v)", n.Load(), tt.attempts, failed, tt.failed, wt.recorded(), tt.waits)
			}
		})
	}
	if elsewhere.Load() != 0 {
		t.Errorf("a redirect was followed %d times", elsewhere.Load())
	}
}

// TestDeadReceiversDoNotHoldOthers: a receiver whose port is closed and
// one that never answers lose only their own events (dropped once their
// queue is full, failed after their attempts), Send never waits for them,
// and a healthy receiver beside them gets every event in order. Close
// gives up on the hung one at its deadline and counts what it held.
func TestDeadReceiversDoNotHoldOthers(t *testing.T) {
	healthy := newSink(t, nil)
	hang := newHanging(t)
	c := newCounts()
	const queue = 4
	s, err := New(Options{Gateway: "gw", Counters: c, Delivery: Delivery{QueueSize: queue, MaxAttempts: 2, Timeout: time.Minute,
		Backoff: Backoff{Base: time.Millisecond, Max: 2 * time.Millisecond}},
		Receivers: []Receiver{
			{Name: "refused", URL: "http://" + testport.Refused(t) + "/hook"},
			{Name: "hung", URL: hang.srv.URL},
			{Name: "healthy", URL: healthy.url()},
		}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	s.Send(Event{Type: BreakerOpen, Fields: map[string]any{"n": 0}})
	waitFor(t, "the hung receiver to hold the first event", 10*time.Second, func() bool { return hang.count() == 1 })
	for i := 1; i < n; i++ {
		start := time.Now()
		s.Send(Event{Type: BreakerOpen, Fields: map[string]any{"n": i}})
		// The hung receiver holds its attempt for a minute: a Send that
		// waited for it would take that long.
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("Send %d took %s", i, d)
		}
		// Every queue holds 4: pace the events so the healthy receiver's
		// never fills, while the hung one's stays full.
		waitFor(t, "the healthy receiver to get the event", 10*time.Second, func() bool { return len(healthy.requests()) == i+1 })
	}
	for i, d := range healthy.requests() {
		if d.body["n"] != float64(i) {
			t.Fatalf("healthy receiver: request %d carries n=%v", i, d.body["n"])
		}
	}
	waitFor(t, "the refused receiver's events to be accounted for", 10*time.Second, func() bool {
		sent, failed, dropped := c.total("refused")
		return sent == 0 && failed+dropped == n
	})
	if _, failed, _ := c.total("refused"); failed == 0 {
		t.Error("no event counted as failed for the refused receiver")
	}
	// One in flight, queue in the queue, the rest dropped.
	if _, _, dropped := c.total("hung"); dropped != n-1-queue {
		t.Errorf("hung receiver: %d dropped, want %d", dropped, n-1-queue)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := s.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want the deadline", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Close took %s with a 200ms deadline", d)
	}
	if sent, failed, dropped := c.total("hung"); sent != 0 || failed != 0 || dropped != n {
		t.Errorf("hung receiver after Close: sent %d, failed %d, dropped %d; want 0, 0, %d", sent, failed, dropped, n)
	}
	if hang.count() != 1 {
		t.Errorf("the hung receiver got %d requests, want 1", hang.count())
	}
}

// TestCloseDrains: Close delivers what is queued before it returns; Send
// after Close drops.
func TestCloseDrains(t *testing.T) {
	var calls atomic.Int32
	rcv := newSink(t, func(d delivery, n int) int {
		if calls.Add(1)%3 == 0 {
			return 500 // every third attempt fails once: draining retries
		}
		return 200
	})
	c := newCounts()
	s, err := New(Options{Gateway: "gw", Counters: c, Receivers: []Receiver{{Name: "ops", URL: rcv.url()}},
		Delivery: Delivery{Backoff: Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		s.Send(Event{Type: RolloutStep, Fields: map[string]any{"step": i}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if sent, failed, dropped := c.total("ops"); sent != 20 || failed != 0 || dropped != 0 {
		t.Errorf("after Close: sent %d, failed %d, dropped %d", sent, failed, dropped)
	}
	s.Send(Event{Type: RolloutStep})
	if _, _, dropped := c.total("ops"); dropped != 1 {
		t.Errorf("Send after Close: dropped %d, want 1", dropped)
	}
	if err := s.Reconfigure("gw", nil); err == nil {
		t.Error("Reconfigure after Close succeeded")
	}
	if err := s.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestReconfigureKeepsQueues: a receiver that keeps its name keeps its
// queue across Reconfigure, in order, and its queued events go to its new
// URL under its new secret; a removed receiver's queue is counted as
// dropped; a new receiver gets what is sent after.
func TestReconfigureKeepsQueues(t *testing.T) {
	broken := newSink(t, func(delivery, int) int { return 503 })
	fixed := newSink(t, nil)
	added := newSink(t, nil)
	hang := newHanging(t)
	c := newCounts()
	s := newSender(t, Options{Counters: c, Delivery: Delivery{MaxAttempts: 1 << 20, Backoff: Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond}},
		Receivers: []Receiver{
			{Name: "ops", URL: broken.url(), Secret: []byte("old")},
			{Name: "gone", URL: hang.srv.URL},
		}})
	for i := range 5 {
		s.Send(Event{Type: BreakerOpen, Fields: map[string]any{"n": i}})
	}
	waitFor(t, "the broken URL to fail twice and the hung one to hold an event", 10*time.Second, func() bool {
		return len(broken.requests()) >= 2 && hang.count() == 1
	})
	if err := s.Reconfigure("gw-renamed", []Receiver{{Name: "oops", URL: "ftp://x"}}); err == nil {
		t.Fatal("Reconfigure accepted an ftp URL")
	}
	if err := s.Reconfigure("gw-renamed", []Receiver{
		{Name: "ops", URL: fixed.url(), Secret: []byte("new")},
		{Name: "added", URL: added.url(), Events: []string{BreakerOpen}},
	}); err != nil {
		t.Fatal(err)
	}
	s.Send(Event{Type: BreakerOpen, Fields: map[string]any{"n": 5}})
	waitFor(t, "the fixed URL to get all six", 10*time.Second, func() bool { return len(fixed.requests()) == 6 })
	for i, d := range fixed.requests() {
		if d.body["n"] != float64(i) {
			t.Fatalf("request %d carries n=%v", i, d.body["n"])
		}
		if sig := d.header.Get("X-Graygate-Signature"); sig != "sha256="+hmacHex([]byte("new"), d.raw) {
			t.Errorf("request %d not signed with the new secret: %q", i, sig)
		}
		want := "gw-test"
		if i == 5 {
			want = "gw-renamed" // encoded after the reload
		}
		if d.body["gateway"] != want {
			t.Errorf("request %d: gateway %v, want %s", i, d.body["gateway"], want)
		}
	}
	waitFor(t, "the added receiver", 10*time.Second, func() bool { return len(added.requests()) == 1 })
	if n := added.requests()[0].body["n"]; n != float64(5) {
		t.Errorf("the added receiver got n=%v", n)
	}
	waitFor(t, "the removed receiver's events to be dropped", 10*time.Second, func() bool { _, _, d := c.total("gone"); return d == 5 })
	waitFor(t, "ops's deliveries to be counted", 10*time.Second, func() bool { sent, _, _ := c.total("ops"); return sent >= 6 })
	if sent, failed, _ := c.total("ops"); sent != 6 || failed != 0 {
		t.Errorf("ops: sent %d, failed %d", sent, failed)
	}
}

// TestCheck: every problem of a receiver list, with no URL in any message.
func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		rs   []Receiver
		want []string
	}{
		{"ok", []Receiver{{Name: "a", URL: "https://hooks.example.com/T/B/x"}, {Name: "b", URL: "http://127.0.0.1:9/h", Events: []string{SRM}}}, nil},
		{"no name", []Receiver{{URL: "http://h/"}}, []string{"receiver 0: no name"}},
		{"twice", []Receiver{{Name: "a", URL: "http://h/"}, {Name: "a", URL: "http://h/"}}, []string{`receiver "a": the name is used twice`}},
		{"scheme", []Receiver{{Name: "a", URL: "ftp://h/secret-token"}}, []string{`url must be an http or https URL, got scheme "ftp"`}},
		{"relative", []Receiver{{Name: "a", URL: "/secret-token"}}, []string{"got no scheme"}},
		{"no host", []Receiver{{Name: "a", URL: "http:///secret-token"}}, []string{"has no host"}},
		{"unparsable", []Receiver{{Name: "a", URL: "http://h/%zzsecret-token"}}, []string{"is not a valid URL"}},
		{"unknown event", []Receiver{{Name: "a", URL: "http://h/", Events: []string{"brekaer_open"}}}, []string{`unknown event "brekaer_open"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.rs)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Check = %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check passed, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check = %v, want %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "secret-token") {
				t.Errorf("the error quotes the URL: %v", err)
			}
			if _, nerr := New(Options{Receivers: tt.rs}); nerr == nil {
				t.Error("New accepted what Check refuses")
			}
		})
	}
}

// TestErrorsHideTheURL: what a failed attempt reports never carries the
// webhook's path, which is a chat webhook's credential.
func TestErrorsHideTheURL(t *testing.T) {
	s := newSender(t, Options{})
	addr := testport.Refused(t)
	res := s.attempt(context.Background(), &target{url: "http://" + addr + "/services/T0/B0/credential"}, job{event: SRM, body: []byte("{}")})
	if res.err == nil || !res.retry {
		t.Fatalf("attempt on a closed port = %+v", res)
	}
	if strings.Contains(res.err.Error(), "credential") {
		t.Errorf("the error carries the URL: %v", res.err)
	}
}

// TestCloseExpiredNothingQueued: Close with a context that has already
// expired (a shutdown past its deadline) reports nothing dropped when
// nothing was queued; it used to say so about half the time.
func TestCloseExpiredNothingQueued(t *testing.T) {
	rcv := newSink(t, func(delivery, int) int { return 200 })
	for i := range 20 {
		s, err := New(Options{Gateway: "gw", Counters: newCounts(), Receivers: []Receiver{{Name: "ops", URL: rcv.url()}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := s.Close(ctx); err != nil {
			t.Fatalf("Close #%d with an expired context and empty queues: %v", i, err)
		}
	}
}
