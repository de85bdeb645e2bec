// Package farmem is tracebed's far-memory experiment (kind farmem): paging
// hosts replay applications' page-access traces with part of their working
// set in local memory, share memory servers across a simulated fabric whose
// switches run the far-memory pipeline (p4/farmem), and evict under the
// policy under study — Fastswap (systems/fastswap), Glitter
// (systems/glitter) or an ablation. Other tenants' bulk traffic may load the
// memory servers' links. Every page read back is checked against the last
// version written, in the run itself (integrity_errors).
//
// The agents are in workloads/farmem/paging, the applications in
// workloads/farmem/apps; docs/farmem.md describes the experiment and
// docs/glitter.md the policies and the results.
package farmem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"gopkg.in/yaml.v3"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/internal/yamlx"
	pfarmem "github.com/tracebed/tracebed/p4/farmem"
	"github.com/tracebed/tracebed/systems/evict"
	"github.com/tracebed/tracebed/systems/fastswap"
	"github.com/tracebed/tracebed/systems/glitter"
	"github.com/tracebed/tracebed/topologies"
	memtrace "github.com/tracebed/tracebed/traces/mem"
	"github.com/tracebed/tracebed/workloads/farmem/apps"
	"github.com/tracebed/tracebed/workloads/farmem/paging"
)

// Params are the workload parameters; scenarios override any of them.
type Params struct {
	// App is the application every host runs: a workload of package apps,
	// "mix" (the workloads in turn, host by host) or "trace" (Trace). Apps,
	// if given, names one per host instead.
	App  string   `yaml:"app"`
	Apps []string `yaml:"apps"`
	// Trace is a memory trace file (.memtrace, .memtxt or .lackey) for
	// App "trace"; every host replays it in its own address space. A
	// pattern ("recordings/*.lackey", path.Match syntax) names one trace
	// per host, as Traces does.
	Trace string `yaml:"trace"`
	// Traces are one trace per host: the hosts whose application is
	// "trace" take them in turn (the first such host the first trace, …,
	// wrapping around when there are more hosts than traces). When set,
	// it takes precedence over Trace.
	Traces []string `yaml:"traces"`
	// LocalMemory is each host's local memory as a fraction of its working
	// set (Fastswap's memory.high).
	LocalMemory float64 `yaml:"local_memory"`
	// Hosts, Servers and Background.Senders take the topology's hosts in
	// order (compute hosts first, then memory servers, then bulk senders),
	// unless Roles names them.
	Hosts   int   `yaml:"hosts"`
	Servers int   `yaml:"servers"`
	Roles   Roles `yaml:"roles"`
	// MemoryScale divides every working set (apps.Params.Scale) and
	// Fastswap's page constants alike.
	MemoryScale float64 `yaml:"memory_scale"`
	// Iterations overrides the applications' passes (see apps.Params).
	Iterations int `yaml:"iterations"`
	// Replacement is clock or lru.
	Replacement string `yaml:"replacement"`
	// PageSize is the page size (4KiB).
	PageSize units.Bytes `yaml:"page_size"`
	// FaultOverhead and ReclaimOverhead are CPU costs per fault and per
	// reclaimed page (paging.HostConfig).
	FaultOverhead   units.Duration `yaml:"fault_overhead"`
	ReclaimOverhead units.Duration `yaml:"reclaim_overhead"`
	// Background is other tenants' traffic to the memory servers.
	Background Background `yaml:"background"`
	// Loss, Duplicate and Reorder are injected on every link.
	Loss      units.Fraction `yaml:"loss"`
	Duplicate units.Fraction `yaml:"duplicate"`
	Reorder   units.Fraction `yaml:"reorder"`
	// RTOMin is the hosts' smallest retransmission timeout.
	RTOMin units.Duration `yaml:"rto_min"`
	At     yamlx.Where    `yaml:"-"`
}

// Roles name the hosts of each role explicitly.
type Roles struct {
	Hosts      []string `yaml:"hosts"`
	Servers    []string `yaml:"servers"`
	Background []string `yaml:"background"`
}

// Background describes other tenants' bulk traffic.
type Background struct {
	// Senders is the number of bulk senders. Every server's link gets the
	// load whatever their number: the senders share the total equally, and
	// a sender sends to several servers when there are fewer senders than
	// servers (spreadBulk).
	Senders int `yaml:"senders"`
	// Load is the mean offered load on each memory server's link, as a
	// fraction of its rate (0: none).
	Load float64 `yaml:"load"`
	// Burst is the mean ON period; senders send at line rate while on.
	Burst units.Duration `yaml:"burst"`
	// Frame is the bulk frame size on the wire.
	Frame units.Bytes `yaml:"frame"`
}

// DefaultParams are used for fields the spec leaves out.
var DefaultParams = Params{
	App: "memcached", LocalMemory: 0.5, Hosts: 4, Servers: 2, MemoryScale: 128,
	Replacement: "clock", PageSize: 4 * units.KiB,
	Background: Background{Burst: units.Duration(50 * time.Microsecond), Frame: 9000},
}

// Policy is the policy entry of a spec.
type Policy struct {
	// Host is the eviction engine: fastswap or glitter.
	Host string `yaml:"host"`
	// Network is what the switches do: fifo (nothing) or glitter
	// (urgency-marked write-backs mapped to priorities, fetches first).
	Network      string         `yaml:"network"`
	OffloadPages int            `yaml:"offload_pages"`
	MaxReserve   int            `yaml:"max_reserve"`
	Margin       float64        `yaml:"margin"`
	UrgencyBase  units.Duration `yaml:"urgency_base"`
}

// Policies by name: the systems and the ablations.
var namedPolicies = map[string]Policy{
	"fastswap":          {Host: "fastswap", Network: "fifo"},
	"glitter":           {Host: "glitter", Network: "glitter"},
	"glitter-host-only": {Host: "glitter", Network: "fifo"},
	"glitter-net-only":  {Host: "fastswap", Network: "glitter"},
}

// Kind is the farmem experiment kind.
type Kind struct {
	// TraceCache holds text and lackey traces converted to the binary
	// form (memtrace.Cache); the zero value uses the default directory,
	// memtrace.DefaultCacheDir().
	TraceCache memtrace.Cache
}

// Name implements experiments.Kind.
func (Kind) Name() string { return "farmem" }

// scenario is a compiled scenario.
type scenario struct {
	p        Params
	top      *topologies.Topology
	hosts    []string
	servers  []string
	senders  []string
	apps     []string             // per host; "trace" for a trace
	traces   []*memtrace.Prepared // per host: its trace, for app "trace"
	ops      []uint64             // accesses per host (seed 1), for progress
	pages    []int                // page table per host, in pages (seed 1)
	compute  []time.Duration      // compute per host, the trace's gaps (seed 1, paper time)
	pageSize int
	// paperRate is each link's rate before scaleTopology.
	paperRate map[*topologies.Link]units.Rate
	// rough is checkDuration's rough upper estimate of a run's paper time.
	rough time.Duration
	// scale is the spec's scale factor s: the scenario runs with link
	// rates divided by s and every time constant multiplied by s
	// (docs/scaling.md, "Far memory"); 1 is paper scale.
	scale float64
}

// stretch multiplies a duration by the scale factor.
func (sc *scenario) stretch(d time.Duration) time.Duration {
	if sc.scale == 1 {
		return d
	}
	return time.Duration(math.Round(float64(d) * sc.scale))
}

// scaleTopology divides the link rates of the scenario's topology by the
// scale factor and multiplies its delays (links' propagation, switches'
// pipeline latency) by it. Buffers keep their size in bytes: a buffer
// holds as many pages as at paper scale, and drains in s times as long,
// like everything else.
func (sc *scenario) scaleTopology() {
	sc.paperRate = map[*topologies.Link]units.Rate{}
	for _, l := range sc.top.Links {
		sc.paperRate[l] = l.Rate
	}
	if sc.scale == 1 {
		return
	}
	for _, l := range sc.top.Links {
		l.Rate = max(1, units.Rate(math.Round(float64(l.Rate)/sc.scale)))
		l.Delay = sc.stretch(l.Delay)
	}
	for _, n := range sc.top.Nodes {
		n.Latency = sc.stretch(n.Latency)
	}
}

// stretched is a trace whose compute gaps are multiplied by a scale factor.
type stretched struct {
	src   memtrace.Source
	scale float64
}

func (s stretched) Read(buf []memtrace.Access) (int, error) {
	n, err := s.src.Read(buf)
	for i := range buf[:n] {
		buf[i].Gap = time.Duration(math.Round(float64(buf[i].Gap) * s.scale))
	}
	return n, err
}

