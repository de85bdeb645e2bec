package flow

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/systems/atp"
	"github.com/tracebed/tracebed/systems/dynaina"
	"github.com/tracebed/tracebed/systems/inasched"
	"github.com/tracebed/tracebed/systems/mine"
	"github.com/tracebed/tracebed/systems/noina"
	"github.com/tracebed/tracebed/systems/switchml"
	"github.com/tracebed/tracebed/topologies"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/traces/models"
	"github.com/tracebed/tracebed/workloads/training/fabric"
)

// soakCases is the number of random fabrics of TestSoakPolicies; 0 keeps
// the default (fewer under -short). A long soak:
//
//	go test ./workloads/training/flow -run SoakPolicies -flow.soak 2000 -timeout 1h
var soakCases = flag.Int("flow.soak", 0, "random fabrics of TestSoakPolicies (0: the default count)")

// soakFabric is one random network and workload of the soak.
type soakFabric struct {
	desc     string
	top      *topologies.Topology
	jobs     []jobtrace.Job
	profiles []models.Profile
	net      fabric.Net
	part     int // SwitchML's partition
}

// drawFabric draws a fabric from seed: a star (one rack), a leaf-spine or
// a k=4 fat tree (jobs across racks aggregate on two levels), links of
// 10–100 Gbps, switch memory from none to 8192 aggregators, 1–10 jobs of
// 1–12 workers and 1–6 iterations arriving over 5 ms, gradients of 16 KiB
// to 16 MiB, compute of 50 µs to 5 ms, host jitter 0–10%; or, in a
// quarter of the fabrics, a random subset of a real trace (traceSubset).
//
// The trace subsets draw from a stream of their own, so that the other
// fabrics of a seed stay as they were drawn before subsets existed (the
// regression cases); traces false leaves them out.
func drawFabric(t testing.TB, seed uint64, traces bool) soakFabric {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 0xf10))
	p := topologies.Params{
		Rate:        []units.Rate{10 * units.Gbps, 25 * units.Gbps, 100 * units.Gbps}[r.IntN(3)],
		Delay:       units.Duration(time.Duration(1+r.IntN(5)) * time.Microsecond),
		Aggregators: []int{0, 16, 64, 256, 1024, 8192}[r.IntN(6)],
	}
	switch r.IntN(3) {
	case 0:
		p.Generate, p.Hosts = "star", 2+r.IntN(15)
	case 1:
		p.Generate, p.Spines, p.Leaves, p.HostsPerLeaf = "leafspine", 1+r.IntN(2), 2+r.IntN(3), 2+r.IntN(3)
	default:
		p.Generate, p.K = "fattree", 4
	}
	f, err := topologies.Generate(p)
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("soak")
	if err != nil {
		t.Fatal(err)
	}
	hosts := len(top.Hosts())
	fb := soakFabric{top: top, net: fabric.DefaultNet, part: []int{16, 128, 512, 1024}[r.IntN(4)]}
	fb.net.Jitter = 0.1 * r.Float64()
	for i := range 3 {
		fb.profiles = append(fb.profiles, models.Profile{Name: fmt.Sprintf("m%d", i),
			GradientBytes: int64(16<<10) << r.IntN(11), Compute: time.Duration(50+r.IntN(4950)) * time.Microsecond})
	}
	trace := "generated"
	if tr := rand.New(rand.NewPCG(seed, 0x7ace)); traces && tr.IntN(4) == 0 {
		trace = traceSubset(t, tr, &fb, hosts)
	} else {
		for id := range 1 + r.IntN(10) {
			fb.jobs = append(fb.jobs, jobtrace.Job{ID: id, Model: fb.profiles[r.IntN(3)].Name, Workers: 1 + r.IntN(min(hosts, 12)),
				Iterations: 1 + r.IntN(6), Arrival: time.Duration(r.IntN(5000)) * time.Microsecond})
		}
	}
	fb.desc = fmt.Sprintf("%s of %d hosts at %v, %d aggregators, %d jobs (%s), jitter %.3f", p.Generate, hosts, p.Rate, p.Aggregators, len(fb.jobs), trace, fb.net.Jitter)
	return fb
}

