// Package flow is the flow-level model of multi-tenant INA training
// (docs/dynaina.md §4): an event-driven simulation whose events are job
// arrivals, compute phases, all-reduce starts and ends and plan changes,
// with every all-reduce a flow whose rate max-min fair sharing of the
// links and the job's window set. It runs the policies of systems/
// through inasched's controller and admission state machine at paper
// scale, from the estimates of package fabric; SimBinder writes every
// binding to the switches' P4 pipelines.
package flow

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/systems/inasched"
	"github.com/tracebed/tracebed/topologies"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/traces/models"
	"github.com/tracebed/tracebed/workloads/training/fabric"
)

// Setup is one flow-level run.
type Setup struct {
	Top    *topologies.Topology
	Net    fabric.Net
	Jobs   []jobtrace.Job
	Policy inasched.Factory
	// Binder, if not nil, receives every binding the controller makes
	// (P4Runtime job-table writes on the switches).
	Binder inasched.Binder
	Seed   uint64
	// Bins is the number of points of the memory-utilisation series
	// (default 200).
	Bins int
	// SeriesBudget is the most changes of the memory in use the run keeps
	// exactly (0: DefaultSeriesBudget); a longer run keeps the series as
	// time-weighted bins instead, so that its memory does not grow with
	// its iterations (see stepSeries).
	SeriesBudget int
	// Progress, if not nil, is called with the fraction of jobs done.
	Progress func(float64)
	// Lookup finds a job's model profile; nil means models.Lookup.
	Lookup func(name string) (models.Profile, bool)
}

// JobResult is what happened to one job. Its times add up: the JCT is
// the queueing for hosts (Start − Arrival), then Compute + MemWait + INA
// time + RingTime over the iterations.
type JobResult struct {
	ID, Workers, Iterations int
	Model                   string
	// Switch is the top of the job's aggregation tree; Lower the switches
	// below it that aggregate its racks (two-level aggregation), if any.
	Switch                 string
	Lower                  []string
	Arrival, Start, Finish float64 // seconds
	// Bound is the physical lower bound of the job's JCT: the sum over
	// iterations of the compute time (the slowest worker's, as drawn) and,
	// for a distributed job, the gradient's bits ÷ the workers' link rate.
	// It is what the job would take alone, with INA at line rate and no
	// latency: its isolated lower bound.
	Bound float64
	// Compute is the time the job's slowest worker computed, summed over
	// iterations, seconds.
	Compute float64
	// MemWait is the time the job waited for switch memory, seconds:
	// every worker had computed, and its binding was a pool it did not hold
	// yet (another member's turn, or the hand-off of a turn).
	MemWait float64
	// INATime and RingTime are the time the job spent all-reducing in a
	// switch (a pool or the shared pool, the results' return included) and
	// on the host ring, seconds; INARounds and RingRounds count those
	// all-reduces.
	INATime, RingTime     float64
	INARounds, RingRounds int
	// Gradient is the bytes all-reduced over the run (per worker, summed
	// over iterations); INA the part aggregated in a switch; Fallback the
	// bytes workers sent to the parameter server after collisions (summed
	// over workers).
	Gradient, INA, Fallback float64
}

// JCT is the job completion time: finish minus arrival.
func (r JobResult) JCT() float64 { return r.Finish - r.Arrival }

// Outcome is the result of a flow-level run.
type Outcome struct {
	Jobs []JobResult
	// Makespan is from the first arrival to the last finish, seconds.
	Makespan float64
	// MemUtil is aggregator-seconds in use ÷ (aggregators × makespan),
	// over every switch with aggregators.
	MemUtil float64
	// INAFraction is the share of gradient bytes of distributed jobs
	// aggregated in a switch.
	INAFraction float64
	// FallbackBytes is the bytes workers sent to parameter servers after
	// collisions.
	FallbackBytes float64
	// MemSeries is the fraction of aggregator memory in use over time
	// (averaged over Bins equal intervals of the makespan).
	MemSeries []analysis.Point
	// Events counts the model's events; Rebinds the bindings written;
	// MemChanges the changes of the aggregators in use (the steps of
	// MemSeries before binning).
	Events, Rebinds, MemChanges uint64
}

// AvgJCT is the mean job completion time.
func (o *Outcome) AvgJCT() float64 {
	var s float64
	for _, j := range o.Jobs {
		s += j.JCT()
	}
	return s / float64(len(o.Jobs))
}

// phase of a job.
type phase int

