package allreduce

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/p4/ina"
)

// Ring packet layout (UDP payload, big-endian):
//
//	data: 0 type=1 | 1 reserved | 2 job (2) | 4 round (4) | 8 seq (4) | 12 n (2) | 14 reserved (2) | 16 n × int32
//	ack:  0 type=2 | 1 reserved | 2 job (2) | 4 round (4) | 8 cum (4) | 12 sack (8)
//
// seq numbers the packets a node sends to its successor in one round, in
// step order; cum acknowledges every seq below it and bit i of sack
// acknowledges seq cum+1+i.
const (
	ringData      = 1
	ringAck       = 2
	ringHeaderLen = 16
	ringAckLen    = 20
)

// RingConfig configures one node of a ring all-reduce.
type RingConfig struct {
	Job   uint16
	Rank  int             // this node's position in the ring
	Peers []emulator.Addr // every node's address, by rank
	// K is the number of values per packet; 0 means ina.DefaultK.
	K int
	// Window bounds the packets in flight to the successor; 0 means 4096.
	// Acknowledgements queue behind data in the successor's NIC, so the
	// window must exceed that backlog (about one step of packets) or the
	// ring runs below line rate.
	Window int
	// Timeout is the retransmission timeout; 0 means 1ms.
	Timeout time.Duration
	// AckEvery makes the receiver acknowledge every AckEvery in-order
	// packets (and at once on a gap, a duplicate or the last packet of the
	// round); 0 means 8. AckDelay bounds how long an acknowledgement waits;
	// 0 means Timeout/8.
	AckEvery int
	AckDelay time.Duration
}

// RingStats count a ring node's packets.
type RingStats struct {
	Sent, Retransmits, Acks uint64
	Received, Duplicates    uint64
	Malformed               uint64
}

// Ring is the host ring all-reduce (reduce-scatter then all-gather, 2(N−1)
// steps of 1/N of the tensor each), the no-INA baseline. Packets of
// consecutive steps are pipelined: a node forwards packet p of step t+1 as
// soon as it has packet p of step t from its predecessor. Each link of the
// ring is made reliable with selective acknowledgements, a timeout and
// retransmission, so the sum is exact under loss, duplication and
// reordering.
type Ring struct {
	cfg   RingConfig
	n, k  int
	env   emulator.Env
	succ  emulator.Addr
	Stats RingStats

	tensor  []int32
	round   uint32
	running bool
	done    func(error)
	err     error

	segStart []int // segment s covers [segStart[s], segStart[s+1])
	// Outgoing stream: packet q is (step, p); base[t] is the first seq of step t.
	outBase, inBase []int
	outTotal        int
	inTotal         int
	ready           []bool // out seq q may be sent
	sent            []bool
	acked           []bool
	sentAt          []time.Duration
	dlAt            []time.Duration // each packet's current deadline
	retries         []uint8
	queue           []int // ready, unsent seqs in order
	qHead           int
	inflight        int
	ackedN          int
	ackFloor        int // every out seq below it is acknowledged
	early           []earlyPacket
	// Incoming stream.
	got       []bool
	gotN      int
	cum       int // every in seq below cum received
	unacked   int
	ackTimer  bool
	dl        []ringDeadline
	dlHead    int
	armed     bool
	buf, abuf []byte
}

// earlyPacket is a data packet of the next round that arrived before this
// node started it (its predecessor finished computing first).
type earlyPacket struct {
	from emulator.Addr
	b    []byte
}

type ringDeadline struct {
	q  int
	at time.Duration
}

