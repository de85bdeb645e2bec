package packet

import (
	"context"
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/topologies"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/workloads/training/fabric"
	"github.com/tracebed/tracebed/workloads/training/flow"
)

// TestScaleTopology checks the scaled topology of a packet-level run:
// rates ÷ the factor, memory and buffers in line-rate windows, service
// hosts on links like the workers', distinct addresses, loss replaced.
func TestScaleTopology(t *testing.T) {
	f, err := topologies.Generate(topologies.Params{Generate: "leafspine", Spines: 2, Leaves: 2, HostsPerLeaf: 3, Rate: 100e9, Aggregators: 2048})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("ls")
	if err != nil {
		t.Fatal(err)
	}
	net := fabric.DefaultNet.DataPlaneATP()
	sc, err := ScaleTopology(top, net, ScaleParams{Factor: 10000, HostTurnaround: 2e-3, Loss: 0.01, PSPerSwitch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if sc.Net.Turnaround != 2*time.Millisecond || sc.Window != fabric.LineRateDemand(top, net) {
		t.Errorf("turnaround %v, window %d", sc.Net.Turnaround, sc.Window)
	}
	if len(sc.Workers) != 6 || sc.Controller == "" || len(sc.PS) != 4 {
		t.Fatalf("workers %v, controller %q, PS %v", sc.Workers, sc.Controller, sc.PS)
	}
	ips := map[netip.Addr]bool{}
	for _, h := range sc.Top.Hosts() {
		if ips[h.IP] {
			t.Errorf("address %s twice", h.IP)
		}
		ips[h.IP] = true
	}
	for _, l := range sc.Top.Links {
		if l.Rate != 10e6 || l.Loss != 0.01 {
			t.Errorf("link %s–%s: %v, loss %v", l.A, l.B, l.Rate, l.Loss)
		}
	}
	for _, sw := range sc.Top.Switches() {
		want := int(math.Round(2048 * sc.Memory))
		if sw.Aggregators != want {
			t.Errorf("%s: %d aggregators, want %d (%.4f windows each)", sw.Name, sw.Aggregators, want, sc.Memory)
		}
		for _, ps := range sc.PS[sw.Name] {
			if n := sc.Top.Node(ps); n == nil || n.Uplink().Node != sw {
				t.Errorf("parameter server %s not attached to %s", ps, sw.Name)
			}
		}
	}
	if sc.WindowScaled < 2 || sc.Memory <= 0 {
		t.Errorf("scaled window %d, memory factor %v", sc.WindowScaled, sc.Memory)
	}
	// Factor 1 with the paper's turnaround changes nothing but adds the
	// service hosts.
	same, err := ScaleTopology(top, net, ScaleParams{Factor: 1, Loss: -1})
	if err != nil {
		t.Fatal(err)
	}
	if same.Memory != 1 || same.Top.Switches()[0].Aggregators != 2048 || len(same.Top.Hosts()) != 7 {
		t.Errorf("factor 1: memory %v, aggregators %d, hosts %d", same.Memory, same.Top.Switches()[0].Aggregators, len(same.Top.Hosts()))
	}
	if _, err := ScaleTopology(top, net, ScaleParams{Factor: 1e12}); err == nil {
		t.Error("a factor that leaves links below 1 Kbps accepted")
	}
}

// TestComputeDrawsMatchFlow: each worker draws the compute times the flow
// model draws for it.
func TestComputeDrawsMatchFlow(t *testing.T) {
	const n, iters = 4, 6
	want := flow.Draws(9, 3, n, iters, 80*time.Millisecond, 0.05)
	for w := range n {
		d := newComputeDraws(9, 3, n, w, 80*time.Millisecond, 0.05)
		for it := range iters {
			if got := d.at(it); (got - want[w][it]).Abs() > time.Microsecond {
				t.Errorf("worker %d iteration %d: %v, flow model %v", w, it, got, want[w][it])
			}
		}
	}
}

// TestPacketSetupChecks: Run refuses what the data plane cannot do.
func TestPacketSetupChecks(t *testing.T) {
	f, _ := topologies.Generate(topologies.Params{Generate: "star", Hosts: 2, Aggregators: 8})
	top, _ := f.Build("t")
	prog, _ := ina.SwitchProgram()
	tb, _ := testbed.NewSim(testbed.Config{Topology: top, Program: &prog})
	ok := Setup{Testbed: tb, Workers: []string{"h1"}, Controller: "h2", Net: fabric.DefaultNet.DataPlaneATP(),
		Jobs: []jobtrace.Job{{Model: "vgg16", Workers: 1, Iterations: 1}}, Lookup: nil, Timeout: time.Millisecond, RingTimeout: time.Millisecond, RingWindow: 1}
	for name, mod := range map[string]func(*Setup){
		"no lookup":   func(s *Setup) {},
		"payload":     func(s *Setup) { s.Net.Payload = 512 },
		"atp remap":   func(s *Setup) { s.Net.ATPCollisions = fabric.CollideRemap },
		"no timeout":  func(s *Setup) { s.Timeout = 0 },
		"no ring win": func(s *Setup) { s.RingWindow = 0 },
		"no jobs":     func(s *Setup) { s.Jobs = nil },
	} {
		s := ok
		mod(&s)
		if _, err := Run(context.Background(), s); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
