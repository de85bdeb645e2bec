package freeina

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/emulator/roce/wire"
	dp "github.com/tracebed/tracebed/p4/freeina"
	sysfree "github.com/tracebed/tracebed/systems/freeina"
	"github.com/tracebed/tracebed/systems/inasched"
	"github.com/tracebed/tracebed/topologies"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/traces/models"
	"github.com/tracebed/tracebed/workloads/training/fabric"
	"github.com/tracebed/tracebed/workloads/training/flow"
)

// controller is the run's controller, on its own host: it admits jobs as
// hosts free up, launches their workers and parameter servers over the
// control connections, and at every round of a job — when every worker
// is ready — asks the policy for memory (the hosts' request, if the
// job's leader wants the INA path), programs the switch through
// P4Runtime and tells the workers the round's path; when every worker is
// done it releases the memory (the all-reduce-level allocation). When
// chunks of a round fail on the INA path, it gathers the workers'
// stopped reports (stopping them all if a connection gave up), releases
// the memory, and names the first chunk to re-aggregate on the PS path
// (recover; worker.go). Its P4Runtime calls go through its control-plane
// port, never from inside a callback: a round's path is decided at once,
// and the workers are told once the switch holds the round's binding
// (port.Then).
type controller struct {
	h       *host
	run     *run
	port    *p4rt.Port
	pending map[netip.Addr]*channel // control connections until established
	chans   map[netip.Addr]*channel
	t0      time.Duration // when every host was connected: time zero of the jobs
	started bool

	cluster *fabric.Cluster
	adm     *inasched.Admission[time.Duration]
	ictl    *inasched.Controller
	binder  *sysfree.P4RT
	jobs    []*cjob
	byID    map[uint32]*cjob
	queue   []*cjob
	psFree  map[string][]string
	psIP    map[string]netip.Addr
	done    int

	memSum int
	used   float64
	steps  []analysis.Point
	area   float64
	last   float64
	rounds int
	byPath [2]int
	// recovered counts the all-reduces recovered on the PS path,
	// recoveredChunks their chunks re-aggregated there.
	recovered, recoveredChunks int
	sw                         SwitchCounters
	// took is every all-reduce's time, by path: from the controller's go
	// to the last worker's done.
	took [2][]time.Duration
}

// cjob is a job as the controller follows it.
type cjob struct {
	spec    jobtrace.Job
	prof    models.Profile
	values  int
	hosts   []int
	workers []string
	ips     []netip.Addr
	ps      string
	sw      *topologies.Node
	est     fabric.Estimate

	listening int
	setup     []ctlMsg
	setups    int
	ready     []ctlMsg
	early     []ctlMsg // ready for the next round
	readies   int
	begun     bool
	dones     int
	round     int
	path      int
	binding   inasched.Binding
	goAt      time.Duration
	failed    string
	res       flow.JobResult

	// Recovery of the round (chunks failed on INA): stopped workers, the
	// fewest results one of them holds, whether the workers were told
	// to stop (a connection gave up) and to recover, the memory
	// released, the chunks recovered.
	stopped, minGot                int
	stopSent, recovering, released bool
	recoveredChunks                int
}

