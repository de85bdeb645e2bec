package training

import (
	"context"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/internal/cputime"
	"github.com/tracebed/tracebed/internal/problems"
	"github.com/tracebed/tracebed/systems/inasched"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/workloads/training/fabric"
	"github.com/tracebed/tracebed/workloads/training/flow"
)

// embedded serves traces/jobs/… from the files built into the binary, as
// cmd/tracebed does.
func embedded(path string) ([]byte, error) {
	if rest, ok := strings.CutPrefix(path, "traces/jobs/"); ok {
		return fs.ReadFile(jobtrace.Samples, rest)
	}
	return nil, fs.ErrNotExist
}

var suite = []string{"dynaina-100g", "dynaina-tiresias", "dynaina-sweep", "dynaina-sensitivity", "dynaina-fabric"}

func TestReadySpecs(t *testing.T) {
	// Run from a directory without traces/ so the embedded copy is used.
	t.Chdir(t.TempDir())
	for _, name := range suite {
		spec, err := experiments.Open(name, embedded)
		if err != nil {
			t.Fatal(err)
		}
		if !spec.Default || spec.Kind != "ina" {
			t.Errorf("%s: default %v kind %s; want a default ina spec", name, spec.Default, spec.Kind)
		}
		exp, err := Kind{}.Compile(spec)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		e := exp.(*experiment)
		if len(e.order) != 4 {
			t.Errorf("%s: policies %v", name, e.order)
		}
		for _, sc := range spec.Scenarios {
			s := e.scenarios[sc.Name]
			js, err := s.Jobs(spec.Seeds[0])
			if err != nil {
				t.Fatal(err)
			}
			if len(js) < 16 {
				t.Errorf("%s/%s: %d jobs; want at least 16", name, sc.Name, len(js))
			}
		}
	}
	spec, _ := experiments.Open("dynaina-100g", embedded)
	exp, _ := Kind{}.Compile(spec)
	for _, want := range []string{"vision", "language", "mixed"} {
		if exp.(*experiment).scenarios[want] == nil {
			t.Errorf("dynaina-100g has no %s scenario", want)
		}
	}
	spec, _ = experiments.Open("dynaina-tiresias", embedded)
	exp, _ = Kind{}.Compile(spec)
	if js, _ := exp.(*experiment).scenarios["tiresias"].Jobs(1); len(js) != 60 {
		t.Errorf("dynaina-tiresias replays %d jobs, want the trace's 60", len(js))
	}
	// dynaina-philly (not in the suite: minutes of CPU) replays the
	// original Gavel file compressed in time, as trace convert does.
	spec, err := experiments.Open("dynaina-philly", embedded)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Default {
		t.Error("dynaina-philly is in the default suite")
	}
	exp, err = Kind{}.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := jobtrace.Samples.ReadFile(jobtrace.PhillyTrace)
	want, _ := jobtrace.ParseGavelCompressed(jobtrace.PhillyTrace, data, jobtrace.PhillyCompression)
	for _, sc := range spec.Scenarios {
		if js, _ := exp.(*experiment).scenarios[sc.Name].Jobs(1); !reflect.DeepEqual(js, want) {
			t.Errorf("dynaina-philly/%s replays %d jobs, not the %d of %s compressed %d×", sc.Name, len(js), len(want), jobtrace.PhillyTrace, jobtrace.PhillyCompression)
		}
	}
}

