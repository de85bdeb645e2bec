package freeina

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/roce/wire"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/internal/units"
	dp "github.com/tracebed/tracebed/p4/freeina"
	sysfree "github.com/tracebed/tracebed/systems/freeina"
	"github.com/tracebed/tracebed/systems/inasched"
	"github.com/tracebed/tracebed/topologies"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/traces/models"
	"github.com/tracebed/tracebed/workloads/training/fabric"
)

// soakCases is the number of random runs of TestSoak; 0 keeps the
// default (fewer under -short). A long soak:
//
//	go test ./workloads/freeina -run '^TestSoak$' -freeina.soak 500 -timeout 2h
var soakCases = flag.Int("freeina.soak", 0, "random runs of TestSoak (0: the default count)")

// soakRun is one random packet-level run of TestSoak.
type soakRun struct {
	hosts, aggregators, ps int
	rate                   units.Rate
	loss, dup, reorder     float64
	jobs                   []jobtrace.Job
	profiles               []models.Profile
	overflow               float64
	control                sysfree.PathControl
	window, message        int
	// outage, if after > 0: from the after-th RoCEv2 frame between job
	// 0's workers, the switch drops them all for span RC timeouts
	// (connections give up, chunks recovered, connections
	// re-established).
	after, span int
}

func (s soakRun) String() string {
	return fmt.Sprintf("%d hosts, %d PS, %d aggregators, %v, loss %.3f dup %.3f reorder %.3f, overflow %.3f, control %+v, window %d, message %d, outage after %d for %d timeouts; jobs %+v; profiles %+v",
		s.hosts, s.ps, s.aggregators, s.rate, s.loss, s.dup, s.reorder, s.overflow, s.control, s.window, s.message, s.after, s.span, s.jobs, s.profiles)
}

// drawRun draws a run from seed: 4–9 worker hosts, 1–3 parameter
// servers, 8 to 1024 aggregators (from far less than one job's window to
// every job's), links of 1–25 Gbps losing, duplicating and reordering
// 0–5% of frames each, 1–3 jobs of 2–4 workers and 2–5 iterations with
// gradients of 8–192 chunks, overflowing chunks in a third of the runs
// (0.5–3%), the path rule as it is, never leaving INA, or with random
// back-off, RNIC windows of 16 to 4096 packets, PS messages of 4–64 KiB,
// and in a quarter of the runs an outage of job 0's INA path long enough
// for its connections to give up.
func drawRun(seed uint64) soakRun {
	r := rand.New(rand.NewPCG(seed, 0xf4ee))
	imp := func() float64 {
		if r.IntN(3) == 0 {
			return 0
		}
		return 0.05 * r.Float64()
	}
	s := soakRun{
		hosts: 4 + r.IntN(6), ps: 1 + r.IntN(3), aggregators: []int{8, 16, 48, 128, 1024}[r.IntN(5)],
		rate: []units.Rate{units.Gbps, 10 * units.Gbps, 25 * units.Gbps}[r.IntN(3)],
		loss: imp(), dup: imp(), reorder: imp(),
		control: sysfree.DefaultControl,
		window:  []int{16, 64, 4096}[r.IntN(3)],
		message: []int{4 << 10, 16 << 10, 64 << 10}[r.IntN(3)],
	}
	switch r.IntN(3) {
	case 0:
		s.control.Margin = 1000 // the INA path always, when granted
	case 1:
		s.control.Backoff = 1 + r.IntN(4)
		s.control.MaxBackoff = s.control.Backoff << r.IntN(4)
	}
	if r.IntN(3) == 0 {
		s.overflow = 0.005 + 0.025*r.Float64()
	}
	for i := range 2 {
		s.profiles = append(s.profiles, models.Profile{Name: fmt.Sprintf("m%d", i), GradientBytes: int64(8+r.IntN(185)) << 10,
			Compute: time.Duration(100+r.IntN(300)) * time.Microsecond})
	}
	for id := range 1 + r.IntN(3) {
		s.jobs = append(s.jobs, jobtrace.Job{ID: id, Model: s.profiles[r.IntN(2)].Name, Workers: 2 + r.IntN(min(3, s.hosts-1)),
			Iterations: 2 + r.IntN(4), Arrival: time.Duration(1+r.IntN(500)) * time.Microsecond})
	}
	if r.IntN(4) == 0 {
		// The span is in RC timeouts (soakOnce), enough for every
		// retry to run out.
		s.after, s.span = 1+r.IntN(400), 12
		s.jobs[0].Iterations += 4 // room to come back to the INA path
		s.jobs[0].Arrival = 0     // first, so it takes the first workers
	}
	return s
}