func newController(h *host, r *run) (*controller, error) {
	c := &controller{h: h, run: r, pending: map[netip.Addr]*channel{}, chans: map[netip.Addr]*channel{},
		byID: map[uint32]*cjob{}, psFree: map[string][]string{}, psIP: map[string]netip.Addr{}}
	top := r.s.Testbed.Topology()
	var workers []*topologies.Node
	for _, w := range r.s.Workers {
		workers = append(workers, top.Node(w))
	}
	c.cluster = fabric.NewClusterOf(top, workers)
	for sw, hosts := range r.s.PS {
		c.psFree[sw] = append([]string(nil), hosts...)
		for _, ph := range hosts {
			c.psIP[ph] = top.Node(ph).IP
		}
	}
	mem := inasched.Memory{}
	clients := map[string]p4rt.Client{}
	for _, sw := range top.Switches() {
		mem[sw.Name] = sw.Aggregators
		c.memSum += sw.Aggregators
		if sw.Aggregators > 0 {
			cl, err := r.s.Testbed.Switch(sw.Name)
			if err != nil {
				return nil, err
			}
			clients[sw.Name] = cl
		}
	}
	sched, err := r.s.Policy(mem, sysfree.SlotAggregatorsFor(r.k))
	if err != nil {
		return nil, err
	}
	if c.binder, err = sysfree.NewP4RT(top, clients); err != nil {
		return nil, err
	}
	c.binder.Slot = sysfree.SlotAggregatorsFor(r.k)
	c.binder.Ring = c.ring
	c.binder.Round = c.roundOf
	c.ictl = inasched.NewController(sched, c.binder)
	c.adm = inasched.NewAdmission[time.Duration](c.ictl)
	for i, j := range r.s.Jobs {
		prof, ok := r.s.Lookup(j.Model)
		if !ok {
			return nil, models.UnknownError(j.Model)
		}
		cj := &cjob{spec: j, prof: prof, res: flow.JobResult{ID: j.ID, Workers: j.Workers, Iterations: j.Iterations, Model: prof.Name}}
		// Whole chunks of k values (the last padded with zeros).
		cj.values = int((prof.GradientBytes+int64(4*r.k)-1)/int64(4*r.k)) * r.k
		c.jobs = append(c.jobs, cj)
		c.byID[uint32(i)] = cj
	}
	return c, nil
}

// connected counts a host's established control connection; when every
// host is connected, the jobs' clock starts.
func (c *controller) connected(peer netip.Addr) {
	ch := c.pending[peer]
	if ch == nil {
		c.h.fail(fmt.Errorf("control connection from %v without its channel", peer))
		return
	}
	delete(c.pending, peer)
	c.chans[peer] = ch
	c.start()
}

// start schedules the arrivals once every host is connected.
func (c *controller) start() {
	if c.port == nil {
		port, err := p4rt.NewPort(c.h.dev.Env())
		if err != nil {
			c.h.fail(err)
			return
		}
		c.port = port
		c.ictl.SetExec(inasched.PortExec(port, c.h.fail))
	}
	if c.started || len(c.chans) < len(c.run.hosts)-1 {
		return
	}
	c.started = true
	c.t0 = c.h.now()
	for i, j := range c.jobs {
		id := uint32(i)
		c.h.dev.Env().After(j.spec.Arrival, func() {
			j.res.Arrival = c.clock()
			c.queue = append(c.queue, c.byID[id])
			c.admit()
		})
	}
}

// clock is the jobs' time, in seconds since every host was connected.
func (c *controller) clock() float64 { return (c.h.now() - c.t0).Seconds() }

// admit starts queued jobs, first come first served, while their workers
// and a parameter server at their switch are free.
func (c *controller) admit() {
	for len(c.queue) > 0 {
		j := c.queue[0]
		hosts, ok := c.cluster.Place(j.spec.Workers)
		if !ok {
			return
		}
		tree, err := c.cluster.Tree(hosts)
		if err != nil {
			c.h.fail(err)
			return
		}
		free := c.psFree[tree.Top.Name]
		if len(c.run.s.PS[tree.Top.Name]) == 0 {
			c.h.fail(fmt.Errorf("job %d aggregates at %s, which has no parameter-server host", j.spec.ID, tree.Top.Name))
			return
		}
		if len(free) == 0 {
			c.cluster.Release(hosts)
			return
		}
		c.queue = c.queue[1:]
		j.ps, c.psFree[tree.Top.Name] = free[0], free[1:]
		j.hosts, j.sw = hosts, tree.Top
		c.cluster.Hold(tree.Top)
		prof := j.prof
		j.est = c.cluster.Estimate(c.run.s.Net, j.spec, prof, prof.Compute.Seconds()*c.run.s.Net.ComputeScale, hosts, tree)
		for _, h := range hosts {
			n := c.cluster.Hosts[h]
			j.workers, j.ips = append(j.workers, n.Name), append(j.ips, n.IP)
		}
		j.res.Start, j.res.Switch = c.clock(), tree.Top.Name
		j.setup, j.ready = make([]ctlMsg, len(hosts)), make([]ctlMsg, len(hosts))
		acts, err := c.adm.Admit(c.h.now(), c.h.now(), j.est.Job, j.workers)
		if err == nil && len(acts) > 0 {
			err = fmt.Errorf("admission acted on waiting jobs %v: FreeINA's requests never wait", acts)
		}
		if err != nil {
			c.h.fail(err)
			return
		}
		c.launch(j)
	}
}

