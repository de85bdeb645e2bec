package roce

import (
	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/roce/wire"
)

// The requester: the send queue of a QP, segmentation into packets of the
// path MTU, acknowledgements, and go-back-N retransmission (IBTA 9.7.4–
// 9.7.5). Packets are never stored: a retransmission rebuilds them from
// their work request, as rdma_rxe does.

// swqe is a send work queue element.
type swqe struct {
	wr       SendWR
	started  bool   // given PSNs: its first packet has been sent
	first    uint32 // PSN of its first packet
	npkts    int    // PSNs it takes: its packets, or a READ's response packets
	readFrom int    // READ: the response packet the latest request starts at
	buf      []byte // the local data, resolved when it starts
}

func (w *swqe) wcOpcode() WCOpcode {
	switch w.wr.Op {
	case OpWrite, OpWriteImm:
		return WCWrite
	case OpRead:
		return WCRead
	}
	return WCSend
}

// sendQueue is the requester's state. head, next and tail count work
// requests (their ring index is the count modulo the ring's length).
type sendQueue struct {
	ring             []swqe
	head, next, tail uint64 // oldest incomplete; the one being sent; the next free
	pkt              int    // packets of ring[next] sent in this pass
	psn              uint32 // PSN of the next packet to send
	sentEnd          uint32 // the PSN after the highest ever sent
	una              uint32 // the oldest unacknowledged PSN
	reads            int    // READ requests sent and not complete, in [head, next)
	sinceAckReq      int    // packets since the last that asked for an ACK

	retryLeft, rnrLeft uint8
	retrying           bool   // a retry from retryPSN made no progress yet
	retryPSN           uint32 //
	rnrWait            bool   // waiting out an RNR NAK's timer
	rnrTimer           emulator.Timer
}

func (sq *sendQueue) at(i uint64) *swqe { return &sq.ring[i&uint64(len(sq.ring)-1)] }

func (sq *sendQueue) start(psn uint32, retry, rnr uint8) {
	sq.psn, sq.sentEnd, sq.una = psn, psn, psn
	sq.retryLeft, sq.rnrLeft = retry, rnr
}

func (sq *sendQueue) clear() {
	ring := sq.ring
	clear(ring)
	*sq = sendQueue{ring: ring}
}

func (sq *sendQueue) push(qp *QP, wr SendWR) {
	w := sq.at(sq.tail)
	*w = swqe{wr: wr}
	if qp.cfg.SignalAll {
		w.wr.Signaled = true
	}
	sq.tail++
}

// outstanding reports whether sent packets await acknowledgement.
func (sq *sendQueue) outstanding() bool { return wire.PSNDiff(sq.sentEnd, sq.una) > 0 }

// pump sends what the window and the READ limit allow.
func (qp *QP) pump() {
	sq := &qp.sq
	if qp.attr.State != StateRTS || sq.rnrWait {
		return
	}
	win := qp.dev.cfg.Window
	for sq.next != sq.tail {
		w := sq.at(sq.next)
		if !w.started && !qp.startWQE(w) {
			if sq.next == sq.head {
				qp.fail(StatusLocProtErr)
			}
			return // fails when the requests before it are done
		}
		if wire.PSNDiff(sq.psn, sq.una) >= win {
			return
		}
		if w.wr.Op == OpRead {
			if sq.reads >= qp.attr.MaxRdAtomic {
				if qp.attr.MaxRdAtomic == 0 && sq.next == sq.head {
					qp.fail(StatusLocQPOpErr) // no READ may ever be outstanding
				}
				return
			}
			w.readFrom = sq.pkt
			qp.sendRead(w, sq.pkt)
			sq.psn = wire.PSNAdd(w.first, w.npkts)
			sq.next++
			sq.pkt = 0
			sq.reads++
			continue
		}
		qp.sendSegment(w, sq.pkt)
		sq.psn = wire.PSNAdd(sq.psn, 1)
		sq.pkt++
		if sq.pkt == w.npkts {
			sq.next++
			sq.pkt = 0
		}
	}
}