// NewRing returns a ring node; cfg is checked.
func NewRing(cfg RingConfig) (*Ring, error) {
	if cfg.K == 0 {
		cfg.K = ina.DefaultK
	}
	if cfg.Window == 0 {
		cfg.Window = 4096
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Millisecond
	}
	if cfg.AckEvery == 0 {
		cfg.AckEvery = 8
	}
	if cfg.AckDelay == 0 {
		cfg.AckDelay = cfg.Timeout / 8
	}
	switch {
	case len(cfg.Peers) < 1:
		return nil, fmt.Errorf("ring: no peers")
	case cfg.Rank < 0 || cfg.Rank >= len(cfg.Peers):
		return nil, fmt.Errorf("ring: rank %d of %d", cfg.Rank, len(cfg.Peers))
	case cfg.K < 1 || cfg.K > ina.MaxK:
		return nil, fmt.Errorf("ring: k = %d, want 1 to %d", cfg.K, ina.MaxK)
	case cfg.Window < 1 || cfg.AckEvery < 1 || cfg.Timeout < 0 || cfg.AckDelay < 0:
		return nil, fmt.Errorf("ring: window %d, ack every %d, timeout %v, ack delay %v: want positive values", cfg.Window, cfg.AckEvery, cfg.Timeout, cfg.AckDelay)
	}
	n := len(cfg.Peers)
	return &Ring{
		cfg: cfg, n: n, k: cfg.K, succ: cfg.Peers[(cfg.Rank+1)%n],
		buf: make([]byte, ringHeaderLen+4*cfg.K), abuf: make([]byte, ringAckLen),
	}, nil
}

// Start implements Reducer.
func (r *Ring) Start(env emulator.Env) { r.env = env }

func mod(a, n int) int { return ((a % n) + n) % n }

// seg returns the segment node rank sends at step t.
func (r *Ring) seg(rank, t int) int { return mod(rank-t, r.n) }

func (r *Ring) packets(s int) int {
	return (r.segStart[s+1] - r.segStart[s] + r.k - 1) / r.k
}

// AllReduce implements Reducer.
func (r *Ring) AllReduce(tensor []int32, round uint32, done func(error)) {
	if r.running {
		done(fmt.Errorf("ring: all-reduce of round %d started while round %d runs", round, r.round))
		return
	}
	r.tensor, r.round, r.done, r.err = tensor, round, done, nil
	if r.n == 1 {
		r.done = nil
		done(nil)
		return
	}
	r.segStart = make([]int, r.n+1)
	for s := range r.n + 1 {
		r.segStart[s] = s * len(tensor) / r.n
	}
	steps := 2 * (r.n - 1)
	r.outBase, r.inBase = make([]int, steps+1), make([]int, steps+1)
	pred := mod(r.cfg.Rank-1, r.n)
	for t := range steps {
		r.outBase[t+1] = r.outBase[t] + r.packets(r.seg(r.cfg.Rank, t))
		r.inBase[t+1] = r.inBase[t] + r.packets(r.seg(pred, t))
	}
	r.outTotal, r.inTotal = r.outBase[steps], r.inBase[steps]
	r.ready = make([]bool, r.outTotal)
	r.sent = make([]bool, r.outTotal)
	r.acked = make([]bool, r.outTotal)
	r.sentAt = make([]time.Duration, r.outTotal)
	r.dlAt = make([]time.Duration, r.outTotal)
	r.retries = make([]uint8, r.outTotal)
	r.got = make([]bool, r.inTotal)
	r.queue, r.qHead = r.queue[:0], 0
	r.inflight, r.ackedN, r.ackFloor, r.gotN, r.cum, r.unacked = 0, 0, 0, 0, 0, 0
	r.dl, r.dlHead = r.dl[:0], 0
	r.running = true
	for q := r.outBase[0]; q < r.outBase[1]; q++ {
		r.makeReady(q)
	}
	r.pump()
	early := r.early
	r.early = nil
	for _, e := range early {
		r.recvData(e.from, e.b)
	}
	r.check()
}

func (r *Ring) makeReady(q int) {
	r.ready[q] = true
	r.queue = append(r.queue, q)
}

