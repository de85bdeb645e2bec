//go:build linux && !nonetns

package farmem

import (
	"context"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/emulator/live"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/switch/switchcmd"
	"github.com/tracebed/tracebed/emulator/testbed/netnstb"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/p4/programs"
)

func TestMain(m *testing.M) {
	switchcmd.Main(programs.Registry) // the Go switches of the netns runs are this binary
	os.Exit(withTraceCache(func() int { return netns.RunTests(m, netnsPrefix) }))
}

// netnsPrefix starts the run ids of this test binary, so that test binaries
// running at the same time check and clean up only their own runs. "m" is
// no hex digit: a random run id (netns.NewRunID) never starts with it.
var netnsPrefix = "m" + netns.NewRunID()[:1]

func needNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: the netns substrate needs root (network namespaces, veth links, raw sockets); CI runs as root")
	}
	if testing.Short() {
		t.Skip("skipping in -short mode: the netns runs take about a minute of real time")
	}
}

// netnsTestbeds builds netns testbeds whose run ids carry this binary's
// prefix.
var netnsTestbeds = netnstb.NewFactory(netnstb.Options{RunIDPrefix: netnsPrefix, SwitchIO: os.Getenv("CROSSVAL_SWITCH_IO"), Network: os.Getenv("CROSSVAL_NETWORK")}).New

// netnsSpec is glitter-netns restricted to some scenarios and policies.
func netnsSpec(t *testing.T, sw string, scenarios, policies []string) (*experiments.Spec, experiments.Experiment) {
	t.Helper()
	spec, err := experiments.Open("glitter-netns", readEmbedded)
	if err != nil {
		t.Fatal(err)
	}
	if sw == netnstb.SwitchBMv2 {
		spec = spec.AtBMv2Scale() // as 'run --switch bmv2' runs it
	}
	// CROSSVAL_SCALE overrides the scale factor (to find the smallest at
	// which the substrates still agree: docs/scaling.md).
	if v := os.Getenv("CROSSVAL_SCALE"); v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("CROSSVAL_SCALE: %v", err)
		}
		t.Logf("scale factor %g (CROSSVAL_SCALE; the spec says %g)", s, spec.Scale)
		spec.Scale = s
	}
	keep := func(es []experiments.Entry, names []string) []experiments.Entry {
		var out []experiments.Entry
		for _, e := range es {
			if slices.Contains(names, e.Name) {
				out = append(out, e)
			}
		}
		if len(out) != len(names) {
			t.Fatalf("glitter-netns has no %v", names)
		}
		return out
	}
	spec.Scenarios, spec.Policies = keep(spec.Scenarios, scenarios), keep(spec.Policies, policies)
	exp, err := Kind{}.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	return spec, exp
}

