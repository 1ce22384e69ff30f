package notify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Delivery.
const (
	DefaultQueueSize   = 1024
	DefaultMaxAttempts = 5
	DefaultTimeout     = 5 * time.Second
	DefaultBackoffBase = time.Second
	DefaultBackoffMax  = 30 * time.Second
)

// Receiver is one webhook.
type Receiver struct {
	// Name identifies the receiver in metrics and logs, which never show
	// its URL (a chat webhook's URL is its credential).
	Name string
	// URL is where the events are POSTed: http or https.
	URL string
	// Events are the event types it gets; empty means every type.
	Events []string
	// Secret, when set, signs every body: X-Graygate-Signature is
	// "sha256=" and the hex HMAC-SHA256 of the body under Secret.
	Secret []byte
}

// Delivery bounds how hard a Sender tries. Zero fields take the defaults.
type Delivery struct {
	// QueueSize is how many events wait per receiver (default 1024);
	// beyond it Send drops the event for that receiver and counts it.
	QueueSize int
	// MaxAttempts is how many times one event is tried (default 5).
	MaxAttempts int
	// Timeout bounds one attempt: connecting, sending, and the receiver's
	// whole answer (default 5s).
	Timeout time.Duration
	// Backoff spaces the attempts (default 1s doubling, at most 30s).
	Backoff Backoff
}

func (d Delivery) withDefaults() Delivery {
	if d.QueueSize <= 0 {
		d.QueueSize = DefaultQueueSize
	}
	if d.MaxAttempts <= 0 {
		d.MaxAttempts = DefaultMaxAttempts
	}
	if d.Timeout <= 0 {
		d.Timeout = DefaultTimeout
	}
	if d.Backoff.Base <= 0 {
		d.Backoff.Base = DefaultBackoffBase
	}
	if d.Backoff.Max <= 0 {
		d.Backoff.Max = DefaultBackoffMax
	}
	d.Backoff.Max = max(d.Backoff.Max, d.Backoff.Base)
	return d
}

// Counters count what happened to events, per receiver. The gateway's
// implementation is internal/metrics' Notifications. Implementations must
// be safe for concurrent use.
type Counters interface {
	// Declare announces a receiver and the event types it gets, so that
	// its series exist (at 0) before anything happened.
	Declare(receiver string, events []string)
	// Sent counts an event the receiver accepted (a 2xx answer).
	Sent(receiver, event string)
	// Failed counts an event given up on: every attempt failed, or the
	// receiver refused it for good (a 4xx other than 408, 425 and 429).
	Failed(receiver, event string)
	// Dropped counts an event never delivered nor given up on: the
	// receiver's queue was full, or the receiver was removed or the Sender
	// closed before it was delivered.
	Dropped(receiver string)
}

