package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/perf/benchfmt"

	"github.com/tracebed/tracebed/analysis"
)

// Bench is the content of bench.json: the performance benchmarks of one
// tracebed build on one machine. Unlike results.json it holds wall-clock
// measurements and is not reproducible byte for byte; compare two of them
// with a tolerance (tracebed compare).
type Bench struct {
	Schema    string           `json:"schema"`
	Version   string           `json:"tracebed_version"`
	Commit    string           `json:"commit,omitempty"`
	Date      string           `json:"date"` // RFC 3339, UTC
	Benchtime string           `json:"benchtime"`
	Machine   analysis.Machine `json:"machine"`
	// Headline is one line per figure of merit the project tracks
	// (simulation event rate, pipeline packet rates, suite times), found
	// or not.
	Headline   []Headline            `json:"headline"`
	Benchmarks []Benchmark           `json:"benchmarks"`
	Suites     []SuiteTime           `json:"suites,omitempty"`
	Notes      []BenchNote           `json:"notes,omitempty"`
	Units      []analysis.MetricInfo `json:"units,omitempty"` // the direction of every unit used, for readers
}

// Benchmark is one Go benchmark's result (the mean when run several
// times).
type Benchmark struct {
	Package    string             `json:"package"` // import path relative to the module ("emulator/sim")
	Name       string             `json:"name"`    // without the -GOMAXPROCS suffix
	Procs      int                `json:"procs"`
	Iterations int                `json:"iterations"`
	Runs       int                `json:"runs"`    // results averaged (go test -count)
	Metrics    map[string]float64 `json:"metrics"` // by unit: ns/op, B/op, allocs/op, events/s, …
}

// Headline is a figure of merit: which benchmark provides it and its value,
// or why there is none (the package is not written yet, the benchmark needs
// root, …).
type Headline struct {
	What      string  `json:"what"`
	Package   string  `json:"package"`
	Benchmark string  `json:"benchmark,omitempty"`
	Unit      string  `json:"unit,omitempty"`
	Value     float64 `json:"value,omitempty"`
	Status    string  `json:"status"` // ok, skipped, failed, missing
	Note      string  `json:"note,omitempty"`
}

// Headline statuses.
const (
	StatusOK      = "ok"
	StatusSkipped = "skipped"
	StatusFailed  = "failed"
	StatusMissing = "missing"
)

// SuiteTime is the wall-clock time of one experiment of a suite.
type SuiteTime struct {
	Experiment string  `json:"experiment"`
	Runs       int     `json:"runs"`
	WallS      float64 `json:"wall_s"`
	RunsPerS   float64 `json:"runs_per_s"`
}

// BenchNote records a package or benchmark that produced no numbers.
type BenchNote struct {
	Package   string `json:"package"`
	Benchmark string `json:"benchmark,omitempty"`
	Status    string `json:"status"`
	Message   string `json:"message"`
}

// UnitBetter says which direction of a benchmark unit is an improvement:
// times and allocations per operation (or per frame, per packet) are
// lower-is-better, rates (units per second or per CPU-second: events/s,
// events/cpu-s, pkts/s, MB/s, Gbps, Mpps) and ratios to a peer
// (speedup_vs_ns3, x_bridge) higher-is-better, other units informational.
func UnitBetter(unit string) analysis.Better {
	u := strings.ToLower(unit)
	switch {
	case u == "ns/op" || u == "sec/op" || u == "b/op" || strings.HasPrefix(u, "allocs/") || strings.HasPrefix(u, "b/") || strings.HasSuffix(u, "-s/op"):
		return analysis.Lower
	case strings.HasSuffix(u, "/cpu-s") || strings.HasPrefix(u, "speedup") || strings.HasPrefix(u, "x_"):
		return analysis.Higher
	case strings.HasPrefix(u, "ns/") || strings.HasPrefix(u, "us/") || strings.HasPrefix(u, "ms/") || strings.HasPrefix(u, "s/"):
		return analysis.Lower // time per something
	case strings.HasSuffix(u, "/s") || strings.HasSuffix(u, "/sec") || strings.HasSuffix(u, "bps") || strings.HasSuffix(u, "pps"):
		return analysis.Higher
	case u == "wall_s":
		return analysis.Lower
	}
	return analysis.Either
}

