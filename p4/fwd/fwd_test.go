package fwd

import (
	"net/netip"
	"testing"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/frame"
)

type discard struct{ n int }

func (d *discard) Emit(int, int, []byte) { d.n++ }

// TestEveryFrameCountedOnce: each frame in (on a port, or a packet-out
// from the controller) lands in exactly one counter cell, forwarded or
// a drop reason, whatever it is; punts to the controller count as
// forwarded.
func TestEveryFrameCountedOnce(t *testing.T) {
	p := leaf(t)
	udp := func(dst string, ttl uint8) []byte {
		return frame.AppendUDP(nil, frame.UDP{Src: netip.MustParseAddrPort("10.0.0.1:1"), Dst: netip.MustParseAddrPort(dst + ":2"), TTL: ttl}, []byte("x"))
	}
	self := p.Self().String()
	var routed netip.Addr
	for a := range p.routes {
		routed = netip.AddrFrom4(a)
		break
	}
	cpu := emulator.CPUPort
	frames := []struct {
		name string
		in   int
		f    []byte
		want int // counter cell: Forwarded or a drop reason
	}{
		{"junk", 1, []byte("not a frame at all"), DropMalformed},
		{"empty", 1, nil, DropMalformed},
		{"no route", 1, udp("192.0.2.9", 64), DropNoRoute},
		{"ttl", 1, udp(routed.String(), 1), DropTTL},
		{"to the switch", 1, udp(self, 64), DropLocal},
		{"routed", 1, udp(routed.String(), 64), Forwarded},
		{"packet-out", emulator.CPUPort, append([]byte{0, 1}, udp("192.0.2.9", 64)...), Forwarded},
		{"packet-out to the CPU port", emulator.CPUPort, append([]byte{byte(cpu >> 8), byte(cpu)}, udp("192.0.2.9", 64)...), DropMalformed},
		{"short packet-out", emulator.CPUPort, []byte{1}, DropMalformed},
	}
	for _, fr := range frames {
		before := p.Counters
		p.Process(0, fr.in, fr.f, &discard{})
		d := p.Counters
		var changed []int
		if d.Forwarded != before.Forwarded {
			changed = append(changed, Forwarded)
		}
		for r := range d.Drops {
			if d.Drops[r] != before.Drops[r] {
				changed = append(changed, r)
			}
		}
		total := func(c Counters) uint64 { return c.Forwarded + sum(c.Drops[:]) }
		if len(changed) != 1 || changed[0] != fr.want || total(d) != total(before)+1 {
			t.Errorf("%s: counters changed at %v, want once at %d", fr.name, changed, fr.want)
		}
	}
	// A miss sent to the controller is forwarded too.
	p.missToCPU = true
	before := p.Counters.Forwarded
	var d discard
	p.Process(0, 1, udp("192.0.2.9", 64), &d)
	if p.Counters.Forwarded != before+1 || d.n != 1 {
		t.Errorf("a punted miss: forwarded %d → %d, %d frames out", before, p.Counters.Forwarded, d.n)
	}
}

func sum(xs []uint64) uint64 {
	var n uint64
	for _, x := range xs {
		n += x
	}
	return n
}
