// Package packet runs multi-tenant INA training with real packets on a
// testbed of either substrate (docs/dynaina.md §9): worker, parameter
// server and controller agents exchange every gradient chunk through the
// switches' INA data plane, the controller runs the policies through
// inasched's controller and admission state machine and programs the
// switches with P4Runtime. Scale shrinks a paper-scale scenario to what
// the machine can run (docs/scaling.md).
package packet

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/systems/inasched"
	"github.com/tracebed/tracebed/topologies"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/traces/models"
	"github.com/tracebed/tracebed/workloads/allreduce"
	"github.com/tracebed/tracebed/workloads/training/fabric"
	"github.com/tracebed/tracebed/workloads/training/flow"
)

// Setup is one packet-level run: every job's workers are real agents
// (allreduce.Worker, Ring, Stream, PS) on the testbed's hosts, every
// aggregation crosses the switches' INA data plane, and a controller agent
// on its own host runs the policy (inasched.Controller) and programs the
// switches through their P4Runtime clients (docs/dynaina.md, "Packet
// level").
type Setup struct {
	// Testbed runs the network; its topology must hold the worker hosts,
	// the controller's host and the parameter-server hosts named below,
	// and its switches must run the "ina" program.
	Testbed testbed.Testbed
	// Workers are the hosts jobs are placed on; Controller hosts the
	// controller; PS lists, per aggregation switch, hosts for the
	// parameter servers of jobs in shared mode (ATP), one job each.
	Workers    []string
	Controller string
	PS         map[string][]string
	// Net holds the protocol parameters; Turnaround is the host turnaround
	// the windows are sized for.
	Net    fabric.Net
	Jobs   []jobtrace.Job
	Lookup func(name string) (models.Profile, bool)
	Policy inasched.Factory
	Seed   uint64
	// Timeout is the retransmission timeout of INA packets and control
	// messages, RingTimeout the ring's.
	Timeout, RingTimeout time.Duration
	// RingWindow bounds the ring's packets in flight per worker.
	RingWindow int
	// Sample is the mean period of the shared-mode occupancy samples (read
	// from the switches' registers through P4Runtime).
	Sample time.Duration
	// Step is how often the driver checks for the end; Limit bounds the
	// run in testbed time.
	Step, Limit time.Duration
	Bins        int
	Progress    func(float64)
	// Log, if set, receives the controller's decisions as they happen
	// (from the controller's goroutine).
	Log func(format string, args ...any)
}

// Outcome is what a packet-level run gives: the outcome the flow
// model gives, plus what only packets show.
type Outcome struct {
	flow.Outcome
	// Verified counts all-reduced tensors the workers found exactly equal
	// to the sum of the workers' gradients; Rounds the all-reduces of
	// distributed jobs' workers (every one is verified, or the run fails).
	Verified, Rounds uint64
	// Retransmits counts data packets the workers retransmitted;
	// CtlMessages the control messages (CtlRetransmits of them resent).
	Retransmits, CtlMessages, CtlRetransmits uint64
	// Collisions counts the data packets the switches sent to parameter
	// servers; PSChunks the chunks the parameter servers completed in
	// software.
	Collisions, PSChunks uint64
	// QueueDrops, Lost and SwitchErrors sum the switches' per-port
	// counters where the switch serves them (the Go switch on netns):
	// drop-tail drops, injected losses, and frames the kernel dropped
	// because the switch process fell behind.
	QueueDrops, Lost, SwitchErrors uint64
	// Substrate is the testbed's.
	Substrate string

	jobRounds [][3]int // per job: pool, shared and ring rounds
}

// finish computes the byte metrics from the rounds each job all-reduced in
// each mode and what the parameter servers did.
func (o *Outcome) finish(s Setup, ps map[int]allreduce.PSJobStats) {
	var grad, inab float64
	for i := range o.Jobs {
		j := &o.Jobs[i]
		st := ps[j.ID]
		o.Collisions += st.Collided
		o.PSChunks += st.Completed
		j.Fallback = float64(st.Collided) * float64(4*ina.DefaultK)
		o.FallbackBytes += j.Fallback
		if j.Workers < 2 || i >= len(o.jobRounds) {
			continue
		}
		prof, _ := s.Lookup(j.Model)
		chunks := float64((prof.GradientBytes/4 + ina.DefaultK - 1) / ina.DefaultK)
		rounds := o.jobRounds[i]
		total := chunks * float64(j.Iterations)
		inaChunks := chunks*float64(rounds[0]) + max(0, chunks*float64(rounds[1])-float64(st.Completed))
		if total > 0 {
			j.INA = j.Gradient * inaChunks / total
		}
		grad += j.Gradient
		inab += j.INA
	}
	if grad > 0 {
		o.INAFraction = inab / grad
	}
}

// jobRun is a job's placement, network estimate and result.
type jobRun struct {
	spec    jobtrace.Job
	prof    models.Profile
	compute float64 // seconds per iteration before jitter
	hosts   []int
	sw      *topologies.Node // the top of tree
	tree    fabric.Tree
	est     fabric.Estimate
	res     flow.JobResult
}