// traceSubset fills fb's jobs with 2–12 consecutive jobs of a real trace
// (Philly's, as Gavel recorded it, or Tiresias' 60 jobs; the embedded
// copies), from a random place: their models (real profiles) and
// arrivals, the arrivals from the first one's and compressed 1000×,
// workers and iterations capped to the fabric (hosts, and 1–6
// iterations). It names the subset.
func traceSubset(t testing.TB, r *rand.Rand, fb *soakFabric, hosts int) string {
	t.Helper()
	name := []string{"philly-e13805.trace", "tiresias-60job.csv"}[r.IntN(2)]
	data, err := jobtrace.Samples.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var all []jobtrace.Job
	if jobtrace.IsGavel(data) {
		all, err = jobtrace.ParseGavelCompressed(name, data, 1000)
	} else {
		all, err = jobtrace.ParseTiresias(name, data)
	}
	if err != nil {
		t.Fatal(err)
	}
	n := min(len(all), 2+r.IntN(11))
	from := r.IntN(len(all) - n + 1)
	base := all[from].Arrival
	have := map[string]bool{}
	for i, j := range all[from : from+n] {
		prof, ok := models.Lookup(j.Model)
		if !ok {
			t.Fatalf("%s: job %d's model %q unknown", name, j.ID, j.Model)
		}
		if !have[prof.Name] {
			have[prof.Name] = true
			fb.profiles = append(fb.profiles, prof)
		}
		fb.jobs = append(fb.jobs, jobtrace.Job{ID: i, Model: prof.Name, Workers: min(j.Workers, hosts),
			Iterations: 1 + min(j.Iterations-1, r.IntN(6)), Arrival: (j.Arrival - base) / 1000})
	}
	return fmt.Sprintf("%s jobs %d–%d", name, from, from+n-1)
}

// checkScheduler wraps a scheduler and checks every binding it gives: an
// INA binding lies within the memory of every switch of the job's tree.
type checkScheduler struct {
	inasched.Scheduler
	mem  inasched.Memory
	jobs map[int]inasched.Job
	last map[int]inasched.Binding // the last binding of every job
	errs *[]string
}

func (c *checkScheduler) Admit(now time.Duration, j inasched.Job) {
	c.jobs[j.ID] = j
	c.Scheduler.Admit(now, j)
}

func (c *checkScheduler) Binding(now time.Duration, id int) inasched.Binding {
	b := c.Scheduler.Binding(now, id)
	c.last[id] = b
	if b.INA() {
		for _, sw := range c.jobs[id].Switches() {
			if b.Base < 0 || b.Base+b.Size > c.mem[sw] {
				*c.errs = append(*c.errs, fmt.Sprintf("at %v job %d bound to %v on %s, which has %d aggregators", now, id, b, sw, c.mem[sw]))
			}
		}
	}
	return b
}

func (c *checkScheduler) lastOf(id int) inasched.Binding { return c.last[id] }

// checkAllReduce is checkScheduler for an all-reduce-level scheduler. It
// adds up the aggregator-seconds of its grants, from the all-reduce's
// start (Binding) to its end (End, or the job's departure): what the
// model's mem_util must come to.
type checkAllReduce struct {
	*checkScheduler
	ar   inasched.AllReduceScheduler
	open map[int]time.Duration // the start of each job's grant
	// area is the aggregator-seconds granted; slack what the scheduler's
	// clock, the model's seconds truncated to nanoseconds, may have lost
	// of it (up to 1 ns at each end of each grant).
	area, slack *float64
}

func (c checkAllReduce) Binding(now time.Duration, id int) inasched.Binding {
	c.close(now, id) // a binding is for one all-reduce
	b := c.checkScheduler.Binding(now, id)
	if b.INA() {
		c.open[id] = now
	}
	return b
}

func (c checkAllReduce) close(now time.Duration, id int) {
	if start, ok := c.open[id]; ok {
		n := float64(c.last[id].Size * len(c.jobs[id].Switches()))
		*c.area += n * (now - start).Seconds()
		*c.slack += n * 2e-9
		delete(c.open, id)
	}
}

func (c checkAllReduce) End(now time.Duration, id int) {
	c.close(now, id)
	c.ar.End(now, id)
}

func (c checkAllReduce) Depart(now time.Duration, id int) {
	c.close(now, id)
	c.checkScheduler.Depart(now, id)
}

// grantedArea returns the aggregator-seconds an all-reduce-level
// scheduler granted and their uncertainty, or false for another.
func grantedArea(s inasched.Scheduler) (area, slack float64, ok bool) {
	if c, ok := s.(checkAllReduce); ok {
		return *c.area, *c.slack, true
	}
	return 0, 0, false
}

