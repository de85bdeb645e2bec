// Package analysis holds what tracebed makes of runs: the results file
// (results.json), comparison tables in the terminal, Markdown and CSV, and
// the statistics behind them.
package analysis

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
)

// Schema identifies the results file format. A reader rejects other schemas.
const Schema = "tracebed.results/v1"

// Results is the content of results/<experiment>/results.json. It holds no
// wall-clock data, so the same spec and seed give byte-identical files.
type Results struct {
	Schema     string       `json:"schema"`
	Experiment string       `json:"experiment"`
	Kind       string       `json:"kind"`
	Substrate  string       `json:"substrate"`
	Seed       int64        `json:"seed"`  // the first seed
	Seeds      []int64      `json:"seeds"` // every seed run
	Scale      float64      `json:"scale"`
	Version    string       `json:"tracebed_version"`
	Commit     string       `json:"commit,omitempty"`
	Spec       string       `json:"spec"`      // the spec file as given
	SpecHash   string       `json:"spec_hash"` // SHA-256 of the spec file's bytes
	Policies   []string     `json:"policies"`  // in the spec's order
	Scenarios  []string     `json:"scenarios"` // in the spec's order
	Metrics    []MetricInfo `json:"metrics"`   // column definitions, in table order
	SeriesInfo []SeriesInfo `json:"series_info,omitempty"`
	Runs       []Run        `json:"runs"`
}

// SeriesInfo describes a series that runs record, for plots.
type SeriesInfo struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"` // "cdf" (X values, Y cumulative fraction), "time" (X seconds), "xy"
	XLabel string `json:"x_label"`
	YLabel string `json:"y_label"`
}

// Better says which direction of a metric is an improvement.
type Better string

// Directions of improvement.
const (
	Lower  Better = "lower"
	Higher Better = "higher"
	Either Better = "" // informational, never a regression
)

// MetricInfo describes one metric.
type MetricInfo struct {
	Name        string `json:"name"`
	Unit        string `json:"unit,omitempty"`
	Better      Better `json:"better,omitempty"`
	Description string `json:"description,omitempty"`
}

// Run is the outcome of one (policy, scenario, seed).
type Run struct {
	Policy   string             `json:"policy"`
	Scenario string             `json:"scenario"`
	Seed     int64              `json:"seed"`
	Metrics  map[string]float64 `json:"metrics"`
	// Series are named point sequences a run records for plots, e.g. a
	// CDF of job completion times or a quantity over time.
	Series map[string][]Point `json:"series,omitempty"`
	// Params are the scenario's numeric parameters (local memory ratio,
	// aggregators, load, …), the x axis of sweep plots.
	Params map[string]float64 `json:"params,omitempty"`
}

// Point is one (x, y) sample of a Series; it is written as [x, y].
type Point struct{ X, Y float64 }

// MarshalJSON writes p as a two-element array.
func (p Point) MarshalJSON() ([]byte, error) { return json.Marshal([2]float64{p.X, p.Y}) }

// UnmarshalJSON reads a two-element array.
func (p *Point) UnmarshalJSON(b []byte) error {
	var a [2]float64
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	p.X, p.Y = a[0], a[1]
	return nil
}

// Metrics are the numbers one run produces, by metric name.
type Metrics map[string]float64

// Validate checks that every metric is a finite number and known.
func (r *Results) Validate() error {
	if r.Schema != Schema {
		return fmt.Errorf("schema %q, want %q", r.Schema, Schema)
	}
	known := map[string]bool{}
	for _, m := range r.Metrics {
		known[m.Name] = true
	}
	for i, run := range r.Runs {
		for name, v := range run.Metrics {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("runs[%d] (%s/%s/seed %d): metric %s is %v", i, run.Policy, run.Scenario, run.Seed, name, v)
			}
			if !known[name] {
				return fmt.Errorf("runs[%d]: metric %s has no definition in metrics", i, name)
			}
		}
	}
	return nil
}

// Sort puts runs in a canonical order: scenario and policy in spec order,
// then seed.
func (r *Results) Sort() {
	rank := func(list []string, s string) int { return slices.Index(list, s) }
	slices.SortStableFunc(r.Runs, func(a, b Run) int {
		if c := rank(r.Scenarios, a.Scenario) - rank(r.Scenarios, b.Scenario); c != 0 {
			return c
		}
		if c := rank(r.Policies, a.Policy) - rank(r.Policies, b.Policy); c != 0 {
			return c
		}
		return int(a.Seed - b.Seed)
	})
}

// Marshal returns the canonical JSON encoding (indented, keys sorted).
func (r *Results) Marshal() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Read loads a results file, rejecting files of another schema with a
// message that says which.
func Read(path string) (*Results, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var probe struct {
		Schema *string `json:"schema"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("%s: not a tracebed results file: %v", path, err)
	}
	if probe.Schema == nil {
		return nil, fmt.Errorf("%s: not a tracebed results file (no \"schema\" field; want %q)", path, Schema)
	}
	if *probe.Schema != Schema {
		return nil, fmt.Errorf("%s: results schema %q is not supported by this tracebed (it reads %q)", path, *probe.Schema, Schema)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r Results
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return &r, nil
}

// Summary is a metric aggregated over seeds.
type Summary struct {
	Mean, Std float64
	N         int
}

// Aggregate returns, for one scenario and policy, every metric's mean and
// sample standard deviation over seeds.
func (r *Results) Aggregate(scenario, policy string) map[string]Summary {
	vals := map[string][]float64{}
	for _, run := range r.Runs {
		if run.Scenario == scenario && run.Policy == policy {
			for k, v := range run.Metrics {
				vals[k] = append(vals[k], v)
			}
		}
	}
	out := map[string]Summary{}
	for k, vs := range vals {
		out[k] = summarize(vs)
	}
	return out
}

func summarize(vs []float64) Summary {
	s := Summary{N: len(vs)}
	for _, v := range vs {
		s.Mean += v
	}
	s.Mean /= float64(len(vs))
	if len(vs) > 1 {
		var ss float64
		for _, v := range vs {
			ss += (v - s.Mean) * (v - s.Mean)
		}
		s.Std = math.Sqrt(ss / float64(len(vs)-1))
	}
	return s
}

// FormatValue prints a metric value compactly: integers as integers, other
// numbers with four significant digits.
func FormatValue(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	a := math.Abs(v)
	switch {
	case a >= 1000:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 3, 64)
	case a >= 0.001:
		return strconv.FormatFloat(v, 'f', 4, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}