// prun is a job in the packet-level controller.
type prun struct {
	idx     int
	r       *jobRun // placement, network estimate (the flow model's), result
	hosts   []string
	addrs   []emulator.Addr
	target  emulator.Addr   // the aggregation switch's INA address (the top of the tree)
	targets []emulator.Addr // where each worker sends: its rack's ToR in two-level aggregation, else target
	ps      string          // parameter-server host, if any
	psAddr  emulator.Addr

	launched []bool
	started  bool
	finished bool
	cur      int // round begun last; -1 before the first
	began    bool
	granted  bool
	grantAt  time.Duration
	ready    []bool // workers ready for cur (waiting for the grant)
	next     []bool // workers ready for cur+1
	// Per-job results: how many workers are ready for cur and cur+1 and
	// when the last of them was; when cur's all-reduce started (every
	// worker ready and granted), and whether it started.
	readyN, nextN    int
	readyAt, nextAt  time.Duration
	arStart          time.Duration
	arStarted, arINA bool
	doneBy           []bool
	doneN            int
	doneAt           time.Duration
	finishAt         []time.Duration

	b            inasched.Binding
	holder       bool
	waiting      bool // for its pool range (logs)
	psSwJob      int  // switch job id the PS aggregates for; -1 none
	psPending    bool
	poolRounds   int
	sharedRounds int
	ringRounds   int
}

type memSpan struct {
	from, to time.Duration
	n        float64
}

// controller is the packet-level controller agent. All its state is
// touched on its own loop only; the driver reads it with Inspect. Its
// P4Runtime calls go through its control-plane port, never from inside a
// callback: a decision takes effect in the controller's state at once,
// and the controller acts on it — tells the workers — once the switches
// hold what it wrote (port.Then).
type controller struct {
	s       *Setup
	env     emulator.Env
	port    *p4rt.Port
	t0      time.Duration
	cl      *fabric.Cluster
	ctl     *inasched.Controller
	adm     *inasched.Admission[time.Duration]
	binder  *inasched.P4RT
	clients map[string]p4rt.Client
	names   map[string]*p4rt.Names
	memSum  int

	runs    []*prun
	byID    map[uint32]*prun
	order   []*prun // by arrival
	nextArr int
	pending []*prun
	active  []*prun
	psFree  map[string][]string

	spans    []memSpan
	sampling bool
	shared   map[string]*sharedSample
	reading  int    // sampling reads on their way
	epoch    uint64 // of the sampling: a read of an earlier one is dropped

	out      map[[3]uint32]*outMsg // awaiting an answer: (type, job, rank or switch job)
	retxOn   bool
	buf      []byte
	msgs     uint64
	retx     uint64
	bad      uint64
	done     int
	first    time.Duration
	last     time.Duration
	err      error
	finished bool
}

type sharedSample struct {
	at time.Duration
	n  float64
}

type outMsg struct {
	to emulator.Addr
	b  []byte
}

// Start implements emulator.Agent.
func (c *controller) Start(env emulator.Env) {
	c.env = env
	c.t0 = env.Now()
	port, err := p4rt.NewPort(env)
	if err != nil {
		c.fail(err)
		return
	}
	c.port = port
	c.ctl.SetExec(inasched.PortExec(port, c.fail))
	c.first = time.Duration(math.MaxInt64)
	for _, r := range c.order {
		c.first = min(c.first, r.r.spec.Arrival)
	}
	c.scheduleArrival()
}

func (c *controller) now() time.Duration { return c.env.Now() - c.t0 }

func (c *controller) logf(format string, args ...any) {
	if c.s.Log != nil {
		c.s.Log("%9.3fms "+format, append([]any{float64(c.now()) / 1e6}, args...)...)
	}
}

func (c *controller) fail(err error) {
	if c.err == nil {
		c.err = err
	}
	c.finished = true
}

func (c *controller) scheduleArrival() {
	if c.nextArr >= len(c.order) {
		return
	}
	c.env.After(c.order[c.nextArr].r.spec.Arrival-c.now(), c.arrive)
}

func (c *controller) arrive() {
	if c.finished {
		return
	}
	for c.nextArr < len(c.order) && c.order[c.nextArr].r.spec.Arrival <= c.now() {
		c.pending = append(c.pending, c.order[c.nextArr])
		c.nextArr++
	}
	c.scheduleArrival()
	c.admit()
}

// admit starts pending jobs, first come first served, while hosts are free
// (as the flow model's engine.admit).
func (c *controller) admit() {
	for len(c.pending) > 0 && !c.finished {
		p := c.pending[0]
		hosts, ok := c.cl.Place(p.r.spec.Workers)
		if !ok {
			return
		}
		c.pending = c.pending[1:]
		if err := c.start(p, hosts); err != nil {
			c.fail(err)
		}
	}
}

