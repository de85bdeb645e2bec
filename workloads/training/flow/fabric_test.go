package flow

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tracebed/tracebed/workloads/training/fabric"

	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/systems/inasched"
	"github.com/tracebed/tracebed/topologies"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/traces/models"
)

// fabric generates a leaf-spine whose racks' uplinks are oversubscribed
// by oversub (hosts' bandwidth over the rack's uplinks').
func leafSpine(t testing.TB, spines, leaves, perLeaf int, oversub float64, aggregators int) *topologies.Topology {
	t.Helper()
	rate := 100 * units.Gbps
	fab := units.Rate(float64(rate) * float64(perLeaf) / float64(spines) / oversub)
	f, err := topologies.Generate(topologies.Params{Generate: "leafspine", Spines: spines, Leaves: leaves, HostsPerLeaf: perLeaf,
		Rate: rate, FabricRate: fab, Delay: unitsUs(1), Aggregators: aggregators})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build(fmt.Sprintf("ls-%dx%dx%d-%g", spines, leaves, perLeaf, oversub))
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// checker wraps a scheduler and checks every binding it makes against the
// job's estimate: no job is put on INA where the ring is faster for it.
type checker struct {
	inasched.Scheduler
	t    *testing.T
	jobs map[int]inasched.Job
	ina  *int
}

func (c *checker) Admit(now time.Duration, j inasched.Job) {
	c.jobs[j.ID] = j
	c.Scheduler.Admit(now, j)
}

func (c *checker) Binding(now time.Duration, id int) inasched.Binding {
	b := c.Scheduler.Binding(now, id)
	j := c.jobs[id]
	if !b.INA() {
		return b
	}
	*c.ina++
	var t time.Duration
	switch b.Mode {
	case inasched.Pool:
		t = j.INATime(b.Size)
	case inasched.Shared:
		t = j.SharedTime(b.Size)
	}
	if t > j.CommRing {
		c.t.Errorf("%s put job %d (%d workers on %v) on %v: INA %v, ring %v", c.Name(), id, j.Workers, j.Switches(), b, t, j.CommRing)
	}
	return b
}

// TestNoPolicyPicksASlowerINA is the property of docs/dynaina.md
// ("Estimates from the topology"): over generated leaf-spines with
// oversubscribed uplinks, memory sizes and random traces whose jobs span
// racks, no policy binds a job to switch memory where the host ring would
// be faster for it by the estimate.
func TestNoPolicyPicksASlowerINA(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 1))
	for i := range 12 {
		spines, leaves, perLeaf := 1+r.IntN(4), 2+r.IntN(3), 2+r.IntN(7)
		oversub := []float64{1, 2, 4, 8}[r.IntN(4)]
		aggs := []int{64, 256, 1024, 4096}[r.IntN(4)]
		top := leafSpine(t, spines, leaves, perLeaf, oversub, aggs)
		trace := randomTrace(uint64(i+1), 10, min(32, leaves*perLeaf))
		for _, pol := range policyNames {
			t.Run(fmt.Sprintf("%s/%d/%s", top.Name, aggs, pol), func(t *testing.T) {
				var ina int
				f := func(mem inasched.Memory, slot int) (inasched.Scheduler, error) {
					s, err := policies()[pol](mem, slot)
					return &checker{Scheduler: s, t: t, jobs: map[int]inasched.Job{}, ina: &ina}, err
				}
				simulate(t, Setup{Top: top, Net: fabric.DefaultNet, Jobs: trace, Policy: f, Seed: uint64(i)})
				t.Logf("%d INA bindings", ina)
			})
		}
	}
}