// startWQE gives w its PSNs and resolves its local buffer; it reports
// false for a local protection error.
func (qp *QP) startWQE(w *swqe) bool {
	want := Access(0)
	if w.wr.Op == OpRead {
		want = AccessLocalWrite
	}
	n := uint64(w.wr.Local.Length)
	if n > 0 {
		buf, ok := qp.dev.check(w.wr.Local.LKey, w.wr.Local.Addr, n, want)
		if !ok {
			return false
		}
		w.buf = buf
	}
	mtu := qp.attr.PathMTU
	w.npkts = max(1, (int(n)+mtu-1)/mtu)
	w.first = qp.sq.psn
	w.started = true
	return true
}

// sent does the bookkeeping of a request packet whose PSNs end before
// end: the retransmission count and the ACK timer.
func (qp *QP) sent(psn, end uint32) {
	sq := &qp.sq
	idle := !sq.outstanding()
	if wire.PSNDiff(psn, sq.sentEnd) < 0 {
		qp.dev.c.Retransmitted++
	}
	if wire.PSNDiff(end, sq.sentEnd) > 0 {
		sq.sentEnd = end
	}
	if idle || qp.timer == nil {
		qp.armTimer()
	}
}

// sendSegment sends packet k of a SEND or WRITE request.
func (qp *QP) sendSegment(w *swqe, k int) {
	mtu := qp.attr.PathMTU
	n := int(w.wr.Local.Length)
	off := k * mtu
	payload := w.buf[min(off, len(w.buf)):min(off+mtu, len(w.buf))]
	first, last := k == 0, k == w.npkts-1
	var h wire.Header
	h.PSN = wire.PSNAdd(w.first, k)
	write := w.wr.Op == OpWrite || w.wr.Op == OpWriteImm
	imm := w.wr.Op == OpSendImm || w.wr.Op == OpWriteImm
	switch {
	case first && last && write && imm:
		h.Opcode = wire.WriteOnlyImm
	case first && last && write:
		h.Opcode = wire.WriteOnly
	case first && last && imm:
		h.Opcode = wire.SendOnlyImm
	case first && last:
		h.Opcode = wire.SendOnly
	case first && write:
		h.Opcode = wire.WriteFirst
	case first:
		h.Opcode = wire.SendFirst
	case last && write && imm:
		h.Opcode = wire.WriteLastImm
	case last && write:
		h.Opcode = wire.WriteLast
	case last && imm:
		h.Opcode = wire.SendLastImm
	case last:
		h.Opcode = wire.SendLast
	case write:
		h.Opcode = wire.WriteMiddle
	default:
		h.Opcode = wire.SendMiddle
	}
	if write && first {
		h.RETH = wire.RETH{VA: w.wr.Remote, RKey: w.wr.RKey, Length: uint32(n)}
	}
	if imm && last {
		h.Imm = w.wr.Imm
	}
	h.SE = last && w.wr.Solicited
	sq := &qp.sq
	sq.sinceAckReq++
	if last || sq.sinceAckReq >= qp.dev.cfg.AckEvery || wire.PSNDiff(h.PSN, sq.una)+1 >= qp.dev.cfg.Window {
		h.AckReq = true
		sq.sinceAckReq = 0
	}
	qp.dev.c.DataPackets++
	qp.dev.send(qp, &h, payload)
	qp.sent(h.PSN, wire.PSNAdd(h.PSN, 1))
}

// sendRead sends the READ request of w for its response packets from k
// on: a retry after lost responses asks only for the rest.
func (qp *QP) sendRead(w *swqe, k int) {
	mtu := qp.attr.PathMTU
	var h wire.Header
	h.Opcode = wire.ReadRequest
	h.PSN = wire.PSNAdd(w.first, k)
	h.RETH = wire.RETH{VA: w.wr.Remote + uint64(k*mtu), RKey: w.wr.RKey, Length: w.wr.Local.Length - uint32(min(k*mtu, int(w.wr.Local.Length)))}
	qp.sq.sinceAckReq = 0
	qp.dev.send(qp, &h, nil)
	qp.sent(h.PSN, wire.PSNAdd(w.first, w.npkts))
}

