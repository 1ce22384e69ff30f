package metrics

import "github.com/prometheus/client_golang/prometheus"

// Notifications counts what happened to event notifications, per
// receiver; it is the notify.Counters of the gateway's Sender. It is safe
// for concurrent use.
type Notifications struct {
	sent, failed *prometheus.CounterVec
	dropped      *prometheus.CounterVec
}

// Notifications registers the notification counters on the private
// registry. Call it once per Metrics: a second call would register the
// same names again and panic.
func (m *Metrics) Notifications() *Notifications {
	n := &Notifications{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "graygate_notifications_sent_total", Help: "Event notifications a receiver accepted (2xx), by receiver and event.",
		}, []string{"receiver", "event"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "graygate_notifications_failed_total", Help: "Event notifications given up on after every attempt failed or the receiver refused them (4xx), by receiver and event.",
		}, []string{"receiver", "event"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "graygate_notifications_dropped_total", Help: "Event notifications never attempted to the end: the receiver's queue was full, or it was removed or the gateway stopped first.",
		}, []string{"receiver"}),
	}
	m.reg.MustRegister(n.sent, n.failed, n.dropped)
	return n
}

// Declare creates a receiver's series at 0, so that rate() and increase()
// see their first event.
func (n *Notifications) Declare(receiver string, events []string) {
	for _, e := range events {
		n.sent.WithLabelValues(receiver, e)
		n.failed.WithLabelValues(receiver, e)
	}
	n.dropped.WithLabelValues(receiver)
}

// Sent counts an event the receiver accepted.
func (n *Notifications) Sent(receiver, event string) { n.sent.WithLabelValues(receiver, event).Inc() }

// Failed counts an event given up on.
func (n *Notifications) Failed(receiver, event string) {
	n.failed.WithLabelValues(receiver, event).Inc()
}

// Dropped counts an event that was never delivered nor given up on.
func (n *Notifications) Dropped(receiver string) { n.dropped.WithLabelValues(receiver).Inc() }
