package freeina

import (
	"context"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/internal/units"
	dp "github.com/tracebed/tracebed/p4/freeina"
	sysfree "github.com/tracebed/tracebed/systems/freeina"
	"github.com/tracebed/tracebed/systems/inasched"
	"github.com/tracebed/tracebed/topologies"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/traces/models"
	"github.com/tracebed/tracebed/workloads/training/fabric"
	"github.com/tracebed/tracebed/workloads/training/packet"
)

// testProfile is a small model: gradient bytes and compute time.
func testProfile(name string, grad int64, compute time.Duration) func(string) (models.Profile, bool) {
	return func(m string) (models.Profile, bool) {
		if m != name {
			return models.Profile{}, false
		}
		return models.Profile{Name: name, GradientBytes: grad, Compute: compute}, true
	}
}

// testbedOf builds a star of hosts with memory aggregators (plus the
// controller and parameter-server hosts) on sim, links of rate with the
// given impairments.
func testbedOf(t testing.TB, hosts, aggregators, ps int, rate units.Rate, loss, dup, reorder float64, seed uint64) (testbed.Testbed, *packet.Scaled) {
	t.Helper()
	sc := starOf(t, hosts, aggregators, ps, rate, loss, dup, reorder)
	prog, err := dp.SwitchProgram()
	if err != nil {
		t.Fatal(err)
	}
	tb, err := testbed.NewSim(testbed.Config{Topology: sc.Top, Program: &prog, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	return tb, sc
}

// starOf is testbedOf's network.
func starOf(t testing.TB, hosts, aggregators, ps int, rate units.Rate, loss, dup, reorder float64) *packet.Scaled {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: hosts, Rate: rate, Delay: units.Duration(time.Microsecond),
		Aggregators: aggregators})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("star")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := packet.ScaleTopology(top, fabric.DefaultNet, packet.ScaleParams{Factor: 1, Loss: -1, PSPerSwitch: ps})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range sc.Top.Links {
		l.Loss, l.Duplicate, l.Reorder = loss, dup, reorder
	}
	return sc
}

func freePolicy(mem inasched.Memory, _ int) (inasched.Scheduler, error) {
	return sysfree.New(mem, true), nil
}

