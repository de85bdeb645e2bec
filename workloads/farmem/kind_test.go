package farmem

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/internal/testproc"
	pfarmem "github.com/tracebed/tracebed/p4/farmem"
	"github.com/tracebed/tracebed/systems/fastswap"
	memtrace "github.com/tracebed/tracebed/traces/mem"
)

// withTraceCache runs the tests with the trace cache in a directory of
// their own, removed afterwards, never the user's.
func withTraceCache(run func() int) int {
	dir, err := os.MkdirTemp("", "farmem-trace-cache-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	os.Setenv(memtrace.CacheDirEnv, dir)
	return run()
}

// readEmbedded serves traces/mem/ as the binary does.
func readEmbedded(path string) ([]byte, error) {
	if rest, ok := strings.CutPrefix(path, "traces/mem/"); ok {
		return fs.ReadFile(memtrace.Files, rest)
	}
	return nil, fs.ErrNotExist
}

func compile(t testing.TB, file, yaml string) (*experiments.Spec, experiments.Experiment, error) {
	t.Helper()
	spec, err := experiments.ParseSpec(file, []byte(yaml), readEmbedded)
	if err != nil {
		return nil, nil, err
	}
	exp, err := Kind{}.Compile(spec)
	if err == nil {
		// As validate and run do, after their limits.
		err = experiments.Rehearse(context.Background(), exp)
	}
	return spec, exp, err
}

// compileFile compiles a spec file on disk, as 'tracebed run FILE' does.
func compileFile(t testing.TB, path string) (*experiments.Spec, experiments.Experiment, error) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return compile(t, path, string(data))
}

// executeFile runs a spec file on disk.
func executeFile(t testing.TB, path string) (*analysis.Results, experiments.Experiment) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return executeAs(t, path, string(data))
}

func execute(t testing.TB, yaml string) (*analysis.Results, experiments.Experiment) {
	t.Helper()
	return executeAs(t, "small.yaml", yaml)
}

