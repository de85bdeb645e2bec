package glitter_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/sim"
	"github.com/tracebed/tracebed/p4/farmem"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/systems/evict"
	"github.com/tracebed/tracebed/systems/fastswap"
	"github.com/tracebed/tracebed/systems/glitter"
	"github.com/tracebed/tracebed/topologies"
	memtrace "github.com/tracebed/tracebed/traces/mem"
	"github.com/tracebed/tracebed/workloads/farmem/paging"
)

func state(used, limit, frames int, d, peak float64, lat, dev time.Duration) *evict.State {
	return &evict.State{Used: used, Limit: limit, Frames: frames, Pressure: used > limit, DemandRate: d, DemandPeak: peak, EvictLatency: lat, EvictLatencyDev: dev}
}

func TestReserve(t *testing.T) {
	e := glitter.NewEngine(glitter.Params{}, 256) // batch 8, max reserve 32
	for _, tc := range []struct {
		name string
		s    *evict.State
		want int
	}{
		{"no demand: Fastswap's headroom", state(100, 100, 108, 0, 0, 10*time.Microsecond, 0), 8},
		{"little demand: headroom", state(100, 100, 108, 50e3, 50e3, 10*time.Microsecond, 0), 8},
		{"burst: 2 × 50k/s × (10 + 4·25)µs = 11", state(100, 100, 108, 5e3, 50e3, 10*time.Microsecond, 25*time.Microsecond), 11},
		{"deviation counts: 2 × 50k/s × (10 + 4·35)µs = 15", state(100, 100, 108, 5e3, 50e3, 10*time.Microsecond, 35*time.Microsecond), 15},
		{"capped: 2 × 90k/s × (10 + 4·20)µs = 16.2 → 17", state(100, 100, 108, 90e3, 0, 10*time.Microsecond, 20*time.Microsecond), 17},
		{"demand outpaces one reclaimer", state(100, 100, 108, 200e3, 0, 10*time.Microsecond, 0), 32},
		{"a burst outpaces it", state(100, 100, 108, 5e3, 1e6, 10*time.Microsecond, 0), 32},
	} {
		if got := e.Reserve(tc.s); got != tc.want {
			t.Errorf("%s: reserve %d, want %d", tc.name, got, tc.want)
		}
	}
	// Background: evict down to Frames − reserve, at most a batch.
	s := state(108, 100, 108, 5e3, 50e3, 10*time.Microsecond, 47500*time.Nanosecond) // reserve 20: threshold 88
	if got := e.Background(s); got != 8 {
		t.Errorf("background %d, want a batch of 8 (20 over the threshold)", got)
	}
	s.Used = 90
	if got := e.Background(s); got != 2 {
		t.Errorf("background %d, want 2", got)
	}
	s.Pressure = false // before the working set is seen not to fit: Fastswap's rule
	if got := e.Background(s); got != 0 {
		t.Errorf("background %d before pressure at 90 of limit 100, want 0", got)
	}
	if got := e.Direct(s); got != 8 {
		t.Errorf("direct %d, want Fastswap's 2048/256 = 8", got)
	}
}

func TestUrgency(t *testing.T) {
	m := glitter.NewMarker(glitter.Params{UrgencyBase: 10 * time.Microsecond})
	for _, tc := range []struct {
		free    int
		demand  float64
		blocked bool
		want    uint8
	}{
		{0, 1e5, false, 7},
		{5, 1e5, true, 7},
		{5, 0, false, 1},
		{1, 1e6, false, 6},      // 1µs to blocking: below one base
		{15, 1e6, false, 5},     // 15µs: [1, 2) bases
		{30, 1e6, false, 4},     // [2, 4)
		{60, 1e6, false, 3},     // [4, 8)
		{120, 1e6, false, 2},    // [8, 16)
		{200, 1e6, false, 1},    // 16 bases or more
		{100000, 1e6, false, 1}, // far away
		{8, 1e5, false, 2},      // 80µs
		{8, 1e4, false, 1},      // 800µs
		{8, 2e6, false, 6},      // 4µs
		{10, 1e6, false, 5},     // exactly one base: not below it
		{2, 1e5, false, 4},      // 20µs
	} {
		s := &evict.State{Frames: 1000, Used: 1000 - tc.free, DemandRate: tc.demand, Blocked: tc.blocked}
		if got := m.Urgency(s); got != tc.want {
			t.Errorf("free %d, demand %g/s, blocked %v: urgency %d, want %d", tc.free, tc.demand, tc.blocked, got, tc.want)
		}
	}
}

