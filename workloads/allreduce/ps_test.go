package allreduce

import (
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/p4/ina"
)

// sendsEnv is a fakeEnv that keeps what is sent.
type sendsEnv struct {
	fakeEnv
	out [][]byte
}

func (e *sendsEnv) Send(_ emulator.Addr, b []byte) { e.out = append(e.out, slices.Clone(b)) }

// partialPS is a PS of one job of n workers and one chunk of k values,
// and the workers' contributions.
type partialPS struct {
	ps      *PS
	env     *sendsEnv
	contrib [][]int32
	k       int
}

func newPartialPS(t *testing.T, n, k int, rng *rand.Rand) *partialPS {
	t.Helper()
	peer := netip.MustParseAddrPort("10.0.0.2:40000")
	workers := make([]emulator.Addr, n)
	for i := range workers {
		workers[i] = peer
	}
	ps, err := NewPS(PSJob{Job: 1, Workers: workers, Elements: k, K: k, Multicast: peer})
	if err != nil {
		t.Fatal(err)
	}
	env := &sendsEnv{}
	ps.Start(env)
	p := &partialPS{ps: ps, env: env, k: k}
	for range n {
		c := make([]int32, k)
		for i := range c {
			c[i] = rng.Int32N(1<<20) - 1<<19
		}
		p.contrib = append(p.contrib, c)
	}
	return p
}

// send delivers the partial of the workers in bitmap: a worker's
// retransmission, or a partial a switch flushed.
func (p *partialPS) send(bitmap uint32) {
	sum := make([]int32, p.k)
	for w, c := range p.contrib {
		if bitmap&(1<<w) != 0 {
			for i, v := range c {
				sum[i] += v
			}
		}
	}
	kind := ina.FlagData // one worker's own
	if bits.OnesCount32(bitmap) > 1 {
		kind = ina.FlagPartial // flushed from a switch
	}
	h := ina.Header{Flags: kind | ina.FlagRetransmit, Job: 1, Workers: uint8(len(p.contrib)),
		K: uint16(p.k), Bitmap: bitmap, Worker: uint8(bits.TrailingZeros32(bitmap))}
	p.ps.Recv(netip.AddrPort{}, ina.Append(nil, h, sum))
}

// results returns the sums the PS published.
func (p *partialPS) results(t *testing.T) [][]int32 {
	t.Helper()
	var out [][]int32
	for _, b := range p.env.out {
		h, vals, err := ina.Parse(b)
		if err != nil || h.Flags&ina.FlagResult == 0 {
			t.Fatalf("PS sent %x: %+v, %v", b, h, err)
		}
		v := make([]int32, p.k)
		ina.GetValues(v, vals)
		out = append(out, v)
	}
	return out
}

func (p *partialPS) total() []int32 {
	sum := make([]int32, p.k)
	for _, c := range p.contrib {
		for i, v := range c {
			sum[i] += v
		}
	}
	return sum
}

// TestPSOverlappingPartials feeds a parameter server partials whose
// bitmaps overlap, as two levels of aggregation produce them: it must
// publish the exact sum as soon as some of them cover every worker once,
// and not before.
func TestPSOverlappingPartials(t *testing.T) {
	for _, tc := range []struct {
		name     string
		workers  int
		partials []uint32
		doneAt   int // index of the partial that completes the chunk; -1: never
	}{
		{"disjoint", 3, []uint32{0b001, 0b110}, 1},
		// Seen on netns: the spine summed w0 and w1, the leaf keeps
		// summing the retransmissions of w1 and w2 (same rack).
		{"rack-neighbours-retransmit-together", 3, []uint32{0b011, 0b110, 0b110, 0b001}, 3},
		{"superset-replaces", 3, []uint32{0b001, 0b011, 0b100}, 2},
		{"first-overlap-then-disjoint", 3, []uint32{0b001, 0b011, 0b100}, 2},
		{"no-cover", 4, []uint32{0b0011, 0b0110, 0b1110, 0b0111, 0b0011}, -1},
		{"cover-of-three", 4, []uint32{0b0011, 0b0110, 0b1000, 0b0001}, 3},
		{"same-partial-again", 2, []uint32{0b01, 0b01, 0b01, 0b10}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPartialPS(t, tc.workers, 8, rand.New(rand.NewPCG(1, 2)))
			for i, b := range tc.partials {
				p.send(b)
				res := p.results(t)
				switch {
				case len(res) > 0 && (tc.doneAt < 0 || i < tc.doneAt):
					t.Fatalf("published after partial %d (%b), want at %d", i, b, tc.doneAt)
				case i == tc.doneAt && len(res) != 1:
					t.Fatalf("%d results after partial %d (%b), want 1", len(res), i, b)
				case i == tc.doneAt && !slices.Equal(res[0], p.total()):
					t.Fatalf("published %v, want %v", res[0], p.total())
				}
			}
		})
	}
}

// TestPSPartialsProperty sends random partials of random jobs until their
// bitmaps contain a cover (checked by brute force over subsets): the PS
// must publish exactly once, exactly the sum, by then and not before.
func TestPSPartialsProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for trial := range 2000 {
		n := 2 + rng.IntN(4)
		all := uint32(1)<<n - 1
		p := newPartialPS(t, n, 4, rng)
		var sent []uint32
		for step := 0; step < 12; step++ {
			b := 1 + rng.Uint32N(all)
			p.send(b)
			if !slices.Contains(sent, b) {
				sent = append(sent, b)
			}
			want := hasCover(sent, all)
			res := p.results(t)
			if want != (len(res) == 1) || len(res) > 1 {
				t.Fatalf("trial %d: partials %b: %d results, cover %v", trial, sent, len(res), want)
			}
			if want {
				if !slices.Equal(res[0], p.total()) {
					t.Fatalf("trial %d: partials %b: published %v, want %v", trial, sent, res[0], p.total())
				}
				break
			}
		}
	}
}

// hasCover reports whether some of the bitmaps are disjoint and together
// equal all, trying every subset.
func hasCover(bitmaps []uint32, all uint32) bool {
	for set := 1; set < 1<<len(bitmaps); set++ {
		var have uint32
		ok := true
		for i, b := range bitmaps {
			if set&(1<<i) == 0 {
				continue
			}
			if have&b != 0 {
				ok = false
				break
			}
			have |= b
		}
		if ok && have == all {
			return true
		}
	}
	return false
}
