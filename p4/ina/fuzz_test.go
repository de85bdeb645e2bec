package ina

import (
	"testing"
)

// FuzzPipeline feeds arbitrary frames, and mutations of valid INA frames, to
// a programmed pipeline: it must never panic, and every frame it emits must
// be a well-formed INA packet.
func FuzzPipeline(f *testing.F) {
	r := newRig(f, 4, 16)
	r.bind(Binding{Job: 1, ToRound: MaxRound, Mode: ModePool, Gen: 1, Base: 0, Size: 4, Workers: 2, Group: 1}, 2)
	r.bind(Binding{Job: 2, ToRound: MaxRound, Mode: ModeShared, Gen: 2, Base: 4, Size: 4, Workers: 2, Group: 2, PS: r.addr(5)}, 2)
	f.Add(r.data(1, 0, 2, 1, 0, 0, 0, 0, r.vals(1)), uint8(1))
	f.Add(r.data(2, 1, 2, 1, 0, 0, 8, FlagRetransmit, r.vals(1)), uint8(2))
	f.Add(r.packet(5, r.swAddr(), Header{Flags: FlagResult, Job: 2, Workers: 2, Bitmap: 3}, r.vals(0)), uint8(5))
	f.Add([]byte{1, 2, 3}, uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, port uint8) {
		for _, e := range r.in(int(port%6), b) {
			if e.Port < 1 || e.Port > 5 {
				t.Fatalf("emitted on port %d", e.Port)
			}
		}
	})
}
