package roce

import (
	"github.com/tracebed/tracebed/emulator/roce/wire"
)

// The responder: the receive queue of a QP, PSN checking, placement of
// SEND and WRITE data, READ responses, and ACK/NAK generation (IBTA
// 9.7.4–9.7.5, 9.9 for the error classes).

// rwqe is a receive work queue element with its buffer resolved.
type rwqe struct {
	RecvWR
	mr  *MR
	buf []byte
}

type recvQueue struct {
	ring       []rwqe
	head, tail uint64
}

func (rq *recvQueue) push(r rwqe) {
	rq.ring[rq.tail&uint64(len(rq.ring)-1)] = r
	rq.tail++
}

func (rq *recvQueue) pop() *rwqe {
	r := &rq.ring[rq.head&uint64(len(rq.ring)-1)]
	rq.head++
	return r
}

func (rq *recvQueue) clear() {
	ring := rq.ring
	clear(ring)
	*rq = recvQueue{ring: ring}
}

func (rq *recvQueue) len() int { return int(rq.tail - rq.head) }

// readCtx remembers an executed READ request, so that a duplicate of it
// (the requester lost responses) is answered again (IBTA 9.7.5.1.1).
type readCtx struct {
	first uint32 // PSN of its first response
	n     int    // response packets
	va    uint64
	rkey  uint32
	len   uint32
	msn   uint32
}

// message is the multi-packet SEND or WRITE in progress.
type message struct {
	active bool
	write  bool
	recv   *RecvWR // SEND: the receive request it fills
	buf    []byte  // SEND: its buffer; WRITE: the remaining target bytes
	off    int     // SEND: bytes placed
	total  uint32  // WRITE: the RETH length
}

type responder struct {
	epsn    uint32 // the expected PSN
	msn     uint32 // messages completed (24 bits)
	nakSent bool   // a sequence-error or RNR NAK was sent for epsn
	cur     message
	recv    rwqe // the receive request of cur (cur.recv points here)
	reads   []readCtx
	nreads  int // READs remembered so far (the ring's next slot is nreads % len)
}

func (r *responder) start(psn uint32, maxReads int) {
	*r = responder{epsn: psn, reads: make([]readCtx, max(maxReads, 1))}
}

// request handles a SEND, WRITE or READ request packet.
func (qp *QP) request(p *wire.Packet) {
	r := &qp.res
	d := wire.PSNDiff(p.PSN, r.epsn)
	if d > 0 {
		// Ahead of the expected PSN: one NAK per expected PSN, then
		// silence until it arrives (IBTA 9.7.5.1.2).
		qp.dev.c.Drop(DropOutOfSequence)
		if !r.nakSent {
			r.nakSent = true
			qp.dev.c.SeqNAKsSent++
			qp.ack(wire.Acknowledge, wire.NAKSyndrome(wire.NAKSequence), r.epsn)
		}
		return
	}
	if d < 0 {
		qp.duplicate(p)
		return
	}
	// In sequence. The opcode must continue the message in progress or
	// start a new one.
	op := p.Opcode
	if r.cur.active {
		if !(op.IsMiddle() || op.IsLast()) || op.IsWrite() != r.cur.write {
			qp.errorNAK(p, wire.NAKInvalid, StatusRemInvReqErr)
			return
		}
	} else if !op.StartsMessage() {
		qp.errorNAK(p, wire.NAKInvalid, StatusRemInvReqErr)
		return
	}
	mtu := qp.attr.PathMTU
	n := len(p.Payload)
	switch {
	case op.IsFirst() || op.IsMiddle():
		if n != mtu {
			qp.errorNAK(p, wire.NAKInvalid, StatusRemInvReqErr)
			return
		}
	case op.IsLast():
		if n == 0 || n > mtu {
			qp.errorNAK(p, wire.NAKInvalid, StatusRemInvReqErr)
			return
		}
	default:
		if n > mtu {
			qp.errorNAK(p, wire.NAKInvalid, StatusRemInvReqErr)
			return
		}
	}
	switch {
	case op.IsSend():
		qp.sendData(p)
	case op.IsWrite():
		qp.writeData(p)
	default:
		qp.readRequest(p)
	}
}

// rnr answers a request that needs a receive WQE when none is posted
// (IBTA 9.7.5.2.8: class B, the requester retries after the timer).
func (qp *QP) rnr(p *wire.Packet) {
	qp.dev.c.RNRNAKsSent++
	qp.res.nakSent = true
	qp.ack(wire.Acknowledge, wire.RNRSyndrome(qp.attr.MinRNRTimer), p.PSN)
}