// executeAs compiles yaml as the spec file named file and runs it.
func executeAs(t testing.TB, file, yaml string) (*analysis.Results, experiments.Experiment) {
	t.Helper()
	spec, exp, err := compile(t, file, yaml)
	if err != nil {
		t.Fatal(err)
	}
	res, err := experiments.Execute(context.Background(), spec, exp, experiments.Options{Parallel: 2, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return res, exp
}

func TestSpecErrors(t *testing.T) {
	const head = "kind: farmem\npolicies: [fastswap]\n"
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown app", head + "scenarios:\n  - {name: a, app: sort}\n", `bad.yaml:4:20: scenarios[0].app: "sort" is not a workload; want one of quicksort, linpack`},
		{"local memory", head + "scenarios:\n  - {name: a, local_memory: 0}\n", "bad.yaml:4:29: scenarios[0].local_memory: 0; want a fraction"},
		{"too many hosts", head + "workload: {hosts: 20}\n", "bad.yaml:3:19: workload.hosts: 20 paging hosts wanted, but topology farmem has only 12 hosts"},
		{"unknown role host", head + "workload: {roles: {hosts: [h99]}}\n", `workload.roles: paging hosts: "h99" is not a host of topology farmem`},
		{"host in two roles", head + "workload: {roles: {hosts: [h1], servers: [h1]}}\n", "host h1 is both paging hosts and memory servers"},
		{"apps per host", head + "scenarios:\n  - {name: a, apps: [stream]}\n", "scenarios[0].apps: 1 applications for 4 hosts"},
		{"unknown policy", "kind: farmem\npolicies: [hermit]\n", `bad.yaml:2:12: policies[0].host: "hermit" is not a known policy`},
		{"bad network", "kind: farmem\npolicies: [{name: x, host: glitter, network: pfc}]\n", `bad.yaml:2:46: policies[0].network: "pfc": want fifo or glitter`},
		{"missing trace", head + "scenarios:\n  - {name: a, app: trace}\n", "scenarios[0].trace: app trace needs a trace file"},
		{"unreadable trace", head + "workload: {app: trace, trace: nope.memtrace}\n", "workload.trace: nope.memtrace: no such file"},
		{"unknown field", head + "workload: {local_mem: 0.5}\n", "bad.yaml:3:12: workload.local_mem: unknown field"},
		{"loss of every frame", head + "scenarios:\n  - {name: a, loss: 1}\n", "bad.yaml:4:21: scenarios[0].loss: 1; below 50%"},
		{"huge fault overhead", head + "workload: {fault_overhead: 1000s}\n", "bad.yaml:3:28: workload.fault_overhead: 16m40s; want 0 to 1ms"},
		{"huge reclaim overhead", head + "workload: {reclaim_overhead: 2ms}\n", "bad.yaml:3:30: workload.reclaim_overhead: 2ms; want 0 to 1ms"},
		{"background needs senders", head + "workload: {background: {load: 0.5}}\n", "background: load 0.5 needs senders"},
		// Runs that cannot end within the run limit (they validated,
		// then ran to it).
		{"host link too slow for its write-backs", head + "topology: {generate: star, hosts: 3, rate: 1kbps}\nworkload: {hosts: 1, servers: 1, memory_scale: 2048}\n",
			"bad.yaml:4:11: workload.local_memory: host h1's memcached writes 127 pages of its 256 to a server at least once (local_memory 0.5), 0.5 MiB over a 1Kbps link: at least 1h9m22s of paper time, beyond the run limit of 16m40s"},
		{"server links too slow", head + "topology: {generate: star, hosts: 4, rate: 20kbps}\nworkload: {hosts: 3, servers: 1, memory_scale: 2048}\n",
			"bad.yaml:4:11: workload.local_memory: the hosts read 4.9 MiB from and write 2.2 MiB to the memory servers (1) at least, over 20Kbps of server links (local_memory 0.5): about 33m58s of paper time, beyond the run limit of 16m40s"},
		{"faults over a slow link", head + "topology: {generate: star, hosts: 3, rate: 100kbps}\nworkload: {hosts: 1, servers: 1, memory_scale: 256, app: kmeans}\n",
			"bad.yaml:4:11: workload.local_memory: host h1's kmeans, its first 17823 accesses replayed through clock over its 1032 frames (local_memory 0.5), faults 8068 times and writes back 2349 pages: 60% of that, 18.9 MiB over a 100Kbps link, takes 26m26s of paper time, beyond the run limit of 16m40s"},
		{"faults over long round trips", head + "topology: {generate: star, hosts: 3, rate: 10Gbps, delay: 100ms}\nworkload: {hosts: 1, servers: 1, memory_scale: 256, app: kmeans}\n",
			"bad.yaml:4:11: workload.local_memory: host h1's kmeans, its first 17823 accesses replayed through clock over its 1032 frames (local_memory 0.5), faults 8068 times: 60% of those faults, each waiting 400.003ms for its page, and 24ms of compute take 32m16s of paper time, beyond the run limit of 16m40s"},
		{"a dry run not done", head + "topology: {generate: star, hosts: 3, rate: 10Gbps, delay: 30ms}\nworkload: {hosts: 1, servers: 1, memory_scale: 256, app: kmeans}\n",
			"bad.yaml:4:11: workload.local_memory: its runs are estimated to take from 9m41s to 16m22s of paper time, with every queue full, against the run limit of 16m40s, so policy fastswap ran once on sim (seed 1): not done after 13m20s of paper time"},
		{"compute beyond the run limit", head + "workload: {app: quicksort, memory_scale: 2048, iterations: 1000000}\n",
			"workload.local_memory: host h1's quicksort computes for"},
		{"netns link HTB cannot shape", head + "substrate: netns\nscale: 1000\ntopology: {generate: star, hosts: 3, rate: 4kbps}\nworkload: {hosts: 1, servers: 1, memory_scale: 2048, local_memory: 1}\n",
			"bad.yaml:5:11: topology: link h1:eth0–tor:eth1: 4Kbps at scale 1000 is 4 bit/s on netns, below what HTB can shape (8 bit/s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := compile(t, "bad.yaml", tc.yaml)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v\nwant one containing %q", err, tc.want)
			}
		})
	}
}