// launch sends the job to its parameter server and workers.
func (c *controller) launch(j *cjob) {
	id := c.idOf(j)
	n := len(j.hosts)
	c.send(c.psIP[j.ps], &ctlMsg{Type: msgPSLaunch, Job: id, N: uint32(n), Values: uint32(j.values), Message: uint32(c.run.message)})
	// PS-path messages in flight per worker: the job's incast into the
	// PS's link held to half its buffer.
	psWin := 1
	if ps := c.run.s.Testbed.Topology().Node(j.ps); ps != nil {
		psWin = max(1, int(ps.Ports[0].Link.Buffer)/2/(n*c.run.message))
	}
	for i, ip := range j.ips {
		c.send(ip, &ctlMsg{Type: msgLaunch, Job: id, Rank: uint32(i), N: uint32(n), Succ: j.ips[(i+1)%n], Pred: j.ips[(i+n-1)%n],
			PS: c.psIP[j.ps], Values: uint32(j.values), K: uint32(c.run.k), Iterations: uint32(j.spec.Iterations),
			Compute: j.prof.Compute, Jitter: c.run.s.Net.Jitter, Seed: c.run.s.Seed, PSEstimate: j.est.Job.CommPSPath,
			Leader: i == 0, Message: uint32(c.run.message), PSWindow: uint32(psWin)})
	}
}

func (c *controller) idOf(j *cjob) uint32 {
	for i, o := range c.jobs {
		if o == j {
			return uint32(i)
		}
	}
	return 0
}

func (c *controller) send(to netip.Addr, m *ctlMsg) {
	ch := c.chans[to]
	if ch == nil {
		c.h.fail(fmt.Errorf("no control connection to %v for %v", to, m))
		return
	}
	ch.send(m)
}

// message handles a message from a host.
func (c *controller) message(ch *channel, m ctlMsg) {
	j := c.byID[m.Job]
	if j == nil || int(m.Rank) >= len(j.hosts) && m.Type != msgListening {
		c.h.fail(fmt.Errorf("control message %v from %v for no such job or rank", &m, ch.conn.Peer))
		return
	}
	switch m.Type {
	case msgListening:
		if j.listening++; j.listening == len(j.hosts)+1 {
			for _, ip := range j.ips {
				c.send(ip, &ctlMsg{Type: msgConnect, Job: m.Job})
			}
		}
	case msgSetup:
		j.setup[m.Rank] = m
		j.setups++
	case msgReady:
		// A worker may be ready for the next round before the others'
		// done of this one reach the controller.
		switch int(m.Round) {
		case j.round:
			j.ready[m.Rank] = m
			j.readies++
			c.maybeBegin(j, m.Job)
		case j.round + 1:
			j.early = append(j.early, m)
		default:
			c.h.fail(fmt.Errorf("job %d: ready for round %d in round %d", m.Job, m.Round, j.round))
		}
	case msgDone:
		if int(m.Round) != j.round {
			c.h.fail(fmt.Errorf("job %d: done for round %d in round %d", m.Job, m.Round, j.round))
			return
		}
		if j.stopped > 0 && !j.recovering {
			// A worker that finished the round before others stopped:
			// it reports stopped too, and is done again after recovering.
			return
		}
		if !m.OK && j.failed == "" {
			j.failed = fmt.Sprintf("worker %d: %s", m.Rank, m.Err)
		}
		if m.Rank == 0 {
			j.recoveredChunks = int(m.Recovered)
		}
		if j.dones++; j.dones == len(j.hosts) {
			c.endRound(j, m.Job)
		}
	case msgStopped:
		c.stopped(j, m)
	default:
		c.h.fail(fmt.Errorf("unexpected control message %v", &m))
	}
}