const (
	queued    phase = iota // waiting for hosts
	computing              // every worker computing
	skew                   // some workers done, the all-reduce not started
	streaming              // all-reduce: bytes flowing
	draining               // all-reduce: last results in flight
	done
)

type coef = fabric.Coef

// run is a job in the model.
type run struct {
	idx     int
	spec    jobtrace.Job
	prof    models.Profile
	sj      inasched.Job
	hosts   []int
	sw      *topologies.Node // the top of tree
	tree    fabric.Tree
	rng     *rand.Rand
	iter    int
	phase   phase
	ver     uint64
	compute float64 // seconds per iteration before jitter

	// Network constants: the fabric's estimate, and the job's virtual
	// parameter-server links (directed link indices in engine.links).
	est     fabric.Estimate
	psLinks [2]int
	shared  []coef // shared mode: the INA links plus the PS links (scaled by p)
	psPath  []coef // FreeINA's PS path: the workers' links plus the PS links

	// Current all-reduce.
	b         inasched.Binding
	haveB     bool // b is the binding of this iteration
	holder    bool // holds its pool range (pool mode; mirrors the admission)
	granted   float64
	lastDone  float64 // when the slowest worker finishes computing
	computed  bool
	remaining float64 // payload bytes per worker
	rate      float64 // payload bytes/s per worker
	scheduled bool    // an end event at the current rate is pending
	p         float64 // collision probability (shared mode)
	tau       float64
	arStart   float64 // when the current all-reduce's stream started
	arINA     bool    // it aggregates in a switch
	streamed  bool    // the current iteration's all-reduce has started

	res JobResult
}

type event struct {
	t    float64
	seq  uint64
	kind int
	job  int
	ver  uint64
}

const (
	evArrive = iota
	evFirstDone
	evLastDone
	evStreamStart
	evStreamEnd
	evDrainEnd
)

// eventQueue is a binary min-heap of events by (time, sequence).
type eventQueue []event

func (q eventQueue) less(i, j int) bool {
	if q[i].t != q[j].t {
		return q[i].t < q[j].t
	}
	return q[i].seq < q[j].seq
}

func (q *eventQueue) push(e event) {
	*q = append(*q, e)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *eventQueue) pop() event {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.less(l, m) {
			m = l
		}
		if r < n && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}

// engine is the flow-level model.
type engine struct {
	s       Setup
	cl      *fabric.Cluster
	ctl     *inasched.Controller
	adm     *inasched.Admission[float64]
	now     float64
	seq     uint64
	q       eventQueue
	runs    []*run
	byID    map[int]*run
	pending []*run    // arrived, waiting for hosts, in arrival order
	active  []*run    // started and not done, by index
	links   []float64 // capacity of each directed link, wire bytes/s
	mem     map[string]int
	memSum  int
	inUse   map[string]float64
	used    float64 // sum of inUse
	series  *stepSeries
	area    float64
	last    float64
	first   float64
	done    int
	events  uint64
	dirty   bool
	sv      solver
	flows   []*run
	coefs   [][]coef
	caps    []float64
	sws     []*topologies.Node
	occ     []float64 // shared-mode occupancy per node index (scratch)
	want    []float64 // aggregators in use per node index (scratch)
	pool    []float64 // the largest shared pool per node index (scratch)
	// arl: the policy allocates memory per all-reduce (FreeINA): a job's
	// binding is asked for when its all-reduce starts and released when
	// it ends.
	arl bool
	// fault is the first breach of the memory invariants (checkHold).
	fault error
}

