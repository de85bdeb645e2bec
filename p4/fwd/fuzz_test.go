package fwd

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/frame"
)

// emitted records what a pipeline emits.
type emitted struct {
	port, prio int
	f          []byte
}

type recorder struct{ out []emitted }

func (r *recorder) Emit(port, prio int, f []byte) {
	r.out = append(r.out, emitted{port, prio, bytes.Clone(f)})
}

// FuzzPipeline feeds arbitrary frames to a leaf's pipeline, on a port or
// from the controller: it must never panic, count every frame in exactly
// one cell (forwarded or a drop reason), emit at most once, and only on
// the switch's ports or to the controller; a frame forwarded out of a port
// leaves with its TTL one lower, its IPv4 header checksum exactly as valid
// as it came, and nothing changed but its Ethernet addresses, TTL and
// checksum.
func FuzzPipeline(f *testing.F) {
	p := leaf(f)
	var routed netip.Addr
	for a := range p.routes {
		routed = netip.AddrFrom4(a)
		break
	}
	udp := func(dst netip.Addr, ttl uint8) []byte {
		return frame.AppendUDP(nil, frame.UDP{Src: netip.MustParseAddrPort("10.0.0.1:1"), Dst: netip.AddrPortFrom(dst, 2), TTL: ttl}, []byte("payload"))
	}
	f.Add(uint16(1), udp(routed, 64))
	f.Add(uint16(2), udp(routed, 2))
	f.Add(uint16(1), udp(netip.MustParseAddr("192.0.2.9"), 64))
	f.Add(uint16(1), udp(p.Self(), 64))
	f.Add(uint16(emulator.CPUPort), append([]byte{0, 1}, udp(routed, 64)...))
	f.Add(uint16(emulator.CPUPort), []byte{1})
	f.Add(uint16(3), []byte("not a frame"))
	f.Fuzz(func(t *testing.T, in uint16, b []byte) {
		port := int(in)
		if port != emulator.CPUPort {
			port = port%(len(p.portMAC)-1) + 1
		}
		p.missToCPU = in&0x8000 != 0 && port != emulator.CPUPort
		f := bytes.Clone(b)
		before := p.Counters
		var r recorder
		p.Process(0, port, f, &r)
		after := p.Counters
		var delta uint64
		delta += after.Forwarded - before.Forwarded
		for i := range after.Drops {
			delta += after.Drops[i] - before.Drops[i]
		}
		if delta != 1 {
			t.Fatalf("one frame in on port %d, counted %d times: %+v → %+v", port, delta, before, after)
		}
		if len(r.out) > 1 || (len(r.out) == 1) != (after.Forwarded == before.Forwarded+1) {
			t.Fatalf("forwarded %d, emitted %d frames", after.Forwarded-before.Forwarded, len(r.out))
		}
		if len(r.out) == 0 || port == emulator.CPUPort {
			return // a packet-out goes where the controller says, unchanged
		}
		e := r.out[0]
		if e.port == emulator.CPUPort {
			if e.f[0] != byte(port>>8) || e.f[1] != byte(port) || !bytes.Equal(e.f[2:], b) {
				t.Fatalf("punt of a frame from port %d is %x", port, e.f)
			}
			return
		}
		if e.port < 1 || e.port >= len(p.portMAC) {
			t.Fatalf("emitted on port %d", e.port)
		}
		if len(e.f) != len(b) || e.f[frame.EthLen+8] != b[frame.EthLen+8]-1 {
			t.Fatalf("forwarded %x as %x", b, e.f)
		}
		valid := func(f []byte) bool { return frame.Checksum(f[frame.EthLen:frame.EthLen+frame.IPv4Len]) == 0 }
		if valid(b) != valid(e.f) {
			t.Fatalf("IPv4 header checksum valid %v in, %v out: %x → %x", valid(b), valid(e.f), b, e.f)
		}
		// Only the MACs, the TTL and the checksum change.
		g := bytes.Clone(e.f)
		copy(g[:12], b[:12])
		copy(g[frame.EthLen+8:frame.EthLen+9], b[frame.EthLen+8:frame.EthLen+9])
		copy(g[frame.EthLen+10:frame.EthLen+12], b[frame.EthLen+10:frame.EthLen+12])
		if !bytes.Equal(g, b) {
			t.Fatalf("forwarded %x as %x", b, e.f)
		}
	})
}
