package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/analysis/report"
)

// synthetic results files shared with the analysis package's tests.
var (
	inaResults    = filepath.Join("..", "..", "analysis", "testdata", "ina.results.json")
	farmemResults = filepath.Join("..", "..", "analysis", "testdata", "farmem.results.json")
)

// runSmall runs testdata/small-incast.yaml into a new directory and
// returns the experiment's results directory.
func runSmall(t *testing.T, extra ...string) string {
	t.Helper()
	out := t.TempDir()
	args := append([]string{"run", "--quiet", "--out", out}, extra...)
	if code, _, stderr := run(t, append(args, "testdata/small-incast.yaml")...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	return filepath.Join(out, "small-incast")
}

// TestRunWritesFiguresAndProvenance: every run leaves its figures and
// provenance.json next to results.json, and the figures are as
// reproducible as results.json.
func TestRunWritesFiguresAndProvenance(t *testing.T) {
	dirs := []string{runSmall(t, "--parallel", "1"), runSmall(t, "--parallel", "2")}
	idx, err := report.ReadFigures(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(idx.Figures) == 0 {
		t.Fatal("no figures")
	}
	for _, f := range idx.Figures {
		for _, ext := range []string{".png", ".svg"} {
			a, err1 := os.ReadFile(filepath.Join(dirs[0], f.Name+ext))
			b, err2 := os.ReadFile(filepath.Join(dirs[1], f.Name+ext))
			if err1 != nil || err2 != nil {
				t.Fatalf("%v %v", err1, err2)
			}
			if !bytes.Equal(a, b) {
				t.Errorf("%s%s differs between two runs of the same spec", f.Name, ext)
			}
		}
	}
	p, err := analysis.ReadProvenance(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(p.Command, "tracebed run --quiet --out ") || p.Machine.Cores == 0 || p.Runs != 4 || p.Parallel != 1 {
		t.Errorf("provenance %+v", p)
	}
	// --plots=false leaves them out.
	dir := runSmall(t, "--plots=false")
	if _, err := os.Stat(filepath.Join(dir, report.FiguresFile)); err == nil {
		t.Error("--plots=false wrote figures")
	}
}

func TestRunFormats(t *testing.T) {
	tests := []struct {
		format string
		check  func(string) bool
	}{
		{"table", func(s string) bool { return strings.Contains(s, "┌") }},
		{"markdown", func(s string) bool { return strings.Contains(s, "| policy |") && strings.Contains(s, "|---|") }},
		{"csv", func(s string) bool { return strings.HasPrefix(s, "experiment,scenario,policy,seed,") }},
		{"json", func(s string) bool {
			var r analysis.Results
			return json.Unmarshal([]byte(s), &r) == nil && r.Schema == analysis.Schema && len(r.Runs) == 4
		}},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			code, stdout, stderr := run(t, "run", "-q", "--plots=false", "--out", t.TempDir(), "--format", tt.format, "testdata/small-incast.yaml")
			if code != 0 || !tt.check(stdout) {
				t.Errorf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
			}
		})
	}
	if code, _, stderr := run(t, "run", "--format", "xml", "testdata/small-incast.yaml"); code != 2 || !strings.Contains(stderr, "want one of table, markdown, csv, json") {
		t.Errorf("--format xml: exit %d: %s", code, stderr)
	}
}

// writeModified writes a copy of a results file with one metric of one
// run scaled.
func writeModified(t *testing.T, src, scenario, policy, metric string, factor float64) string {
	t.Helper()
	r, err := analysis.Read(src)
	if err != nil {
		t.Fatal(err)
	}
	for i := range r.Runs {
		if r.Runs[i].Scenario == scenario && r.Runs[i].Policy == policy {
			r.Runs[i].Metrics[metric] *= factor
		}
	}
	data, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "results.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCompare(t *testing.T) {
	regressed := writeModified(t, farmemResults, "local-0.5", "glitter", "throughput_ops", 0.9)
	improved := writeModified(t, farmemResults, "local-0.5", "glitter", "throughput_ops", 1.2)
	slightly := writeModified(t, farmemResults, "local-0.5", "glitter", "throughput_ops", 0.97)
	worseP99 := writeModified(t, farmemResults, "local-0.9", "fastswap", "fault_p99_us", 1.5)
	small := runSmall(t)
	bench := filepath.Join(t.TempDir(), "bench.json")
	data, _ := (&report.Bench{Benchmarks: []report.Benchmark{{Package: "p", Name: "BenchmarkX", Runs: 1, Metrics: map[string]float64{"ns/op": 1}}}}).Marshal()
	os.WriteFile(bench, data, 0o644)
	notJSON := filepath.Join(t.TempDir(), "x.json")
	os.WriteFile(notJSON, []byte("hello"), 0o644)
	newer := filepath.Join(t.TempDir(), "newer.json")
	old, _ := os.ReadFile(farmemResults)
	os.WriteFile(newer, bytes.Replace(old, []byte("tracebed.results/v1"), []byte("tracebed.results/v2"), 1), 0o644)

	tests := []struct {
		name           string
		args           []string
		code           int
		stdout, stderr string
	}{
		{"identical files", []string{farmemResults, farmemResults}, 0, "no differences: 96 values compared, all the same", ""},
		{"identical directories", []string{small, small}, 0, "same", ""},
		{"regression", []string{farmemResults, regressed}, 1, "REGRESSION", "throughput_ops of policy glitter in scenario local-0.5 fell 10.0%"},
		{"regression within a looser tolerance", []string{"--tolerance", "15%", farmemResults, regressed}, 0, "worse", ""},
		{"per-metric tolerance", []string{"--tolerance", "throughput_ops=0.2", farmemResults, regressed}, 0, "worse", ""},
		{"per-metric tolerance keeps the default", []string{"--tolerance", "fault_p50_us=0.2", farmemResults, worseP99}, 1, "", "tolerance 5%"},
		{"improvement", []string{farmemResults, improved}, 0, "improved", ""},
		{"within tolerance", []string{farmemResults, slightly}, 0, "worse", ""},
		{"lower is better", []string{farmemResults, worseP99}, 1, "fault_p99_us", "fault_p99_us of policy fastswap in scenario local-0.9 rose 50.0%"},
		{"metric filter hides it", []string{"--metric", "throughput_ops,blocking_events", farmemResults, worseP99}, 0, "", ""},
		{"metric filter keeps it", []string{"-m", "fault_p99_us", farmemResults, worseP99}, 1, "", "fault_p99_us"},
		{"unknown metric", []string{"--metric", "nope", farmemResults, farmemResults}, 2, "", `metric "nope": no such metric`},
		{"bad tolerance", []string{"--tolerance", "lots", farmemResults, farmemResults}, 2, "", "want a percentage"},
		{"results vs bench", []string{farmemResults, bench}, 2, "", "cannot compare a results file with a bench file"},
		{"bench vs itself", []string{bench, bench}, 0, "same", ""},
		{"unrelated experiments", []string{farmemResults, inaResults}, 2, "", "no (group, item, metric) in common"},
		{"not json", []string{farmemResults, notJSON}, 2, "", "x.json: not a tracebed file"},
		{"newer schema", []string{farmemResults, newer}, 2, "", "newer than this tracebed"},
		{"missing file", []string{farmemResults, "nope.json"}, 2, "", "no such file"},
		{"one argument", []string{farmemResults}, 2, "", "accepts 2 arg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := run(t, append([]string{"compare"}, tt.args...)...)
			if code != tt.code || !strings.Contains(stdout, tt.stdout) || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout, stderr)
			}
		})
	}
}

