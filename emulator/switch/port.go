//go:build linux && !nonetns

package goswitch

import (
	"math/rand/v2"

	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

// PortStats are the counters of one switch port.
type PortStats struct {
	IO                 string // the port's socket: "xdp", "afpacket", or "" (Config.Open's own)
	RxPackets, RxBytes uint64 // frames received (before impairments)
	TxPackets, TxBytes uint64 // frames handed to the link
	QueueDrops         uint64 // drop-tail: the egress queue was full
	Lost, Duplicated   uint64 // injected impairments, both directions
	Reordered          uint64
	RxOversize         uint64 // longer than Config.MaxFrame: dropped
	RxErrors           uint64 // failed receive calls
	RxKernelDrops      uint64 // dropped by the kernel: the switch fell behind
	TxErrors           uint64 // frames the kernel refused (e.g. over the MTU)
	MaxQueueBytes      int64  // largest backlog seen, all queues
	QueueBytes         int64  // current backlog
}

// sub returns the counts of p since e; queue levels are p's.
func (p PortStats) sub(e PortStats) PortStats {
	p.RxPackets -= e.RxPackets
	p.RxBytes -= e.RxBytes
	p.TxPackets -= e.TxPackets
	p.TxBytes -= e.TxBytes
	p.QueueDrops -= e.QueueDrops
	p.Lost -= e.Lost
	p.Duplicated -= e.Duplicated
	p.Reordered -= e.Reordered
	p.RxOversize -= e.RxOversize
	p.RxErrors -= e.RxErrors
	p.RxKernelDrops -= e.RxKernelDrops
	p.TxErrors -= e.TxErrors
	return p
}

// pkt is a frame waiting in a queue or a delay line.
type pkt struct {
	data []byte
	at   int64 // release time, ns since the switch started
	port int   // ingress port (ingress delay line only)
	prio int
}

// fifo is a queue of frames.
type fifo struct {
	buf  []pkt
	head int
}

func (q *fifo) len() int { return len(q.buf) - q.head }

func (q *fifo) push(p pkt) { q.buf = append(q.buf, p) }

func (q *fifo) peek() *pkt { return &q.buf[q.head] }

func (q *fifo) pop() pkt {
	p := q.buf[q.head]
	q.buf[q.head] = pkt{}
	q.head++
	if q.head == len(q.buf) {
		q.buf, q.head = q.buf[:0], 0
	} else if q.head > 1024 && q.head*2 > len(q.buf) {
		n := copy(q.buf, q.buf[q.head:])
		clear(q.buf[n:])
		q.buf, q.head = q.buf[:n], 0
	}
	return p
}

// delayLine holds frames until their release time. Frames mostly arrive in
// release order (a constant delay); a reordered frame is inserted in place.
type delayLine struct{ q fifo }

func (d *delayLine) push(p pkt) {
	d.q.push(p)
	// Keep the line sorted by release time (stable: equal times stay in
	// arrival order).
	b := d.q.buf
	for i := len(b) - 1; i > d.q.head && b[i-1].at > b[i].at; i-- {
		b[i-1], b[i] = b[i], b[i-1]
	}
}

// pop returns the first frame due at now.
func (d *delayLine) pop(now int64) (pkt, bool) {
	if d.q.len() == 0 || d.q.peek().at > now {
		return pkt{}, false
	}
	return d.q.pop(), true
}

// next returns the release time of the first frame, or -1.
func (d *delayLine) next() int64 {
	if d.q.len() == 0 {
		return -1
	}
	return d.q.peek().at
}

// impair holds the impairments of one direction of a link.
type impair struct {
	delay              int64 // ns
	loss, dup, reorder float64
	rng                *rand.Rand
}

func (m *impair) active() bool {
	return m.delay > 0 || m.loss > 0 || m.dup > 0 || m.reorder > 0
}

// port is one switch port: egress queues, pacing, impairments, I/O.
type port struct {
	num     int
	io      PortIO
	rate    units.Rate
	limit   int64 // drop-tail limit of each queue, bytes
	queues  []fifo
	qbytes  []int64
	backlog int64

	// busyUntil is when the link finishes serializing the last frame
	// taken from the queues, in picoseconds since the switch started.
	busyUntil int64
	out, in   impair
	wire      delayLine // serialized, propagating
	tx        [][]byte  // frames due now, sent as one batch
	blocked   bool      // the socket was full: wait for POLLOUT
	stats     PortStats
}

func newPort(tp *topologies.Port, io PortIO, seed uint64, node *topologies.Node) *port {
	l := tp.Link
	p := &port{
		num:    tp.Num,
		io:     io,
		rate:   l.Rate,
		limit:  int64(l.Buffer),
		queues: make([]fifo, max(node.Queues, 1)),
		qbytes: make([]int64, max(node.Queues, 1)),
		out: impair{delay: int64(l.Delay), loss: l.Loss, dup: l.Duplicate, reorder: l.Reorder,
			rng: rng(seed, node.Index, tp.Num, 0)},
	}
	if tp.Peer.Node.IsHost() {
		// Hosts cannot delay or drop: the switch applies the host's
		// direction of the link on ingress.
		p.in = impair{delay: int64(l.Delay), loss: l.Loss, dup: l.Duplicate, rng: rng(seed, node.Index, tp.Num, 1)}
	}
	// The switch's own pipeline latency comes before the pipeline.
	p.in.delay += int64(node.Latency)
	if p.in.rng == nil {
		p.in.rng = rng(seed, node.Index, tp.Num, 1)
	}
	return p
}

// enqueue queues frame with priority prio, or drops it if its queue is full.
func (p *port) enqueue(now int64, prio int, frame []byte, s *Switch) {
	prio = min(max(prio, 0), len(p.queues)-1)
	n := int64(len(frame))
	// A frame is admitted while the queue holds less than the buffer;
	// an idle link takes a frame straight onto the wire (the buffer
	// counts waiting bytes, not the frame being serialized).
	if p.qbytes[prio]+n > p.limit && p.qbytes[prio] > 0 {
		p.stats.QueueDrops++
		s.putBuf(frame)
		return
	}
	if p.backlog == 0 && p.busyUntil < now*1000 {
		p.busyUntil = now * 1000 // an idle link starts serializing now
	}
	p.queues[prio].push(pkt{data: frame, prio: prio})
	p.qbytes[prio] += n
	p.backlog += n
	p.stats.MaxQueueBytes = max(p.stats.MaxQueueBytes, p.backlog)
}

// service moves frames onto the wire as the link rate allows, then sends
// the frames whose propagation delay has passed.
func (p *port) service(now int64, s *Switch) {
	nowPS := now * 1000
	for p.backlog > 0 && p.busyUntil <= nowPS {
		f := p.dequeue()
		start := max(p.busyUntil, nowPS-txSlackPS)
		p.busyUntil = start + transmitPS(len(f.data), p.rate)
		if p.out.loss > 0 && p.out.rng.Float64() < p.out.loss {
			p.stats.Lost++
			s.putBuf(f.data)
			continue
		}
		at := p.busyUntil/1000 + p.out.delay
		if p.out.reorder > 0 && p.out.rng.Float64() < p.out.reorder {
			// Held back 1–16 of its own serialization times, so
			// later frames overtake it (as on sim).
			p.stats.Reordered++
			at += int64(1+p.out.rng.IntN(16)) * transmitPS(len(f.data), p.rate) / 1000
		}
		if p.out.dup > 0 && p.out.rng.Float64() < p.out.dup {
			d := s.getBuf()[:len(f.data)]
			copy(d, f.data)
			p.stats.Duplicated++
			p.wire.push(pkt{data: d, at: at})
		}
		p.wire.push(pkt{data: f.data, at: at})
	}
	for {
		f, ok := p.wire.pop(now)
		if !ok {
			break
		}
		p.tx = append(p.tx, f.data)
		if len(p.tx) == Batch {
			p.flush(s)
		}
	}
	p.flush(s)
}

// txSlackPS is how far behind the wall clock a busy link's schedule may
// fall: a loop that wakes a little late sends the frames it owes back to
// back, so the long-run rate holds; after a longer stall the link time is
// lost rather than made up in one burst. Virtual machines wake a sleeping
// thread up to a few milliseconds late (measured on tracebed's 2-core VM:
// 0.1–0.5 ms on average, 3 ms at worst) and a loaded host preempts the
// switch for longer, hence the generous slack.
const txSlackPS = 10_000_000_000 // 10ms

func (p *port) dequeue() pkt {
	for i := len(p.queues) - 1; i >= 0; i-- {
		if p.queues[i].len() > 0 {
			f := p.queues[i].pop()
			n := int64(len(f.data))
			p.qbytes[i] -= n
			p.backlog -= n
			return f
		}
	}
	panic("dequeue from an empty port")
}

// flush sends the batch. Frames the socket cannot take now stay queued for
// the next round (the loop then waits for the socket to become writable).
func (p *port) flush(s *Switch) {
	for len(p.tx) > 0 && !p.blocked {
		n, err := p.io.Send(p.tx)
		s.moved += uint64(n)
		for _, f := range p.tx[:n] {
			p.stats.TxPackets++
			p.stats.TxBytes += uint64(len(f))
			s.putBuf(f)
		}
		if err != nil {
			// The frame at index n was refused: drop it, go on.
			p.stats.TxErrors++
			s.putBuf(p.tx[n])
			n++
		} else if n < len(p.tx) {
			p.blocked = true
		}
		rest := copy(p.tx, p.tx[n:])
		clear(p.tx[rest:])
		p.tx = p.tx[:rest]
	}
}

// nextEvent returns when the port next needs service (ns), or -1.
func (p *port) nextEvent() int64 {
	next := p.wire.next()
	if p.backlog > 0 {
		t := (p.busyUntil + 999) / 1000
		if next < 0 || t < next {
			next = t
		}
	}
	if len(p.tx) > 0 && !p.blocked {
		next = 0
	}
	return next
}

// snapshot returns the port's counters.
func (p *port) snapshot() PortStats {
	if kd, ok := p.io.(kernelDropper); ok {
		p.stats.RxKernelDrops += kd.KernelDrops()
	}
	st := p.stats
	st.QueueBytes = p.backlog
	st.IO = ioKind(p.io)
	return st
}