// Simulate runs the flow-level model.
func Simulate(ctx context.Context, s Setup) (*Outcome, error) {
	if err := s.Net.Check(); err != nil {
		return nil, err
	}
	if len(s.Jobs) == 0 {
		return nil, fmt.Errorf("no jobs")
	}
	if s.Bins <= 0 {
		s.Bins = 200
	}
	cl := fabric.NewCluster(s.Top)
	cl.TwoLevel = true
	e := &engine{s: s, cl: cl, mem: map[string]int{}, inUse: map[string]float64{}, byID: map[int]*run{}}
	e.sws = s.Top.Switches()
	for _, sw := range e.sws {
		e.mem[sw.Name] = sw.Aggregators
		e.memSum += sw.Aggregators
	}
	sched, err := s.Policy(inasched.Memory(e.mem), 1)
	if err != nil {
		return nil, err
	}
	e.ctl = inasched.NewController(sched, s.Binder)
	e.adm = inasched.NewAdmission[float64](e.ctl)
	e.arl = e.ctl.AllReduceLevel()
	for _, l := range s.Top.Links {
		c := float64(l.Rate) / 8
		e.links = append(e.links, c, c) // A→B, B→A
	}
	hosts := len(e.cl.Hosts)
	e.first = math.Inf(1)
	if s.Lookup == nil {
		s.Lookup = models.Lookup
	}
	for i, j := range s.Jobs {
		prof, ok := s.Lookup(j.Model)
		if !ok {
			return nil, models.UnknownError(j.Model)
		}
		if j.Workers > hosts {
			return nil, fmt.Errorf("job %d needs %d workers; the topology has %d hosts", j.ID, j.Workers, hosts)
		}
		if e.byID[j.ID] != nil {
			return nil, fmt.Errorf("job id %d is used twice", j.ID)
		}
		r := &run{idx: i, spec: j, prof: prof, compute: prof.Compute.Seconds() * s.Net.ComputeScale,
			rng: rand.New(rand.NewPCG(s.Seed, uint64(j.ID)<<1|1))}
		r.res = JobResult{ID: j.ID, Workers: j.Workers, Iterations: j.Iterations, Model: prof.Name, Arrival: j.Arrival.Seconds()}
		e.runs = append(e.runs, r)
		e.byID[j.ID] = r
		e.first = min(e.first, r.res.Arrival)
		e.push(r.res.Arrival, evArrive, i, 0)
	}
	e.series = newStepSeries(e.first, s.SeriesBudget, s.Bins)
	for len(e.q) > 0 {
		if e.events&1023 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		ev := e.q.pop()
		e.events++
		e.advance(ev.t)
		r := e.runs[ev.job]
		if ev.kind != evArrive && ev.ver != r.ver {
			continue // superseded
		}
		if err := e.handle(ev, r); err != nil {
			return nil, err
		}
		if e.fault != nil {
			return nil, e.fault
		}
		if e.dirty {
			e.reallocate()
		}
	}
	if e.done != len(e.runs) {
		return nil, fmt.Errorf("flow model stopped with %d of %d jobs done", e.done, len(e.runs))
	}
	for _, sw := range e.sws {
		if n := e.inUse[sw.Name]; math.Abs(n) > 1e-6 {
			return nil, fmt.Errorf("flow model: %s has %.3f aggregators in use after every job finished", sw.Name, n)
		}
	}
	return e.outcome(), nil
}

func (e *engine) push(t float64, kind, job int, ver uint64) {
	e.seq++
	e.q.push(event{t: t, seq: e.seq, kind: kind, job: job, ver: ver})
}

// advance moves time to t, progressing every streaming job and accounting.
func (e *engine) advance(t float64) {
	dt := t - e.now
	if dt < 0 {
		dt = 0
	}
	if dt > 0 {
		for _, r := range e.active {
			if r.phase == streaming && r.rate > 0 {
				moved := min(r.rate*dt, r.remaining)
				r.remaining -= moved
				r.res.Gradient += moved
				switch r.b.Mode {
				case inasched.Pool, inasched.RDMA:
					r.res.INA += moved
				case inasched.Shared:
					r.res.INA += moved * (1 - r.p)
					r.res.Fallback += moved * r.p * float64(len(r.hosts))
				case inasched.PS:
					r.res.Fallback += moved * float64(len(r.hosts))
				}
			}
		}
		e.area += e.used * dt
	}
	e.now = t
}

// use records a change of the aggregators r uses on every switch of its
// tree (a binding holds the same range on each).
func (e *engine) use(r *run, delta float64) {
	e.setUse(r.sw.Name, delta)
	for _, t := range r.tree.Lower {
		e.setUse(t.Name, delta)
	}
}

// setUse records a change of the aggregators in use on a switch.
func (e *engine) setUse(sw string, delta float64) {
	if delta == 0 {
		return
	}
	e.inUse[sw] += delta
	e.used += delta
	if e.used < 1e-9 {
		e.used = 0
	}
	frac := 0.0
	if e.memSum > 0 {
		frac = e.used / float64(e.memSum)
	}
	e.series.set(e.now, frac)
}