// heldChecker wraps FreeINA's scheduler: no grant exceeds the switch's
// memory, and after the run nothing is held.
type heldChecker struct {
	*sysfree.Scheduler
	mem  inasched.Memory
	errs []string
}

func (h *heldChecker) Binding(now time.Duration, id int) inasched.Binding {
	b := h.Scheduler.Binding(now, id)
	for sw, m := range h.mem {
		if n := h.Held(sw); n > m {
			h.errs = append(h.errs, fmt.Sprintf("at %v %s holds %d aggregators of %d", now, sw, n, m))
		}
	}
	if b.INA() && b.Base+b.Size > h.maxMem() {
		h.errs = append(h.errs, fmt.Sprintf("at %v job %d granted %v", now, id, b))
	}
	return b
}

func (h *heldChecker) maxMem() int {
	m := 0
	for _, v := range h.mem {
		m = max(m, v)
	}
	return m
}

// soakOnce runs s on sim and checks it: Run's own checks (every sum at
// every worker exact, the RC contract kept at every host), every
// all-reduce done, no memory held by the scheduler at the end.
func soakOnce(t *testing.T, seed uint64, s soakRun) *Outcome {
	t.Helper()
	sc := starOf(t, s.hosts, s.aggregators, s.ps, s.rate, s.loss, s.dup, s.reorder)
	// The RC timeout covers a full buffer's drain and a PS message, as
	// the ina kind's (freeTimeout, workloads/training): shorter, a
	// connection gives up under congestion alone.
	var buf units.Bytes
	for _, l := range sc.Top.Links {
		buf = max(buf, l.Buffer)
	}
	timeout := max(time.Millisecond, fabric.Secs(2*float64(int64(buf)+int64(s.message))*8/float64(s.rate)))
	prog, err := dp.SwitchProgram()
	if err != nil {
		t.Fatal(err)
	}
	var cut *outage
	if s.after > 0 {
		// Jobs take the lowest free workers in rank order: job 0 the
		// first ones.
		in := map[netip.Addr]bool{}
		for _, name := range sc.Workers[:s.jobs[0].Workers] {
			in[sc.Top.Node(name).IP] = true
		}
		plain := prog.New
		prog.New = func(sw *topologies.Node, routes topologies.RouteTable) (dataplane.Dataplane, error) {
			d, err := plain(sw, routes)
			cut = &outage{Dataplane: d, drop: func(src, dst netip.Addr) bool { return in[src] && in[dst] }, after: s.after, span: time.Duration(s.span) * wire.AckTimeout(timeoutCode(timeout))}
			return cut, err
		}
	}
	tb, err := testbed.NewSim(testbed.Config{Topology: sc.Top, Program: &prog, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	var chk *heldChecker
	policy := func(mem inasched.Memory, _ int) (inasched.Scheduler, error) {
		chk = &heldChecker{Scheduler: sysfree.New(mem, true), mem: mem}
		return chk, nil
	}
	lookup := func(name string) (models.Profile, bool) {
		for _, p := range s.profiles {
			if p.Name == name {
				return p, true
			}
		}
		return models.Profile{}, false
	}
	o, err := Run(context.Background(), Setup{Testbed: tb, Workers: sc.Workers, Controller: sc.Controller, PS: sc.PS,
		Net: fabric.DefaultNet, Jobs: s.jobs, Lookup: lookup, Policy: policy, Seed: seed, Control: s.control,
		Timeout: timeout, Window: s.window, Message: s.message, Overflow: s.overflow, Limit: 60 * time.Second})
	if err != nil {
		t.Fatalf("run: %v\ncase: %v", err, s)
	}
	want := 0
	for _, j := range s.jobs {
		want += j.Iterations
	}
	var errs []string
	if o.Rounds != want {
		errs = append(errs, fmt.Sprintf("%d all-reduces, want %d", o.Rounds, want))
	}
	if o.Violations != 0 {
		errs = append(errs, fmt.Sprintf("%d breaches of RC, the first: %s", o.Violations, o.Violation))
	}
	if cut == nil && uint64(o.RecoveredChunks) != o.Switch.Overflows {
		errs = append(errs, fmt.Sprintf("%d chunks recovered, the switch flagged %d", o.RecoveredChunks, o.Switch.Overflows))
	}
	// Every connection that gave up is re-established, and so is every
	// other INA connection of its job with requests not acknowledged
	// (docs/freeina.md §4); none without one giving up.
	if o.Reconnected < o.GaveUp || o.GaveUp == 0 && o.Reconnected > 0 {
		errs = append(errs, fmt.Sprintf("%d connections gave up, %d re-established", o.GaveUp, o.Reconnected))
	}
	errs = append(errs, chk.errs...)
	for sw := range chk.mem {
		if n := chk.Held(sw); n != 0 {
			errs = append(errs, fmt.Sprintf("%s: %d aggregators held after every job left", sw, n))
		}
	}
	for _, e := range errs {
		t.Error(e)
	}
	if t.Failed() {
		t.Logf("case: %v", s)
	}
	if cut != nil {
		t.Logf("outage %v to %v: %d frames dropped", cut.start, cut.end, cut.dropped)
	}
	return o
}

// TestSoak runs FreeINA's packet level with random parameters (drawRun):
// every run must end with every all-reduce done, every sum exact at every
// worker (on either path, recovered chunks too), no breach of RC at any
// host, every connection that gave up re-established, and the switch's
// memory all returned. Across the runs, the goroutines and the heap must
// not grow.
func TestSoak(t *testing.T) {
	n := 10
	switch {
	case *soakCases > 0:
		n = *soakCases
	case testing.Short():
		n = 3
	}
	var heap0 uint64
	var g0 int
	for i := range uint64(n) {
		seed := 100 + i
		s := drawRun(seed)
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			o := soakOnce(t, seed, s)
			t.Logf("%d all-reduces, %d on INA, %d recovered (%d chunks), %d gave up; %d retransmitted, %d timeouts",
				o.Rounds, o.RoundsINA, o.Recovered, o.RecoveredChunks, o.GaveUp, o.Devices.Retransmitted, o.Devices.Timeouts)
		})
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		if i == 0 {
			heap0, g0 = ms.HeapAlloc, runtime.NumGoroutine()
			continue
		}
		if g := runtime.NumGoroutine(); g > g0 {
			t.Errorf("after run %d: %d goroutines, %d after the first", i+1, g, g0)
		}
		if ms.HeapAlloc > heap0+64<<20 {
			t.Errorf("after run %d: heap %d MiB, %d MiB after the first", i+1, ms.HeapAlloc>>20, heap0>>20)
		}
	}
}

