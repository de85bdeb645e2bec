// Package mine is the INA policy of lab 3 (labs/3-your-own-policy): the one
// file a student changes to try a scheduling idea and compare it with
// DynaINA, SwitchML and no INA on the same jobs. As shipped it is a simple
// policy between SwitchML and DynaINA — first come, first served: a job that
// starts gets a range of aggregators of its line-rate demand if that much
// is free (or all that is free, if that still beats the host ring), keeps
// it until it finishes, and gives it back then to the jobs waiting, in the
// order they started. Pools are never shared or resized, and no job has
// priority.
//
// A policy is an inasched.Scheduler: the substrate calls Admit when a job
// starts, Binding at each of its iteration boundaries (the job moves to the
// binding returned, at once) and Depart when it finishes. See
// systems/inasched for what a Job carries (its demand, the fewest
// aggregators that beat the ring, its compute and communication times) and
// systems/dynaina for a policy that shares pools and ranks jobs.
package mine

import (
	"slices"
	"time"

	"github.com/tracebed/tracebed/systems/inasched"
)

// Name is the policy's name in specs.
const Name = "mine"

// Register adds the policy to r (workloads/training lists it with the
// others).
func Register(r *inasched.Registry) error {
	return r.Register(inasched.Policy{Name: Name, Doc: "lab 3's policy: first come, first served pools of a job's demand, never shared",
		Params: func() inasched.Params { return &inasched.NoParams{New: New} }})
}

// Scheduler is the policy's state.
type Scheduler struct {
	// free[sw][a] reports whether aggregator a of switch sw is free.
	free    map[string][]bool
	slot    int // aggregators per window slot: ranges are multiples of it
	jobs    map[int]*job
	waiting []int // ids of jobs without memory that could use some, in start order
	pools   int   // pool ids handed out so far
}

type job struct {
	j       inasched.Job
	binding inasched.Binding
}

// New returns the policy for switches with the given memory.
func New(mem inasched.Memory, slotAggregators int) (inasched.Scheduler, error) {
	s := &Scheduler{free: map[string][]bool{}, slot: max(slotAggregators, 1), jobs: map[int]*job{}}
	for sw, n := range mem {
		s.free[sw] = slices.Repeat([]bool{true}, n)
	}
	return s, nil
}

// Name implements inasched.Scheduler.
func (s *Scheduler) Name() string { return Name }

// Admit implements inasched.Scheduler: the job gets memory now if it can,
// or waits for it.
func (s *Scheduler) Admit(_ time.Duration, j inasched.Job) {
	js := &job{j: j, binding: inasched.RingBinding}
	s.jobs[j.ID] = js
	if !j.Distributed() || len(s.free[j.Switch]) == 0 || !j.PoolUseful(len(s.free[j.Switch])) {
		return // the switch could never beat the host ring for this job
	}
	if !s.place(js) {
		s.waiting = append(s.waiting, j.ID)
	}
}

// Depart implements inasched.Scheduler: the job's memory goes back, and to
// the jobs waiting, in start order.
func (s *Scheduler) Depart(_ time.Duration, id int) {
	js := s.jobs[id]
	if js == nil {
		return
	}
	delete(s.jobs, id)
	s.waiting = slices.DeleteFunc(s.waiting, func(w int) bool { return w == id })
	if b := js.binding; b.INA() {
		for _, sw := range js.j.Switches() {
			for a := b.Base; a < b.Base+b.Size; a++ {
				s.free[sw][a] = true
			}
		}
	}
	// Each waiting job, oldest first, takes what it can; those placed
	// leave the queue.
	s.waiting = slices.DeleteFunc(s.waiting, func(w int) bool { return s.place(s.jobs[w]) })
}

// place gives js the largest free range, up to its demand, that is free on
// every switch of its tree and still beats the host ring. It reports
// whether it did.
func (s *Scheduler) place(js *job) bool {
	want := roundUp(max(js.j.Demand, 1), s.slot)
	base, size := s.largestFree(js.j, want)
	if size == 0 || !js.j.PoolUseful(size) {
		return false
	}
	for _, sw := range js.j.Switches() {
		for a := base; a < base+size; a++ {
			s.free[sw][a] = false
		}
	}
	js.binding = inasched.Binding{Mode: inasched.Pool, Pool: s.pools, Base: base, Size: size}
	s.pools++
	return true
}

// largestFree returns the first free range of want aggregators on every
// switch of j, or else the largest one (whole window slots).
func (s *Scheduler) largestFree(j inasched.Job, want int) (base, size int) {
	n := len(s.free[j.Switch])
	for _, sw := range j.Switches() {
		n = min(n, len(s.free[sw]))
	}
	freeAt := func(a int) bool {
		for _, sw := range j.Switches() {
			if !s.free[sw][a] {
				return false
			}
		}
		return true
	}
	for a := 0; a < n; {
		if !freeAt(a) {
			a++
			continue
		}
		b := a
		for b < n && b-a < want && freeAt(b) {
			b++
		}
		if l := (b - a) - (b-a)%s.slot; l > size {
			base, size = a, l
		}
		if size == want {
			return base, size
		}
		a = b
	}
	return base, size
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

// Binding implements inasched.Scheduler.
func (s *Scheduler) Binding(_ time.Duration, id int) inasched.Binding {
	if js := s.jobs[id]; js != nil {
		return js.binding
	}
	return inasched.RingBinding
}

// Priority implements inasched.Scheduler: pools are never shared, so no job
// waits for another's.
func (s *Scheduler) Priority(int) float64 { return 0 }