func (e *engine) handle(ev event, r *run) error {
	switch ev.kind {
	case evArrive:
		e.pending = append(e.pending, r)
		return e.admit()
	case evFirstDone:
		return e.firstDone(r)
	case evLastDone:
		r.computed = true
		r.phase = skew
		if e.arl {
			if err := e.beginAllReduce(r); err != nil {
				return err
			}
		}
		e.tryStart(r)
	case evStreamStart:
		r.phase = streaming
		r.arStart, r.arINA, r.streamed = e.now, r.b.INA(), true
		r.remaining = float64(r.prof.GradientBytes)
		r.rate, r.scheduled = 0, false
		e.dirty = true
	case evStreamEnd:
		if r.remaining > 1e-6*float64(r.prof.GradientBytes) {
			return fmt.Errorf("job %d: stream ended with %.0f bytes left", r.spec.ID, r.remaining)
		}
		r.res.Gradient += r.remaining
		switch r.b.Mode {
		case inasched.Pool, inasched.RDMA:
			r.res.INA += r.remaining
		case inasched.PS:
			r.res.Fallback += r.remaining * float64(len(r.hosts))
		}
		r.remaining = 0
		r.phase = draining
		r.rate, r.scheduled = 0, false
		e.dirty = true
		r.ver++
		e.push(e.now+r.tau, evDrainEnd, r.idx, r.ver)
	case evDrainEnd:
		return e.endIteration(r)
	}
	return nil
}

// admit starts pending jobs, in arrival order, while their workers fit.
func (e *engine) admit() error {
	for len(e.pending) > 0 {
		r := e.pending[0]
		hosts, ok := e.cl.Place(r.spec.Workers)
		if !ok {
			return nil // first come first served: later jobs wait too
		}
		e.pending = e.pending[1:]
		if err := e.start(r, hosts); err != nil {
			return err
		}
	}
	return nil
}

func (e *engine) index(r *run) int { return r.idx }

// start places r on hosts and begins its first iteration.
func (e *engine) start(r *run, hosts []int) error {
	r.hosts = hosts
	t, err := e.cl.Tree(hosts)
	if err != nil {
		return fmt.Errorf("job %d: %w", r.spec.ID, err)
	}
	e.cl.Hold(t.Top)
	r.sw, r.tree = t.Top, t
	r.res.Switch = t.Top.Name
	for _, l := range t.Lower {
		r.res.Lower = append(r.res.Lower, l.Name)
	}
	r.res.Start = e.now
	r.est = e.cl.Estimate(e.s.Net, r.spec, r.prof, r.compute, hosts, t)
	r.psLinks = [2]int{len(e.links), len(e.links) + 1}
	e.links = append(e.links, r.est.PSRate, r.est.PSRate)
	e.active = append(e.active, r)
	slices.SortFunc(e.active, func(a, b *run) int { return a.idx - b.idx })
	acts, err := e.adm.Admit(e.clock(), e.now, r.est.Job, e.workerAddrs(r))
	if err != nil {
		return err
	}
	e.apply(acts)
	e.computeStart(r)
	return nil
}

// clock is the model's time as the controller sees it.
func (e *engine) clock() time.Duration { return time.Duration(e.now * 1e9) }

// apply carries out the admission's decisions about waiting jobs.
func (e *engine) apply(acts []inasched.Action) {
	for _, a := range acts {
		r := e.byID[a.Job]
		r.b = a.Binding
		switch a.Verdict {
		case inasched.Grant:
			e.grant(r, a.Handoff)
		case inasched.Proceed:
			if r.computed {
				e.tryStart(r)
			}
		}
	}
}

func (e *engine) workerAddrs(r *run) []string {
	out := make([]string, len(r.hosts))
	for i, h := range r.hosts {
		out[i] = e.cl.Hosts[h].Name
	}
	return out
}

// computeStart draws the workers' compute times of the next iteration.
func (e *engine) computeStart(r *run) {
	r.phase = computing
	r.computed, r.haveB = false, false
	lo, hi := math.Inf(1), 0.0
	for range r.hosts {
		f := 1.0
		if j := e.s.Net.Jitter; j > 0 {
			f += j * max(-3, min(3, r.rng.NormFloat64()))
		}
		c := r.compute * max(f, 0.01)
		lo, hi = min(lo, c), max(hi, c)
	}
	r.res.Bound += hi + r.est.BoundComm
	r.res.Compute += hi
	if len(r.hosts) == 1 {
		r.ver++
		e.push(e.now+hi, evDrainEnd, e.index(r), r.ver) // nothing to all-reduce
		return
	}
	r.ver++
	r.lastDone = e.now + hi
	e.push(e.now+lo, evFirstDone, e.index(r), r.ver)
	e.push(e.now+hi, evLastDone, e.index(r), r.ver)
}

