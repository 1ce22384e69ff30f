package rollout

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/graygate/graygate/internal/rule"
)

// engineMetrics exports every gray rule's rollout as this gateway last
// built it (the gauges are read at scrape time from the engine's
// observation, so a gateway that follows shows the same as the driver),
// and counts the measurements this gateway took.
type engineMetrics struct {
	e            *Engine
	measurements *prometheus.CounterVec
	step         *prometheus.Desc
	percent      *prometheus.Desc
	state        *prometheus.Desc
}

func newMetrics(e *Engine) *engineMetrics {
	return &engineMetrics{
		e: e,
		measurements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "graygate_rollout_measurements_total",
			Help: "Check results of rollout analyses this gateway measured, by rule, check and result (passed, failed, inconclusive, error).",
		}, []string{"rule", "check", "result"}),
		step:    prometheus.NewDesc("graygate_rollout_step", "Index of the rollout's current step (the number of steps once completed).", []string{"rule"}, nil),
		percent: prometheus.NewDesc("graygate_rollout_percent", "gray_percent of a rule under a rollout plan.", []string{"rule"}, nil),
		state:   prometheus.NewDesc("graygate_rollout_state", "1 for the rollout's current state (progressing, paused, aborted, completed), 0 for the others.", []string{"rule", "state"}, nil),
	}
}

// count adds one check result; a nil receiver (no registry) counts
// nothing.
func (m *engineMetrics) count(ruleKey, check, result string) {
	if m == nil {
		return
	}
	m.measurements.WithLabelValues(ruleKey, check, result).Inc()
}

// Describe implements prometheus.Collector.
func (m *engineMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.measurements.Describe(ch)
	ch <- m.step
	ch <- m.percent
	ch <- m.state
}

// Collect implements prometheus.Collector.
func (m *engineMetrics) Collect(ch chan<- prometheus.Metric) {
	m.measurements.Collect(ch)
	obs := m.e.observed.Load()
	for _, key := range obs.keys {
		r := obs.rules[key]
		state, step := rule.RolloutProgressing, 0
		if st := r.Rollout.Status; st != nil {
			state, step = st.State, st.Step
		}
		ch <- prometheus.MustNewConstMetric(m.step, prometheus.GaugeValue, float64(step), key)
		ch <- prometheus.MustNewConstMetric(m.percent, prometheus.GaugeValue, percentOf(r), key)
		for _, s := range rule.RolloutStates {
			v := 0.0
			if s == state {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(m.state, prometheus.GaugeValue, v, key, s)
		}
	}
}
