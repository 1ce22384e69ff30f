package rule

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/graygate/graygate/internal/strict"
)

// experimentConflicts reports what keeps ab rule c from sharing its
// experiment_id with the ab rules of others that already use it. Rules of
// one experiment pool their units and conversions under the id (one rule
// per route, say), and its results and sample-ratio check read the pool
// with one rule's groups, weights and metrics; so they must have the same
// groups in the same order with the same weights and control group, assign
// a user to the same group (the same hash and salt), and give a metric they
// both declare the same type. A rule of others with c's key is the version
// c replaces and is skipped. Each problem names the field and the other
// rule.
func experimentConflicts(c *Compiled, others []*Compiled) []error {
	if c.Type != TypeAB || c.Source.ExperimentID == "" {
		return nil
	}
	id := c.Source.ExperimentID
	var o *Compiled
	for _, x := range others {
		if x.Key == c.Key || x.Type != TypeAB || x.Source.ExperimentID != id {
			continue
		}
		if o == nil || x.Key < o.Key {
			o = x
		}
	}
	if o == nil {
		return nil
	}
	var errs []error
	if mine, theirs := groupList(c), groupList(o); mine != theirs {
		errs = append(errs, strict.Errorf("experiment_id", "%q is the experiment of rule %q, whose groups are %s; rules that share an experiment pool its units, so they must have the same groups, weights and control group, got %s",
			id, o.Key, theirs, mine))
	}
	if c.Mode != o.Mode || c.split.Salt() != o.split.Salt() {
		field := "hash"
		if c.Mode == o.Mode {
			field = map[string]string{"growthbook": "seed", "unleash": "group_id"}[c.Mode.String()]
			field = cmp.Or(field, "experiment_id")
		}
		errs = append(errs, strict.Errorf(field, "rule %q assigns the groups of experiment %q with %s salted %q, this rule with %s salted %q; rules that share an experiment must put a user in the same group",
			o.Key, id, o.Mode, o.split.Salt(), c.Mode, c.split.Salt()))
	}
	for i, m := range c.Metrics {
		j := slices.IndexFunc(o.Metrics, func(x CompiledMetric) bool { return x.Name == m.Name })
		if j >= 0 && o.Metrics[j].Binomial != m.Binomial {
			errs = append(errs, strict.Errorf(strict.Join(strict.Index("metrics", i), "type"), "is %s, but metric %q of experiment %q is %s in rule %q; rules that share an experiment count a metric one way",
				metricType(m.Binomial), m.Name, id, metricType(o.Metrics[j].Binomial), o.Key))
		}
	}
	return errs
}

// groupList describes an ab rule's split: "A 50, B 50 (control A)".
func groupList(c *Compiled) string {
	var b strings.Builder
	for i, g := range c.Groups {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %v", g.Group, c.weights[i])
	}
	if cg := c.ControlGroup(); cg != nil {
		fmt.Fprintf(&b, " (control %s)", cg.Group)
	}
	return b.String()
}

func metricType(binomial bool) string {
	if binomial {
		return MetricBinomial
	}
	return MetricMean
}