// firstDone: the first worker is ready to all-reduce. The job learns its
// binding for this iteration; in pool mode it asks for its pool, in shared
// mode its early workers start claiming aggregators.
func (e *engine) firstDone(r *run) error {
	r.phase = skew
	if e.arl {
		return nil // the hosts ask for memory when the all-reduce starts
	}
	act, err := e.adm.Begin(e.clock(), e.now, r.est.Job.ID)
	if err != nil {
		return err
	}
	r.b, r.haveB = act.Binding, true
	switch {
	case act.Verdict == inasched.Grant:
		e.grant(r, false)
	case act.Verdict == inasched.Proceed && r.b.Mode == inasched.Shared && r.b.INA():
		e.use(r, float64(r.est.WindowPS))
		e.dirty = true
	}
	return nil
}

// beginAllReduce asks, when r's all-reduce starts (every worker done),
// for memory for it under an all-reduce-level policy: an RDMA binding
// holds its range from now to the all-reduce's end.
func (e *engine) beginAllReduce(r *run) error {
	act, err := e.adm.Begin(e.clock(), e.now, r.est.Job.ID)
	if err != nil {
		return err
	}
	r.b, r.haveB = act.Binding, true
	if r.b.Mode == inasched.RDMA && r.b.INA() {
		e.checkHold(r)
		e.use(r, float64(r.b.Size))
	}
	return nil
}

// grant: r holds its pool range; it all-reduces once every worker is done.
func (e *engine) grant(r *run, handoff bool) {
	r.holder = true
	r.granted = e.now
	if handoff {
		r.granted += e.s.Net.Control.Seconds()
	}
	e.checkHold(r)
	e.use(r, float64(r.b.Size))
	if r.computed {
		e.tryStart(r)
	}
}

// tryStart starts the all-reduce once every worker is done and the job may
// use its memory.
func (e *engine) tryStart(r *run) {
	if !r.computed || r.phase != skew {
		return
	}
	if r.b.Mode == inasched.Pool && r.b.INA() && !r.holder {
		return
	}
	start := e.now
	if r.holder {
		start = max(start, r.granted)
	}
	r.phase = skew // until evStreamStart
	r.res.MemWait += start - r.lastDone
	r.ver++
	e.setTau(r)
	e.push(start, evStreamStart, e.index(r), r.ver)
	r.computed = false
}

func (e *engine) setTau(r *run) {
	switch {
	case r.b.Mode == inasched.Pool && r.b.INA():
		r.tau = r.est.RTT
	case r.b.Mode == inasched.Shared && r.b.INA():
		r.tau = r.est.RTTPS
	case r.b.Mode == inasched.RDMA && r.b.INA():
		r.tau = r.est.RTTRDMA
	case r.b.Mode == inasched.PS:
		r.tau = r.est.TauPS
	default:
		r.tau = r.est.TauRing
	}
}

// endIteration finishes an all-reduce (or a single worker's compute).
func (e *engine) endIteration(r *run) error {
	if r.holder {
		r.holder = false
		e.use(r, -float64(r.b.Size))
		e.apply(e.adm.End(r.est.Job.ID))
	}
	if r.haveB && r.b.Mode == inasched.Shared && r.b.INA() {
		e.dirty = true
	}
	if e.arl && r.haveB {
		if r.b.Mode == inasched.RDMA && r.b.INA() {
			e.use(r, -float64(r.b.Size))
		}
		if err := e.ctl.End(e.clock(), r.est.Job.ID); err != nil {
			return err
		}
	}
	if r.streamed {
		r.streamed = false
		if r.arINA {
			r.res.INATime += e.now - r.arStart
			r.res.INARounds++
		} else {
			r.res.RingTime += e.now - r.arStart
			r.res.RingRounds++
		}
	}
	r.iter++
	if r.iter < r.spec.Iterations {
		e.computeStart(r)
		return nil
	}
	r.phase = done
	r.res.Finish = e.now
	e.last = max(e.last, e.now)
	e.active = slices.DeleteFunc(e.active, func(o *run) bool { return o == r })
	e.cl.Release(r.hosts)
	e.cl.Unhold(r.sw)
	acts, err := e.adm.Depart(e.clock(), e.now, r.est.Job.ID)
	if err != nil {
		return err
	}
	e.done++
	if e.s.Progress != nil {
		e.s.Progress(float64(e.done) / float64(len(e.runs)))
	}
	e.apply(acts)
	return e.admit()
}

