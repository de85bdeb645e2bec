// Package dynaina is tracebed's implementation of DynaINA, a multi-tenant
// job scheduler for in-network aggregation (seed 000 of ../shared/seeds;
// DESIGN.md §5). Only the paper's abstract is at hand; every mechanism below
// beyond its three ideas is our interpretation, documented with its reasons
// in docs/dynaina.md.
//
//  1. Spatial compatibility: switch memory is organised in dynamic pools.
//     A job only ever touches its own pool, so jobs in different pools
//     never collide. The controller re-plans the pools — their number,
//     membership and sizes — whenever a job starts or finishes.
//  2. Temporal compatibility: when memory runs short, a job may join an
//     existing pool whose members' communication phases are predicted to
//     rarely overlap with its own. The prediction uses each job's period T
//     and communication fraction φ (see Overlap). Members of a pool take
//     turns: when phases do collide, the pool serves them one after the
//     other (by priority) instead of letting them thrash.
//  3. Priority: jobs are ranked by communication intensity (gradient bytes
//     per second of compute). Higher-ranked jobs are planned first, so they
//     get their own pools, and full-size ones, before lower-ranked jobs
//     share or shrink.
//
// Plans take effect at each job's next iteration boundary: a job finishes
// the all-reduce in flight on its old pool and starts the next one on the
// new, so no in-flight aggregation is lost.
package dynaina

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tracebed/tracebed/systems/inasched"
)

// Params are DynaINA's tunables (docs/dynaina.md explains each).
type Params struct {
	// MaxOverlap bounds the predicted slowdown — the fraction of an
	// iteration a member spends waiting for its turn — that packing a job
	// into a shared pool may cause to any member, the newcomer included.
	MaxOverlap float64 `yaml:"max_overlap"`
	// MaxPoolLoad bounds the sum of the communication fractions of a
	// shared pool's members: above 1 the pool could not serve them all
	// even with perfect interleaving.
	MaxPoolLoad float64 `yaml:"max_pool_load"`
	// Share enables temporal sharing (packing jobs into shared pools).
	// Without it DynaINA only isolates (an ablation).
	Share bool `yaml:"share"`
	// Priority is "intensity" (rank by communication intensity, gradient
	// bytes per second of compute: the paper's rule as DESIGN.md §5
	// states it), "benefit" (rank by the all-reduce time INA saves per
	// second of compute, which also weighs how much faster INA is than the
	// ring for the job's worker count: nothing for 2 workers) or "arrival"
	// (first come first served; an ablation).
	Priority string `yaml:"priority"`
}

// Priorities DynaINA can rank jobs by.
var Priorities = []string{"intensity", "benefit", "arrival"}

// DefaultParams are the values the experiments use unless a spec sets
// others.
var DefaultParams = Params{MaxOverlap: 0.1, MaxPoolLoad: 0.9, Share: true, Priority: "benefit"}

// Check validates p; errors name the field (inasched.ParamError).
func (p *Params) Check() error {
	switch {
	case !(p.MaxOverlap >= 0 && p.MaxOverlap <= 1):
		return inasched.ParamErrorf("max_overlap", "%v: want 0 to 1", p.MaxOverlap)
	case !(p.MaxPoolLoad > 0 && p.MaxPoolLoad <= 1):
		return inasched.ParamErrorf("max_pool_load", "%v: want more than 0, at most 1", p.MaxPoolLoad)
	case !slices.Contains(Priorities, p.Priority):
		return inasched.ParamErrorf("priority", "%q: want %s", p.Priority, strings.Join(Priorities, ", "))
	}
	return nil
}

// Factory implements inasched.Params.
func (p *Params) Factory(inasched.Network) (inasched.Factory, error) { return Factory(*p), nil }

// Register adds DynaINA to r.
func Register(r *inasched.Registry) error {
	return r.Register(inasched.Policy{Name: "dynaina", Doc: "dynamic memory pools, contention-aware sharing, priority for communication-intensive jobs",
		Params: func() inasched.Params { p := DefaultParams; return &p }})
}

// Scheduler is the DynaINA policy.
type Scheduler struct {
	p    Params
	mem  inasched.Memory
	slot int
	jobs map[int]inasched.Job
	plan map[int]inasched.Binding // current plan, by job
	// Replans counts plan computations; Shared counts, over all plans,
	// the jobs placed in a pool with other members.
	Replans, Shared int
	nextPool        int
}

// New returns a DynaINA scheduler.
func New(p Params, mem inasched.Memory, slotAggregators int) (*Scheduler, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("dynaina: %w", err)
	}
	return &Scheduler{p: p, mem: mem, slot: max(1, slotAggregators), jobs: map[int]inasched.Job{}, plan: map[int]inasched.Binding{}}, nil
}

// Factory returns an inasched.Factory for params p.
func Factory(p Params) inasched.Factory {
	return func(mem inasched.Memory, slot int) (inasched.Scheduler, error) { return New(p, mem, slot) }
}

