package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Header names.
const (
	// SignatureHeader carries "sha256=" and the hex HMAC-SHA256 of the
	// exact body bytes under the receiver's secret (GitHub's
	// X-Hub-Signature-256 and Flagger's scheme).
	SignatureHeader = "X-Graygate-Signature"
	// EventHeader carries the event type, so a receiver can route before
	// it parses the body.
	EventHeader = "X-Graygate-Event"
	// DeliveryHeader carries the event's id, the body's "id": the same on
	// every attempt, so a receiver can drop the duplicates that
	// at-least-once delivery may bring.
	DeliveryHeader = "X-Graygate-Delivery"
)

// Sign returns the X-Graygate-Signature value of body under secret:
// "sha256=" and the lowercase hex HMAC-SHA256 (RFC 2104) of body.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether signature is body's X-Graygate-Signature under
// secret, comparing in constant time. It is what a Go receiver runs.
func Verify(secret, body []byte, signature string) bool {
	hexSum, ok := strings.CutPrefix(signature, "sha256=")
	if !ok {
		return false
	}
	got, err := hex.DecodeString(hexSum)
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hmac.Equal(got, m.Sum(nil))
}

// encode serializes ev once for every receiver: the body's own fields,
// then ev.Fields beside them. A field that JSON cannot encode (NaN, a
// channel) is sent as its fmt.Sprint text rather than losing the event.
func (s *Sender) encode(ev Event) job {
	at := ev.Time
	if at.IsZero() {
		at = s.o.Now()
	}
	gw := *s.gateway.Load()
	text := ev.Text
	if text == "" {
		text = ev.Type
		if ev.Rule != "" {
			text += " on rule " + ev.Rule
		}
	}
	id := s.idBase + "-" + strconv.FormatUint(s.seq.Add(1), 10)
	m := make(map[string]any, len(ev.Fields)+len(reserved))
	for k, v := range ev.Fields {
		if isReserved(k) {
			s.log.Warn("notification field shadows a body field; dropped", "event", ev.Type, "field", k)
			continue
		}
		raw, err := marshal(v)
		if err != nil {
			raw, _ = marshal(fmt.Sprint(v))
		}
		m[k] = json.RawMessage(raw)
	}
	m["id"], m["event"], m["rule"], m["gateway"] = id, ev.Type, ev.Rule, gw
	m["time"] = at.UTC().Format(time.RFC3339Nano)
	m["text"] = chatEscaper.Replace("[" + gw + "] " + text)
	body, err := marshal(m)
	if err != nil { // unreachable: every value is a string or valid raw JSON
		body = []byte(`{"event":` + strconv.Quote(ev.Type) + `}`)
	}
	return job{event: ev.Type, id: id, body: body}
}

// chatEscaper escapes the sentence as Slack asks of message text (&, <
// and > as &amp;, &lt; and &gt;, which Slack and Mattermost show as the
// characters): an operator's reason, or any text an event quotes, cannot
// become a <!channel> ping, a mention or a link.
//
// Mattermost also mentions on plain text: it splits a message into words
// at every character that is not a letter, a digit or one of : . - _ @,
// and "@channel", "@all", "@here" or "@name" as a word pings. A WORD
// JOINER (U+2060) after every "@" is such a split, and invisible, so a
// reason that says "@channel" reads the same and pings no one.
var chatEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "@", "@\u2060")

// marshal is json.Marshal without HTML escaping, so that a reason's ">"
// reaches a chat as ">", and a receiver that logs the raw body can read it.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func isReserved(k string) bool {
	for _, r := range reserved {
		if k == r {
			return true
		}
	}
	return false
}

