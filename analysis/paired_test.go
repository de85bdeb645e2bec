package analysis

import (
	"math"
	"testing"
)

func TestMeanCI95(t *testing.T) {
	// Three values 1, 2, 3: mean 2, s = 1, half-width 4.303/√3.
	m, lo, hi := MeanCI95([]float64{1, 2, 3})
	h := 4.303 / math.Sqrt(3)
	if m != 2 || math.Abs(lo-(2-h)) > 1e-12 || math.Abs(hi-(2+h)) > 1e-12 {
		t.Errorf("mean %v [%v, %v]", m, lo, hi)
	}
	if _, lo, _ := MeanCI95([]float64{5}); !math.IsNaN(lo) {
		t.Error("one value has a confidence interval")
	}
	if q := TQuantile975(200); math.Abs(q-1.972) > 0.001 {
		t.Errorf("t(0.975, 200) = %v, want 1.972", q)
	}
}

func TestPairedRelative(t *testing.T) {
	r := &Results{Runs: []Run{
		{Policy: "a", Scenario: "s", Seed: 1, Metrics: map[string]float64{"m": 90}},
		{Policy: "b", Scenario: "s", Seed: 1, Metrics: map[string]float64{"m": 100}},
		{Policy: "a", Scenario: "s", Seed: 2, Metrics: map[string]float64{"m": 180}},
		{Policy: "b", Scenario: "s", Seed: 2, Metrics: map[string]float64{"m": 200}},
		{Policy: "a", Scenario: "s", Seed: 3, Metrics: map[string]float64{"m": 50}},
		{Policy: "b", Scenario: "t", Seed: 3, Metrics: map[string]float64{"m": 50}},
	}}
	p := r.PairedRelative("s", "m", "a", "b")
	if p.N() != 2 || p.Mean != 10 || p.Lo != 10 || p.Hi != 10 || !p.Significant() {
		t.Errorf("paired %+v", p)
	}
	// Differences of both signs: the interval holds zero.
	r.Runs[2].Metrics["m"] = 220
	if p := r.PairedRelative("s", "m", "a", "b"); p.Significant() || p.Mean != 0 {
		t.Errorf("paired %+v, want mean 0, not significant", p)
	}
}
