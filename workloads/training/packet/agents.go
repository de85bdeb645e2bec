package packet

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/workloads/allreduce"
	"github.com/tracebed/tracebed/workloads/training/fabric"
)

// UDP ports of the packet-level agents.
const (
	NodePort = fabric.NodePort // node agents (one per worker host): the flow model's paths are hashed with it
	PSPort   = 41001           // parameter-server agents
	CtlPort  = 41002           // the controller
)

// gradient returns the value worker w contributes at index i of its
// iteration-it gradient of job: 20-bit signed, so that any sum of at most
// ina.MaxWorkers of them fits int32 exactly. Every worker can recompute
// every other worker's values, which is how it checks the all-reduced sum.
func gradient(seed uint64, job uint32, w, it int) func(i int) int32 {
	base := splitmix(seed ^ splitmix(uint64(job)<<40^uint64(w)<<32^uint64(it)))
	return func(i int) int32 { return int32(splitmix(base+uint64(i))&0xFFFFF) - 0x80000 }
}

func splitmix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
	x = (x ^ x>>27) * 0x94D049BB133111EB
	return x ^ x>>31
}

// computeDraws replays the flow model's compute-time draws of a job
// (engine.computeStart): per iteration one draw per worker, in worker
// order, from the job's own source. Worker rank keeps its own.
type computeDraws struct {
	rng     *rand.Rand
	n, rank int
	compute time.Duration
	jitter  float64
	drawn   []time.Duration
}

func newComputeDraws(seed uint64, job uint32, n, rank int, compute time.Duration, jitter float64) *computeDraws {
	return &computeDraws{rng: rand.New(rand.NewPCG(seed, uint64(job)<<1|1)), n: n, rank: rank, compute: compute, jitter: jitter}
}

// at returns the compute time of iteration it (iterations are drawn in
// order, as the worker reaches them).
func (d *computeDraws) at(it int) time.Duration {
	for len(d.drawn) <= it {
		var mine time.Duration
		for w := range d.n {
			f := 1.0
			if d.jitter > 0 {
				f += d.jitter * max(-3, min(3, d.rng.NormFloat64()))
			}
			c := time.Duration(math.Round(float64(d.compute) * max(f, 0.01)))
			if w == d.rank {
				mine = c
			}
		}
		d.drawn = append(d.drawn, mine)
	}
	return d.drawn[it]
}

// NodeStats count a node agent's work.
type NodeStats struct {
	Launches       uint64 // jobs run
	Rounds         uint64 // all-reduces done
	Verified       uint64 // all-reduced tensors found exact
	CtlSent        uint64 // control messages sent, retransmissions included
	CtlRetransmits uint64
	CtlMalformed   uint64
	Retransmits    uint64 // data packets retransmitted by the rings and streams of jobs no longer kept
}

// node is the agent on a worker host (a GPU server): it runs the worker of
// whichever job the controller places there — the same allreduce.Worker,
// Ring and Stream as every packet-level experiment — and asks the
// controller, before each all-reduce, how to do it.
type node struct {
	ctl   emulator.Addr
	env   emulator.Env
	job   *nodeJob
	prev  *nodeJob // the job before, kept for its peers' late packets
	buf   []byte
	Stats NodeStats

	unacked map[[2]uint32][]byte // done messages awaiting done-ack, by (job, round)
	retxOn  bool
	timeout time.Duration
}

// nodeJob is one job's worker on a node. It is the worker's Reducer: each
// all-reduce waits for the controller's grant, then runs on the ring or a
// stream through the switch.
type nodeJob struct {
	n       *node
	id      uint32
	rank    int
	l       launchBody
	worker  *allreduce.Worker
	ring    *allreduce.Ring
	streams map[streamKey]*allreduce.Stream
	last    *allreduce.Stream // the stream of the latest INA round
	peers   map[netip.Addr]bool
	draws   *computeDraws

	waiting bool
	round   uint32
	tensor  []int32
	done    func(error)
}

type streamKey struct {
	job    uint16
	window uint32
	target emulator.Addr
	remap  bool
}

