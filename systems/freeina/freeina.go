// Package freeina is FreeINA's policy (docs/freeina.md): in-network
// aggregation that keeps RDMA reliable connections (RC) end to end, with
// two paths under the hosts' control and switch memory allocated per
// all-reduce.
//
// The two paths. A job's INA path is a ring of RC connections between its
// workers that the switch aggregates (p4/freeina); its parameter-server
// (PS) path is RC connections to a parameter server that aggregates in
// software, which the switch never touches. The hosts choose the path of
// every all-reduce (PathControl): the INA path when the switch granted
// memory and INA has been no slower than the PS path would be, the PS
// path otherwise. INA all-reduces that loss made slower than the PS path
// send the next ones to the PS path (a back-off), and so does an
// all-reduce whose chunks failed on INA — a sum the switch flagged as
// overflowed, a connection that gave up — which the hosts finish on the
// PS path (docs/freeina.md §4).
//
// All-reduce-level allocation (Scheduler). The hosts ask for memory when
// an all-reduce starts — every worker ready — and give it back when it
// ends, so a job holds nothing while it computes: the "on and off"
// pattern of training lets jobs whose communication phases alternate
// share the same memory. A request gets the lowest free range that holds
// the job's line-rate window; when none does, the largest free range if
// it still beats the PS path (Params.Partial), otherwise the PS path.
// Nobody waits for memory.
package freeina

import (
	"fmt"
	"slices"
	"time"

	"github.com/tracebed/tracebed/systems/inasched"
)

// Params are the policy's parameters.
type Params struct {
	// Partial grants less than a job's line-rate window when memory is
	// short, as long as the INA path still beats the PS path with it
	// (the job's UsefulRDMA); false grants the whole window or nothing.
	Partial *bool `yaml:"partial"`
}

// Check implements inasched.Params.
func (p *Params) Check() error { return nil }

// Factory implements inasched.Params.
func (p *Params) Factory(inasched.Network) (inasched.Factory, error) {
	partial := p.Partial == nil || *p.Partial
	return func(mem inasched.Memory, _ int) (inasched.Scheduler, error) { return New(mem, partial), nil }, nil
}

// Register adds the FreeINA policy to r.
func Register(r *inasched.Registry) error {
	return r.Register(inasched.Policy{Name: "freeina",
		Doc:    "RDMA reliable connections aggregated in the switch, a parameter-server path beside, memory per all-reduce",
		Params: func() inasched.Params { return &Params{} }})
}

// span is a range of aggregators [lo, hi) held by a job.
type span struct {
	lo, hi, job int
}

// Scheduler is FreeINA's all-reduce-level allocation.
type Scheduler struct {
	mem     inasched.Memory
	partial bool
	jobs    map[int]inasched.Job
	held    map[string][]span // per switch, by lo
	holds   map[int]inasched.Binding
}

var _ inasched.AllReduceScheduler = (*Scheduler)(nil)

// New returns a FreeINA scheduler for the switches' memory; partial is
// Params.Partial.
func New(mem inasched.Memory, partial bool) *Scheduler {
	return &Scheduler{mem: mem, partial: partial, jobs: map[int]inasched.Job{}, held: map[string][]span{}, holds: map[int]inasched.Binding{}}
}

// Name implements inasched.Scheduler.
func (s *Scheduler) Name() string { return "freeina" }

// Admit implements inasched.Scheduler.
func (s *Scheduler) Admit(_ time.Duration, j inasched.Job) { s.jobs[j.ID] = j }

// Depart implements inasched.Scheduler.
func (s *Scheduler) Depart(now time.Duration, id int) {
	s.End(now, id)
	delete(s.jobs, id)
}

// Priority implements inasched.Scheduler: requests are served as they
// come.
func (s *Scheduler) Priority(int) float64 { return 0 }

// Binding implements inasched.Scheduler: called when job id's all-reduce
// starts, it grants the job memory for it (mode RDMA) or sends it on the
// PS path.
func (s *Scheduler) Binding(now time.Duration, id int) inasched.Binding {
	s.End(now, id) // a binding is for one all-reduce
	j, ok := s.jobs[id]
	switch {
	case !ok || !j.Distributed():
		return inasched.RingBinding
	case len(j.Lower) > 0 || j.SlotRDMA < 1 || j.UsefulRDMA > j.DemandRDMA:
		// The INA path aggregates a rack's ring at its ToR; a job across
		// racks, or one the INA path cannot speed up, uses the PS path.
		return inasched.Binding{Mode: inasched.PS, Pool: -1}
	}
	lo, size := s.free(j.Switch, j.DemandRDMA, j.SlotRDMA)
	if size < j.DemandRDMA && (!s.partial || size < j.UsefulRDMA) {
		return inasched.Binding{Mode: inasched.PS, Pool: -1}
	}
	b := inasched.Binding{Mode: inasched.RDMA, Pool: -1, Base: lo, Size: size}
	s.holds[id] = b
	h := s.held[j.Switch]
	i, _ := slices.BinarySearchFunc(h, lo, func(x span, lo int) int { return x.lo - lo })
	s.held[j.Switch] = slices.Insert(h, i, span{lo: lo, hi: lo + size, job: id})
	return b
}

