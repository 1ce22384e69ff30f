package experiment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/graygate/graygate/internal/strict"
)

// MaxEvents is the most events one POST /api/v1/events may carry.
const MaxEvents = 10_000

// MaxEventSkew is how far ahead of the gateway's clock a posted event's ts
// may be: the clocks of a sender and the gateway differ by that much at
// most when both keep time. An event dated later has not happened yet;
// counting it would put conversions after exposures only because a clock
// is wrong (a sender 2 days ahead converts every unit it names within the
// 72h window), so it is refused, naming the field.
const MaxEventSkew = 5 * time.Minute

// PostedEvent is one element of POST /api/v1/events: a conversion that
// happened elsewhere (a signup in another service, a payment webhook).
type PostedEvent struct {
	// Unit is the identity value the gateway routes the user by.
	Unit string `json:"unit"`
	// Metric names a metric some ab rule declares.
	Metric string `json:"metric"`
	// Value is added to the unit's value of a mean metric (required for
	// one); a binomial metric converts on any value but 0 (default 1).
	Value *float64 `json:"value,omitempty"`
	// TS is when it happened, RFC 3339 (default: when it is received). It
	// counts for an experiment only if the unit's first exposure is at or
	// before TS, within the conversion window. A TS more than MaxEventSkew
	// ahead of the gateway's clock is refused.
	TS string `json:"ts,omitempty"`
}

// EventsResult is the answer to a batch of posted events. Events are
// judged one by one: the valid ones are recorded even when others are
// not, and Problems names each rejected one by index and field.
type EventsResult struct {
	Accepted int `json:"accepted"`
	Rejected int `json:"rejected"`
	// Conversions is how many (event, experiment) pairs were handed to the
	// store: an event counts for every experiment declaring its metric.
	Conversions int                 `json:"conversions"`
	Problems    []strict.FieldError `json:"details,omitempty"`
}

// ParseEvents decodes a body {"events": [...]} and checks each event
// against cat, turning the valid ones into conversions. It never fails as
// a whole unless the body itself is not such an object; every other
// problem is one FieldError named events[i].field.
func ParseEvents(body []byte, cat *Catalog, now time.Time) ([]Event, EventsResult, error) {
	var doc struct {
		Events []json.RawMessage `json:"events"`
	}
	var res EventsResult
	if err := errors.Join(outsideEvents(strict.DuplicateKeys(body)), strict.Decode(body, &doc)); err != nil {
		return nil, res, err
	}
	if doc.Events == nil {
		return nil, res, strict.Errorf("events", "is required: {\"events\": [{\"unit\": ..., \"metric\": ..., \"value\": ..., \"ts\": ...}]}")
	}
	if len(doc.Events) > MaxEvents {
		return nil, res, strict.Errorf("events", "at most %d events per request, got %d", MaxEvents, len(doc.Events))
	}
	var out []Event
	for i, raw := range doc.Events {
		p := strict.Index("events", i)
		evs, errs := parseEvent(raw, p, cat, now)
		if len(errs) > 0 {
			res.Rejected++
			for _, e := range errs {
				res.Problems = append(res.Problems, strict.Fields(e)...)
			}
			continue
		}
		res.Accepted++
		res.Conversions += len(evs)
		out = append(out, evs...)
	}
	return out, res, nil
}