func TestOneJob(t *testing.T) {
	tb, sc := testbedOf(t, 4, 1024, 1, 10*units.Gbps, 0, 0, 0, 1)
	o, err := Run(context.Background(), Setup{Testbed: tb, Workers: sc.Workers, Controller: sc.Controller, PS: sc.PS,
		Net: fabric.DefaultNet, Jobs: []jobtrace.Job{{ID: 0, Model: "m", Workers: 4, Iterations: 3}},
		Lookup: testProfile("m", 256<<10, time.Millisecond), Policy: freePolicy, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("JCT %.6f s, rounds %d (INA %d), switch %+v, devices rx %d retx %d", o.Jobs[0].JCT(), o.Rounds, o.RoundsINA, o.Switch, o.Devices.RxPackets, o.Devices.Retransmitted)
	if o.Rounds != 3 || o.RoundsINA != 3 || o.INAFraction != 1 {
		t.Errorf("rounds %d, INA %d, ina_fraction %v", o.Rounds, o.RoundsINA, o.INAFraction)
	}
}

func TestLossyQuick(t *testing.T) {
	for _, loss := range []float64{0.01, 0.05} {
		tb, sc := testbedOf(t, 4, 1024, 1, 10*units.Gbps, loss, loss, loss, 2)
		o, err := Run(context.Background(), Setup{Testbed: tb, Workers: sc.Workers, Controller: sc.Controller, PS: sc.PS,
			Net: fabric.DefaultNet, Jobs: []jobtrace.Job{{ID: 0, Model: "m", Workers: 4, Iterations: 3}},
			Lookup: testProfile("m", 256<<10, time.Millisecond), Policy: freePolicy, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("loss %v: JCT %.6f s, rounds %d (INA %d), switch %+v, devices rx %d retx %d timeouts %d naks %d", loss, o.Jobs[0].JCT(), o.Rounds, o.RoundsINA, o.Switch, o.Devices.RxPackets, o.Devices.Retransmitted, o.Devices.Timeouts, o.Devices.SeqNAKsSent)
	}
}

func TestPSOnlyQuick(t *testing.T) {
	tb, sc := testbedOf(t, 4, 4, 1, 10*units.Gbps, 0, 0, 0, 2)
	o, err := Run(context.Background(), Setup{Testbed: tb, Workers: sc.Workers, Controller: sc.Controller, PS: sc.PS,
		Net: fabric.DefaultNet, Jobs: []jobtrace.Job{{ID: 0, Model: "m", Workers: 4, Iterations: 3}},
		Lookup: testProfile("m", 256<<10, time.Millisecond), Policy: func(mem inasched.Memory, _ int) (inasched.Scheduler, error) { return sysfree.New(mem, false), nil }, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("JCT %.6f s, rounds %d (INA %d), took %v", o.Jobs[0].JCT(), o.Rounds, o.RoundsINA, o.TookPS)
}

// TestControlCallsAreEvents runs jobs competing for switch memory on a
// watched simulation whose control-plane calls take 200 µs: none of the
// controller's P4Runtime requests — every all-reduce's binding and
// release, the rings, a finished job's counters — is made inside an
// agent's callback; they complete as events, and the run is as exact
// and complete as with instant calls, the counters read through the port
// included.
func TestControlCallsAreEvents(t *testing.T) {
	lookup := func(name string) (models.Profile, bool) {
		return models.Profile{Name: name, GradientBytes: 96 << 10, Compute: 300 * time.Microsecond}, true
	}
	jobs := []jobtrace.Job{
		{ID: 0, Model: "a", Workers: 3, Iterations: 4},
		{ID: 1, Model: "b", Workers: 4, Iterations: 3},
		{ID: 2, Model: "a", Workers: 2, Iterations: 4, Arrival: 200 * time.Microsecond},
	}
	var jct [2]float64
	for i, latency := range []time.Duration{0, 200 * time.Microsecond} {
		sc := starOf(t, 9, 48, 3, 10*units.Gbps, 0, 0, 0)
		prog, err := dp.SwitchProgram()
		if err != nil {
			t.Fatal(err)
		}
		sim, err := testbed.NewSim(testbed.Config{Topology: sc.Top, Program: &prog, Seed: 1, ControlLatency: latency})
		if err != nil {
			t.Fatal(err)
		}
		tb := testbed.Watch(sim, 0)
		o, err := Run(context.Background(), Setup{Testbed: tb, Workers: sc.Workers, Controller: sc.Controller, PS: sc.PS,
			Net: fabric.DefaultNet, Jobs: jobs, Lookup: lookup, Policy: freePolicy, Seed: 1, Timeout: time.Millisecond, Limit: 30 * time.Second})
		if err != nil {
			t.Fatalf("control latency %v: %v", latency, err)
		}
		r := tb.Report()
		jct[i] = o.AvgJCT()
		t.Logf("control latency %v: %d P4Runtime requests, %d of %d all-reduces on the INA path, switch %+v, avg JCT %.6f s",
			latency, r.Calls, o.RoundsINA, o.Rounds, o.Switch, jct[i])
		if len(r.Inside) > 0 {
			t.Errorf("control latency %v: %d requests inside agent callbacks, the first: %s", latency, len(r.Inside), r.Inside[0])
		}
		if o.Rounds != 11 || o.RoundsINA == 0 || r.Calls < o.RoundsINA || o.Switch.Packets == 0 {
			t.Errorf("control latency %v: %d all-reduces (%d INA), %d requests, switch counters %+v", latency, o.Rounds, o.RoundsINA, r.Calls, o.Switch)
		}
	}
	if jct[1] <= jct[0] {
		t.Errorf("avg JCT %.6f s with 200 µs control calls, %.6f s with instant ones: the latency was not modelled", jct[1], jct[0])
	}
}