func (qp *QP) sendData(p *wire.Packet) {
	r := &qp.res
	op := p.Opcode
	if op.StartsMessage() {
		if qp.rq.len() == 0 {
			qp.rnr(p)
			return
		}
		r.recv = *qp.rq.pop()
		r.cur = message{active: !op.IsOnly(), recv: &r.recv.RecvWR, buf: r.recv.buf}
	}
	if !r.recv.mr.valid {
		// The receive buffer was deregistered (class A: local protection).
		qp.errorNAK(p, wire.NAKRemoteOp, StatusLocProtErr)
		return
	}
	n := len(p.Payload)
	if r.cur.off+n > len(r.cur.buf) {
		// Longer than the receive buffer (IBTA C9-?: the receive
		// completes with a local length error, the requester gets an
		// invalid-request NAK).
		qp.errorNAK(p, wire.NAKInvalid, StatusLocLenErr)
		return
	}
	copy(r.cur.buf[r.cur.off:], p.Payload)
	r.cur.off += n
	qp.accepted(n, op.EndsMessage())
	if op.EndsMessage() {
		qp.dev.complete(qp.cfg.RecvCQ, Completion{WRID: r.recv.ID, Status: StatusSuccess, Opcode: WCRecv, QPN: qp.qpn,
			ByteLen: uint32(r.cur.off), Imm: p.Imm, HasImm: op.HasImm()})
		r.cur = message{}
	}
	if p.AckReq {
		qp.ackOK(p.PSN)
	}
}

func (qp *QP) writeData(p *wire.Packet) {
	r := &qp.res
	op := p.Opcode
	n := len(p.Payload)
	if op.HasRETH() {
		length := p.RETH.Length
		if length > MaxMessage || uint32(n) > length || (op.IsOnly() && uint32(n) != length) {
			qp.errorNAK(p, wire.NAKInvalid, StatusRemInvReqErr)
			return
		}
		buf, ok := qp.target(p, AccessRemoteWrite)
		if !ok {
			qp.errorNAK(p, wire.NAKRemoteAccess, StatusRemAccessErr)
			return
		}
		r.cur = message{write: true, buf: buf, total: length}
	}
	if n > len(r.cur.buf) || (op.EndsMessage() && n != len(r.cur.buf)) {
		qp.errorNAK(p, wire.NAKInvalid, StatusRemInvReqErr)
		return
	}
	if op.HasImm() && qp.rq.len() == 0 {
		qp.rnr(p) // the immediate needs a receive WQE; nothing is written
		return
	}
	copy(r.cur.buf, p.Payload)
	r.cur.buf = r.cur.buf[n:]
	r.cur.active = !op.EndsMessage()
	qp.accepted(n, op.EndsMessage())
	if op.EndsMessage() {
		if op.HasImm() {
			rw := qp.rq.pop()
			qp.dev.complete(qp.cfg.RecvCQ, Completion{WRID: rw.ID, Status: StatusSuccess, Opcode: WCRecvWriteImm, QPN: qp.qpn,
				ByteLen: r.cur.total, Imm: p.Imm, HasImm: true})
		}
		r.cur = message{}
	}
	if p.AckReq {
		qp.ackOK(p.PSN)
	}
}

func (qp *QP) readRequest(p *wire.Packet) {
	r := &qp.res
	length := p.RETH.Length
	if length > MaxMessage || qp.attr.MaxDestRdAtomic == 0 {
		qp.errorNAK(p, wire.NAKInvalid, StatusRemInvReqErr)
		return
	}
	buf, ok := qp.target(p, AccessRemoteRead)
	if !ok {
		qp.errorNAK(p, wire.NAKRemoteAccess, StatusRemAccessErr)
		return
	}
	mtu := qp.attr.PathMTU
	n := max(1, (int(length)+mtu-1)/mtu)
	r.msn = (r.msn + 1) & wire.PSNMask
	r.reads[r.nreads%len(r.reads)] = readCtx{first: p.PSN, n: n, va: p.RETH.VA, rkey: p.RETH.RKey, len: length, msn: r.msn}
	r.nreads++
	r.epsn = wire.PSNAdd(p.PSN, n)
	r.nakSent = false
	qp.readResponses(p.PSN, buf, r.msn)
}

// accepted does the bookkeeping of an in-sequence SEND or WRITE packet
// whose n bytes were placed; end says it completed its message.
func (qp *QP) accepted(n int, end bool) {
	r := &qp.res
	qp.dev.c.BytesPlaced += uint64(n)
	r.epsn = wire.PSNAdd(r.epsn, 1)
	r.nakSent = false
	if end {
		r.msn = (r.msn + 1) & wire.PSNMask
		qp.dev.c.MessagesRecv++
	}
}