// TestTiresiasContends: dynaina-tiresias sweeps from nothing contending
// (as recorded: every INA policy within 0.1% of the others, nobody
// waiting long for hosts) to contention (GPUs 10× faster, arrivals 16×
// as dense: jobs queue for hosts and miss switch memory, and DynaINA is
// ahead of SwitchML by more than 3% and of ATP by more than 10%), as
// docs/dynaina.md reports.
func TestTiresiasContends(t *testing.T) {
	spec, err := experiments.Open("dynaina-tiresias", embedded)
	if err != nil {
		t.Fatal(err)
	}
	var keep []experiments.Entry
	for _, sc := range spec.Scenarios {
		if sc.Name == "tiresias" || sc.Name == "fast-16x" {
			keep = append(keep, sc)
		}
	}
	spec.Scenarios = keep
	res := execute(t, spec, nil)
	jct := func(sc, p string) float64 { return avgJCT(t, res, sc, p) }
	for _, p := range []string{"switchml", "atp"} {
		if d := math.Abs(jct("tiresias", p)/jct("tiresias", "dynaina") - 1); d > 0.001 {
			t.Errorf("as recorded: %s and dynaina %.2f%% apart; want a tie", p, 100*d)
		}
	}
	for p, margin := range map[string]float64{"switchml": 0.03, "atp": 0.10} {
		if r := 1 - jct("fast-16x", "dynaina")/jct("fast-16x", p); r < margin {
			t.Errorf("fast-16x: dynaina %.2f s, %s %.2f s: %.1f%% less, want more than %.0f%%", jct("fast-16x", "dynaina"), p, jct("fast-16x", p), 100*r, 100*margin)
		}
	}
	for _, r := range res.Runs {
		tab := r.Table(TableJobs)
		if tab == nil || len(tab.Rows) != 60 {
			t.Fatalf("%s/%s: no per-job table of 60 rows", r.Scenario, r.Policy)
		}
		var queue float64
		for _, row := range tab.Rows {
			queue += row.Values["queue_s"]
		}
		queue /= 60
		if r.Scenario == "tiresias" && queue > 1 || r.Scenario == "fast-16x" && queue < 1 {
			t.Errorf("%s/%s: jobs queue %.2f s for hosts on average", r.Scenario, r.Policy, queue)
		}
	}
}