func TestCompareFormats(t *testing.T) {
	regressed := writeModified(t, farmemResults, "local-0.5", "glitter", "throughput_ops", 0.9)
	code, stdout, _ := run(t, "compare", "--format", "json", farmemResults, regressed)
	var out struct {
		Regressions int `json:"regressions"`
		Diffs       []struct {
			Metric, Status string
			Change         *float64
		} `json:"diffs"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || code != 1 || out.Regressions != 1 || len(out.Diffs) != 96 {
		t.Fatalf("json: exit %d, %v, %+v", code, err, out)
	}
	code, stdout, _ = run(t, "compare", "--format", "csv", "--all", farmemResults, farmemResults)
	if code != 0 || strings.Count(stdout, "\n") != 97 || !strings.HasPrefix(stdout, "table,scenario,policy,metric,unit,better,baseline,new") {
		t.Errorf("csv: exit %d\n%s", code, stdout)
	}
	code, stdout, _ = run(t, "compare", "--format", "markdown", farmemResults, regressed)
	if code != 1 || !strings.Contains(stdout, "| local-0.5 | glitter | throughput_ops | higher | 72.50 k ops/s | 65.25 k ops/s | -10.0% | REGRESSION |") {
		t.Errorf("markdown: exit %d\n%s", code, stdout)
	}
}

func TestReport(t *testing.T) {
	root := t.TempDir()
	if code, _, stderr := run(t, "run", "--quiet", "--out", root, "testdata/small-incast.yaml"); code != 0 {
		t.Fatal(stderr)
	}
	// A results directory without figures or provenance (copied by hand).
	ina := filepath.Join(root, "ina-synthetic")
	os.MkdirAll(ina, 0o755)
	data, _ := os.ReadFile(inaResults)
	os.WriteFile(filepath.Join(ina, "results.json"), data, 0o644)

	bench, _ := (&report.Bench{Date: "2026-12-01T00:00:00Z", Benchtime: "1s",
		Headline:   []report.Headline{{What: "simulation event rate", Package: "emulator/sim", Benchmark: "BenchmarkLinkHop", Unit: "events/s", Value: 2e6, Status: report.StatusOK}},
		Benchmarks: []report.Benchmark{{Package: "emulator/sim", Name: "BenchmarkLinkHop", Runs: 1, Metrics: map[string]float64{"events/s": 2e6}}}}).Marshal()
	os.WriteFile(filepath.Join(root, "bench.json"), bench, 0o644)

	out := filepath.Join(root, "REPORT.md")
	code, _, stderr := run(t, "report", "--out", out, root)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	md, _ := os.ReadFile(out)
	for _, want := range []string{
		"# tracebed results",
		"## small-incast", "## ina-synthetic",
		"| command | `tracebed run --quiet --out " + root,
		"| seeds | 1, 2 |",
		"| machine | ",
		"tracebed run testdata/small-incast.yaml",
		"| policy | delivered (frames) |",
		"![ina-synthetic: jct_cdf, scenario agg1024-load0.5](ina-synthetic/jct_cdf-agg1024-load0.5.png)",
		"jct-reduction-vs-aggregators-load-0.9.png",
		"| command | not recorded (no provenance.json) |",
		"## Performance", "| simulation event rate | emulator/sim | BenchmarkLinkHop | 2000000 | events/s | ok |",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if !strings.Contains(stderr, "drew") {
		t.Errorf("figures of ina-synthetic not drawn: %s", stderr)
	}
	// Every image the report links exists.
	for _, line := range strings.Split(string(md), "\n") {
		if i := strings.Index(line, "]("); strings.HasPrefix(line, "![") && i > 0 {
			img := strings.TrimSuffix(line[i+2:], ")")
			if _, err := os.Stat(filepath.Join(root, img)); err != nil {
				t.Errorf("linked image: %v", err)
			}
		}
	}

	for format, want := range map[string]string{"table": "reproduce: tracebed run", "csv": "experiment,substrate,scenario,policy,seed,metric,unit,better,value", "json": `"reproduce": "tracebed run`} {
		code, stdout, stderr := run(t, "report", "--format", format, filepath.Join(root, "small-incast"))
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("--format %s: exit %d, stdout %.300s, stderr %s", format, code, stdout, stderr)
		}
	}
	if code, _, stderr := run(t, "report", t.TempDir()); code != 2 || !strings.Contains(stderr, "no results.json") {
		t.Errorf("empty directory: exit %d: %s", code, stderr)
	}
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "results.json"), []byte(`{"schema": "tracebed.results/v9"}`), 0o644)
	if code, _, stderr := run(t, "report", bad); code != 2 || !strings.Contains(stderr, "newer than this tracebed") {
		t.Errorf("newer schema: exit %d: %s", code, stderr)
	}
}