func (c *controller) start(p *prun, hosts []int) error {
	r := p.r
	r.hosts = hosts
	t, err := c.cl.Tree(hosts)
	if err != nil {
		return fmt.Errorf("job %d: %w", r.spec.ID, err)
	}
	c.cl.Hold(t.Top)
	sw := t.Top
	r.sw, r.tree = sw, t
	r.res.Switch = sw.Name
	for _, l := range t.Lower {
		r.res.Lower = append(r.res.Lower, l.Name)
	}
	r.res.Start = c.now().Seconds()
	r.est = c.cl.Estimate(c.s.Net, r.spec, r.prof, r.compute, hosts, t)
	n := len(hosts)
	p.hosts = make([]string, n)
	p.addrs = make([]emulator.Addr, n)
	for i, h := range hosts {
		p.hosts[i] = c.cl.Hosts[h].Name
		p.addrs[i] = netip.AddrPortFrom(c.cl.Hosts[h].IP, NodePort)
	}
	p.target = netip.AddrPortFrom(sw.IP, ina.Port)
	p.targets = make([]emulator.Addr, n)
	for i := range n {
		p.targets[i] = p.target
		if k := t.Rack[i]; k >= 0 {
			p.targets[i] = netip.AddrPortFrom(t.Lower[k].IP, ina.Port)
		}
	}
	p.launched = make([]bool, n)
	p.finishAt = make([]time.Duration, n)
	p.ready, p.next, p.doneBy = make([]bool, n), make([]bool, n), make([]bool, n)
	p.cur, p.psSwJob = -1, -1
	p.started = true
	if n > 1 {
		if free := c.psFree[sw.Name]; len(free) > 0 {
			p.ps = free[0]
			c.psFree[sw.Name] = free[1:]
			p.psAddr = netip.AddrPortFrom(c.s.Testbed.Topology().Node(p.ps).IP, PSPort)
		}
	}
	c.active = append(c.active, p)
	slices.SortFunc(c.active, func(a, b *prun) int { return a.idx - b.idx })
	// The job's physical lower bound, from the compute times its workers
	// will draw (the flow model's JobResult.Bound).
	draws := make([]*computeDraws, n)
	for i := range n {
		draws[i] = newComputeDraws(c.s.Seed, uint32(r.spec.ID), n, i, fabric.Secs(r.compute), c.s.Net.Jitter)
	}
	for it := range r.spec.Iterations {
		var slowest time.Duration
		for _, d := range draws {
			slowest = max(slowest, d.at(it))
		}
		r.res.Bound += slowest.Seconds() + r.est.BoundComm
		r.res.Compute += slowest.Seconds()
	}
	c.logf("job %d starts on %v (switch %s, PS %q): demand %d, useful %d, comm INA %v ring %v", r.spec.ID, p.hosts, sw.Name, p.ps, r.est.Job.Demand, r.est.Job.Useful, r.est.Job.CommINA, r.est.Job.CommRing)
	acts, err := c.adm.Admit(c.now(), c.now(), r.est.Job, p.hosts)
	if err != nil {
		return err
	}
	c.applyLater(acts)
	l := launchBody{
		K: ina.DefaultK, Iterations: uint32(r.spec.Iterations), Elements: uint32(r.prof.GradientBytes / 4),
		Compute: fabric.Secs(r.compute), Jitter: c.s.Net.Jitter, Seed: c.s.Seed,
		Timeout: c.s.Timeout, RingTimeout: c.s.RingTimeout, RingWindow: uint32(c.s.RingWindow), Peers: p.addrs,
	}
	for i := range n {
		c.request(p.addrs[i], &ctlMsg{Type: msgLaunch, Job: uint32(r.spec.ID), Rank: uint8(i), Launch: l}, [3]uint32{uint32(msgLaunch), uint32(r.spec.ID), uint32(i)})
	}
	return nil
}

// request sends m reliably: again every timeout until its answer clears
// key.
func (c *controller) request(to emulator.Addr, m *ctlMsg, key [3]uint32) {
	b := appendCtl(nil, m)
	c.out[key] = &outMsg{to: to, b: b}
	c.env.Send(to, b)
	c.msgs++
	if !c.retxOn {
		c.retxOn = true
		c.env.After(c.s.Timeout, c.resend)
	}
}

func (c *controller) resend() {
	c.retxOn = false
	if len(c.out) == 0 || c.finished {
		return
	}
	keys := make([][3]uint32, 0, len(c.out))
	for k := range c.out {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [3]uint32) int {
		for i := range a {
			if a[i] != b[i] {
				return int(int64(a[i]) - int64(b[i]))
			}
		}
		return 0
	})
	for _, k := range keys {
		o := c.out[k]
		c.env.Send(o.to, o.b)
		c.msgs++
		c.retx++
	}
	c.retxOn = true
	c.env.After(c.s.Timeout, c.resend)
}

func (c *controller) send(to emulator.Addr, m *ctlMsg) {
	c.buf = appendCtl(c.buf[:0], m)
	c.env.Send(to, c.buf)
	c.msgs++
}

// Recv implements emulator.Agent.
func (c *controller) Recv(from emulator.Addr, b []byte) {
	if c.finished {
		return
	}
	m, err := parseCtl(b)
	if err != nil {
		c.bad++
		return
	}
	p := c.byID[m.Job]
	if p == nil || !p.started {
		c.bad++
		return
	}
	if m.Type != msgPSAck && int(m.Rank) >= len(p.addrs) {
		c.bad++
		return
	}
	switch m.Type {
	case msgLaunchAck:
		if _, ok := c.out[[3]uint32{uint32(msgLaunch), m.Job, uint32(m.Rank)}]; ok {
			c.logf("job %d worker %d launched", m.Job, m.Rank)
		}
		delete(c.out, [3]uint32{uint32(msgLaunch), m.Job, uint32(m.Rank)})
		p.launched[m.Rank] = true
	case msgReady:
		c.logf("job %d worker %d ready for round %d", m.Job, m.Rank, m.Round)
		c.onReady(p, m)
	case msgDone:
		c.send(from, &ctlMsg{Type: msgDoneAck, Job: m.Job, Rank: m.Rank, Round: m.Round})
		c.onDone(p, m)
	case msgPSAck:
		c.onPSAck(p, m)
	default:
		c.bad++
	}
}