// reallocate recomputes every streaming job's rate: collision
// probabilities in shared mode, then max-min fair shares of the links with
// each job capped by its window.
func (e *engine) reallocate() {
	e.dirty = false
	// Shared-mode occupancy per switch.
	if len(e.occ) < len(e.s.Top.Nodes) {
		e.occ = make([]float64, len(e.s.Top.Nodes))
		e.want = make([]float64, len(e.s.Top.Nodes))
		e.pool = make([]float64, len(e.s.Top.Nodes))
	}
	e.tally()
	flows := e.flows[:0]
	for _, r := range e.active {
		if r.phase == streaming {
			flows = append(flows, r)
		}
	}
	e.flows = flows
	// Collision probability: the share of the pool other jobs' chunks
	// hold. Occupancy depends on p when chunks hold aggregators until the
	// result returns, so iterate to the fixed point.
	passes := 1
	if e.s.Net.ATPHold == fabric.HoldReturn || e.s.Net.ATPCollisions != fabric.CollideHash {
		passes = 8
	}
	for pass := range passes {
		if pass > 0 {
			e.tally()
		}
		moved := 0.0
		for _, r := range flows {
			if r.b.Mode == inasched.Shared && r.b.INA() {
				// A chunk collides at a level where other jobs' chunks
				// hold its aggregator (a share of the pool).
				own := r.occupancy()
				p := e.collide(e.occ[r.sw.Index], own, float64(r.b.Size))
				for _, t := range r.tree.Lower {
					q := e.collide(e.occ[t.Index], own, float64(r.b.Size))
					p = 1 - (1-p)*(1-q)
				}
				moved = max(moved, math.Abs(p-r.p))
				r.p = p
			}
		}
		if pass > 0 && moved < 1e-9 {
			break
		}
	}
	if passes > 1 {
		e.tally() // at the collision probabilities found
	}
	slices.SortFunc(flows, func(a, b *run) int { return a.sj.ID - b.sj.ID })
	coefs, caps := e.coefs[:0], e.caps[:0]
	for _, r := range flows {
		c, k := e.demand(r)
		coefs, caps = append(coefs, c), append(caps, k)
	}
	e.coefs, e.caps = coefs, caps
	rates := e.sv.maxMin(e.links, coefs, caps)
	for i, r := range flows {
		if r.scheduled && rates[i] == r.rate {
			continue // its end event still holds
		}
		r.rate = rates[i]
		r.ver++
		r.scheduled = false
		if r.rate <= 0 {
			continue
		}
		r.scheduled = true
		e.push(e.now+r.remaining/r.rate, evStreamEnd, e.index(r), r.ver)
	}
	// Aggregators in use changed with the phases; refresh them. The
	// shared-mode windows may add up to more than their pool (the excess
	// collides, above), but a pool holds no more than its aggregators.
	for _, sw := range e.sws {
		i := sw.Index
		want := e.want[i] - e.occ[i] + min(e.occ[i], e.pool[i])
		if d := want - e.inUse[sw.Name]; math.Abs(d) > 1e-9 {
			e.setUse(sw.Name, d)
		}
	}
}

// collide is the probability that a chunk of a shared-mode job collides
// at a switch where the jobs' chunks hold total aggregators of a pool of
// size, own of them the job's (Net.ATPCollisions).
func (e *engine) collide(total, own, size float64) float64 {
	if e.s.Net.ATPCollisions == fabric.CollideHash {
		return min(1, max(0, total-own)/size)
	}
	// Remapped slots settle on free aggregators; the windows' excess over
	// the pool keeps colliding, shared in proportion to what each holds.
	if total <= size || total <= 0 {
		return 0
	}
	return (total - size) / total
}

// addTo adds v to the entries of per-node values of r's tree switches.
func (r *run) addTo(per []float64, v float64) {
	per[r.sw.Index] += v
	for _, t := range r.tree.Lower {
		per[t.Index] += v
	}
}

// tally sums, per switch, the shared-mode occupancy (occ), the aggregators
// in use (want: held ranges and occupancies) and the largest shared pool
// (pool) of the active jobs.
func (e *engine) tally() {
	clear(e.occ)
	clear(e.want)
	clear(e.pool)
	for _, r := range e.active {
		if r.holds() {
			r.addTo(e.want, float64(r.b.Size))
		}
		if r.sharing() {
			o := r.occupancy()
			r.addTo(e.occ, o)
			r.addTo(e.want, o)
			r.maxTo(e.pool, float64(r.b.Size))
		}
	}
}

// holds reports whether r holds its binding's range exclusively now: a
// pool it was granted, or FreeINA's memory for its all-reduce.
func (r *run) holds() bool {
	return r.holder || r.aggregating() && r.b.Mode == inasched.RDMA
}

