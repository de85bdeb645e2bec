package paging

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/sim"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/p4/farmem"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/systems/evict"
	"github.com/tracebed/tracebed/topologies"
	memtrace "github.com/tracebed/tracebed/traces/mem"
)

// engine is a test policy: a fixed background rule and direct batch.
type engine struct {
	bg     func(s *evict.State) int
	direct int
}

func (e engine) Background(s *evict.State) int {
	if e.bg == nil {
		return 0
	}
	return e.bg(s)
}
func (e engine) Direct(*evict.State) int { return e.direct }

// overLimit is Fastswap's rule: reclaim the excess over the limit.
func overLimit(batch int) func(s *evict.State) int {
	return func(s *evict.State) int { return min(max(s.Used-s.Limit, 0), batch) }
}

type rig struct {
	s       *sim.Sim
	net     *sim.Network
	hosts   []*Host
	servers []*Server
	addrs   []netip.AddrPort // server addresses
}

// topo returns a star (one switch) or a two-leaf leaf-spine whose first
// hosts run paging hosts and whose last run memory servers.
func topo(t testing.TB, kind string, loss float64) string {
	t.Helper()
	imp := fmt.Sprintf("loss: %g", loss)
	if loss > 0 {
		// Lossy links also duplicate and reorder a little.
		imp += fmt.Sprintf(", duplicate: %g, reorder: %g", loss/2, loss/2)
	}
	switch kind {
	case "star":
		return fmt.Sprintf(`name: star
topology:
  defaults: {link: {rate: 100Gbps, delay: 1us, buffer: 1MiB, %s}}
  nodes:
    tor: {kind: switch}
    h1: {kind: host}
    h2: {kind: host}
    h3: {kind: host}
    s1: {kind: host}
    s2: {kind: host}
  links:
    - {endpoints: [h1, tor]}
    - {endpoints: [h2, tor]}
    - {endpoints: [h3, tor]}
    - {endpoints: [s1, tor]}
    - {endpoints: [s2, tor]}
`, imp)
	case "leafspine":
		return fmt.Sprintf(`name: ls
topology:
  defaults: {link: {rate: 100Gbps, delay: 1us, buffer: 1MiB, %s}}
  nodes:
    spine: {kind: switch}
    leaf1: {kind: switch}
    leaf2: {kind: switch}
    h1: {kind: host}
    h2: {kind: host}
    h3: {kind: host}
    s1: {kind: host}
    s2: {kind: host}
  links:
    - {endpoints: [h1, leaf1]}
    - {endpoints: [h2, leaf1]}
    - {endpoints: [h3, leaf1]}
    - {endpoints: [s1, leaf2]}
    - {endpoints: [s2, leaf2]}
    - {endpoints: [leaf1, spine]}
    - {endpoints: [leaf2, spine]}
`, imp)
	}
	t.Fatalf("no topology %s", kind)
	return ""
}

