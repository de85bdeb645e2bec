package freeina

import (
	"encoding/binary"
	"fmt"

	"github.com/tracebed/tracebed/emulator/roce"
	"github.com/tracebed/tracebed/emulator/roce/cm"
	"github.com/tracebed/tracebed/emulator/roce/wire"
)

// psJob is a job's parameter server on one host: the PS path, plain
// in-server aggregation. Every worker WRITEs its gradient, message by
// message with an immediate, into its place of the server's region; once
// every worker's message m is in, the server adds them up and WRITEs the
// sum into every worker's result region. The switch never touches these
// connections.
//
// The server sums in 64 bits: a message whose sums fit in 32 bits goes
// back as 32-bit values, any other as 64-bit ones (wideFlag in the
// immediate, at twice its offset in the wide part of the workers'
// region). Chunks that failed on the INA path come one by one (the
// immediate's recoverFlag, its index the chunk's, k values each: the
// WRITE's length) and their sums go back in 64 bits.
type psJob struct {
	h       *host
	job     uint32
	n       int
	values  int
	msgSize int
	msgs    int
	in, rq  *roce.MR
	out     [2]*roce.MR           // the sums, by round parity (32-bit, then 64-bit ones): a retransmission rebuilds from them
	conns   []*cm.Conn            // by rank
	held    map[int][]roce.SendWR // sums for workers whose connection is not established yet
	round   int                   // the round of the messages in; −1 before the first
	count   []int                 // workers' messages in, by message, this round
	sent    int                   // messages whose sum went out this round
	chunks  map[int]int           // workers' recovered chunks in, by chunk, this round
	sum     []int64               // scratch
}

func newPSJob(h *host, m ctlMsg) (*psJob, error) {
	p := &psJob{h: h, job: m.Job, n: int(m.N), values: int(m.Values), msgSize: int(m.Message)}
	if p.n < 2 || p.values < 1 || p.msgSize < 4 || p.msgSize%4 != 0 {
		return nil, fmt.Errorf("job %d: PS launch with %d workers, %d values, messages of %d bytes", m.Job, p.n, p.values, p.msgSize)
	}
	p.msgs = (4*p.values + p.msgSize - 1) / p.msgSize
	p.count = make([]int, p.msgs)
	p.round = -1
	p.conns = make([]*cm.Conn, p.n)
	p.held = map[int][]roce.SendWR{}
	p.chunks = map[int]int{}
	var err error
	if p.in, err = h.dev.RegMR(make([]byte, 4*p.values*p.n), roce.AccessLocalWrite|roce.AccessRemoteWrite); err != nil {
		return nil, err
	}
	for i := range p.out {
		if p.out[i], err = h.dev.RegMR(make([]byte, (4+8)*p.values), 0); err != nil {
			return nil, err
		}
	}
	if p.rq, err = h.dev.RegMR(make([]byte, 4), roce.AccessLocalWrite); err != nil {
		return nil, err
	}
	params := h.params(wire.MTUs[len(wire.MTUs)-1], cm.Region{Addr: p.in.Addr, RKey: p.in.RKey, Length: uint32(len(p.in.Buf))}, nil)
	rankOf := func(c *cm.Conn) (int, bool) {
		if len(c.Private) != 4 || binary.BigEndian.Uint32(c.Private) >= uint32(p.n) {
			return 0, false
		}
		return int(binary.BigEndian.Uint32(c.Private)), true
	}
	// The connection is the worker's from the moment it can receive: its
	// first WRITE may arrive before the RTU that establishes it here (the
	// RTU lost, the worker established by the REP), and its sums must go
	// back on it.
	params.OnReady = func(c *cm.Conn) {
		r, ok := rankOf(c)
		if !ok || p.conns[r] != nil {
			h.fail(fmt.Errorf("job %d: PS connection from %v with rank %x", p.job, c.Peer, c.Private))
			return
		}
		p.conns[r] = c
		h.handlers[c.QP.QPN()] = func(wc roce.Completion) { p.completion(c, wc) }
		p.postRecvs(c.QP, min(2*p.msgs, 1<<13))
	}
	if err := h.mgr.Listen(servicePS|uint64(p.job), params, func(c *cm.Conn) {
		r, ok := rankOf(c)
		if !ok || p.conns[r] != c {
			h.fail(fmt.Errorf("job %d: PS connection from %v with rank %x established but never ready", p.job, c.Peer, c.Private))
			return
		}
		p.establish(r)
	}); err != nil {
		return nil, err
	}
	h.ctl.send(&ctlMsg{Type: msgListening, Job: p.job})
	return p, nil
}

func (p *psJob) postRecvs(qp *roce.QP, n int) {
	for range n {
		if err := qp.PostRecv(roce.RecvWR{Local: p.rq.SGE(0, 0)}); err != nil {
			p.h.fail(err)
			return
		}
	}
}