// checked returns f's schedulers wrapped in the checks, and the last one
// built.
func checked(f inasched.Factory, errs *[]string) (inasched.Factory, *inasched.Scheduler) {
	var last inasched.Scheduler
	return func(mem inasched.Memory, slot int) (inasched.Scheduler, error) {
		s, err := f(mem, slot)
		if err != nil {
			return nil, err
		}
		c := &checkScheduler{Scheduler: s, mem: mem, jobs: map[int]inasched.Job{}, last: map[int]inasched.Binding{}, errs: errs}
		last = c
		if ar, ok := s.(inasched.AllReduceScheduler); ok {
			last = checkAllReduce{checkScheduler: c, ar: ar, open: map[int]time.Duration{}, area: new(float64), slack: new(float64)}
		}
		return last, nil
	}, &last
}

// recordBinder is a Binder that keeps what is installed on every switch:
// at the end of a run nothing may be left (memory returned). It checks
// each installed range against the switch's memory too.
type recordBinder struct {
	mem       inasched.Memory
	installed map[int]inasched.Binding
	errs      *[]string
}

func nop(context.Context) error { return nil }

func (b *recordBinder) BindCall(j inasched.Job, bd inasched.Binding, _ []string) (inasched.Call, error) {
	for _, sw := range j.Switches() {
		if bd.INA() && bd.Base+bd.Size > b.mem[sw] {
			*b.errs = append(*b.errs, fmt.Sprintf("job %d installed as %v on %s, which has %d aggregators", j.ID, bd, sw, b.mem[sw]))
		}
	}
	b.installed[j.ID] = bd
	return nop, nil
}

func (b *recordBinder) UnbindCall(j inasched.Job) (inasched.Call, error) {
	delete(b.installed, j.ID)
	return nop, nil
}

func (b *recordBinder) EndCall(j inasched.Job) (inasched.Call, error) { return b.UnbindCall(j) }

// soakPolicies are the policies of the soak: every one tracebed has.
func soakPolicies(part int) []struct {
	name string
	f    inasched.Factory
} {
	return []struct {
		name string
		f    inasched.Factory
	}{
		{"noina", noina.New},
		{"switchml", switchml.Factory(switchml.Params{Partition: part})},
		{"atp", atp.New},
		{"dynaina", dynaina.Factory(dynaina.DefaultParams)},
		{"freeina", freeFactory(true)},
		{"freeina-whole", freeFactory(false)},
		{"mine", mine.New},
	}
}

// TestSoakPolicies runs every policy on random fabrics (drawFabric): one
// rack or several (jobs across racks aggregating on two levels), memory
// from none to plenty, random jobs. In every run:
//
//   - every job completes (Simulate fails otherwise), after it arrived,
//     in no less than its physical bound, its every iteration's
//     all-reduce counted once (INA or not) and its every gradient byte
//     all-reduced;
//   - no binding the scheduler gives, and none installed on a switch,
//     exceeds the memory of a switch of the job's tree; when every job
//     has left nothing is installed on any switch, and the scheduler
//     binds a probe job as a fresh scheduler does (no memory leaked
//     across jobs);
//   - memory utilisation and its series stay within [0, 1], the INA
//     fraction within [0, 1] (0 without memory or with noina);
//   - the same seed gives the same outcome.
func TestSoakPolicies(t *testing.T) {
	n := 40
	switch {
	case *soakCases > 0:
		n = *soakCases
	case testing.Short():
		n = 8
	}
	for seed := range uint64(n) {
		fb := drawFabric(t, seed+1, true)
		for _, pol := range soakPolicies(fb.part) {
			t.Run(fmt.Sprintf("seed%d/%s", seed+1, pol.name), func(t *testing.T) { soakPolicy(t, fb, seed, pol.name, pol.f) })
		}
	}
}

