package allreduce

import (
	"context"
	"fmt"
	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/p4/ina"
	"net/netip"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/switch/switchcmd"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/emulator/testbed/netnstb"
	"github.com/tracebed/tracebed/internal/units"
)

func TestMain(m *testing.M) {
	switchcmd.Main() // the Go switches of the netns testbeds are this binary
	code := m.Run()
	if os.Geteuid() == 0 {
		if err := netns.CheckClean(netnsPrefix); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: left behind after the tests:", err)
			netns.Cleanup(netnsPrefix)
			code = 1
		}
	}
	os.Exit(code)
}

// netnsPrefix starts the run ids of this test binary's testbeds.
var netnsPrefix = "a" + netns.NewRunID()[:1]

// testbeds are the substrates the testbed tests run on: sim always, netns
// as root.
func testbeds(t *testing.T) map[string]func(context.Context, testbed.Config) (testbed.Testbed, error) {
	tbs := map[string]func(context.Context, testbed.Config) (testbed.Testbed, error){
		"sim": func(_ context.Context, cfg testbed.Config) (testbed.Testbed, error) { return testbed.NewSim(cfg) },
	}
	if os.Geteuid() != 0 {
		t.Log("netns: skipped, it needs root (network namespaces, veth links, raw sockets)")
	} else if testing.Short() {
		t.Log("netns: skipped in -short mode")
	} else {
		tbs["netns"] = func(ctx context.Context, cfg testbed.Config) (testbed.Testbed, error) {
			return netnstb.New(ctx, cfg, netnstb.Options{RunID: netns.TestRunID(netnsPrefix)})
		}
	}
	return tbs
}

func TestWindowNetns(t *testing.T) {
	if os.Getenv("WINDOWS") == "" {
		t.Skip()
	}
	tbs := testbeds(t)
	for _, name := range []string{"sim", "netns"} {
		newTB := tbs[name]
		if newTB == nil {
			continue
		}
		for _, w := range []int{4, 8, 10, 12, 16, 24} {
			top := starTopo(t, netParams{hosts: 4, rate: 10 * units.Mbps, delay: time.Microsecond, aggregators: 64, buffer: 64 << 10})
			ctx := context.Background()
			tb, err := newTB(ctx, testbed.Config{Topology: top, Program: "ina", Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			g := gradients{seed: 1, limit: 1 << 20}
			j, err := SetupOn(tb, JobSpec{ID: 1, Mode: ModeINA, Hosts: hostNames(1, 3), Switch: "tor", Size: uint32(w), Window: w,
				Elements: 64 * 400, Iterations: 4, Compute: 20 * time.Millisecond, Timeout: 50 * time.Millisecond,
				Fill: g.fill(1), Check: g.check(1, 3, 64*400)})
			if err != nil {
				t.Fatal(err)
			}
			if err := tb.Run(ctx, 5*time.Millisecond, time.Minute, j.Poll); err != nil {
				t.Fatal(err)
			}
			tb.Close()
			var ends []time.Duration
			ends = j.Workers[0].IterationEnd
			t.Logf("%s window %d: finish %v err %v iteration ends %v", name, w, j.Finish, j.Err, ends)
		}
	}
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

func TestResultSpreadNetns(t *testing.T) {
	if os.Getenv("SPREAD") == "" {
		t.Skip()
	}
	for name, newTB := range testbeds(t) {
		top := starTopo(t, netParams{hosts: 4, rate: 10 * units.Mbps, delay: time.Microsecond, aggregators: 64, buffer: 64 << 10})
		ctx := context.Background()
		tb, err := newTB(ctx, testbed.Config{Topology: top, Program: "ina", Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		var recs []*recorder
		var envs []emulator.Env
		addrs := []emulator.Addr{}
		for i := 1; i <= 3; i++ {
			addrs = append(addrs, netip.AddrPortFrom(top.Node(fmt.Sprintf("h%d", i)).IP, 40001))
		}
		for i := range 3 {
			s, _ := NewStream(StreamConfig{Job: 1, Worker: uint8(i), Workers: 3, Target: netip.AddrPortFrom(top.Node("tor").IP, ina.Port), Window: 16, K: 64, Timeout: 50 * time.Millisecond})
			w := &Worker{Reducer: s, Tensor: make([]int32, 64*400), Iterations: 4, Compute: 20 * time.Millisecond}
			r := &recorder{Worker: w, at: map[uint64]time.Duration{}}
			recs = append(recs, r)
		}
		cl, _ := tb.Switch("tor")
		ctl, _ := ina.NewController(cl)
		members, _ := ina.Members(top, "tor", addrs)
		ctl.SetGroup(ctx, 2, members)
		ctl.Bind(ctx, ina.Binding{Job: 1, ToRound: ina.MaxRound, Mode: ina.ModePool, Gen: 1, Base: 0, Size: 16, Workers: 3, Group: 2})
		for i, r := range recs {
			env, err := tb.Attach(fmt.Sprintf("h%d", i+1), 40001, r)
			if err != nil {
				t.Fatal(err)
			}
			envs = append(envs, env)
		}
		done := func() bool {
			all := true
			for i, r := range recs {
				tb.Inspect(envs[i], func() { all = all && r.Finished })
			}
			return all
		}
		if err := tb.Run(ctx, 5*time.Millisecond, time.Minute, done); err != nil {
			t.Fatal(err)
		}
		tb.Close()
		var spreads []float64
		for k, t0 := range recs[0].at {
			lo, hi := t0, t0
			for _, r := range recs[1:] {
				if v, ok := r.at[k]; ok {
					lo, hi = min(lo, v), max(hi, v)
				}
			}
			spreads = append(spreads, float64(hi-lo)/1e3)
		}
		sort.Float64s(spreads)
		q := func(p float64) float64 { return spreads[int(p*float64(len(spreads)-1))] }
		var mean float64
		for _, s := range spreads {
			mean += s
		}
		mean /= float64(len(spreads))
		t.Logf("%s: %d results, spread of arrival times across 3 workers (µs): mean %.0f p50 %.0f p90 %.0f p99 %.0f max %.0f", name, len(spreads), mean, q(0.5), q(0.9), q(0.99), q(1))
	}
}
