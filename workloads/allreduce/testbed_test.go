package allreduce

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/p4/programs"

	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/switch/switchcmd"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/emulator/testbed/netnstb"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

func TestMain(m *testing.M) {
	switchcmd.Main(programs.Registry) // the Go switches of the netns testbeds are this binary
	os.Exit(netns.RunTests(m, netnsPrefix))
}

// netnsPrefix starts the run ids of this test binary's testbeds.
var netnsPrefix = "a" + netns.NewRunID()[:1]

// testbeds are the substrates the testbed tests run on: sim always, netns
// as root, with the Go switch and, where installed, with bmv2.
func testbeds(t testing.TB) map[string]func(context.Context, testbed.Config) (testbed.Testbed, error) {
	tbs := map[string]func(context.Context, testbed.Config) (testbed.Testbed, error){
		"sim": experiments.SimTestbed,
	}
	if err := netnstb.Check(netnstb.Options{}); err != nil {
		t.Logf("netns: skipped: %v", err)
	} else if testing.Short() {
		t.Log("netns: skipped in -short mode")
	} else {
		tbs["netns"] = netnstb.NewFactory(netnstb.Options{RunIDPrefix: netnsPrefix}).New
		// bmv2 running ina.p4, its links (delay, loss) modelled by the
		// link stages, where bmv2 and p4c are installed.
		bm := netnstb.Options{Switch: netnstb.SwitchBMv2, RunIDPrefix: netnsPrefix}
		if err := netnstb.Check(bm); err != nil {
			t.Logf("netns with bmv2: skipped: %v", strings.SplitN(err.Error(), "\n", 2)[0])
		} else {
			tbs["netns-bmv2"] = netnstb.NewFactory(bm).New
		}
	}
	return tbs
}

// sumCheck verifies that t is the exact sum of every worker's tensor,
// recomputed at each call: it keeps no state, so workers that run on their
// own goroutines (netns) may call it at once.
func sumCheck(g gradients, job uint16, n int) func(w, it int, t []int32) error {
	return func(_, it int, t []int32) error {
		sum := make([]int32, len(t))
		buf := make([]int32, len(t))
		for i := range n {
			g.fill(job)(i, it, buf)
			for j := range sum {
				sum[j] += buf[j]
			}
		}
		for j := range t {
			if t[j] != sum[j] {
				return fmt.Errorf("value %d is %d, want %d", j, t[j], sum[j])
			}
		}
		return nil
	}
}

// TestSetupOnTestbeds runs a job of each mode — a pool, a shared pool with
// its parameter server, the host ring — with SetupOn on every testbed
// (sim; netns as root), at 10 Mbit/s with 1% of the frames lost on every
// link in each direction (injected by the switch on netns): every worker
// must end every iteration with the exact sum, with the loss repaired by
// retransmission.
func TestSetupOnTestbeds(t *testing.T) {
	for name, newTB := range testbeds(t) {
		t.Run(name, func(t *testing.T) {
			top := starTopo(t, netParams{hosts: 8, rate: 10 * units.Mbps, delay: 50 * time.Microsecond, aggregators: 64, buffer: 64 << 10, loss: 0.01})
			ctx, tb := openTestbed(t, newTB, top)
			specs := []JobSpec{
				{ID: 1, Mode: ModeINA, Hosts: hostNames(1, 3), Switch: "tor", Base: 0, Size: 16},
				{ID: 2, Mode: ModeINA, Shared: true, Hosts: hostNames(4, 2), PSHost: "h6", Switch: "tor", Base: 16, Size: 32, Window: 16},
				{ID: 3, Mode: ModeRing, Hosts: hostNames(7, 2), Window: 16},
			}
			jobs := runOnTestbed(ctx, t, tb, gradients{seed: 1, limit: 1 << 20}, specs, 64*60+17)
			if err := tb.Close(); err != nil {
				t.Fatal(err)
			}
			var retx uint64
			for _, j := range jobs {
				if j.Err != nil {
					t.Errorf("job %d: %v", j.Spec.ID, j.Err)
				}
				st := j.Stats()
				retx += st.Retransmits
				t.Logf("job %d (%s): finished at %v, %d retransmissions", j.Spec.ID, j.Spec.Mode, j.Finish, st.Retransmits)
			}
			if retx == 0 {
				t.Error("no retransmission at 1% loss: the loss was not exercised")
			}
		})
	}
}