func parseEvent(raw json.RawMessage, p string, cat *Catalog, now time.Time) ([]Event, []error) {
	var pe PostedEvent
	// A member given twice ({"unit": "a", "unit": "b"}) would be read as
	// its last value by encoding/json; the event is refused instead, as
	// a rule is (strict.DuplicateKeys), and the rest of the batch goes on.
	if err := errors.Join(strict.DuplicateKeys(raw), strict.Decode(raw, &pe)); err != nil {
		return nil, []error{strict.Prefix(p, err)}
	}
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, strict.Errorf(strict.Join(p, field), format, args...))
	}
	switch {
	case pe.Unit == "":
		add("unit", "is required: the identity value the gateway routes the user by")
	case len(pe.Unit) > MaxUnitBytes:
		add("unit", "is %d bytes, over %d", len(pe.Unit), MaxUnitBytes)
	}
	refs := cat.byMetric[pe.Metric]
	switch {
	case pe.Metric == "":
		add("metric", "is required")
	case len(refs) == 0:
		add("metric", "unknown metric %q: no ab rule declares it%s", pe.Metric, known(cat))
	}
	value := 1.0
	if pe.Value != nil {
		value = *pe.Value
		if math.IsNaN(value) || math.IsInf(value, 0) || math.Abs(value) > MaxValue {
			add("value", "must be a finite number within ±%g, got %v", MaxValue, value)
		}
	} else {
		for _, ref := range refs {
			if !ref.spec.Metrics[ref.metric].Binomial {
				add("value", "is required: %q is a mean metric of experiment %q", pe.Metric, ref.spec.ID)
				break
			}
		}
	}
	ts := now
	if pe.TS != "" {
		t, err := time.Parse(time.RFC3339Nano, pe.TS)
		switch {
		case err != nil:
			add("ts", "must be an RFC 3339 time such as \"2026-11-30T10:30:00Z\", got %q", pe.TS)
		case t.Sub(now) > MaxEventSkew:
			add("ts", "%q is %v ahead of the gateway's clock (%s), more than the %v of clock skew taken: fix the sender's clock, or leave ts out to date the event on arrival",
				pe.TS, t.Sub(now).Round(time.Second), now.UTC().Format(time.RFC3339), MaxEventSkew)
		}
		ts = t
	}
	if len(errs) > 0 {
		return nil, errs
	}
	u, _ := micro(value)
	var out []Event
	for _, ref := range refs {
		m := &ref.spec.Metrics[ref.metric]
		e := Event{Kind: Conversion, Experiment: ref.spec.ID, Unit: pe.Unit, TS: ts.UnixMilli(), Metric: m.Name, Binomial: m.Binomial, Value: u}
		if m.Binomial {
			// Any value but 0 converts, however small: it is judged
			// before rounding to µ-units (1e-7 rounds to 0).
			if value == 0 {
				continue // a binomial event of value 0 is no conversion
			}
			e.Value = 1
		} else if u == 0 {
			continue // adds nothing at µ-unit precision
		}
		out = append(out, e)
	}
	return out, nil
}

// known lists the declared metrics for an error message.
func known(cat *Catalog) string {
	if len(cat.byMetric) == 0 {
		return " (no ab rule declares any metric)"
	}
	names := make([]string, 0, len(cat.byMetric))
	for n := range cat.byMetric {
		names = append(names, n)
	}
	if len(names) > 20 {
		return ""
	}
	slices.Sort(names)
	return "; declared: " + strings.Join(names, ", ")
}

// BadBody is PostEvents's error for a body that is not an events object;
// it wraps the decoder's problems, which strict.Fields lists.
type BadBody struct{ Err error }

func (e *BadBody) Error() string { return "invalid events body: " + e.Err.Error() }

// Unwrap returns the problems one by one, so that strict.Fields lists
// every one.
func (e *BadBody) Unwrap() []error {
	if j, ok := e.Err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{e.Err}
}

// PostEvents records the valid events of a POST /api/v1/events body after
// what the request path has queued, and returns once they are in the
// store. It never waits on Redis: with the Redis store down, or a store
// call in progress for half a second (Redis hung), it returns once they
// are in the writer's bounded buffer, which the writer empties into Redis
// when it answers again. When that buffer is full (experiments.
// buffer_events events already wait) nothing is recorded and the error is
// a *BusyError, at once. Other errors are a *BadBody when the body is not
// an events object, ErrClosed, or the context's.
func (r *Recorder) PostEvents(ctx context.Context, body []byte) (EventsResult, error) {
	events, res, err := ParseEvents(body, r.cat.Load(), r.opts.Now())
	if err != nil {
		return res, &BadBody{err}
	}
	sub, err := r.enqueue(events)
	if err == nil {
		_, buffered := r.store.(*redisStore)
		err = r.wait(ctx, sub, buffered)
	}
	if err != nil {
		if errors.Is(err, ErrClosed) || errors.Is(err, ErrBusy) {
			return res, err
		}
		return res, fmt.Errorf("record events: %w", err)
	}
	return res, nil
}

// outsideEvents keeps the problems of err (strict.DuplicateKeys on the
// whole body) that lie outside the events array, which refuse the body;
// an event's own duplicates are the event's problem (see parseEvent).
func outsideEvents(err error) error {
	var out []error
	for _, f := range strict.Fields(err) {
		if !strings.HasPrefix(f.Path, "events[") {
			out = append(out, &strict.FieldError{Path: f.Path, Message: f.Message})
		}
	}
	return errors.Join(out...)
}
