package inasched

import (
	"context"
	"fmt"
	"time"

	"github.com/tracebed/tracebed/emulator/p4rt"
)

// Binder carries bindings to the switches: on the INA data plane, a
// P4Runtime write of the job's job-table entry on every switch of its tree
// (see P4RT). A Binder is called from the controller's goroutine only.
type Binder interface {
	// Bind installs or moves j's binding on every switch of its tree
	// (j.Switches(): the same range on each), effective from the job's
	// next all-reduce. workers names the job's worker hosts, in worker-id
	// order (multicast groups, parameter server, racks).
	Bind(ctx context.Context, j Job, b Binding, workers []string) error
	// Unbind removes every binding of j from the switches of its tree.
	Unbind(ctx context.Context, j Job) error
}

// Controller is the control loop between a Scheduler and the switches: it
// admits jobs, asks the scheduler for each job's binding at every
// iteration boundary, writes bindings that changed through the Binder, and
// releases them when jobs finish.
type Controller struct {
	s      Scheduler
	b      Binder
	jobs   map[int]*entry
	writes uint64
}

type entry struct {
	job       Job
	workers   []string
	installed Binding
	bound     bool // installed is on the switch
}

// NewController returns a controller for s; b may be nil (decisions are
// then only returned, as in unit tests of policies).
func NewController(s Scheduler, b Binder) *Controller {
	return &Controller{s: s, b: b, jobs: map[int]*entry{}}
}

// Scheduler returns the controlled scheduler.
func (c *Controller) Scheduler() Scheduler { return c.s }

// Admit registers a job whose workers run on the named hosts.
func (c *Controller) Admit(now time.Duration, j Job, workers []string) {
	c.jobs[j.ID] = &entry{job: j, workers: workers, installed: RingBinding}
	c.s.Admit(now, j)
}

// Begin returns the binding of job id's all-reduce that starts now,
// writing it to the switch first if it changed.
func (c *Controller) Begin(now time.Duration, id int) (Binding, error) {
	e := c.jobs[id]
	if e == nil {
		return RingBinding, fmt.Errorf("controller: job %d was never admitted", id)
	}
	b := c.s.Binding(now, id)
	if b == e.installed && (e.bound || !b.INA()) {
		return b, nil
	}
	if c.b != nil {
		// The same range on every switch of the job's tree.
		var err error
		ctx, cancel := p4rt.CallContext()
		if b.INA() {
			err = c.b.Bind(ctx, e.job, b, e.workers)
		} else if e.bound {
			err = c.b.Unbind(ctx, e.job)
		}
		cancel()
		if err != nil {
			return RingBinding, fmt.Errorf("controller: job %d on %v: %w", id, e.job.Switches(), err)
		}
	}
	c.writes++
	e.installed, e.bound = b, b.INA()
	return b, nil
}

// AllReduceLevel reports whether the scheduler allocates memory per
// all-reduce (an AllReduceScheduler): the substrate then calls Begin when
// a job's all-reduce starts and End when it ends.
func (c *Controller) AllReduceLevel() bool {
	_, ok := c.s.(AllReduceScheduler)
	return ok
}

// AllReduceBinder is the Binder of an AllReduceScheduler's data plane:
// End releases a job's memory on a switch when its all-reduce ends,
// keeping what its next all-reduce reuses (its connections); Unbind
// removes everything when the job leaves.
type AllReduceBinder interface {
	Binder
	End(ctx context.Context, j Job) error
}

// End is the end of job id's all-reduce under an AllReduceScheduler: the
// scheduler frees its memory and the switches release it (through the
// binder's End when it is an AllReduceBinder, else by Unbind), so the
// next all-reduce is bound anew. Under another scheduler it does nothing.
func (c *Controller) End(now time.Duration, id int) error {
	ar, ok := c.s.(AllReduceScheduler)
	e := c.jobs[id]
	if !ok || e == nil {
		return nil
	}
	ar.End(now, id)
	if e.bound && e.installed.INA() && c.b != nil {
		c.writes++
		var err error
		if rb, ok := c.b.(AllReduceBinder); ok {
			err = rb.End(context.Background(), e.job)
		} else {
			err = c.b.Unbind(context.Background(), e.job)
			e.bound = false
		}
		if err != nil {
			return fmt.Errorf("controller: job %d on %v: %w", id, e.job.Switches(), err)
		}
	}
	e.installed = RingBinding
	return nil
}

// Depart releases job id's memory.
func (c *Controller) Depart(now time.Duration, id int) error {
	e := c.jobs[id]
	if e == nil {
		return fmt.Errorf("controller: job %d was never admitted", id)
	}
	delete(c.jobs, id)
	c.s.Depart(now, id)
	if e.bound && c.b != nil {
		c.writes++
		ctx, cancel := p4rt.CallContext()
		defer cancel()
		if err := c.b.Unbind(ctx, e.job); err != nil {
			return fmt.Errorf("controller: job %d on %v: %w", id, e.job.Switches(), err)
		}
	}
	return nil
}

// Priority is the scheduler's priority of a job.
func (c *Controller) Priority(id int) float64 { return c.s.Priority(id) }

// Writes counts binding writes (installs, moves and removals).
func (c *Controller) Writes() uint64 { return c.writes }