// TestEstimateMatchesModel runs one job alone, with no jitter, across
// racks of leaf-spines at 1:1, 2:1 and 4:1 oversubscription, on the ring
// and in a pool at its line-rate window: the all-reduce times the model
// gives are the estimate's (CommRing, CommINA). With two-level aggregation
// a rack's workers send one stream up; aggregated at the spine alone (no
// memory in the ToRs) they share their uplink.
func TestEstimateMatchesModel(t *testing.T) {
	prof := models.Profile{Name: "m", GradientBytes: 64 << 20, Compute: 20 * time.Millisecond}
	for _, oversub := range []float64{1, 2, 4} {
		for _, torMemory := range []bool{true, false} {
			top := leafSpine(t, 2, 2, 4, oversub, 4096)
			if !torMemory {
				for _, sw := range top.Switches() {
					if sw.Name != "spine1" && sw.Name != "spine2" {
						sw.Aggregators = 0
					}
				}
			}
			t.Run(fmt.Sprintf("%g:1/tor-memory=%v", oversub, torMemory), func(t *testing.T) {
				net := fabric.DefaultNet
				net.Jitter = 0
				trace := []jobtrace.Job{{ID: 1, Model: "m", Workers: 8, Iterations: 4}}
				var est inasched.Job
				spy := func(f inasched.Factory) inasched.Factory {
					return func(mem inasched.Memory, slot int) (inasched.Scheduler, error) {
						s, err := f(mem, slot)
						return &spyOn{Scheduler: s, job: &est}, err
					}
				}
				ring := simulate(t, Setup{Top: top, Net: net, Jobs: trace, Policy: spy(policies()["noina"]), Lookup: custom(prof)})
				pool := simulate(t, Setup{Top: top, Net: net, Jobs: trace, Policy: spy(policies()["dynaina"]), Lookup: custom(prof)})
				per := func(o *Outcome) time.Duration {
					return fabric.Secs(o.Jobs[0].JCT()/4 - prof.Compute.Seconds())
				}
				t.Logf("two-level %v: ring %v (estimate %v), INA %v (estimate %v); window %d, useful %d",
					len(est.Lower) > 0, per(ring), est.CommRing, per(pool), est.INATime(est.Demand), est.Demand, est.Useful)
				if got := per(ring); !nearDur(got, est.CommRing, 0.01) {
					t.Errorf("ring all-reduce %v, estimate %v", got, est.CommRing)
				}
				if torMemory != (len(est.Lower) == 2) {
					t.Errorf("tree lower %v with ToR memory %v", est.Lower, torMemory)
				}
				if est.Useful > est.Demand {
					if pool.INAFraction != 0 {
						t.Errorf("INA slower than the ring, yet %.2f of the bytes aggregated in switches", pool.INAFraction)
					}
					return
				}
				if got := per(pool); !nearDur(got, est.CommINA, 0.01) {
					t.Errorf("INA all-reduce %v, estimate %v", got, est.CommINA)
				}
			})
		}
	}
}

type spyOn struct {
	inasched.Scheduler
	job *inasched.Job
}

func (s *spyOn) Admit(now time.Duration, j inasched.Job) {
	*s.job = j
	s.Scheduler.Admit(now, j)
}

func nearDur(a, b time.Duration, rel float64) bool { return near(a.Seconds(), b.Seconds(), rel) }

// TestATPCollisions checks the two collision models of shared mode: with
// a hash per chunk a chunk collides with the share of the pool other jobs
// hold; with ATP's remapping of collided slots only the windows' excess
// over the pool keeps colliding.
func TestATPCollisions(t *testing.T) {
	tests := []struct {
		mode             string
		total, own, size float64
		want             float64
	}{
		{fabric.CollideHash, 300, 100, 1000, 0.2},
		{fabric.CollideHash, 3000, 100, 1000, 1},
		{fabric.CollideRemap, 300, 100, 1000, 0},
		{fabric.CollideRemap, 1000, 500, 1000, 0},
		{fabric.CollideRemap, 4000, 1000, 1000, 0.75},
	}
	for _, tt := range tests {
		e := &engine{s: Setup{Net: fabric.Net{ATPCollisions: tt.mode}}}
		if got := e.collide(tt.total, tt.own, tt.size); !near(got, tt.want, 1e-12) && got != tt.want {
			t.Errorf("%s: collide(%v, %v, %v) = %v, want %v", tt.mode, tt.total, tt.own, tt.size, got, tt.want)
		}
	}
}
