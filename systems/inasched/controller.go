package inasched

import (
	"context"
	"fmt"
	"time"

	"github.com/tracebed/tracebed/emulator/p4rt"
)

// Call is the control-plane part of a Binder's work: the P4Runtime
// requests that carry out what the binder planned when it returned the
// call. The planning — switch job ids, generations, what the binder
// remembers of each switch — is done by then, on the controller's
// goroutine; the call touches only the switches' clients and the values it
// captured, so it may run later and elsewhere (on a goroutine of an
// agent's substrate, emulator.Caller) while the controller goes on. The
// calls of one binder must run in the order they were returned. A nil
// Call has nothing to do. A call that fails leaves the binder's
// bookkeeping ahead of the switches: the run it belongs to fails.
type Call func(ctx context.Context) error

// Run runs call with ctx, if there is one: how a caller that may block (a
// test, a driver, a model without agents) carries out what a Binder
// returned.
func Run(ctx context.Context, call Call) error {
	if call == nil {
		return nil
	}
	return call(ctx)
}

// Binder carries bindings to the switches: on the INA data plane, a
// P4Runtime write of the job's job-table entry on every switch of its tree
// (see P4RT). Its methods plan at once and return the Call that programs
// the switches; they are called from the controller's goroutine only.
type Binder interface {
	// BindCall installs or moves j's binding on every switch of its tree
	// (j.Switches(): the same range on each), effective from the job's
	// next all-reduce. workers names the job's worker hosts, in worker-id
	// order (multicast groups, parameter server, racks).
	BindCall(j Job, b Binding, workers []string) (Call, error)
	// UnbindCall removes every binding of j from the switches of its tree.
	UnbindCall(j Job) (Call, error)
}

// Exec carries out a Controller's calls, in the order the controller
// makes them. The default runs each at once, on the controller's
// goroutine, and returns its error (the flow model, whose switches are in
// process). A controller that runs as an agent must not block: its Exec
// hands each call to its substrate (PortExec) and returns nil, and a
// failed call's error reaches the agent later, as an event.
type Exec func(call Call) error

// PortExec is the Exec of a controller that runs as an agent: every call
// goes through the agent's control-plane port (p4rt.Port, over its Env),
// and the error of one that fails goes to fail, on the agent's goroutine.
// The agent acts on a decision — tells a job's workers to send — once the
// calls made for it have completed (p4rt.Port.Then).
func PortExec(port *p4rt.Port, fail func(error)) Exec {
	return func(call Call) error {
		port.Call(call, func(err error) {
			if err != nil {
				fail(err)
			}
		})
		return nil
	}
}

// Controller is the control loop between a Scheduler and the switches: it
// admits jobs, asks the scheduler for each job's binding at every
// iteration boundary, writes bindings that changed through the Binder, and
// releases them when jobs finish. Its decisions take effect in its own
// state at once; the switches follow through the calls it hands to its
// Exec.
type Controller struct {
	s      Scheduler
	b      Binder
	exec   Exec
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
// then only returned, as in unit tests of policies). Its calls run at
// once until SetExec says otherwise.
func NewController(s Scheduler, b Binder) *Controller {
	return &Controller{s: s, b: b, jobs: map[int]*entry{}, exec: func(call Call) error { return call(context.Background()) }}
}

// SetExec makes e carry out the controller's calls from now on.
func (c *Controller) SetExec(e Exec) { c.exec = e }

// do hands a call the binder returned (or its error) to the Exec; errors
// name the job and its switches.
func (c *Controller) do(e *entry, call Call, err error) error {
	id, sws := e.job.ID, e.job.Switches()
	if err != nil {
		return fmt.Errorf("controller: job %d on %v: %w", id, sws, err)
	}
	if call == nil {
		return nil
	}
	return c.exec(func(ctx context.Context) error {
		if err := call(ctx); err != nil {
			return fmt.Errorf("controller: job %d on %v: %w", id, sws, err)
		}
		return nil
	})
}

// Scheduler returns the controlled scheduler.
func (c *Controller) Scheduler() Scheduler { return c.s }

// Admit registers a job whose workers run on the named hosts.
func (c *Controller) Admit(now time.Duration, j Job, workers []string) {
	c.jobs[j.ID] = &entry{job: j, workers: workers, installed: RingBinding}
	c.s.Admit(now, j)
}

// Begin returns the binding of job id's all-reduce that starts now,
// handing its write to the Exec first if it changed (with the default
// Exec, the switches hold it when Begin returns).
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
		var call Call
		var err error
		if b.INA() {
			call, err = c.b.BindCall(e.job, b, e.workers)
		} else if e.bound {
			call, err = c.b.UnbindCall(e.job)
		}
		if err := c.do(e, call, err); err != nil {
			return RingBinding, err
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
// EndCall releases a job's memory on a switch when its all-reduce ends,
// keeping what its next all-reduce reuses (its connections); UnbindCall
// removes everything when the job leaves.
type AllReduceBinder interface {
	Binder
	EndCall(j Job) (Call, error)
}

// End is the end of job id's all-reduce under an AllReduceScheduler: the
// scheduler frees its memory and the switches release it (through the
// binder's EndCall when it is an AllReduceBinder, else by UnbindCall), so the
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
		var call Call
		var err error
		if rb, ok := c.b.(AllReduceBinder); ok {
			call, err = rb.EndCall(e.job)
		} else {
			call, err = c.b.UnbindCall(e.job)
			e.bound = false
		}
		if err := c.do(e, call, err); err != nil {
			return err
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
		call, err := c.b.UnbindCall(e.job)
		if err := c.do(e, call, err); err != nil {
			return err
		}
	}
	return nil
}

// Priority is the scheduler's priority of a job.
func (c *Controller) Priority(id int) float64 { return c.s.Priority(id) }

// Writes counts binding writes (installs, moves and removals).
func (c *Controller) Writes() uint64 { return c.writes }
