package allreduce

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/sim"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/p4/ina"
)

const testK = 16

// randomJobs draws 1–8 concurrent jobs of 2–16 workers over hosts h1..h16
// (h17 runs the parameter servers), with tensors of random sizes and a mix
// of modes: pool and shared bindings, parameter server only, ring.
func randomJobs(r *rand.Rand, g gradients, iterations int) []JobSpec {
	modes := []struct {
		mode   Mode
		shared bool
	}{{ModeINA, false}, {ModeINA, true}, {ModePS, false}, {ModeRing, false}}
	var specs []JobSpec
	base := uint32(0)
	for id := range 1 + r.IntN(8) {
		n := 2 + r.IntN(15)
		hosts := hostNames(1, 16)
		r.Shuffle(len(hosts), func(i, j int) { hosts[i], hosts[j] = hosts[j], hosts[i] })
		m := modes[r.IntN(len(modes))]
		size := 1 + r.IntN(1500)
		spec := JobSpec{ID: uint16(id), Mode: m.mode, Shared: m.shared, Hosts: hosts[:n], PSHost: "h17", Switch: "tor",
			K: testK, Elements: size, Iterations: iterations, Compute: time.Duration(r.IntN(20)) * time.Microsecond,
			Timeout: 200 * time.Microsecond, Fill: g.fill(uint16(id)), Check: g.check(uint16(id), n, size)}
		switch {
		case m.mode == ModeINA && m.shared:
			spec.Base, spec.Size, spec.Window = 200, 16, 32 // one small shared pool: collisions
		case m.mode == ModeINA:
			spec.Base, spec.Size = base, uint32(4+r.IntN(28))
			base += spec.Size
		default:
			spec.Window = 8 + r.IntN(64)
		}
		specs = append(specs, spec)
	}
	return specs
}

// TestExactness is the property test of the data plane: every worker of
// every job ends each iteration with exactly the integer sum of the workers'
// tensors, whatever the links lose, duplicate and reorder.
//
// Half of the runs use a retransmission timeout barely above the round-trip
// time, so that spurious retransmissions and late copies of old chunks are
// common: the stale-packet rules of the switch and the parameter server are
// exercised, not only loss recovery.
func TestExactness(t *testing.T) {
	seeds := 4
	if testing.Short() {
		seeds = 2
	}
	for _, imp := range []float64{0, 0.01, 0.05} {
		for seed := range uint64(seeds) {
			timeout := 200 * time.Microsecond
			if seed%2 == 1 {
				timeout = 6 * time.Microsecond
			}
			t.Run(fmt.Sprintf("impair=%g/seed=%d/timeout=%v", imp, seed, timeout), func(t *testing.T) {
				t.Parallel()
				r := rand.New(rand.NewPCG(seed, uint64(imp*1000)))
				top := starTopo(t, netParams{hosts: 17, delay: time.Microsecond, aggregators: 256, loss: imp, dup: imp, reorder: imp})
				s, n := newNet(t, top, testK, seed)
				g := gradients{seed: seed, limit: 1 << 20}
				var jobs []*Job
				for _, spec := range randomJobs(r, g, 2) {
					spec.Timeout = timeout
					j, err := Setup(n, spec)
					if err != nil {
						t.Fatal(err)
					}
					jobs = append(jobs, j)
				}
				runJobs(t, s, jobs, sim.Second)
				if imp == 0 {
					return
				}
				var retx uint64
				for _, j := range jobs {
					for _, st := range j.Streams {
						retx += st.Stats.Retransmits
					}
					for _, rg := range j.Rings {
						retx += rg.Stats.Retransmits
					}
				}
				if retx == 0 {
					t.Error("no retransmission under impairments: the test does not exercise recovery")
				}
			})
		}
	}
}