// small is a quick experiment: working sets of 256 pages (memory_scale
// 2048 for the 2 GiB workloads), two hosts, one server.
const small = `name: small
kind: farmem
seeds: [1]
topology: {generate: leafspine, spines: 1, leaves: 2, hosts_per_leaf: 3, rate: 100Gbps, delay: 1us, buffer: 256KiB, queues: 8}
workload:
  roles: {hosts: [h1, h2], servers: [h4], background: [h5, h6]}
  memory_scale: 2048
  reclaim_overhead: 1us
  fault_overhead: 1us
policies: [fastswap, glitter, glitter-host-only, glitter-net-only]
scenarios:
  - {name: fits, apps: [quicksort, memcached], local_memory: 1.0}
  - {name: tight, apps: [quicksort, memcached], local_memory: 0.5}
  - {name: lossy, apps: [stream, kmeans], local_memory: 0.5, loss: 0.01, duplicate: 0.002, reorder: 0.002}
  - {name: congested, apps: [stream, kmeans], local_memory: 0.5, background: {senders: 2, load: 0.75}}
  - {name: sample, app: trace, trace: traces/mem/samples/transpose.memtrace, local_memory: 0.5}
`

func metric(t testing.TB, res *analysis.Results, scenario, policy, name string) float64 {
	t.Helper()
	for _, r := range res.Runs {
		if r.Scenario == scenario && r.Policy == policy {
			return r.Metrics[name]
		}
	}
	t.Fatalf("no run %s/%s", scenario, policy)
	return 0
}

func TestSmallExperiment(t *testing.T) {
	res, exp := execute(t, small)
	for _, r := range res.Runs {
		if r.Metrics[MetricIntegrity] != 0 {
			t.Errorf("%s/%s: %v integrity errors", r.Scenario, r.Policy, r.Metrics[MetricIntegrity])
		}
		if r.Metrics[MetricThroughput] <= 0 || r.Metrics[MetricCompletion] <= 0 {
			t.Errorf("%s/%s: no throughput", r.Scenario, r.Policy)
		}
		if r.Params["local_memory_ratio"] == 0 {
			t.Errorf("%s/%s: params %v", r.Scenario, r.Policy, r.Params)
		}
		if r.Scenario != "fits" {
			c := r.Series[SeriesFaultCDF]
			if len(c) == 0 || c[len(c)-1].Y != 1 {
				t.Errorf("%s/%s: fault CDF %v does not end at 1", r.Scenario, r.Policy, c)
			}
			for i := 1; i < len(c); i++ {
				if c[i].X < c[i-1].X || c[i].Y <= c[i-1].Y {
					t.Errorf("%s/%s: fault CDF not increasing at %d", r.Scenario, r.Policy, i)
					break
				}
			}
		}
	}
	// Local memory as large as the working set: no faults, no blocking,
	// for every policy.
	for _, p := range res.Policies {
		if f, b := metric(t, res, "fits", p, MetricFaults), metric(t, res, "fits", p, MetricBlocks); f != 0 || b != 0 {
			t.Errorf("fits/%s: %v faults and %v blocks, want none", p, f, b)
		}
	}
	// A tight limit makes Fastswap block.
	if b := metric(t, res, "tight", "fastswap", MetricBlocks); b == 0 {
		t.Error("tight/fastswap: no blocking")
	}
	if len(res.Runs[0].Series[SeriesBlocking]) != 0 {
		t.Error("fits: blocking series not empty")
	}
	for _, r := range res.Runs {
		if r.Scenario == "tight" && r.Policy == "fastswap" && len(r.Series[SeriesBlocking]) != int(r.Metrics[MetricBlocks]) {
			t.Errorf("tight/fastswap: %d blocking points for %v events", len(r.Series[SeriesBlocking]), r.Metrics[MetricBlocks])
		}
	}
	// Loss is survived by retransmission.
	if r := metric(t, res, "lossy", "fastswap", MetricRetransmits); r == 0 {
		t.Error("lossy: no retransmissions")
	}
	// Under congestion, Glitter's network scheduling keeps fault latency
	// at the idle round trip and the throughput up; without it, it does not.
	if g, f := metric(t, res, "congested", "glitter-net-only", MetricThroughput), metric(t, res, "congested", "fastswap", MetricThroughput); g <= 1.05*f {
		t.Errorf("congested: glitter-net-only %v ops/s, fastswap %v", g, f)
	}
	if g, f := metric(t, res, "congested", "glitter", MetricFaultP99), metric(t, res, "congested", "fastswap", MetricFaultP99); g >= f {
		t.Errorf("congested: glitter p99 fault %vµs, fastswap %vµs", g, f)
	}
	// The recorded real program replays.
	if ops := metric(t, res, "sample", "fastswap", MetricThroughput); ops <= 0 {
		t.Error("sample: no throughput")
	}
	// Series are declared with the names plots use.
	names := map[string]string{}
	for _, s := range res.SeriesInfo {
		names[s.Name] = s.Kind
	}
	if names[SeriesFaultCDF] != "cdf" || names[SeriesBlocking] != "time" {
		t.Errorf("series info %v", res.SeriesInfo)
	}
	// The summary compares every policy with Fastswap.
	tables := experiments.Tables(exp, res)
	last := tables[len(tables)-1]
	if !strings.Contains(last.Title, "throughput over Fastswap") || len(last.Rows) != len(res.Scenarios)+4 {
		t.Errorf("summary table %q with %d rows", last.Title, len(last.Rows))
	}
}