func (c *controller) onReady(p *prun, m ctlMsg) {
	if p.finished {
		return
	}
	delete(c.out, [3]uint32{uint32(msgLaunch), m.Job, uint32(m.Rank)}) // a ready acknowledges the launch too
	switch {
	case p.cur >= 0 && m.Round == uint32(p.cur) && p.began:
		if !p.ready[m.Rank] {
			p.readyN++
			p.readyAt = c.now()
		}
		if p.granted {
			c.sendGrant(p, int(m.Rank))
			if p.readyN == len(p.addrs) && !p.arStarted {
				p.arStart, p.arStarted = c.now(), true // the last worker was late, not the grant
			}
		}
		p.ready[m.Rank] = true
	case m.Round == uint32(p.cur+1):
		if !p.next[m.Rank] {
			p.nextN++
			p.nextAt = c.now()
		}
		p.next[m.Rank] = true
		if p.cur < 0 || p.doneN == len(p.addrs) {
			c.begin(p)
		}
	}
}

// begin starts round cur+1 of p: every worker finished round cur, at
// least one asks for the next. This is the job's iteration boundary, where
// its binding may change (the flow model's firstDone).
func (c *controller) begin(p *prun) {
	p.cur++
	p.began, p.granted, p.waiting = true, false, false
	p.ready, p.next = p.next, make([]bool, len(p.addrs))
	p.readyN, p.readyAt, p.nextN, p.arStarted = p.nextN, p.nextAt, 0, false
	clear(p.doneBy)
	p.doneN, p.doneAt = 0, 0
	t := c.now()
	act, err := c.adm.Begin(c.now(), c.now(), p.r.est.Job.ID)
	if err != nil {
		c.fail(err)
		return
	}
	p.b = act.Binding
	if p.b.INA() {
		// A move made at an earlier boundary leaves the old binding for
		// the rounds before it; every worker has now finished those.
		call, commit, err := c.binder.RetireCall(p.r.est.Job)
		if err != nil {
			c.fail(fmt.Errorf("job %d: %w", p.r.spec.ID, err))
			return
		}
		if call != nil {
			id := p.r.spec.ID
			c.port.Call(call, func(err error) {
				if err != nil {
					c.fail(fmt.Errorf("job %d: %w", id, err))
					return
				}
				commit()
			})
		}
	}
	c.logf("job %d round %d begins: %v (decided in %v)", p.r.spec.ID, p.cur, p.b, c.now()-t)
	c.port.Then(func() {
		if !c.finished {
			c.act(p, act)
		}
	})
}

// applyLater applies acts once the switches hold what the decisions
// behind them wrote.
func (c *controller) applyLater(acts []inasched.Action) {
	if len(acts) == 0 {
		return
	}
	c.port.Then(func() {
		if !c.finished {
			c.apply(acts)
		}
	})
}

// apply carries out the admission's decisions about waiting jobs.
func (c *controller) apply(acts []inasched.Action) {
	for _, a := range acts {
		p := c.byID[uint32(a.Job)]
		if a.Binding != p.b {
			c.logf("job %d rebound while waiting: %v → %v", a.Job, p.b, a.Binding)
		}
		p.b = a.Binding
		c.act(p, a)
	}
}

// act carries out the admission's verdict on p's current round.
func (c *controller) act(p *prun, a inasched.Action) {
	switch a.Verdict {
	case inasched.Grant:
		c.grant(p)
	case inasched.Wait:
		p.waiting = true
	case inasched.Proceed:
		c.proceed(p)
	}
}

// proceed starts an all-reduce that needs no turn: shared mode (after its
// parameter server is told about the job) or the ring.
func (c *controller) proceed(p *prun) {
	p.waiting = false
	if !(p.b.Mode == inasched.Shared && p.b.INA()) {
		c.grant(p)
		return
	}
	sw, ok := c.binder.SwitchJob(p.r.sw.Name, p.r.est.Job.ID)
	if !ok {
		c.fail(fmt.Errorf("job %d: shared binding without a switch job id", p.r.spec.ID))
		return
	}
	if p.psSwJob == int(sw) {
		c.grant(p)
		return
	}
	if !p.psAddr.IsValid() {
		c.fail(fmt.Errorf("job %d: no parameter-server host left on %s for a shared binding", p.r.spec.ID, p.r.sw.Name))
		return
	}
	p.psPending = true
	body := psBody{SwJob: sw, Elements: uint32(p.r.prof.GradientBytes / 4), K: ina.DefaultK, Multicast: p.target, Workers: p.addrs}
	if c.s.Net.DataPlaneHold() == ina.HoldReturn {
		body.Flags |= psRepublish
	}
	if c.s.Net.DataPlanePlace() == ina.PlaceSlot {
		body.Flags |= psRemap
		body.Window, body.Size = uint32(c.sharedWindow(p)), uint32(p.b.Size)
	}
	c.request(p.psAddr, &ctlMsg{Type: msgPSAdd, Job: uint32(p.r.spec.ID), PS: body}, [3]uint32{uint32(msgPSAdd), uint32(p.r.spec.ID), uint32(sw)})
	p.psSwJob = int(sw)
}

func (c *controller) onPSAck(p *prun, m ctlMsg) {
	key := [3]uint32{m.Round, m.Job, uint32(m.PS.SwJob)} // the PS echoes the request's type in Round
	if _, ok := c.out[key]; !ok {
		return
	}
	delete(c.out, key)
	if msgType(m.Round) == msgPSAdd && p.psPending && int(m.PS.SwJob) == p.psSwJob {
		p.psPending = false
		if p.began && !p.granted && p.b.Mode == inasched.Shared {
			c.grant(p)
		}
	}
}

