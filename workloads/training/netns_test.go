package training

import (
	"cmp"
	"context"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/p4/programs"
	"github.com/tracebed/tracebed/workloads/training/packet"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/switch/switchcmd"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/emulator/testbed/netnstb"
	"github.com/tracebed/tracebed/experiments"
	dp "github.com/tracebed/tracebed/p4/freeina"
	"github.com/tracebed/tracebed/traces/models"
	freepkt "github.com/tracebed/tracebed/workloads/freeina"
)

func TestMain(m *testing.M) {
	switchcmd.Main(programs.Registry) // the Go switches of the netns runs are this binary
	os.Exit(netns.RunTests(m, netnsPrefix))
}

// netnsPrefix starts the run ids of this test binary, so that test
// binaries running at the same time check and clean up only their own runs.
var netnsPrefix = "i" + netns.NewRunID()[:1]

// netnsTestbeds builds netns testbeds whose run ids carry this binary's
// prefix.
var netnsTestbeds = netnstb.NewFactory(netnstb.Options{RunIDPrefix: netnsPrefix, SwitchIO: os.Getenv("CROSSVAL_SWITCH_IO"), Network: os.Getenv("CROSSVAL_NETWORK")}).New

// packetRun runs one policy of one packet-level scenario of spec directly
// with RunPacket, logging the controller's decisions when verbose.
func packetRun(t *testing.T, spec *experiments.Spec, scenario, policy string, seed int64, newTB experiments.TestbedFactory, verbose bool) *packet.Outcome {
	t.Helper()
	exp, err := Kind{}.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	e := exp.(*experiment)
	sc := e.scenarios[scenario]
	js, err := sc.Jobs(seed)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if newTB == nil {
		newTB = experiments.SimTestbed
	}
	tb, err := newTB(ctx, sc.testbedConfig(inaProgram(t), seed))
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if tb.Substrate() == "netns" {
		defer realtime(t)()
	}
	s := packet.Setup{
		Testbed: sc.hostModel(tb, uint64(seed)), Workers: sc.scaled.Workers, Controller: sc.scaled.Controller, PS: sc.scaled.PS,
		Net: sc.scaled.Net, Jobs: js, Lookup: packet.ScaleProfiles(models.Lookup, sc.scaled.Factor),
		Policy: mustFactory(t, e, policy, sc.scaledScenario()), Seed: uint64(seed),
		Timeout: sc.timeout, RingTimeout: sc.ringTimeout, RingWindow: sc.ringWindow, Sample: time.Duration(sc.p.Sample), Bins: sc.p.Bins,
	}
	if verbose {
		s.Log = t.Logf
	}
	o, err := packet.Run(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestCompareSubstrates is a tool rather than a check: it runs one policy
// of one packet-level scenario on sim and, as root, on netns, and prints
// each job's times and the run's counters (and, with INA_VERBOSE=1, every
// decision of the controller):
//
//	INA_SPEC=dynaina-netns INA_SCENARIO=clean INA_POLICY=atp [INA_SUBSTRATES=sim,netns] [INA_VERBOSE=1] \
//	    go test -run CompareSubstrates -v ./workloads/training
func TestCompareSubstrates(t *testing.T) {
	file := os.Getenv("INA_SPEC")
	if file == "" {
		t.Skip("skipping: a tool — set INA_SPEC, INA_SCENARIO and INA_POLICY to compare one run on both substrates")
	}
	spec, err := experiments.Open(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	subs := []string{"sim", "netns"}
	if v := os.Getenv("INA_SUBSTRATES"); v != "" {
		subs = strings.Split(v, ",")
	}
	for _, sub := range subs {
		var f experiments.TestbedFactory
		if sub == "netns" {
			if os.Geteuid() != 0 {
				continue
			}
			f = netnsTestbeds
		}
		o := packetRun(t, spec, os.Getenv("INA_SCENARIO"), os.Getenv("INA_POLICY"), 1, f, os.Getenv("INA_VERBOSE") != "")
		for _, j := range o.Jobs {
			t.Logf("%s job %d: arrival %.3f start %.3f finish %.3f jct %.3f", sub, j.ID, j.Arrival, j.Start, j.Finish, j.JCT())
		}
		t.Logf("%s: avg %.4f makespan %.4f mem %.4f ina %.4f collisions %d pschunks %d retx %d ctl %d/%d drops %d lost %d errors %d", sub, o.AvgJCT(), o.Makespan, o.MemUtil, o.INAFraction, o.Collisions, o.PSChunks, o.Retransmits, o.CtlMessages, o.CtlRetransmits, o.QueueDrops, o.Lost, o.SwitchErrors)
	}
}

func needNetns(t *testing.T) {
	t.Helper()
	if err := netnstb.Check(netnstb.Options{}); err != nil {
		t.Skipf("skipping: %v; CI runs as root", err)
	}
	if testing.Short() {
		t.Skip("skipping in -short mode: the netns runs take about a minute of real time")
	}
}

// netnsSpec is dynaina-netns restricted to some scenarios and policies
// (nil: all), at the scale factor CROSSVAL_SCALE if set (to find the
// smallest at which the substrates still agree: docs/scaling.md).
func netnsSpec(t *testing.T, scenarios, policies []string) *experiments.Spec {
	t.Helper()
	spec := readySpec(t, "dynaina-netns", scenarios, policies)
	crossvalScale(t, spec)
	return spec
}

// crossvalScale sets spec's scale factor to CROSSVAL_SCALE, if set.
func crossvalScale(t *testing.T, spec *experiments.Spec) {
	t.Helper()
	if v := os.Getenv("CROSSVAL_SCALE"); v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("CROSSVAL_SCALE: %v", err)
		}
		t.Logf("scale factor %g (CROSSVAL_SCALE; the spec says %g)", s, spec.Scale)
		spec.Scale = s
	}
}

// readySpec is a ready spec restricted to some scenarios and policies
// (nil: all).
func readySpec(t *testing.T, name string, scenarios, policies []string) *experiments.Spec {
	t.Helper()
	spec, err := experiments.Open(name, nil)
	if err != nil {
		t.Fatal(err)
	}
	keep := func(es []experiments.Entry, names []string) []experiments.Entry {
		if names == nil {
			return es
		}
		var out []experiments.Entry
		for _, e := range es {
			if slices.Contains(names, e.Name) {
				out = append(out, e)
			}
		}
		if len(out) != len(names) {
			t.Fatalf("%s has no %v", name, names)
		}
		return out
	}
	spec.Scenarios, spec.Policies = keep(spec.Scenarios, scenarios), keep(spec.Policies, policies)
	return spec
}

// execute runs spec on sim (newTB nil) or with newTB, one run at a time on
// netns (real time).
func execute(t *testing.T, spec *experiments.Spec, newTB experiments.TestbedFactory) *analysis.Results {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	opts := experiments.Options{Parallel: 2, Version: "test"}
	spec.Substrate = "sim"
	if newTB != nil {
		spec.Substrate = "netns"
		opts.Parallel, opts.NewTestbed = 1, newTB
		defer realtime(t)()
	}
	exp, err := Kind{}.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	res, err := experiments.Execute(ctx, spec, exp, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestNetnsCrossValidation runs dynaina-netns's clean scenario on both
// substrates: the policies must rank identically by average JCT and each
// policy's average JCT on netns must be within 15% of the simulation's.
// Every all-reduced tensor is verified exact by the workers in both runs
// (a run with an inexact sum fails).
//
// Both substrates run two seeds and compare means: ATP's collisions make
// single netns runs of it vary by ±8% (docs/scaling.md).
func TestNetnsCrossValidation(t *testing.T) {
	needNetns(t)
	spec := netnsSpec(t, []string{"clean"}, nil)
	spec.Seeds = []int64{1, 2}
	sim := execute(t, spec, nil)
	netns := netnsSpec(t, []string{"clean"}, nil)
	netns.Seeds = spec.Seeds
	emu := execute(t, netns, netnsTestbeds)
	jct := func(res *analysis.Results, policy string) float64 {
		a := res.Aggregate("clean", policy)
		return a[MetricAvgJCT].Mean
	}
	rank := func(res *analysis.Results) []string {
		p := slices.Clone(res.Policies)
		slices.SortStableFunc(p, func(a, b string) int { return cmp.Compare(jct(res, a), jct(res, b)) })
		return p
	}
	t.Logf("%-9s %12s %12s %8s", "policy", "sim avg_jct", "netns", "ratio")
	for _, p := range spec.Policies {
		s, n := jct(sim, p.Name), jct(emu, p.Name)
		t.Logf("%-9s %11.3fs %11.3fs %8.3f", p.Name, s, n, n/s)
		if math.Abs(n/s-1) > 0.15 {
			t.Errorf("%s: average JCT %.3f s on netns is %+.1f%% off the simulation's %.3f s (want within 15%%)", p.Name, n, 100*(n/s-1), s)
		}
	}
	if a, b := rank(sim), rank(emu); !slices.Equal(a, b) {
		t.Errorf("policies rank %v on sim, %v on netns", a, b)
	} else {
		t.Logf("rank on both substrates: %v", a)
	}
}

// TestNetnsExactUnderLoss runs the lossy scenario (1% loss on every link,
// injected by the switch) on netns with a policy of each aggregation mode
// — the host ring (noina), the shared pool through parameter servers
// (atp) and dynamic pools (dynaina): every all-reduced tensor must be the
// exact sum, and the loss must have been injected and repaired.
func TestNetnsExactUnderLoss(t *testing.T) {
	needNetns(t)
	spec := netnsSpec(t, []string{"lossy"}, nil)
	for _, policy := range []string{"noina", "atp", "dynaina"} {
		o := packetRun(t, spec, "lossy", policy, 1, netnsTestbeds, false)
		t.Logf("%s: %d of %d all-reduced tensors exact; %d frames lost by the switch, %d data retransmissions, %d control retransmissions, %d collisions",
			policy, o.Verified, o.Rounds, o.Lost, o.Retransmits, o.CtlRetransmits, o.Collisions)
		if o.Rounds == 0 || o.Verified != o.Rounds {
			t.Errorf("%s: %d of %d all-reduces verified exact", policy, o.Verified, o.Rounds)
		}
		if o.Lost == 0 || o.Retransmits == 0 {
			t.Errorf("%s: %d frames lost, %d retransmissions: the loss was not exercised", policy, o.Lost, o.Retransmits)
		}
	}
}

// TestNetnsSlowSwitch: with a switch whose every P4Runtime request takes
// 250 ms, the packet-level controller's timers still fire on time on
// netns — its requests (ATP's shared binding, its occupancy samples every
// 50 ms on average, the release) run outside its callbacks, on its
// substrate's goroutine — and the run completes exact. A controller that
// blocked on them would fire a timer about 250 ms late at each sample.
// TestControlCallsAreEvents checks the same on sim, deterministically.
func TestNetnsSlowSwitch(t *testing.T) {
	needNetns(t)
	const slow = 250 * time.Millisecond
	spec := netnsSpec(t, []string{"clean"}, []string{"atp"})
	spec.Scenarios[0].Node = patch(t, spec.Scenarios[0], `{name: clean, job_list: [{arrival: 0s, model: bert-large, workers: 4, iterations: 6}, {arrival: 0s, model: vgg16, workers: 4, iterations: 6}]}`)
	var w *testbed.Watched
	watch := func(ctx context.Context, cfg testbed.Config) (testbed.Testbed, error) {
		tb, err := netnsTestbeds(ctx, cfg)
		if err != nil {
			return nil, err
		}
		w = testbed.Watch(tb, slow)
		return w, nil
	}
	o := packetRun(t, spec, "clean", "atp", 1, watch, false)
	r := w.Report()
	t.Logf("%d P4Runtime requests of %v each; %d agent timers fired, the latest %v late; %d of %d all-reduces exact, avg JCT %.3f s",
		r.Calls, slow, r.Timers, r.MaxLateness, o.Verified, o.Rounds, o.AvgJCT())
	if r.Calls < 3 || r.Timers == 0 {
		t.Errorf("%d requests, %d timers: the slow switch was not exercised", r.Calls, r.Timers)
	}
	if r.MaxLateness > slow/2 {
		t.Errorf("a timer fired %v late with requests of %v: an agent blocked on the switch", r.MaxLateness, slow)
	}
	if o.Rounds == 0 || o.Verified != o.Rounds {
		t.Errorf("%d of %d all-reduces verified exact", o.Verified, o.Rounds)
	}
}

// realtime runs the rest of the test at real-time priority
// (netnstb.Realtime), so that other work on the machine does not delay the
// emulation's wake-ups, and returns the function that ends it.
func realtime(t *testing.T) func() {
	t.Helper()
	restore, err := netnstb.Realtime(10)
	if err != nil {
		t.Logf("running the emulation at normal priority: %v", err)
		return func() {}
	}
	return func() {
		if err := restore(); err != nil {
			t.Errorf("back to SCHED_NORMAL: %v", err)
		}
	}
}

// TestFreeINANetnsCrossValidation runs freeina-netns on both substrates:
// FreeINA's RDMA hosts (soft-RoCE devices, p4/freeina in the Go switch)
// and ATP's agents, one job alone and two jobs at once. In each scenario
// the two policies must rank alike by average JCT, and FreeINA's average
// JCT — the headline, its training time — on netns must be within 15% of
// the simulation's. Every sum is checked exact and the RC contract at
// every FreeINA host, on both substrates (a run that breaks either
// fails).
func TestFreeINANetnsCrossValidation(t *testing.T) {
	needNetns(t)
	sim := execute(t, readySpec(t, "freeina-netns", nil, nil), nil)
	emu := execute(t, readySpec(t, "freeina-netns", nil, nil), netnsTestbeds)
	jct := func(res *analysis.Results, sc, policy string) float64 {
		return res.Aggregate(sc, policy)[MetricAvgJCT].Mean
	}
	for _, sc := range sim.Scenarios {
		rank := func(res *analysis.Results) []string {
			p := slices.Clone(res.Policies)
			slices.SortStableFunc(p, func(a, b string) int { return cmp.Compare(jct(res, sc, a), jct(res, sc, b)) })
			return p
		}
		for _, p := range sim.Policies {
			s, n := jct(sim, sc, p), jct(emu, sc, p)
			t.Logf("%s %-8s avg JCT sim %.3f s, netns %.3f s (%+.1f%%); agg_gbps sim %.1f, netns %.1f; ps_share %.3f, %.3f", sc, p, s, n, 100*(n/s-1),
				sim.Aggregate(sc, p)[MetricAggGbps].Mean, emu.Aggregate(sc, p)[MetricAggGbps].Mean,
				sim.Aggregate(sc, p)[MetricPSShare].Mean, emu.Aggregate(sc, p)[MetricPSShare].Mean)
			if p == "freeina" && math.Abs(n/s-1) > 0.15 {
				t.Errorf("%s: FreeINA's average JCT %.3f s on netns is %+.1f%% off the simulation's %.3f s (want within 15%%)", sc, n, 100*(n/s-1), s)
			}
		}
		if a, b := rank(sim), rank(emu); !slices.Equal(a, b) {
			t.Errorf("%s: policies rank %v on sim, %v on netns", sc, a, b)
		}
	}
}

// TestFreeINANetnsExactUnderImpairments runs freeina-netns's two jobs
// (fewer iterations) on netns with 1% and 5% of the frames lost,
// duplicated and reordered on every link by the Go switch: every sum must
// be exact at every worker and no host may see a breach of the RC
// contract (PSNs, ICRCs, every message once and in order; Run fails
// otherwise), and the impairments must have been repaired by the RNICs'
// retransmissions. A third run at 1% has 2% of the chunks overflow the
// switch's 32 bits: the hosts must recover them on the PS path
// (docs/freeina.md §4), exactly, on real processes.
func TestFreeINANetnsExactUnderImpairments(t *testing.T) {
	needNetns(t)
	for _, tc := range []struct{ p, overflow float64 }{{0.01, 0}, {0.05, 0}, {0.01, 0.02}} {
		p := tc.p
		spec := freeSpec(t, "freeina-netns", []string{"jobs-2"}, []string{"freeina"}, 4)
		exp, err := Kind{}.Compile(spec)
		if err != nil {
			t.Fatal(err)
		}
		e := exp.(*experiment)
		sc := e.scenarios["jobs-2"]
		for _, l := range sc.scaled.Top.Links {
			l.Loss, l.Duplicate, l.Reorder = p, p, p
		}
		js, err := sc.Jobs(1)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		stop := realtime(t)
		prog, err := dp.SwitchProgram()
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		tb, err := netnsTestbeds(ctx, sc.testbedConfig(&prog, 1))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		s, err := e.freeSetup(sc, "freeina", tb, js, 1)
		if err != nil {
			t.Fatal(err)
		}
		s.Overflow = tc.overflow
		o, err := freepkt.Run(ctx, s)
		tb.Close()
		stop()
		cancel()
		if err != nil {
			t.Fatalf("%.0f%% impaired: %v", 100*p, err)
		}
		t.Logf("%.0f%% lost, duplicated, reordered, %.0f%% of chunks overflowing: %d all-reduces (%d INA, %d recovered: %d chunks), %d violations; RNICs: %d retransmitted, %d timeouts, %d NAKs, %d duplicates; switch: %d answers, %d overflows, drops %v",
			100*p, 100*tc.overflow, o.Rounds, o.RoundsINA, o.Recovered, o.RecoveredChunks, o.Violations, o.Devices.Retransmitted, o.Devices.Timeouts, o.Devices.SeqNAKsSent, o.Devices.Duplicates, o.Switch.Answers, o.Switch.Overflows, o.Switch.Drops)
		if o.Rounds != 8 || o.Violations != 0 {
			t.Errorf("%.0f%%: %d all-reduces, %d violations; want 8, 0", 100*p, o.Rounds, o.Violations)
		}
		if o.Devices.Retransmitted == 0 {
			t.Errorf("%.0f%%: no retransmission: the impairments were not exercised", 100*p)
		}
		if tc.overflow > 0 && (o.Recovered < 1 || o.RecoveredChunks < 1) {
			t.Errorf("%.0f%% of chunks overflowing: %d all-reduces recovered, %d chunks", 100*tc.overflow, o.Recovered, o.RecoveredChunks)
		}
	}
}

// inaProgram is the INA data plane as the testbeds load it.
func inaProgram(t testing.TB) *dataplane.Program {
	t.Helper()
	prog, err := ina.SwitchProgram()
	if err != nil {
		t.Fatal(err)
	}
	return &prog
}