// locate returns the step and packet index of seq q in a stream with bases.
func locate(base []int, q int) (t, p int) {
	lo, hi := 0, len(base)-1
	for lo < hi-1 {
		mid := (lo + hi) / 2
		if base[mid] <= q {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, q - base[lo]
}

// pump sends ready packets while the window allows.
func (r *Ring) pump() {
	for r.inflight < r.cfg.Window && r.qHead < len(r.queue) {
		q := r.queue[r.qHead]
		r.qHead++
		r.inflight++
		r.transmit(q, false)
	}
	if r.qHead > 0 && r.qHead == len(r.queue) {
		r.queue, r.qHead = r.queue[:0], 0
	}
}

func (r *Ring) transmit(q int, retx bool) {
	t, p := locate(r.outBase, q)
	s := r.seg(r.cfg.Rank, t)
	lo := r.segStart[s] + p*r.k
	hi := min(lo+r.k, r.segStart[s+1])
	b := r.buf[:ringHeaderLen+4*(hi-lo)]
	b[0], b[1] = ringData, 0
	binary.BigEndian.PutUint16(b[2:], r.cfg.Job)
	binary.BigEndian.PutUint32(b[4:], r.round)
	binary.BigEndian.PutUint32(b[8:], uint32(q))
	binary.BigEndian.PutUint16(b[12:], uint16(hi-lo))
	binary.BigEndian.PutUint16(b[14:], 0)
	ina.PutValues(b[ringHeaderLen:], r.tensor[lo:hi])
	r.env.Send(r.succ, b)
	r.Stats.Sent++
	if retx {
		r.Stats.Retransmits++
		r.retries[q]++
	}
	r.sent[q] = true
	now := r.env.Now()
	r.sentAt[q] = now
	r.schedule(q, now+r.cfg.Timeout)
}

// schedule sets packet q's deadline.
func (r *Ring) schedule(q int, at time.Duration) {
	r.dlAt[q] = at
	r.pushDeadline(ringDeadline{q: q, at: at})
}

func (r *Ring) pushDeadline(d ringDeadline) {
	if r.dlHead > 0 && r.dlHead >= len(r.dl)/2 {
		n := copy(r.dl, r.dl[r.dlHead:])
		r.dl, r.dlHead = r.dl[:n], 0
	}
	r.dl = append(r.dl, d)
	if !r.armed {
		r.armed = true
		r.env.After(d.at-r.env.Now(), r.onTimer)
	}
}

// onTimer defers the scan behind what the loop has queued (see
// Stream.onTimer).
func (r *Ring) onTimer() { r.env.After(0, r.expire) }

func (r *Ring) expire() {
	r.armed = false
	now := r.env.Now()
	for r.dlHead < len(r.dl) {
		d := r.dl[r.dlHead]
		if !r.running || d.q >= len(r.acked) || r.acked[d.q] || r.dlAt[d.q] != d.at {
			r.dlHead++
			continue
		}
		if d.at > now {
			break
		}
		r.dlHead++
		if now >= r.sentAt[d.q]+backoff(r.cfg.Timeout, r.retries[d.q]) {
			r.transmit(d.q, true)
		} else {
			r.schedule(d.q, now+r.cfg.Timeout) // backing off
		}
	}
	if r.dlHead < len(r.dl) && !r.armed {
		r.armed = true
		r.env.After(r.dl[r.dlHead].at-now, r.onTimer)
	}
}

// Recv implements Reducer.
func (r *Ring) Recv(from emulator.Addr, b []byte) {
	if len(b) < 1 {
		r.Stats.Malformed++
		return
	}
	switch b[0] {
	case ringData:
		r.recvData(from, b)
	case ringAck:
		r.recvAck(b)
	default:
		r.Stats.Malformed++
	}
}

func (r *Ring) recvData(from emulator.Addr, b []byte) {
	if len(b) < ringHeaderLen || binary.BigEndian.Uint16(b[2:]) != r.cfg.Job {
		r.Stats.Malformed++
		return
	}
	round := binary.BigEndian.Uint32(b[4:])
	q := int(binary.BigEndian.Uint32(b[8:]))
	n := int(binary.BigEndian.Uint16(b[12:]))
	if len(b) != ringHeaderLen+4*n {
		r.Stats.Malformed++
		return
	}
	if round != r.round || !r.running {
		if d := int32(round - r.round); d > 0 && (d == 1 || !r.running) || (d == 0 && r.tensor == nil) {
			// The next round, which this node has not started yet (its
			// predecessor finished this one first): keep a copy of the
			// packet (Recv only borrows it) until AllReduce. A job that all-reduces some
			// rounds in a switch uses the ring for non-consecutive rounds,
			// so between rounds any later round is the next ring round.
			if len(r.early) < 4*r.cfg.Window {
				r.early = append(r.early, earlyPacket{from, bytes.Clone(b)})
			}
			return
		}
		if int32(round-r.round) < 0 || (round == r.round && !r.running) {
			// A retransmission of a finished round: our ack was lost.
			r.Stats.Duplicates++
			r.sendAck(from, round, 1<<31, 0)
		}
		return
	}
	if q < 0 || q >= r.inTotal {
		r.Stats.Malformed++
		return
	}
	pred := mod(r.cfg.Rank-1, r.n)
	t, p := locate(r.inBase, q)
	s := r.seg(pred, t)
	lo := r.segStart[s] + p*r.k
	hi := min(lo+r.k, r.segStart[s+1])
	if hi-lo != n {
		r.Stats.Malformed++
		return
	}
	if r.got[q] {
		r.Stats.Duplicates++
		r.ack(true)
		return
	}
	r.got[q] = true
	r.gotN++
	r.Stats.Received++
	vals := b[ringHeaderLen:]
	dst := r.tensor[lo:hi]
	if t < r.n-1 { // reduce-scatter: add
		var ovf int32
		for i := range dst {
			a, v := dst[i], ina.Value(vals, i)
			s := a + v
			ovf |= (a ^ s) & (v ^ s)
			dst[i] = s
		}
		if ovf < 0 && r.err == nil {
			r.err = fmt.Errorf("ring job %d round %d at offset %d: %w", r.cfg.Job, r.round, lo, ErrOverflow)
		}
	} else { // all-gather: store
		ina.GetValues(dst, vals)
	}
	// The same segment's packet p is ours to send at step t+1.
	if t+1 < 2*(r.n-1) {
		r.makeReady(r.outBase[t+1] + p)
		r.pump()
	}
	inOrder := q == r.cum
	for r.cum < r.inTotal && r.got[r.cum] {
		r.cum++
	}
	r.unacked++
	r.ack(!inOrder || r.unacked >= r.cfg.AckEvery || r.cum == r.inTotal)
	r.check()
}

// ack acknowledges now, or within AckDelay.
func (r *Ring) ack(now bool) {
	pred := r.cfg.Peers[mod(r.cfg.Rank-1, r.n)]
	if now {
		r.unacked = 0
		r.sendAck(pred, r.round, r.cum, r.sack())
		return
	}
	if !r.ackTimer {
		r.ackTimer = true
		round := r.round
		r.env.After(r.cfg.AckDelay, func() {
			r.ackTimer = false
			if r.running && r.round == round && r.unacked > 0 {
				r.unacked = 0
				r.sendAck(pred, r.round, r.cum, r.sack())
			}
		})
	}
}

func (r *Ring) sack() uint64 {
	var m uint64
	for i := range 64 {
		q := r.cum + 1 + i
		if q >= r.inTotal {
			break
		}
		if r.got[q] {
			m |= 1 << uint(i)
		}
	}
	return m
}

func (r *Ring) sendAck(to emulator.Addr, round uint32, cum int, sack uint64) {
	b := r.abuf
	b[0], b[1] = ringAck, 0
	binary.BigEndian.PutUint16(b[2:], r.cfg.Job)
	binary.BigEndian.PutUint32(b[4:], round)
	binary.BigEndian.PutUint32(b[8:], uint32(cum))
	binary.BigEndian.PutUint64(b[12:], sack)
	r.env.Send(to, b)
	r.Stats.Acks++
}

func (r *Ring) recvAck(b []byte) {
	if len(b) != ringAckLen || binary.BigEndian.Uint16(b[2:]) != r.cfg.Job {
		r.Stats.Malformed++
		return
	}
	if !r.running || binary.BigEndian.Uint32(b[4:]) != r.round {
		return
	}
	cum := int(min(binary.BigEndian.Uint32(b[8:]), uint32(r.outTotal)))
	sack := binary.BigEndian.Uint64(b[12:])
	for ; r.ackFloor < cum; r.ackFloor++ {
		r.markAcked(r.ackFloor)
	}
	for i := range 64 {
		if sack&(1<<uint(i)) != 0 {
			if q := cum + 1 + i; q < r.outTotal {
				r.markAcked(q)
			}
		}
	}
	r.pump()
	r.check()
}

func (r *Ring) markAcked(q int) {
	if r.acked[q] || !r.sent[q] {
		return
	}
	r.acked[q] = true
	r.ackedN++
	r.inflight--
}

// check finishes the round once everything is received and acknowledged.
func (r *Ring) check() {
	if !r.running || r.gotN < r.inTotal || r.ackedN < r.outTotal {
		return
	}
	r.running = false
	done, err := r.done, r.err
	r.done = nil
	done(err)
}
