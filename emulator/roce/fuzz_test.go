package roce

import (
	"encoding/binary"
	"testing"

	"github.com/tracebed/tracebed/emulator/roce/wire"
)

// FuzzDevice feeds arbitrary packets, with a valid ICRC and addressed to a
// connected QP, to a device in the middle of a connection: it never
// panics, and a region that grants no remote access is never written.
func FuzzDevice(f *testing.F) {
	// An input is a sequence of packets, each behind its length (16 bits)
	// and a byte saying where it goes (bit 0: to a rather than b; bit 1:
	// keep its destination QP; bit 2: let timers run after it). A seed is
	// one packet to b's QP.
	seed := func(h wire.Header, n int) []byte {
		pkt := wire.Append(nil, &h, make([]byte, n), wire.Pseudo{})
		return append([]byte{byte(len(pkt) >> 8), byte(len(pkt)), 0}, pkt...)
	}
	f.Add(seed(wire.Header{BTH: wire.BTH{Opcode: wire.WriteOnly, PKey: wire.DefaultPKey, PSN: 500}, RETH: wire.RETH{VA: 0x10000, RKey: 1, Length: 8}}, 8))
	f.Add(seed(wire.Header{BTH: wire.BTH{Opcode: wire.WriteFirst, PKey: wire.DefaultPKey, PSN: 500}, RETH: wire.RETH{VA: 0x12000, RKey: 0x100, Length: 300}}, 256))
	f.Add(seed(wire.Header{BTH: wire.BTH{Opcode: wire.SendOnly, PKey: wire.DefaultPKey, PSN: 500}}, 40))
	f.Add(seed(wire.Header{BTH: wire.BTH{Opcode: wire.ReadRequest, PKey: wire.DefaultPKey, PSN: 499}, RETH: wire.RETH{VA: 0x10000, RKey: 1, Length: 4000}}, 0))
	f.Add(seed(wire.Header{BTH: wire.BTH{Opcode: wire.Acknowledge, PKey: wire.DefaultPKey, PSN: 100}, AETH: wire.AETH{Syndrome: wire.NAKSyndrome(0)}}, 0))
	f.Add(seed(wire.Header{BTH: wire.BTH{Opcode: wire.ReadResponseOnly, PKey: wire.DefaultPKey, PSN: 100}}, 16))
	f.Fuzz(func(t *testing.T, data []byte) {
		h := &harness{}
		if err := h.init(map[string]string{"mtu": "256"}); err != nil {
			t.Fatal(err)
		}
		if err := h.connect(map[string]string{"psn_a": "100", "psn_b": "500"}); err != nil {
			t.Fatal(err)
		}
		a, b := h.devs["a"], h.devs["b"]
		open, _ := b.dev.RegMR(make([]byte, 8192), AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
		closed, _ := b.dev.RegMR(make([]byte, 8192), AccessLocalWrite)
		src, _ := a.dev.RegMR(make([]byte, 8192), AccessLocalWrite)
		_ = open
		b.qp.PostRecv(RecvWR{ID: 1, Local: closed.SGE(0, 64)})
		// a has work outstanding, so that responses find a requester.
		a.qp.PostSend(SendWR{ID: 1, Op: OpWrite, Local: src.SGE(0, 600), Remote: open.Addr, RKey: open.RKey})
		a.qp.PostSend(SendWR{ID: 2, Op: OpRead, Local: src.SGE(1000, 600), Remote: open.Addr, RKey: open.RKey})
		for len(data) >= 3 {
			n := int(binary.BigEndian.Uint16(data)) % 600
			to := data[2]
			data = data[3:]
			n = min(n, len(data))
			pkt := append([]byte(nil), data[:n]...)
			data = data[n:]
			dst, src := b, a
			if to&1 == 1 {
				dst, src = a, b
			}
			if len(pkt) >= wire.MinLen {
				if to&2 == 0 { // aim at the QP
					q := dst.qp.QPN()
					pkt[5], pkt[6], pkt[7] = byte(q>>16), byte(q>>8), byte(q)
				}
				k := len(pkt) - wire.ICRCLen
				binary.LittleEndian.PutUint32(pkt[k:], wire.ICRC(wire.HostPseudo(src.addr, dst.addr), pkt[:k]))
			}
			dst.dev.Recv(src.addr, pkt)
			if to&4 != 0 {
				h.tick(5e6) // let timers run
			}
		}
		// Only a SEND into the one receive buffer may write the closed
		// region, and only its first 64 bytes.
		for i, v := range closed.Buf[64:] {
			if v != 0 {
				t.Fatalf("byte %d of a region without remote access was written", 64+i)
			}
		}
	})
}
