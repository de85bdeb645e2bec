package report

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tracebed/tracebed/analysis"
)

func mustRead(t *testing.T, name string) *analysis.Results {
	t.Helper()
	r, err := analysis.Read(filepath.Join(sharedData, name))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// setMetric changes a metric of every run of policy in scenario.
func setMetric(r *analysis.Results, scenario, policy, metric string, f func(float64) float64) {
	for i := range r.Runs {
		if r.Runs[i].Scenario == scenario && r.Runs[i].Policy == policy {
			r.Runs[i].Metrics[metric] = f(r.Runs[i].Metrics[metric])
		}
	}
}

func TestCompareIdentical(t *testing.T) {
	for _, name := range []string{"ina.results.json", "farmem.results.json", "incast.results.json"} {
		r := mustRead(t, name)
		c, err := Compare(ResultsDataset(r), ResultsDataset(mustRead(t, name)), CompareOptions{Tolerance: 0})
		if err != nil {
			t.Fatal(err)
		}
		if n := c.Counts(); n[Same] != len(c.Diffs) || len(c.Diffs) == 0 {
			t.Errorf("%s against itself: %v", name, n)
		}
	}
}

func TestCompareDirections(t *testing.T) {
	tests := []struct {
		name   string
		metric string
		factor float64
		tol    float64
		status string
	}{
		{"throughput fell beyond tolerance", "throughput_ops", 0.9, 0.05, Regression},
		{"throughput fell within tolerance", "throughput_ops", 0.97, 0.05, Worse},
		{"throughput rose", "throughput_ops", 1.5, 0.05, Improved},
		{"p99 rose beyond tolerance", "fault_p99_us", 1.2, 0.05, Regression},
		{"p99 fell", "fault_p99_us", 0.5, 0.05, Improved},
		{"informational metric", "evicted_pages", 3, 0.05, Changed},
		{"zero tolerance", "completion_s", 1.0001, 0, Regression},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := mustRead(t, "farmem.results.json")
			new := mustRead(t, "farmem.results.json")
			setMetric(new, "local-0.75", "glitter", tt.metric, func(v float64) float64 { return v * tt.factor })
			c, err := Compare(ResultsDataset(base), ResultsDataset(new), CompareOptions{Tolerance: tt.tol})
			if err != nil {
				t.Fatal(err)
			}
			var got []Diff
			for _, d := range c.Diffs {
				if d.Status != Same {
					got = append(got, d)
				}
			}
			if len(got) != 1 || got[0].Status != tt.status || got[0].Metric != tt.metric || got[0].Item != "glitter" || got[0].Group != "local-0.75" {
				t.Fatalf("diffs %+v, want one %s of %s", got, tt.status, tt.metric)
			}
			if tt.status == Regression {
				msg := got[0].Describe("scenario", "policy")
				if !strings.Contains(msg, tt.metric) || !strings.Contains(msg, "glitter") {
					t.Errorf("Describe = %q", msg)
				}
			}
		})
	}
}