// TestBench runs tracebed bench over one small package and one small
// spec: the benchmarks are found by reading the test files, the declared
// headline benchmarks that do not exist say so, and bench.json reads back
// and compares with itself.
func TestBench(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("tracebed bench runs the go command, which is not in PATH")
	}
	out := filepath.Join(t.TempDir(), "bench.json")
	code, stdout, stderr := run(t, "bench", "-q", "--out", out, "--packages", modulePath+"/analysis/report", "--bench", "Compare", "--benchtime", "2x", "--spec", "testdata/small-incast.yaml")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	b, err := report.ReadBench(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Benchmarks) != 1 || b.Benchmarks[0].Name != "BenchmarkCompare" || b.Benchmarks[0].Metrics["values/s"] <= 0 {
		t.Errorf("benchmarks %+v", b.Benchmarks)
	}
	if len(b.Suites) != 1 || b.Suites[0].Experiment != "small-incast" || b.Suites[0].Runs != 4 || b.Suites[0].WallS <= 0 {
		t.Errorf("suites %+v", b.Suites)
	}
	var sim *report.Headline
	for i, h := range b.Headline {
		if h.Package == "emulator/sim" {
			sim = &b.Headline[i]
		}
	}
	if sim == nil || sim.Status != report.StatusMissing || !strings.Contains(sim.Note, "not selected by --packages") {
		t.Errorf("headline for emulator/sim: %+v", sim)
	}
	if !strings.Contains(stdout, "figure of merit") {
		t.Errorf("stdout: %s", stdout)
	}
	if code, stdout, stderr := run(t, "compare", out, out); code != 0 {
		t.Errorf("compare bench.json with itself: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if code, _, stderr := run(t, "bench", "--count", "0"); code != 2 || !strings.Contains(stderr, "--count") {
		t.Errorf("--count 0: exit %d %s", code, stderr)
	}
}

