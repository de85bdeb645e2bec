package allreduce

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/sim"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/topologies"
)

// leafSpine is a fabric of 2 spines and 3 leaves of 4 hosts (h1–h4 under
// leaf1, h5–h8 under leaf2, h9–h12 under leaf3), every switch running the
// INA pipeline, every link impaired by imp (loss, duplication and
// reordering each).
func leafSpine(t testing.TB, rate units.Rate, aggregators int, imp float64) *topologies.Topology {
	return fabricTopo(t, 4, rate, aggregators, imp)
}

// fabricTopo is a leaf-spine of 2 spines and 3 leaves of perLeaf hosts.
func fabricTopo(t testing.TB, perLeaf int, rate units.Rate, aggregators int, imp float64) *topologies.Topology {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "leafspine", Name: "fabric", Spines: 2, Leaves: 3, HostsPerLeaf: perLeaf,
		Rate: rate, Delay: units.Duration(time.Microsecond), Aggregators: aggregators})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("fabric")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range top.Links {
		l.Loss, l.Duplicate, l.Reorder = imp, imp, imp
	}
	return top
}

// twoLevelJobs are jobs across racks aggregated in two levels: a pool job
// over three racks, and two shared-mode (ATP) jobs hashing onto one small
// pool of the same switches (collisions at both levels), one releasing its
// aggregators at completion and hashing every chunk, the other as ATP
// does: release on the result's return, collided slots remapped.
func twoLevelJobs(window int) []JobSpec {
	return []JobSpec{
		{ID: 1, Mode: ModeINA, Hosts: []string{"h1", "h2", "h5", "h9", "h10"}, Switch: "spine1", Lower: []string{"leaf1", "leaf2", "leaf3"},
			Base: 0, Size: uint32(window), Window: window},
		{ID: 2, Mode: ModeINA, Shared: true, Hosts: []string{"h3", "h6", "h7"}, PSHost: "h12", Switch: "spine1", Lower: []string{"leaf1", "leaf2"},
			Base: 40, Size: 6, Window: 2 * window},
		{ID: 3, Mode: ModeINA, Shared: true, Hold: ina.HoldReturn, Remap: true, Hosts: []string{"h4", "h8", "h11"}, PSHost: "h12", Switch: "spine1",
			Lower: []string{"leaf1", "leaf2", "leaf3"}, Base: 40, Size: 6, Window: 2 * window},
	}
}

// TestTwoLevelExactness is TestExactness across racks: every worker of
// every job aggregated in two levels (pool and shared mode, release at
// completion and on return) ends each iteration with exactly the integer
// sum of the workers' tensors under loss, duplication and reordering,
// with retransmission timeouts that are long or barely above the round
// trip (spurious retransmissions: resent partials and results at both
// levels).
func TestTwoLevelExactness(t *testing.T) {
	for _, imp := range []float64{0, 0.01, 0.05} {
		for seed := range uint64(4) {
			timeout := 200 * time.Microsecond
			if seed%2 == 1 {
				timeout = 8 * time.Microsecond
			}
			t.Run(fmt.Sprintf("impair=%g/seed=%d/timeout=%v", imp, seed, timeout), func(t *testing.T) {
				t.Parallel()
				top := leafSpine(t, 100*units.Gbps, 64, imp)
				s, n := newNet(t, top, testK, seed)
				g := gradients{seed: seed, limit: 1 << 20}
				jobs := setupJobs(t, n, g, twoLevelJobs(8), func(spec *JobSpec) {
					spec.K, spec.Elements, spec.Iterations, spec.Timeout = testK, 1500+int(seed)*97, 3, timeout
				})
				runJobs(t, s, jobs, sim.Second)
				checkTwoLevel(t, jobs)
			})
		}
	}
}