func TestSpecErrors(t *testing.T) {
	dir := t.TempDir()
	head := "kind: ina\ntopology: {generate: star, hosts: 8, aggregators: 256}\n"
	tests := []struct {
		name, body, want string
	}{
		{"unknown policy", head + "policies: [noina, {name: fancy}]\n", "s.yaml:3:19: policies[1].system: \"fancy\" is not an INA policy"},
		{"bad dynaina", head + "policies: [{name: dynaina, max_overlap: 2}]\n", "policies[0].max_overlap: 2: want 0 to 1"},
		{"bad partition", head + "policies: [{name: switchml, partition: -5}]\n", "policies[0].partition: -5"},
		{"bad priority", head + "policies: [{name: dyn-x, system: dynaina, priority: size}]\n", "policies[0].priority: \"size\": want intensity, benefit, arrival"},
		{"unknown system", head + "policies: [{name: mine, system: nosuch}]\n", "policies[0].system: \"nosuch\" is not an INA policy; want one of noina, switchml, atp, dynaina, freeina, mine"},
		{"param of another policy", head + "policies: [{name: atp, partition: 4}]\n", "policies[0].partition"},
		{"bad mix", head + "policies: [noina]\nscenarios: [{name: a, mix: cartoons}]\n", "s.yaml:4:28: scenarios[0].mix: unknown mix \"cartoons\""},
		{"too many workers", head + "policies: [noina]\nworkload: {workers: {\"64\": 1}}\n", "workload.workers: 64 workers; topology star has 8 hosts"},
		{"bad load", head + "policies: [noina]\nscenarios: [{name: a, load: 0}]\n", "scenarios[0].load: 0"},
		{"huge turnaround", head + "policies: [noina]\nworkload: {turnaround: 1000s}\n", "s.yaml:4:24: workload.turnaround: turnaround 16m40s: want 0 to 1s"},
		{"huge control", head + "policies: [dynaina]\nscenarios: [{name: a, control: 2s}]\n", "s.yaml:4:32: scenarios[0].control: control latency 2s: want 0 to 1s"},
		{"bad jitter", head + "policies: [noina]\nworkload: {jitter: 0.9}\n", "workload.jitter: jitter 0.9"},
		{"unknown field", head + "policies: [noina]\nworkload: {jobz: 3}\n", "workload.jobz"},
		{"missing trace", head + "policies: [noina]\ntrace: nosuch.csv\n", "s.yaml:4:8: trace: nosuch.csv: no such file"},
		{"no topology", "kind: ina\npolicies: [noina]\n", "topology: missing"},
		{"netns", head + "substrate: netns\npolicies: [noina]\n", "substrate: netns: scenario \"default\" runs the ina experiment's flow-level model, which exists on sim only; set granularity: packet"},
		{"granularity", head + "policies: [noina]\nworkload: {granularity: packets}\n", "workload.granularity: \"packets\"; want flow"},
		{"bad atp_collisions", head + "policies: [noina]\nworkload: {atp_collisions: often}\n", "workload.atp_collisions: atp_collisions \"often\""},
		{"bad fabric_rate", head + "policies: [noina]\nworkload: {fabric_rate: 100Gbps}\n", "workload.fabric_rate: topology star has no link between two switches"},
		{"packet payload", head + "policies: [noina]\nworkload: {granularity: packet, payload: 512B, frame: 600B}\n", "payload: 512; packet-level runs carry 256 bytes"},
		{"packet loss", head + "policies: [noina]\nworkload: {granularity: packet, loss: 1}\n", "loss: 1; want a probability below 1"},
		{"flow overflow", head + "policies: [freeina]\nworkload: {freeina_overflow: 1%}\n", "workload.freeina_overflow: 0.01: the flow-level model carries no gradient values; set granularity: packet"},
		{"bad overflow", head + "policies: [freeina]\nworkload: {granularity: packet, freeina_overflow: 2}\n", "workload.freeina_overflow"},
		{"packet scale", head + "scale: 1e9\npolicies: [noina]\nworkload: {granularity: packet}\n", "scale: "},
		{"job list model", head + "policies: [noina]\nworkload: {job_list: [{model: nosuch, workers: 2, iterations: 1}]}\n", "s.yaml:4:23: workload.job_list[0]: unknown model \"nosuch\""},
		{"job list workers", head + "policies: [noina]\nworkload: {job_list: [{model: vgg16, workers: 99, iterations: 1}]}\n", "s.yaml:4:23: workload.job_list[0]: 99 workers; want 1 to"},
		{"job list ids", head + "policies: [noina]\nworkload: {job_list: [{id: 3, model: vgg16, workers: 2, iterations: 1}, {id: 3, model: vgg16, workers: 2, iterations: 1}]}\n", "s.yaml:4:73: workload.job_list[1]: id 3 is used twice"},
		{"job list and trace", head + "policies: [noina]\ntrace: wide.csv\nworkload: {job_list: [{model: vgg16, workers: 2, iterations: 1}]}\n", "give either a trace or a job_list"},
		{"trace too wide", head + "policies: [noina]\ntrace: wide.csv\n", "wide.csv:3: workers: job 1 needs 9 workers"},
		{"job list late", head + "policies: [noina]\nworkload: {job_list: [{arrival: 8760h, model: vgg16, workers: 2, iterations: 1}]}\n", "s.yaml:4:33: workload.job_list[0].arrival: 8760h0m0s at load 1 arrives 3.15e+07 s after the start, beyond the 1000000 s"},
		{"job list late at a scenario's load", head + "policies: [noina]\nworkload: {job_list: [{arrival: 10h, model: vgg16, workers: 2, iterations: 1}]}\nscenarios: [{name: a, load: 0.01}]\n", "s.yaml:5:29: scenarios[0].load: 0.01: job 0 would arrive"},
		{"default scenario's load", head + "policies: [noina]\nworkload: {jobs: 2, load: 1e-9}\n", "s.yaml:4:27: workload.load: 1e-09: job"},
		{"tiny load", head + "policies: [noina]\nscenarios: [{name: a, load: 1e-9}]\n", "s.yaml:4:29: scenarios[0].load: 1e-09: job"},
		{"tiny load on a trace", head + "policies: [noina]\ntrace: long.csv\nworkload: {load: 0.001}\n", "workload.load: 0.001: job 1 would arrive"},
		{"aggregators", head + "policies: [noina]\nworkload: {aggregators: 1000000000000}\n", "workload.aggregators: 1000000000000; want 0 to 1048576"},
		{"time compression below 1", head + "policies: [noina]\ntrace: wide.csv\nworkload: {time_compression: 0.5}\n", "s.yaml:5:30: workload.time_compression: 0.5; want a factor of 1"},
		{"time compression without a trace", head + "policies: [noina]\nworkload: {time_compression: 10}\n", "workload.time_compression: compresses a replayed trace; this scenario has none"},
	}
	if err := os.WriteFile(filepath.Join(dir, "long.csv"), []byte("arrival,model,workers,iterations\n0,vgg16,2,3\n5000,vgg16,2,3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "wide.csv"), []byte("arrival,model,workers,iterations\n0,vgg16,2,3\n1,vgg16,9,3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(dir, "s.yaml")
			spec, err := experiments.ParseSpec(file, []byte(tt.body), embedded)
			if err == nil {
				_, err = Kind{}.Compile(spec)
			}
			if err == nil {
				t.Fatalf("no error; want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q; want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestSpecEveryProblem: an INA spec with mistakes in its workload, two
// scenarios and two policies reports every one, each with its line and
// field, and a mistake in the shared workload section once.
func TestSpecEveryProblem(t *testing.T) {
	src := `kind: ina
topology: {generate: star, hosts: 8, aggregators: 256}
workload: {jitter: 0.9, bins: 0}
policies: [noina, {name: x, system: nosuch}, {name: switchml, partition: -5}]
scenarios:
  - {name: a, load: 0, mix: cartoons}
  - {name: b, granularity: packets, workers: {"64": 1}}
`
	spec, err := experiments.ParseSpec("s.yaml", []byte(src), embedded)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Kind{}.Compile(spec)
	if err == nil {
		t.Fatal("accepted")
	}
	want := []string{
		"s.yaml:3:20: workload.jitter: jitter 0.9",
		"s.yaml:6:21: scenarios[0].load: 0",
		"s.yaml:3:31: workload.bins: 0; want 1 to 10000",
		`s.yaml:6:29: scenarios[0].mix: unknown mix "cartoons"`,
		`s.yaml:7:28: scenarios[1].granularity: "packets"`,
		"s.yaml:7:46: scenarios[1].workers: 64 workers; topology star has 8 hosts",
		`s.yaml:4:37: policies[1].system: "nosuch" is not an INA policy`,
		"policies[2].partition: -5",
	}
	lines := strings.Split(err.Error(), "\n")
	for _, w := range want {
		n := 0
		for _, l := range lines {
			if strings.Contains(l, w) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%q reported %d times, want once, in\n%v", w, n, err)
		}
	}
	if len(lines) != len(want) {
		t.Errorf("%d problems reported, want %d:\n%v", len(lines), len(want), err)
	}
}

// TestSpecEveryProblemDecoding: problems of decoding (a value that is not
// a duration, an unknown field), of the shared sections (a scenario named
// twice, a bad generated topology) and of the kind's checks are reported
// together, each once, as validate reports them; a scenario is checked
// even when the topology it needs is bad.
func TestSpecEveryProblemDecoding(t *testing.T) {
	src := `kind: ina
topology: {generate: star, hosts: -4, aggregators: -3}
trace: nosuch.csv
workload: {turnaround: banana, jitter: -0.5}
policies: [noina, bogus, {name: switchml, partition: x}]
scenarios:
  - {name: a, load: -1, compute_scale: 0}
  - {name: a}
  - {name: b, frobnicate: 3}
`
	spec, err := experiments.ParseSpec("s.yaml", []byte(src), embedded)
	if spec == nil {
		t.Fatalf("no spec to check further: %v", err)
	}
	var probs problems.List
	probs.Add(err)
	_, cerr := Kind{}.Compile(spec)
	probs.Add(cerr)
	want := []string{
		"s.yaml:2:52: topology.aggregators: -3",
		"s.yaml:2:35: topology.hosts: -4 hosts",
		`s.yaml:8:5: scenarios[1].name: "a" is listed twice`,
		`s.yaml:4:24: workload.turnaround: duration "banana"`,
		"s.yaml:4:40: workload.jitter: jitter -0.5",
		"s.yaml:7:40: scenarios[0].compute_scale: compute_scale 0",
		"s.yaml:7:21: scenarios[0].load: -1",
		"s.yaml:3:8: trace: nosuch.csv: no such file",
		"s.yaml:9:15: scenarios[2].frobnicate: unknown field",
		`s.yaml:5:19: policies[1].system: "bogus" is not an INA policy`,
		`s.yaml:5:54: policies[2].partition: "x" is not a whole number`,
	}
	if err := problems.Match(probs.Err(), want); err != nil {
		t.Error(err)
	}
}

// TestRunSmall runs a small spec through the runner: metrics, series,
// params and the summary table.
func TestRunSmall(t *testing.T) {
	body := `kind: ina
seeds: [1, 2]
topology: {generate: star, hosts: 16, rate: 100Gbps, delay: 1us, aggregators: 1024}
workload: {jobs: 16, gpu_time: [20s, 2m], mix: vision}
policies: [noina, switchml, atp, dynaina]
scenarios:
  - {name: a}
  - {name: b, aggregators: 512, load: 2}
`
	spec, err := experiments.ParseSpec(filepath.Join(t.TempDir(), "small.yaml"), []byte(body), embedded)
	if err != nil {
		t.Fatal(err)
	}
	exp, err := Kind{}.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	res, err := experiments.Execute(context.Background(), spec, exp, experiments.Options{Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 16 {
		t.Fatalf("%d runs", len(res.Runs))
	}
	for _, r := range res.Runs {
		for _, m := range []string{MetricAvgJCT, MetricMakespan, MetricMemUtil, MetricINAFraction, MetricFallback} {
			if _, ok := r.Metrics[m]; !ok {
				t.Errorf("%s/%s: no %s", r.Scenario, r.Policy, m)
			}
		}
		cdf := r.Series["jct_cdf"]
		if len(cdf) != 16 || cdf[len(cdf)-1].Y != 1 || cdf[0].X > cdf[len(cdf)-1].X {
			t.Errorf("%s/%s: jct_cdf %v", r.Scenario, r.Policy, cdf)
		}
		if len(r.Series["mem_util"]) != 200 {
			t.Errorf("mem_util series has %d points", len(r.Series["mem_util"]))
		}
		wantAgg := 1024.0
		wantLoad := 1.0
		if r.Scenario == "b" {
			wantAgg, wantLoad = 512, 2
		}
		if r.Params["aggregators"] != wantAgg || r.Params["load"] != wantLoad || r.Params["compute_scale"] != 1 || r.Params["atp_hold_return"] != 1 {
			t.Errorf("%s: params %v", r.Scenario, r.Params)
		}
	}
	names := map[string]bool{}
	for _, s := range res.SeriesInfo {
		names[s.Name+"/"+s.Kind] = true
	}
	if !names["jct_cdf/cdf"] || !names["mem_util/time"] {
		t.Errorf("series info %v", res.SeriesInfo)
	}
	tables := experiments.Tables(exp, res)
	if len(tables) != 3 || !strings.Contains(tables[2].Title, "dynaina against each other policy (paired over seeds)") || len(tables[2].Rows) != 2*3+3 {
		t.Fatalf("tables: %d, last %q with %d rows", len(tables), tables[len(tables)-1].Title, len(tables[len(tables)-1].Rows))
	}
	// Two seeds: each row has a confidence interval and a verdict.
	for _, row := range tables[2].Rows[:6] {
		if !strings.HasPrefix(row[3], "[") || (row[4] != "yes" && row[4] != "no") {
			t.Errorf("row %v: want a 95%% CI and a verdict", row)
		}
	}
	// Same spec and seeds: byte-identical results.
	again, err := experiments.Execute(context.Background(), spec, exp, experiments.Options{Parallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := res.Marshal()
	b, _ := again.Marshal()
	if string(a) != string(b) {
		t.Error("two executions differ")
	}
}

// BenchmarkSuite runs the whole DynaINA suite — every policy, scenario and
// seed of dynaina-100g, dynaina-tiresias and dynaina-sweep — with the
// parallel runner on GOMAXPROCS cores, and reports the wall time of one
// suite (target: under 60 s on 2 cores) and the model's event rate.
func BenchmarkSuite(b *testing.B) { benchSpecs(b, suite, "suite") }

// benchSpecs runs the ready specs names with the parallel runner on
// GOMAXPROCS cores and reports their wall and CPU time per unit (all of
// them once) and the runs.
func benchSpecs(b *testing.B, names []string, unit string) {
	type comp struct {
		spec *experiments.Spec
		exp  experiments.Experiment
	}
	var cs []comp
	for _, name := range names {
		spec, err := experiments.Open(name, embedded)
		if err != nil {
			b.Fatal(err)
		}
		exp, err := Kind{}.Compile(spec)
		if err != nil {
			b.Fatal(err)
		}
		cs = append(cs, comp{spec, exp})
	}
	b.ResetTimer()
	start := time.Now()
	cpu0 := cputime.Process().Seconds()
	runs := 0
	for range b.N {
		for _, c := range cs {
			res, err := experiments.Execute(context.Background(), c.spec, c.exp, experiments.Options{})
			if err != nil {
				b.Fatal(err)
			}
			runs += len(res.Runs)
		}
	}
	wall := time.Since(start).Seconds() / float64(b.N)
	b.ReportMetric(wall, "s/"+unit)
	// CPU time is what the suite costs when other processes share the
	// cores; on 2 idle cores the wall time is about half of it.
	b.ReportMetric((cputime.Process().Seconds()-cpu0)/float64(b.N), "cpu-s/"+unit)
	b.ReportMetric(float64(runs/b.N), "runs/"+unit)
}

// BenchmarkFlowRun is one mixed-trace run of dynaina-100g under DynaINA: the
// flow model's event rate.
func BenchmarkFlowRun(b *testing.B) {
	spec, err := experiments.Open("dynaina-100g", embedded)
	if err != nil {
		b.Fatal(err)
	}
	exp, err := Kind{}.Compile(spec)
	if err != nil {
		b.Fatal(err)
	}
	e := exp.(*experiment)
	sc := e.scenarios["mixed"]
	js, _ := sc.Jobs(1)
	var events uint64
	b.ResetTimer()
	for range b.N {
		o, err := flow.Simulate(context.Background(), flow.Setup{Top: sc.top, Net: sc.net, Jobs: js, Policy: mustFactory(b, e, "dynaina", sc), Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
		events += o.Events
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	_ = analysis.Schema
}

// mustFactory builds a spec policy's scheduler factory for a scenario.
func mustFactory(t testing.TB, e *experiment, policy string, sc *scenario) inasched.Factory {
	t.Helper()
	f, err := e.factory(policy, sc)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestATPDefaults: the ina kind runs ATP as published on the flow model
// and as the data plane does at packet level; the data plane's rules are
// refused at packet level only when set the other way.
func TestATPDefaults(t *testing.T) {
	head := "kind: ina\ntopology: {generate: star, hosts: 8, aggregators: 256}\npolicies: [atp]\n"
	for _, tt := range []struct {
		body, hold, collisions string
	}{
		{"", fabric.HoldReturn, fabric.CollideRemap},
		{"workload: {granularity: packet}\n", fabric.HoldCompletion, fabric.CollideHash},
		{"workload: {atp_hold: completion, atp_collisions: hash}\n", fabric.HoldCompletion, fabric.CollideHash},
	} {
		spec, err := experiments.ParseSpec("s.yaml", []byte(head+tt.body), embedded)
		if err != nil {
			t.Fatal(err)
		}
		exp, err := Kind{}.Compile(spec)
		if err != nil {
			t.Fatal(err)
		}
		n := exp.(*experiment).scenarios["default"].net
		if n.ATPHold != tt.hold || n.ATPCollisions != tt.collisions {
			t.Errorf("%q: hold %s, collisions %s; want %s, %s", tt.body, n.ATPHold, n.ATPCollisions, tt.hold, tt.collisions)
		}
	}
}

// TestLimitsNameTheField: a run refused for its memory or events is
// refused at the field that drives the need.
func TestLimitsNameTheField(t *testing.T) {
	head := "kind: ina\ntopology: {generate: star, hosts: 8, aggregators: 256}\npolicies: [noina]\n"
	for _, tt := range []struct {
		name, body string
		limits     experiments.Limits
		want       string
	}{
		{"job list's events", head + "workload: {job_list: [{model: vgg16, workers: 2, iterations: 1000000}]}\n",
			experiments.Limits{Memory: experiments.DefaultLimits.Memory, Events: 1e5}, "s.yaml:4:22: workload.job_list: a run of scenario default fires about 4e+06"},
		{"job list's memory", head + "workload: {job_list: [{model: vgg16, workers: 2, iterations: 1000000}]}\n",
			experiments.Limits{Memory: 64 << 20, Events: 1e10}, "s.yaml:4:22: workload.job_list: a run of scenario default needs about"},
		{"switch memory", head + "workload: {jobs: 2}\nscenarios: [{name: a, aggregators: 1000000}]\n",
			experiments.Limits{Memory: 64 << 20, Events: 1e10}, "s.yaml:5:36: scenarios[0].aggregators: a run of scenario a needs about"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := experiments.ParseSpec(filepath.Join(t.TempDir(), "s.yaml"), []byte(tt.body), embedded)
			if err != nil {
				t.Fatal(err)
			}
			exp, err := Kind{}.Compile(spec)
			if err != nil {
				t.Fatal(err)
			}
			err = experiments.CheckLimits(spec, exp, tt.limits)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v; want it to contain %q", err, tt.want)
			}
		})
	}
}