func TestBenchmarkFuncs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x_test.go")
	os.WriteFile(path, []byte(`package x
import "testing"
func BenchmarkA(b *testing.B) {}
func Benchmark(b *testing.B) {}
func Benchmarkz(b *testing.B) {}
func BenchmarkB(b *testing.B, extra int) {}
func (T) BenchmarkC(b *testing.B) {}
func TestD(t *testing.T) {}
`), 0o644)
	got := benchmarkFuncs(path)
	if strings.Join(got, ",") != "BenchmarkA,Benchmark" {
		t.Errorf("benchmarkFuncs = %v", got)
	}
}

// TestHeadline: each declared figure of merit is found, or says why not.
func TestHeadline(t *testing.T) {
	b := &report.Bench{
		Benchmarks: []report.Benchmark{
			{Package: "emulator/sim", Name: "BenchmarkLinkHop", Runs: 1, Metrics: map[string]float64{"ns/op": 200, "events/s": 5e6, "hops/s": 2e6}},
			{Package: "emulator/switch", Name: "BenchmarkSwitchVsBridge/frame=64", Runs: 1, Metrics: map[string]float64{"bridge_pps": 1e5, "switch_pps": 1.1e5, "switch_vs_bridge": 1.1}},
			{Package: "emulator/switch", Name: "BenchmarkSwitchVsBridge/frame=256", Runs: 1, Metrics: map[string]float64{"bridge_pps": 1e5, "switch_pps": 1.2e5, "switch_vs_bridge": 1.2, "total_ns/pkt": 4000}},
			{Package: "p4/ina", Name: "BenchmarkINASwitchVsBridge", Runs: 1, Metrics: map[string]float64{"bridge_pps": 1e5, "switch_pps": 1.3e5, "switch_vs_bridge": 1.3}},
			{Package: "workloads/farmem/paging", Name: "BenchmarkReplay/memcached-local90%", Runs: 1, Metrics: map[string]float64{"accesses/cpu-s": 4e6}},
			{Package: "workloads/farmem/paging", Name: "BenchmarkReplay/memcached-faults5%", Runs: 1, Metrics: map[string]float64{"accesses/cpu-s": 5e6}},
			{Package: "p4/ina", Name: "BenchmarkPipeline/pool", Runs: 1, Metrics: map[string]float64{"ns/op": 900, "packets/s": 1.1e6}},
			{Package: "workloads/incast", Name: "BenchmarkIncastMillion", Runs: 1, Metrics: map[string]float64{"ns/op": 3e9, "events/cpu-s": 6e6}},
			{Package: "traces/mem", Name: "BenchmarkLackeyImport", Runs: 1, Metrics: map[string]float64{"M_accesses/s": 5.5, "M_accesses/cpu-s": 11.5}},
		},
		Notes: []report.BenchNote{
			{Package: "p4/farmem", Benchmark: "BenchmarkPipeline", Status: report.StatusSkipped, Message: "needs bmv2"},
			{Package: "workloads/incast", Benchmark: "BenchmarkNS3Incast", Status: report.StatusSkipped, Message: "needs ns-3"},
		},
	}
	pkgs := map[string]benchPackage{
		"emulator/sim":            {rel: "emulator/sim", benchmarks: []string{"BenchmarkEventCore", "BenchmarkLinkHop"}},
		"emulator/switch":         {rel: "emulator/switch", benchmarks: []string{"BenchmarkSwitchVsBridge"}},
		"p4/ina":                  {rel: "p4/ina", benchmarks: []string{"BenchmarkINASwitchVsBridge", "BenchmarkPipeline"}},
		"p4/farmem":               {rel: "p4/farmem", benchmarks: []string{"BenchmarkPipeline"}},
		"p4/fwd":                  {rel: "p4/fwd"},
		"workloads/incast":        {rel: "workloads/incast", benchmarks: []string{"BenchmarkIncastMillion", "BenchmarkNS3Incast"}},
		"workloads/farmem/paging": {rel: "workloads/farmem/paging", benchmarks: []string{"BenchmarkReplay"}},
		"emulator/roce":           {rel: "emulator/roce", benchmarks: []string{"BenchmarkAppend4K"}},
		"workloads/training":      {rel: "workloads/training", benchmarks: []string{"BenchmarkSuite"}},
		"traces/mem":              {rel: "traces/mem", benchmarks: []string{"BenchmarkLackeyImport"}},
	}
	want := map[string]string{
		"simulation event rate (frames through 8 forwarding switches)":                                                                           "ok BenchmarkLinkHop 5e+06 events/s",
		"simulation event core (event heap alone)":                                                                                               "missing BenchmarkEventCore 0  no result (not selected by --bench?)",
		"incast: one million frames simulated (events per CPU-second; issue 19: ≥ 5 M)":                                                          "ok BenchmarkIncastMillion 6e+06 events/cpu-s",
		"incast: sim vs ns-3's device-level program, same run (issue 19: ≥ 3×; needs ns-3)":                                                      "skipped BenchmarkNS3Incast 0  needs ns-3",
		"forwarding pipeline packet rate":                                                                                                        "missing  0  package p4/fwd has no benchmarks yet",
		"INA pipeline packet rate":                                                                                                               "ok BenchmarkPipeline/pool 1.1e+06 packets/s",
		"far-memory pipeline packet rate":                                                                                                        "skipped BenchmarkPipeline 0  needs bmv2",
		"Go switch packet rate, 256-byte frames (netns, needs root)":                                                                             "ok BenchmarkSwitchVsBridge/frame=256 120000 switch_pps",
		"Go switch vs Linux bridge, 64-byte frames, same run (netns, needs root; issue 19: ≥ 1.0)":                                               "ok BenchmarkSwitchVsBridge/frame=64 1.1 switch_vs_bridge",
		"Go switch vs Linux bridge, 256-byte frames, same run (netns, needs root; issue 19: ≥ 1.0)":                                              "ok BenchmarkSwitchVsBridge/frame=256 1.2 switch_vs_bridge",
		"Go switch vs Linux bridge, 1500-byte frames, same run (netns, needs root; issue 19: ≥ 1.0)":                                             "missing BenchmarkSwitchVsBridge/frame=1500 0  no result (not selected by --bench?)",
		"Go switch: CPU per forwarded packet, sender's and switch's threads, 256-byte frames (netns, needs root; the bridge's is bridge_ns/pkt)": "ok BenchmarkSwitchVsBridge/frame=256 4000 total_ns/pkt",
		"INA packets through the Go switch's ina pipeline vs Linux bridge, same run (netns, needs root; issue 19: ≥ 1.0)":                        "ok BenchmarkINASwitchVsBridge 1.3 switch_vs_bridge",
		"INA flow-level simulation":                                                                                                              "missing BenchmarkFlowRun 0  package workloads/training has no BenchmarkFlowRun (it has BenchmarkSuite)",
		"INA workers: 8-worker 100 MB all-reduce (CPU seconds)":                                                                                  "missing BenchmarkAllReduce100MB 0  package workloads/allreduce does not exist yet (or was not selected by --packages)",
		"far-memory replay at 5% faults (accesses per CPU-second; issue 19: ≥ 5 M)":                                                              "ok BenchmarkReplay/memcached-faults5% 5e+06 accesses/cpu-s",
		"RoCEv2 RC flow, 4 KiB MTU (packets per CPU-second; issue 11: ≥ 1 M)":                                                                    "missing BenchmarkRCFlow 0  package emulator/roce has no BenchmarkRCFlow (it has BenchmarkAppend4K)",
		"lackey import (data accesses per CPU-second)":                                                                                           "ok BenchmarkLackeyImport 11.5 M_accesses/cpu-s",
		"1 GB lackey recording: peak memory of convert + replay":                                                                                 "missing BenchmarkReplayLackey1GB 0  package workloads/farmem does not exist yet (or was not selected by --packages)",
	}
	for _, h := range headlineOf(b, pkgs, true) {
		got := strings.TrimSpace(fmt.Sprintf("%s %s %v %s %s", h.Status, h.Benchmark, h.Value, h.Unit, h.Note))
		if w, ok := want[h.What]; !ok || got != strings.TrimSpace(w) {
			t.Errorf("%s: %q, want %q", h.What, got, w)
		}
	}
	for _, h := range headlineOf(b, nil, false) {
		if h.Status != report.StatusMissing || h.Note != "Go benchmarks were not run" {
			t.Errorf("without Go benchmarks: %+v", h)
		}
	}
}