// TestSoakRegressions are the soak's failing cases, kept by name.
//
//   - atp-memory-over-pool (seed 14, and 19 more of 1500): ATP's
//     shared-mode windows added up to more than its pool while every
//     worker of several jobs waited for their slowest (the skew phase),
//     and the model counted them all as memory in use: 116% of the
//     switch's memory in use. The collisions model the excess; the
//     memory in use is now capped at the pool. Seed 190 then still
//     came to 100.0015%: the cap subtracted occupancies of the collision
//     fixed point's last pass but one.
//   - freeina-memory-lost (seed 2, and most multi-job FreeINA runs): the
//     refresh of the memory in use after each change of rates counted
//     pool holders and shared occupancy but not FreeINA's grants, so it
//     erased a grant when its stream started, and its release then
//     counted negative: FreeINA's mem_util came out far too low with
//     several jobs (freeina-100g, 16 jobs: 41% for 69%).
func TestSoakRegressions(t *testing.T) {
	for _, c := range []struct {
		name   string
		seed   uint64
		policy string
	}{
		{"atp-memory-over-pool", 14, "atp"},
		{"atp-memory-over-pool-2", 104, "atp"},
		{"atp-memory-over-pool-stale", 190, "atp"},
		{"freeina-memory-lost", 2, "freeina"},
		{"freeina-memory-lost-whole", 4, "freeina-whole"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fb := drawFabric(t, c.seed, false)
			for _, pol := range soakPolicies(fb.part) {
				if pol.name == c.policy {
					soakPolicy(t, fb, c.seed-1, pol.name, pol.f)
				}
			}
		})
	}
}

// soakPolicy runs one policy on one fabric of the soak and checks it
// (TestSoakPolicies).
func soakPolicy(t *testing.T, fb soakFabric, seed uint64, name string, pf inasched.Factory) {
	var errs []string
	f, last := checked(pf, &errs)
	mem := inasched.Memory{}
	for _, sw := range fb.top.Switches() {
		mem[sw.Name] = sw.Aggregators
	}
	rb := &recordBinder{mem: mem, installed: map[int]inasched.Binding{}, errs: &errs}
	s := Setup{Top: fb.top, Net: fb.net, Jobs: fb.jobs, Policy: f, Binder: rb, Seed: seed, Lookup: custom(fb.profiles...)}
	o, err := Simulate(context.Background(), s)
	if err != nil {
		t.Fatalf("%s: %v", fb.desc, err)
	}
	errs = append(errs, checkOutcome(fb, o, name)...)
	if area, slack, ok := grantedArea(*last); ok {
		memory := 0
		for _, m := range mem {
			memory += m
		}
		if got := o.MemUtil * float64(memory) * o.Makespan; math.Abs(got-area) > slack+1e-9*area {
			errs = append(errs, fmt.Sprintf("mem_util %.9f is %.9g aggregator-seconds; the scheduler granted %.9g", o.MemUtil, got, area))
		}
	}
	if len(rb.installed) > 0 {
		errs = append(errs, fmt.Sprintf("installed after every job left: %v", rb.installed))
	}
	errs = append(errs, probe(pf, *last, mem, fb.top)...)
	again, err := Simulate(context.Background(), Setup{Top: fb.top, Net: fb.net, Jobs: fb.jobs, Policy: pf, Seed: seed, Lookup: custom(fb.profiles...)})
	if err != nil {
		t.Fatal(err)
	}
	o.Rebinds, again.Rebinds = 0, 0 // the first run had a binder
	if !reflect.DeepEqual(o, again) {
		errs = append(errs, "two runs of one seed differ")
	}
	for _, e := range errs {
		t.Error(e)
	}
	if t.Failed() {
		t.Logf("fabric: %s; jobs %+v; profiles %+v", fb.desc, fb.jobs, fb.profiles)
	}
}