// completeSend completes the oldest send request.
func (qp *QP) completeSend(w *swqe, status Status) {
	if w.wr.Signaled || status != StatusSuccess {
		qp.dev.complete(qp.cfg.SendCQ, Completion{WRID: w.wr.ID, Status: status, Opcode: w.wcOpcode(), QPN: qp.qpn, ByteLen: w.wr.Local.Length})
	}
	sq := &qp.sq
	if w.wr.Op == OpRead && sq.head < sq.next {
		sq.reads--
	}
	*w = swqe{}
	sq.head++
	if sq.next < sq.head {
		sq.next, sq.pkt = sq.head, 0
	}
}

// ackTo acknowledges every PSN up to p: it completes the SEND and WRITE
// requests that end there. It reports implied when p covers a READ whose
// responses have not all arrived — they were lost, and the READ must be
// asked again (IBTA 9.7.5.1.3, "implied NAK") — and progress when
// anything was acknowledged.
func (qp *QP) ackTo(p uint32) (implied, progress bool) {
	sq := &qp.sq
	for sq.head != sq.tail {
		w := sq.at(sq.head)
		if !w.started {
			break
		}
		last := wire.PSNAdd(w.first, w.npkts-1)
		if wire.PSNDiff(p, last) < 0 {
			if w.wr.Op != OpRead && wire.PSNDiff(p, sq.una) >= 0 {
				sq.una = wire.PSNAdd(p, 1)
				progress = true
			}
			break
		}
		if w.wr.Op == OpRead {
			return true, progress
		}
		sq.una = wire.PSNAdd(last, 1)
		qp.completeSend(w, StatusSuccess)
		progress = true
	}
	return false, progress
}

// progressed reloads the retry counters and pushes the ACK timer back,
// after an acknowledgement that moved una.
func (qp *QP) progressed() {
	sq := &qp.sq
	sq.retryLeft, sq.rnrLeft = qp.attr.RetryCnt, qp.attr.RNRRetry
	sq.retrying = false
	if sq.outstanding() {
		qp.armTimer()
	}
	// A retry may have rewound the send point behind what is now
	// acknowledged: move it up to una. A READ being received is not
	// asked again.
	if wire.PSNDiff(sq.una, sq.psn) > 0 {
		qp.seek(sq.una, false)
	}
}

// seek moves the send point to PSN q: the requests from there on are sent
// (again) by pump. With reread, a READ that q falls inside is asked again
// from q; without, the send point moves past it.
func (qp *QP) seek(q uint32, reread bool) {
	sq := &qp.sq
	i := sq.head
	for ; i != sq.tail; i++ {
		w := sq.at(i)
		if !w.started {
			break
		}
		k := wire.PSNDiff(q, w.first)
		if k < 0 || k >= w.npkts {
			continue
		}
		sq.next, sq.pkt, sq.psn = i, k, q
		if w.wr.Op == OpRead && !reread {
			sq.next, sq.pkt, sq.psn = i+1, 0, wire.PSNAdd(w.first, w.npkts)
		}
		qp.recountReads()
		return
	}
	sq.next, sq.pkt, sq.psn = i, 0, q
	qp.recountReads()
}

func (qp *QP) recountReads() {
	sq := &qp.sq
	sq.reads = 0
	for i := sq.head; i < sq.next; i++ {
		if sq.at(i).wr.Op == OpRead {
			sq.reads++
		}
	}
}

// retry goes back to PSN q and sends everything from there again
// (go-back-N), counting a retry. A NAK or lost response that asks for the
// retry already under way (no progress since) is not counted again; a
// timeout always is.
func (qp *QP) retry(q uint32, timeout bool) {
	sq := &qp.sq
	if !timeout && sq.retrying && sq.retryPSN == q {
		return
	}
	if sq.retryLeft == 0 {
		qp.fail(StatusRetryExcErr)
		return
	}
	sq.retryLeft--
	sq.retrying, sq.retryPSN = true, q
	qp.seek(q, true)
	qp.armTimer()
	qp.pump()
}