// completion handles the completions of one worker's connection.
func (p *psJob) completion(c *cm.Conn, wc roce.Completion) {
	if wc.Status != roce.StatusSuccess {
		// A flush is a worker tearing its connection down (at the job's
		// end; a failure mid-job fails that worker's round, which says
		// why).
		if wc.Status != roce.StatusWRFlushErr {
			p.h.fail(fmt.Errorf("job %d PS: %v", p.job, wc))
		}
		return
	}
	if wc.Opcode != roce.WCRecvWriteImm {
		return // a sum's WRITE acknowledged
	}
	p.postRecvs(c.QP, 1)
	bits, m := int(wc.Imm>>24&0x7f), int(wc.Imm&0xffffff)
	if bits != p.round&0x7f {
		// The first message of a later round (the rounds between went
		// the INA path): every sum of this one is out, or it had none —
		// the workers start a round once all of them hold the last.
		if !p.roundOver() {
			p.h.fail(fmt.Errorf("job %d PS: message imm %#x in round %d with %d of %d sums out, recovered chunks %v", p.job, wc.Imm, p.round, p.sent, p.msgs, p.chunks))
			return
		}
		p.round++
		for p.round&0x7f != bits {
			p.round++
		}
		p.sent = 0
		clear(p.count)
		clear(p.chunks)
	}
	if wc.Imm&recoverFlag != 0 {
		p.recovered(m, int(wc.ByteLen))
		return
	}
	if m >= p.msgs {
		p.h.fail(fmt.Errorf("job %d PS: message %d of %d", p.job, m, p.msgs))
		return
	}
	p.count[m]++
	if p.count[m] < p.n {
		return
	}
	// Every worker's message m is in: add them up, send the sum to all.
	off := m * p.msgSize
	p.reply(off, min(p.msgSize, 4*p.values-off), imm(p.round, m), false)
	p.sent++
}

// recovered takes a worker's values of chunk c, size bytes, that failed
// on the INA path; once every worker's are in, their 64-bit sum goes to
// all.
func (p *psJob) recovered(c, size int) {
	off := c * size
	if size < 4 || size%4 != 0 || off+size > 4*p.values {
		p.h.fail(fmt.Errorf("job %d PS: recovered chunk %d of %d bytes in a gradient of %d values", p.job, c, size, p.values))
		return
	}
	p.chunks[c]++
	switch {
	case p.chunks[c] > p.n:
		p.h.fail(fmt.Errorf("job %d PS: chunk %d of round %d recovered %d times by %d workers", p.job, c, p.round, p.chunks[c], p.n))
	case p.chunks[c] == p.n:
		p.reply(off, size, wideFlag|imm(p.round, c), true)
	}
}

// roundOver reports whether every sum of the round is out: all its
// messages' or none, and every recovered chunk's.
func (p *psJob) roundOver() bool {
	if p.sent != p.msgs && p.sent+p.started() != 0 {
		return false
	}
	for _, n := range p.chunks {
		if n != p.n {
			return false
		}
	}
	return true
}

// reply adds up the workers' size bytes at offset off and WRITEs the sum
// to every worker with immediate im: as 32-bit values if every one fits
// and wide is false, else as 64-bit ones (wideFlag set).
func (p *psJob) reply(off, size int, im uint32, wide bool) {
	n := size / 4
	if cap(p.sum) < n {
		p.sum = make([]int64, n)
	}
	sum := p.sum[:n]
	for i := range sum {
		var s int64
		for w := range p.n {
			s += int64(int32(binary.BigEndian.Uint32(p.in.Buf[4*p.values*w+off+4*i:])))
		}
		sum[i] = s
		wide = wide || s != int64(int32(s))
	}
	out := p.out[p.round%2]
	local, remote := off, off
	if wide {
		im |= wideFlag
		local, remote, size = 4*p.values+2*off, 4*p.values+2*off, 2*size
		for i, s := range sum {
			binary.BigEndian.PutUint64(out.Buf[local+8*i:], uint64(s))
		}
	} else {
		for i, s := range sum {
			binary.BigEndian.PutUint32(out.Buf[local+4*i:], uint32(s))
		}
	}
	for r, wc := range p.conns {
		if wc == nil {
			p.h.fail(fmt.Errorf("job %d PS: a worker's connection is missing", p.job))
			return
		}
		wr := roce.SendWR{Op: roce.OpWriteImm, Local: out.SGE(local, size), Remote: wc.Remote.Addr + uint64(remote),
			RKey: wc.Remote.RKey, Imm: im}
		if !wc.Established() {
			// The worker's WRITEs came before the RTU (lost, resent by
			// the manager): the QP is still in RTR and cannot send yet.
			p.held[r] = append(p.held[r], wr)
			continue
		}
		if err := wc.QP.PostSend(wr); err != nil {
			p.h.fail(err)
			return
		}
	}
}

// establish posts the sums held for worker r until its connection was
// established.
func (p *psJob) establish(r int) {
	c := p.conns[r]
	for _, wr := range p.held[r] {
		if err := c.QP.PostSend(wr); err != nil {
			p.h.fail(err)
			return
		}
	}
	delete(p.held, r)
}

// started counts the messages in this round.
func (p *psJob) started() int {
	n := 0
	for _, c := range p.count {
		n += c
	}
	return n
}

// finish tears the job's connections down.
func (p *psJob) finish() {
	for _, c := range p.conns {
		if c != nil {
			delete(p.h.handlers, c.QP.QPN())
			c.Disconnect()
		}
	}
}