// ParseGoBench reads the output of go test -bench (any number of
// packages) and returns the benchmarks, averaged over repeated runs, and
// notes for the benchmarks that were skipped or failed and the packages
// that did not build. module is the module path, trimmed from package
// names.
func ParseGoBench(r io.Reader, module string) ([]Benchmark, []BenchNote, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, nil, err
	}
	rel := func(pkg string) string {
		if pkg == module {
			return "."
		}
		return strings.TrimPrefix(pkg, module+"/")
	}
	type key struct{ pkg, name string }
	var order []key
	sums := map[key]*Benchmark{}
	br := benchfmt.NewReader(bytes.NewReader(data), "go test output")
	for br.Scan() {
		res, ok := br.Result().(*benchfmt.Result)
		if !ok {
			continue // syntax errors and unit metadata
		}
		// benchfmt drops the "Benchmark" prefix; keep the name go test
		// and -bench patterns use.
		name, procs := splitProcs("Benchmark" + res.Name.String())
		k := key{rel(res.GetConfig("pkg")), name}
		b := sums[k]
		if b == nil {
			b = &Benchmark{Package: k.pkg, Name: name, Procs: procs, Metrics: map[string]float64{}}
			sums[k] = b
			order = append(order, k)
		}
		b.Runs++
		b.Iterations += res.Iters
		for _, v := range res.Values {
			unit, val := v.Unit, v.Value
			if v.OrigUnit != "" {
				unit, val = v.OrigUnit, v.OrigValue
			}
			b.Metrics[unit] += val
		}
	}
	if err := br.Err(); err != nil {
		return nil, nil, err
	}
	var out []Benchmark
	for _, k := range order {
		b := sums[k]
		for u := range b.Metrics {
			b.Metrics[u] /= float64(b.Runs)
		}
		b.Iterations /= b.Runs
		out = append(out, *b)
	}
	return out, goTestNotes(data, rel), nil
}

// goTestNotes finds skipped and failed benchmarks and packages that failed
// to build in go test output (stdout and stderr together).
func goTestNotes(data []byte, rel func(string) string) []BenchNote {
	var (
		notes     []BenchNote
		pending   *BenchNote // a SKIP or FAIL whose message follows, indented
		unowned   []int      // notes waiting for the package's end line
		buildErrs = map[string]string{}
		building  string // the package of a "# pkg" build error block
	)
	flush := func() {
		if pending != nil {
			notes = append(notes, *pending)
			unowned = append(unowned, len(notes)-1)
			pending = nil
		}
	}
	s := bufio.NewScanner(bytes.NewReader(data))
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		trim := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trim, "--- SKIP: ") || strings.HasPrefix(trim, "--- FAIL: "):
			flush()
			status := StatusSkipped
			if strings.HasPrefix(trim, "--- FAIL") {
				status = StatusFailed
			}
			name, _, _ := strings.Cut(trim[len("--- SKIP: "):], " ")
			name, _ = splitProcs(name)
			pending = &BenchNote{Benchmark: name, Status: status}
		case pending != nil && strings.HasPrefix(line, "    "):
			msg := trim
			// Drop the "file_test.go:12: " position go test prefixes.
			if f, rest, ok := strings.Cut(msg, ": "); ok && strings.Contains(f, ".go:") {
				msg = rest
			}
			if pending.Message != "" {
				pending.Message += "; "
			}
			pending.Message += msg
		case strings.HasPrefix(line, "# "):
			flush()
			building, _, _ = strings.Cut(strings.TrimPrefix(line, "# "), " ")
		case building != "" && !strings.HasPrefix(line, "FAIL") && trim != "":
			if _, ok := buildErrs[building]; !ok {
				buildErrs[building] = trim
			}
		case strings.HasPrefix(line, "FAIL\t") || strings.HasPrefix(line, "ok  \t") || strings.HasPrefix(line, "?   \t"):
			flush()
			building = ""
			fields := strings.Fields(line)
			if len(fields) < 2 {
				continue
			}
			for _, i := range unowned {
				notes[i].Package = rel(fields[1])
			}
			unowned = nil
			if fields[0] == "FAIL" && (strings.Contains(line, "[build failed]") || strings.Contains(line, "[setup failed]")) {
				msg := "the package's tests do not build"
				if e := buildErrs[fields[1]]; e != "" {
					msg += ": " + e
				}
				notes = append(notes, BenchNote{Package: rel(fields[1]), Status: StatusFailed, Message: msg})
			}
		default:
			flush()
		}
	}
	flush()
	return notes
}