// Options configure New.
type Options struct {
	// Gateway names this gateway in every body and text (the config's
	// name, or the hostname).
	Gateway   string
	Receivers []Receiver
	Delivery  Delivery
	// Client sends the requests; nil is a private client (never
	// http.DefaultClient) that does not follow redirects. Per-attempt
	// timeouts come from Delivery.Timeout either way.
	Client   *http.Client
	Counters Counters
	Logger   *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Jitter returns values uniform in [0, 1) for the backoff (default
	// math/rand/v2).
	Jitter func() float64
	// Sleep waits d or until ctx is done, returning ctx.Err() then
	// (default: a timer). Tests inject one to run retries without waiting.
	Sleep func(ctx context.Context, d time.Duration) error
	// Random seeds the delivery ids (default crypto/rand).
	Random io.Reader
}

// Sender delivers events to webhooks: each receiver has its own bounded
// queue and one goroutine that delivers the queue in order, retrying each
// event with backoff before it moves on to the next. A receiver that is
// slow or down delays only its own queue; Send never blocks.
//
// All methods are safe for concurrent use.
type Sender struct {
	o       Options
	d       Delivery
	client  *http.Client
	log     *slog.Logger
	idBase  string
	seq     atomic.Uint64
	gateway atomic.Pointer[string]

	ctx    context.Context // canceled when Close gives up draining
	cancel context.CancelFunc
	// draining is closed by Close: workers deliver what is queued and exit.
	draining chan struct{}
	wg       sync.WaitGroup

	mu        sync.Mutex // serializes Reconfigure and Close
	closed    bool
	receivers atomic.Pointer[[]*receiver]
}

// receiver is one webhook's queue and delivery state.
type receiver struct {
	name   string
	queue  chan job
	conf   atomic.Pointer[target]
	ctx    context.Context // canceled when the receiver is removed
	cancel context.CancelFunc

	mu     sync.RWMutex // Send holds it for reading while it enqueues
	closed bool         // no more enqueues: removed, or the Sender closing
	// dropping is set from the first drop until an enqueue succeeds again,
	// so that a full queue is logged once, not once per event.
	dropping atomic.Bool
}

// target is the part of a receiver that a reload may change in place.
type target struct {
	url    string
	secret []byte
	events map[string]bool // nil: every event
}

func (t *target) wants(event string) bool { return t.events == nil || t.events[event] }

// job is one serialized event on its way to one receiver. body is shared
// by every receiver and never modified.
type job struct {
	event, id string
	body      []byte
}

// New checks the receivers and starts one delivery goroutine per
// receiver. Close stops them.
func New(o Options) (*Sender, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Jitter == nil {
		o.Jitter = mrand.Float64
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.Random == nil {
		o.Random = rand.Reader
	}
	if o.Counters == nil {
		o.Counters = nopCounters{}
	}
	if err := Check(o.Receivers); err != nil {
		return nil, err
	}
	var seed [8]byte
	if _, err := io.ReadFull(o.Random, seed[:]); err != nil {
		return nil, fmt.Errorf("notify: read a delivery id seed: %w", err)
	}
	s := &Sender{o: o, d: o.Delivery.withDefaults(), client: o.Client, log: o.Logger.With("component", "notify"),
		idBase: hex.EncodeToString(seed[:]), draining: make(chan struct{})}
	if s.client == nil {
		s.client = newClient(s.d.Timeout)
	}
	s.gateway.Store(&o.Gateway)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	rs := make([]*receiver, 0, len(o.Receivers))
	for _, r := range o.Receivers {
		rs = append(rs, s.start(r))
	}
	s.receivers.Store(&rs)
	return s, nil
}

// newClient is a client of its own: no shared transport, no redirects (a
// POST that is redirected would arrive as a GET without its body; a 3xx
// is a failed attempt instead), proxies from the environment as net/http's
// default does, and dial and header timeouts within the attempt's.
func newClient(timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          16,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
	}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Check reports every problem with a list of receivers: names must be set
// and unique, URLs http or https with a host, events known. Errors never
// quote a URL, which may carry a credential.
func Check(rs []Receiver) error {
	var errs []error
	seen := map[string]bool{}
	for i, r := range rs {
		switch {
		case r.Name == "":
			errs = append(errs, fmt.Errorf("receiver %d: no name", i))
		case seen[r.Name]:
			errs = append(errs, fmt.Errorf("receiver %q: the name is used twice", r.Name))
		}
		seen[r.Name] = true
		if err := CheckURL(r.URL); err != nil {
			errs = append(errs, fmt.Errorf("receiver %q: url %w", r.Name, err))
		}
		for _, e := range r.Events {
			if !Known(e) {
				errs = append(errs, fmt.Errorf("receiver %q: unknown event %q", r.Name, e))
			}
		}
	}
	return errors.Join(errs...)
}

// CheckURL checks that u is an absolute http or https URL with a host. Its
// errors name the scheme at most, never the URL.
func CheckURL(u string) error {
	p, err := url.Parse(u)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("is not a valid URL: %w", err)
	}
	if p.Scheme != "http" && p.Scheme != "https" {
		if p.Scheme == "" {
			return errors.New("must be an http or https URL, got no scheme")
		}
		return fmt.Errorf("must be an http or https URL, got scheme %q", p.Scheme)
	}
	if p.Host == "" {
		return errors.New("has no host")
	}
	if p.Hostname() == "" {
		// "http://:1234/" parses, and would be sent to this host.
		return errors.New("has no host name, only a port")
	}
	return nil
}

func newTarget(r Receiver) *target {
	t := &target{url: r.URL, secret: append([]byte(nil), r.Secret...)}
	if len(r.Secret) == 0 {
		t.secret = nil
	}
	if len(r.Events) > 0 {
		t.events = make(map[string]bool, len(r.Events))
		for _, e := range r.Events {
			t.events[e] = true
		}
	}
	return t
}

// start makes a receiver and its delivery goroutine. The caller holds
// s.mu, or is New.
func (s *Sender) start(r Receiver) *receiver {
	rc := &receiver{name: r.Name, queue: make(chan job, s.d.QueueSize)}
	rc.conf.Store(newTarget(r))
	rc.ctx, rc.cancel = context.WithCancel(s.ctx)
	s.declare(r)
	s.wg.Add(1)
	go s.run(rc)
	return rc
}

func (s *Sender) declare(r Receiver) {
	events := r.Events
	if len(events) == 0 {
		events = Types()
	}
	s.o.Counters.Declare(r.Name, events)
}

// Send queues ev for every receiver that subscribes to its type and
// returns at once: a receiver whose queue is full loses the event, which
// is counted as dropped (and logged when its queue first fills). It never
// blocks on the network, so it may be called from the data plane. An
// unknown type is logged and sent nowhere.
func (s *Sender) Send(ev Event) {
	rs := *s.receivers.Load()
	if len(rs) == 0 {
		return
	}
	if !Known(ev.Type) {
		s.log.Error("notification of an unknown event type not sent", "event", ev.Type, "rule", ev.Rule)
		return
	}
	var j job
	for _, r := range rs {
		if !r.conf.Load().wants(ev.Type) {
			continue
		}
		if j.body == nil {
			j = s.encode(ev)
		}
		s.enqueue(r, j)
	}
}

func (s *Sender) enqueue(r *receiver, j job) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		s.o.Counters.Dropped(r.name)
		return
	}
	select {
	case r.queue <- j:
		r.dropping.Store(false)
	default:
		s.o.Counters.Dropped(r.name)
		if !r.dropping.Swap(true) {
			s.log.Warn("notification queue full: dropping events until it drains", "receiver", r.name, "event", j.event, "queue", cap(r.queue))
		}
	}
}

