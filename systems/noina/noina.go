// Package noina is the baseline without in-network aggregation: every job
// all-reduces with the host ring algorithm (each worker sends and receives
// 2(N−1)/N of the gradient per iteration) and no switch memory is used.
package noina

import (
	"time"

	"github.com/tracebed/tracebed/systems/inasched"
)

// Scheduler binds every job to the host ring.
type Scheduler struct{}

// New returns the no-INA policy; it ignores the switch memory.
func New(inasched.Memory, int) (inasched.Scheduler, error) { return Scheduler{}, nil }

// Name implements inasched.Scheduler.
func (Scheduler) Name() string { return "noina" }

// Admit implements inasched.Scheduler.
func (Scheduler) Admit(time.Duration, inasched.Job) {}

// Depart implements inasched.Scheduler.
func (Scheduler) Depart(time.Duration, int) {}

// Binding implements inasched.Scheduler: always the host ring.
func (Scheduler) Binding(time.Duration, int) inasched.Binding { return inasched.RingBinding }

// Priority implements inasched.Scheduler.
func (Scheduler) Priority(int) float64 { return 0 }

// Register adds the no-INA policy to r.
func Register(r *inasched.Registry) error {
	return r.Register(inasched.Policy{Name: "noina", Doc: "host ring all-reduce for every job, no switch memory",
		Params: func() inasched.Params { return &inasched.NoParams{New: New} }})
}