func TestDeterministic(t *testing.T) {
	one := func() []byte {
		res, _ := execute(t, strings.Replace(small, "policies: [fastswap, glitter, glitter-host-only, glitter-net-only]", "policies: [fastswap, glitter]", 1))
		b, err := res.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if a, b := one(), one(); !bytes.Equal(a, b) {
		t.Error("two runs of one spec and seed differ")
	}
}

func TestReadySpecs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		runs     int
		isDefalt bool
	}{{"glitter-100g", 84, true}, {"glitter-congestion", 48, false}, {"glitter-netns", 4, false}} {
		spec, err := experiments.Open(tc.name, readEmbedded)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := (Kind{}).Compile(spec); err != nil {
			t.Fatal(err)
		}
		if n := len(spec.Policies) * len(spec.Scenarios) * len(spec.Seeds); n != tc.runs || spec.Default != tc.isDefalt {
			t.Errorf("%s: %d runs, default %v", tc.name, n, spec.Default)
		}
	}
}

// TestReplayRecordedProgram records a small C program with valgrind's lackey
// tool and replays the recording on a paging host, as a user would: the spec
// names the .lackey file directly.
func TestReplayRecordedProgram(t *testing.T) {
	valgrind, err := exec.LookPath("valgrind")
	if err != nil {
		t.Skip("valgrind is not installed: cannot record a real program (apt-get install valgrind)")
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is not installed: cannot build the program to record")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "stride")
	if out, err := testproc.Command(t, cc, "-O1", "-o", bin, filepath.Join("..", "..", "traces", "mem", "testdata", "stride.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	log := filepath.Join(dir, "stride.lackey")
	if out, err := testproc.Command(t, valgrind, "--tool=lackey", "--trace-mem=yes", "--log-file="+log, bin).CombinedOutput(); err != nil {
		t.Fatalf("valgrind: %v\n%s", err, out)
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	_, src, err := memtrace.Open(log, data)
	if err != nil {
		t.Fatal(err)
	}
	st, err := memtrace.Summarize(src)
	if err != nil {
		t.Fatal(err)
	}
	spec := `kind: farmem
workload: {roles: {hosts: [h1], servers: [h7]}, app: trace, trace: ` + log + `, local_memory: 0.25, memory_scale: 256}
policies: [fastswap, glitter]
`
	res, _ := execute(t, spec)
	for _, r := range res.Runs {
		if r.Metrics[MetricIntegrity] != 0 || r.Metrics[MetricFaults] == 0 {
			t.Errorf("%s: %v integrity errors, %v faults", r.Policy, r.Metrics[MetricIntegrity], r.Metrics[MetricFaults])
		}
		// A quarter of the pages (35, plus 8 of headroom) are local, and
		// the program writes a 64-page buffer in order, then reads it in
		// order: every page of the second pass must be fetched.
		if r.Metrics[MetricFaults] < 64 {
			t.Errorf("%s: %v faults, want at least the 64 pages of the buffer's second pass", r.Policy, r.Metrics[MetricFaults])
		}
	}
	t.Logf("replayed %v: faults %v", st, metric(t, res, "default", "fastswap", MetricFaults))
}

// TestScaleInvariance runs one congested scenario at paper scale and at
// scale 1000 (link rates ÷ 1000, every time constant × 1000) on sim: the
// results, converted back to paper units, must be the same but for
// rounding to the nanosecond.
func TestScaleInvariance(t *testing.T) {
	const spec = `name: scaled
kind: farmem
seeds: [1]
scale: SCALE
topology: {generate: star, hosts: 5, rate: 100Gbps, delay: 1us, buffer: 256KiB, queues: 8}
workload:
  roles: {hosts: [h1, h2], servers: [h3], background: [h4, h5]}
  apps: [memcached, stream]
  memory_scale: 4096
  local_memory: 0.5
  fault_overhead: 1us
  reclaim_overhead: 1us
  background: {senders: 2, load: 0.5, burst: 20us, frame: 9000B}
policies: [fastswap, glitter]
`
	paper, _ := execute(t, strings.Replace(spec, "SCALE", "1", 1))
	scaled, _ := execute(t, strings.Replace(spec, "SCALE", "1000", 1))
	for _, p := range paper.Policies {
		for _, m := range []struct {
			name string
			tol  float64
		}{{MetricThroughput, 0.005}, {MetricCompletion, 0.005}, {MetricFaultP50, 0.005}, {MetricFaults, 0.01}, {MetricBlocks, 0.05}} {
			a, b := metric(t, paper, "default", p, m.name), metric(t, scaled, "default", p, m.name)
			if math.Abs(b-a) > m.tol*math.Abs(a) {
				t.Errorf("%s %s: %v at scale 1, %v at scale 1000 (in paper units)", p, m.name, a, b)
			}
		}
	}
	if g, f := metric(t, scaled, "default", "glitter", MetricThroughput), metric(t, scaled, "default", "fastswap", MetricThroughput); g <= f {
		t.Errorf("scale 1000: glitter %v ops/s, fastswap %v", g, f)
	}
}

// mtuTestbed is a sim testbed whose links claim an MTU.
type mtuTestbed struct {
	testbed.Testbed
	mtu int
}

func (m mtuTestbed) MTU() int { return m.mtu }

// TestMTU checks that a testbed whose links cannot carry a page in one
// frame is refused with a message that says what to change.
func TestMTU(t *testing.T) {
	spec, exp, err := compile(t, "mtu.yaml", small)
	if err != nil {
		t.Fatal(err)
	}
	spec.Scenarios = spec.Scenarios[3:4] // congested: pages and 9000-byte bulk frames
	spec.Policies = spec.Policies[:1]
	for _, tc := range []struct {
		mtu  int
		want string
	}{
		{1500, "a page of 4096 bytes travels as a 4148-byte IP packet, above the links' MTU of 1500 bytes"},
		{8000, "the bulk tenant's 9000B frames are 8986-byte IP packets, above the links' MTU of 8000 bytes"},
		{9000, ""},
	} {
		factory := func(ctx context.Context, cfg testbed.Config) (testbed.Testbed, error) {
			tb, err := testbed.NewSim(cfg)
			return mtuTestbed{tb, tc.mtu}, err
		}
		_, err := experiments.Execute(context.Background(), spec, exp, experiments.Options{NewTestbed: factory})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("MTU %d: %v", tc.mtu, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("MTU %d: error %v, want one containing %q", tc.mtu, err, tc.want)
		}
	}
}

// TestSwitchCounters checks that the run reads the switches' far-memory
// counters through P4Runtime: with Glitter's rules the switches classify
// far-memory packets into priorities; with Fastswap's (none) every one
// takes the default action.
func TestSwitchCounters(t *testing.T) {
	_, exp, err := compile(t, "small.yaml", small)
	if err != nil {
		t.Fatal(err)
	}
	e := exp.(*experiment)
	for _, tc := range []struct {
		policy     string
		classified bool
	}{{"fastswap", false}, {"glitter", true}} {
		o, err := run(context.Background(), experiments.SimTestbed, e.scenarios["tight"], e.policies[tc.policy], 1, nil, nil, runLimit, nil)
		if err != nil {
			t.Fatal(err)
		}
		var classified, def, packets uint64
		for _, c := range o.Switches {
			classified += c.Stats[pfarmem.StatClassified]
			def += c.Stats[pfarmem.StatDefault]
			for _, n := range c.Packets {
				packets += n
			}
		}
		if len(o.Switches) != 3 || packets == 0 || (classified > 0) != tc.classified || (def > 0) == tc.classified {
			t.Errorf("%s: %d switches, %d far-memory packets, %d classified, %d default", tc.policy, len(o.Switches), packets, classified, def)
		}
	}
}

// TestCompileInterrupted: Compile, which summarizes every host's generated
// access stream, stops once the spec's context is done (a SIGTERM to
// 'tracebed validate' waited a minute at iterations: 100000).
func TestCompileInterrupted(t *testing.T) {
	spec, err := experiments.ParseSpec("s.yaml", []byte("kind: farmem\npolicies: [fastswap]\nworkload: {iterations: 1}\n"), readEmbedded)
	if err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stopped by the test")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(stop)
	spec.SetContext(ctx)
	if _, err := (Kind{}).Compile(spec); !errors.Is(err, stop) {
		t.Fatalf("Compile with its context done: %v; want %v", err, stop)
	}
}

// TestDurationCountsHeadroom: the paging traffic validate counts is that
// of the policy that keeps the fewest frames, since every policy's runs
// must end. The kmeans scenario refused over 100 kbit/s links with
// Fastswap's headroom (TestSpecErrors) passes with a policy whose
// offload_pages lets the whole working set stay, and is refused again
// with Fastswap beside it.
func TestDurationCountsHeadroom(t *testing.T) {
	const body = "topology: {generate: star, hosts: 3, rate: 100kbps}\nworkload: {hosts: 1, servers: 1, memory_scale: 256, app: kmeans}\n"
	const roomy = "{name: roomy, host: fastswap, network: fifo, offload_pages: 1000000}"
	for _, tc := range []struct {
		policies string
		refused  bool
	}{
		{"[fastswap]", true},
		{"[" + roomy + "]", false},
		{"[" + roomy + ", fastswap]", true},
	} {
		_, _, err := compile(t, "s.yaml", "kind: farmem\npolicies: "+tc.policies+"\n"+body)
		if refused := err != nil && strings.Contains(err.Error(), "replayed through clock"); refused != tc.refused || (err != nil && !refused) {
			t.Errorf("policies %s: %v; want refused by the replay: %v", tc.policies, err, tc.refused)
		}
	}
}

// TestDryRunAccepts compiles a scenario near the run limit (its estimate
// makes Compile run it once on sim, and it is done in time) and checks that
// the runs validate accepted end, for every policy and other seeds.
func TestDryRunAccepts(t *testing.T) {
	const yaml = "kind: farmem\npolicies: [fastswap, glitter]\nseeds: [1, 2]\n" +
		"topology: {generate: star, hosts: 3, rate: 10Gbps, delay: 20ms}\nworkload: {hosts: 1, servers: 1, memory_scale: 256, app: kmeans}\n"
	spec, exp, err := compile(t, "near.yaml", yaml)
	if err != nil {
		t.Fatal(err)
	}
	e := exp.(*experiment)
	lower, rough, err := e.scenarios["default"].checkDuration(fastswap.Scaled(fastswap.MaxReclaimOffload, 256), nil)
	if err != nil || rough <= runLimit/dryRunNear {
		t.Fatalf("estimate %v to %v (%v); want one above %v, so that Compile runs the scenario", lower, rough, err, runLimit/dryRunNear)
	}
	for _, r := range experiments.Runs(spec) {
		res, err := exp.Run(context.Background(), r)
		if err != nil {
			t.Errorf("%s/%s/seed %d: %v", r.Scenario, r.Policy, r.Seed, err)
			continue
		}
		t.Logf("%s/%s/seed %d: done in %.0f s of paper time (lower bound %v)", r.Scenario, r.Policy, r.Seed, res.Metrics[MetricCompletion], lower)
	}
}