// newRig starts len(traces) hosts (h1, h2, …) and nservers servers.
func newRig(t testing.TB, kind string, loss float64, nservers int, seed uint64, cfgs []HostConfig, traces [][]memtrace.Access) *rig {
	t.Helper()
	top := mustTopo(t, topo(t, kind, loss))
	s := sim.New()
	opts := sim.Options{Seed: seed, Pipeline: fwd.SimPipeline}
	n, err := sim.NewNetwork(s, top, opts)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{s: s, net: n}
	for i := range nservers {
		srv := NewServer(4096)
		name := fmt.Sprintf("s%d", i+1)
		if _, err := n.Attach(name, farmem.Port, srv); err != nil {
			t.Fatal(err)
		}
		r.servers = append(r.servers, srv)
		r.addrs = append(r.addrs, netip.AddrPortFrom(top.Node(name).IP, farmem.Port))
	}
	for i, acc := range traces {
		cfg := cfgs[i]
		cfg.ID = uint32(i + 1)
		cfg.Servers = r.addrs
		cfg.Stripe = i
		h, err := NewHost(cfg, memtrace.NewSliceSource(acc), 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.Attach(fmt.Sprintf("h%d", i+1), farmem.HostPort, h); err != nil {
			t.Fatal(err)
		}
		r.hosts = append(r.hosts, h)
	}
	return r
}

// run runs until every host is done, and checks the servers' copies.
func (r *rig) run(t testing.TB) {
	t.Helper()
	for {
		done := true
		for _, h := range r.hosts {
			done = done && h.Done()
		}
		if done {
			break
		}
		if r.s.Pending() == 0 {
			t.Fatalf("simulation stalled at %v with hosts not done", r.s.Now())
		}
		r.s.RunUntil(r.s.Now() + sim.Millisecond)
		if r.s.Now() > 100*sim.Second {
			t.Fatal("no end in 100 simulated seconds")
		}
	}
	for _, h := range r.hosts {
		CheckServers(h, r.lookup)
	}
}

func (r *rig) lookup(server netip.AddrPort, host netip.AddrPort, page uint64) (uint32, uint32, []byte, bool) {
	for i, a := range r.addrs {
		if a == server {
			return r.servers[i].Lookup(host, page)
		}
	}
	return 0, 0, nil, false
}

func mustTopo(t testing.TB, y string) *topologies.Topology {
	t.Helper()
	top, err := topologies.Parse("test.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return top
}

func twoPass(n int, gap time.Duration) []memtrace.Access {
	var acc []memtrace.Access
	for p := range n {
		acc = append(acc, memtrace.Access{Page: uint64(p), Gap: gap, Write: true})
	}
	for p := range n {
		acc = append(acc, memtrace.Access{Page: uint64(p), Gap: gap})
	}
	return acc
}

func sample(t testing.TB, name string) []memtrace.Access {
	t.Helper()
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

// frameTime is the serialization time of a far-memory message at 100 Gbps.
func frameTime(data int) time.Duration {
	return time.Duration(units.TransmitTime(units.Bytes(frame.HeaderLen+farmem.HeaderLen+data), 100*units.Gbps)) // ps
}

// roundTrip is one request of reqData bytes and its response of respData
// bytes over hops store-and-forward links of 100 Gbps and 1µs, in ps.
func roundTrip(hops, reqData, respData int) time.Duration {
	return time.Duration(hops) * (frameTime(reqData) + frameTime(respData) + 2*time.Duration(sim.Microsecond))
}

func TestNoFaultsWhenWorkingSetFits(t *testing.T) {
	for _, tc := range []struct {
		name string
		acc  []memtrace.Access
		ws   int
	}{
		{"two-pass", sample(t, "two-pass.memtxt"), 8},
		{"hot-cold", sample(t, "hot-cold.memtxt"), 6},
		{"transpose", sample(t, "transpose.memtrace"), 142},
	} {
		for _, repl := range []Replacement{Clock, LRU} {
			t.Run(tc.name+"/"+string(repl), func(t *testing.T) {
				cfg := HostConfig{Limit: tc.ws, Headroom: 2, Replacement: repl, Engine: engine{bg: overLimit(2), direct: 2}}
				r := newRig(t, "star", 0, 1, 1, []HostConfig{cfg}, [][]memtrace.Access{tc.acc})
				r.run(t)
				st := r.hosts[0].Stats()
				if st.Faults != 0 || len(st.Blocks) != 0 || st.Evictions != 0 || st.Writebacks != 0 {
					t.Errorf("faults %d, blocks %d, evictions %d, write-backs %d; want none", st.Faults, len(st.Blocks), st.Evictions, st.Writebacks)
				}
				if st.Ops != uint64(len(tc.acc)) || st.FirstTouches != uint64(tc.ws) {
					t.Errorf("ops %d, first touches %d; want %d, %d", st.Ops, st.FirstTouches, len(tc.acc), tc.ws)
				}
				var compute time.Duration
				for _, a := range tc.acc {
					compute += a.Gap
				}
				if st.Completion != compute {
					t.Errorf("completion %v, want the trace's compute %v", st.Completion, compute)
				}
				if fired := r.s.Fired(); fired > 3 {
					t.Errorf("%d events for a run of local hits, want at most 3 (start, finish)", fired)
				}
			})
		}
	}
}

// TestTwoPassHandChecked replays the two-pass sample (8 pages written, then
// read) with 3 frames, no background reclaim and a direct reclaim of one
// page, on a star at 100 Gbps with 1µs links. Worked by hand:
//
//	pass 1: pages 0-2 allocated; pages 3-7 each block while the LRU page
//	        (0-4, dirty) is written back: 5 blocks of one write round trip T.
//	pass 2: every access misses (LRU, 3 < 8). Pages 0-2 each block for the
//	        write-back of 5, 6, 7 (T), then fetch (T); pages 3-7 evict a
//	        clean page (0-4, dropped at once: a block of 0) and fetch (T).
//
// So: 8 first touches, 8 faults, 8 write-backs, 5 clean drops, 13 blocks
// (8 of T, 5 of 0), and completion 16 gaps + 16 T.
func TestTwoPassHandChecked(t *testing.T) {
	const gap = 100 * time.Nanosecond
	acc := sample(t, "two-pass.memtxt")
	cfg := HostConfig{Limit: 3, Headroom: 0, Replacement: LRU, Engine: engine{direct: 1}}
	r := newRig(t, "star", 0, 1, 1, []HostConfig{cfg}, [][]memtrace.Access{acc})
	r.run(t)
	st := r.hosts[0].Stats()
	T := roundTrip(2, 4096, 0) // a write and its ack = a read and its data
	if got := roundTrip(2, 0, 4096); got != T {
		t.Fatalf("asymmetric round trips %v %v", T, got)
	}
	want := Stats{Ops: 16, Hits: 0, FirstTouches: 8, Faults: 8, Writebacks: 8, CleanDrops: 5, Evictions: 13}
	if st.Ops != want.Ops || st.Hits != want.Hits || st.FirstTouches != want.FirstTouches || st.Faults != want.Faults ||
		st.Writebacks != want.Writebacks || st.CleanDrops != want.CleanDrops || st.Evictions != want.Evictions {
		t.Errorf("got %+v", *st)
	}
	if len(st.Blocks) != 13 {
		t.Fatalf("%d blocks, want 13", len(st.Blocks))
	}
	long, zero := 0, 0
	for _, b := range st.Blocks {
		switch {
		case b.Duration == 0:
			zero++
		case absDiff(b.Duration*1000, T) < 1000: // ns resolution
			long++
		default:
			t.Errorf("block of %v, want 0 or %v", b.Duration, T/1000)
		}
	}
	if long != 8 || zero != 5 {
		t.Errorf("%d blocks of T and %d of 0, want 8 and 5", long, zero)
	}
	wantEnd := (16*gap*1000 + 16*T) / 1000 // ps → ns, truncated as Env.Now
	if st.Completion != wantEnd {
		t.Errorf("completion %v, want %v", st.Completion, wantEnd)
	}
	if st.Integrity != 0 {
		t.Errorf("integrity errors: %v", st.IntegrityDetail)
	}
}

func absDiff(a, b time.Duration) time.Duration {
	if a > b {
		return a - b
	}
	return b - a
}

// TestLRUSecondPassFetchesEveryPage checks the closed form: two sequential
// passes over N pages with M < N frames under LRU fetch exactly N pages in
// the second pass (every access misses), whatever the reclaim policy.
func TestLRUSecondPassFetchesEveryPage(t *testing.T) {
	for _, tc := range []struct{ n, limit, headroom, batch int }{
		{8, 3, 0, 1}, {64, 16, 4, 4}, {256, 200, 8, 8}, {300, 1, 1, 1}, {1000, 512, 32, 32},
	} {
		t.Run(fmt.Sprintf("N%d-M%d", tc.n, tc.limit+tc.headroom), func(t *testing.T) {
			cfg := HostConfig{Limit: tc.limit, Headroom: tc.headroom, Replacement: LRU, Engine: engine{bg: overLimit(tc.batch), direct: tc.batch}}
			r := newRig(t, "star", 0, 2, 1, []HostConfig{cfg}, [][]memtrace.Access{twoPass(tc.n, 200*time.Nanosecond)})
			r.run(t)
			st := r.hosts[0].Stats()
			if st.Faults != uint64(tc.n) || st.Hits != 0 {
				t.Errorf("second pass: %d fetches and %d hits, want %d and 0", st.Faults, st.Hits, tc.n)
			}
			if st.Integrity != 0 {
				t.Errorf("integrity errors: %v", st.IntegrityDetail)
			}
		})
	}
}

// TestIdleFaultCost checks the closed form of a fault on an idle network:
// one round trip of the read and its data, where each store-and-forward hop
// pays the page's transfer time: hops × (read + data serialization + 2 ×
// delay).
func TestIdleFaultCost(t *testing.T) {
	for _, tc := range []struct {
		topo string
		hops int
	}{{"star", 2}, {"leafspine", 4}} {
		t.Run(tc.topo, func(t *testing.T) {
			// Write 4 pages with 2 frames, wait 1ms for the write-backs,
			// then read page 0: one fault on a quiet network.
			acc := twoPass(4, 0)[:4]
			acc = append(acc, memtrace.Access{Page: 0, Gap: time.Millisecond})
			cfg := HostConfig{Limit: 2, Headroom: 1, Engine: engine{bg: overLimit(1), direct: 1}}
			r := newRig(t, tc.topo, 0, 1, 1, []HostConfig{cfg}, [][]memtrace.Access{acc})
			r.run(t)
			st := r.hosts[0].Stats()
			if st.FaultLatency.Len() != 1 {
				t.Fatalf("%d faults, want 1", st.FaultLatency.Len())
			}
			want := roundTrip(tc.hops, 0, 4096)
			if got := st.FaultLatency.Max() * 1000; absDiff(got, want) >= 1000 {
				t.Errorf("fault took %v, want %v (within the nanosecond agents see)", st.FaultLatency.Max(), time.Duration(want/1000))
			}
		})
	}
}

// TestIntegrityUnderLoss runs hosts over lossy links: reads and writes are
// retransmitted, and every page read back is the version last written.
func TestIntegrityUnderLoss(t *testing.T) {
	gen := func(seed uint64) []memtrace.Access {
		// A random mix of reads and writes over 200 pages, in two phases.
		var acc []memtrace.Access
		x := seed
		for i := range 6000 {
			x = x*6364136223846793005 + 1442695040888963407
			acc = append(acc, memtrace.Access{Page: (x >> 33) % 200, Gap: 50 * time.Nanosecond, Write: i < 200 || (x>>20)%3 == 0})
		}
		return acc
	}
	for _, loss := range []float64{0.01, 0.05} {
		t.Run(fmt.Sprint("loss", loss), func(t *testing.T) {
			var cfgs []HostConfig
			var traces [][]memtrace.Access
			for i := range 3 {
				cfgs = append(cfgs, HostConfig{Limit: 60, Headroom: 4, Engine: engine{bg: overLimit(4), direct: 4}, RTOMin: 20 * time.Microsecond})
				traces = append(traces, gen(uint64(i+1)))
			}
			r := newRig(t, "leafspine", loss, 2, 7, cfgs, traces)
			r.run(t)
			var retx, faults uint64
			for _, h := range r.hosts {
				st := h.Stats()
				if st.Integrity != 0 {
					t.Errorf("integrity errors: %v", st.IntegrityDetail)
				}
				retx += st.Retransmits
				faults += st.Faults
			}
			if retx == 0 || faults < 1000 {
				t.Errorf("%d retransmissions over %d faults: the test exercises nothing", retx, faults)
			}
			var stale uint64
			for _, s := range r.servers {
				stale += s.Stats().DupWrites + s.Stats().StaleWrites
			}
			t.Logf("%d faults, %d retransmissions, %d duplicate or stale writes at the servers", faults, retx, stale)
		})
	}
}

// TestIntegrityErrorsAreCaught corrupts a stored page: the host's check must
// count it (a check that cannot fail checks nothing).
func TestIntegrityErrorsAreCaught(t *testing.T) {
	acc := twoPass(16, 100*time.Nanosecond)
	cfg := HostConfig{Limit: 4, Headroom: 1, Replacement: LRU, Engine: engine{bg: overLimit(1), direct: 1}}
	r := newRig(t, "star", 0, 1, 1, []HostConfig{cfg}, [][]memtrace.Access{acc})
	// Run until page 0 is stored, then flip a byte of it.
	for {
		r.s.RunUntil(r.s.Now() + sim.Microsecond)
		if _, _, data, ok := r.servers[0].Lookup(r.hosts[0].Addr(), 0); ok {
			data[100] ^= 1
			break
		}
	}
	r.run(t)
	st := r.hosts[0].Stats()
	if st.Integrity == 0 || !strings.Contains(strings.Join(st.IntegrityDetail, "\n"), "page 0") {
		t.Errorf("a corrupted page went unnoticed: %d errors %v", st.Integrity, st.IntegrityDetail)
	}
}

func TestDeterministic(t *testing.T) {
	run := func() *Stats {
		cfg := HostConfig{Limit: 40, Headroom: 4, Engine: engine{bg: overLimit(4), direct: 4}}
		r := newRig(t, "leafspine", 0.01, 2, 3, []HostConfig{cfg, cfg}, [][]memtrace.Access{sample(t, "transpose.memtrace"), twoPass(100, 10)})
		r.run(t)
		return r.hosts[0].Stats()
	}
	a, b := run(), run()
	if fmt.Sprint(*a) != fmt.Sprint(*b) {
		t.Error("two runs with one seed differ")
	}
}

func TestTraceErrors(t *testing.T) {
	acc := []memtrace.Access{{Page: 1, Write: true}, {Page: MaxPages + 5}}
	cfg := HostConfig{Limit: 4, Engine: engine{direct: 1}}
	r := newRig(t, "star", 0, 1, 1, []HostConfig{cfg}, [][]memtrace.Access{acc})
	r.run(t)
	if st := r.hosts[0].Stats(); !strings.Contains(st.TraceError, "beyond the host's") || st.Ops != 1 {
		t.Errorf("trace error %q after %d accesses", st.TraceError, st.Ops)
	}
}

// lateEnv fires every timer late by a fixed amount, as a real substrate's
// timers do.
type lateEnv struct {
	emulator.Env
	late time.Duration
}

func (e lateEnv) After(d time.Duration, f func()) emulator.Timer { return e.Env.After(d+e.late, f) }

// lateHost starts a host on a lateEnv.
type lateHost struct {
	*Host
	late time.Duration
}

func (a lateHost) Start(env emulator.Env) { a.Host.Start(lateEnv{env, a.late}) }

// TestLateTimersDoNotAccumulate replays 20 first touches 10 µs apart, each
// one past the limit (so the application sleeps before each one), with
// timers that fire on time and with timers that fire 3 µs late: the
// application's schedule is anchored at the times its sleeps were meant to
// end, so it finishes at 200 µs in both cases — not 200 µs plus 19 late
// wake-ups.
func TestLateTimersDoNotAccumulate(t *testing.T) {
	var trace strings.Builder
	for p := range 20 {
		fmt.Fprintf(&trace, "W %d 10us\n", p)
	}
	for _, late := range []time.Duration{0, 3 * time.Microsecond} {
		top, err := topologies.Parse("star.yaml", []byte(topo(t, "star", 0)))
		if err != nil {
			t.Fatal(err)
		}
		s := sim.New()
		net, err := sim.NewNetwork(s, top, sim.Options{Seed: 1, Pipeline: fwd.SimPipeline})
		if err != nil {
			t.Fatal(err)
		}
		_, src, err := memtrace.Open("t.memtxt", []byte(trace.String()))
		if err != nil {
			t.Fatal(err)
		}
		h, err := NewHost(HostConfig{ID: 1, Limit: 1, Headroom: 32, Engine: engine{direct: 1},
			Servers: []netip.AddrPort{netip.AddrPortFrom(top.Node("s1").IP, farmem.Port)}}, src, 20)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := net.Attach("h1", farmem.HostPort, lateHost{h, late}); err != nil {
			t.Fatal(err)
		}
		s.Run()
		st := h.Stats()
		if !h.Done() || st.Ops != 20 || st.FirstTouches != 20 {
			t.Fatalf("late %v: done %v, %d ops, %d first touches", late, h.Done(), st.Ops, st.FirstTouches)
		}
		if st.Completion != 200*time.Microsecond {
			t.Errorf("timers %v late: completion %v, want 200µs", late, st.Completion)
		}
	}
}

// TestPageEntrySize keeps the page-table entry at 32 bytes (two to a cache
// line, see page).
func TestPageEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(page{}); n != 32 {
		t.Errorf("a page-table entry is %d bytes, want 32", n)
	}
}