// target resolves the RETH of a WRITE or READ: the bytes it names, in a
// region with the rights want, which the QP's own access flags must allow
// too. A zero length checks no key (IBTA 9.4.4). It reports false for a
// remote access error.
func (qp *QP) target(p *wire.Packet, want Access) ([]byte, bool) {
	if p.RETH.Length == 0 {
		return nil, true
	}
	if qp.attr.Access&want == 0 {
		return nil, false
	}
	return qp.dev.check(p.RETH.RKey, p.RETH.VA, uint64(p.RETH.Length), want)
}

// readResponses sends the responses of a READ of buf whose first response
// has PSN psn.
func (qp *QP) readResponses(psn uint32, buf []byte, msn uint32) {
	mtu := qp.attr.PathMTU
	n := max(1, (len(buf)+mtu-1)/mtu)
	credits := wire.EncodeCredits(qp.rq.len())
	var h wire.Header
	for k := range n {
		h = wire.Header{}
		h.PSN = wire.PSNAdd(psn, k)
		switch {
		case n == 1:
			h.Opcode = wire.ReadResponseOnly
		case k == 0:
			h.Opcode = wire.ReadResponseFirst
		case k == n-1:
			h.Opcode = wire.ReadResponseLast
		default:
			h.Opcode = wire.ReadResponseMiddle
		}
		h.AETH = wire.AETH{Syndrome: wire.ACKSyndrome(credits), MSN: msn}
		payload := buf[k*mtu : min(k*mtu+mtu, len(buf))]
		qp.dev.c.ReadBytesSent += uint64(len(payload))
		qp.dev.c.DataPackets++
		qp.dev.send(qp, &h, payload)
	}
}

// duplicate handles a request behind the expected PSN: the requester
// retransmitted it. A SEND or WRITE is not executed again; if it asks for
// an acknowledgement, the responder acknowledges what it has, the last PSN
// received in order (IBTA 9.7.5.1.1, C9-105; rdma_rxe does the same). A
// READ is executed again, from the duplicate's PSN on, if it lies within a
// remembered READ.
func (qp *QP) duplicate(p *wire.Packet) {
	r := &qp.res
	qp.dev.c.Duplicates++
	if p.Opcode != wire.ReadRequest {
		if p.AckReq {
			qp.ackOK(wire.PSNAdd(r.epsn, -1))
		}
		return
	}
	mtu := qp.attr.PathMTU
	for i := range min(r.nreads, len(r.reads)) {
		c := &r.reads[i]
		k := wire.PSNDiff(p.PSN, c.first)
		if k < 0 || k >= c.n {
			continue
		}
		off := uint64(k * mtu)
		if p.RETH.RKey != c.rkey || p.RETH.VA != c.va+off || uint64(p.RETH.Length)+off != uint64(c.len) {
			break
		}
		var buf []byte
		if p.RETH.Length > 0 {
			var ok bool
			buf, ok = qp.dev.check(p.RETH.RKey, p.RETH.VA, uint64(p.RETH.Length), AccessRemoteRead)
			if !ok {
				break
			}
		}
		qp.dev.c.ReadsReexec++
		qp.readResponses(p.PSN, buf, c.msn)
		return
	}
	qp.dev.c.Drop(DropDupRead)
}

// errorNAK answers a request the responder cannot execute with a NAK
// (invalid request, remote access or remote operational error) and moves
// the QP to ERR (IBTA 9.9.3: class A and C errors). A receive request in
// progress completes with status.
func (qp *QP) errorNAK(p *wire.Packet, code uint8, status Status) {
	r := &qp.res
	qp.dev.c.ErrorNAKsSent++
	qp.ack(wire.Acknowledge, wire.NAKSyndrome(code), p.PSN)
	if r.cur.recv != nil {
		qp.dev.complete(qp.cfg.RecvCQ, Completion{WRID: r.cur.recv.ID, Status: status, Opcode: WCRecv, QPN: qp.qpn})
		r.cur.recv = nil
	}
	qp.toErr()
}

// ackOK sends an ACK for every PSN up to psn, with the receive credits.
func (qp *QP) ackOK(psn uint32) {
	qp.dev.c.AcksSent++
	qp.ack(wire.Acknowledge, wire.ACKSyndrome(wire.EncodeCredits(qp.rq.len())), psn)
}

func (qp *QP) ack(op wire.Opcode, syndrome uint8, psn uint32) {
	h := wire.Header{}
	h.Opcode = op
	h.PSN = psn
	h.AETH = wire.AETH{Syndrome: syndrome, MSN: qp.res.msn}
	qp.dev.send(qp, &h, nil)
}
