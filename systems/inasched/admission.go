package inasched

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Admission is the controller's admission of jobs to switch memory at
// their iteration boundaries: one state machine, driven by the flow-level
// model and by the packet-level controller alike (workloads/training).
//
// At a job's iteration boundary (Begin) the controller asks the policy for
// the job's binding. A pool-mode job then requests its range: it is
// granted at once if no other job holds an overlapping range on a switch
// they share, and waits otherwise; it holds the range until its
// all-reduce ends (End), when the waiters whose ranges are free are
// granted, by priority, then by the time they asked, then by job id. When
// a job starts or finishes (Admit, Depart) the policy may re-plan: every
// job still waiting on the switches concerned gets the new plan's binding
// and, if it changed, requests again or proceeds without a turn.
//
// T is the substrate's clock type (seconds as float64 in the flow model,
// time.Duration at packet level); it orders waiters that asked at
// different times. Admission never reads a clock.
type Admission[T cmp.Ordered] struct {
	ctl  *Controller
	jobs map[int]*ticket[T]
}

type ticket[T cmp.Ordered] struct {
	job     Job
	b       Binding
	holder  bool // holds its pool range
	waiting bool // queued for it
	asked   T
}

// Verdict is what a job may do with its binding.
type Verdict int

// Verdicts of an Action.
const (
	// Grant: the job holds its pool range and all-reduces now.
	Grant Verdict = iota
	// Wait: another job holds an overlapping range; a later Action
	// grants or rebinds this one.
	Wait
	// Proceed: the binding needs no turn (ring or shared mode); the job
	// all-reduces now.
	Proceed
)