func executeOn(t *testing.T, spec *experiments.Spec, exp experiments.Experiment, newTestbed experiments.TestbedFactory) *analysis.Results {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	opts := experiments.Options{Parallel: 2, Version: "test"}
	if newTestbed != nil {
		spec.Substrate = "netns"
		opts.Parallel, opts.NewTestbed = 1, newTestbed // real time: one run at a time
	} else {
		spec.Substrate = "sim"
	}
	if newTestbed != nil {
		// The emulation runs at real-time priority, as real-time network
		// emulators do (docs/scaling.md, "Far memory"): on a 2-core
		// machine shared with other tests, its threads would otherwise wait
		// milliseconds for a core, and every fault with them.
		restore := realtime(t)
		defer restore()
	}
	res, err := experiments.Execute(ctx, spec, exp, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
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

// TestNetnsCrossValidation runs glitter-netns's clean scenario on both
// substrates: the policies must rank identically and each policy's
// throughput agree within 15%, and no page may be lost or corrupted.
func TestNetnsCrossValidation(t *testing.T) {
	needNetns(t)
	spec, exp := netnsSpec(t, netnstb.SwitchGo, []string{"mix-50"}, []string{"fastswap", "glitter"})
	sim := executeOn(t, spec, exp, nil)
	probe := startTimingProbe(t)
	emu := executeOn(t, spec, exp, netnsTestbeds)
	late := probe.stop()
	t.Logf("timer lateness during the netns runs: p50 %v, p90 %v, p99 %v", late(0.5), late(0.9), late(0.99))
	rank := func(res *analysis.Results) []string {
		p := slices.Clone(res.Policies)
		slices.SortFunc(p, func(a, b string) int {
			return -cmpFloat(metric(t, res, "mix-50", a, MetricThroughput), metric(t, res, "mix-50", b, MetricThroughput))
		})
		return p
	}
	for _, p := range spec.Policies {
		s, n := metric(t, sim, "mix-50", p.Name, MetricThroughput), metric(t, emu, "mix-50", p.Name, MetricThroughput)
		for _, m := range []string{MetricCompletion, MetricBlocks, MetricBlockTime, MetricFaultP50, MetricFaultP99, MetricFaults, MetricEvicted, MetricRetransmits, MetricBackground} {
			t.Logf("%-9s   %-16s sim %10.4g  netns %10.4g", p.Name, m, metric(t, sim, "mix-50", p.Name, m), metric(t, emu, "mix-50", p.Name, m))
		}
		t.Logf("%-9s throughput_ops sim %8.0f  netns %8.0f  netns/sim %.3f   fault p50 sim %.2f µs netns %.2f µs   blocking events sim %v netns %v",
			p.Name, s, n, n/s, metric(t, sim, "mix-50", p.Name, MetricFaultP50), metric(t, emu, "mix-50", p.Name, MetricFaultP50),
			metric(t, sim, "mix-50", p.Name, MetricBlocks), metric(t, emu, "mix-50", p.Name, MetricBlocks))
		if math.Abs(n/s-1) > 0.15 {
			t.Errorf("%s: netns throughput %.0f ops/s is %.1f%% off the simulation's %.0f (want within 15%%)", p.Name, n, 100*(n/s-1), s)
		}
		if e := metric(t, emu, "mix-50", p.Name, MetricIntegrity); e != 0 {
			t.Errorf("%s on netns: %v integrity errors", p.Name, e)
		}
	}
	if a, b := rank(sim), rank(emu); !slices.Equal(a, b) {
		t.Errorf("policies rank %v on sim, %v on netns", a, b)
	}
}

// TestNetnsIntegrityUnderLoss runs the lossy scenario (1% loss on every
// link) on netns, with the Go switch (which injects the loss) and, where
// bmv2 and p4c are installed, with bmv2 running farmem.p4 (the link stages
// inject it): every page read back must be the page written, and the loss
// must have been seen and repaired.
func TestNetnsIntegrityUnderLoss(t *testing.T) {
	needNetns(t)
	for _, sw := range netnstb.Switches {
		t.Run(sw, func(t *testing.T) {
			opts := netnstb.Options{Switch: sw, RunIDPrefix: netnsPrefix}
			if err := netnstb.Check(opts); err != nil {
				t.Skipf("skipping: %v", strings.SplitN(err.Error(), "\n", 2)[0])
			}
			spec, exp := netnsSpec(t, sw, []string{"mix-50-lossy"}, []string{"glitter"})
			res := executeOn(t, spec, exp, netnstb.NewFactory(opts).New)
			r := res.Runs[0]
			t.Logf("lossy, glitter on netns (%s): %v faults, %v retransmissions, %v integrity errors, %.0f ops/s", sw,
				r.Metrics[MetricFaults], r.Metrics[MetricRetransmits], r.Metrics[MetricIntegrity], r.Metrics[MetricThroughput])
			if r.Metrics[MetricIntegrity] != 0 {
				t.Errorf("%v integrity errors under loss", r.Metrics[MetricIntegrity])
			}
			if r.Metrics[MetricRetransmits] == 0 {
				t.Error("no retransmissions: was loss injected?")
			}
		})
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// timingProbe measures how late timers fire while the netns runs go on: a
// loop of the same kind as the agents' sets a timer every period and
// records the lateness of each.
type timingProbe struct {
	rt   *live.Runtime
	loop *live.Loop
	late []time.Duration
	quit chan struct{}
	done chan struct{}
}

func startTimingProbe(t *testing.T) *timingProbe {
	rt := live.New(0)
	l, err := rt.NewLoop()
	if err != nil {
		t.Fatal(err)
	}
	p := &timingProbe{rt: rt, loop: l, quit: make(chan struct{}), done: make(chan struct{})}
	const period = 2 * time.Millisecond
	var tick func()
	due := l.Now() + period
	tick = func() {
		p.late = append(p.late, l.Now()-due)
		select {
		case <-p.quit:
			close(p.done)
			return
		default:
		}
		due = l.Now() + period
		l.After(period, tick)
	}
	l.Post(func() { l.After(period, tick) })
	return p
}

// stop ends the probe and returns the quantiles of the lateness.
func (p *timingProbe) stop() func(float64) time.Duration {
	close(p.quit)
	<-p.done
	p.rt.Close()
	slices.Sort(p.late)
	return func(q float64) time.Duration {
		if len(p.late) == 0 {
			return 0
		}
		return p.late[int(q*float64(len(p.late)-1))]
	}
}

// TestNetnsMTUChecked: validate checks netns specs against the MTU the
// netns substrate gives its links, so a page too large for one frame is
// refused at its field before anything runs.
func TestNetnsMTUChecked(t *testing.T) {
	if NetnsMTU != netnstb.DefaultMTU {
		t.Fatalf("NetnsMTU %d, but the netns testbed's links have MTU %d", NetnsMTU, netnstb.DefaultMTU)
	}
	_, _, err := compile(t, "big.yaml", "kind: farmem\nsubstrate: netns\nscale: 1000\nworkload: {page_size: 16KiB}\npolicies: [glitter]\n")
	if err == nil || !strings.Contains(err.Error(), "big.yaml:4:") || !strings.Contains(err.Error(), "page_size") || !strings.Contains(err.Error(), "MTU") {
		t.Errorf("a 16 KiB page on netns: %v", err)
	}
}