// TestSoakManyAllReduces: two jobs of 4 and 3 workers run 150
// all-reduces each, with 1% of frames lost, duplicated and reordered and
// 1% of the chunks overflowing, so that rounds go both paths and some are
// recovered. Sampled during the run (Setup.Progress), after a fifth and
// after nine tenths of the all-reduces, neither the goroutines nor the
// live heap may grow: what a run keeps per all-reduce is its two
// durations (TookINA, TookPS) and a memory-series step, a few KiB over
// the run, where one gradient kept per all-reduce and worker would be 32
// KiB × 7 × 240 ≈ 52 MiB. The bound, 8 MiB, leaves room for the GC's
// noise and the sim's event queue.
func TestSoakManyAllReduces(t *testing.T) {
	iters := 150
	if testing.Short() {
		iters = 40
	}
	tb, sc := testbedOf(t, 8, 256, 2, 10*units.Gbps, 0.01, 0.01, 0.01, 7)
	var heap [2]uint64
	var gor [2]int
	sampled := 0
	sample := func(frac float64) {
		if sampled < 2 && frac >= []float64{0.2, 0.9}[sampled] {
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			heap[sampled], gor[sampled] = ms.HeapAlloc, runtime.NumGoroutine()
			sampled++
		}
	}
	jobs := []jobtrace.Job{{ID: 0, Model: "m", Workers: 4, Iterations: iters}, {ID: 1, Model: "m", Workers: 3, Iterations: iters}}
	o, err := Run(context.Background(), Setup{Testbed: tb, Workers: sc.Workers, Controller: sc.Controller, PS: sc.PS,
		Net: fabric.DefaultNet, Jobs: jobs, Lookup: testProfile("m", 32<<10, 200*time.Microsecond), Policy: freePolicy, Seed: 7,
		Overflow: 0.01, Progress: sample, Limit: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d all-reduces: %d on INA, %d recovered; heap %d KiB after a fifth, %d KiB after nine tenths; goroutines %d, %d",
		o.Rounds, o.RoundsINA, o.Recovered, heap[0]>>10, heap[1]>>10, gor[0], gor[1])
	switch {
	case o.Rounds != 2*iters:
		t.Errorf("%d all-reduces, want %d", o.Rounds, 2*iters)
	case sampled != 2:
		t.Errorf("sampled %d times", sampled)
	case heap[1] > heap[0]+8<<20:
		t.Errorf("the heap grew from %d KiB to %d KiB", heap[0]>>10, heap[1]>>10)
	case gor[1] > gor[0]:
		t.Errorf("goroutines grew from %d to %d", gor[0], gor[1])
	}
}
