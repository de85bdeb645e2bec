package training

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
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/workloads/models"
)

func TestMain(m *testing.M) {
	switchcmd.Main() // the Go switches of the netns runs are this binary
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

// netnsPrefix starts the run ids of this test binary, so that test
// binaries running at the same time check and clean up only their own runs.
var netnsPrefix = "i" + netns.NewRunID()[:1]

func netnsTestbeds(ctx context.Context, cfg testbed.Config) (testbed.Testbed, error) {
	tb, err := netnstb.New(ctx, cfg, netnstb.Options{RunID: netns.TestRunID(netnsPrefix)})
	if err != nil {
		return nil, err
	}
	return tb, nil
}

// packetRun runs one policy of one packet-level scenario of spec directly
// with RunPacket, logging the controller's decisions when verbose.
func packetRun(t *testing.T, spec *experiments.Spec, scenario, policy string, seed int64, newTB experiments.TestbedFactory, verbose bool) *PacketOutcome {
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
	tb, err := newTB(ctx, testbed.Config{Topology: sc.scaled.Top, Program: "ina", Seed: uint64(seed)})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	s := PacketSetup{
		Testbed: tb, Workers: sc.scaled.Workers, Controller: sc.scaled.Controller, PS: sc.scaled.PS,
		Net: sc.scaled.Net, Jobs: js, Lookup: ScaleProfiles(models.Lookup, sc.scaled.Factor),
		Policy: e.policies[policy](sc.scaledScenario()), Seed: uint64(seed),
		Timeout: sc.timeout, RingWindow: sc.ringWindow, Sample: time.Duration(sc.p.Sample), Bins: sc.p.Bins,
	}
	if verbose {
		s.Log = t.Logf
	}
	o, err := RunPacket(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestDebugPacket(t *testing.T) {
	file := os.Getenv("INA_SPEC")
	if file == "" {
		t.Skip("INA_SPEC not set")
	}
	spec, err := experiments.Open(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"sim", "netns"} {
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