// splitProcs splits "BenchmarkX/sub-8" into "BenchmarkX/sub" and 8.
func splitProcs(name string) (string, int) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return name, 0
	}
	n, err := strconv.Atoi(name[i+1:])
	if err != nil || n <= 0 {
		return name, 0
	}
	return name[:i], n
}

// Marshal returns bench.json's content.
func (b *Bench) Marshal() ([]byte, error) {
	b.Schema = analysis.BenchSchema
	units := map[string]bool{}
	for _, bm := range b.Benchmarks {
		for u := range bm.Metrics {
			units[u] = true
		}
	}
	b.Units = nil
	for _, u := range sortedKeys(units) {
		b.Units = append(b.Units, analysis.MetricInfo{Name: u, Better: UnitBetter(u)})
	}
	js, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(js, '\n'), nil
}

// ReadBench loads a bench.json, rejecting files of another schema or
// version with a message that says which.
func ReadBench(path string) (*Bench, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseBench(path, data)
}

// ParseBench decodes a bench.json's content; name prefixes every error.
func ParseBench(name string, data []byte) (*Bench, error) {
	path := name
	schema, version, err := analysis.ProbeSchema(path, data)
	if err != nil {
		return nil, err
	}
	if schema != analysis.BenchSchema {
		return nil, fmt.Errorf("%s: %s", path, analysis.SchemaMismatch(schema, version, analysis.BenchSchema, "benchmark"))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var b Bench
	if err := dec.Decode(&b); err != nil {
		return nil, fmt.Errorf("%s: %v", path, analysis.JSONError(data, err))
	}
	for i, bm := range b.Benchmarks {
		if bm.Name == "" {
			return nil, fmt.Errorf("%s: benchmarks[%d]: no name", path, i)
		}
	}
	return &b, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Tables renders bench.json as tables: the headline, then every
// benchmark, then what produced no numbers.
func (b *Bench) Tables() []analysis.Table {
	head := analysis.Table{Title: "tracebed bench — " + b.Machine.String(), Header: []string{"figure of merit", "package", "benchmark", "value", "unit", "status"}}
	for _, h := range b.Headline {
		v := "–"
		if h.Status == StatusOK {
			v = analysis.FormatValue(h.Value)
		}
		status := h.Status
		if h.Note != "" && h.Status != StatusOK {
			status += ": " + h.Note
		}
		head.Rows = append(head.Rows, []string{h.What, h.Package, h.Benchmark, v, h.Unit, status})
	}
	all := analysis.Table{Title: "Go benchmarks", Header: []string{"package", "benchmark", "ns/op", "B/op", "allocs/op", "other metrics"}}
	for _, bm := range b.Benchmarks {
		cell := func(u string) string {
			if v, ok := bm.Metrics[u]; ok {
				return analysis.FormatValue(v)
			}
			return "–"
		}
		var other []string
		for _, u := range sortedKeys(bm.Metrics) {
			if u != "ns/op" && u != "B/op" && u != "allocs/op" {
				other = append(other, analysis.FormatValue(bm.Metrics[u])+" "+u)
			}
		}
		all.Rows = append(all.Rows, []string{bm.Package, bm.Name, cell("ns/op"), cell("B/op"), cell("allocs/op"), strings.Join(other, ", ")})
	}
	tables := []analysis.Table{head, all}
	if len(b.Notes) > 0 {
		notes := analysis.Table{Title: "Without numbers", Header: []string{"package", "benchmark", "status", "why"}}
		for _, n := range b.Notes {
			notes.Rows = append(notes.Rows, []string{n.Package, n.Benchmark, n.Status, n.Message})
		}
		tables = append(tables, notes)
	}
	return tables
}