// grant lets p's workers all-reduce the current round.
func (c *controller) grant(p *prun) {
	c.logf("job %d round %d granted %v", p.r.spec.ID, p.cur, p.b)
	p.granted, p.waiting = true, false
	p.grantAt = c.now()
	p.arINA = p.b.INA()
	if p.readyN == len(p.addrs) && !p.arStarted {
		// Every worker waited for this grant: for switch memory if the
		// binding is a pool (another member's turn), else for the
		// controller's decision.
		p.r.res.MemWait += (p.grantAt - p.readyAt).Seconds()
		p.arStart, p.arStarted = p.grantAt, true
	}
	switch {
	case p.b.Mode == inasched.Pool && p.b.INA():
		p.holder = true
		p.poolRounds++
	case p.b.Mode == inasched.Shared && p.b.INA():
		p.sharedRounds++
		c.startSampling()
	default:
		p.ringRounds++
	}
	for i, ok := range p.ready {
		if ok {
			c.sendGrant(p, i)
		}
	}
}

// sharedWindow is ATP's window of p in shared mode: the line-rate window
// through the parameter server, capped at the pool.
func (c *controller) sharedWindow(p *prun) int { return min(p.r.est.WindowPS, p.b.Size, 1<<16) }

func (c *controller) sendGrant(p *prun, rank int) {
	m := &ctlMsg{Type: msgGrant, Job: uint32(p.r.spec.ID), Rank: uint8(rank), Round: uint32(p.cur), Mode: grantRing}
	if p.b.INA() {
		sw, _ := c.binder.SwitchJob(p.r.sw.Name, p.r.est.Job.ID)
		m.SwJob, m.Target = sw, p.targets[rank]
		switch p.b.Mode {
		case inasched.Pool:
			m.Mode, m.Window = grantPool, uint32(p.b.Size)
		default:
			m.Mode, m.Window = grantShared, uint32(c.sharedWindow(p))
			if c.s.Net.DataPlanePlace() == ina.PlaceSlot {
				m.Mode = grantRemap
			}
		}
	}
	c.send(p.addrs[rank], m)
}

func (c *controller) onDone(p *prun, m ctlMsg) {
	if m.Err != "" {
		c.fail(fmt.Errorf("job %d worker %d (%s) round %d: %s", p.r.spec.ID, m.Rank, p.hosts[m.Rank], m.Round, m.Err))
		return
	}
	if p.finished {
		return
	}
	at := m.At - c.t0
	if m.Last {
		p.finishAt[m.Rank] = at
	}
	if len(p.addrs) == 1 {
		if m.Last {
			c.jobDone(p)
		}
		return
	}
	if !p.began || m.Round != uint32(p.cur) || p.doneBy[m.Rank] {
		return
	}
	p.doneBy[m.Rank] = true
	p.doneN++
	p.doneAt = max(p.doneAt, at)
	if p.doneN == len(p.addrs) {
		c.endIteration(p)
	}
}

// endIteration: every worker holds round cur's result.
func (c *controller) endIteration(p *prun) {
	c.logf("job %d round %d done (last worker at %.3fms)", p.r.spec.ID, p.cur, float64(p.doneAt)/1e6)
	p.began = false
	if p.arStarted {
		d := max(0, p.doneAt-p.arStart).Seconds()
		if p.arINA {
			p.r.res.INATime += d
		} else {
			p.r.res.RingTime += d
		}
	}
	if p.holder {
		p.holder = false
		// The range is held on every switch of the job's tree.
		c.spans = append(c.spans, memSpan{from: p.grantAt, to: max(p.doneAt, p.grantAt), n: float64(p.b.Size * (1 + len(p.r.tree.Lower)))})
		c.applyLater(c.adm.End(p.r.est.Job.ID))
	}
	if p.cur == p.r.spec.Iterations-1 {
		c.jobDone(p)
		return
	}
	if slices.Contains(p.next, true) {
		c.begin(p)
	}
}

func (c *controller) jobDone(p *prun) {
	p.finished = true
	var fin time.Duration
	for _, t := range p.finishAt {
		fin = max(fin, t)
	}
	p.r.res.Finish = fin.Seconds()
	c.last = max(c.last, fin)
	c.active = slices.DeleteFunc(c.active, func(o *prun) bool { return o == p })
	c.cl.Release(p.r.hosts)
	c.cl.Unhold(p.r.sw)
	acts, err := c.adm.Depart(c.now(), c.now(), p.r.est.Job.ID)
	if err != nil {
		c.fail(err)
		return
	}
	if p.psSwJob >= 0 {
		sw := uint16(p.psSwJob)
		c.request(p.psAddr, &ctlMsg{Type: msgPSRemove, Job: uint32(p.r.spec.ID), PS: psBody{SwJob: sw}}, [3]uint32{uint32(msgPSRemove), uint32(p.r.spec.ID), uint32(sw)})
	}
	if p.ps != "" {
		c.psFree[p.r.sw.Name] = append(c.psFree[p.r.sw.Name], p.ps)
	}
	c.done++
	c.applyLater(acts)
	c.admit()
	if c.done == len(c.runs) {
		c.stopSampling()
		// The run is over once the switches have forgotten the jobs.
		c.port.Then(func() { c.finished = true })
	}
}