// checkOutcome checks one run's outcome (TestSoakPolicies).
func checkOutcome(fb soakFabric, o *Outcome, policy string) []string {
	var errs []string
	grad := map[string]float64{}
	for _, p := range fb.profiles {
		grad[p.Name] = float64(p.GradientBytes)
	}
	if len(o.Jobs) != len(fb.jobs) {
		errs = append(errs, fmt.Sprintf("%d results for %d jobs", len(o.Jobs), len(fb.jobs)))
	}
	for _, j := range o.Jobs {
		rounds := j.INARounds + j.RingRounds
		want := 0
		if j.Workers > 1 {
			want = j.Iterations
		}
		g := float64(want) * grad[j.Model]
		switch {
		case !(j.Start >= j.Arrival && j.Finish >= j.Start) || math.IsInf(j.Finish, 0) || math.IsNaN(j.Finish):
			errs = append(errs, fmt.Sprintf("job %d: arrival %v, start %v, finish %v", j.ID, j.Arrival, j.Start, j.Finish))
		case j.JCT() < j.Bound*(1-1e-9):
			errs = append(errs, fmt.Sprintf("job %d: JCT %.9f below its bound %.9f", j.ID, j.JCT(), j.Bound))
		case rounds != want:
			errs = append(errs, fmt.Sprintf("job %d: %d all-reduces (%d INA, %d ring) for %d iterations of %d workers", j.ID, rounds, j.INARounds, j.RingRounds, j.Iterations, j.Workers))
		case math.Abs(j.Gradient-g) > 1e-6*g+1e-6:
			errs = append(errs, fmt.Sprintf("job %d: %.0f bytes all-reduced, want %.0f", j.ID, j.Gradient, g))
		case j.INA > j.Gradient*(1+1e-9) || j.INA < 0:
			errs = append(errs, fmt.Sprintf("job %d: %.0f bytes in the switch of %.0f", j.ID, j.INA, j.Gradient))
		}
	}
	const eps = 1e-9
	if o.MemUtil < 0 || o.MemUtil > 1+eps {
		errs = append(errs, fmt.Sprintf("mem_util %v outside [0, 1]", o.MemUtil))
	}
	for _, p := range o.MemSeries {
		if p.Y < -eps || p.Y > 1+eps {
			errs = append(errs, fmt.Sprintf("memory in use %v at %v s, outside [0, 1]", p.Y, p.X))
			break
		}
	}
	memory := 0
	for _, sw := range fb.top.Switches() {
		memory += sw.Aggregators
	}
	if o.INAFraction < 0 || o.INAFraction > 1+eps || (memory == 0 || policy == "noina") && o.INAFraction != 0 {
		errs = append(errs, fmt.Sprintf("ina_fraction %v with %d aggregators under %s", o.INAFraction, memory, policy))
	}
	return errs
}

// probe admits, on every switch, a job that wants all of its memory to
// the scheduler a run left (every job departed) and to a fresh one of the
// same policy: both must bind it alike, or the run leaked memory.
func probe(f inasched.Factory, used inasched.Scheduler, mem inasched.Memory, top *topologies.Topology) []string {
	fresh, err := f(mem, 1)
	if err != nil {
		return []string{err.Error()}
	}
	var errs []string
	for i, sw := range top.Switches() {
		if sw.Aggregators == 0 {
			continue
		}
		j := inasched.Job{ID: 1<<20 + i, Workers: 8, Switch: sw.Name, Compute: time.Millisecond, Gradient: 1 << 30,
			CommINA: 10 * time.Millisecond, CommRing: 40 * time.Millisecond, Latency: 10 * time.Microsecond, Demand: sw.Aggregators, Useful: 1,
			CommPS: 12 * time.Millisecond, DemandPS: sw.Aggregators, LatencyPS: 20 * time.Microsecond,
			CommRDMA: 10 * time.Millisecond, LatencyRDMA: 10 * time.Microsecond, CommPSPath: 80 * time.Millisecond,
			DemandRDMA: sw.Aggregators, UsefulRDMA: 1, SlotRDMA: 1}
		var got [2]inasched.Binding
		for k, s := range []inasched.Scheduler{used, fresh} {
			s.Admit(0, j)
			got[k] = s.Binding(0, j.ID)
			if ar, ok := s.(inasched.AllReduceScheduler); ok {
				ar.End(0, j.ID)
			}
			s.Depart(0, j.ID)
		}
		u, fr := got[0], got[1]
		if u.Mode != fr.Mode || u.Base != fr.Base || u.Size != fr.Size || u.INA() != fr.INA() {
			errs = append(errs, fmt.Sprintf("%s: a probe job gets %v after the run, %v from a fresh scheduler", sw.Name, u, fr))
		}
	}
	return errs
}

