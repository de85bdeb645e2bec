// Package atp is the sharing baseline: ATP-style best-effort aggregation
// over one pool that every job shares.
//
// Every job on a switch may use all of its aggregator memory. A chunk's
// aggregator is chosen by hashing; if another job's chunk holds it, the
// packet is marked as a collision and the chunk is aggregated by the job's
// parameter server in software instead. No memory is reserved, so nothing
// idles during compute phases, but contention — and the fallback traffic
// through the parameter server — grows with the number of jobs
// communicating at once. The collision model is in workloads/training
// (docs/dynaina.md).
//
// A switch without aggregators has nothing to hash to: jobs there use the
// host ring, like every other policy without memory.
package atp

import (
	"time"

	"github.com/tracebed/tracebed/systems/inasched"
)

// Scheduler is the ATP sharing policy.
type Scheduler struct {
	mem  inasched.Memory
	jobs map[int]inasched.Job
}

// New returns an ATP scheduler for the given memory.
func New(mem inasched.Memory, _ int) (inasched.Scheduler, error) {
	return &Scheduler{mem: mem, jobs: map[int]inasched.Job{}}, nil
}

// Name implements inasched.Scheduler.
func (s *Scheduler) Name() string { return "atp" }

// Admit implements inasched.Scheduler.
func (s *Scheduler) Admit(_ time.Duration, j inasched.Job) { s.jobs[j.ID] = j }

// Depart implements inasched.Scheduler.
func (s *Scheduler) Depart(_ time.Duration, id int) { delete(s.jobs, id) }

// Binding implements inasched.Scheduler: the whole memory of the job's
// switches (the smallest of them, for a job aggregating on several),
// shared by hash — unless the estimate says the ring is faster for the
// job (its window through the parameter server is capped by the pool).
func (s *Scheduler) Binding(_ time.Duration, id int) inasched.Binding {
	j, ok := s.jobs[id]
	if !ok || !j.Distributed() {
		return inasched.RingBinding
	}
	size := s.mem[j.Switch]
	for _, sw := range j.Lower {
		size = min(size, s.mem[sw])
	}
	if size <= 0 || !j.SharedUseful(size) {
		return inasched.RingBinding
	}
	return inasched.Binding{Mode: inasched.Shared, Pool: 0, Base: 0, Size: size}
}

// Priority implements inasched.Scheduler; ATP has no priorities.
func (s *Scheduler) Priority(int) float64 { return 0 }

// Register adds the ATP policy to r.
func Register(r *inasched.Registry) error {
	return r.Register(inasched.Policy{Name: "atp", Doc: "one shared pool per switch, aggregators by hash, collisions to a parameter server",
		Params: func() inasched.Params { return &inasched.NoParams{New: New} }})
}