// aggregating reports whether r's all-reduce is on the switches now.
func (r *run) aggregating() bool {
	return r.haveB && r.b.INA() && (r.phase == skew || r.phase == streaming || r.phase == draining)
}

// checkHold checks, as r takes its range, that the range lies within the
// memory of every switch of its tree and that no other job holds any of
// it on a switch they share (one holder per pool at a time, pools
// disjoint); the first breach is the run's error (a bug of a policy or of
// the admission, not of the input).
func (e *engine) checkHold(r *run) {
	if e.fault != nil {
		return
	}
	within := func(sw *topologies.Node) bool {
		if r.b.Base < 0 || r.b.Base+r.b.Size > e.mem[sw.Name] {
			e.fault = fmt.Errorf("flow model: job %d holds %v on %s, which has %d aggregators", r.spec.ID, r.b, sw.Name, e.mem[sw.Name])
			return false
		}
		return true
	}
	if !within(r.sw) {
		return
	}
	for _, t := range r.tree.Lower {
		if !within(t) {
			return
		}
	}
	shared := func(o *run, sw *topologies.Node) bool {
		if r.on(sw) {
			e.fault = fmt.Errorf("flow model: at %.9f s jobs %d (%v) and %d (%v) hold aggregators of %s at once", e.now, r.spec.ID, r.b, o.spec.ID, o.b, sw.Name)
			return true
		}
		return false
	}
	for _, o := range e.active {
		if o == r || !o.holds() || !r.b.Overlaps(o.b) {
			continue
		}
		if shared(o, o.sw) {
			return
		}
		for _, t := range o.tree.Lower {
			if shared(o, t) {
				return
			}
		}
	}
}

// on reports whether sw is a switch of r's tree.
func (r *run) on(sw *topologies.Node) bool {
	return r.sw == sw || slices.Contains(r.tree.Lower, sw)
}

// maxTo raises the entries of per-node values of r's tree switches to v.
func (r *run) maxTo(per []float64, v float64) {
	per[r.sw.Index] = max(per[r.sw.Index], v)
	for _, t := range r.tree.Lower {
		per[t.Index] = max(per[t.Index], v)
	}
}

// sharing reports whether r holds shared-mode aggregators now.
func (r *run) sharing() bool {
	return r.aggregating() && r.b.Mode == inasched.Shared
}

// occupancy is the aggregators a shared-mode job holds: its early workers'
// window while the others still compute, then the cells its chunks hold
// between first and last contribution.
func (r *run) occupancy() float64 {
	if r.phase == skew {
		return float64(min(r.est.WindowPS, r.b.Size))
	}
	return float64(min(r.est.WindowPS, r.b.Size)) * (1 - r.p) * min(1, r.est.Hold/r.est.RTTPS)
}

// demand returns the link coefficients and the window cap of a streaming
// job under its binding.
func (e *engine) demand(r *run) ([]coef, float64) {
	switch {
	case r.b.Mode == inasched.Pool && r.b.INA():
		return r.est.INA, float64(r.b.Size) * float64(e.s.Net.Payload) / r.est.RTT
	case r.b.Mode == inasched.Shared && r.b.INA():
		if len(r.shared) == 0 {
			r.shared = append(append(r.shared, r.est.INA...), coef{Link: r.psLinks[0]}, coef{Link: r.psLinks[1]})
		}
		f := float64(e.s.Net.Frame) / float64(e.s.Net.Payload)
		n := float64(len(r.hosts))
		r.shared[len(r.shared)-2].A = f * (1 - r.p + n*r.p)
		r.shared[len(r.shared)-1].A = f
		w := float64(min(r.est.WindowPS, r.b.Size))
		return r.shared, w * float64(e.s.Net.Payload) / r.est.RTTPS
	case r.b.Mode == inasched.RDMA && r.b.INA():
		// A window of the granted slots: Size aggregators hold Size × 256
		// bytes of chunks in flight.
		return r.est.RDMA, float64(r.b.Size) * fabric.AggregatorBytes / r.est.RTTRDMA
	case r.b.Mode == inasched.PS:
		if len(r.psPath) == 0 {
			r.psPath = append(append(r.psPath, r.est.PSPath...), coef{Link: r.psLinks[0], A: r.est.PSPathA}, coef{Link: r.psLinks[1], A: r.est.PSPathA})
		}
		return r.psPath, math.Inf(1)
	}
	return r.est.Ring, math.Inf(1)
}

