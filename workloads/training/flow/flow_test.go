package flow

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/tracebed/tracebed/workloads/training/fabric"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/systems/atp"
	"github.com/tracebed/tracebed/systems/dynaina"
	"github.com/tracebed/tracebed/systems/inasched"
	"github.com/tracebed/tracebed/systems/noina"
	"github.com/tracebed/tracebed/systems/switchml"
	"github.com/tracebed/tracebed/topologies"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/traces/models"
)

func star(t testing.TB, hosts, aggregators int, rate units.Rate) *topologies.Topology {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: hosts, Rate: rate, Delay: unitsUs(1), Aggregators: aggregators})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("test")
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// quiet is the model without jitter or host latencies, for closed forms.
func quiet() fabric.Net {
	n := fabric.DefaultNet
	n.Turnaround, n.Control, n.Jitter = 0, 0, 0
	return n
}

func policies() map[string]inasched.Factory {
	return map[string]inasched.Factory{
		"noina":    noina.New,
		"switchml": switchml.Factory(switchml.Params{Partition: 512}),
		"atp":      atp.New,
		"dynaina":  dynaina.Factory(dynaina.DefaultParams),
	}
}

var policyNames = []string{"noina", "switchml", "atp", "dynaina"}

func custom(profiles ...models.Profile) func(string) (models.Profile, bool) {
	return func(name string) (models.Profile, bool) {
		for _, p := range profiles {
			if p.Name == name {
				return p, true
			}
		}
		return models.Profile{}, false
	}
}