// TestSoakClosedForms: one job alone on a star without jitter, host
// turnaround or switch latency, with random gradient (64 KiB–64 MiB),
// compute (0.1–10 ms), workers (2–8), link rate (10–400 Gbps), delay
// (0.5–5 µs) and iterations. Each policy's JCT must equal its closed
// form, iterations × (compute + all-reduce), f = 322/256 the INA frame's
// wire bytes per gradient byte and d + F·8/R a hop's latency for a frame
// of F bytes:
//
//   - host ring (noina): 2(n−1)/n·G·f·8/R + 2(n−1)·2(d + 322·8/R), each
//     of the 2(n−1) steps crossing two hops;
//   - pool mode (SwitchML, DynaINA) with memory for the window:
//     G·f·8/R + 2(d + 322·8/R);
//   - ATP alone (no collisions): the same plus the parameter server's
//     round trip, 2(d + 322·8/R);
//   - FreeINA's INA path: G·(1024 + 140)/1024·8/R + 2(d + (1024+78)·8/R);
//     without memory its PS path: n·G·a·8/R + 4(d + (4096+58)·8/R).
//
// Memory utilisation too: a policy that holds a range of S aggregators
// (of M) exactly while the all-reduce runs — a pool granted when the
// workers, all done at once without jitter, ask for it; FreeINA's grant
// for one all-reduce — uses S/M · comm/(compute + comm) of the memory;
// without memory, or with noina, 0. (ATP's occupancy is a model of its
// own, checked against the packet level elsewhere.)
//
// The model is event-driven over float64 seconds, so the only difference
// allowed is rounding: 1e-9 relative (a million ulps over at most 20
// iterations of sums of a few terms).
func TestSoakClosedForms(t *testing.T) {
	n := 60
	if testing.Short() {
		n = 15
	}
	for seed := range uint64(n) {
		r := rand.New(rand.NewPCG(seed, 0xc105ed))
		G := float64(int64(64<<10) << r.IntN(11))
		compute := time.Duration(100+r.IntN(9900)) * time.Microsecond
		workers := 2 + r.IntN(7)
		R := []float64{10e9, 25e9, 100e9, 400e9}[r.IntN(4)]
		d := time.Duration(500+r.IntN(4500)) * time.Nanosecond
		iters := 1 + r.IntN(20)
		prof := models.Profile{Name: "m", GradientBytes: int64(G), Compute: compute}
		trace := []jobtrace.Job{{ID: 0, Model: "m", Workers: workers, Iterations: iters}}
		hop := func(frame float64) float64 { return d.Seconds() + frame*8/R }
		f := 322.0 / 256
		nn := float64(workers)
		ring := 2*(nn-1)/nn*G*f*8/R + 2*(nn-1)*2*hop(322)
		pool := G*f*8/R + 2*hop(322)
		ina := G*fabric.RDMACoef(1024)*8/R + 2*hop(1024+fabric.RDMAHeader)
		ps := nn*G*fabric.PSCoef()*8/R + 4*hop(fabric.PSMTU+fabric.PSMiddle)
		for _, c := range []struct {
			policy      string
			f           inasched.Factory
			aggregators int
			comm        float64
		}{
			{"noina", noina.New, 8192, ring},
			{"switchml", switchml.Factory(switchml.Params{Partition: 8192}), 8192, pool},
			{"dynaina", dynaina.Factory(dynaina.DefaultParams), 8192, pool},
			{"atp", atp.New, 8192, pool + 2*hop(322)},
			{"freeina", freeFactory(true), 8192, ina},
			{"freeina-ps", freeFactory(true), 0, ps},
		} {
			t.Run(fmt.Sprintf("seed%d/%s", seed, c.policy), func(t *testing.T) {
				f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 8, Rate: units.Rate(R), Delay: units.Duration(d), Aggregators: c.aggregators})
				if err != nil {
					t.Fatal(err)
				}
				top, err := f.Build("closed")
				if err != nil {
					t.Fatal(err)
				}
				var errs []string
				pol, last := checked(c.f, &errs)
				o := simulate(t, Setup{Top: top, Net: quiet(), Jobs: trace, Policy: pol, Seed: seed, Lookup: custom(prof)})
				want := float64(iters) * (compute.Seconds() + c.comm)
				if got := o.Jobs[0].JCT(); !near(got, want, 1e-9) {
					t.Errorf("JCT %.12f s, closed form %.12f s (G %.0f B, compute %v, %d workers, %v, delay %v, %d iterations)",
						got, want, G, compute, workers, units.Rate(R), d, iters)
				}
				if c.policy == "atp" {
					return
				}
				size := 0
				if b := (*last).(interface{ lastOf(int) inasched.Binding }).lastOf(0); b.INA() {
					size = b.Size
				}
				if c.aggregators > 0 {
					wantMem := float64(size) / float64(c.aggregators) * c.comm / (compute.Seconds() + c.comm)
					if !near(o.MemUtil, wantMem, 1e-9) && !(wantMem == 0 && o.MemUtil == 0) {
						t.Errorf("mem_util %.12f, closed form %.12f (%d of %d aggregators)", o.MemUtil, wantMem, size, c.aggregators)
					}
				}
			})
		}
	}
}