type experiment struct {
	spec      *experiments.Spec
	entries   map[string]experiments.Entry
	scenarios map[string]*scenario
	policies  map[string]Policy
	// pages is the page memory of the memory servers, which each run
	// hands on to the next (paging.PagePool).
	pages *paging.PagePool
	// near are the scenarios Rehearse runs, in spec order.
	near []nearScenario
}

// Compile implements experiments.Kind. It reports every problem of the
// scenarios and policies it finds (joined), each naming its field.
func (k Kind) Compile(spec *experiments.Spec) (experiments.Experiment, error) {
	base := DefaultParams
	if spec.Trace != "" {
		base.App, base.Trace = "trace", spec.Trace
	}
	// A value that fails to decode is reported and keeps its default, so
	// that the scenarios and policies are checked too.
	var errs []error
	if err := spec.DecodeWorkload(&base); err != nil {
		errs = append(errs, err)
	}
	if spec.Scale > maxScale {
		return nil, spec.Errorf("scale", "%g: a far-memory run may take %v of paper time, %.3g s at this scale, beyond the simulation clock's %.3g s; want a scale of at most %d", spec.Scale, runLimit, runLimit.Seconds()*spec.Scale, clockRange.Seconds(), maxScale)
	}
	e := &experiment{spec: spec, entries: map[string]experiments.Entry{}, scenarios: map[string]*scenario{}, policies: map[string]Policy{}, pages: &paging.PagePool{}}
	prepared := map[string]*memtrace.Prepared{}
	prepare := func(f memtrace.File, pageSize int) (*memtrace.Prepared, error) {
		key := fmt.Sprintf("%s\x00%d", f.Name, pageSize)
		if p, ok := prepared[key]; ok {
			return p, nil
		}
		opts := memtrace.DefaultLackeyOptions()
		opts.PageSize = pageSize
		p, err := k.TraceCache.Prepare(f, opts)
		if err != nil {
			return nil, err
		}
		prepared[key] = p
		return p, nil
	}
	// Scenarios often run the same applications: each stream is
	// summarized once.
	type stream struct {
		app string
		p   apps.Params
	}
	totals := map[stream]apps.Total{}
	summarize := func(app string, p apps.Params) (apps.Total, error) {
		if t, ok := totals[stream{app, p}]; ok {
			return t, nil
		}
		t, err := apps.Summarize(app, p, summaryBudget, spec.Err)
		if err == nil {
			totals[stream{app, p}] = t
		}
		return t, err
	}
	replays := false
	for _, sc := range spec.Scenarios {
		p := base
		if err := spec.DecodeEntry(sc, &p); err != nil {
			errs = append(errs, err)
		}
		s, err := compileScenario(spec, sc, p, prepare, summarize)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		e.scenarios[sc.Name] = s
		e.entries[sc.Name] = sc
		replays = replays || slices.Contains(s.apps, "trace")
	}
	if len(errs) == 0 && !replays && sets(spec.Workload, "trace") {
		at := spec.Scenarios[0]
		at.Node = nil // the workload's field
		errs = append(errs, experiments.EntryError(spec, at, "trace", "%s, but no scenario replays a trace: set app: trace (or name trace in apps)", base.Trace))
	}
	// A spec runs when each policy's runs end: checkDuration counts the
	// traffic of the policy that keeps the fewest frames.
	headroom := math.MaxInt
	for _, pe := range spec.Policies {
		pol, err := compilePolicy(spec, pe)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		e.policies[pe.Name] = pol
		headroom = min(headroom, pol.offload())
	}
	for _, sc := range spec.Scenarios {
		s := e.scenarios[sc.Name]
		if s == nil {
			continue
		}
		if headroom == math.MaxInt {
			break // no policy compiled
		}
		lower, rough, err := s.checkDuration(fastswap.Scaled(headroom, s.p.MemoryScale), spec.Err)
		if err != nil {
			if spec.Err() != nil {
				return nil, err
			}
			errs = append(errs, experiments.EntryError(spec, sc, "local_memory", "%v", err))
			continue
		}
		s.rough = rough
		if rough > runLimit/dryRunNear {
			e.near = append(e.near, nearScenario{sc, lower, rough})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return e, nil
}

// Rehearse implements experiments.Rehearser: the scenarios whose rough
// estimate came near the run limit run once per policy on sim (dryRun), as
// many at a time as there are cores; each that is not done in time is
// refused at its local_memory.
func (e *experiment) Rehearse(ctx context.Context) error {
	dry := make([]error, len(e.near))
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, n := range e.near {
		g.Go(func() error {
			dry[i] = e.dryRun(ctx, n)
			return nil
		})
	}
	g.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	var errs []error
	for i, err := range dry {
		if err != nil {
			errs = append(errs, experiments.EntryError(e.spec, e.near[i].entry, "local_memory", "%v", err))
		}
	}
	return errors.Join(errs...)
}

// nearScenario is a scenario whose estimate comes near the run limit, for
// a dry run.
type nearScenario struct {
	entry        experiments.Entry
	lower, rough time.Duration
}

func compilePolicy(spec *experiments.Spec, pe experiments.Entry) (Policy, error) {
	pol, ok := namedPolicies[pe.Name]
	if err := spec.DecodeEntry(pe, &pol); err != nil {
		return pol, err
	}
	if !ok && (pol.Host == "" || pol.Network == "") {
		return pol, experiments.EntryError(spec, pe, "host", "%q is not a known policy (%s); give host: fastswap|glitter and network: fifo|glitter", pe.Name, strings.Join(policyNames(), ", "))
	}
	if pol.Host != "fastswap" && pol.Host != "glitter" {
		return pol, experiments.EntryError(spec, pe, "host", "%q: want fastswap or glitter", pol.Host)
	}
	if pol.Network != "fifo" && pol.Network != "glitter" {
		return pol, experiments.EntryError(spec, pe, "network", "%q: want fifo or glitter", pol.Network)
	}
	if pol.OffloadPages < 0 || pol.MaxReserve < 0 || pol.Margin < 0 {
		return pol, experiments.EntryError(spec, pe, "offload_pages", "page counts and margin must not be negative")
	}
	return pol, nil
}

func policyNames() []string {
	var n []string
	for k := range namedPolicies {
		n = append(n, k)
	}
	slices.Sort(n)
	return n
}

// prepareFunc makes a trace file ready to replay with pages of a size,
// once per compile.
type prepareFunc func(f memtrace.File, pageSize int) (*memtrace.Prepared, error)

// summarizeFunc returns the totals of an application's stream
// (apps.Summarize), once per compile.
type summarizeFunc func(app string, p apps.Params) (apps.Total, error)

func compileScenario(spec *experiments.Spec, sc experiments.Entry, p Params, prepare prepareFunc, summarize summarizeFunc) (*scenario, error) {
	bad := func(key, format string, args ...any) error {
		return experiments.EntryError(spec, sc, key, format, args...)
	}
	switch {
	case p.LocalMemory <= 0 || p.LocalMemory > 4 || math.IsNaN(p.LocalMemory):
		return nil, bad("local_memory", "%v; want a fraction of the working set above 0 (1 or more: it all fits), at most 4", p.LocalMemory)
	case p.MemoryScale < 1:
		return nil, bad("memory_scale", "%v; want 1 (full size) or more", p.MemoryScale)
	case p.Hosts < 1 && len(p.Roles.Hosts) == 0:
		return nil, bad("hosts", "%d; want at least one paging host", p.Hosts)
	case p.Servers < 1 && len(p.Roles.Servers) == 0:
		return nil, bad("servers", "%d; want at least one memory server", p.Servers)
	case p.Replacement != "clock" && p.Replacement != "lru":
		return nil, bad("replacement", "%q; want clock or lru", p.Replacement)
	case p.PageSize < pfarmem.MinPageSize || p.PageSize > pfarmem.MaxPageSize || p.PageSize&(p.PageSize-1) != 0:
		return nil, bad("page_size", "%v; want a power of two from %d to %d bytes", p.PageSize, pfarmem.MinPageSize, pfarmem.MaxPageSize)
	case p.Background.Load < 0 || p.Background.Load > 2:
		return nil, bad("background", "load %v; want 0 (none) to 2 (twice each server's link)", p.Background.Load)
	case p.Background.Load > 0 && p.Background.Senders < 1 && len(p.Roles.Background) == 0:
		return nil, bad("background", "load %v needs senders", p.Background.Load)
	case p.Background.Load > 0 && (p.Background.Burst <= 0 || p.Background.Frame < 64 || p.Background.Frame > 65000):
		return nil, bad("background", "burst %v and frame %v: want a positive burst and a frame of 64 to 65000 bytes", p.Background.Burst, p.Background.Frame)
	case p.Iterations < 0:
		return nil, bad("iterations", "%d; want 0 (the workload's default) or more", p.Iterations)
	case p.Loss >= 0.5:
		// Past that, pages are hardly ever fetched: a loss of 1 never
		// ended (as roce-demo, which also refuses it).
		return nil, bad("loss", "%v; below 50%% please, or the pages' transfers are lost over and over and the run never ends", p.Loss)
	case p.FaultOverhead < 0 || p.FaultOverhead > maxOverhead:
		return nil, bad("fault_overhead", "%v; want 0 to %v of CPU a fault (Fastswap's are microseconds)", p.FaultOverhead, maxOverhead)
	case p.ReclaimOverhead < 0 || p.ReclaimOverhead > maxOverhead:
		return nil, bad("reclaim_overhead", "%v; want 0 to %v of CPU a reclaimed page (Fastswap's are microseconds)", p.ReclaimOverhead, maxOverhead)
	}
	s := &scenario{p: p, pageSize: int(p.PageSize), scale: spec.Scale}
	if spec.Substrate == "netns" {
		if err := s.fitsMTU(NetnsMTU); err != nil {
			key := "page_size"
			if strings.Contains(err.Error(), "background.frame") {
				key = "background"
			}
			return nil, bad(key, "%v", err)
		}
	}
	// The topology: the spec's, or a leaf-spine, built anew for this
	// scenario (its impairments and scale are the scenario's).
	top, err := scenarioTopology(spec, p)
	if err != nil {
		return nil, err
	}
	s.top = top
	s.scaleTopology()
	if spec.Substrate == "netns" {
		for _, l := range s.top.Links {
			if l.Rate > 0 && l.Rate < netnsMinRate {
				at := bad
				if !sets(sc.Node, "topology") {
					at = spec.Errorf // the spec's topology
				}
				return nil, at("topology", "link %s–%s: %v at scale %g is %d bit/s on netns, below what HTB can shape (%d bit/s, a byte a second): raise the rate", l.A, l.B, s.paperRate[l], s.scale, int64(l.Rate), int64(netnsMinRate))
			}
		}
	}
	if err := s.assignRoles(spec, sc); err != nil {
		return nil, err
	}
	if p.Background.Load > 0 {
		if _, err := s.bulkPlan(); err != nil {
			return nil, bad("background", "%v", err)
		}
	}
	// The applications.
	switch {
	case len(p.Apps) > 0:
		if len(p.Apps) != len(s.hosts) {
			return nil, bad("apps", "%d applications for %d hosts; name one per host", len(p.Apps), len(s.hosts))
		}
		s.apps = p.Apps
	case p.App == "mix":
		for i := range s.hosts {
			s.apps = append(s.apps, apps.Workloads[i%len(apps.Workloads)].Name)
		}
	default:
		for range s.hosts {
			s.apps = append(s.apps, p.App)
		}
	}
	traces, err := s.hostTraces(spec, sc, prepare)
	if err != nil {
		return nil, err
	}
	s.traces = traces
	for i, a := range s.apps {
		if t := s.traces[i]; t != nil {
			s.ops = append(s.ops, t.Stats.Accesses)
			s.pages = append(s.pages, int(max(t.Stats.Pages, t.Stats.MaxPage+1))) // page tables are dense
			s.compute = append(s.compute, t.Stats.Compute)
			continue
		}
		key := "app"
		if len(p.Apps) > 0 {
			key = fmt.Sprintf("apps[%d]", i)
		}
		ap := apps.Params{Scale: p.MemoryScale, Seed: 1, Iterations: p.Iterations}
		pages, err := apps.WorkingSet(a, p.MemoryScale)
		if err != nil {
			return nil, bad(key, "%v", err)
		}
		st, err := summarize(a, ap)
		if err != nil {
			return nil, err
		}
		s.ops = append(s.ops, st.Accesses)
		s.pages = append(s.pages, pages)
		s.compute = append(s.compute, st.Compute)
	}
	return s, nil
}

// checkDuration refuses a scenario whose runs cannot end within runLimit
// (paper time). A generated application's compute must fit. So must its
// paging traffic on each link (full duplex: reads one way, write-backs the
// other; the servers' links carry every host's): at least the write-backs
// no replacement avoids — an application writes every page of its working
// set and at the end at most local_memory of them and the reclaimer's
// headroom (the smallest of the spec's policies) are resident — and, where the link is slow enough for it to
// matter, the faults and write-backs of the first summaryBudget accesses
// replayed through the host's frames with its replacement, taken at
// replayShare (the run's latencies, headers and background traffic only
// add to it), and their faults, each waiting at least faultTime's least.
// A trace is not checked here: it may leave pages clean, and its compute
// was checked with the trace. Before these checks, a scenario with a link
// too slow for its pages validated and then ran to the run limit.
//
// It returns the largest of those lower bounds, and a rough upper figure:
// all of the stream's faults (the replay's, extrapolated) each behind full
// queues (faultTime's worst), and the server links' traffic sharing them
// with the background load. Rehearse runs a scenario whose rough figure
// comes near the limit (dryRun).
func (s *scenario) checkDuration(headroom int, stop func() error) (lower, rough time.Duration, err error) {
	var serverRate, serverReads, serverWrites, serverRough float64
	for _, name := range s.servers {
		serverRate += float64(s.paperRate[s.top.Node(name).Ports[0].Link])
	}
	ps := float64(s.pageSize)
	paper := func(pages, rate float64) time.Duration {
		if rate <= 0 {
			return time.Duration(math.MaxInt64)
		}
		return time.Duration(min(pages*ps*8/rate*float64(time.Second), math.MaxInt64))
	}
	for i, host := range s.hosts {
		if s.traces[i] != nil {
			continue
		}
		if s.compute[i] > runLimit {
			return 0, 0, fmt.Errorf("host %s's %s computes for %v (paper time) at memory_scale %v and iterations %d, beyond the run limit of %v: lower the iterations or raise memory_scale", host, s.apps[i], s.compute[i].Round(time.Second), s.p.MemoryScale, s.p.Iterations, runLimit)
		}
		frames := s.limit(s.pages[i]) + headroom
		rate := float64(s.paperRate[s.top.Node(host).Ports[0].Link])
		writes := float64(max(0, s.pages[i]-frames))
		if d := paper(writes, rate); d > runLimit {
			return 0, 0, fmt.Errorf("host %s's %s writes %d pages of its %d to a server at least once (local_memory %v), %s over a %s link: at least %v of paper time, beyond the run limit of %v: raise the link rate, local_memory or memory_scale",
				host, s.apps[i], int(writes), s.pages[i], s.p.LocalMemory, mib(writes*ps), units.Rate(rate), d.Round(time.Second), runLimit)
		}
		lower = max(lower, s.compute[i], paper(writes, rate))
		hostRough := s.compute[i] + paper(writes, rate)
		var reads float64
		fault, worst := s.faultTime(host)
		times := func(n float64, d time.Duration) time.Duration {
			return time.Duration(min(n*float64(d), math.MaxInt64/2))
		}
		// Every access a fault and a write-back could not take so long,
		// even with every queue full: no replay needed.
		ops := float64(s.ops[i])
		if frames < s.pages[i] && (paper(2*ops, min(rate, serverRate)) > runLimit || s.compute[i]+times(ops, worst) > runLimit/dryRunNear) {
			g, err := apps.New(s.apps[i], apps.Params{Scale: s.p.MemoryScale, Seed: 1, Iterations: s.p.Iterations})
			if err != nil {
				return 0, 0, err
			}
			l, err := replayLoad(g, g.Pages(), frames, paging.Replacement(s.p.Replacement), summaryBudget, stop)
			if err != nil {
				return 0, 0, err
			}
			reads = replayShare * float64(l.reads)
			writes = max(writes, replayShare*float64(l.writes))
			if d := paper(max(reads, writes), rate); d > runLimit {
				return 0, 0, fmt.Errorf("host %s's %s, its first %d accesses replayed through %s over its %d frames (local_memory %v), faults %d times and writes back %d pages: %.0f%% of that, %s over a %s link, takes %v of paper time, beyond the run limit of %v: raise the link rate, local_memory or memory_scale",
					host, s.apps[i], l.accesses, s.p.Replacement, frames, s.p.LocalMemory, l.reads, l.writes, 100*replayShare, mib(max(reads, writes)*ps), units.Rate(rate), d.Round(time.Second), runLimit)
			}
			lower = max(lower, paper(max(reads, writes), rate))
			// The application waits for each fault's page: a round trip
			// and the page's transmission at the path's slowest link.
			d := s.compute[i] + times(reads, fault)
			if d > runLimit {
				return 0, 0, fmt.Errorf("host %s's %s, its first %d accesses replayed through %s over its %d frames (local_memory %v), faults %d times: %.0f%% of those faults, each waiting %v for its page, and %v of compute take %v of paper time, beyond the run limit of %v: raise the link rate, lower the delays, or raise local_memory or memory_scale",
					host, s.apps[i], l.accesses, s.p.Replacement, frames, s.p.LocalMemory, l.reads, 100*replayShare, fault.Round(time.Microsecond), s.compute[i].Round(time.Millisecond), d.Round(time.Second), runLimit)
			}
			lower = max(lower, d)
			// All of the stream's faults, each behind full queues.
			all := float64(l.reads) * ops / float64(max(l.accesses, 1))
			hostRough = max(hostRough, s.compute[i]+times(all, worst))
			serverRough += all + float64(l.writes)*ops/float64(max(l.accesses, 1))
		} else {
			serverRough += writes
		}
		rough = max(rough, hostRough)
		serverReads += reads
		serverWrites += writes
	}
	d := paper(max(serverReads, serverWrites), serverRate)
	if d > runLimit {
		return 0, 0, fmt.Errorf("the hosts read %s from and write %s to the memory servers (%d) at least, over %s of server links (local_memory %v): about %v of paper time, beyond the run limit of %v: raise the link rate, local_memory or memory_scale, or add servers",
			mib(serverReads*ps), mib(serverWrites*ps), len(s.servers), units.Rate(serverRate), s.p.LocalMemory, d.Round(time.Second), runLimit)
	}
	lower = max(lower, d)
	if len(s.senders) > 0 && s.p.Background.Load > 0 {
		// The other tenant's load leaves the rest of the server links,
		// a tenth at least (it may offer more than the links carry).
		serverRough /= max(0.1, 1-s.p.Background.Load)
	}
	return lower, max(rough, lower, paper(serverRough, serverRate)), nil
}

// limit is the local memory, in pages, of a host whose working set is ws
// pages.
func (sc *scenario) limit(ws int) int { return max(1, int(math.Ceil(sc.p.LocalMemory*float64(ws)))) }

// offload is the policy's MAX_RECLAIM_OFFLOAD before scaling: the host's
// headroom.
func (p Policy) offload() int {
	if p.OffloadPages == 0 {
		return fastswap.MaxReclaimOffload
	}
	return p.OffloadPages
}

// mib formats bytes in MiB.
func mib(bytes float64) string { return fmt.Sprintf("%.1f MiB", bytes/(1<<20)) }

// replayShare is the share of a replay's faults and write-backs
// checkDuration counts. The replay runs the hosts' replacement without
// their asynchronous reclaim and with seed 1's stream: on glitter-100g's
// 18 single-application scenarios its faults were 0.71–1.42 of the runs'
// (mean per host of four seeds; quicksort, whose pivots are random, and
// linpack at 90% the farthest), so 0.6 of them stays below every run.
const replayShare = 0.6

// summaryBudget is how many accesses of an application's stream the
// compile counts before it extrapolates the rest (apps.Summarize): about a
// CPU-second, so that validating a scenario of many iterations takes no
// longer than one of a few.
const summaryBudget = 1 << 22

// hostTraces returns each host's trace (nil for hosts that run a
// generator): the files of Traces or Trace (a path or a pattern), prepared
// for replay and checked against the scenario, assigned in turn to the
// hosts whose application is "trace".
func (s *scenario) hostTraces(spec *experiments.Spec, sc experiments.Entry, prepare prepareFunc) ([]*memtrace.Prepared, error) {
	p := s.p
	bad := func(key, format string, args ...any) error {
		if key == "trace" && spec.At.Has("trace") && !sets(sc.Node, "trace") && !sets(spec.Workload, "trace") {
			// The spec's top-level trace.
			return spec.Errorf(key, format, args...)
		}
		return experiments.EntryError(spec, sc, key, format, args...)
	}
	out := make([]*memtrace.Prepared, len(s.apps))
	replaying := 0
	for _, a := range s.apps {
		if a == "trace" {
			replaying++
		}
	}
	key, names := "trace", []string{p.Trace}
	if len(p.Traces) > 0 {
		key, names = "traces", p.Traces
	}
	if replaying == 0 {
		if len(p.Traces) > 0 {
			return nil, bad("traces", "%d traces, but no host replays one: set app: trace (or name trace in apps)", len(p.Traces))
		}
		if p.Trace != "" && sets(sc.Node, "trace") {
			// Named in this scenario and ignored: a mistake. (A trace of
			// the workload's may serve other scenarios.)
			return nil, bad("trace", "%s, but no host of this scenario replays a trace: set app: trace (or name trace in apps)", p.Trace)
		}
		return out, nil
	}
	if names[0] == "" {
		return nil, bad("trace", "app trace needs a trace file (trace: FILE.memtrace, .memtxt or .lackey, or traces: [FILE, …])")
	}
	// Every name is a file, or a pattern of files.
	var files []memtrace.File
	for i, name := range names {
		k := key
		if key == "traces" {
			k = fmt.Sprintf("traces[%d]", i)
		}
		if strings.ContainsAny(name, "*?[") {
			paths, err := spec.Glob(name)
			if err != nil {
				return nil, bad(k, "%v", err)
			}
			for _, path := range paths {
				f, err := memtrace.OSFile(path)
				if err != nil {
					return nil, bad(k, "%v", err)
				}
				f.Open = spec.Interruptible(f.Open)
				files = append(files, f)
			}
			continue
		}
		rf, err := spec.Find(name)
		if err != nil {
			return nil, bad(k, "%v", err)
		}
		files = append(files, memtrace.File{Name: rf.Name, Size: rf.Size, Open: rf.Open})
	}
	if len(files) > replaying {
		return nil, bad(key, "%d trace files for %d hosts replaying traces: name at most one per host (app: trace, or apps)", len(files), replaying)
	}
	var errs []error
	prepared := make([]*memtrace.Prepared, len(files))
	for i, f := range files {
		t, err := prepare(f, s.pageSize)
		if err == nil {
			err = s.checkTrace(t)
		}
		if err != nil {
			errs = append(errs, bad(key, "%v", err))
			continue
		}
		prepared[i] = t
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	k := 0
	for i, a := range s.apps {
		if a == "trace" {
			out[i] = prepared[k%len(prepared)]
			k++
		}
	}
	return out, nil
}

// sets reports whether mapping n has key.
func sets(n *yaml.Node, key string) bool {
	if n == nil || n.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

// checkTrace refuses a trace the scenario cannot replay: no accesses (a
// run of nothing, whose figures would all be zero), pages of another size,
// page numbers beyond a host's page table, or more compute than a run may
// take (whose clock, at the scenario's scale, would then run out).
func (s *scenario) checkTrace(t *memtrace.Prepared) error {
	switch {
	case t.Stats.Accesses == 0:
		return fmt.Errorf("%s: no accesses: a host replaying it would do nothing and every figure of the run would be zero; want a trace with at least one access", t.Name)
	case t.Header.PageSize != s.pageSize:
		return fmt.Errorf("%s: the trace's pages are %d bytes, the scenario's %d (page_size)", t.Name, t.Header.PageSize, s.pageSize)
	case t.Stats.MaxPage >= paging.MaxPages:
		return fmt.Errorf("%s: page number %d is beyond a host's %d pages: renumber the pages densely (lackey import does by default)", t.Name, t.Stats.MaxPage, paging.MaxPages)
	case t.Stats.Compute > runLimit:
		return fmt.Errorf("%s: its gaps add up to %v of compute, beyond the run limit of %v (paper time): shorten the gaps or split the trace", t.Name, t.Stats.Compute, runLimit)
	}
	return nil
}

// scenarioTopology returns the scenario's topology with its impairments.
func scenarioTopology(spec *experiments.Spec, p Params) (*topologies.Topology, error) {
	var top *topologies.Topology
	var err error
	switch {
	case spec.TopologyNode != nil:
		top, err = experiments.LoadTopology(spec.File, spec.TopologyNode, "topology")
	default:
		var f *topologies.File
		f, err = topologies.Generate(topologies.Params{Generate: "leafspine", Name: "farmem", Spines: 2, Leaves: 3, HostsPerLeaf: 4,
			Rate: 100 * units.Gbps, Delay: units.Duration(time.Microsecond), Buffer: units.MiB, Queues: 8})
		if err == nil {
			top, err = f.Build("farmem")
		}
	}
	if err != nil {
		return nil, err
	}
	if p.Loss > 0 || p.Duplicate > 0 || p.Reorder > 0 {
		for _, l := range top.Links {
			l.Loss, l.Duplicate, l.Reorder = float64(p.Loss), float64(p.Duplicate), float64(p.Reorder)
		}
	}
	return top, nil
}

// assignRoles picks the hosts of each role.
func (s *scenario) assignRoles(spec *experiments.Spec, sc experiments.Entry) error {
	p := s.p
	all := s.top.Hosts()
	var names []string
	for _, h := range all {
		names = append(names, h.Name)
	}
	used := map[string]string{}
	take := func(role string, explicit []string, n int, key string) ([]string, error) {
		var out []string
		if len(explicit) > 0 {
			for _, name := range explicit {
				if !slices.Contains(names, name) {
					return nil, experiments.EntryError(spec, sc, "roles", "%s: %q is not a host of topology %s", role, name, s.top.Name)
				}
				out = append(out, name)
			}
		} else {
			for _, name := range names {
				if len(out) == n {
					break
				}
				if used[name] == "" {
					out = append(out, name)
					used[name] = role
				}
			}
			if len(out) < n {
				return nil, experiments.EntryError(spec, sc, key, "%d %s wanted, but topology %s has only %d hosts left after the other roles", n, role, s.top.Name, len(out))
			}
		}
		for _, name := range out {
			if r := used[name]; r != "" && r != role {
				return nil, experiments.EntryError(spec, sc, "roles", "host %s is both %s and %s", name, r, role)
			}
			used[name] = role
		}
		return out, nil
	}
	var err error
	if s.hosts, err = take("paging hosts", p.Roles.Hosts, p.Hosts, "hosts"); err != nil {
		return err
	}
	if s.servers, err = take("memory servers", p.Roles.Servers, p.Servers, "servers"); err != nil {
		return err
	}
	if p.Background.Load > 0 {
		if s.senders, err = take("bulk senders", p.Roles.Background, p.Background.Senders, "background"); err != nil {
			return err
		}
	}
	return nil
}

// Metric names (fixed in results.json; DESIGN.md §6).
const (
	MetricThroughput  = "throughput_ops"
	MetricCompletion  = "completion_s"
	MetricBlocks      = "blocking_events"
	MetricBlockTime   = "blocking_time_s"
	MetricFaultP50    = "fault_p50_us"
	MetricFaultP99    = "fault_p99_us"
	MetricEvicted     = "evicted_pages"
	MetricIntegrity   = "integrity_errors"
	MetricFaults      = "faults"
	MetricRetransmits = "retransmissions"
	MetricBackground  = "background_gbps"
)

// Series names (for plots).
const (
	SeriesFaultCDF = "fault_latency_cdf"
	SeriesBlocking = "blocking"
)

// Metrics implements experiments.Experiment.
func (e *experiment) Metrics() []analysis.MetricInfo {
	return []analysis.MetricInfo{
		{Name: MetricThroughput, Unit: "ops/s", Better: analysis.Higher, Description: "page accesses per second, summed over hosts (each host's accesses ÷ its completion time)"},
		{Name: MetricCompletion, Unit: "s", Better: analysis.Lower, Description: "time until the last host finished its trace"},
		{Name: MetricBlocks, Better: analysis.Lower, Description: "times an application found no free frame and reclaimed directly, summed over hosts"},
		{Name: MetricBlockTime, Unit: "s", Better: analysis.Lower, Description: "time applications spent blocked for a free frame, summed over hosts"},
		{Name: MetricFaultP50, Unit: "us", Better: analysis.Lower, Description: "median major-fault latency (frame taken → page mapped, blocking excluded)"},
		{Name: MetricFaultP99, Unit: "us", Better: analysis.Lower, Description: "99th percentile major-fault latency"},
		{Name: MetricEvicted, Unit: "pages", Better: analysis.Either, Description: "pages evicted (written back or dropped clean)"},
		{Name: MetricIntegrity, Better: analysis.Lower, Description: "pages read back that differ from the last version written, plus server copies that differ at the end (must be 0)"},
		{Name: MetricFaults, Better: analysis.Lower, Description: "major faults (pages fetched from memory servers)"},
		{Name: MetricRetransmits, Better: analysis.Lower, Description: "far-memory requests retransmitted after a timeout"},
		{Name: MetricBackground, Unit: "Gbps", Better: analysis.Higher, Description: "other tenants' bulk traffic delivered to the memory servers' machines"},
	}
}

// SeriesInfo implements experiments.SeriesDescriber.
func (e *experiment) SeriesInfo() []analysis.SeriesInfo {
	return []analysis.SeriesInfo{
		{Name: SeriesFaultCDF, Kind: "cdf", XLabel: "fault latency (µs)", YLabel: "fraction of faults"},
		{Name: SeriesBlocking, Kind: "time", XLabel: "blocking event start (s)", YLabel: "blocking duration (ms)"},
	}
}

// Run implements experiments.Experiment.
func (e *experiment) Run(ctx context.Context, r experiments.Run) (*analysis.Run, error) {
	sc, pol := e.scenarios[r.Scenario], e.policies[r.Policy]
	newTestbed := r.NewTestbed
	if newTestbed == nil {
		newTestbed = experiments.SimTestbed
	}
	o, err := run(ctx, newTestbed, sc, pol, r.Seed, r.Progress, e.pages, runLimit, nil)
	if err != nil {
		return nil, err
	}
	return o.Report(sc.p.LocalMemory), nil
}

// Outcome is what one run measured, in the units of the testbed it ran on:
// at scale s, times are s times the paper's and rates 1/s of them (Report
// converts back).
type Outcome struct {
	Hosts []*paging.Stats
	// HostInfo says what each host ran, in the order of Hosts.
	HostInfo   []HostInfo
	Servers    []paging.ServerStats
	End        time.Duration // testbed time when every host was done
	Background uint64        // bulk bytes delivered
	// Switches are the far-memory counters of every switch, read through
	// P4Runtime at the end of the run.
	Switches map[string]pfarmem.ClassCounts
	// Scale is the scenario's scale factor (0 or 1: paper units).
	Scale float64
}

// run executes one (scenario, policy, seed) on a testbed from newTestbed:
// every switch runs the far-memory program, programmed through P4Runtime;
// memory servers, bulk sinks, paging hosts and bulk senders are attached in
// that order; the run ends when every host has replayed its trace and seen
// every write-back acknowledged. The same code runs on every substrate.
// The memory servers take their page memory from pages (nil: allocate).
func run(ctx context.Context, newTestbed experiments.TestbedFactory, sc *scenario, pol Policy, seed int64, progress func(float64), pages *paging.PagePool, limit time.Duration, watch func(now time.Duration, done float64) bool) (_ *Outcome, err error) {
	prog := pfarmem.SwitchProgram()
	tb, err := newTestbed(ctx, testbed.Config{Topology: sc.top, Program: &prog, Seed: uint64(seed)})
	if err != nil {
		return nil, err
	}
	closed := false
	defer func() {
		if !closed {
			err = errors.Join(err, tb.Close())
		}
	}()
	if err := sc.checkMTU(tb); err != nil {
		return nil, err
	}
	// The switches are programmed through P4Runtime, as a controller would.
	rules := fastswap.Rules()
	if pol.Network == "glitter" {
		rules = glitter.Rules()
	}
	var switches []string
	for _, sw := range sc.top.Switches() {
		switches = append(switches, sw.Name)
	}
	slices.Sort(switches)
	clients := map[string]p4rt.Client{}
	for _, name := range switches {
		c, err := tb.Switch(name)
		if err != nil {
			return nil, err
		}
		if err := pfarmem.Program(ctx, c, rules); err != nil {
			return nil, fmt.Errorf("program switch %s: %w", name, err)
		}
		clients[name] = c
	}
	var servers []*paging.Server
	var addrs []emulator.Addr
	var sinks []*sink
	for _, name := range sc.servers {
		srv := paging.NewPooledServer(sc.pageSize, pages)
		if _, err := tb.Attach(name, pfarmem.Port, srv); err != nil {
			return nil, fmt.Errorf("memory server %s: %w", name, err)
		}
		k := &sink{}
		if _, err := tb.Attach(name, BulkPort, k); err != nil {
			return nil, fmt.Errorf("bulk sink %s: %w", name, err)
		}
		servers, sinks = append(servers, srv), append(sinks, k)
		addrs = append(addrs, netip.AddrPortFrom(sc.top.Node(name).IP, pfarmem.Port))
	}
	memScale := sc.p.MemoryScale
	offload := pol.offload()
	urgencyBase := time.Duration(pol.UrgencyBase)
	if urgencyBase <= 0 {
		urgencyBase = glitter.DefaultUrgencyBase
	}
	gp := glitter.Params{MaxReserve: pol.MaxReserve, Margin: pol.Margin, UrgencyBase: sc.stretch(urgencyBase)}
	// running counts the hosts not yet done. It is the run's stop signal
	// for the other tenant (bulk senders stop when it reaches 0) — run
	// control, not network traffic, and atomic because on a real
	// substrate each agent runs on its own loop.
	running := &atomic.Int64{}
	running.Store(int64(len(sc.hosts)))
	rtoMin := time.Duration(sc.p.RTOMin)
	if rtoMin <= 0 {
		rtoMin = paging.DefaultRTOMin
	}
	hosts := make([]*paging.Host, len(sc.hosts))
	envs := make([]emulator.Env, len(sc.hosts))
	sources := make([]*counted, len(sc.hosts))
	limits := make([]int, len(sc.hosts))
	working := make([]int, len(sc.hosts))
	for i, name := range sc.hosts {
		src, ws, closer, err := sc.source(i, seed)
		if err != nil {
			return nil, err
		}
		defer closer.Close()
		sources[i], working[i] = src, ws
		var engine evict.Engine = fastswap.New(fastswap.Params{OffloadPages: offload}, memScale)
		if pol.Host == "glitter" {
			engine = glitter.NewEngine(gp, memScale)
		}
		var marker evict.Marker = evict.NoUrgency{}
		if pol.Network == "glitter" {
			marker = glitter.NewMarker(gp)
		}
		cfg := paging.HostConfig{
			ID:    uint32(i + 1),
			Limit: sc.limit(ws), Headroom: fastswap.Scaled(offload, memScale),
			PageSize: sc.pageSize, Servers: addrs, Stripe: i, Replacement: paging.Replacement(sc.p.Replacement),
			Engine: engine, Marker: marker,
			FaultOverhead: sc.stretch(time.Duration(sc.p.FaultOverhead)), ReclaimOverhead: sc.stretch(time.Duration(sc.p.ReclaimOverhead)),
			RunAhead: sc.stretch(paging.DefaultRunAhead),
			RTOMin:   sc.stretch(rtoMin), RTOMax: sc.stretch(paging.DefaultRTOMax), RTOInit: sc.stretch(paging.DefaultRTOInit),
			MeasurePeriod: sc.stretch(paging.DefaultMeasurePeriod), PeakHorizon: sc.stretch(evict.PeakHorizon),
			Seed:   uint64(seed),
			OnDone: func(*paging.Host) { running.Add(-1) },
		}
		h, err := paging.NewHost(cfg, src, ws)
		if err != nil {
			return nil, err
		}
		limits[i] = cfg.Limit
		if envs[i], err = tb.Attach(name, pfarmem.HostPort, h); err != nil {
			return nil, fmt.Errorf("paging host %s: %w", name, err)
		}
		hosts[i] = h
	}
	if bg := sc.p.Background; bg.Load > 0 {
		plan, err := sc.bulkPlan()
		if err != nil {
			return nil, err
		}
		dests := make([]emulator.Addr, len(sc.servers))
		for i, name := range sc.servers {
			dests[i] = netip.AddrPortFrom(sc.top.Node(name).IP, BulkPort)
		}
		stopped := func() bool { return running.Load() == 0 }
		for i, name := range sc.senders {
			rate := sc.top.Node(name).Ports[0].Link.Rate
			if _, err := tb.Attach(name, BulkPort, newBulk(dests, plan.weights[i], bg.Frame, rate, plan.share[i], sc.stretch(time.Duration(bg.Burst)), stopped)); err != nil {
				return nil, fmt.Errorf("bulk sender %s: %w", name, err)
			}
		}
	}
	var total uint64
	for _, n := range sc.ops {
		total += n
	}
	// watch stops the run through runCtx; the counters are read with ctx.
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	// Every host is asked on its own loop whether it is done (Inspect).
	done := func() bool {
		all, ops := true, uint64(0)
		for i, h := range hosts {
			tb.Inspect(envs[i], func() {
				all = all && h.Done()
				ops += h.Stats().Ops
			})
		}
		if progress != nil && total > 0 {
			progress(float64(ops) / float64(total))
		}
		if watch != nil && total > 0 && !all && !watch(tb.Now(), float64(ops)/float64(total)) {
			stop(errProjected)
		}
		return all
	}
	step := min(sc.stretch(time.Millisecond), maxDoneStep)
	if err := tb.Run(runCtx, step, sc.stretch(limit), done); err != nil {
		if errors.Is(context.Cause(runCtx), errProjected) {
			return nil, errProjected
		}
		return nil, fmt.Errorf("hosts not done: %w", err)
	}
	o := &Outcome{End: tb.Now(), Switches: map[string]pfarmem.ClassCounts{}, Scale: sc.scale}
	for _, name := range switches {
		c, err := pfarmem.ReadCounts(ctx, clients[name])
		if err != nil {
			return nil, fmt.Errorf("read counters of switch %s: %w", name, err)
		}
		o.Switches[name] = c
	}
	// The agents stop; their state may be read directly from now on.
	closed = true
	if err := tb.Close(); err != nil {
		return nil, err
	}
	lookup := func(server, host emulator.Addr, page uint64) (uint32, uint32, []byte, bool) {
		i := slices.Index(addrs, server)
		if i < 0 {
			return 0, 0, nil, false
		}
		return servers[i].Lookup(host, page)
	}
	for i, h := range hosts {
		if msg := h.Stats().TraceError; msg != "" {
			return nil, fmt.Errorf("host %s (%s): %s", sc.hosts[i], sc.apps[i], msg)
		}
		paging.CheckServers(h, lookup)
		o.Hosts = append(o.Hosts, h.Stats())
		info := HostInfo{Name: sc.hosts[i], App: sc.apps[i], Pages: working[i], Limit: limits[i], Compute: sources[i].compute}
		if t := sc.traces[i]; t != nil {
			info.Trace = filepath.Base(t.Name)
		}
		o.HostInfo = append(o.HostInfo, info)
	}
	for _, srv := range servers {
		o.Servers = append(o.Servers, srv.Stats())
		srv.Release() // its pages are checked: the next run may reuse their memory
	}
	for _, k := range sinks {
		o.Background += k.bytes
	}
	return o, nil
}

// HostInfo describes a paging host of a run: its name, its application
// (and trace file), its working set and local memory in pages, and the
// compute its application did (the trace's gaps, at the run's scale).
type HostInfo struct {
	Name, App, Trace string
	Pages, Limit     int
	Compute          time.Duration
}

// linkMTU is implemented by testbeds whose links have an MTU (real
// networks): the largest IP packet a link carries in one frame.
type linkMTU interface{ MTU() int }

// checkMTU refuses a testbed whose links cannot carry the scenario's
// messages in one frame: a page, or a bulk frame, that the kernel would
// split into IP fragments, which the switches cannot classify.
func (sc *scenario) checkMTU(tb testbed.Testbed) error {
	m, ok := tb.(linkMTU)
	if !ok {
		return nil
	}
	return sc.fitsMTU(m.MTU())
}

// netnsMinRate is the slowest link HTB shapes: its rates count bytes a
// second.
const netnsMinRate = 8 * units.BitPerSecond

// NetnsMTU is the MTU of the links of the netns substrate as 'tracebed
// run' builds it (netnstb.DefaultMTU, jumbo frames): validate checks
// netns specs against it.
const NetnsMTU = 9000

// fitsMTU refuses a scenario whose messages do not fit links of MTU mtu.
func (sc *scenario) fitsMTU(mtu int) error {
	const eth = 14 // the Ethernet header, not part of the MTU
	if ip := frame.HeaderLen - eth + pfarmem.HeaderLen + sc.pageSize; ip > mtu {
		return fmt.Errorf("a page of %d bytes travels as a %d-byte IP packet, above the links' MTU of %d bytes: use jumbo frames (MTU %d or more) or a smaller page_size", sc.pageSize, ip, mtu, ip)
	}
	if bg := sc.p.Background; bg.Load > 0 && int(bg.Frame)-eth > mtu {
		return fmt.Errorf("the bulk tenant's %v frames are %d-byte IP packets, above the links' MTU of %d bytes: lower background.frame to %d bytes or less", bg.Frame, int(bg.Frame)-eth, mtu, mtu+eth)
	}
	return nil
}

// maxOverhead bounds the CPU cost of a fault and of a reclaimed page: a
// thousand times Fastswap's. At 1000 s a fault, a run validated and then
// spun to the run limit.
const maxOverhead = units.Duration(time.Millisecond)

// dryRun runs every policy of scenario n once on sim, with the spec's
// first seed, and refuses the scenario when a run is not done within
// dryRunShare of the run limit (paper time), or fails. Rehearse calls it
// for the scenarios whose rough estimate (checkDuration) is above
// runLimit/dryRunNear: the lower bounds count no queueing behind the other
// tenant, no contention between the hosts and only the replayed share of
// the faults, and runs took from about them to thousands of times them;
// without a run such a spec validated and then stopped at the limit. The
// margin stands for the other seeds and for the netns substrate's timing.
// A run whose progress, once a fifth of the limit has passed, projects to
// more than dryRunProject times the allowed time is stopped there: at
// twice, memcached-50 of glitter-100g at 100 Mbit/s projected 30 min after
// a tenth and was done in 13 (progress is not linear: first touches cost
// no fetch, and faults come in phases).
func (e *experiment) dryRun(ctx context.Context, n nearScenario) error {
	sc := e.scenarios[n.entry.Name]
	seed := e.spec.Seeds[0]
	limit := time.Duration(dryRunShare * float64(runLimit))
	for _, pe := range e.spec.Policies {
		var projected time.Duration
		watch := func(now time.Duration, done float64) bool {
			paper := time.Duration(float64(now) / max(sc.scale, 1))
			if paper < runLimit/5 {
				return true
			}
			projected = time.Duration(min(float64(paper)/max(done, 1e-9), math.MaxInt64/2))
			return projected <= dryRunProject*limit
		}
		_, err := run(ctx, experiments.SimTestbed, sc, e.policies[pe.Name], seed, nil, e.pages, limit, watch)
		switch {
		case err == nil:
			continue
		case context.Cause(ctx) != nil:
			return context.Cause(ctx)
		case errors.Is(err, errProjected):
			return fmt.Errorf("%s, so policy %s ran on sim (seed %d): after %v of paper time its progress projected %v: raise the link rates, local_memory or memory_scale",
				estimated(n.lower, n.rough), pe.Name, seed, runLimit/5, projected.Round(time.Second))
		case errors.Is(err, testbed.ErrLimit):
			return fmt.Errorf("%s, so policy %s ran once on sim (seed %d): not done after %v of paper time (%.0f%% of the limit, a margin for other seeds and substrates): raise the link rates, local_memory or memory_scale",
				estimated(n.lower, n.rough), pe.Name, seed, limit, 100*dryRunShare)
		default:
			return fmt.Errorf("%s, so policy %s ran once on sim (seed %d), and failed: %w",
				estimated(n.lower, n.rough), pe.Name, seed, err)
		}
	}
	return nil
}

// errProjected stops a dry run whose progress projects past its limit.
var errProjected = errors.New("progress projects past the limit")

// estimated says what checkDuration estimated of a scenario's runs.
func estimated(lower, rough time.Duration) string {
	return fmt.Sprintf("its runs are estimated to take from %v to %v of paper time, with every queue full, against the run limit of %v",
		lower.Round(time.Second), rough.Round(time.Second), runLimit)
}

// dryRunNear, dryRunShare and dryRunProject place and size the dry runs
// (dryRun): a scenario whose rough estimate is above runLimit/dryRunNear
// runs once per policy on sim and must be done within dryRunShare of
// runLimit; one whose progress projects past dryRunProject times that is
// stopped early.
const (
	dryRunNear    = 8
	dryRunShare   = 0.8
	dryRunProject = 4
)

// runLimit is how much testbed time (at scale 1) a run may take;
// maxDoneStep bounds how often the driver asks the hosts whether they are
// done (every millisecond of paper time, at least every maxDoneStep of
// testbed time).
const (
	runLimit    = 1000 * time.Second
	maxDoneStep = 10 * time.Millisecond
)

// clockRange is the longest run the sim substrate's clock can count (it
// counts picoseconds in an int64: about 106 days); maxScale the largest
// scale factor at which a run of runLimit (paper time) fits in it.
const (
	clockRange = time.Duration(math.MaxInt64 / 1000)
	maxScale   = 9000
)

// source returns host i's access source, with its gaps at the scenario's
// scale and counted, its working set in pages, and what to close after the
// run.
func (sc *scenario) source(i int, seed int64) (*counted, int, io.Closer, error) {
	var src memtrace.Source
	var ws int
	var closer io.Closer = io.NopCloser(nil)
	if t := sc.traces[i]; t != nil {
		r, c, err := t.Open()
		if err != nil {
			return nil, 0, nil, err
		}
		src, ws, closer = r, int(t.Stats.Pages), c
	} else {
		g, err := apps.New(sc.apps[i], apps.Params{Scale: sc.p.MemoryScale, Seed: uint64(seed)*1000003 + uint64(i), Iterations: sc.p.Iterations})
		if err != nil {
			return nil, 0, nil, err
		}
		src, ws = g, g.Pages()
	}
	if sc.scale != 1 {
		src = stretched{src: src, scale: sc.scale}
	}
	return &counted{src: src}, ws, closer, nil
}

// counted is a source that adds up the compute gaps it hands out.
type counted struct {
	src     memtrace.Source
	compute time.Duration
}

func (c *counted) Read(buf []memtrace.Access) (int, error) {
	n, err := c.src.Read(buf)
	for _, a := range buf[:n] {
		c.compute += a.Gap
	}
	return n, err
}

// Report turns an outcome into a run's metrics, series and params, in paper
// units: at scale s, times are divided by s and rates (throughput, the bulk
// tenant's bandwidth) multiplied by it; counts are what they are.
func (o *Outcome) Report(localMemory float64) *analysis.Run {
	s := o.Scale
	if s <= 0 {
		s = 1
	}
	var thr, completion, blockTime float64
	var blocks, evicted, integrity, faults, retx uint64
	var lat analysis.Durations
	var blockSeries []analysis.Point
	for _, st := range o.Hosts {
		if c := st.Completion.Seconds(); c > 0 {
			thr += float64(st.Ops) / c
		}
		completion = max(completion, st.Completion.Seconds())
		blocks += st.BlockCount
		exact := uint64(len(st.Blocks)) == st.BlockCount
		if !exact {
			blockTime += st.Blocked.Seconds()
		}
		for _, b := range st.Blocks {
			if exact {
				blockTime += b.Duration.Seconds()
			}
			blockSeries = append(blockSeries, analysis.Point{X: b.Start.Seconds(), Y: float64(b.Duration) / 1e6})
		}
		evicted += st.Evictions
		integrity += st.Integrity
		faults += st.Faults
		retx += st.Retransmits
		lat.Merge(&st.FaultLatency)
	}
	for _, s := range o.Servers {
		integrity += s.Conflicts
	}
	q := func(f float64) float64 { return float64(lat.Quantile(f)) / 1e3 }
	bg := 0.0
	if o.End > 0 {
		bg = float64(o.Background) * 8 / o.End.Seconds() / 1e9
	}
	slices.SortStableFunc(blockSeries, func(a, b analysis.Point) int {
		switch {
		case a.X < b.X:
			return -1
		case a.X > b.X:
			return 1
		}
		return 0
	})
	if s != 1 {
		thr, completion, blockTime, bg = thr*s, completion/s, blockTime/s, bg*s
		for i := range blockSeries {
			blockSeries[i].X /= s
			blockSeries[i].Y /= s
		}
	}
	faultCDF := lat.CDF(200)
	if s != 1 {
		for i := range faultCDF {
			faultCDF[i].X /= s
		}
	}
	return &analysis.Run{
		Metrics: analysis.Metrics{
			MetricThroughput:  math.Round(thr),
			MetricCompletion:  completion,
			MetricBlocks:      float64(blocks),
			MetricBlockTime:   blockTime,
			MetricFaultP50:    q(0.5) / s,
			MetricFaultP99:    q(0.99) / s,
			MetricEvicted:     float64(evicted),
			MetricIntegrity:   float64(integrity),
			MetricFaults:      float64(faults),
			MetricRetransmits: float64(retx),
			MetricBackground:  bg,
		},
		Series: map[string][]analysis.Point{
			SeriesFaultCDF: faultCDF,
			SeriesBlocking: thin(blockSeries, 2000),
		},
		Params: map[string]float64{"local_memory_ratio": localMemory},
		Tables: []analysis.EntityTable{o.hostTable()},
	}
}

// TableHosts is the name of the per-host table of a run (hosts.csv).
const TableHosts = "hosts"

// hostColumns are the columns of the per-host table, in paper units.
var hostColumns = []analysis.MetricInfo{
	{Name: "working_set", Unit: "pages", Description: "distinct pages the application touches"},
	{Name: "local_memory", Unit: "pages", Description: "pages of local memory (the limit; reclaim headroom aside)"},
	{Name: "accesses", Unit: "accesses", Description: "page accesses replayed"},
	{Name: "hits", Unit: "accesses", Description: "accesses to resident pages"},
	{Name: "first_touches", Unit: "accesses", Description: "first accesses to a page, mapped without a fetch"},
	{Name: "faults", Better: analysis.Lower, Description: "major faults: pages fetched from a memory server"},
	{Name: "rescues", Description: "accesses to pages being evicted, which stay"},
	{Name: "evictions", Unit: "pages", Description: "frames freed by eviction"},
	{Name: "writebacks", Unit: "pages", Description: "dirty pages written back"},
	{Name: "clean_drops", Unit: "pages", Description: "clean pages dropped without a write"},
	{Name: "retransmissions", Better: analysis.Lower, Description: "requests sent again after a timeout"},
	{Name: "blocks", Better: analysis.Lower, Description: "times the application found no free frame and reclaimed itself"},
	{Name: "completion_s", Unit: "s", Better: analysis.Lower, Description: "time to replay the trace"},
	{Name: "compute_s", Unit: "s", Description: "time computing: the trace's gaps"},
	{Name: "blocked_s", Unit: "s", Better: analysis.Lower, Description: "time blocked for a free frame (direct reclaim)"},
	{Name: "fault_wait_s", Unit: "s", Better: analysis.Lower, Description: "time waiting for major faults (fetch and fault overhead)"},
	{Name: "other_s", Unit: "s", Description: "the rest of completion_s: late wake-ups on a real substrate (0 on sim)"},
	{Name: "fault_p50_us", Unit: "us", Better: analysis.Lower, Description: "median major-fault latency"},
	{Name: "fault_p99_us", Unit: "us", Better: analysis.Lower, Description: "99th percentile major-fault latency"},
	{Name: "throughput_ops", Unit: "ops/s", Better: analysis.Higher, Description: "accesses ÷ completion_s"},
}

// hostTable is the per-host breakdown of the outcome, in paper units.
func (o *Outcome) hostTable() analysis.EntityTable {
	s := o.Scale
	if s <= 0 {
		s = 1
	}
	t := analysis.EntityTable{Name: TableHosts, Entity: "host", Labels: []string{"app", "trace"}, Columns: hostColumns}
	for i, st := range o.Hosts {
		var info HostInfo
		if i < len(o.HostInfo) {
			info = o.HostInfo[i]
		}
		blocked, faultWait := st.Blocked, st.FaultLatency.Sum()
		q := func(f float64) float64 { return float64(st.FaultLatency.Quantile(f)) / 1e3 / s }
		sec := func(d time.Duration) float64 { return d.Seconds() / s }
		thr := 0.0
		if c := st.Completion.Seconds(); c > 0 {
			thr = math.Round(float64(st.Ops) / c * s)
		}
		row := analysis.EntityRow{
			ID:     info.Name,
			Labels: map[string]string{"app": info.App},
			Values: map[string]float64{
				"working_set": float64(info.Pages), "local_memory": float64(info.Limit),
				"accesses": float64(st.Ops), "hits": float64(st.Hits), "first_touches": float64(st.FirstTouches),
				"faults": float64(st.Faults), "rescues": float64(st.Rescues), "evictions": float64(st.Evictions),
				"writebacks": float64(st.Writebacks), "clean_drops": float64(st.CleanDrops),
				"retransmissions": float64(st.Retransmits), "blocks": float64(st.BlockCount),
				"completion_s": sec(st.Completion), "compute_s": sec(info.Compute), "blocked_s": sec(blocked),
				"fault_wait_s": sec(faultWait), "other_s": sec(st.Completion - info.Compute - blocked - faultWait),
				"fault_p50_us": q(0.5), "fault_p99_us": q(0.99), "throughput_ops": thr,
			},
		}
		if info.Trace != "" {
			row.Labels["trace"] = info.Trace
		}
		if row.ID == "" {
			row.ID = fmt.Sprintf("host%d", i+1)
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// thin keeps at most n points, evenly spaced over the series, always
// including the longest event.
func thin(pts []analysis.Point, n int) []analysis.Point {
	if len(pts) <= n {
		return pts
	}
	longest := 0
	for i, p := range pts {
		if p.Y > pts[longest].Y {
			longest = i
		}
	}
	var out []analysis.Point
	stride := float64(len(pts)) / float64(n)
	for i := 0; i < n; i++ {
		j := int(float64(i) * stride)
		if j < longest && int(float64(i+1)*stride) > longest {
			j = longest
		}
		out = append(out, pts[j])
	}
	return out
}

// Summarize implements experiments.Summarizer: each policy's throughput
// over Fastswap's, per scenario, per local-memory ratio and on average.
func (e *experiment) Summarize(res *analysis.Results) []analysis.Table {
	const base = "fastswap"
	if !slices.Contains(res.Policies, base) {
		return nil
	}
	var others []string
	for _, p := range res.Policies {
		if p != base {
			others = append(others, p)
		}
	}
	if len(others) == 0 {
		return nil
	}
	t := analysis.Table{
		Title:  fmt.Sprintf("%s — throughput over Fastswap (throughput_ops ratio, mean over seeds)", res.Experiment),
		Header: append([]string{"scenario", "local memory"}, others...),
	}
	ratios := map[string][]float64{}
	byRatio := map[float64]map[string][]float64{}
	var localRatios []float64
	for _, sc := range res.Scenarios {
		b := res.Aggregate(sc, base)[MetricThroughput].Mean
		if b <= 0 {
			continue
		}
		lm := e.scenarios[sc].p.LocalMemory
		if byRatio[lm] == nil {
			byRatio[lm] = map[string][]float64{}
			localRatios = append(localRatios, lm)
		}
		row := []string{sc, fmt.Sprintf("%.0f%%", 100*lm)}
		for _, p := range others {
			v := res.Aggregate(sc, p)[MetricThroughput].Mean / b
			ratios[p] = append(ratios[p], v)
			byRatio[lm][p] = append(byRatio[lm][p], v)
			row = append(row, fmt.Sprintf("%.3f×", v))
		}
		t.Rows = append(t.Rows, row)
	}
	slices.Sort(localRatios)
	for _, lm := range localRatios {
		row := []string{"mean", fmt.Sprintf("%.0f%%", 100*lm)}
		for _, p := range others {
			row = append(row, fmt.Sprintf("%.3f×", mean(byRatio[lm][p])))
		}
		t.Rows = append(t.Rows, row)
	}
	row, geo := []string{"mean", "all"}, []string{"geometric mean", "all"}
	for _, p := range others {
		row = append(row, fmt.Sprintf("%.3f×", mean(ratios[p])))
		geo = append(geo, fmt.Sprintf("%.3f×", geomean(ratios[p])))
	}
	t.Rows = append(t.Rows, row, geo)
	t.Notes = append(t.Notes, "Ratio: policy throughput_ops ÷ fastswap throughput_ops in the same scenario. The Glitter abstract reports 1.4× Fastswap's throughput on average; docs/glitter.md explains what we measure and why it differs.")
	return []analysis.Table{t}
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func geomean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var s float64
	for _, x := range v {
		s += math.Log(x)
	}
	return math.Exp(s / float64(len(v)))
}

// faultTime is the paper time host waits for a page it faults on, at
// least and at worst. At least: the round trip to the nearest memory server
// (propagation and switch pipelines, both ways) and the page's
// transmission at the path's slowest link. At worst, besides: every switch
// queue on the way there and back full to its link's buffer, as behind the
// other tenant's bursts or the other hosts' write-backs.
func (s *scenario) faultTime(host string) (least, worst time.Duration) {
	h := s.top.Node(host)
	least, worst = time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for _, name := range s.servers {
		path := s.top.Path(h, s.top.Node(name))
		if len(path) < 2 {
			continue
		}
		var oneWay time.Duration
		var queues float64 // seconds
		slowest := units.Rate(math.MaxInt64)
		for j, n := range path[:len(path)-1] {
			if j > 0 {
				oneWay += n.Latency
			}
			for _, p := range n.Ports {
				if p.Peer.Node != path[j+1] {
					continue
				}
				l, rate := p.Link, float64(max(s.paperRate[p.Link], 1))
				oneWay += l.Delay
				slowest = min(slowest, s.paperRate[l])
				for _, end := range []*topologies.Node{n, path[j+1]} {
					if !end.IsHost() {
						queues += float64(l.Buffer) * 8 / rate
					}
				}
				break
			}
		}
		// The topology's delays are stretched by the scale factor.
		rtt := time.Duration(float64(2*oneWay) / max(s.scale, 1))
		tx := time.Duration(float64(s.pageSize) * 8 / float64(max(slowest, 1)) * float64(time.Second))
		least = min(least, rtt+tx)
		worst = min(worst, rtt+tx+time.Duration(min(queues*float64(time.Second), math.MaxInt64/2)))
	}
	if least == math.MaxInt64 {
		return 0, 0
	}
	return least, worst
}
