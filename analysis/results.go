// Package analysis holds the results schema every experiment writes: the
// results file (results.json), shard files and provenance, comparison
// tables in the terminal, Markdown and CSV, and the statistics behind them.
// It pulls no plotting: figures, reports and benchmark files are in
// analysis/report, which only the command uses.
package analysis

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Schema identifies the results file format. A reader rejects other schemas.
const Schema = "tracebed.results/v1"

// FiguresSchema identifies figures.json.
const FiguresSchema = "tracebed.figures/v1"

// BenchSchema identifies bench.json, the output of tracebed bench.
const BenchSchema = "tracebed.bench/v1"

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
	// Partial, when set, says the execution stopped before every run was
	// done (interrupted by a signal or a deadline): Runs holds the runs
	// that finished, and the file must not be read as the experiment's
	// results. Absent from a complete execution's file.
	Partial *Partial `json:"partial,omitempty"`
	Runs    []Run    `json:"runs"`
}

// Partial describes an execution that stopped early.
type Partial struct {
	Reason string `json:"reason"` // e.g. "interrupted by signal SIGINT"
	Done   int    `json:"done"`   // runs that finished (those in Runs)
	Of     int    `json:"of"`     // runs the execution had to do
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
	// Tables are per-entity breakdowns of the run (a row per host, per
	// job), each named uniquely.
	Tables []EntityTable `json:"tables,omitempty"`
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

// Validate checks that the file is consistent: the schema, metric
// definitions (unique names, a known direction), and every run (a listed
// policy and scenario, no run twice, every metric known and finite, series
// and params finite).
func (r *Results) Validate() error {
	if r.Schema != Schema {
		return fmt.Errorf("schema %q, want %q", r.Schema, Schema)
	}
	known := map[string]bool{}
	for i, m := range r.Metrics {
		if m.Name == "" {
			return fmt.Errorf("metrics[%d]: no name", i)
		}
		if known[m.Name] {
			return fmt.Errorf("metrics[%d]: metric %s is defined twice", i, m.Name)
		}
		switch m.Better {
		case Lower, Higher, Either:
		default:
			return fmt.Errorf("metrics[%d] (%s): better is %q; want %q, %q or absent", i, m.Name, m.Better, Lower, Higher)
		}
		known[m.Name] = true
	}
	type key struct {
		policy, scenario string
		seed             int64
	}
	if p := r.Partial; p != nil && (p.Done != len(r.Runs) || p.Done > p.Of) {
		return fmt.Errorf("partial: %d runs done of %d, but the file holds %d", p.Done, p.Of, len(r.Runs))
	}
	seen := map[key]int{}
	for i, run := range r.Runs {
		// Hand-made files may list no policies or scenarios; check
		// membership only when they do.
		if len(r.Policies) > 0 && !slices.Contains(r.Policies, run.Policy) {
			return fmt.Errorf("runs[%d]: policy %q is not in policies %v", i, run.Policy, r.Policies)
		}
		if len(r.Scenarios) > 0 && !slices.Contains(r.Scenarios, run.Scenario) {
			return fmt.Errorf("runs[%d]: scenario %q is not in scenarios %v", i, run.Scenario, r.Scenarios)
		}
		k := key{run.Policy, run.Scenario, run.Seed}
		if j, dup := seen[k]; dup {
			return fmt.Errorf("runs[%d]: %s/%s/seed %d is also runs[%d]", i, run.Policy, run.Scenario, run.Seed, j)
		}
		seen[k] = i
		for name, v := range run.Metrics {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("runs[%d] (%s/%s/seed %d): metric %s is %v", i, run.Policy, run.Scenario, run.Seed, name, v)
			}
			if !known[name] {
				return fmt.Errorf("runs[%d]: metric %s has no definition in metrics", i, name)
			}
		}
		for name, pts := range run.Series {
			if !Finite(pts) {
				return fmt.Errorf("runs[%d] (%s/%s/seed %d): series %s has a value that is not a finite number", i, run.Policy, run.Scenario, run.Seed, name)
			}
		}
		for name, v := range run.Params {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("runs[%d] (%s/%s/seed %d): param %s is %v", i, run.Policy, run.Scenario, run.Seed, name, v)
			}
		}
		for k := range run.Tables {
			t := &run.Tables[k]
			if err := t.Validate(); err != nil {
				return fmt.Errorf("runs[%d] (%s/%s/seed %d): %v", i, run.Policy, run.Scenario, run.Seed, err)
			}
			if run.Table(t.Name) != t {
				return fmt.Errorf("runs[%d] (%s/%s/seed %d): two tables are named %s", i, run.Policy, run.Scenario, run.Seed, t.Name)
			}
		}
	}
	return nil
}