func TestRules(t *testing.T) {
	rules := glitter.Rules()
	prio := map[[2]uint8]uint8{}
	for _, r := range rules {
		prio[[2]uint8{uint8(r.Type), r.Urgency}] = r.Priority
	}
	if prio[[2]uint8{uint8(farmem.TypeRead), 0}] != 7 || prio[[2]uint8{uint8(farmem.TypeData), 0}] != 7 {
		t.Error("demand fetches are not at the top priority")
	}
	for u := uint8(1); u <= 7; u++ {
		if prio[[2]uint8{uint8(farmem.TypeWrite), u}] != u || prio[[2]uint8{uint8(farmem.TypeAck), u}] != u {
			t.Errorf("urgency %d is not priority %d", u, u)
		}
	}
	if _, ok := prio[[2]uint8{uint8(farmem.TypeWrite), 0}]; ok {
		t.Error("urgency 0 should be left to the default (DSCP class)")
	}
}

// burstyTrace allocates memory in bursts: a hot page, then rounds of 24
// fresh pages written 200ns apart, each followed by 500µs of compute.
func burstyTrace(rounds int) []memtrace.Access {
	acc := []memtrace.Access{{Page: 0, Write: true}}
	next := uint64(1)
	for range rounds {
		for range 24 {
			acc = append(acc, memtrace.Access{Page: next, Gap: 200 * time.Nanosecond, Write: true})
			next++
		}
		acc = append(acc, memtrace.Access{Page: 0, Gap: 500 * time.Microsecond})
	}
	return acc
}

func runHost(t *testing.T, engine evict.Engine, acc []memtrace.Access, limit, headroom int) *paging.Stats {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 2})
	if err != nil {
		t.Fatal(err)
	}
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
	if _, err := net.Attach("h2", farmem.Port, srv); err != nil {
		t.Fatal(err)
	}
	server := netip.AddrPortFrom(top.Node("h2").IP, farmem.Port)
	h, err := paging.NewHost(paging.HostConfig{ID: 1, Limit: limit, Headroom: headroom, Servers: []netip.AddrPort{server},
		Engine: engine, ReclaimOverhead: time.Microsecond}, memtrace.NewSliceSource(acc), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := net.Attach("h1", farmem.HostPort, h); err != nil {
		t.Fatal(err)
	}
	for !h.Done() {
		if s.Pending() == 0 {
			t.Fatal("stalled")
		}
		s.RunUntil(s.Now() + sim.Millisecond)
	}
	paging.CheckServers(h, func(_, host netip.AddrPort, page uint64) (uint32, uint32, []byte, bool) {
		return srv.Lookup(host, page)
	})
	return h.Stats()
}

// TestAdaptiveThresholdAbsorbsBursts shows the host mechanism at work: with
// bursts of 24 allocations, Fastswap's fixed headroom of 8 free frames runs
// out in every burst and the application blocks; Glitter sizes its reserve
// from the bursts it measured and rebuilds it between them, so after the
// first bursts it does not block.
func TestAdaptiveThresholdAbsorbsBursts(t *testing.T) {
	const rounds, scale = 40, 256
	acc := burstyTrace(rounds)
	limit, headroom := 100, fastswap.Scaled(fastswap.MaxReclaimOffload, scale)
	fs := runHost(t, fastswap.New(fastswap.Params{}, scale), acc, limit, headroom)
	gl := runHost(t, glitter.NewEngine(glitter.Params{}, scale), acc, limit, headroom)
	for name, st := range map[string]*paging.Stats{"fastswap": fs, "glitter": gl} {
		if st.Integrity != 0 {
			t.Errorf("%s: integrity errors %v", name, st.IntegrityDetail)
		}
		var blocked time.Duration
		for _, b := range st.Blocks {
			blocked += b.Duration
		}
		t.Logf("%s: %d blocks (%v blocked), %d evictions, completion %v", name, len(st.Blocks), blocked, st.Evictions, st.Completion)
	}
	if len(fs.Blocks) < rounds-5 {
		t.Errorf("fastswap blocked %d times in %d bursts; the test expects about one block per burst", len(fs.Blocks), rounds)
	}
	if len(gl.Blocks) > len(fs.Blocks)/4 {
		t.Errorf("glitter blocked %d times, fastswap %d: the adaptive reserve should absorb the bursts", len(gl.Blocks), len(fs.Blocks))
	}
	if gl.Completion >= fs.Completion {
		t.Errorf("glitter took %v, fastswap %v", gl.Completion, fs.Completion)
	}
}

func ExampleRules() {
	for _, r := range glitter.Rules()[:4] {
		fmt.Printf("%s urgency %d → priority %d\n", r.Type, r.Urgency, r.Priority)
	}
	// Output:
	// read urgency 0 → priority 7
	// data urgency 0 → priority 7
	// write urgency 1 → priority 1
	// ack urgency 1 → priority 1
}