// End implements inasched.AllReduceScheduler: the job's memory is free.
func (s *Scheduler) End(_ time.Duration, id int) {
	if _, ok := s.holds[id]; !ok {
		return
	}
	delete(s.holds, id)
	sw := s.jobs[id].Switch
	s.held[sw] = slices.DeleteFunc(s.held[sw], func(x span) bool { return x.job == id })
}

// free returns the lowest free range of switch sw, aligned to slot
// aggregators, that holds want aggregators; failing that the largest free
// range (its size may be 0).
func (s *Scheduler) free(sw string, want, slot int) (lo, size int) {
	want -= want % slot
	bestLo, best := 0, 0
	next := 0
	gap := func(a, b int) bool {
		a = (a + slot - 1) / slot * slot
		n := b - a
		n -= n % slot
		if n >= want && want > 0 {
			lo, size = a, want
			return true
		}
		if n > best {
			bestLo, best = a, n
		}
		return false
	}
	for _, h := range s.held[sw] {
		if gap(next, h.lo) {
			return lo, size
		}
		next = max(next, h.hi)
	}
	if gap(next, s.mem[sw]) {
		return lo, size
	}
	return bestLo, best
}

// Held returns the aggregators held on switch sw (for tests and plots).
func (s *Scheduler) Held(sw string) int {
	n := 0
	for _, h := range s.held[sw] {
		n += h.hi - h.lo
	}
	return n
}

// Path is the path of one all-reduce.
type Path int

// Paths.
const (
	PathINA Path = iota // the INA path: RC connections aggregated in the switch
	PathPS              // the parameter-server path
)

func (p Path) String() string {
	if p == PathINA {
		return "ina"
	}
	return "ps"
}

// PathControl is the hosts' rule for choosing an all-reduce's path
// (docs/freeina.md §4): the INA path whenever the switch granted memory,
// unless the INA path recently failed — it was slower than the PS path,
// as go-back-N over lossy links can make it since a lost contribution
// holds back a chunk of every connection, or chunks of it failed and were
// recovered on the PS path — in which case the PS path for a back-off
// that doubles with every such failure (up to MaxBackoff all-reduces)
// and resets when the INA path keeps up again. It is driven by the job's
// leader host and lives on its goroutine.
type PathControl struct {
	// Margin is how much slower than the PS path's estimate an INA
	// all-reduce may be before it counts as a failure (0.1: 10%).
	Margin float64
	// Backoff is the first back-off, in all-reduces; MaxBackoff caps it.
	Backoff, MaxBackoff int

	wait, next int
}

// DefaultControl is the rule's default parameters.
var DefaultControl = PathControl{Margin: 0.1, Backoff: 2, MaxBackoff: 64}

// Check validates the parameters.
func (c *PathControl) Check() error {
	switch {
	case !(c.Margin >= 0 && c.Margin <= 1000):
		return fmt.Errorf("margin %v: want 0 to 1000", c.Margin)
	case c.Backoff < 1 || c.MaxBackoff < c.Backoff:
		return fmt.Errorf("backoff %d, max %d: want 1 ≤ backoff ≤ max", c.Backoff, c.MaxBackoff)
	}
	return nil
}

// Choose returns the path of the next all-reduce, given whether the
// switch granted memory for it. A job backing off does not ask for
// memory: the caller asks only when Wants says so.
func (c *PathControl) Choose(granted bool) Path {
	if !granted || c.wait > 0 {
		if c.wait > 0 {
			c.wait--
		}
		return PathPS
	}
	return PathINA
}

// Wants reports whether the next all-reduce should ask the switch for
// memory (it is not backing off).
func (c *PathControl) Wants() bool { return c.wait == 0 }

// Report tells the rule how an all-reduce on the INA path went: it took
// took, where the PS path is estimated at ps. An INA all-reduce slower
// than ps × (1 + Margin) starts a back-off.
func (c *PathControl) Report(took, ps time.Duration) {
	if float64(took) <= float64(ps)*(1+c.Margin) {
		c.next = 0
		return
	}
	c.Fail()
}

// Fail tells the rule that an all-reduce on the INA path failed: chunks of
// it had to be aggregated again on the PS path (their sums overflowed the
// switch's 32 bits, or a connection gave up). It starts a back-off, or
// doubles the one in progress, as a slow all-reduce does.
func (c *PathControl) Fail() {
	if c.next == 0 {
		c.next = c.Backoff
	} else {
		c.next = min(2*c.next, c.MaxBackoff)
	}
	c.wait = c.next
}
