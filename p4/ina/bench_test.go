package ina

import (
	"encoding/binary"
	"testing"

	"github.com/tracebed/tracebed/emulator/frame"
)

// discard is an Emitter that counts and drops frames. Like the
// substrates (sim, the Go switch) it is an emulator.FramePool: the copies a
// pipeline builds with emulator.NewFrame come back to it when emitted, so
// that the benchmark measures the pipeline, not the garbage collector.
type discard struct {
	n    int
	free [][]byte
}

const discardFrame = 2048 // the pool's buffers; larger frames are allocated

func (d *discard) Emit(_, _ int, f []byte) {
	d.n++
	if cap(f) == discardFrame {
		d.free = append(d.free, f[:0])
	}
}

func (d *discard) NewFrame(n int) []byte {
	if k := len(d.free); k > 0 && n <= discardFrame {
		f := d.free[k-1]
		d.free = d.free[:k-1]
		return f
	}
	return make([]byte, 0, max(n, discardFrame))
}

// BenchmarkPipeline measures in-process packet processing for k = 64 on one
// goroutine (one core): 4 workers stream chunks through a pool of 512
// aggregators; in pool mode every fourth packet completes a chunk and is
// multicast to the 4 workers, in shared mode it goes to the parameter
// server. The target is 2 million packets per second per core. Each
// iteration rewrites a template's slot, version and offset and patches its
// UDP checksum as a sender would (RFC 1624, a few additions: the pipeline
// verifies checksums and drops a frame whose checksum is wrong); the
// benchmark fails if the pipeline dropped any frame or emitted fewer than
// the completed chunks, so that it measures aggregation, not a drop path.
func BenchmarkPipeline(b *testing.B) {
	for _, mode := range []struct {
		name string
		mode uint8
	}{{"pool", ModePool}, {"shared", ModeShared}} {
		b.Run(mode.name, func(b *testing.B) {
			const workers, slots = 4, 512
			r := newRig(b, DefaultK, 8192)
			r.bind(Binding{Job: 1, ToRound: MaxRound, Mode: mode.mode, Gen: 1, Base: 0, Size: slots, Workers: workers, Group: 1, PS: r.addr(5)}, workers)
			// One template frame per worker, with slot, version and
			// offset zero; the loop rewrites them in a scratch copy (the
			// pipeline rewrites completed frames in place).
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
				slot := uint16(chunk % slots)
				ver := uint16((chunk / slots) & 1)
				off := uint32(chunk * DefaultK)
				binary.BigEndian.PutUint16(scratch[offINA+4:], slot)
				scratch[offINA+6] = byte(ver)
				binary.BigEndian.PutUint32(scratch[offINA+16:], off)
				// The template's words there are zero (the worker id
				// beside the version is unchanged), so the checksum
				// only gains the new words.
				patchUDPChecksum(scratch, slot, ver<<8, uint16(off>>16), uint16(off))
				r.p.Process(0, w+1, scratch, &out)
			}
			b.StopTimer()
			for d, c := range r.p.drops {
				if c.pk != 0 {
					b.Fatalf("the pipeline dropped %d frames (reason %d): the benchmark would measure a drop path", c.pk, d)
				}
			}
			completed := b.N / workers
			if want := completed - 1; mode.mode == ModePool && out.n < want*workers || out.n < want {
				b.Fatalf("%d frames emitted for %d packets (%d chunks completed)", out.n, b.N, completed)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "packets/s")
		})
	}
}

// patchUDPChecksum updates the UDP checksum of f for 16-bit words that
// were zero and now hold added (RFC 1624: HC' = ~(~HC + m'), with ~0 = 0
// in one's complement; a zero result is sent as 0xffff).
func patchUDPChecksum(f []byte, added ...uint16) {
	const at = frame.EthLen + frame.IPv4Len + 6
	sum := uint32(^binary.BigEndian.Uint16(f[at:]))
	for _, m := range added {
		sum += uint32(m)
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	c := ^uint16(sum)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(f[at:], c)
}
