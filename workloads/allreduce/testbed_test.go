package allreduce

import (
	"context"
	"fmt"
	"os"
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
