package paging_test

// Fastswap (systems/fastswap) driving a paging host on the simulation.

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/sim"
	"github.com/tracebed/tracebed/p4/farmem"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/systems/fastswap"
	"github.com/tracebed/tracebed/topologies"
	memtrace "github.com/tracebed/tracebed/traces/mem"
	"github.com/tracebed/tracebed/workloads/farmem/paging"
)

func sample(t *testing.T, name string) []memtrace.Access {
	data, err := memtrace.Files.ReadFile("samples/" + name)
	if err != nil {
		t.Fatal(err)
	}
	_, src, err := memtrace.Open(name, data)
	if err != nil {
		t.Fatal(err)
	}
	acc, err := memtrace.ReadAll(src)
	if err != nil {
		t.Fatal(err)
	}
	return acc
}

func replay(t *testing.T, acc []memtrace.Access, limit int, memScale float64, repl paging.Replacement) *paging.Stats {
	t.Helper()
	f, _ := topologies.Generate(topologies.Params{Generate: "star", Hosts: 2, Delay: 1000})
	top, err := f.Build("star")
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New()
	net, err := sim.NewNetwork(s, top, sim.Options{Seed: 1, Pipeline: fwd.SimPipeline})
	if err != nil {
		t.Fatal(err)
	}
	srv := paging.NewServer(4096)
	net.Attach("h2", farmem.Port, srv)
	e := fastswap.New(fastswap.Params{}, memScale)
	h, err := paging.NewHost(paging.HostConfig{ID: 1, Limit: limit, Headroom: e.Offload(), Replacement: repl,
		Servers: []netip.AddrPort{netip.AddrPortFrom(top.Node("h2").IP, farmem.Port)}, Engine: e}, memtrace.NewSliceSource(acc), 0)
	if err != nil {
		t.Fatal(err)
	}
	net.Attach("h1", farmem.HostPort, h)
	for !h.Done() {
		if s.Pending() == 0 {
			t.Fatal("stalled")
		}
		s.RunUntil(s.Now() + sim.Millisecond)
	}
	if n := paging.CheckServers(h, func(_, host netip.AddrPort, p uint64) (uint32, uint32, []byte, bool) { return srv.Lookup(host, p) }); n != 0 {
		t.Errorf("%d pages differ on the server", n)
	}
	return h.Stats()
}

// TestBlockingOnSmallTraces replays the hand-written samples under Fastswap
// (its 2048-page constants divided by 2048: one page of headroom and one page
// of direct reclaim). With local memory for the whole working set nothing is
// fetched and nothing blocks. With 3 pages for the 8 of two-pass.memtxt, the
// first pass allocates faster (100ns a page) than one reclaimer writes back
// (a round trip, ~4.7µs), so the application blocks, and under LRU the
// second pass fetches all 8 pages; hot-cold.memtxt keeps its hot page.
func TestBlockingOnSmallTraces(t *testing.T) {
	for _, tc := range []struct {
		name      string
		limit     int
		repl      paging.Replacement
		faults    uint64
		minBlocks int
	}{
		{"two-pass.memtxt", 8, paging.LRU, 0, 0},
		{"two-pass.memtxt", 8, paging.Clock, 0, 0},
		{"hot-cold.memtxt", 6, paging.Clock, 0, 0},
		{"two-pass.memtxt", 3, paging.LRU, 8, 1},
		{"hot-cold.memtxt", 3, paging.LRU, 5, 1},
	} {
		t.Run(fmt.Sprintf("%s-%d-%s", tc.name, tc.limit, tc.repl), func(t *testing.T) {
			st := replay(t, sample(t, tc.name), tc.limit, 2048, tc.repl)
			if st.Faults != tc.faults || len(st.Blocks) < tc.minBlocks || (tc.minBlocks == 0 && len(st.Blocks) != 0) {
				t.Errorf("%d faults, %d blocks; want %d faults and at least %d blocks (exactly 0 if 0)", st.Faults, len(st.Blocks), tc.faults, tc.minBlocks)
			}
			if st.Integrity != 0 {
				t.Errorf("integrity errors: %v", st.IntegrityDetail)
			}
			var blocked time.Duration
			for _, b := range st.Blocks {
				blocked += b.Duration
			}
			t.Logf("%d faults, %d blocks (%v), %d write-backs, completion %v", st.Faults, len(st.Blocks), blocked, st.Writebacks, st.Completion)
		})
	}
}

// TestTwoPassByHand follows two-pass.memtxt (8 pages written, then read,
// g = 100ns apart) under Fastswap with limit 3, one page of headroom and
// one of direct reclaim, LRU, on a star of 100 Gbps, 1µs links. A write or
// a fetch takes a round trip T = 2·(s + h) + 4µs, with s = 332.96ns the
// page frame's and h = 5.28ns the header-only frame's serialization.
//
//	p0-p2      first touches within the limit
//	p3 (4g)    takes the headroom frame: the reclaimer writes p0 back
//	p4 (5g)    no frame: block 1; the application writes p1 back, queued
//	           behind p0's write on the NIC for s − g: the block lasts T + s − g
//	p5         takes a frame: the reclaimer writes p2 back; p6: block 2 (p3)
//	p7         the reclaimer writes p4 back; pass 2 p0: block 3 (p5), then
//	           a fetch (T)
//	p1-p7      each g + T: a fetch, while the reclaimer writes back the
//	           LRU page (p6, p7) or drops a clean one, in the shadow of the
//	           fetch
//
// Completion = 13g + 11T + 3s; 3 blocks of T + s − g; 8 faults; 8
// write-backs (p0-p7 once each).
func TestTwoPassByHand(t *testing.T) {
	st := replay(t, sample(t, "two-pass.memtxt"), 3, 2048, paging.LRU)
	// In picoseconds (sim.Time): exact.
	g := 100 * sim.Nanosecond
	s := sim.Time(332960)
	T := 2*(s+5280) + 4*sim.Microsecond
	want := (13*g + 11*T + 3*s).Duration() // agents see time truncated to the nanosecond
	if st.Completion != want {
		t.Errorf("completion %v, want %v", st.Completion, want)
	}
	if st.Faults != 8 || st.Writebacks != 8 || len(st.Blocks) != 3 {
		t.Errorf("%d faults, %d write-backs, %d blocks; want 8, 8, 3", st.Faults, st.Writebacks, len(st.Blocks))
	}
	for _, b := range st.Blocks {
		if d := sim.FromDuration(b.Duration); d < T+s-g-sim.Nanosecond || d > T+s-g+sim.Nanosecond {
			t.Errorf("block of %v, want %v", b.Duration, (T + s - g).Duration())
		}
	}
}