// response handles an ACK, a NAK or a READ response.
func (qp *QP) response(p *wire.Packet) {
	sq := &qp.sq
	psn := p.PSN
	if wire.PSNDiff(psn, sq.sentEnd) >= 0 {
		qp.dev.c.Drop(DropBadResponse) // for a PSN never sent
		return
	}
	if wire.PSNDiff(psn, sq.una) < 0 {
		qp.dev.c.Drop(DropStaleResponse)
		return
	}
	if p.Opcode.IsRead() {
		qp.readResponse(p)
		return
	}
	switch p.AETH.Kind() {
	case wire.SyndromeACK:
		qp.dev.c.AcksRecv++
		implied, progress := qp.ackTo(psn)
		if progress {
			qp.progressed()
		}
		if implied {
			qp.dev.c.ImpliedNAKs++
			qp.retry(sq.una, false)
			return
		}
		qp.pump()
	case wire.SyndromeRNR:
		qp.dev.c.RNRNAKsRecv++
		if sq.rnrWait {
			qp.dev.c.Drop(DropRNRWait)
			return
		}
		if qp.implicitAck(psn) {
			return
		}
		if sq.rnrLeft == 0 {
			qp.fail(StatusRNRRetryExcErr)
			return
		}
		if sq.rnrLeft != 7 {
			sq.rnrLeft--
		}
		sq.rnrWait = true
		qp.seek(psn, true)
		sq.rnrTimer = qp.dev.after(wire.RNRTimer(p.AETH.Value()), func() {
			sq.rnrTimer = nil
			sq.rnrWait = false
			if qp.attr.State == StateRTS {
				qp.armTimer()
				qp.pump()
			}
		})
	case wire.SyndromeNAK:
		code := p.AETH.Value()
		if code == wire.NAKSequence {
			qp.dev.c.SeqNAKsRecv++
			if sq.rnrWait {
				qp.dev.c.Drop(DropRNRWait)
				return
			}
			if qp.implicitAck(psn) {
				return
			}
			qp.retry(psn, false)
			return
		}
		qp.implicitAck(psn)
		if qp.attr.State != StateRTS {
			return
		}
		switch code {
		case wire.NAKInvalid:
			qp.fail(StatusRemInvReqErr)
		case wire.NAKRemoteAccess:
			qp.fail(StatusRemAccessErr)
		default:
			qp.fail(StatusRemOpErr)
		}
	default:
		qp.dev.c.Drop(DropBadResponse)
	}
}

// implicitAck acknowledges the PSNs before psn, as a NAK or a READ
// response does. It reports true when it found lost READ responses and
// started a retry instead.
func (qp *QP) implicitAck(psn uint32) bool {
	implied, progress := qp.ackTo(wire.PSNAdd(psn, -1))
	if progress {
		qp.progressed()
	}
	if implied {
		qp.dev.c.ImpliedNAKs++
		qp.retry(qp.sq.una, false)
		return true
	}
	return false
}

// readResponse places one READ response packet.
func (qp *QP) readResponse(p *wire.Packet) {
	sq := &qp.sq
	if qp.implicitAck(p.PSN) {
		return
	}
	if sq.head == sq.tail {
		qp.dev.c.Drop(DropBadResponse)
		return
	}
	w := sq.at(sq.head)
	if !w.started || w.wr.Op != OpRead {
		qp.dev.c.Drop(DropBadResponse) // READ data for a SEND or WRITE
		return
	}
	if p.PSN != sq.una {
		qp.dev.c.ResponseGaps++ // the responses before it were lost
		qp.retry(sq.una, false)
		return
	}
	k := wire.PSNDiff(p.PSN, w.first)
	n := w.npkts
	op := p.Opcode
	var ok bool
	switch {
	case n == 1:
		ok = op == wire.ReadResponseOnly
	case k == n-1:
		ok = op == wire.ReadResponseLast || op == wire.ReadResponseOnly
	case k == 0:
		ok = op == wire.ReadResponseFirst
	default:
		ok = op == wire.ReadResponseFirst || op == wire.ReadResponseMiddle
	}
	if !ok || (op.HasAETH() && p.AETH.Kind() != wire.SyndromeACK) {
		qp.dev.c.Drop(DropBadResponse)
		return
	}
	mtu := qp.attr.PathMTU
	off := k * mtu
	want := min(mtu, len(w.buf)-off)
	if len(p.Payload) != want {
		qp.fail(StatusBadRespErr)
		return
	}
	copy(w.buf[off:], p.Payload)
	sq.una = wire.PSNAdd(sq.una, 1)
	if k == n-1 {
		qp.completeSend(w, StatusSuccess)
	}
	qp.progressed()
	qp.pump()
}