func newNode(ctl emulator.Addr) *node {
	return &node{ctl: ctl, unacked: map[[2]uint32][]byte{}}
}

// Start implements emulator.Agent.
func (n *node) Start(env emulator.Env) { n.env = env }

// Recv implements emulator.Agent: control messages from the controller,
// ring packets from the job's peers, INA results from the switch or the
// parameter server.
func (n *node) Recv(from emulator.Addr, b []byte) {
	if from == n.ctl {
		m, err := parseCtl(b)
		if err != nil {
			n.Stats.CtlMalformed++
			return
		}
		n.control(m)
		return
	}
	if from.Port() == NodePort {
		// From a peer's node: a ring packet of the current job or of the
		// one before (its peers may still retransmit to it).
		for _, j := range [2]*nodeJob{n.job, n.prev} {
			if j != nil && j.ring != nil && j.peers[from.Addr()] && j.isRing(b) {
				j.ring.Recv(from, b)
				return
			}
		}
	}
	if n.job != nil && n.job.last != nil {
		n.job.last.Recv(from, b) // a result, from the switch or the parameter server
	}
}

// isRing reports whether b is a ring packet of this job: ring packets start
// with type 1 or 2 and carry the job's (16-bit) id at offset 2.
func (j *nodeJob) isRing(b []byte) bool {
	return len(b) >= 4 && (b[0] == 1 || b[0] == 2) && uint16(b[2])<<8|uint16(b[3]) == uint16(j.id)
}

func (n *node) send(to emulator.Addr, m *ctlMsg) {
	n.buf = appendCtl(n.buf[:0], m)
	n.env.Send(to, n.buf)
	n.Stats.CtlSent++
}

func (n *node) control(m ctlMsg) {
	switch m.Type {
	case msgLaunch:
		n.launch(m)
	case msgGrant:
		if j := n.job; j != nil && j.id == m.Job {
			j.grant(m)
		}
	case msgDoneAck:
		delete(n.unacked, [2]uint32{m.Job, m.Round})
	default:
		n.Stats.CtlMalformed++
	}
}

func (n *node) launch(m ctlMsg) {
	ack := ctlMsg{Type: msgLaunchAck, Job: m.Job, Rank: m.Rank}
	if j := n.job; j != nil && j.id == m.Job {
		n.send(n.ctl, &ack) // a retransmission: our ack was lost
		return
	}
	if j := n.job; j != nil && !j.worker.Finished {
		// The controller places one worker per host at a time; a launch
		// while a job runs is a controller bug. Refuse it loudly.
		n.sendDone(m.Job, 0, false, fmt.Sprintf("host busy with job %d", j.id))
		return
	}
	l := m.Launch
	n.timeout = l.Timeout
	j := &nodeJob{n: n, id: m.Job, rank: int(m.Rank), l: l, streams: map[streamKey]*allreduce.Stream{}, peers: map[netip.Addr]bool{}}
	for i, p := range l.Peers {
		if i != j.rank {
			j.peers[p.Addr()] = true
		}
	}
	if len(l.Peers) > 1 {
		r, err := allreduce.NewRing(allreduce.RingConfig{Job: uint16(m.Job), Rank: j.rank, Peers: l.Peers, K: int(l.K), Window: int(l.RingWindow), Timeout: l.RingTimeout})
		if err != nil {
			n.sendDone(m.Job, 0, true, err.Error())
			return
		}
		j.ring = r
		r.Start(n.env)
	}
	j.draws = newComputeDraws(l.Seed, m.Job, len(l.Peers), j.rank, l.Compute, l.Jitter)
	w := &allreduce.Worker{
		Reducer: j, Tensor: make([]int32, l.Elements), Iterations: int(l.Iterations),
		ComputeTime: j.draws.at,
		Fill: func(it int, t []int32) {
			g := gradient(l.Seed, m.Job, j.rank, it)
			for i := range t {
				t[i] = g(i)
			}
		},
		Check: j.check,
		Done: func(_ time.Duration, err error) {
			if err != nil {
				// The iteration that failed: those before it ended.
				n.sendDone(m.Job, uint32(len(j.worker.IterationEnd)), true, err.Error())
			}
		},
	}
	j.worker = w
	if n.prev != nil {
		n.Stats.Retransmits += n.prev.retransmits() // its counters go with it
	}
	n.prev = n.job
	n.job = j
	n.Stats.Launches++
	n.send(n.ctl, &ack)
	w.Start(n.env)
}