func (v Verdict) String() string {
	switch v {
	case Grant:
		return "grant"
	case Wait:
		return "wait"
	case Proceed:
		return "proceed"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Action tells the substrate what a job does next.
type Action struct {
	Job     int
	Verdict Verdict
	Binding Binding
	// Handoff is set on a grant to a job that waited: the pool changed
	// hands (the substrate may charge the controller's message).
	Handoff bool
}

func (a Action) String() string {
	s := fmt.Sprintf("%s %d %v", a.Verdict, a.Job, a.Binding)
	if a.Handoff {
		s += " handoff"
	}
	return s
}

// NewAdmission returns the admission state machine over a controller.
func NewAdmission[T cmp.Ordered](ctl *Controller) *Admission[T] {
	return &Admission[T]{ctl: ctl, jobs: map[int]*ticket[T]{}}
}

// Controller returns the controller the admission drives.
func (a *Admission[T]) Controller() *Controller { return a.ctl }

// Admit registers a job that starts now and lets the policy re-plan; it
// returns what happens to jobs that were waiting on the job's switches.
func (a *Admission[T]) Admit(now time.Duration, at T, j Job, workers []string) ([]Action, error) {
	a.jobs[j.ID] = &ticket[T]{job: j, b: RingBinding}
	a.ctl.Admit(now, j, workers)
	return a.rebindWaiters(now, at, j)
}

// Begin is job id's iteration boundary: its binding for the all-reduce
// that starts now, and whether it may start (Grant, Proceed) or waits.
func (a *Admission[T]) Begin(now time.Duration, at T, id int) (Action, error) {
	t := a.jobs[id]
	if t == nil {
		return Action{}, fmt.Errorf("admission: job %d was never admitted", id)
	}
	b, err := a.ctl.Begin(now, id)
	if err != nil {
		return Action{}, err
	}
	t.b = b
	return a.request(t, at), nil
}

// request queues t for its binding's range, or grants it at once.
func (a *Admission[T]) request(t *ticket[T], at T) Action {
	if t.b.Mode != Pool || !t.b.INA() {
		t.waiting = false
		return Action{Job: t.job.ID, Verdict: Proceed, Binding: t.b}
	}
	t.asked = at
	if a.rangeFree(t) {
		t.holder, t.waiting = true, false
		return Action{Job: t.job.ID, Verdict: Grant, Binding: t.b}
	}
	t.waiting = true
	return Action{Job: t.job.ID, Verdict: Wait, Binding: t.b}
}

// shareSwitch reports whether two jobs aggregate on a common switch.
func shareSwitch(a, b Job) bool {
	if a.Switch == b.Switch || slices.Contains(b.Lower, a.Switch) {
		return true
	}
	for _, s := range a.Lower {
		if s == b.Switch || slices.Contains(b.Lower, s) {
			return true
		}
	}
	return false
}

// rangeFree reports whether no other job holds a range overlapping t's on
// a switch they share.
func (a *Admission[T]) rangeFree(t *ticket[T]) bool {
	for _, o := range a.jobs {
		if o != t && o.holder && o.b.Overlaps(t.b) && shareSwitch(o.job, t.job) {
			return false
		}
	}
	return true
}

// End is the end of job id's all-reduce (every worker holds its result):
// it releases the job's range and returns the grants to waiters.
func (a *Admission[T]) End(id int) []Action {
	t := a.jobs[id]
	if t == nil || !t.holder {
		return nil
	}
	t.holder = false
	return a.grantWaiters(t.job)
}

// Holds reports whether job id holds its pool range, and the binding.
func (a *Admission[T]) Holds(id int) (Binding, bool) {
	t := a.jobs[id]
	if t == nil {
		return RingBinding, false
	}
	return t.b, t.holder
}

// Depart is the end of job id; the policy re-plans, and the actions are
// what happens to the jobs waiting on its switches.
func (a *Admission[T]) Depart(now time.Duration, at T, id int) ([]Action, error) {
	t := a.jobs[id]
	if t == nil {
		return nil, fmt.Errorf("admission: job %d was never admitted", id)
	}
	delete(a.jobs, id)
	if err := a.ctl.Depart(now, id); err != nil {
		return nil, err
	}
	acts, err := a.rebindWaiters(now, at, t.job)
	if err != nil {
		return acts, err
	}
	return append(acts, a.grantWaiters(t.job)...), nil
}

// waiters returns the jobs waiting for memory on a switch of j, by
// priority, then by the time they asked, then by job id.
func (a *Admission[T]) waiters(j Job) []*ticket[T] {
	var ws []*ticket[T]
	for _, o := range a.jobs {
		if o.waiting && shareSwitch(o.job, j) {
			ws = append(ws, o)
		}
	}
	slices.SortFunc(ws, func(x, y *ticket[T]) int {
		return WaitOrder(a.ctl, x.job.ID, y.job.ID, x.asked, y.asked)
	})
	return ws
}

// WaitOrder orders two jobs waiting for a switch's memory: higher
// controller priority first, then the one that asked first, then the
// lower job id.
func WaitOrder[T cmp.Ordered](ctl *Controller, a, b int, askedA, askedB T) int {
	if c := cmp.Compare(ctl.Priority(b), ctl.Priority(a)); c != 0 {
		return c
	}
	if c := cmp.Compare(askedA, askedB); c != 0 {
		return c
	}
	return a - b
}

func (a *Admission[T]) grantWaiters(j Job) []Action {
	var acts []Action
	for _, w := range a.waiters(j) {
		if a.rangeFree(w) {
			w.holder, w.waiting = true, false
			acts = append(acts, Action{Job: w.job.ID, Verdict: Grant, Binding: w.b, Handoff: true})
		}
	}
	return acts
}

// rebindWaiters gives the jobs waiting on j's switches the binding of the
// current plan (a new plan may have moved them or sent them to the ring).
func (a *Admission[T]) rebindWaiters(now time.Duration, at T, j Job) ([]Action, error) {
	var acts []Action
	for _, w := range a.waiters(j) {
		b, err := a.ctl.Begin(now, w.job.ID)
		if err != nil {
			return acts, err
		}
		if b == w.b {
			continue
		}
		w.b, w.waiting = b, false
		acts = append(acts, a.request(w, at))
	}
	return acts, nil
}
