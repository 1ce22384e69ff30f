package stats

import (
	"encoding/json"
	"math"
	"os"
	"testing"
)

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func closeTo(got, want, rel float64) bool {
	return math.Abs(got-want) <= rel*math.Max(1, math.Abs(want))
}

// TestLogBayesFactorMatchesSSRM checks the Bayes factor against Optimizely
// ssrm's own test vectors (testdata/ssrm_vectors.json names the source):
// after each data point, log BF at the cumulative counts is the difference
// of the two log marginal likelihoods the ssrm test expects.
func TestLogBayesFactorMatchesSSRM(t *testing.T) {
	var v struct {
		Cases []struct {
			Name         string
			Theta, Alpha []float64
			Steps        []struct {
				PosteriorM1 []float64 `json:"posterior_m1"`
				LogMLM1     float64   `json:"log_ml_m1"`
				LogMLM0     float64   `json:"log_ml_m0"`
			}
		}
	}
	readJSON(t, "testdata/ssrm_vectors.json", &v)
	steps := 0
	for _, c := range v.Cases {
		for i, st := range c.Steps {
			x := make([]float64, len(c.Alpha))
			for j := range x {
				x[j] = st.PosteriorM1[j] - c.Alpha[j]
			}
			got, want := logBayesFactor(x, c.Theta, c.Alpha), st.LogMLM1-st.LogMLM0
			if !closeTo(got, want, 1e-9) {
				t.Errorf("%s, step %d (counts %v): log BF %.15g, ssrm %.15g", c.Name, i+1, x, got, want)
			}
			steps++
		}
	}
	if steps != 9 {
		t.Fatalf("%d ssrm steps read, want 9", steps)
	}
}

// TestSequentialSRMMatchesScipy checks the sequential p-value Compute
// reports against testdata/ssrm_reference.json (gen_ssrm.py: scipy, by
// numerical integration for two groups), at the gateway's concentration.
func TestSequentialSRMMatchesScipy(t *testing.T) {
	var ref struct {
		Concentration float64
		Cases         []struct {
			Name    string
			Weights []float64
			Units   []int64
			LogBF   float64 `json:"log_bf"`
			SeqP    float64 `json:"sequential_p_value"`
		}
	}
	readJSON(t, "testdata/ssrm_reference.json", &ref)
	if ref.Concentration != SRMSequentialConcentration || len(ref.Cases) < 10 {
		t.Fatalf("reference made at concentration %g with %d cases; graygate uses %d", ref.Concentration, len(ref.Cases), SRMSequentialConcentration)
	}
	for _, c := range ref.Cases {
		s := srmOf(t, c.Weights, c.Units)
		if s.SequentialPValue == nil {
			t.Errorf("%s: no sequential p-value: %+v", c.Name, s)
			continue
		}
		if got := *s.SequentialPValue; !closeTo(got, c.SeqP, 1e-9) && math.Abs(got-c.SeqP) > 1e-300 {
			t.Errorf("%s: sequential p %.15g, scipy %.15g (log BF %.12g)", c.Name, got, c.SeqP, c.LogBF)
		}
		if want := !s.OK && c.SeqP < DefaultSRMThreshold; s.Alert != want {
			t.Errorf("%s: alert %v with p %v and sequential p %g", c.Name, s.Alert, show(s.PValue), c.SeqP)
		}
	}
}
