package freeina

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/emulator/roce/wire"
)

// TestRingProperty streams all-reduces through the pipeline with workers
// that keep the window rule (chunk c+W only after chunk c's result) but
// whose packets reach the switch in random order, some twice. Every chunk
// must complete once, with the exact sum, as one replica per connection
// carrying that connection's PSN; a copy of a counted contribution never
// adds twice.
func TestRingProperty(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		n := 2 + rng.IntN(5)
		k := 8
		top := starTopology(t, n)
		p := newPipeline(t, top, k)
		r := ringSpec{Job: uint16(rng.IntN(MaxJobs)), Group: 7}
		for i := range n {
			r.Hosts = append(r.Hosts, i+1)
			r.QPN = append(r.QPN, 0x20+uint32(i))
			r.RKey = append(r.RKey, 0x300+uint32(i))
			r.VA = append(r.VA, uint64(i+1)<<20)
		}
		program(t, p, top, []ringSpec{r}, nil)
		ctl, err := NewController(p4rt.Local(p))
		if err != nil {
			t.Fatal(err)
		}
		psn := make([]uint32, n)
		for i := range psn {
			psn[i] = rng.Uint32() & wire.PSNMask
		}
		for round := range 3 {
			chunks := 1 + rng.IntN(40)
			w := 1 + rng.IntN(6)
			b := Binding{Job: r.Job, Gen: uint32(round + 1), Base: uint32(rng.IntN(100)), Size: uint32(w), Chunks: uint32(chunks), Workers: uint8(n), Group: r.Group}
			if err := ctl.Bind(context.Background(), b, psn); err != nil {
				t.Fatal(err)
			}
			vals := func(i, c int) []int32 {
				out := make([]int32, k)
				for j := range out {
					out[j] = int32(rng.Uint32()>>8) - 1<<23
				}
				return out
			}
			grad := make([][][]int32, n)
			for i := range grad {
				for c := range chunks {
					grad[i] = append(grad[i], vals(i, c))
				}
			}
			sent := make([]int, n) // next chunk each worker sends
			done := make([]bool, chunks)
			var queue [][2]int // (worker, chunk) in flight to the switch
			for i := range n {
				for c := 0; c < min(w, chunks); c++ {
					queue = append(queue, [2]int{i, c})
					sent[i] = c + 1
				}
			}
			completed := 0
			for len(queue) > 0 {
				j := rng.IntN(len(queue))
				wc := queue[j]
				queue = append(queue[:j], queue[j+1:]...)
				i, c := wc[0], wc[1]
				f := inaFrame(top, r, i, psn[i]+uint32(c), uint32(c), grad[i][c])
				copies := 1
				if rng.IntN(5) == 0 {
					copies = 2
				}
				for range copies {
					cp := newCapture()
					p.Process(0, r.Hosts[i], append([]byte(nil), f...), cp)
					if len(cp.out) == 0 {
						continue
					}
					if done[c] {
						if len(cp.out) != 1 {
							t.Fatalf("seed %d: a copy of a complete chunk %d gave %d frames", seed, c, len(cp.out))
						}
						continue
					}
					if len(cp.out) != n {
						t.Fatalf("seed %d: chunk %d completed with %d replicas, want %d", seed, c, len(cp.out), n)
					}
					done[c] = true
					completed++
					want := make([]int32, k)
					for x := range n {
						for v := range k {
							want[v] += grad[x][c][v]
						}
					}
					for x, o := range cp.out {
						d := decode(t, o)
						if d.pkt.PSN != (psn[x]+uint32(c))&wire.PSNMask || d.pkt.Imm != uint32(c) {
							t.Fatalf("seed %d: replica %d of chunk %d: psn %#x imm %d", seed, x, c, d.pkt.PSN, d.pkt.Imm)
						}
						for v := range k {
							if d.vals[v] != want[v] {
								t.Fatalf("seed %d: chunk %d value %d = %d, want %d", seed, c, v, d.vals[v], want[v])
							}
						}
					}
					// Every worker has the result. A worker posts its
					// chunks in order (their PSNs number them), chunk m
					// once it holds the result of chunk m−w.
					for x := range n {
						for sent[x] < chunks && done[sent[x]-w] {
							queue = append(queue, [2]int{x, sent[x]})
							sent[x]++
						}
					}
				}
			}
			if completed != chunks {
				t.Fatalf("seed %d round %d: %d of %d chunks completed", seed, round, completed, chunks)
			}
			for i := range psn {
				psn[i] = (psn[i] + uint32(chunks)) & wire.PSNMask
			}
		}
	}
}

// FuzzPipeline feeds arbitrary changes of a valid INA frame to a pipeline
// where another job also holds memory: nothing panics, and the other
// job's cells are never touched.
func FuzzPipeline(f *testing.F) {
	top := starTopology(f, 4)
	r := ringSpec{Job: 3, Group: 4, Hosts: []int{1, 2}, QPN: []uint32{0x11, 0x12}, RKey: []uint32{1, 2}, VA: []uint64{0x1000, 0x2000}}
	other := ringSpec{Job: 5, Group: 6, Hosts: []int{3, 4}, QPN: []uint32{0x31, 0x32}, RKey: []uint32{3, 4}, VA: []uint64{0x3000, 0x4000}}
	valid := inaFrame(top, r, 0, 10, 0, constVals(DefaultK, 1))
	f.Add(valid, uint16(0), byte(0))
	f.Add(valid, uint16(51), byte(1))
	f.Add(valid[:60], uint16(0), byte(0))
	f.Fuzz(func(t *testing.T, base []byte, at uint16, x byte) {
		p := newPipeline(t, top, DefaultK)
		program(t, p, top, []ringSpec{r, other}, []bindSpec{
			{Job: 3, Gen: 1, Base: 0, Size: 4, Chunks: 100, Workers: 2, Group: 4, PSN: []uint32{10, 20}},
			{Job: 5, Gen: 2, Base: 4, Size: 4, Chunks: 100, Workers: 2, Group: 6, PSN: []uint32{30, 40}},
		})
		// Job 5 has a partial aggregate.
		p.Process(0, 3, inaFrame(top, other, 0, 30, 0, constVals(DefaultK, 9)), newCapture())
		before, _ := p.ReadCell(8)
		counted := frameCounts(t, p).Total()
		g := append([]byte(nil), base...)
		if len(g) > 0 {
			g[int(at)%len(g)] ^= x
		}
		p.Process(0, 1, g, newCapture())
		if n := frameCounts(t, p).Total() - counted; n != 1 {
			t.Fatalf("one frame in, %d counted", n)
		}
		after, _ := p.ReadCell(8)
		if before.Gen != after.Gen || before.Bitmap != after.Bitmap || before.Count != after.Count {
			t.Fatalf("job 5's cell changed: %+v → %+v", before, after)
		}
		for i := range before.Values {
			if before.Values[i] != after.Values[i] {
				t.Fatalf("job 5's value %d changed", i)
			}
		}
	})
}
