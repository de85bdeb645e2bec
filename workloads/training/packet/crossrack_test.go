package packet

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/sim"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/systems/inasched"
	"github.com/tracebed/tracebed/systems/noina"
	"github.com/tracebed/tracebed/topologies"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/traces/models"
	"github.com/tracebed/tracebed/workloads/allreduce"
	"github.com/tracebed/tracebed/workloads/training/fabric"
	"github.com/tracebed/tracebed/workloads/training/flow"
)

// fixedPool binds every distributed job to the pool [0, size) on every
// switch of its tree, in one mode.
type fixedPool struct {
	mode inasched.Mode
	size int
}

func (p fixedPool) Name() string                      { return "fixed-pool" }
func (p fixedPool) Admit(time.Duration, inasched.Job) {}
func (p fixedPool) Depart(time.Duration, int)         {}
func (p fixedPool) Priority(int) float64              { return 0 }
func (p fixedPool) Binding(_ time.Duration, id int) inasched.Binding {
	return inasched.Binding{Mode: p.mode, Base: 0, Size: p.size}
}

// crossRack is a leaf-spine of 2 spines and 2 racks of 3 hosts, every
// switch with aggregators: a job of 5 or 6 workers spans both racks.
func crossRack(t *testing.T, aggregators int, fabricRate units.Rate) *topologies.Topology {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "leafspine", Spines: 2, Leaves: 2, HostsPerLeaf: 3,
		Rate: 10 * units.Gbps, FabricRate: fabricRate, Delay: units.Duration(time.Microsecond), Buffer: 4 << 20, Aggregators: aggregators})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("crossrack")
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// TestCrossRackMatchesFlow is the flow-vs-packet validation of the other
// levels' tests (flow.TestFlowMatchesPacketLevel: every job's JCT within
// 5%) for jobs across racks: the packet level aggregates in two levels
// (the racks' ToRs, then the spine of the flow model's tree,
// fabric.Cluster.Tree) through the p4/ina pipeline with allreduce's
// workers, and the flow model runs the same job; the ring crosses the
// spines the same ECMP hash picks at both levels.
func TestCrossRackMatchesFlow(t *testing.T) {
	const elems = 64 * 1500 // 384 KB of gradient
	for _, tt := range []struct {
		name        string
		aggregators int
		fabric      units.Rate
		workers     int
		mode        allreduce.Mode
		size        int // pool (INA)
		shared      bool
		policy      inasched.Factory
	}{
		{"pool at line rate, 6 workers", 64, 0, 6, allreduce.ModeINA, 64, false, nil},
		{"pool at line rate, 5 workers, 2:1 uplinks", 64, 15 * units.Gbps / 2, 5, allreduce.ModeINA, 64, false, nil},
		{"pool window-limited", 4, 0, 6, allreduce.ModeINA, 4, false, nil},
		{"shared (ATP), PS at the spine", 4096, 0, 6, allreduce.ModeINA, 4096, true, nil},
		{"ring", 0, 0, 6, allreduce.ModeRing, 0, false, noina.New},
		{"ring, 2:1 uplinks", 0, 15 * units.Gbps / 2, 6, allreduce.ModeRing, 0, false, noina.New},
	} {
		t.Run(tt.name, func(t *testing.T) {
			top := crossRack(t, tt.aggregators, tt.fabric)
			// Where the flow model places the job and aggregates it.
			cl := fabric.NewCluster(top)
			cl.TwoLevel = true
			hosts, ok := cl.Place(tt.workers)
			if !ok {
				t.Fatal("no placement")
			}
			tree, err := cl.Tree(hosts)
			if err != nil {
				t.Fatal(err)
			}
			spec := allreduce.JobSpec{ID: 1, Mode: tt.mode, Elements: elems, Iterations: 4, Compute: 300 * time.Microsecond,
				Timeout: 10 * time.Millisecond, Port: fabric.NodePort}
			prof := models.Profile{Name: "m", GradientBytes: elems * 4, Compute: spec.Compute, Batch: 1}
			net := fabric.DefaultNet.DataPlaneATP()
			net.Turnaround, net.Control, net.Jitter = 0, 0, 0
			// The packet level's network: with a parameter-server host on
			// the top switch for shared mode (the flow model's dedicated
			// PS link, like a worker's).
			pktTop := top
			if tt.shared {
				sc, err := ScaleTopology(top, net, ScaleParams{Factor: 1, Loss: -1, PSPerSwitch: 1})
				if err != nil {
					t.Fatal(err)
				}
				pktTop = sc.Top
				spec.Shared, spec.PSHost = true, sc.PS[tree.Top.Name][0]
			}
			for _, h := range hosts {
				spec.Hosts = append(spec.Hosts, cl.Hosts[h].Name)
			}
			if tt.mode == allreduce.ModeINA {
				if len(tree.Lower) != 2 {
					t.Fatalf("tree %v: want two levels over both racks", tree)
				}
				spec.Switch = tree.Top.Name
				for _, l := range tree.Lower {
					spec.Lower = append(spec.Lower, l.Name)
				}
				spec.Size, spec.Window = uint32(tt.size), tt.size
				if tt.shared {
					est := cl.Estimate(net, jobtrace.Job{}, prof, spec.Compute.Seconds(), hosts, tree)
					spec.Window = min(est.WindowPS, tt.size) // ATP's window, as the flow model's
				}
			}
			s := sim.New()
			n, err := sim.NewNetwork(s, pktTop, sim.Options{Seed: 1, Pipeline: ina.SimPipeline(ina.DefaultK)})
			if err != nil {
				t.Fatal(err)
			}
			j, err := allreduce.Setup(n, spec)
			if err != nil {
				t.Fatal(err)
			}
			s.RunUntil(10 * sim.Second)
			if !j.Done() || j.Err != nil {
				t.Fatalf("packet level: done %v, %v", j.Done(), j.Err)
			}
			pk := j.Finish.Seconds()
			if tt.shared && j.PS.Stats.FromSwitch == 0 {
				t.Error("packet level: no chunk completed in the switches")
			}

			policy := tt.policy
			if policy == nil {
				mode := inasched.Pool
				if tt.shared {
					mode = inasched.Shared
				}
				policy = func(inasched.Memory, int) (inasched.Scheduler, error) { return fixedPool{mode, tt.size}, nil }
			}
			o, err := flow.Simulate(context.Background(), flow.Setup{Top: top, Net: net, Policy: policy, Seed: 1,
				Jobs:   []jobtrace.Job{{ID: 0, Model: "m", Workers: tt.workers, Iterations: spec.Iterations}},
				Lookup: func(string) (models.Profile, bool) { return prof, true }})
			if err != nil {
				t.Fatal(err)
			}
			fl := o.Jobs[0].JCT()
			if tt.mode == allreduce.ModeINA && o.INAFraction != 1 {
				t.Errorf("flow level: ina_fraction %v, want the job aggregated in the switches", o.INAFraction)
			}
			dev := (fl - pk) / pk
			t.Logf("%s on %v: packet level %.1f us, flow level %.1f us (%+.2f%%)", tt.mode, spec.Hosts, pk*1e6, fl*1e6, 100*dev)
			if math.Abs(dev) > 0.05 {
				t.Errorf("flow level %.1f us is %+.2f%% off packet level %.1f us; want within 5%%", fl*1e6, 100*dev, pk*1e6)
			}
		})
	}
}