func TestCompareZeroBaseline(t *testing.T) {
	base := mustRead(t, "farmem.results.json")
	new := mustRead(t, "farmem.results.json")
	setMetric(new, "local-0.5", "fastswap", "integrity_errors", func(float64) float64 { return 1 })
	c, err := Compare(ResultsDataset(base), ResultsDataset(new), CompareOptions{Tolerance: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	regs := c.Regressions()
	if len(regs) != 1 || regs[0].Metric != "integrity_errors" || !math.IsInf(regs[0].Change, 1) {
		t.Fatalf("regressions %+v, want integrity_errors from 0", regs)
	}
}

func TestCompareOptions(t *testing.T) {
	base := mustRead(t, "ina.results.json")
	new := mustRead(t, "ina.results.json")
	setMetric(new, "agg4096-load0.5", "dynaina", "avg_jct_s", func(v float64) float64 { return v * 1.08 })
	setMetric(new, "agg4096-load0.5", "dynaina", "makespan_s", func(v float64) float64 { return v * 1.5 })

	// --metric restricts: only avg_jct_s is looked at.
	c, err := Compare(ResultsDataset(base), ResultsDataset(new), CompareOptions{Tolerance: 0.05, Metrics: []string{"avg_jct_s"}})
	if err != nil {
		t.Fatal(err)
	}
	if regs := c.Regressions(); len(regs) != 1 || regs[0].Metric != "avg_jct_s" {
		t.Errorf("with --metric avg_jct_s: %+v", regs)
	}
	// A per-metric tolerance loosens one metric.
	c, err = Compare(ResultsDataset(base), ResultsDataset(new), CompareOptions{Tolerance: 0.05, PerMetric: map[string]float64{"avg_jct_s": 0.1}})
	if err != nil {
		t.Fatal(err)
	}
	if regs := c.Regressions(); len(regs) != 1 || regs[0].Metric != "makespan_s" {
		t.Errorf("with avg_jct_s=10%%: %+v", regs)
	}
	if _, err := Compare(ResultsDataset(base), ResultsDataset(new), CompareOptions{Metrics: []string{"nope"}}); err == nil || !strings.Contains(err.Error(), "avg_jct_s") {
		t.Errorf("unknown metric: %v", err)
	}
	if _, err := Compare(ResultsDataset(base), ResultsDataset(new), CompareOptions{PerMetric: map[string]float64{"nope": 1}}); err == nil {
		t.Error("unknown per-metric tolerance accepted")
	}
	if _, err := Compare(ResultsDataset(base), (&Bench{}).Dataset(), CompareOptions{}); err == nil {
		t.Error("results compared with bench")
	}
	if _, err := Compare(ResultsDataset(base), ResultsDataset(mustRead(t, "farmem.results.json")), CompareOptions{}); err != ErrNothingInCommon {
		t.Errorf("unrelated experiments: %v", err)
	}
}

func TestCompareMissingAndNew(t *testing.T) {
	base := mustRead(t, "farmem.results.json")
	new := mustRead(t, "farmem.results.json")
	// Drop glitter-net-only from the new file; add a policy.
	var runs []analysis.Run
	for _, r := range new.Runs {
		if r.Policy != "glitter-net-only" {
			runs = append(runs, r)
		}
	}
	extra := new.Runs[0]
	extra.Policy = "glitter-v2"
	new.Runs = append(runs, extra)
	new.Policies = append(new.Policies, "glitter-v2")
	c, err := Compare(ResultsDataset(base), ResultsDataset(new), CompareOptions{Tolerance: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	n := c.Counts()
	if n[Missing] != 3*8 || n[Added] != 8 || len(c.Regressions()) != 0 {
		t.Errorf("counts %v", n)
	}
	tab := c.Table(false)
	if len(tab.Rows) != 32 || tab.Rows[0][len(tab.Rows[0])-1] != Missing {
		t.Errorf("table has %d rows, first %v", len(tab.Rows), tab.Rows[0])
	}
}

func TestCompareNotes(t *testing.T) {
	base := mustRead(t, "farmem.results.json")
	new := mustRead(t, "farmem.results.json")
	new.SpecHash = "ffff"
	new.Seeds = []int64{7, 8}
	c, err := Compare(ResultsDataset(base), ResultsDataset(new), CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(c.Notes, "\n")
	if !strings.Contains(notes, "spec_hash differs") || !strings.Contains(notes, "seeds differs") {
		t.Errorf("notes %q", notes)
	}
}

func TestParseTolerance(t *testing.T) {
	tests := []struct {
		in   string
		want float64
		ok   bool
	}{
		{"5%", 0.05, true}, {"0.05", 0.05, true}, {"0", 0, true}, {"12.5%", 0.125, true},
		{"-1%", 0, false}, {"five", 0, false}, {"", 0, false}, {"NaN", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseTolerance(tt.in)
		if (err == nil) != tt.ok || (tt.ok && math.Abs(got-tt.want) > 1e-12) {
			t.Errorf("ParseTolerance(%q) = %v, %v", tt.in, got, err)
		}
	}
}

func TestBenchDataset(t *testing.T) {
	b := &Bench{
		Benchmarks: []Benchmark{{Package: "emulator/sim", Name: "BenchmarkEventCore", Runs: 1, Metrics: map[string]float64{"ns/op": 100, "events/s": 1e7}}},
		Suites:     []SuiteTime{{Experiment: "incast", Runs: 6, WallS: 2, RunsPerS: 3}},
	}
	slower := &Bench{
		Benchmarks: []Benchmark{{Package: "emulator/sim", Name: "BenchmarkEventCore", Runs: 1, Metrics: map[string]float64{"ns/op": 130, "events/s": 0.77e7}}},
		Suites:     []SuiteTime{{Experiment: "incast", Runs: 6, WallS: 2.1, RunsPerS: 2.86}},
	}
	c, err := Compare(b.Dataset(), slower.Dataset(), CompareOptions{Tolerance: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	regs := c.Regressions()
	if len(regs) != 2 || regs[0].Metric != "events/s" || regs[1].Metric != "ns/op" {
		t.Fatalf("regressions %+v", regs)
	}
}

func TestUnitBetter(t *testing.T) {
	for unit, want := range map[string]analysis.Better{
		"ns/op": analysis.Lower, "B/op": analysis.Lower, "allocs/op": analysis.Lower, "ns/pkt": analysis.Lower,
		"events/s": analysis.Higher, "pkts/s": analysis.Higher, "MB/s": analysis.Higher, "Mpps": analysis.Higher, "Gbps": analysis.Higher,
		"events/cpu-s": analysis.Higher, "M_accesses/cpu-s": analysis.Higher, "speedup_vs_ns3": analysis.Higher, "x_bridge": analysis.Higher,
		"allocs/frame": analysis.Lower, "B/frame": analysis.Lower, "cpu-s/op": analysis.Lower,
		"frames": analysis.Either, "hops": analysis.Either,
	} {
		if got := UnitBetter(unit); got != want {
			t.Errorf("UnitBetter(%q) = %q, want %q", unit, got, want)
		}
	}
}

// TestReadRejects: files of another schema or version, and broken files,
// are rejected with a message that says what they are.
func TestReadRejects(t *testing.T) {
	good, err := os.ReadFile(filepath.Join(sharedData, "farmem.results.json"))
	if err != nil {
		t.Fatal(err)
	}
	replace := func(old, new string) string { return strings.Replace(string(good), old, new, 1) }
	tests := []struct {
		name, content, want string
	}{
		{"not json", "schema: v1\n", "not a tracebed file: line 1, column"},
		{"json array", "[1, 2]", "the JSON holds array, want an object"},
		{"no schema", `{"experiment": "x"}`, `no "schema" field`},
		{"schema not a string", `{"schema": 1}`, `field "schema" is number`},
		{"newer version", replace(`"tracebed.results/v1"`, `"tracebed.results/v2"`), `"tracebed.results/v2" was written by tracebed 0.1.0-test, which is newer than this tracebed`},
		{"older version", replace(`"tracebed.results/v1"`, `"tracebed.results/v0"`), "older format"},
		{"bench file", `{"schema": "tracebed.bench/v1"}`, "this is a benchmark file"},
		{"figures file", `{"schema": "tracebed.figures/v1"}`, "data of the figures"},
		{"foreign schema", `{"schema": "https://json-schema.org/draft/2020-12/schema"}`, "is not a tracebed results file"},
		{"unknown field", replace(`"kind": "farmem",`, `"kind": "farmem", "colour": "red",`), `line 4, column`},
		{"unknown field names it", replace(`"kind": "farmem",`, `"kind": "farmem", "colour": "red",`), `unknown field "colour"`},
		{"wrong type", replace(`"seed": 7,`, `"seed": "seven",`), "field seed: string where int64 was expected"},
		{"unknown metric", replace(`"completion_s": `, `"completion_ms": `), "metric completion_ms has no definition"},
		{"bad direction", replace(`"better": "higher"`, `"better": "up"`), `better is "up"`},
		{"unlisted policy", replace(`"policy": "glitter",`, `"policy": "glitterx",`), `policy "glitterx" is not in policies`},
		{"duplicate run", replace(`"policy": "glitter",`, `"policy": "fastswap",`), "is also runs["},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_")+".json")
			if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := analysis.Read(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("Read: %v\nwant an error naming the file and containing %q", err, tt.want)
			}
			if _, err := ReadDataset(path); err == nil && tt.name != "bench file" {
				t.Error("ReadDataset accepted it")
			}
		})
	}
	// A directory reads its results.json.
	if _, err := analysis.Read(filepath.Join("testdata")); err == nil {
		t.Error("testdata has no results.json but Read succeeded")
	}
	rd := t.TempDir()
	os.WriteFile(filepath.Join(rd, analysis.ResultsFile), good, 0o644)
	if _, err := analysis.Read(rd); err != nil {
		t.Errorf("Read(dir): %v", err)
	}
	if d, err := ReadDataset(rd); err != nil || d.Kind != "results" {
		t.Errorf("ReadDataset(dir): %v", err)
	}
}

func FuzzRead(f *testing.F) {
	// Small seeds: the fuzzer minimizes every interesting input, which
	// takes long for a large file.
	f.Add([]byte(`{"schema":"tracebed.results/v1","experiment":"e","kind":"k","substrate":"sim","seed":1,"seeds":[1,2],"scale":1,
"tracebed_version":"t","spec":"s","spec_hash":"h","policies":["a","b"],"scenarios":["x","y"],
"metrics":[{"name":"m","better":"lower"},{"name":"n","better":"higher"}],
"series_info":[{"name":"jct_cdf","kind":"cdf","x_label":"","y_label":""}],
"runs":[{"policy":"a","scenario":"x","seed":1,"metrics":{"m":1,"n":2},"series":{"jct_cdf":[[1,0.5],[2,1]],"blocking":[[0.1,2]]},"params":{"aggregators":1024}},
{"policy":"b","scenario":"y","seed":2,"metrics":{"m":3},"series":{"jct_cdf":[[3,1]]},"params":{"aggregators":4096,"load":0.5}}]}`))
	f.Add([]byte(`{"schema":"tracebed.results/v1","runs":[{"policy":"a","metrics":{"x":1}}]}`))
	f.Add([]byte(`{"schema":"tracebed.bench/v1","benchmarks":[{"name":""}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := analysis.Parse("r.json", data)
		if err == nil {
			// What Parse accepts, the writer writes back and Parse accepts again.
			out, err := r.Marshal()
			if err != nil {
				t.Fatalf("accepted file does not marshal: %v", err)
			}
			if _, err := analysis.Parse("r.json", out); err != nil {
				t.Fatalf("round trip: %v", err)
			}
			Figures(r) // must not panic
		}
		if d, err := ParseDataset("r.json", data); err == nil {
			Compare(d, d, CompareOptions{})
		}
	})
}
