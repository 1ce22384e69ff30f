package mirror

import (
	"cmp"
	"slices"
)

// stats are one mirror's diff statistics; state.mu guards them. Memory is
// bounded: at most Options.MaxFields fields, each with at most MaxExamples
// examples of at most ExampleBytes per value.
type stats struct {
	requests, compared, noiseCompared, statusMismatch, failed, secondaryFailed, untracked uint64
	fields                                                                                map[string]*field
}

type field struct {
	raw, noise uint64
	examples   []Example
}

// Example is one answer in which a field differed.
type Example struct {
	// Request is the mirrored request's method and URI.
	Request string `json:"request"`
	// Primary and Candidate are the field's values in the primary's and
	// the mirror target's answers, cut to a few hundred bytes;
	// "(absent)" when an answer lacks the field.
	Primary   string `json:"primary"`
	Candidate string `json:"candidate"`
}

// perAnswerLimit bounds the differences taken from one answer.
const perAnswerLimit = 1024

// record counts one exchange: the candidate's answer (cand, or its error
// cerr) compared with the primary's, and the secondary's (sec, serr) when
// the spec has one.
func (st *state) record(sp *Spec, req *Request, primary, cand *answer, cerr error, sec *answer, serr error) {
	o := &st.set.opts
	var rawD, noiseD []difference
	if sp.Diff && cerr == nil {
		rawD = compare(primary, cand, sp.Ignore, perAnswerLimit)
	}
	if sp.Diff && sp.Secondary != nil && serr == nil && sec != nil {
		noiseD = compare(primary, sec, sp.Ignore, perAnswerLimit)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	t := &st.stats
	t.requests++
	if cerr != nil {
		t.failed++
	} else if sp.Diff {
		t.compared++
		if primary.status != cand.status {
			t.statusMismatch++
		}
		for _, d := range rawD {
			f := st.field(d.path)
			if f == nil {
				t.untracked++
				continue
			}
			f.raw++
			if len(f.examples) < o.MaxExamples {
				f.examples = append(f.examples, Example{
					Request: truncate(req.Method+" "+req.URI, o.ExampleBytes),
					Primary: d.a(o.ExampleBytes), Candidate: d.b(o.ExampleBytes),
				})
			}
		}
	}
	if !sp.Diff || sp.Secondary == nil {
		return
	}
	if serr != nil || sec == nil {
		t.secondaryFailed++
		return
	}
	t.noiseCompared++
	for _, d := range noiseD {
		if f := st.field(d.path); f != nil {
			f.noise++
		} else {
			t.untracked++
		}
	}
}

// field returns the counters of path, creating them while there is room;
// nil when the mirror already tracks MaxFields fields. st.mu is held.
func (st *state) field(path string) *field {
	f := st.stats.fields[path]
	if f == nil {
		if len(st.stats.fields) >= st.set.opts.MaxFields {
			return nil
		}
		f = &field{}
		st.stats.fields[path] = f
	}
	return f
}

// Document is the answer of GET /api/v1/rules/{key}/diff.
type Document struct {
	Rule      string `json:"rule"`
	Target    string `json:"target"`
	Secondary string `json:"secondary,omitempty"`
	// Diff says answers are compared (the rule's mirror has "diff").
	Diff bool `json:"diff"`
	// Requests counts copies handed to the mirror target, Compared the
	// answers it gave that were compared with the primary's, and
	// StatusMismatch those whose status differed.
	Requests       uint64 `json:"requests"`
	Compared       uint64 `json:"compared"`
	StatusMismatch uint64 `json:"status_mismatch"`
	// NoiseCompared counts the secondary's answers compared with the
	// primary's; SecondaryFailed those it did not give.
	NoiseCompared   uint64 `json:"noise_compared"`
	SecondaryFailed uint64 `json:"secondary_failed"`
	// Failed counts copies the mirror target did not answer, since the
	// diff started (with Requests and Compared: Requests = Compared +
	// Failed when diffing); Dropped those never sent (queue full, body
	// over max_body), since the rule got its mirror, as
	// graygate_mirror_dropped_total counts them.
	Failed  uint64 `json:"failed"`
	Dropped uint64 `json:"dropped"`
	// UntrackedDifferences counts differences in fields beyond the
	// per-rule cap on tracked fields.
	UntrackedDifferences uint64     `json:"untracked_differences"`
	Thresholds           Thresholds `json:"thresholds"`
	Ignore               []string   `json:"ignore"`
	// Fields lists every field that differed, regressions first, then by
	// raw rate.
	Fields []Field `json:"fields"`
}

// Field is one path's differences.
type Field struct {
	Path string `json:"path"`
	// RawRate is the share of compared candidate answers in which the
	// field differed from the primary's; NoiseRate the share of compared
	// secondary answers in which it did.
	RawRate   float64 `json:"raw_rate"`
	NoiseRate float64 `json:"noise_rate"`
	// Raw and Noise are the counts behind the rates.
	Raw   uint64 `json:"raw"`
	Noise uint64 `json:"noise"`
	// Regression says the raw rate is well above the noise rate (see
	// Thresholds).
	Regression bool      `json:"regression"`
	Examples   []Example `json:"examples"`
}

// document renders the mirror's statistics.
func (st *state) document() Document {
	sp := st.spec.Load()
	th := *st.set.opts.Thresholds
	d := Document{
		Rule: sp.Rule, Target: sp.TargetName, Secondary: sp.SecondaryName, Diff: sp.Diff,
		Dropped: st.ctr.dropped.Load(), Thresholds: th, Ignore: append([]string{}, sp.Ignore.Paths()...), Fields: []Field{},
	}
	st.mu.Lock()
	t := &st.stats
	d.Requests, d.Compared, d.StatusMismatch = t.requests, t.compared, t.statusMismatch
	d.NoiseCompared, d.SecondaryFailed, d.Failed, d.UntrackedDifferences = t.noiseCompared, t.secondaryFailed, t.failed, t.untracked
	for path, f := range t.fields {
		fl := Field{Path: path, Raw: f.raw, Noise: f.noise, Examples: append([]Example{}, f.examples...)}
		if t.compared > 0 {
			fl.RawRate = float64(f.raw) / float64(t.compared)
		}
		if t.noiseCompared > 0 {
			fl.NoiseRate = float64(f.noise) / float64(t.noiseCompared)
		}
		fl.Regression = th.Regression(fl.RawRate, fl.NoiseRate, t.compared)
		d.Fields = append(d.Fields, fl)
	}
	st.mu.Unlock()
	slices.SortFunc(d.Fields, func(a, b Field) int {
		if a.Regression != b.Regression {
			if a.Regression {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(b.RawRate, a.RawRate), cmp.Compare(a.Path, b.Path))
	})
	return d
}