// check verifies the all-reduced tensor of iteration it against the sum of
// every worker's gradient, then reports the round done.
func (j *nodeJob) check(it int, t []int32) error {
	n := len(j.l.Peers)
	gs := make([]func(int) int32, n)
	for w := range n {
		gs[w] = gradient(j.l.Seed, j.id, w, it)
	}
	for i, v := range t {
		var sum int32
		for _, g := range gs {
			sum += g(i)
		}
		if v != sum {
			return fmt.Errorf("value %d of the all-reduced gradient is %d, want %d: %w", i, v, sum, errInexact)
		}
	}
	j.n.Stats.Verified++
	j.n.Stats.Rounds++
	j.n.sendDone(j.id, uint32(it), it == int(j.l.Iterations)-1, "")
	return nil
}

var errInexact = fmt.Errorf("aggregate not exact")

// sendDone reports a round done (reliably: until done-ack).
func (n *node) sendDone(job, round uint32, last bool, errText string) {
	m := ctlMsg{Type: msgDone, Job: job, Round: round, At: n.env.Now(), Last: last, Err: errText}
	if n.job != nil && n.job.id == job {
		m.Rank = uint8(n.job.rank)
	}
	b := appendCtl(nil, &m)
	n.unacked[[2]uint32{job, round}] = b
	n.env.Send(n.ctl, b)
	n.Stats.CtlSent++
	n.armRetx()
}

func (n *node) armRetx() {
	if n.retxOn {
		return
	}
	n.retxOn = true
	n.env.After(n.retxTimeout(), n.retx)
}

func (n *node) retxTimeout() time.Duration {
	if n.timeout > 0 {
		return n.timeout
	}
	return 10 * time.Millisecond
}

func (n *node) retx() {
	n.retxOn = false
	if len(n.unacked) == 0 {
		return
	}
	keys := make([][2]uint32, 0, len(n.unacked))
	for k := range n.unacked {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]uint32) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	for _, k := range keys { // in a fixed order: runs on sim are reproducible
		n.env.Send(n.ctl, n.unacked[k])
		n.Stats.CtlSent++
		n.Stats.CtlRetransmits++
	}
	n.armRetx()
}

// Start implements allreduce.Reducer; the node's environment is the job's.
func (j *nodeJob) Start(emulator.Env) {}

// Recv implements allreduce.Reducer; the node dispatches packets itself.
func (j *nodeJob) Recv(emulator.Addr, []byte) {}

// AllReduce implements allreduce.Reducer: ask the controller how.
func (j *nodeJob) AllReduce(tensor []int32, round uint32, done func(error)) {
	if len(j.l.Peers) == 1 {
		done(nil) // nothing to all-reduce with
		return
	}
	j.waiting, j.round, j.tensor, j.done = true, round, tensor, done
	j.ready(false)
}

// ready asks for the grant of the current round, again every timeout
// until it comes (the controller may keep a job waiting for its pool).
func (j *nodeJob) ready(again bool) {
	if !j.waiting {
		return
	}
	j.n.send(j.n.ctl, &ctlMsg{Type: msgReady, Job: j.id, Rank: uint8(j.rank), Round: j.round})
	if again {
		j.n.Stats.CtlRetransmits++
	}
	round := j.round
	j.n.env.After(j.l.Timeout, func() {
		if j.waiting && j.round == round && j.n.job == j {
			j.ready(true)
		}
	})
}