func simulate(t testing.TB, s Setup) *Outcome {
	t.Helper()
	o, err := Simulate(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func near(a, b, rel float64) bool { return math.Abs(a-b) <= rel*math.Max(math.Abs(a), math.Abs(b)) }

// TestTwoJobMetrics checks mem_util and ina_fraction against hand-computed
// values. Star of 4 hosts at 10 Gbps, 1 us links, no switch latency, no
// jitter: an INA round trip is RTT = 2 × (1 us + 322 B × 8 / 10 Gbps) =
// 2.5152 us and the line rate carries 10 Gbps × 256/322 of gradient.
// Job A (2 workers, 2.56 MB, 1 ms compute, 10 iterations) and job B (2
// workers, 1.28 MB, 2 ms compute, 5 iterations) arrive together.
func TestTwoJobMetrics(t *testing.T) {
	const (
		gA, cA, iA = 2_560_000.0, 1e-3, 10
		gB, cB, iB = 1_280_000.0, 2e-3, 5
		rtt        = 2 * (1e-6 + 322*8/10e9)
		line       = 10e9 / 8 * 256 / 322
		// B on the host ring: 2(N−1)/N = 1 of its gradient in 322-byte
		// frames, and 2(N−1) = 2 steps of h3→tor→h4 latency.
		ringB = gB*322/256/(10e9/8) + 2*2*(1e-6+322*8/10e9)
	)
	profs := custom(
		models.Profile{Name: "a", GradientBytes: gA, Compute: time.Millisecond},
		models.Profile{Name: "b", GradientBytes: gB, Compute: 2 * time.Millisecond},
	)
	trace := []jobtrace.Job{
		{ID: 0, Model: "a", Workers: 2, Iterations: iA},
		{ID: 1, Model: "b", Workers: 2, Iterations: iB},
	}
	commA := gA/line + rtt // one all-reduce of A: stream, then the last round trip
	jctA := iA * (cA + commA)
	tests := []struct {
		name        string
		aggregators int
		partition   int
		jct         [2]float64
		memUtil     float64
		inaFraction float64
		ina, ring   [2]float64 // time all-reducing in the switch and on the ring
	}{
		{
			// One partition of 64: A takes it, B uses the ring throughout.
			// Aggregators in use: 64 while A all-reduces.
			name: "one partition", aggregators: 64, partition: 64,
			jct:     [2]float64{jctA, iB * (cB + ringB)},
			memUtil: iA * commA * 64 / (64 * jctA),
			// Bytes aggregated in the switch: all of A's, none of B's.
			inaFraction: gA * iA / (gA*iA + gB*iB),
			ina:         [2]float64{iA * commA, 0},
			ring:        [2]float64{0, iB * ringB},
		},
		{
			// Two partitions of 64: both jobs aggregate in the switch.
			name: "two partitions", aggregators: 128, partition: 64,
			jct:         [2]float64{jctA, iB * (cB + gB/line + rtt)},
			memUtil:     (iA*commA*64 + iB*(gB/line+rtt)*64) / (128 * jctA),
			inaFraction: 1,
			ina:         [2]float64{iA * commA, iB * (gB/line + rtt)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := simulate(t, Setup{Top: star(t, 4, tt.aggregators, 10*units.Gbps), Net: quiet(), Jobs: trace,
				Policy: switchml.Factory(switchml.Params{Partition: tt.partition}), Lookup: profs})
			compute := [2]float64{iA * cA, iB * cB}
			for i, j := range o.Jobs {
				if !near(j.JCT(), tt.jct[i], 1e-9) {
					t.Errorf("job %d: JCT %.9f s, hand-computed %.9f s", i, j.JCT(), tt.jct[i])
				}
				// The per-job breakdown: nothing queues or waits for
				// memory; every iteration computes, then all-reduces in
				// the switch or on the ring.
				if j.Start != j.Arrival || j.MemWait != 0 {
					t.Errorf("job %d: queued %v s, waited %v s for memory; want 0", i, j.Start-j.Arrival, j.MemWait)
				}
				if !near(j.Compute, compute[i], 1e-12) || !near(j.INATime, tt.ina[i], 1e-9) || !near(j.RingTime, tt.ring[i], 1e-9) {
					t.Errorf("job %d: compute %.9f s, INA %.9f s, ring %.9f s; hand-computed %.9f, %.9f, %.9f", i, j.Compute, j.INATime, j.RingTime, compute[i], tt.ina[i], tt.ring[i])
				}
				if rounds := [2]int{j.INARounds, j.RingRounds}; tt.ina[i] > 0 && rounds != [2]int{j.Iterations, 0} || tt.ring[i] > 0 && rounds != [2]int{0, j.Iterations} {
					t.Errorf("job %d: %d rounds in the switch and %d on the ring", i, j.INARounds, j.RingRounds)
				}
				if j.Switch != "tor" || len(j.Lower) != 0 {
					t.Errorf("job %d aggregated on %q below %v; want the star's tor alone", i, j.Switch, j.Lower)
				}
			}
			if !near(o.Makespan, jctA, 1e-9) {
				t.Errorf("makespan %.9f, want %.9f", o.Makespan, jctA)
			}
			if !near(o.MemUtil, tt.memUtil, 1e-6) {
				t.Errorf("mem_util %.9f, hand-computed %.9f", o.MemUtil, tt.memUtil)
			}
			if !near(o.INAFraction, tt.inaFraction, 1e-9) {
				t.Errorf("ina_fraction %.9f, hand-computed %.9f", o.INAFraction, tt.inaFraction)
			}
			if o.FallbackBytes != 0 {
				t.Errorf("fallback %v bytes without shared mode", o.FallbackBytes)
			}
			// The series averages to mem_util.
			var avg float64
			for _, p := range o.MemSeries {
				avg += p.Y
			}
			avg /= float64(len(o.MemSeries))
			if !near(avg, tt.memUtil, 1e-6) {
				t.Errorf("mem_util series averages %.9f, want %.9f", avg, tt.memUtil)
			}
		})
	}
}

// randomTrace draws a small trace of the given models.
func randomTrace(seed uint64, n, maxWorkers int) []jobtrace.Job {
	r := rand.New(rand.NewPCG(seed, 7))
	names := models.Names()
	var js []jobtrace.Job
	var at time.Duration
	for i := range n {
		at += time.Duration(r.ExpFloat64() * float64(2*time.Second))
		js = append(js, jobtrace.Job{ID: i, Arrival: at, Model: names[r.IntN(len(names))], Workers: 1 + r.IntN(maxWorkers), Iterations: 1 + r.IntN(60)})
	}
	return js
}

// TestJobsFinishAboveBound runs random traces under every policy, memory
// size and topology: every job finishes, and its JCT is never below its
// physical lower bound (the compute time of every iteration, plus, for a
// distributed job, its gradient's bits over the workers' link rate).
func TestJobsFinishAboveBound(t *testing.T) {
	leaf, err := topologies.Generate(topologies.Params{Generate: "leafspine", Spines: 2, Leaves: 3, HostsPerLeaf: 4, Rate: 100 * units.Gbps, FabricRate: 40 * units.Gbps, Delay: unitsUs(1), Aggregators: 1024})
	if err != nil {
		t.Fatal(err)
	}
	leafTop, err := leaf.Build("leaf")
	if err != nil {
		t.Fatal(err)
	}
	tops := map[string]*topologies.Topology{
		"star-0":     star(t, 12, 0, 100*units.Gbps),
		"star-600":   star(t, 12, 600, 100*units.Gbps),
		"star-8192":  star(t, 12, 8192, 100*units.Gbps),
		"leafspine":  leafTop,
		"star-10g-1": star(t, 12, 64, 10*units.Gbps),
	}
	var waited float64 // for switch memory, over every run
	for seed := uint64(1); seed <= 3; seed++ {
		trace := randomTrace(seed, 14, 8)
		for topName, top := range tops {
			for _, pol := range policyNames {
				t.Run(fmt.Sprintf("%s/%s/%d", topName, pol, seed), func(t *testing.T) {
					net := fabric.DefaultNet
					net.Jitter = 0.05
					o := simulate(t, Setup{Top: top, Net: net, Jobs: trace, Policy: policies()[pol], Seed: seed})
					if len(o.Jobs) != len(trace) {
						t.Fatalf("%d results for %d jobs", len(o.Jobs), len(trace))
					}
					for _, j := range o.Jobs {
						prof, _ := models.Lookup(j.Model)
						if j.Finish <= 0 || j.Finish < j.Start || j.Start < j.Arrival {
							t.Errorf("job %d: arrival %v start %v finish %v", j.ID, j.Arrival, j.Start, j.Finish)
						}
						if j.JCT() < j.Bound*(1-1e-9) {
							t.Errorf("job %d (%s, %d workers): JCT %.6f s below its lower bound %.6f s", j.ID, j.Model, j.Workers, j.JCT(), j.Bound)
						}
						// The bound itself is at least the nominal compute
						// shrunk by the largest jitter draw.
						if min := float64(j.Iterations) * prof.Compute.Seconds() * (1 - 3*net.Jitter); j.Bound < min*(1-1e-9) {
							t.Errorf("job %d: bound %.6f below %d × (1−3σ) compute = %.6f", j.ID, j.Bound, j.Iterations, min)
						}
						if j.Workers > 1 && !near(j.Gradient, float64(j.Iterations)*float64(prof.GradientBytes), 1e-9) {
							t.Errorf("job %d: all-reduced %.0f bytes, want %d × %d", j.ID, j.Gradient, j.Iterations, prof.GradientBytes)
						}
						checkBreakdown(t, j)
						waited += j.MemWait
					}
					if o.MemUtil < 0 || o.MemUtil > 1 || o.INAFraction < 0 || o.INAFraction > 1 {
						t.Errorf("mem_util %v, ina_fraction %v outside [0, 1]", o.MemUtil, o.INAFraction)
					}
				})
			}
		}
	}
	// Pools shared in turn make some job wait for its memory somewhere.
	if waited == 0 {
		t.Errorf("no job waited for switch memory in any run; the breakdown's memory wait is never exercised")
	}
}

// checkBreakdown checks that a job's times add up to its JCT — queueing
// for hosts, then computing, waiting for memory and all-reducing in a
// switch or on the ring — and that a distributed job all-reduced once an
// iteration.
func checkBreakdown(t *testing.T, j JobResult) {
	t.Helper()
	sum := j.Start - j.Arrival + j.Compute + j.MemWait + j.INATime + j.RingTime
	if !near(sum, j.JCT(), 1e-9) || j.MemWait < 0 || j.INATime < 0 || j.RingTime < 0 || j.Compute <= 0 {
		t.Errorf("job %d: queue %.9f + compute %.9f + memory wait %.9f + INA %.9f + ring %.9f = %.9f s; JCT %.9f s", j.ID, j.Start-j.Arrival, j.Compute, j.MemWait, j.INATime, j.RingTime, sum, j.JCT())
	}
	want := j.Iterations
	if j.Workers == 1 {
		want = 0
	}
	if j.INARounds+j.RingRounds != want {
		t.Errorf("job %d (%d workers, %d iterations): %d rounds in a switch, %d on the ring", j.ID, j.Workers, j.Iterations, j.INARounds, j.RingRounds)
	}
	if j.Switch == "" {
		t.Errorf("job %d: no aggregation switch", j.ID)
	}
}

// TestOneJobAlone: with nothing to share, every INA policy gives a job the
// same JCT — SwitchML and DynaINA exactly; ATP up to the extra round trip
// through its parameter server per iteration — and all beat the ring.
func TestOneJobAlone(t *testing.T) {
	for _, model := range []string{"alexnet", "vgg16", "resnet50", "bert-large"} {
		for _, workers := range []int{2, 4, 8} {
			t.Run(fmt.Sprintf("%s-%d", model, workers), func(t *testing.T) {
				top := star(t, 8, 8192, 100*units.Gbps)
				trace := []jobtrace.Job{{ID: 0, Model: model, Workers: workers, Iterations: 50}}
				jct := map[string]float64{}
				for _, pol := range policyNames {
					o := simulate(t, Setup{Top: top, Net: fabric.DefaultNet, Jobs: trace, Policy: policies()[pol], Seed: 1})
					jct[pol] = o.Jobs[0].JCT()
				}
				if jct["switchml"] != jct["dynaina"] {
					t.Errorf("switchml %.9f s, dynaina %.9f s; want equal", jct["switchml"], jct["dynaina"])
				}
				// ATP's extra round trip: worker → switch → PS → switch.
				extra := 50 * (2*(1e-6+322*8/100e9) + fabric.DefaultNet.Turnaround.Seconds())
				if d := jct["atp"] - jct["switchml"]; d < -1e-12 || d > extra*(1+1e-6) {
					t.Errorf("atp %.9f s, switchml %.9f s: difference %.3g s, want 0 to %.3g", jct["atp"], jct["switchml"], d, extra)
				}
				if workers > 2 && jct["noina"] <= jct["switchml"] {
					t.Errorf("ring %.6f s not slower than INA %.6f s with %d workers", jct["noina"], jct["switchml"], workers)
				}
			})
		}
	}
}

// TestNoMemoryIsNoINA: without switch memory every policy is the ring.
func TestNoMemoryIsNoINA(t *testing.T) {
	leaf, _ := topologies.Generate(topologies.Params{Generate: "leafspine", Spines: 2, Leaves: 2, HostsPerLeaf: 6, Delay: unitsUs(1)})
	leafTop, err := leaf.Build("leaf")
	if err != nil {
		t.Fatal(err)
	}
	for name, top := range map[string]*topologies.Topology{"star": star(t, 12, 0, 100*units.Gbps), "leafspine": leafTop} {
		trace := randomTrace(11, 20, 8)
		want := simulate(t, Setup{Top: top, Net: fabric.DefaultNet, Jobs: trace, Policy: noina.New, Seed: 3})
		for _, pol := range policyNames[1:] {
			got := simulate(t, Setup{Top: top, Net: fabric.DefaultNet, Jobs: trace, Policy: policies()[pol], Seed: 3})
			for i := range got.Jobs {
				if got.Jobs[i].JCT() != want.Jobs[i].JCT() {
					t.Errorf("%s/%s: job %d JCT %.9f, noina %.9f", name, pol, i, got.Jobs[i].JCT(), want.Jobs[i].JCT())
				}
			}
			if got.MemUtil != 0 || got.INAFraction != 0 || got.FallbackBytes != 0 || got.Rebinds != 0 {
				t.Errorf("%s/%s: mem_util %v ina_fraction %v fallback %v rebinds %d; want all 0", name, pol, got.MemUtil, got.INAFraction, got.FallbackBytes, got.Rebinds)
			}
		}
	}
}

// TestDeterministic: the same seed gives the same outcome, and a different
// seed (jitter draws) a different one.
func TestDeterministic(t *testing.T) {
	top := star(t, 16, 1024, 100*units.Gbps)
	trace := randomTrace(5, 16, 8)
	for _, pol := range policyNames {
		a := simulate(t, Setup{Top: top, Net: fabric.DefaultNet, Jobs: trace, Policy: policies()[pol], Seed: 9})
		b := simulate(t, Setup{Top: top, Net: fabric.DefaultNet, Jobs: trace, Policy: policies()[pol], Seed: 9})
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: two runs with seed 9 differ", pol)
		}
		c := simulate(t, Setup{Top: top, Net: fabric.DefaultNet, Jobs: trace, Policy: policies()[pol], Seed: 10})
		if reflect.DeepEqual(a.Jobs, c.Jobs) {
			t.Errorf("%s: seeds 9 and 10 give the same jobs", pol)
		}
	}
}

// TestContention: with scarce memory and many jobs, ATP collides and sends
// bytes to parameter servers, SwitchML leaves jobs on the ring, and
// DynaINA, sharing pools, aggregates more in the switch than SwitchML.
func TestContention(t *testing.T) {
	top := star(t, 32, 1024, 100*units.Gbps)
	mix, _ := jobtrace.Mix("vision")
	trace, err := jobtrace.Generate(jobtrace.GenParams{Jobs: 16, MeanInterarrival: 5 * time.Second, Models: mix,
		Workers: []jobtrace.Choice[int]{{Value: 4, Weight: 1}, {Value: 8, Weight: 1}}, GPUTime: [2]time.Duration{time.Minute, 3 * time.Minute}, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*Outcome{}
	for _, pol := range policyNames {
		out[pol] = simulate(t, Setup{Top: top, Net: fabric.DefaultNet, Jobs: trace, Policy: policies()[pol], Seed: 1})
	}
	if out["atp"].FallbackBytes <= 0 || out["atp"].INAFraction >= 1 {
		t.Errorf("atp: fallback %v bytes, ina_fraction %v; want collisions", out["atp"].FallbackBytes, out["atp"].INAFraction)
	}
	if out["switchml"].INAFraction >= 1 {
		t.Errorf("switchml: ina_fraction %v; want jobs left on the ring", out["switchml"].INAFraction)
	}
	for _, pol := range policyNames {
		t.Logf("%-8s avg JCT %.2f s, mem_util %.4f, ina_fraction %.4f, fallback %.3g B", pol, out[pol].AvgJCT(), out[pol].MemUtil, out[pol].INAFraction, out[pol].FallbackBytes)
	}
	if out["dynaina"].INAFraction <= out["switchml"].INAFraction {
		t.Errorf("dynaina ina_fraction %v not above switchml's %v: sharing pools should keep more jobs off the ring", out["dynaina"].INAFraction, out["switchml"].INAFraction)
	}
	// ATP as published may lose to the ring here: its collided chunks
	// overload the parameter servers' links (docs/dynaina.md, "ATP as
	// published"); the pool policies may not, and DynaINA beats ATP.
	for _, pol := range []string{"switchml", "dynaina"} {
		if out[pol].AvgJCT() >= out["noina"].AvgJCT() {
			t.Errorf("%s avg JCT %.2f not below noina's %.2f", pol, out[pol].AvgJCT(), out["noina"].AvgJCT())
		}
	}
	if out["dynaina"].AvgJCT() >= out["atp"].AvgJCT() {
		t.Errorf("dynaina avg JCT %.2f not below atp's %.2f under contention", out["dynaina"].AvgJCT(), out["atp"].AvgJCT())
	}
}

func TestMaxMin(t *testing.T) {
	var sv solver
	tests := []struct {
		name  string
		caps  []float64
		coefs [][]coef
		limit []float64
		want  []float64
	}{
		{"one flow, link-bound", []float64{10}, [][]coef{{{Link: 0, A: 1}}}, []float64{math.Inf(1)}, []float64{10}},
		{"one flow, cap-bound", []float64{10}, [][]coef{{{Link: 0, A: 1}}}, []float64{4}, []float64{4}},
		{"two share a link", []float64{10}, [][]coef{{{Link: 0, A: 1}}, {{Link: 0, A: 1}}}, []float64{math.Inf(1), math.Inf(1)}, []float64{5, 5}},
		{"capped flow leaves room", []float64{10}, [][]coef{{{Link: 0, A: 1}}, {{Link: 0, A: 1}}}, []float64{2, math.Inf(1)}, []float64{2, 8}},
		{"coefficient", []float64{12}, [][]coef{{{Link: 0, A: 2}}, {{Link: 0, A: 1}}}, []float64{math.Inf(1), math.Inf(1)}, []float64{4, 4}},
		{"classic three links", []float64{10, 4}, [][]coef{{{Link: 0, A: 1}}, {{Link: 0, A: 1}, {Link: 1, A: 1}}, {{Link: 1, A: 1}}}, []float64{math.Inf(1), math.Inf(1), math.Inf(1)}, []float64{8, 2, 2}},
	}
	for _, tt := range tests {
		got := sv.maxMin(tt.caps, tt.coefs, tt.limit)
		for i := range got {
			if !near(got[i], tt.want[i], 1e-12) {
				t.Errorf("%s: rates %v, want %v", tt.name, got, tt.want)
				break
			}
		}
	}
}

func TestBinSteps(t *testing.T) {
	steps := []analysis.Point{{X: 0, Y: 1}, {X: 1, Y: 0}, {X: 3, Y: 0.5}}
	got := binSteps(steps, 0, 4, 4)
	want := []float64{1, 0, 0, 0.5}
	for i, p := range got {
		if !near(p.Y, want[i], 1e-12) || p.X != float64(i)+0.5 {
			t.Errorf("bin %d: %v, want (%v, %v)", i, p, float64(i)+0.5, want[i])
		}
	}
	got = binSteps(steps, 0, 4, 2)
	if !near(got[0].Y, 0.5, 1e-12) || !near(got[1].Y, 0.25, 1e-12) {
		t.Errorf("two bins: %v", got)
	}
}