// Complete returns an error naming path if r holds the partial results of
// an execution that stopped early: they compare with nothing.
func (r *Results) Complete(path string) error {
	if p := r.Partial; p != nil {
		return fmt.Errorf("%s: partial results (%s after %d of %d runs); run the experiment to the end to compare it", path, p.Reason, p.Done, p.Of)
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

// ResultsFile is the name of the results file in a results directory.
const ResultsFile = "results.json"

// Read loads a results file (or the results.json of a results directory),
// rejecting files of another schema or version, files that are not JSON and
// inconsistent files with a message that says which and what was expected.
func Read(path string) (*Results, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, ResultsFile)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse decodes the content of a results file; name (the file's path)
// prefixes every error.
func Parse(name string, data []byte) (*Results, error) {
	path := name
	schema, version, err := ProbeSchema(path, data)
	if err != nil {
		return nil, err
	}
	if schema != Schema {
		return nil, fmt.Errorf("%s: %s", path, SchemaMismatch(schema, version, Schema, "results"))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r Results
	if err := dec.Decode(&r); err != nil {
		by := ""
		if version != "" {
			by = ", written by tracebed " + version
		}
		return nil, fmt.Errorf("%s: %v (the file says %s%s; this tracebed reads that schema but not this field)", path, JSONError(data, err), schema, by)
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return &r, nil
}

// ProbeSchema returns the schema and tracebed version a JSON file declares,
// or an error saying why it is not a tracebed file.
func ProbeSchema(path string, data []byte) (schema, version string, err error) {
	var probe struct {
		Schema  *string `json:"schema"`
		Version string  `json:"tracebed_version"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field == "" {
			return "", "", fmt.Errorf("%s: not a tracebed file: the JSON holds %s, want an object with a \"schema\" field", path, te.Value)
		}
		if errors.As(err, &te) {
			return "", "", fmt.Errorf("%s: not a tracebed file: field %q is %s, want a string", path, te.Field, te.Value)
		}
		return "", "", fmt.Errorf("%s: not a tracebed file: %v", path, JSONError(data, err))
	}
	if probe.Schema == nil {
		return "", "", fmt.Errorf("%s: not a tracebed file (no \"schema\" field; want %q for results, %q for benchmarks)", path, Schema, BenchSchema)
	}
	return *probe.Schema, probe.Version, nil
}

// SchemaMismatch explains why a file of schema got (written by tracebed
// version) cannot be read where want is expected.
func SchemaMismatch(got, version, want, what string) string {
	by := ""
	if version != "" {
		by = " by tracebed " + version
	}
	gotFamily, gotV, _ := strings.Cut(got, "/v")
	wantFamily, wantV, _ := strings.Cut(want, "/v")
	gotN, err1 := strconv.Atoi(gotV)
	wantN, err2 := strconv.Atoi(wantV)
	switch {
	case gotFamily == wantFamily && err1 == nil && err2 == nil && gotN > wantN:
		return fmt.Sprintf("%s schema %q was written%s, which is newer than this tracebed (it reads %q); use a newer tracebed", what, got, by, want)
	case gotFamily == wantFamily && err1 == nil && err2 == nil && gotN < wantN:
		return fmt.Sprintf("%s schema %q was written%s, an older format this tracebed no longer reads (it reads %q); rerun the experiment", what, got, by, want)
	case got == Schema:
		return fmt.Sprintf("this is a results file (%s, from tracebed run), not a %s file (%s)", got, what, want)
	case got == BenchSchema:
		return fmt.Sprintf("this is a benchmark file (%s, from tracebed bench), not %s (%s)", got, what, want)
	case got == FiguresSchema:
		return fmt.Sprintf("this is the data of the figures (%s), not %s (%s); use the results.json next to it", got, what, want)
	case got == ShardSchema:
		return fmt.Sprintf("this is one shard of a sharded run (%s, from tracebed run --shard), not %s (%s); join the shards with 'tracebed merge'", got, what, want)
	case got == ProvenanceSchema:
		return fmt.Sprintf("this is the record of how a run was made (%s), not %s (%s); use the results.json next to it", got, what, want)
	}
	return fmt.Sprintf("schema %q is not a tracebed %s file (want %q)", got, what, want)
}

// JSONError adds the line and column in data to a JSON decoding error
// (syntax, type, unknown field), for readers of every tracebed file.
func JSONError(data []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := lineCol(data, se.Offset)
		return fmt.Errorf("line %d, column %d: %v", line, col, err)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		line, col := lineCol(data, te.Offset)
		return fmt.Errorf("line %d, column %d: field %s: %s where %s was expected", line, col, te.Field, te.Value, te.Type)
	}
	// Unknown fields carry no offset: point at the first such key.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if key, err2 := strconv.Unquote(name); err2 == nil {
			if i := bytes.Index(data, []byte(strconv.Quote(key)+":")); i >= 0 {
				line, col := lineCol(data, int64(i))
				return fmt.Errorf("line %d, column %d: unknown field %s", line, col, name)
			}
		}
	}
	return err
}

func lineCol(data []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(off) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return line, col
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

// Finite reports whether every value of pts is a finite number.
func Finite(pts []Point) bool {
	for _, p := range pts {
		if math.IsNaN(p.X) || math.IsInf(p.X, 0) || math.IsNaN(p.Y) || math.IsInf(p.Y, 0) {
			return false
		}
	}
	return true
}