// Shared-mode occupancy: sampled from the switches' agg_count registers
// through P4Runtime, at random intervals of mean Sample, while some job
// aggregates in shared mode.
func (c *controller) startSampling() {
	if c.sampling || c.s.Sample <= 0 {
		return
	}
	c.sampling = true
	c.sample()
}

func (c *controller) stopSampling() {
	for _, sw := range sortedKeys(c.shared) {
		st := c.shared[sw]
		c.spans = append(c.spans, memSpan{from: st.at, to: c.now(), n: st.n})
	}
	clear(c.shared)
	c.sampling = false
	c.epoch++
}

func (c *controller) sample() {
	if !c.sampling || c.finished {
		return
	}
	if c.reading > 0 {
		// The last sample's reads are still on their way (a control
		// plane slower than the sampling): this sample is skipped.
		c.sampleLater()
		return
	}
	ranges := map[string][][2]int{}
	for _, p := range c.active {
		if p.b.Mode == inasched.Shared && p.b.INA() {
			for _, sw := range p.r.tree.Switches() {
				ranges[sw.Name] = append(ranges[sw.Name], [2]int{p.b.Base, p.b.Base + p.b.Size})
			}
		}
	}
	now := c.now()
	for _, sw := range sortedKeys(c.shared) {
		if _, ok := ranges[sw]; !ok {
			st := c.shared[sw]
			c.spans = append(c.spans, memSpan{from: st.at, to: now, n: st.n})
			delete(c.shared, sw)
		}
	}
	if len(ranges) == 0 {
		c.sampling = false
		return
	}
	// The reads come back as events (readHeld).
	for _, sw := range sortedKeys(ranges) {
		c.readHeld(sw, ranges[sw])
	}
	c.sampleLater()
}

// sampleLater schedules the next sample, at a random interval of mean
// Sample.
func (c *controller) sampleLater() {
	d := time.Duration(float64(c.s.Sample) * (0.5 + c.env.Rand().Float64()))
	c.env.After(d, c.sample)
}

// readHeld samples the shared-mode occupancy of sw's ranges. Its answer
// counts unless the sampling stopped meanwhile (a new epoch); no other
// sample changes c.shared while reads are on their way.
func (c *controller) readHeld(sw string, ranges [][2]int) {
	c.reading++
	epoch := c.epoch
	c.heldCells(sw, ranges, func(n int, err error) {
		c.reading--
		if err != nil {
			c.fail(fmt.Errorf("sampling aggregators of %s: %w", sw, err))
			return
		}
		if epoch != c.epoch || c.finished {
			return
		}
		now := c.now()
		if st := c.shared[sw]; st != nil {
			c.spans = append(c.spans, memSpan{from: st.at, to: now, n: st.n})
		}
		c.shared[sw] = &sharedSample{at: now, n: float64(n)}
	})
}

// heldCells counts, through P4Runtime, the aggregators of the given ranges
// whose copy 0 holds a partial aggregate, and calls done with the count
// when the read comes back. It reads ina.CounterHeld, whose cells count
// the changes of each cell between free and held (so an odd count is a
// held cell), rather than the agg_count register: bmv2's P4Runtime server
// reads no register.
func (c *controller) heldCells(sw string, ranges [][2]int, done func(int, error)) {
	q, err := c.names[sw].CounterQuery(ina.CounterHeld, -1)
	if err != nil {
		done(0, err)
		return
	}
	c.port.Read(c.clients[sw], []*p4v1.Entity{q}, func(ents []*p4v1.Entity, err error) {
		if err != nil {
			done(0, err)
			return
		}
		done(countHeld(ents, ranges), nil)
	})
}

