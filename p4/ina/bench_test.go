package ina

import (
	"testing"
)

// discard is an Emitter that drops frames.
type discard struct{ n int }

func (d *discard) Emit(int, int, []byte) { d.n++ }

// BenchmarkPipeline measures in-process packet processing for k = 64 on one
// goroutine (one core): 4 workers stream chunks through a pool of 512
// aggregators; in pool mode every fourth packet completes a chunk and is
// multicast to the 4 workers, in shared mode it goes to the parameter
// server. The target is 2 million packets per second per core.
func BenchmarkPipeline(b *testing.B) {
	for _, mode := range []struct {
		name string
		mode uint8
	}{{"pool", ModePool}, {"shared", ModeShared}} {
		b.Run(mode.name, func(b *testing.B) {
			const workers, slots = 4, 512
			r := newRig(b, DefaultK, 8192)
			r.bind(Binding{Job: 1, ToRound: MaxRound, Mode: mode.mode, Gen: 1, Base: 0, Size: slots, Workers: workers, Group: 1, PS: r.addr(5)}, workers)
			// One template frame per worker; the loop rewrites slot, version
			// and offset in place (the pipeline rewrites completed frames, so
			// each iteration copies the template into a scratch frame).
			tmpl := make([][]byte, workers)
			for w := range workers {
				tmpl[w] = r.data(1, uint8(w), workers, 0, 0, 0, 0, 0, r.vals(int32(w)))
			}
			scratch := make([]byte, len(tmpl[0]))
			var out discard
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				chunk := i / workers
				w := i % workers
				copy(scratch, tmpl[w])
				slot := chunk % slots
				ver := (chunk / slots) & 1
				off := uint32(chunk * DefaultK)
				scratch[offINA+4], scratch[offINA+5] = byte(slot>>8), byte(slot)
				scratch[offINA+6] = byte(ver)
				scratch[offINA+16], scratch[offINA+17], scratch[offINA+18], scratch[offINA+19] = byte(off>>24), byte(off>>16), byte(off>>8), byte(off)
				r.p.Process(0, w+1, scratch, &out)
			}
			b.StopTimer()
			if want := b.N / workers; mode.mode == ModePool && out.n < want*workers-workers {
				b.Fatalf("%d frames emitted for %d packets", out.n, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "packets/s")
		})
	}
}