// Name implements inasched.Scheduler.
func (s *Scheduler) Name() string { return "dynaina" }

// Admit implements inasched.Scheduler: re-plan the job's switch.
func (s *Scheduler) Admit(_ time.Duration, j inasched.Job) {
	s.jobs[j.ID] = j
	s.replan(j.Switch)
}

// Depart implements inasched.Scheduler: re-plan without the job.
func (s *Scheduler) Depart(_ time.Duration, id int) {
	j, ok := s.jobs[id]
	if !ok {
		return
	}
	delete(s.jobs, id)
	delete(s.plan, id)
	s.replan(j.Switch)
}

// Binding implements inasched.Scheduler.
func (s *Scheduler) Binding(_ time.Duration, id int) inasched.Binding {
	if b, ok := s.plan[id]; ok {
		return b
	}
	return inasched.RingBinding
}

// Priority implements inasched.Scheduler: communication intensity, INA's
// benefit, or earlier arrival, as Params.Priority says.
func (s *Scheduler) Priority(id int) float64 {
	j := s.jobs[id]
	switch s.p.Priority {
	case "arrival":
		return -j.Arrival.Seconds()
	case "benefit":
		return Benefit(j)
	}
	return j.Intensity()
}

// Benefit is the all-reduce time INA saves a job per second of compute:
// (ring time − INA time) ÷ compute time, at full INA rate.
func Benefit(j inasched.Job) float64 {
	saved := (j.CommRing - j.CommINA).Seconds()
	if j.Compute <= 0 {
		return saved * 1e9
	}
	return saved / j.Compute.Seconds()
}

// Overlap is the predicted slowdown of job a from sharing a pool of size
// aggregators with job b: the fraction of a's iteration spent waiting for
// b's communication phase. If the two jobs' phases are independent (their
// periods are incommensurate), a's all-reduce finds b communicating with
// probability φ_b, and then waits on average half of b's phase, c_b/2; per
// iteration of length T_a that is φ_b·c_b / (2·T_a).
func Overlap(a, b inasched.Job, size int) float64 {
	ta, _, _ := phases(a, size)
	_, cb, phib := phases(b, size)
	if ta <= 0 {
		return 0
	}
	return phib * cb / (2 * ta)
}

// phases returns a job's period, communication time and communication
// fraction when it aggregates over size aggregators: below its demand the
// window shrinks and the all-reduce slows proportionally.
func phases(j inasched.Job, size int) (period, comm, frac float64) {
	comm = j.CommINA.Seconds()
	if size < j.Demand && size > 0 {
		comm *= float64(j.Demand) / float64(size)
	}
	period = j.Compute.Seconds() + comm
	if period > 0 {
		frac = comm / period
	}
	return period, comm, frac
}

type pool struct {
	id       int
	members  []inasched.Job
	switches []string // every member aggregates on exactly these
	size     int
	wait     []float64 // predicted slowdown of each member
	load     float64   // sum of the members' communication fractions
}

// component returns the running jobs whose switches connect, through
// jobs' trees, to sw: the jobs one plan must place together, since a job
// holds the same range on each of its switches.
func (s *Scheduler) component(sw string) []inasched.Job {
	in := map[string]bool{sw: true}
	var jobs []inasched.Job
	taken := map[int]bool{}
	for grew := true; grew; {
		grew = false
		for _, j := range s.jobs {
			if taken[j.ID] {
				continue
			}
			hit := false
			for _, x := range j.Switches() {
				if in[x] {
					hit = true
					break
				}
			}
			if !hit {
				continue
			}
			taken[j.ID] = true
			jobs = append(jobs, j)
			for _, x := range j.Switches() {
				if !in[x] {
					in[x], grew = true, true
				}
			}
		}
	}
	return jobs
}