// stopped handles a worker's report that its INA part of the round is
// over with chunks failed: its sums overflowed (every worker reports
// that at the end of its INA part), or a connection gave up, which stops
// every worker. When all have stopped, the memory goes back and the
// workers recover, from the first chunk one of them lacks.
func (c *controller) stopped(j *cjob, m ctlMsg) {
	id := c.idOf(j)
	if int(m.Round) != j.round || j.path != pathINA || j.recovering || m.Got > uint32(j.values/c.run.k) {
		c.h.fail(fmt.Errorf("job %d: stopped in round %d with %d results, in round %d on path %d", j.spec.ID, m.Round, m.Got, j.round, j.path))
		return
	}
	if j.stopped == 0 {
		j.minGot = int(m.Got)
	}
	j.stopped++
	j.minGot = min(j.minGot, int(m.Got))
	if m.Errored && !j.stopSent {
		j.stopSent = true
		for _, ip := range j.ips {
			c.send(ip, &ctlMsg{Type: msgStop, Job: id, Round: uint32(j.round)})
		}
	}
	if j.stopped < len(j.hosts) {
		return
	}
	// Every worker is off the INA path: its memory goes back now.
	c.setUse(-float64(j.binding.Size))
	j.released = true
	if err := c.ictl.End(c.h.now(), j.spec.ID); err != nil {
		c.h.fail(err)
		return
	}
	j.recovering = true
	j.dones = 0
	for _, ip := range j.ips {
		c.send(ip, &ctlMsg{Type: msgRecover, Job: id, Round: uint32(j.round), From: uint32(j.minGot)})
	}
}

// ring gives the binder a job's INA connections, from the workers' setup
// reports: connection i from worker i to worker i+1.
func (c *controller) ring(job int, _ []string) ([]dp.Link, error) {
	j := c.jobByTrace(job)
	if j == nil || j.setups != len(j.hosts) {
		return nil, fmt.Errorf("job %d: the ring is not set up", job)
	}
	n := len(j.hosts)
	links := make([]dp.Link, n)
	for i, s := range j.setup {
		links[i] = dp.Link{Src: j.ips[i], Dst: j.ips[(i+1)%n], Sport: wire.Port, QPN: s.QPN, RKey: s.RKey, VA: s.VA}
	}
	return links, nil
}

// roundOf gives the binder the chunks of a job's round and its workers'
// PSNs of chunk 0, from their ready reports.
func (c *controller) roundOf(job int) (uint32, []uint32, error) {
	j := c.jobByTrace(job)
	if j == nil {
		return 0, nil, fmt.Errorf("job %d is not running", job)
	}
	psn := make([]uint32, len(j.hosts))
	for i, r := range j.ready {
		psn[i] = r.PSN
	}
	return uint32(j.values / c.run.k), psn, nil
}

func (c *controller) jobByTrace(id int) *cjob {
	for _, j := range c.jobs {
		if j.spec.ID == id && j.hosts != nil && j.res.Finish == 0 {
			return j
		}
	}
	return nil
}

// maybeBegin begins the job's round once every worker is ready for it
// and the last one has ended.
func (c *controller) maybeBegin(j *cjob, id uint32) {
	if j.readies == len(j.hosts) && j.dones == 0 && !j.begun {
		j.begun = true
		c.beginRound(j, id)
	}
}

// beginRound: every worker is ready. The hosts ask for memory (if the
// leader wants the INA path); the round goes on the INA path with the
// granted slots as its window, or on the PS path.
func (c *controller) beginRound(j *cjob, id uint32) {
	j.path, j.binding = pathPS, inasched.RingBinding
	window := 0
	if j.ready[0].Wants {
		act, err := c.adm.Begin(c.h.now(), c.h.now(), j.spec.ID)
		if err != nil {
			c.h.fail(err)
			return
		}
		j.binding = act.Binding
		if act.Binding.Mode == inasched.RDMA && act.Binding.INA() {
			j.path = pathINA
			window = act.Binding.Size / c.binder.Slot
		}
	}
	// The workers go once the switch holds the round's binding (the
	// round cannot end, nor its binding change, before they go).
	c.port.Then(func() {
		if c.h.failed != nil {
			return
		}
		if j.path == pathINA {
			c.setUse(float64(j.binding.Size))
		}
		n := len(j.hosts)
		j.goAt = c.h.now()
		for i, ip := range j.ips {
			c.send(ip, &ctlMsg{Type: msgGo, Job: id, Round: uint32(j.round), Path: uint32(j.path), Window: uint32(window),
				PredPSN: j.ready[(i+n-1)%n].PSN})
		}
	})
}