// openTestbed starts a testbed of top running the INA program, closed
// with its two-minute context when the test ends.
func openTestbed(t *testing.T, newTB func(context.Context, testbed.Config) (testbed.Testbed, error), top *topologies.Topology) (context.Context, testbed.Testbed) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	tb, err := newTB(ctx, testbed.Config{Topology: top, Program: inaProgram(t), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return ctx, tb
}

// runOnTestbed sets the jobs up on tb with SetupOn (3 iterations of elems
// values, 5 ms of compute, a 40 ms timeout, g's tensors, every sum
// checked) and runs the testbed until every worker is done.
func runOnTestbed(ctx context.Context, t *testing.T, tb testbed.Testbed, g gradients, specs []JobSpec, elems int) []*Job {
	t.Helper()
	var jobs []*Job
	for _, sp := range specs {
		sp.K, sp.Elements, sp.Iterations, sp.Compute = 64, elems, 3, 5*time.Millisecond
		sp.Timeout = 40 * time.Millisecond
		sp.Fill, sp.Check = g.fill(sp.ID), sumCheck(g, sp.ID, len(sp.Hosts))
		j, err := SetupOn(tb, sp)
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	done := func() bool {
		all := true
		for _, j := range jobs {
			all = j.Poll() && all
		}
		return all
	}
	if err := tb.Run(ctx, 10*time.Millisecond, time.Minute, done); err != nil {
		t.Fatal(err)
	}
	return jobs
}

// recorder records when its worker received each result.
type recorder struct {
	*Worker
	env emulator.Env
	at  map[uint64]time.Duration
}

func (r *recorder) Start(env emulator.Env) { r.env = env; r.Worker.Start(env) }
func (r *recorder) Recv(from emulator.Addr, b []byte) {
	if h, _, err := ina.Parse(b); err == nil && h.Flags&ina.FlagResult != 0 {
		k := uint64(h.Round)<<32 | uint64(h.Offset)
		if _, ok := r.at[k]; !ok {
			r.at[k] = r.env.Now()
		}
	}
	r.Worker.Recv(from, b)
}

// BenchmarkResultSpread measures how far apart the three workers of a
// pool-mode job receive each multicast result — the spread of real hosts'
// receive paths, which decides how long a shared-mode chunk holds its
// aggregator. It calibrates the simulated hosts' receive latency
// (training.HostLatency; docs/dynaina.md): run as root, ideally as the
// netns tests run, at real-time priority:
//
//	go test -c ./workloads/allreduce && sudo chrt -r 10 ./allreduce.test -test.run '^$' -test.bench ResultSpread
//
// It reports the mean and the 50th, 90th and 99th percentiles in µs (0 on
// sim, whose multicast copies arrive together).
func BenchmarkResultSpread(b *testing.B) {
	for name, newTB := range testbeds(b) {
		b.Run(name, func(b *testing.B) {
			var spreads []float64
			for range b.N {
				spreads = append(spreads, resultSpread(b, newTB)...)
			}
			slices.Sort(spreads)
			q := func(p float64) float64 { return spreads[int(p*float64(len(spreads)-1))] }
			var mean float64
			for _, s := range spreads {
				mean += s
			}
			b.ReportMetric(mean/float64(len(spreads)), "mean-µs")
			b.ReportMetric(q(0.5), "p50-µs")
			b.ReportMetric(q(0.9), "p90-µs")
			b.ReportMetric(q(0.99), "p99-µs")
		})
	}
}

func resultSpread(b *testing.B, newTB func(context.Context, testbed.Config) (testbed.Testbed, error)) []float64 {
	top := starTopo(b, netParams{hosts: 4, rate: 10 * units.Mbps, delay: time.Microsecond, aggregators: 64, buffer: 64 << 10})
	ctx := context.Background()
	tb, err := newTB(ctx, testbed.Config{Topology: top, Program: inaProgram(b), Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer tb.Close()
	const port = 40001
	var addrs []emulator.Addr
	for _, h := range hostNames(1, 3) {
		addrs = append(addrs, netip.AddrPortFrom(top.Node(h).IP, port))
	}
	cl, err := tb.Switch("tor")
	if err != nil {
		b.Fatal(err)
	}
	ctl, err := ina.NewController(cl)
	if err != nil {
		b.Fatal(err)
	}
	members, err := ina.Members(top, "tor", addrs)
	if err != nil {
		b.Fatal(err)
	}
	if err := ctl.SetGroup(ctx, 2, members); err != nil {
		b.Fatal(err)
	}
	if err := ctl.Bind(ctx, ina.Binding{Job: 1, ToRound: ina.MaxRound, Mode: ina.ModePool, Gen: 1, Size: 16, Workers: 3, Group: 2}); err != nil {
		b.Fatal(err)
	}
	var recs []*recorder
	var envs []emulator.Env
	for i, h := range hostNames(1, 3) {
		s, err := NewStream(StreamConfig{Job: 1, Worker: uint8(i), Workers: 3, Target: netip.AddrPortFrom(top.Node("tor").IP, ina.Port), Window: 16, K: 64, Timeout: 50 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		r := &recorder{Worker: &Worker{Reducer: s, Tensor: make([]int32, 64*400), Iterations: 4, Compute: 20 * time.Millisecond}, at: map[uint64]time.Duration{}}
		env, err := tb.Attach(h, port, r)
		if err != nil {
			b.Fatal(err)
		}
		recs, envs = append(recs, r), append(envs, env)
	}
	done := func() bool {
		all := true
		for i, r := range recs {
			tb.Inspect(envs[i], func() { all = all && r.Finished })
		}
		return all
	}
	if err := tb.Run(ctx, 5*time.Millisecond, time.Minute, done); err != nil {
		b.Fatal(err)
	}
	tb.Close()
	var spreads []float64
	for k, first := range recs[0].at {
		lo, hi := first, first
		for _, r := range recs[1:] {
			if v, ok := r.at[k]; ok {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
		spreads = append(spreads, float64(hi-lo)/1e3)
	}
	return spreads
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