// solver holds maxMin's scratch space, indexed by directed link.
type solver struct {
	residual, load []float64
	seen           []bool
	touched        []int
	rates          []float64
	frozen         []bool
}

// slicesGrow returns s resized to n zeros, reusing its storage.
func slicesGrow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	s = s[:n]
	clear(s)
	return s
}

func slicesGrowBool(s []bool, n int) []bool {
	if cap(s) < n {
		return make([]bool, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// maxMin is progressive filling: every flow's rate rises together until a
// link saturates (freezing the flows on it) or a flow reaches its cap.
func (sv *solver) maxMin(capacity []float64, coefs [][]coef, caps []float64) []float64 {
	n := len(coefs)
	rates := slicesGrow(sv.rates, n)
	sv.rates = rates
	if n == 0 {
		return rates
	}
	if len(sv.residual) < len(capacity) {
		sv.residual = make([]float64, len(capacity))
		sv.load = make([]float64, len(capacity))
		sv.seen = make([]bool, len(capacity))
	}
	sv.touched = sv.touched[:0]
	for _, cs := range coefs {
		for _, c := range cs {
			if !sv.seen[c.Link] {
				sv.seen[c.Link] = true
				sv.touched = append(sv.touched, c.Link)
				sv.residual[c.Link] = capacity[c.Link]
			}
		}
	}
	defer func() {
		for _, l := range sv.touched {
			sv.seen[l] = false
		}
	}()
	frozen := slicesGrowBool(sv.frozen, n)
	sv.frozen = frozen
	left := n
	for left > 0 {
		for _, l := range sv.touched {
			sv.load[l] = 0
		}
		for i, cs := range coefs {
			if !frozen[i] {
				for _, c := range cs {
					sv.load[c.Link] += c.A
				}
			}
		}
		inc := math.Inf(1)
		for _, l := range sv.touched {
			if a := sv.load[l]; a > 0 {
				inc = min(inc, sv.residual[l]/a)
			}
		}
		for i := range coefs {
			if !frozen[i] {
				inc = min(inc, caps[i]-rates[i])
			}
		}
		if math.IsInf(inc, 1) || inc < 0 {
			inc = 0
		}
		for i := range coefs {
			if !frozen[i] {
				rates[i] += inc
			}
		}
		for _, l := range sv.touched {
			sv.residual[l] -= sv.load[l] * inc
		}
		progress := false
		for i, cs := range coefs {
			if frozen[i] {
				continue
			}
			stop := rates[i] >= caps[i]*(1-1e-12)
			for _, c := range cs {
				if sv.residual[c.Link] <= capacity[c.Link]*1e-12 {
					stop = true
				}
			}
			if stop {
				frozen[i] = true
				left--
				progress = true
			}
		}
		if !progress {
			break
		}
	}
	return rates
}

func (e *engine) outcome() *Outcome {
	o := &Outcome{Events: e.events, Rebinds: e.ctl.Writes(), MemChanges: e.series.changes}
	o.Makespan = e.last - e.first
	var grad, ina float64
	for _, r := range e.runs {
		o.Jobs = append(o.Jobs, r.res)
		if r.spec.Workers > 1 {
			grad += r.res.Gradient
			ina += r.res.INA
		}
		o.FallbackBytes += r.res.Fallback
	}
	if grad > 0 {
		o.INAFraction = ina / grad
	}
	if e.memSum > 0 && o.Makespan > 0 {
		o.MemUtil = e.area / (float64(e.memSum) * o.Makespan)
	}
	o.MemSeries = e.series.bins(e.first, e.last, e.s.Bins)
	return o
}

// BinSteps averages a step function (value Y from X until the next
// point) over n equal bins of [from, to]: the memory-use series of the
// packet-level runs, made as the model's is.
func BinSteps(steps []analysis.Point, from, to float64, n int) []analysis.Point {
	return binSteps(steps, from, to, n)
}

// Draws returns the compute times the model draws for the workers of a
// job (id job, seed seed) over its iterations, per worker: what a
// packet-level worker replays to see the same phases.
func Draws(seed uint64, job, workers, iterations int, compute time.Duration, jitter float64) [][]time.Duration {
	r := rand.New(rand.NewPCG(seed, uint64(job)<<1|1))
	out := make([][]time.Duration, workers)
	for range iterations {
		for w := range workers {
			f := 1 + jitter*max(-3, min(3, r.NormFloat64()))
			c := compute.Seconds() * max(f, 0.01)
			out[w] = append(out[w], time.Duration(c*1e9))
		}
	}
	return out
}