// checkTwoLevel checks that the jobs aggregated at both levels: every
// lower switch sent partials up, and the top aggregated them.
func checkTwoLevel(t *testing.T, jobs []*Job) {
	t.Helper()
	ctx := context.Background()
	for _, j := range jobs {
		top, err := j.Controllers[0].Counters(ctx, j.Spec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if top.Aggregated == 0 {
			t.Errorf("job %d: nothing aggregated at the top %s", j.Spec.ID, j.Spec.Switch)
		}
		for i, ctl := range j.Controllers[1:] {
			c, err := ctl.Counters(ctx, j.Spec.ID)
			if err != nil {
				t.Fatal(err)
			}
			if c.Aggregated == 0 || c.Upward == 0 {
				t.Errorf("job %d at %s: aggregated %d, sent up %d", j.Spec.ID, j.Spec.Lower[i], c.Aggregated, c.Upward)
			}
		}
	}
}

// TestTwoLevelHeavyReordering: slow links, windows of 2 and heavy
// duplication and reordering, so copies of partials and results arrive
// after their cells were reused twice, at both levels.
func TestTwoLevelHeavyReordering(t *testing.T) {
	top := leafSpine(t, units.Gbps, 16, 0)
	for _, l := range top.Links {
		l.Loss, l.Duplicate, l.Reorder = 0.02, 0.2, 0.3
	}
	s, n := newNet(t, top, testK, 4)
	g := gradients{seed: 4, limit: 1 << 20}
	jobs := setupJobs(t, n, g, twoLevelJobs(2), func(spec *JobSpec) {
		spec.Base %= 16
		spec.K, spec.Elements, spec.Iterations, spec.Timeout = testK, 400, 3, 40*time.Microsecond
	})
	runJobs(t, s, jobs, sim.Second)
	checkTwoLevel(t, jobs)
}

// TestTwoLevelTraffic: without impairments, a rack's workers put one
// partial per chunk on their uplink, not one packet each, and the top
// sees one contribution per rack per chunk.
func TestTwoLevelTraffic(t *testing.T) {
	top := leafSpine(t, 100*units.Gbps, 64, 0)
	s, n := newNet(t, top, testK, 1)
	g := gradients{seed: 1, limit: 1 << 20}
	jobs := setupJobs(t, n, g, twoLevelJobs(8)[:1], func(spec *JobSpec) {
		spec.K, spec.Elements, spec.Iterations, spec.Timeout = testK, 64*testK, 2, time.Millisecond
	})
	runJobs(t, s, jobs, sim.Second)
	j, spec := jobs[0], jobs[0].Spec
	chunks := uint64(spec.Elements / testK * spec.Iterations)
	ctx := context.Background()
	c, err := j.Controllers[0].Counters(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if c.Aggregated != 3*chunks || c.Results != chunks {
		t.Errorf("top: %d contributions and %d results for %d chunks of 3 racks", c.Aggregated, c.Results, chunks)
	}
	for i, want := range []uint64{2, 1, 2} { // workers per rack
		c, err := j.Controllers[1+i].Counters(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if c.Aggregated != want*chunks || c.Upward != chunks || c.Results != chunks {
			t.Errorf("%s: %d contributions, %d partials up, %d results multicast for %d chunks of %d workers", spec.Lower[i], c.Aggregated, c.Upward, c.Results, chunks, want)
		}
	}
}

// TestReleaseOnReturn: in shared mode with release on return (ATP's
// rule), an aggregator stays held from a chunk's first contribution until
// its result comes back from the parameter server, so on a clean network
// the job's hold time exceeds the same run's with release at completion;
// with impairments both are exact.
func TestReleaseOnReturn(t *testing.T) {
	for _, imp := range []float64{0, 0.02} {
		hold := map[uint8]time.Duration{}
		for _, h := range []uint8{ina.HoldCompletion, ina.HoldReturn} {
			top := starTopo(t, netParams{hosts: 9, delay: time.Microsecond, aggregators: 64, loss: imp, dup: imp, reorder: imp})
			s, n := newNet(t, top, testK, 6)
			g := gradients{seed: 6, limit: 1 << 16}
			j, err := Setup(n, JobSpec{ID: 1, Mode: ModeINA, Shared: true, Hold: h, Hosts: hostNames(1, 8), PSHost: "h9", Switch: "tor",
				Base: 0, Size: 64, Window: 16, K: testK, Elements: 3000, Iterations: 3, Timeout: 50 * time.Microsecond,
				Fill: g.fill(1), Check: g.check(1, 8, 3000)})
			if err != nil {
				t.Fatal(err)
			}
			runJobs(t, s, []*Job{j}, sim.Second)
			hold[h] = j.Stats().HoldTime
		}
		t.Logf("impairments %g: hold time %v at completion, %v on return", imp, hold[ina.HoldCompletion], hold[ina.HoldReturn])
		if imp == 0 && hold[ina.HoldReturn] <= hold[ina.HoldCompletion] {
			t.Errorf("hold time %v on return, %v at completion: want longer on return", hold[ina.HoldReturn], hold[ina.HoldCompletion])
		}
	}
}

// TestRemapSettles: two shared-mode jobs whose windows fit together in
// their pool, with workers out of step (an early worker's chunk holds its
// aggregator while the other job's chunks hash there). Hashing every
// chunk anew they keep colliding; with ATP's slot remapping a collided
// slot moves to an aggregator its job does not use, so collisions die
// out. Both are exact.
func TestRemapSettles(t *testing.T) {
	collisions := map[bool][]uint64{}
	for _, remap := range []bool{false, true} {
		top := starTopo(t, netParams{hosts: 9, delay: time.Microsecond, aggregators: 64})
		s, n := newNet(t, top, testK, 3)
		g := gradients{seed: 3, limit: 1 << 16}
		const iters = 8
		var jobs []*Job
		for i := range 2 {
			hosts, ps := hostNames(1, 4), "h9" // each job its own parameter server
			if i == 1 {
				hosts, ps = hostNames(5, 3), "h8"
			}
			spec := JobSpec{ID: uint16(i + 1), Mode: ModeINA, Shared: true, Remap: remap, Hosts: hosts, PSHost: ps, Switch: "tor",
				Base: 0, Size: 24, Window: 10, K: testK, Elements: 4000, Iterations: iters, Timeout: 100 * time.Microsecond,
				Fill: g.fill(uint16(i + 1)), Check: g.check(uint16(i+1), len(hosts), 4000)}
			j, err := Setup(n, spec)
			if err != nil {
				t.Fatal(err)
			}
			// Worker 0 of each job starts its all-reduce 3 µs early.
			for w, wk := range j.Workers {
				if w > 0 {
					wk.Compute = 3 * time.Microsecond
				}
			}
			jobs = append(jobs, j)
		}
		// Collisions per iteration, read from the switch as job 1 ends
		// each one.
		var per []uint64
		var last uint64
		check := jobs[0].Workers[0].Check
		jobs[0].Workers[0].Check = func(it int, t []int32) error {
			var c uint64
			for _, j := range jobs {
				jc, _ := j.Controller.Counters(context.Background(), j.Spec.ID)
				c += jc.Collisions
			}
			per = append(per, c-last)
			last = c
			return check(it, t)
		}
		runJobs(t, s, jobs, sim.Second)
		collisions[remap] = per
	}
	t.Logf("collisions per iteration: hashing %v, remapping %v", collisions[false], collisions[true])
	hash, remap := collisions[false], collisions[true]
	var tailHash, tailRemap uint64
	for i := len(hash) / 2; i < len(hash); i++ {
		tailHash += hash[i]
		tailRemap += remap[i]
	}
	if tailHash == 0 {
		t.Fatal("no collisions when hashing: the case does not exercise them")
	}
	if tailRemap*4 > tailHash {
		t.Errorf("late iterations: %d collisions remapping, %d hashing; want remapping to settle", tailRemap, tailHash)
	}
}

// TestTwoLevelOnTestbeds runs jobs across racks in two levels with SetupOn
// on every testbed (sim; netns as root: one Go switch process per switch
// of the leaf-spine), at 10 Mbit/s with 1% loss on every link: a pool
// job and a shared-mode job as ATP publishes it, every sum exact.
func TestTwoLevelOnTestbeds(t *testing.T) {
	for name, newTB := range testbeds(t) {
		t.Run(name, func(t *testing.T) {
			top := leafSpine(t, 10*units.Mbps, 64, 0.01)
			for _, l := range top.Links {
				l.Duplicate, l.Reorder, l.Delay, l.Buffer = 0, 0, 50*time.Microsecond, 64<<10
			}
			ctx, tb := openTestbed(t, newTB, top)
			specs := []JobSpec{
				{ID: 1, Mode: ModeINA, Hosts: []string{"h1", "h2", "h5", "h9"}, Switch: "spine1", Lower: []string{"leaf1", "leaf2", "leaf3"}, Base: 0, Size: 16},
				{ID: 2, Mode: ModeINA, Shared: true, Hold: ina.HoldReturn, Remap: true, Hosts: []string{"h3", "h6", "h7"}, PSHost: "h12",
					Switch: "spine2", Lower: []string{"leaf1", "leaf2"}, Base: 16, Size: 32, Window: 16},
			}
			jobs := runOnTestbed(ctx, t, tb, gradients{seed: 2, limit: 1 << 20}, specs, 64*40+5)
			checkTwoLevel(t, jobs)
			if err := tb.Close(); err != nil {
				t.Fatal(err)
			}
			for _, j := range jobs {
				if j.Err != nil || !j.Done() {
					t.Errorf("job %d: done %v, %v", j.Spec.ID, j.Done(), j.Err)
				}
			}
		})
	}
}