// countHeld counts the cells of agg_held entries that hold a partial
// aggregate (an odd count) in copy 0 of an aggregator of ranges.
func countHeld(ents []*p4v1.Entity, ranges [][2]int) int {
	held := 0
	for _, e := range ents {
		ce := e.GetCounterEntry()
		cell := int(ce.GetIndex().GetIndex())
		if cell%2 != 0 || ce.GetData().GetPacketCount()%2 == 0 {
			continue
		}
		for _, r := range ranges {
			if a := cell / 2; a >= r[0] && a < r[1] {
				held++
				break
			}
		}
	}
	return held
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Run runs jobs at packet level on s.Testbed and returns the
// outcome in the testbed's units. It does not close the testbed.
func Run(ctx context.Context, s Setup) (*Outcome, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	tb := s.Testbed
	top := tb.Topology()
	var workers []*topologies.Node
	for _, h := range s.Workers {
		n := top.Node(h)
		if n == nil || !n.IsHost() {
			return nil, fmt.Errorf("worker host %q is not a host of %s", h, top.Name)
		}
		workers = append(workers, n)
	}
	ctlNode := top.Node(s.Controller)
	if ctlNode == nil || !ctlNode.IsHost() {
		return nil, fmt.Errorf("controller host %q is not a host of %s", s.Controller, top.Name)
	}
	ctlAddr := netip.AddrPortFrom(ctlNode.IP, CtlPort)
	c := &controller{s: &s, clients: map[string]p4rt.Client{}, names: map[string]*p4rt.Names{},
		byID: map[uint32]*prun{}, psFree: map[string][]string{}, out: map[[3]uint32]*outMsg{}, shared: map[string]*sharedSample{}}
	c.cl = fabric.NewClusterOf(top, workers)
	c.cl.TwoLevel = true // jobs across racks aggregate at their ToRs, then at the top (as the flow model)
	mem := inasched.Memory{}
	for _, sw := range top.Switches() {
		mem[sw.Name] = sw.Aggregators
		c.memSum += sw.Aggregators
		if sw.Aggregators <= 0 {
			continue
		}
		cl, err := tb.Switch(sw.Name)
		if err != nil {
			return nil, err
		}
		names, err := p4rt.NewNames(cl.P4Info())
		if err != nil {
			return nil, fmt.Errorf("switch %s: %w", sw.Name, err)
		}
		if _, err := names.Register(ina.RegCount); err != nil {
			return nil, fmt.Errorf("switch %s does not run the INA data plane: %w", sw.Name, err)
		}
		c.clients[sw.Name], c.names[sw.Name] = cl, names
	}
	for sw, hs := range s.PS {
		c.psFree[sw] = slices.Clone(hs)
	}
	binder, err := inasched.NewP4RT(top, c.clients)
	if err != nil {
		return nil, err
	}
	binder.Hold, binder.Place = s.Net.DataPlaneHold(), s.Net.DataPlanePlace()
	binder.Endpoints = func(job int) (uint16, netip.AddrPort) {
		for _, p := range c.runs {
			if p.r.spec.ID == job {
				return NodePort, p.psAddr
			}
		}
		return NodePort, netip.AddrPort{}
	}
	c.binder = binder
	sched, err := s.Policy(mem, 1)
	if err != nil {
		return nil, err
	}
	c.ctl = inasched.NewController(sched, binder)
	c.adm = inasched.NewAdmission[time.Duration](c.ctl)
	for i, j := range s.Jobs {
		prof, ok := s.Lookup(j.Model)
		if !ok {
			return nil, models.UnknownError(j.Model)
		}
		if j.ID < 0 || j.ID > math.MaxUint32 || c.byID[uint32(j.ID)] != nil {
			return nil, fmt.Errorf("job %d: ids must be unique and fit 32 bits", j.ID)
		}
		if j.Workers > len(workers) || j.Workers < 1 {
			return nil, fmt.Errorf("job %d needs %d workers; %d hosts run workers", j.ID, j.Workers, len(workers))
		}
		r := &jobRun{spec: j, prof: prof, compute: prof.Compute.Seconds() * s.Net.ComputeScale}
		r.res = flow.JobResult{ID: j.ID, Workers: j.Workers, Iterations: j.Iterations, Model: prof.Name, Arrival: j.Arrival.Seconds()}
		p := &prun{idx: i, r: r}
		c.runs = append(c.runs, p)
		c.byID[uint32(j.ID)] = p
	}
	c.order = slices.Clone(c.runs)
	slices.SortStableFunc(c.order, func(a, b *prun) int {
		switch {
		case a.r.spec.Arrival < b.r.spec.Arrival:
			return -1
		case a.r.spec.Arrival > b.r.spec.Arrival:
			return 1
		}
		return 0
	})

	// Agents: a node on every worker host, a parameter server on every PS
	// host, then the controller.
	nodes := make([]*node, len(s.Workers))
	nodeEnvs := make([]emulator.Env, len(s.Workers))
	for i, h := range s.Workers {
		nodes[i] = newNode(ctlAddr)
		if nodeEnvs[i], err = tb.Attach(h, NodePort, nodes[i]); err != nil {
			return nil, err
		}
	}
	var psHosts []string
	for _, sw := range sortedKeys(s.PS) {
		psHosts = append(psHosts, s.PS[sw]...)
	}
	pss := make([]*psAgent, len(psHosts))
	psEnvs := make([]emulator.Env, len(psHosts))
	for i, h := range psHosts {
		pss[i] = newPSAgent(ctlAddr)
		if psEnvs[i], err = tb.Attach(h, PSPort, pss[i]); err != nil {
			return nil, err
		}
	}
	ctlEnv, err := tb.Attach(s.Controller, CtlPort, c)
	if err != nil {
		return nil, err
	}
	limit := s.Limit
	if limit <= 0 {
		limit = s.defaultLimit()
	}
	step := s.Step
	if step <= 0 {
		step = 20 * time.Millisecond
	}
	runErr := tb.Run(ctx, step, limit, func() bool {
		var fin bool
		var done int
		tb.Inspect(ctlEnv, func() { fin, done = c.finished, c.done })
		if s.Progress != nil {
			s.Progress(float64(done) / float64(len(s.Jobs)))
		}
		return fin
	})
	o := &Outcome{Substrate: tb.Substrate()}
	var ctlErr error
	tb.Inspect(ctlEnv, func() {
		ctlErr = c.err
		c.collect(o)
	})
	for i, n := range nodes {
		tb.Inspect(nodeEnvs[i], func() {
			o.Verified += n.Stats.Verified
			o.Rounds += n.Stats.Rounds
			o.CtlMessages += n.Stats.CtlSent
			o.CtlRetransmits += n.Stats.CtlRetransmits
			o.Retransmits += n.Stats.Retransmits
			for _, j := range [2]*nodeJob{n.job, n.prev} {
				if j != nil {
					o.Retransmits += j.retransmits()
				}
			}
		})
	}
	psStats := map[int]allreduce.PSJobStats{}
	for i, p := range pss {
		tb.Inspect(psEnvs[i], func() {
			for _, j := range s.Jobs {
				psStats[j.ID] = addPSStats(psStats[j.ID], p.jobStats(uint32(j.ID)))
			}
		})
	}
	for _, sw := range sortedKeys(c.clients) {
		for _, x := range []struct {
			name string
			n    *uint64
		}{{"tracebed.port_queue_drops", &o.QueueDrops}, {"tracebed.port_lost", &o.Lost}, {"tracebed.port_errors", &o.SwitchErrors}} {
			*x.n += counterSum(ctx, c.clients[sw], x.name)
		}
	}
	if ctlErr != nil {
		return nil, ctlErr
	}
	if runErr != nil {
		return nil, fmt.Errorf("packet-level run: %w (%d of %d jobs done)", runErr, c.done, len(s.Jobs))
	}
	o.finish(s, psStats)
	return o, nil
}

// counterSum reads every cell of a counter through P4Runtime and sums the
// packets; a switch that does not serve the counter gives 0.
func counterSum(ctx context.Context, c p4rt.Client, name string) uint64 {
	names, err := p4rt.NewNames(c.P4Info())
	if err != nil {
		return 0
	}
	q, err := names.CounterQuery(name, -1)
	if err != nil {
		return 0
	}
	ents, err := c.Read(ctx, q)
	if err != nil {
		return 0
	}
	var n uint64
	for _, e := range ents {
		n += uint64(e.GetCounterEntry().GetData().GetPacketCount())
	}
	return n
}

func (s *Setup) check() error {
	switch {
	case s.Testbed == nil:
		return errors.New("packet level: no testbed")
	case s.Net.Payload != 4*ina.DefaultK || s.Net.Frame != ina.HeaderLen+4*ina.DefaultK+42:
		return fmt.Errorf("packet level: payload %d and frame %d; the INA data plane carries %d-byte payloads in %d-byte frames", s.Net.Payload, s.Net.Frame, 4*ina.DefaultK, ina.HeaderLen+4*ina.DefaultK+42)
	case s.Timeout <= 0 || s.RingTimeout <= 0:
		return errors.New("packet level: the retransmission timeouts must be positive")
	case s.RingWindow < 1:
		return errors.New("packet level: the ring window must be positive")
	case len(s.Jobs) == 0:
		return errors.New("packet level: no jobs")
	case s.Lookup == nil || s.Policy == nil:
		return errors.New("packet level: no model profiles or no policy")
	}
	return s.Net.Check()
}

// defaultLimit bounds a run: four times every job's work at the slower of
// INA and the ring, run back to back after the last arrival, plus a
// minute.
func (s *Setup) defaultLimit() time.Duration {
	var last, work time.Duration
	rate := math.Inf(1)
	for _, l := range s.Testbed.Topology().Links {
		rate = min(rate, float64(l.Rate))
	}
	for _, j := range s.Jobs {
		last = max(last, j.Arrival)
		prof, _ := s.Lookup(j.Model)
		per := prof.Compute.Seconds()*s.Net.ComputeScale*1.3 + 2*float64(prof.GradientBytes)*8*float64(s.Net.Frame)/float64(s.Net.Payload)/rate
		work += time.Duration(float64(j.Iterations) * per * 1e9)
	}
	return last + 4*work + time.Minute
}

// collect copies the controller's results (on its loop).
func (c *controller) collect(o *Outcome) {
	o.Rebinds = c.ctl.Writes()
	o.CtlMessages += c.msgs
	o.CtlRetransmits += c.retx
	for _, p := range c.runs {
		o.Jobs = append(o.Jobs, p.r.res)
	}
	if !c.finished {
		return
	}
	o.Makespan = (c.last - c.first).Seconds()
	var area float64
	for _, sp := range c.spans {
		area += sp.n * (sp.to - sp.from).Seconds()
	}
	if c.memSum > 0 && o.Makespan > 0 {
		o.MemUtil = area / (float64(c.memSum) * o.Makespan)
	}
	o.MemSeries = binSpans(c.spans, c.first, c.last, c.s.Bins, c.memSum)
	for i, p := range c.runs {
		o.Jobs[i].Gradient = float64(p.r.spec.Iterations) * float64(p.r.prof.GradientBytes)
		o.jobRounds = append(o.jobRounds, [3]int{p.poolRounds, p.sharedRounds, p.ringRounds})
		if len(p.addrs) > 1 {
			o.Jobs[i].INARounds, o.Jobs[i].RingRounds = p.poolRounds+p.sharedRounds, p.ringRounds
		}
	}
	o.Events = c.msgs
}

// binSpans averages the aggregators in use over n equal bins of [from,
// to], as a fraction of memSum.
func binSpans(spans []memSpan, from, to time.Duration, n, memSum int) []analysis.Point {
	if to <= from || n <= 0 {
		return nil
	}
	if memSum <= 0 {
		memSum = 1
	}
	w := float64(to-from) / float64(n)
	out := make([]analysis.Point, n)
	for i := range out {
		lo, hi := float64(from)+float64(i)*w, float64(from)+float64(i+1)*w
		var area float64
		for _, s := range spans {
			a, b := max(lo, float64(s.from)), min(hi, float64(s.to))
			if b > a {
				area += s.n * (b - a)
			}
		}
		out[i] = analysis.Point{X: (lo + hi) / 2 / 1e9, Y: area / w / float64(memSum)}
	}
	return out
}