// Reconfigure makes rs the receivers, in place, keeping every queue whose
// receiver keeps its name: queued events stay queued, in order, and go to
// that receiver's new URL with its new secret from their next attempt on;
// its new events list applies to events sent from now on. A receiver no
// longer listed stops after its current attempt, and the events still in
// its queue are counted as dropped. New receivers start empty. gateway
// replaces the gateway's name in bodies encoded from now on. A list that
// fails Check changes nothing.
func (s *Sender) Reconfigure(gateway string, rs []Receiver) error {
	if err := Check(rs); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("notify: reconfigure a closed sender")
	}
	s.gateway.Store(&gateway)
	old := map[string]*receiver{}
	for _, r := range *s.receivers.Load() {
		old[r.name] = r
	}
	next := make([]*receiver, 0, len(rs))
	for _, r := range rs {
		if rc, ok := old[r.Name]; ok {
			rc.conf.Store(newTarget(r))
			s.declare(r)
			delete(old, r.Name)
			next = append(next, rc)
			continue
		}
		next = append(next, s.start(r))
	}
	s.receivers.Store(&next)
	for _, rc := range old {
		rc.mu.Lock()
		rc.closed = true
		rc.mu.Unlock()
		rc.cancel()
	}
	return nil
}

// emptyDrainWait is how long Close, its context done, still waits for the
// senders of empty queues to stop.
const emptyDrainWait = 100 * time.Millisecond

// Close stops taking events and delivers what is queued, with retries,
// until every queue is empty or ctx is done; then it cancels the attempts
// in flight, counts what was left as dropped, and returns ctx's error.
// It waits for every delivery goroutine to exit. Send after Close drops.
func (s *Sender) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	for _, r := range *s.receivers.Load() {
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
	}
	close(s.draining)
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		// A context that had already expired (a shutdown past its
		// deadline) still gives queues with nothing in them a moment to
		// be seen empty: only what was really queued is reported dropped.
		select {
		case <-done:
		case <-time.After(emptyDrainWait):
			err = fmt.Errorf("notify: drain the queues: %w", ctx.Err())
		}
	}
	s.cancel()
	<-done // every wait and attempt ends promptly once canceled
	s.client.CloseIdleConnections()
	return err
}

type nopCounters struct{}

func (nopCounters) Declare(string, []string) {}
func (nopCounters) Sent(string, string)      {}
func (nopCounters) Failed(string, string)    {}
func (nopCounters) Dropped(string)           {}