// endRound: every worker holds the round's sum and every packet of it is
// acknowledged; the memory is released.
func (c *controller) endRound(j *cjob, id uint32) {
	if j.failed != "" {
		c.h.fail(fmt.Errorf("job %d round %d: %s", j.spec.ID, j.round, j.failed))
		return
	}
	if j.path == pathINA && !j.released {
		c.setUse(-float64(j.binding.Size))
	}
	if err := c.ictl.End(c.h.now(), j.spec.ID); err != nil {
		c.h.fail(err)
		return
	}
	g := float64(j.prof.GradientBytes)
	j.res.Gradient += g
	// A recovered all-reduce counts as the PS path's: its chunks
	// re-aggregated there are that path's bytes, the rest the switch's.
	// (One whose connection gave up once every result was in recovered
	// no chunk: it stays the INA path's.)
	path := j.path
	if j.recovering && j.recoveredChunks > 0 {
		path = pathPS
		c.recovered++
		c.recoveredChunks += j.recoveredChunks
		share := float64(j.recoveredChunks) / float64(j.values/c.run.k)
		j.res.INA += g * (1 - share)
		j.res.Fallback += g * share * float64(len(j.hosts))
	} else if path == pathINA {
		j.res.INA += g
	} else {
		j.res.Fallback += g * float64(len(j.hosts))
	}
	c.rounds++
	c.byPath[path]++
	took := c.h.now() - j.goAt
	c.took[path] = append(c.took[path], took)
	if path == pathINA {
		j.res.INATime += took.Seconds()
		j.res.INARounds++
	} else {
		j.res.RingTime += took.Seconds() // the PS path: the flow model's "ring" of a job not aggregated in a switch
		j.res.RingRounds++
	}
	j.round++
	j.readies, j.dones, j.begun = 0, 0, false
	j.stopped, j.minGot, j.recoveredChunks = 0, 0, 0
	j.stopSent, j.recovering, j.released = false, false, false
	if j.round < j.spec.Iterations {
		for _, m := range j.early {
			j.ready[m.Rank] = m
			j.readies++
		}
		j.early = j.early[:0]
		c.maybeBegin(j, id)
		return
	}
	j.res.Finish = c.clock()
	c.last = max(c.last, j.res.Finish)
	for _, ip := range append([]netip.Addr{c.psIP[j.ps]}, j.ips...) {
		c.send(ip, &ctlMsg{Type: msgFinish, Job: id})
	}
	c.cluster.Release(j.hosts)
	c.cluster.Unhold(j.sw)
	c.psFree[j.sw.Name] = append(c.psFree[j.sw.Name], j.ps)
	c.countSwitch(j)
	if _, err := c.adm.Depart(c.h.now(), c.h.now(), j.spec.ID); err != nil {
		c.h.fail(err)
		return
	}
	// The job is done once its counters are read and the switch has
	// forgotten it.
	c.port.Then(func() {
		c.done++
		if c.done == len(c.jobs) {
			c.run.done.Store(true)
		}
	})
	c.admit()
}

// setUse records a change of the memory held, for mem_util and its
// series (as the flow model counts it: a range from its grant to its
// all-reduce's end).
func (c *controller) setUse(delta float64) {
	now := c.clock()
	if n := len(c.steps); n > 0 {
		c.area += c.used * (now - c.steps[n-1].X)
	}
	c.used += delta
	frac := 0.0
	if c.memSum > 0 {
		frac = c.used / float64(c.memSum)
	}
	c.steps = append(c.steps, analysis.Point{X: now, Y: frac})
}

// countSwitch reads a finishing job's counters on its switch (before its
// ring is removed and its switch job id handed out again: the port's
// calls run in order) and adds them up when they come back.
func (c *controller) countSwitch(j *cjob) {
	id, ok := c.binder.SwitchJob(j.sw.Name, j.spec.ID)
	if !ok {
		return // it never took the INA path
	}
	ctl := c.binder.Controller(j.sw.Name)
	var jc dp.JobCounters
	c.port.Call(func(ctx context.Context) (err error) {
		jc, err = ctl.Counters(ctx, id)
		return err
	}, func(err error) {
		if err != nil {
			c.h.fail(fmt.Errorf("job %d: counters on %s: %w", j.spec.ID, j.sw.Name, err))
			return
		}
		c.sw.Packets += jc.Packets
		c.sw.Results += jc.Results
		c.sw.Answers += jc.Answers
		c.sw.Held += jc.Held
		c.sw.Overflows += jc.Overflows
		for i, d := range jc.Drops {
			c.sw.Drops[i] += d
		}
	})
}
