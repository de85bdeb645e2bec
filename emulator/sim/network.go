package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"time"
	"unsafe"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

// Packet is a frame in flight. It fits one cache line: the queues of a
// busy link hold many, and each is read again when it leaves.
type Packet struct {
	Data []byte
	prio int
	at   Time   // arrival time while on the wire
	seq  uint64 // event sequence number of that arrival
	// A frame that is an event of its own (see fire) says where it goes:
	// to the owner of port to, which it reaches outside the link's wire
	// queue (duplicated, reordered), or whose pipeline latency it leaves
	// (a switch's ingress port), or to the host whose NIC is to, looped
	// back.
	kind eventKind
	to   *port
}

// eventKind is what a frame does when it fires as an event.
type eventKind uint8

const (
	evArrival  eventKind = iota + 1 // reaches to's owner, from the link
	evProcess                       // enters the pipeline of to's owner, a switch
	evLoopback                      // reaches to's owner, a host, from itself
)

// fire delivers a frame scheduled as an event of its own.
func (pkt *Packet) fire(*Sim) {
	kind, to := pkt.kind, pkt.to
	pkt.kind, pkt.to = 0, nil
	switch kind {
	case evArrival:
		to.owner.receive(to, pkt)
	case evProcess:
		to.owner.(*SwitchNode).process(to.tp.Num, pkt)
	default:
		to.owner.receive(nil, pkt)
	}
}

// Options configure a Network.
type Options struct {
	// Seed seeds every random source of the run: agents' Env.Rand and the
	// links' loss, duplication and reordering.
	Seed uint64
	// Pipeline builds the data plane of each switch from the switch and
	// its shortest-path routes (topologies.Topology.Routes). The network
	// knows no data plane of its own: a topology with switches needs one
	// (plain IPv4 forwarding is p4/fwd's SimPipeline; a
	// dataplane.Program's Pipeline method fits too).
	Pipeline func(sw *topologies.Node, routes topologies.RouteTable) (emulator.Pipeline, error)
	// HostBuffer limits each host's NIC queue in bytes; 0 means unlimited,
	// which models a sender that blocks on a full socket buffer instead of
	// losing data.
	HostBuffer units.Bytes
	// ControlLatency is the modelled time of a control-plane call an
	// agent makes through its Env (emulator.Caller): a P4Runtime round
	// trip to a switch. The call runs against the in-process switch, and
	// its completion reaches the agent, this long after it was made; 0
	// runs both at the same instant, after the events already due.
	ControlLatency time.Duration
}

// Network is a topology brought to life on a Sim.
type Network struct {
	Sim      *Sim
	Topology *topologies.Topology

	opts     Options
	hosts    map[string]*hostNode
	switches map[string]*SwitchNode
	byIP     map[netip.Addr]*hostNode
	free     []*Packet
	frames   [len(frameClasses)][][]byte // frame buffers to reuse, by size class
}

// frameClasses are the capacities of the frame buffers hosts send from:
// a buffer that comes back (see recycle) serves a later frame of its
// class. The largest holds a jumbo frame.
var frameClasses = [...]int{128, 512, 2048, 4608, 9216}

// maxFreeFrames bounds each class's list of buffers to reuse.
const maxFreeFrames = 4096

// frameBuf returns an empty buffer with room for n bytes.
func (n *Network) frameBuf(size int) []byte {
	for c, cls := range frameClasses {
		if size > cls {
			continue
		}
		if k := len(n.frames[c]); k > 0 {
			b := n.frames[c][k-1]
			n.frames[c] = n.frames[c][:k-1]
			return b[:0]
		}
		return make([]byte, 0, cls)
	}
	return make([]byte, 0, size)
}