// grant starts the all-reduce the controller granted.
func (j *nodeJob) grant(m ctlMsg) {
	if !j.waiting || m.Round != j.round {
		return // a duplicate grant
	}
	j.waiting = false
	var red allreduce.Reducer
	switch m.Mode {
	case grantRing:
		red = j.ring
	default:
		key := streamKey{m.SwJob, m.Window, m.Target, m.Mode == grantRemap}
		s := j.streams[key]
		if s == nil {
			var err error
			s, err = allreduce.NewStream(allreduce.StreamConfig{Job: m.SwJob, Worker: uint8(j.rank), Workers: uint8(len(j.l.Peers)),
				Target: m.Target, Window: int(m.Window), K: int(j.l.K), Timeout: j.l.Timeout, Remap: key.remap})
			if err != nil {
				j.done(err)
				return
			}
			s.Start(j.n.env)
			j.streams[key] = s
		}
		j.last = s
		red = s
	}
	red.AllReduce(j.tensor, j.round, j.done)
}

// retransmits sums the job's data retransmissions.
func (j *nodeJob) retransmits() uint64 {
	var r uint64
	if j.ring != nil {
		r += j.ring.Stats.Retransmits
	}
	for _, s := range j.streams {
		r += s.Stats.Retransmits
	}
	return r
}

// psAgent is the agent on a parameter-server host: an allreduce.PS that
// the controller tells which switch job ids to aggregate for.
type psAgent struct {
	ctl   emulator.Addr
	env   emulator.Env
	ps    *allreduce.PS
	jobs  map[uint16]uint32 // switch job id → trace job
	stats map[uint32]allreduce.PSJobStats
	buf   []byte
	bad   uint64
}

func newPSAgent(ctl emulator.Addr) *psAgent {
	ps, _ := allreduce.NewPS()
	return &psAgent{ctl: ctl, ps: ps, jobs: map[uint16]uint32{}, stats: map[uint32]allreduce.PSJobStats{}}
}

// Start implements emulator.Agent.
func (p *psAgent) Start(env emulator.Env) {
	p.env = env
	p.ps.Start(env)
}

// Recv implements emulator.Agent.
func (p *psAgent) Recv(from emulator.Addr, b []byte) {
	if from != p.ctl {
		p.ps.Recv(from, b)
		return
	}
	m, err := parseCtl(b)
	if err != nil {
		p.bad++
		return
	}
	switch m.Type {
	case msgPSAdd:
		sw := m.PS.SwJob
		if t, ok := p.jobs[sw]; !ok || t != m.Job {
			if ok {
				p.remove(sw)
			}
			if err := p.ps.Add(allreduce.PSJob{Job: sw, Workers: m.PS.Workers, Elements: int(m.PS.Elements), K: int(m.PS.K), Multicast: m.PS.Multicast,
				Republish: m.PS.Flags&psRepublish != 0, Remap: m.PS.Flags&psRemap != 0, Window: int(m.PS.Window), Size: int(m.PS.Size)}); err != nil {
				p.bad++
				return
			}
			p.jobs[sw] = m.Job
		}
	case msgPSRemove:
		if t, ok := p.jobs[m.PS.SwJob]; ok && t == m.Job {
			p.remove(m.PS.SwJob)
		}
	default:
		p.bad++
		return
	}
	p.buf = appendCtl(p.buf[:0], &ctlMsg{Type: msgPSAck, Job: m.Job, Round: uint32(m.Type), PS: psBody{SwJob: m.PS.SwJob}})
	p.env.Send(p.ctl, p.buf)
}

func (p *psAgent) remove(sw uint16) {
	t := p.jobs[sw]
	st, _ := p.ps.Remove(sw)
	p.stats[t] = addPSStats(p.stats[t], st)
	delete(p.jobs, sw)
}

// jobStats returns what the PS did for a trace job, over every switch job
// id it had.
func (p *psAgent) jobStats(job uint32) allreduce.PSJobStats {
	st := p.stats[job]
	for sw, t := range p.jobs {
		if t == job {
			cur, _ := p.ps.JobStats(sw)
			st = addPSStats(st, cur)
		}
	}
	return st
}

func addPSStats(a, b allreduce.PSJobStats) allreduce.PSJobStats {
	return allreduce.PSJobStats{Packets: a.Packets + b.Packets, Collided: a.Collided + b.Collided,
		FromSwitch: a.FromSwitch + b.FromSwitch, Completed: a.Completed + b.Completed}
}