// replan recomputes the pools of the switches connected to sw.
func (s *Scheduler) replan(sw string) {
	s.Replans++
	var jobs []inasched.Job
	for _, j := range s.component(sw) {
		delete(s.plan, j.ID)
		// A job for which INA is no faster than the ring even at its
		// line-rate window never gets memory (the estimate's Useful).
		if j.Distributed() && j.Useful <= j.Demand {
			jobs = append(jobs, j)
		}
	}
	slices.SortFunc(jobs, func(a, b inasched.Job) int {
		if pa, pb := s.Priority(a.ID), s.Priority(b.ID); pa != pb {
			if pa > pb {
				return -1
			}
			return 1
		}
		if a.Arrival != b.Arrival {
			return int(a.Arrival - b.Arrival)
		}
		return a.ID - b.ID
	})
	free := map[string]int{}
	avail := func(sws []string) int {
		m := math.MaxInt
		for _, x := range sws {
			if _, ok := free[x]; !ok {
				free[x] = s.mem[x] - s.mem[x]%s.slot
			}
			m = min(m, free[x])
		}
		return m
	}
	var pools []*pool
	open := func(j inasched.Job, size int) {
		_, _, phi := phases(j, size)
		pools = append(pools, &pool{id: s.nextPool, members: []inasched.Job{j}, switches: j.Switches(), size: size, wait: []float64{0}, load: phi})
		s.nextPool++
		for _, x := range j.Switches() {
			free[x] -= size
		}
	}
	for _, j := range jobs {
		demand := s.round(j.Demand)
		left := avail(j.Switches())
		if demand <= left {
			open(j, demand)
			continue
		}
		if s.p.Share {
			if p, waits := s.bestPool(pools, j); p != nil {
				p.members = append(p.members, j)
				p.wait = waits
				_, _, phi := phases(j, p.size)
				p.load += phi
				continue
			}
		}
		if useful := s.round(j.Useful); left >= useful && left > 0 {
			open(j, left)
		}
		// Otherwise the job uses the host ring until a later plan finds it
		// memory.
	}
	// Spare memory goes to pools below their largest member's demand, in
	// priority order.
	for _, p := range pools {
		want := 0
		for _, m := range p.members {
			want = max(want, s.round(m.Demand))
		}
		if grow := min(avail(p.switches), want-p.size); grow > 0 {
			p.size += grow
			for _, x := range p.switches {
				free[x] -= grow
			}
		}
	}
	// Layout: each pool takes the lowest range free on all its switches,
	// in priority order (on one switch: contiguous). Ranges of pools on
	// several switches may not line up; a pool that finds no room shrinks
	// to the largest common gap if its members still gain from it, and is
	// dropped (its members use the ring) otherwise.
	used := map[string][][2]int{}
	for _, p := range pools {
		base, size := s.fit(used, p)
		if size == 0 {
			continue
		}
		for _, x := range p.switches {
			used[x] = append(used[x], [2]int{base, base + size})
		}
		for _, m := range p.members {
			s.plan[m.ID] = inasched.Binding{Mode: inasched.Pool, Pool: p.id, Base: base, Size: size}
		}
		if len(p.members) > 1 {
			s.Shared += len(p.members)
		}
	}
}

// fit returns the lowest base where p's size is free on all its
// switches, or the largest common gap if it is at least every member's
// Useful size; size 0: no room.
func (s *Scheduler) fit(used map[string][][2]int, p *pool) (base, size int) {
	limit := math.MaxInt
	var taken [][2]int
	for _, x := range p.switches {
		limit = min(limit, s.mem[x]-s.mem[x]%s.slot)
		taken = append(taken, used[x]...)
	}
	slices.SortFunc(taken, func(a, b [2]int) int { return a[0] - b[0] })
	bestBase, bestGap := 0, 0
	at := 0
	for _, t := range append(taken, [2]int{limit, limit}) {
		if gap := min(t[0], limit) - at; gap > 0 {
			if gap >= p.size {
				return at, p.size
			}
			if gap > bestGap {
				bestBase, bestGap = at, gap
			}
		}
		at = max(at, t[1])
	}
	need := 0
	for _, m := range p.members {
		need = max(need, s.round(m.Useful))
	}
	if bestGap >= need && bestGap > 0 {
		return bestBase, bestGap - bestGap%s.slot
	}
	return 0, 0
}

// bestPool returns the pool where j costs least to add, if any is
// acceptable, and the members' predicted slowdowns with j added (j's last).
// The cost of joining is j's predicted wait plus the waits j adds to the
// members; joining must cost less than what INA saves j over the host ring,
// and keep every member within MaxOverlap and the pool within MaxPoolLoad.
func (s *Scheduler) bestPool(pools []*pool, j inasched.Job) (*pool, []float64) {
	var (
		best      *pool
		bestWaits []float64
		bestCost  = math.Inf(1)
	)
	for _, p := range pools {
		if p.size < s.round(j.Useful) || !slices.Equal(p.switches, j.Switches()) {
			continue
		}
		period, comm, phi := phases(j, p.size)
		if p.load+phi > s.p.MaxPoolLoad {
			continue
		}
		waits := make([]float64, 0, len(p.members)+1)
		var own, added float64
		ok := true
		for i, m := range p.members {
			add := Overlap(m, j, p.size)
			if p.wait[i]+add > s.p.MaxOverlap {
				ok = false
				break
			}
			waits = append(waits, p.wait[i]+add)
			added += add
			own += Overlap(j, m, p.size)
		}
		if !ok || own > s.p.MaxOverlap {
			continue
		}
		gain := 0.0 // what INA over this pool saves j per iteration, as a fraction
		if period > 0 {
			gain = (j.CommRing.Seconds() - comm) / period
		}
		cost := own + added
		if cost >= gain || cost >= bestCost {
			continue
		}
		best, bestCost, bestWaits = p, cost, append(waits, own)
	}
	return best, bestWaits
}

// round rounds aggregators up to whole window slots.
func (s *Scheduler) round(n int) int {
	if r := n % s.slot; r != 0 {
		n += s.slot - r
	}
	return n
}