// recycle takes back the buffer of a frame that nothing refers to any
// more (see the ownership rules of package emulator): one lost on a link,
// dropped at a full queue, dropped by a pipeline, or delivered to an
// agent, whose Recv only borrows it. Only buffers of exactly a class's
// capacity — those frameBuf made — are kept: a frame a pipeline built
// itself (perhaps a part of a larger allocation) is left to the garbage
// collector.
func (n *Network) recycle(b []byte) {
	for c, cls := range frameClasses {
		if cap(b) == cls {
			if len(n.frames[c]) < maxFreeFrames {
				n.frames[c] = append(n.frames[c], b)
			}
			return
		}
	}
}

// NewNetwork builds the network of topo on s.
func NewNetwork(s *Sim, topo *topologies.Topology, opts Options) (*Network, error) {
	n := &Network{
		Sim: s, Topology: topo, opts: opts,
		hosts:    map[string]*hostNode{},
		switches: map[string]*SwitchNode{},
		byIP:     map[netip.Addr]*hostNode{},
	}
	routes := topo.Routes()
	ports := map[*topologies.Port]*port{}
	for _, node := range topo.Nodes {
		for _, tp := range node.Ports {
			ports[tp] = &port{net: n, tp: tp}
		}
	}
	for _, l := range topo.Links {
		for _, dir := range [2][2]*topologies.Port{{l.A, l.B}, {l.B, l.A}} {
			out, in := ports[dir[0]], ports[dir[1]]
			out.peer = in
			out.rate = l.Rate
			out.delay = FromDuration(l.Delay)
			out.loss, out.dup, out.reorder = l.Loss, l.Duplicate, l.Reorder
			if out.loss > 0 || out.dup > 0 || out.reorder > 0 {
				out.rng = rand.New(rand.NewPCG(opts.Seed, uint64(l.Index)*2+uint64(boolInt(dir[0] == l.B))+0x6c696e6b))
			}
		}
	}
	for _, node := range topo.Nodes {
		if node.IsHost() {
			h := &hostNode{net: n, node: node, agents: map[uint16]*hostEnv{}}
			h.nic = ports[node.Ports[0]]
			h.nic.limit = int64(opts.HostBuffer)
			h.nic.queues = make([]fifo, 1)
			h.nic.qbytes = make([]int64, 1)
			h.nic.owner = h
			n.hosts[node.Name] = h
			n.byIP[node.IP] = h
			continue
		}
		sw := &SwitchNode{net: n, Node: node, latency: FromDuration(node.Latency)}
		sw.ports = make([]*port, len(node.Ports)+1)
		for _, tp := range node.Ports {
			p := ports[tp]
			p.limit = int64(tp.Link.Buffer)
			p.queues = make([]fifo, node.Queues)
			p.qbytes = make([]int64, node.Queues)
			p.owner = sw
			sw.ports[tp.Num] = p
		}
		if opts.Pipeline == nil {
			return nil, fmt.Errorf("switch %s: no data plane: sim.Options.Pipeline is nil", node.Name)
		}
		pl, err := opts.Pipeline(node, routes[node.Name])
		if err != nil {
			return nil, fmt.Errorf("switch %s: %w", node.Name, err)
		}
		sw.Pipeline = pl
		n.switches[node.Name] = sw
	}
	return n, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Switch returns the named switch, or nil.
func (n *Network) Switch(name string) *SwitchNode { return n.switches[name] }

// Attach binds agent to UDP port on the named host and schedules its Start at
// the current time. It returns the agent's environment.
func (n *Network) Attach(host string, udpPort uint16, agent emulator.Agent) (emulator.Env, error) {
	h := n.hosts[host]
	if h == nil {
		return nil, fmt.Errorf("attach: %q is not a host of topology %s", host, n.Topology.Name)
	}
	if _, taken := h.agents[udpPort]; taken {
		return nil, fmt.Errorf("attach: port %d on %s is taken", udpPort, host)
	}
	local := netip.AddrPortFrom(h.node.IP, udpPort)
	hash := fnv.New64a()
	b, _ := local.MarshalBinary()
	hash.Write(b)
	e := &hostEnv{host: h, local: local, agent: agent, rng: rand.New(rand.NewPCG(n.opts.Seed, hash.Sum64()))}
	h.agents[udpPort] = e
	n.Sim.At(n.Sim.now, func() { agent.Start(e) })
	return e, nil
}

// PortStats are the counters of one egress port.
type PortStats struct {
	TxPackets, TxBytes uint64
	Drops              uint64 // drop-tail: the queue was full
	Lost, Duplicated   uint64 // injected impairments
	Reordered          uint64
	MaxQueueBytes      int64 // largest backlog seen, over all queues, excluding the frame on the wire
	QueueBytes         int64 // current backlog
}

// Stats returns the counters of the egress port of node towards its port
// number num.
func (n *Network) Stats(node string, num int) (PortStats, error) {
	if h := n.hosts[node]; h != nil && num == 1 {
		return h.nic.stats(), nil
	}
	if sw := n.switches[node]; sw != nil && num >= 1 && num < len(sw.ports) {
		return sw.ports[num].stats(), nil
	}
	return PortStats{}, fmt.Errorf("stats: no port %s:%d", node, num)
}

// HostStats are the receive counters of a host.
type HostStats struct {
	Delivered  uint64
	NoListener uint64 // no agent on the destination port
	Malformed  uint64 // not a UDP/IPv4 frame for this host
	// BadChecksum counts datagrams whose UDP checksum is present and
	// wrong: dropped, as a host's stack drops them (a zero checksum means
	// none, which IPv4 allows).
	BadChecksum uint64
}

// HostStats returns the receive counters of a host.
func (n *Network) HostStats(host string) HostStats {
	if h := n.hosts[host]; h != nil {
		return h.stats
	}
	return HostStats{}
}

// Tap calls f with every frame that starts transmission on the egress port
// num of node (for captures). f must not keep or modify the frame.
func (n *Network) Tap(node string, num int, f func(t Time, frame []byte)) error {
	if h := n.hosts[node]; h != nil && num == 1 {
		h.nic.tap = f
		return nil
	}
	if sw := n.switches[node]; sw != nil && num >= 1 && num < len(sw.ports) {
		sw.ports[num].tap = f
		return nil
	}
	return fmt.Errorf("tap: no port %s:%d", node, num)
}

func (n *Network) packet(data []byte, prio int) *Packet {
	var p *Packet
	if k := len(n.free); k > 0 {
		p = n.free[k-1]
		n.free = n.free[:k-1]
	} else {
		p = new(Packet)
	}
	p.Data, p.prio = data, prio
	return p
}

func (n *Network) release(p *Packet) {
	p.Data = nil
	n.free = append(n.free, p)
}

// receiver is a node that takes frames off a link.
type receiver interface {
	receive(in *port, p *Packet)
}

// port is one direction of a link: the egress queues of its sending side,
// the wire, and the receiving side's ingress.
type port struct {
	net   *Network
	tp    *topologies.Port
	owner receiver // node that owns this port (receives what arrives on it)
	peer  *port    // the other end, where transmitted frames arrive

	rate    units.Rate
	delay   Time
	limit   int64 // bytes per queue; 0 = unlimited
	queues  []fifo
	qbytes  []int64
	backlog int64
	busy    bool

	// wire holds the frames propagating on the link in arrival order: the
	// delay is constant, so frames arrive in the order they left, and only
	// the first needs to be in the event heap (reordered and duplicated
	// frames bypass it). This keeps the heap as small as the number of
	// links, not of frames in flight.
	wire fifo
	// txing is the frame being serialized while busy: the event of its
	// end (fire) finds it here.
	txing *Packet
	// The transmission time of the last frame size asked for: the frames
	// of a flow have few sizes, and the time takes a 128-bit division.
	txSize int
	txDur  Time

	loss, dup, reorder float64
	rng                *rand.Rand
	tap                func(Time, []byte)

	txPackets, txBytes, drops, lost, duplicated, reordered uint64
	maxBacklog                                             int64
}

func (p *port) stats() PortStats {
	return PortStats{
		TxPackets: p.txPackets, TxBytes: p.txBytes, Drops: p.drops,
		Lost: p.lost, Duplicated: p.duplicated, Reordered: p.reordered,
		MaxQueueBytes: p.maxBacklog, QueueBytes: p.backlog,
	}
}

// enqueue queues pkt for transmission at priority prio, or drops it when its
// queue is full (drop-tail). An idle port starts sending at once.
func (p *port) enqueue(pkt *Packet) {
	if !p.busy {
		p.transmit(pkt)
		return
	}
	q := min(pkt.prio, len(p.queues)-1)
	if q < 0 {
		q = 0
	}
	size := int64(len(pkt.Data))
	if p.limit > 0 && p.qbytes[q]+size > p.limit {
		p.drops++
		p.net.recycle(pkt.Data)
		p.net.release(pkt)
		return
	}
	p.queues[q].push(pkt)
	p.qbytes[q] += size
	p.backlog += size
	p.maxBacklog = max(p.maxBacklog, p.backlog)
}

// txTime returns how long a frame of size bytes occupies the link.
func (p *port) txTime(size int) Time {
	if size != p.txSize || p.txDur == 0 {
		p.txSize, p.txDur = size, Time(units.TransmitTime(units.Bytes(size), p.rate))
	}
	return p.txDur
}

func (p *port) transmit(pkt *Packet) {
	p.busy = true
	p.txPackets++
	p.txBytes += uint64(len(pkt.Data))
	if p.tap != nil {
		p.tap(p.net.Sim.now, pkt.Data)
	}
	tx := p.txTime(len(pkt.Data))
	p.txing = pkt
	p.net.Sim.schedule(p.net.Sim.now+tx, p)
}

// fire runs when the frame being sent has been fully serialized onto the
// wire.
func (p *port) fire(s *Sim) {
	pkt := p.txing
	p.txing = nil
	p.propagate(s, pkt)
	for q := len(p.queues) - 1; q >= 0; q-- {
		if next := p.queues[q].pop(); next != nil {
			size := int64(len(next.Data))
			p.qbytes[q] -= size
			p.backlog -= size
			p.transmit(next)
			return
		}
	}
	p.busy = false
}

// propagate schedules pkt's arrival at the far end, applying impairments.
func (p *port) propagate(s *Sim, pkt *Packet) {
	at := s.now + p.delay
	if p.rng != nil {
		if p.loss > 0 && p.rng.Float64() < p.loss {
			p.lost++
			p.net.recycle(pkt.Data)
			p.net.release(pkt)
			return
		}
		if p.dup > 0 && p.rng.Float64() < p.dup {
			p.duplicated++
			c := append(p.net.frameBuf(len(pkt.Data)), pkt.Data...)
			d := p.net.packet(c, pkt.prio)
			d.kind, d.to = evArrival, p.peer
			s.schedule(at, d)
		}
		if p.reorder > 0 && p.rng.Float64() < p.reorder {
			// Hold the frame back by 1 to 16 of its own transmission times,
			// so that frames sent right after it overtake it.
			p.reordered++
			tx := p.txTime(len(pkt.Data))
			pkt.kind, pkt.to = evArrival, p.peer
			s.schedule(at+tx*Time(1+p.rng.IntN(16)), pkt)
			return
		}
	}
	// The arrival takes its place in the event order now, as if it were
	// scheduled now, even though it enters the heap only when it reaches
	// the head of the wire.
	if p.wire.size == 0 {
		s.schedule(at, wireHead{p})
	} else {
		s.seq++
	}
	pkt.at, pkt.seq = at, s.seq
	p.wire.push(pkt)
}

// wireHead is the event of the first frame on a link's wire arriving.
type wireHead struct{ p *port }

func (w wireHead) fire(s *Sim) {
	p := w.p
	pkt := p.wire.pop()
	if next := p.wire.peek(); next != nil {
		s.push(event{at: next.at, seq: next.seq, h: w})
	}
	p.peer.owner.receive(p.peer, pkt)
}

// fifo is a queue of packets backed by a ring buffer whose length is a
// power of two, so that an index wraps with a mask, not a division.
type fifo struct {
	buf        []*Packet
	head, size int
}

func (q *fifo) push(p *Packet) {
	if q.size == len(q.buf) {
		nb := make([]*Packet, max(16, 2*len(q.buf)))
		for i := range q.size {
			nb[i] = q.buf[(q.head+i)&(len(q.buf)-1)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.size)&(len(q.buf)-1)] = p
	q.size++
}

func (q *fifo) peek() *Packet {
	if q.size == 0 {
		return nil
	}
	return q.buf[q.head]
}

func (q *fifo) pop() *Packet {
	if q.size == 0 {
		return nil
	}
	p := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.size--
	return p
}

// SwitchNode is a switch in the simulated network.
type SwitchNode struct {
	Node     *topologies.Node
	Pipeline emulator.Pipeline

	net     *Network
	ports   []*port // by port number; ports[0] is unused
	latency Time
	// BadPort counts frames a pipeline emitted on a port that does not exist.
	BadPort uint64

	// The frame in the pipeline (its buffer's address range), and whether
	// the pipeline emitted it (or a part of it): if not, it dropped it,
	// and its buffer is recycled when Process returns.
	inLo, inHi uintptr
	inEmitted  bool
}

func (sw *SwitchNode) receive(in *port, pkt *Packet) {
	if sw.latency > 0 {
		pkt.kind, pkt.to = evProcess, in
		sw.net.Sim.schedule(sw.net.Sim.now+sw.latency, pkt)
		return
	}
	sw.process(in.tp.Num, pkt)
}

func (sw *SwitchNode) process(in int, pkt *Packet) {
	data := pkt.Data
	sw.net.release(pkt)
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	sw.inLo, sw.inHi, sw.inEmitted = lo, lo+uintptr(cap(data)), false
	sw.Pipeline.Process(sw.net.Sim.now.Duration(), in, data, sw)
	if !sw.inEmitted {
		sw.net.recycle(data)
	}
	sw.inLo, sw.inHi = 0, 0
}

// Emit implements emulator.Emitter.
func (sw *SwitchNode) Emit(port int, prio int, f []byte) {
	if p := uintptr(unsafe.Pointer(unsafe.SliceData(f))); p >= sw.inLo && p < sw.inHi {
		sw.inEmitted = true
	}
	if port < 1 || port >= len(sw.ports) {
		sw.BadPort++
		return
	}
	sw.ports[port].enqueue(sw.net.packet(f, prio))
}

// NewFrame implements emulator.FramePool: the buffers frames are built in.
func (sw *SwitchNode) NewFrame(n int) []byte { return sw.net.frameBuf(n) }

// hostNode is a host: one NIC and the agents bound to its UDP ports.
type hostNode struct {
	net    *Network
	node   *topologies.Node
	nic    *port
	agents map[uint16]*hostEnv
	last   *hostEnv // the agent that received last
	stats  HostStats
}

func (h *hostNode) receive(_ *port, pkt *Packet) {
	data := pkt.Data
	h.net.release(pkt)
	var hdr frame.UDP
	payload, err := hdr.Decode(data)
	if err != nil || hdr.Dst.Addr() != h.node.IP {
		h.stats.Malformed++
		return
	}
	if frame.HasUDPChecksum(data) {
		if _, ok := frame.UDPChecksum(data); !ok {
			h.stats.BadChecksum++
			return
		}
	}
	e := h.last
	if port := hdr.Dst.Port(); e == nil || e.local.Port() != port {
		e = h.agents[port]
		h.last = e
	}
	if e == nil {
		h.stats.NoListener++
		return
	}
	h.stats.Delivered++
	e.agent.Recv(hdr.Src, payload)
	h.net.recycle(data) // Recv only borrowed it
}

// hostEnv is an agent's emulator.Env on the simulated network.
type hostEnv struct {
	host  *hostNode
	local netip.AddrPort
	agent emulator.Agent
	rng   *rand.Rand

	// The headers of the frames to the destinations sent to lately.
	tpl     [sendTemplates]destTemplate
	tplNext int
	noSum   bool // OmitUDPChecksum was called
}

// sendTemplates is how many destinations an agent's frame headers are
// kept for: most agents send to one or a few peers.
const sendTemplates = 4

type destTemplate struct {
	to  emulator.Addr
	tpl frame.Template
}

// template returns the frame headers of datagrams to to.
func (e *hostEnv) template(to emulator.Addr) *frame.Template {
	for i := range e.tpl {
		if d := &e.tpl[i]; d.to == to && to.IsValid() {
			return &d.tpl
		}
	}
	h := e.host
	d := &e.tpl[e.tplNext]
	e.tplNext = (e.tplNext + 1) % sendTemplates
	*d = destTemplate{to: to, tpl: frame.NewTemplate(frame.UDP{SrcMAC: h.node.MAC, DstMAC: h.nic.peer.tp.MAC, Src: e.local, Dst: to})}
	return &d.tpl
}

func (e *hostEnv) Now() time.Duration   { return e.host.net.Sim.now.Duration() }
func (e *hostEnv) Local() emulator.Addr { return e.local }
func (e *hostEnv) Rand() *rand.Rand     { return e.rng }

func (e *hostEnv) After(d time.Duration, f func()) emulator.Timer {
	return e.host.net.Sim.After(FromDuration(d), f)
}

// Post implements emulator.Poster: f runs at the current time, after the
// events already scheduled for it. Every agent of a simulation runs on the
// simulation's goroutine, so any of them may call it.
func (e *hostEnv) Post(f func()) bool {
	e.host.net.Sim.At(e.host.net.Sim.now, f)
	return true
}

// Call implements emulator.Caller: op runs on the simulation's goroutine,
// Options.ControlLatency after the call, and done right after it, in the
// same event. Every call of a run has the same latency, so an agent's
// calls complete in the order it made them.
func (e *hostEnv) Call(op func(ctx context.Context) error, done func(err error)) {
	s := e.host.net.Sim
	s.At(s.now+FromDuration(e.host.net.opts.ControlLatency), func() { done(op(context.Background())) })
}

// Send builds a UDP/IPv4 frame and queues it on the host's NIC. A datagram
// to the host itself is delivered without touching the network.
func (e *hostEnv) Send(to emulator.Addr, payload []byte) {
	e.SendGather(to, payload, nil, nil)
}

// SendGather implements emulator.GatherSender.
func (e *hostEnv) SendGather(to emulator.Addr, head, body, tail []byte) {
	h := e.host
	n := len(head) + len(body) + len(tail)
	tpl := e.template(to)
	data := tpl.AppendHeaders(h.net.frameBuf(frame.HeaderLen+n), n)
	data = append(append(append(data, head...), body...), tail...)
	if !e.noSum {
		tpl.SetChecksum(data)
	}
	if to.Addr() == h.node.IP {
		pkt := h.net.packet(data, 0)
		pkt.kind, pkt.to = evLoopback, h.nic
		h.net.Sim.schedule(h.net.Sim.now, pkt)
		return
	}
	h.nic.enqueue(h.net.packet(data, 0))
}

// OmitUDPChecksum implements emulator.ChecksumOmitter: the agent's
// frames carry UDP checksum 0, which hosts do not check.
func (e *hostEnv) OmitUDPChecksum() { e.noSum = true }

var (
	_ emulator.Poster          = (*hostEnv)(nil)
	_ emulator.ChecksumOmitter = (*hostEnv)(nil)
	_ emulator.GatherSender    = (*hostEnv)(nil)
	_ emulator.Caller          = (*hostEnv)(nil)
)