// TestExactnessLargeJobs covers the extremes: 16 workers, tensors of many
// windows, 5% impairments, every mode.
func TestExactnessLargeJobs(t *testing.T) {
	for _, m := range []struct {
		name   string
		mode   Mode
		shared bool
	}{{"pool", ModeINA, false}, {"shared", ModeINA, true}, {"ps", ModePS, false}, {"ring", ModeRing, false}} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			top := starTopo(t, netParams{hosts: 17, delay: time.Microsecond, aggregators: 64, loss: 0.05, dup: 0.05, reorder: 0.05})
			s, n := newNet(t, top, testK, 3)
			g := gradients{seed: 11, limit: 1 << 24}
			const size = 4000
			j, err := Setup(n, JobSpec{ID: 1, Mode: m.mode, Shared: m.shared, Hosts: hostNames(1, 16), PSHost: "h17", Switch: "tor",
				Base: 0, Size: 32, Window: 32, K: testK, Elements: size, Iterations: 2, Timeout: 200 * time.Microsecond,
				Fill: g.fill(1), Check: g.check(1, 16, size)})
			if err != nil {
				t.Fatal(err)
			}
			runJobs(t, s, []*Job{j}, sim.Second)
		})
	}
}

// TestOverflowFailsTheAllReduce: a sum that overflows int32 is reported as
// an error by every worker, in every mode, never returned as a tensor.
func TestOverflowFailsTheAllReduce(t *testing.T) {
	for _, m := range []struct {
		name   string
		mode   Mode
		shared bool
	}{{"pool", ModeINA, false}, {"shared", ModeINA, true}, {"ps", ModePS, false}, {"ring", ModeRing, false}} {
		t.Run(m.name, func(t *testing.T) {
			top := starTopo(t, netParams{hosts: 4, delay: time.Microsecond, aggregators: 16})
			s, n := newNet(t, top, testK, 1)
			j, err := Setup(n, JobSpec{ID: 2, Mode: m.mode, Shared: m.shared, Hosts: hostNames(1, 3), PSHost: "h4", Switch: "tor",
				Size: 4, K: testK, Elements: 100, Iterations: 1, Fill: func(w, _ int, t []int32) {
					for i := range t {
						t[i] = 1 << 30
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			s.RunUntil(sim.Second)
			if !j.Done() {
				t.Fatal("job did not finish")
			}
			for i, w := range j.Workers {
				if w.Err == nil {
					t.Errorf("worker %d: no error for an overflowing sum", i)
				}
			}
			if j.Err == nil || !errors.Is(j.Err, ErrOverflow) {
				t.Errorf("job error %v, want ErrOverflow", j.Err)
			}
		})
	}
}

// TestIsolation inspects the switch's registers after several jobs ran in
// separate pools: every written cell belongs to the pool of the binding
// whose generation it carries, and no cell outside the pools was touched.
func TestIsolation(t *testing.T) {
	top := starTopo(t, netParams{hosts: 16, delay: time.Microsecond, aggregators: 96, loss: 0.02, dup: 0.02, reorder: 0.02})
	s, n := newNet(t, top, testK, 5)
	g := gradients{seed: 5, limit: 1000}
	pools := [][2]uint32{{0, 8}, {8, 24}, {40, 16}, {70, 4}}
	var jobs []*Job
	for i, p := range pools {
		hosts := hostNames(1+4*i, 4)
		if i == 1 {
			hosts = hostNames(1, 16) // shares hosts and links with everyone
		}
		j, err := Setup(n, JobSpec{ID: uint16(10 + i), Mode: ModeINA, Hosts: hosts, Switch: "tor", Base: p[0], Size: p[1],
			K: testK, Elements: 3000, Iterations: 3, Timeout: 100 * time.Microsecond, Fill: g.fill(uint16(10 + i)), Check: g.check(uint16(10+i), len(hosts), 3000)})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	runJobs(t, s, jobs, sim.Second)
	cells, err := jobs[0].Controller.ReadCells(context.Background(), 0, 2*96, testK)
	if err != nil {
		t.Fatal(err)
	}
	owner := map[uint32][2]uint32{}
	for _, j := range jobs {
		owner[j.Binding.Gen] = [2]uint32{j.Binding.Base, j.Binding.Base + j.Binding.Size}
	}
	used := map[uint32]int{}
	for c, cl := range cells {
		agg := uint32(c / 2)
		if cl.Gen == 0 {
			if cl.Count != 0 || cl.Bitmap != 0 {
				t.Errorf("cell %d has no generation but count %d bitmap %#x", c, cl.Count, cl.Bitmap)
			}
			continue
		}
		p, ok := owner[cl.Gen]
		if !ok || agg < p[0] || agg >= p[1] {
			t.Errorf("cell %d (aggregator %d) written by generation %d, whose pool is %v", c, agg, cl.Gen, p)
		}
		used[cl.Gen]++
	}
	for _, j := range jobs {
		if want := 2 * int(j.Binding.Size); used[j.Binding.Gen] != want {
			t.Errorf("job %d used %d cells of its %d", j.Spec.ID, used[j.Binding.Gen], want)
		}
		// Losses put workers out of step, so partials wait in the switch.
		if st := j.Stats(); st.HoldTime <= 0 || st.HoldTime > time.Duration(2*j.Binding.Size)*st.Finish {
			t.Errorf("job %d: hold time %v for %d cells over %v", j.Spec.ID, st.HoldTime, 2*j.Binding.Size, st.Finish)
		}
	}
}

// TestSharedPoolCollisions runs four jobs hashed onto one small shared pool
// with 2% impairments: collisions happen, go to the parameter server, and
// every sum is still exact.
func TestSharedPoolCollisions(t *testing.T) {
	top := starTopo(t, netParams{hosts: 17, delay: time.Microsecond, aggregators: 32, loss: 0.02, dup: 0.02, reorder: 0.02})
	s, n := newNet(t, top, testK, 9)
	g := gradients{seed: 9, limit: 1 << 16}
	var jobs []*Job
	for i := range 4 {
		hosts := hostNames(1+4*i, 4)
		j, err := Setup(n, JobSpec{ID: uint16(i), Mode: ModeINA, Shared: true, Hosts: hosts, PSHost: "h17", Switch: "tor",
			Base: 0, Size: 12, Window: 24, K: testK, Elements: 2000, Iterations: 2, Timeout: 100 * time.Microsecond,
			Fill: g.fill(uint16(i)), Check: g.check(uint16(i), 4, 2000)})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	runJobs(t, s, jobs, sim.Second)
	var collisions, aggregated uint64
	for _, j := range jobs {
		c, err := j.Controller.Counters(context.Background(), j.Spec.ID)
		if err != nil {
			t.Fatal(err)
		}
		collisions += c.Collisions
		aggregated += c.Aggregated
		if j.PS.Stats.Merged == 0 {
			t.Errorf("job %d: the parameter server aggregated nothing", j.Spec.ID)
		}
	}
	if collisions == 0 || aggregated == 0 {
		t.Errorf("collisions %d, aggregated in the switch %d: want both", collisions, aggregated)
	}
	for _, j := range jobs {
		st := j.Stats()
		if st.SwitchChunks+st.PSChunks != st.Chunks || st.INAFraction <= 0 || st.INAFraction >= 1 || st.FallbackBytes == 0 {
			t.Errorf("job %d stats %+v: want chunks split between switch and PS", j.Spec.ID, st)
		}
	}
	t.Logf("collisions %d, contributions aggregated in the switch %d", collisions, aggregated)
}

// TestRebindBetweenIterations moves a running job to another pool at
// every iteration boundary, through the P4Runtime protocol, under
// impairments: sums stay exact and old pools are retired.
func TestRebindBetweenIterations(t *testing.T) {
	top := starTopo(t, netParams{hosts: 4, delay: time.Microsecond, aggregators: 64, loss: 0.03, dup: 0.03, reorder: 0.03})
	s, n := newNet(t, top, testK, 2)
	g := gradients{seed: 2, limit: 1000}
	const iters = 6
	j, err := Setup(n, JobSpec{ID: 4, Mode: ModeINA, Hosts: hostNames(1, 4), Switch: "tor", Base: 0, Size: 8,
		K: testK, Elements: 1200, Iterations: iters, Compute: 20 * time.Microsecond, Timeout: 100 * time.Microsecond,
		Fill: g.fill(4), Check: g.check(4, 4, 1200)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	gen := uint32(100)
	rebinds := 0
	// A controller loop, as a scheduler would run it: every 15us, retire
	// drained bindings and move the job to the next pool.
	var tick func()
	tick = func() {
		if j.Done() {
			return
		}
		if pending, err := j.Controller.Retire(ctx, 4); err != nil {
			t.Error(err)
		} else if !pending {
			gen++
			base := uint32(8 * (rebinds%7 + 1))
			if _, err := j.Controller.Rebind(ctx, 4, ina.Binding{Mode: ina.ModePool, Gen: gen, Base: base, Size: 8, Workers: 4, Group: j.Binding.Group}, 0); err != nil {
				t.Error(err)
			}
			rebinds++
		}
		s.At(s.Now()+15*sim.Microsecond, tick)
	}
	s.At(15*sim.Microsecond, tick)
	runJobs(t, s, []*Job{j}, sim.Second)
	if rebinds < 3 {
		t.Errorf("only %d rebinds happened during the run", rebinds)
	}
	t.Logf("%d rebinds over %d iterations", rebinds, iters)
}

// TestExactnessHeavyReordering uses slow links, small windows and heavy
// duplication and reordering, so that copies of a chunk arrive after its
// slot has been reused twice (SwitchML's version bit alone would count them
// into the wrong chunk): the switch must drop them as stale.
func TestExactnessHeavyReordering(t *testing.T) {
	for _, m := range []struct {
		name   string
		mode   Mode
		shared bool
	}{{"pool", ModeINA, false}, {"shared", ModeINA, true}, {"ps", ModePS, false}, {"ring", ModeRing, false}} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			top := starTopo(t, netParams{hosts: 5, rate: units.Gbps, aggregators: 16, loss: 0.02, dup: 0.2, reorder: 0.3})
			s, n := newNet(t, top, testK, 4)
			g := gradients{seed: 4, limit: 1 << 20}
			const size = 600
			j, err := Setup(n, JobSpec{ID: 1, Mode: m.mode, Shared: m.shared, Hosts: hostNames(1, 4), PSHost: "h5", Switch: "tor",
				Base: 0, Size: 2, Window: 2, K: testK, Elements: size, Iterations: 3, Timeout: 30 * time.Microsecond,
				Fill: g.fill(1), Check: g.check(1, 4, size)})
			if err != nil {
				t.Fatal(err)
			}
			runJobs(t, s, []*Job{j}, sim.Second)
			if j.Controller != nil {
				c, _ := j.Controller.Counters(context.Background(), 1)
				t.Logf("switch drops %v", c.Drops)
			}
		})
	}
}

// TestDeterministic: the same seed gives the same run, event for event.
func TestDeterministic(t *testing.T) {
	run := func() (JobStats, uint64) {
		top := starTopo(t, netParams{hosts: 9, delay: time.Microsecond, aggregators: 64, loss: 0.02, dup: 0.02, reorder: 0.02})
		s, n := newNet(t, top, testK, 42)
		g := gradients{seed: 1, limit: 1000}
		j, err := Setup(n, JobSpec{ID: 1, Mode: ModeINA, Shared: true, Hosts: hostNames(1, 8), PSHost: "h9", Switch: "tor",
			Base: 0, Size: 8, Window: 16, K: testK, Elements: 3000, Iterations: 2, Timeout: 50 * time.Microsecond,
			Fill: g.fill(1), Check: g.check(1, 8, 3000)})
		if err != nil {
			t.Fatal(err)
		}
		runJobs(t, s, []*Job{j}, sim.Second)
		return j.Stats(), s.Fired()
	}
	a, ea := run()
	b, eb := run()
	if a != b || ea != eb {
		t.Errorf("two runs with one seed differ:\n%+v (%d events)\n%+v (%d events)", a, ea, b, eb)
	}
}
