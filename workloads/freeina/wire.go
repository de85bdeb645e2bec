package freeina

import (
	"encoding/binary"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/roce/wire"
)

// inspect checks a RoCEv2 packet that reaches the host before its device
// sees it: the RC contract an unmodified RNIC relies on, which the switch
// must keep while it rewrites the INA path's packets.
//
//   - Every packet's ICRC is right for the headers it arrives with.
//   - A packet of the worker's incoming INA connection comes from its
//     predecessor, is an RDMA WRITE only with immediate of one chunk, and
//     its PSN is exactly the one its sender gave that chunk: the
//     predecessor's PSN of chunk 0 of the round plus the chunk (so the
//     switch never invents, moves or reuses a PSN).
//   - Its payload is the exact sum of that chunk for that round — for
//     duplicates and retransmissions too, so a copy the RNIC might take
//     could never write stale data.
//
// A breach is counted (host.violation) and fails the run; the device then
// handles the packet as any RNIC would.
func (h *host) inspect(from emulator.Addr, b []byte) {
	if from != h.rxFrom {
		h.rxFrom, h.rxCRC = from, wire.NewPseudoCRC(wire.HostPseudo(from, h.dev.Env().Local()))
	}
	if !h.rxCRC.Verify(b) {
		h.violation("a packet from %v with a wrong ICRC", from)
		return
	}
	w := h.worker
	if w == nil || w.inaIn == nil || len(b) < wire.BTHLen || uint32(b[5])<<16|uint32(b[6])<<8|uint32(b[7]) != w.inaIn.QP.QPN() {
		return
	}
	p, err := wire.Parse(b)
	if err != nil {
		h.violation("INA packet from %v: %v", from, err)
		return
	}
	if !p.Opcode.IsRequest() {
		return
	}
	if from.Addr() != w.pred {
		h.violation("INA packet from %v, not the predecessor %v", from, w.pred)
		return
	}
	if p.Opcode != wire.WriteOnlyImm || len(p.Payload) != 4*w.k {
		h.violation("INA packet %v of %d bytes", p.Opcode, len(p.Payload))
		return
	}
	chunk := int(p.Imm & 0xffffff)
	round, psn0, ok := w.psnOf(int(p.Imm >> 24 & 0x7f))
	if !ok || chunk >= w.chunks {
		h.violation("INA packet imm %#x: no INA round %d or chunk %d of %d", p.Imm, round, chunk, w.chunks)
		return
	}
	if want := wire.PSNAdd(psn0, chunk); p.PSN != want {
		h.violation("INA packet of round %d chunk %d with PSN %#x, its sender's was %#x", round, chunk, p.PSN, want)
		return
	}
	if p.Imm&OverflowFlag != 0 {
		return // the sum overflowed: the worker fails the round
	}
	sum := w.expected(round)[chunk*w.k : (chunk+1)*w.k]
	for i, v := range sum {
		if got := int64(int32(binary.BigEndian.Uint32(p.Payload[4*i:]))); got != v {
			h.violation("INA packet of round %d chunk %d (PSN %#x): value %d is %d, the exact sum is %d", round, chunk, p.PSN, i, got, v)
			return
		}
	}
}

// psnOf maps the low 7 bits of a round to the round whose INA packets
// may arrive now, and the PSN its sender gave its chunk 0: an INA round
// begun (this one, or an earlier one: a late duplicate, of an earlier
// epoch of the connection too), or the next one (the predecessor may be
// ahead by one: a round starts once every worker finished the last).
func (w *worker) psnOf(bits int) (round int, psn uint32, ok bool) {
	for r := w.round + 1; r >= 0 && r > w.round-127; r-- {
		if r&0x7f != bits {
			continue
		}
		if p, begun := w.inaPSN[r]; begun {
			return r, p, true
		}
		next := r == w.round+1 && w.begun || r == w.round && !w.begun
		return r, w.inPSN, next
	}
	return 0, 0, false
}