// run is a receiver's delivery goroutine: it delivers its queue in order
// until the receiver is removed (its ctx is canceled), or, once Close
// started draining, until the queue is empty.
func (s *Sender) run(r *receiver) {
	defer s.wg.Done()
	defer s.abandon(r)
	for {
		select {
		case <-r.ctx.Done():
			return
		case j := <-r.queue:
			s.deliver(r, j)
		case <-s.draining:
			for {
				select {
				case <-r.ctx.Done():
					return
				case j := <-r.queue:
					s.deliver(r, j)
				default:
					return
				}
			}
		}
	}
}

// abandon counts what is left in a stopped receiver's queue as dropped.
// No Send enqueues any more: the receiver is closed before it stops.
func (s *Sender) abandon(r *receiver) {
	for {
		select {
		case <-r.queue:
			s.o.Counters.Dropped(r.name)
		default:
			return
		}
	}
}

// deliver tries one event until the receiver accepts it, refuses it for
// good, MaxAttempts attempts failed, or the receiver stops.
func (s *Sender) deliver(r *receiver, j job) {
	for attempt := 1; ; attempt++ {
		res := s.attempt(r.ctx, r.conf.Load(), j)
		switch {
		case res.err == nil:
			s.o.Counters.Sent(r.name, j.event)
			return
		case r.ctx.Err() != nil:
			s.o.Counters.Dropped(r.name)
			return
		case !res.retry || attempt >= s.d.MaxAttempts:
			s.o.Counters.Failed(r.name, j.event)
			s.log.Warn("notification not delivered; giving up", "receiver", r.name, "event", j.event, "id", j.id, "attempts", attempt, "err", res.err)
			return
		}
		wait := s.d.Backoff.Delay(attempt, s.o.Jitter())
		if res.after > wait {
			wait = res.after
		}
		wait = min(wait, s.d.Backoff.Max)
		s.log.Debug("notification attempt failed; retrying", "receiver", r.name, "event", j.event, "id", j.id, "attempt", attempt, "wait", wait.String(), "err", res.err)
		if s.o.Sleep(r.ctx, wait) != nil {
			s.o.Counters.Dropped(r.name)
			return
		}
	}
}

// result is one attempt's outcome: err nil is delivered; retry says
// whether another attempt may succeed; after is what Retry-After asked.
type result struct {
	err   error
	retry bool
	after time.Duration
}

// maxAnswer is how much of a receiver's answer is read (so the connection
// can be reused) and how much of it a failure's error quotes.
const (
	maxAnswer = 64 << 10
	maxQuoted = 256
)

// attempt POSTs j once to t within Delivery.Timeout.
func (s *Sender) attempt(ctx context.Context, t *target, j job) result {
	ctx, cancel := context.WithTimeout(ctx, s.d.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(j.body))
	if err != nil {
		return result{err: fmt.Errorf("build the request: %w", unwrapURL(err))}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "graygate")
	req.Header.Set(EventHeader, j.event)
	req.Header.Set(DeliveryHeader, j.id)
	if t.secret != nil {
		req.Header.Set(SignatureHeader, Sign(t.secret, j.body))
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return result{err: unwrapURL(err), retry: true}
	}
	answer, rerr := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	_ = resp.Body.Close()
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		if rerr != nil { // accepted; the rest of its answer does not matter
			s.log.Debug("reading a receiver's answer", "err", unwrapURL(rerr))
		}
		return result{}
	}
	quoted := answer
	if len(quoted) > maxQuoted {
		quoted = quoted[:maxQuoted]
	}
	res := result{err: fmt.Errorf("HTTP %d: %q", code, quoted)}
	switch {
	case code >= 500, code == http.StatusRequestTimeout, code == http.StatusTooEarly, code == http.StatusTooManyRequests:
		res.retry = true
		if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
			res.after, _ = retryAfter(resp.Header.Get("Retry-After"), s.o.Now())
		}
	}
	return res
}

// unwrapURL drops the URL that net/http puts in its errors: a webhook's
// URL is often its credential, and logs must not carry it.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return fmt.Errorf("%s: timeout: %w", ue.Op, ue.Err)
		}
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}
