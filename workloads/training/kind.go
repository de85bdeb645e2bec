// Package training is the multi-tenant INA experiment kind ("ina"): it
// compiles a spec (jobs, topology, policies, scenarios), runs each policy
// with the flow-level model (package flow) or with packets on a testbed
// (package packet), both from the same estimates of the fabric (package
// fabric), and reports and summarizes the results. The policies are
// assembled in policies.go (docs/dynaina.md).
package training

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/internal/problems"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/systems/inasched"
	"github.com/tracebed/tracebed/topologies"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/traces/models"
	"github.com/tracebed/tracebed/workloads/training/fabric"
	"github.com/tracebed/tracebed/workloads/training/flow"
	"github.com/tracebed/tracebed/workloads/training/packet"
)

// Kind is the multi-tenant INA experiment kind ("ina"): jobs from a trace
// or a generator train on the topology's hosts; each policy decides the
// switch memory; the flow-level model (Simulate) runs them at paper scale,
// or, with granularity: packet, real agents run them packet by packet on
// a testbed of either substrate (RunPacket), scaled down by the spec's
// scale factor. See docs/dynaina.md and docs/scaling.md.
type Kind struct{}

// Name implements experiments.Kind.
func (Kind) Name() string { return "ina" }

// Params are the workload section; every scenario may override any field.
type Params struct {
	// Trace is a job trace (CSV, JSON Lines or Tiresias CSV); when empty,
	// jobs are generated. The spec's top-level trace is the default.
	Trace string `yaml:"trace"`
	// Generated traces: Jobs jobs, Poisson arrivals at offered load Load,
	// models from Mix (vision, language, mixed) or Models (name → weight),
	// workers per job from Workers (count → weight), GPU time per job
	// drawn log-uniformly in GPUTime.
	Jobs    int                `yaml:"jobs"`
	Mix     string             `yaml:"mix"`
	Models  map[string]float64 `yaml:"models"`
	Workers map[string]float64 `yaml:"workers"`
	GPUTime []units.Duration   `yaml:"gpu_time"`
	// Load is the offered load: for a generated trace, the expected
	// fraction of hosts busy if every job ran at its lower bound; for a
	// replayed trace, a factor that compresses its arrival times
	// (arrival ÷ load).
	Load float64 `yaml:"load"`
	// TimeCompression, for a replayed trace, divides its arrivals and its
	// jobs' run times (iterations) by a factor of 1 or more
	// (jobtrace.ParseCompressed): a trace of months replays in hours with
	// its jobs overlapping as they did. 0 means 1.
	TimeCompression float64 `yaml:"time_compression"`
	// Aggregators, when set, replaces the aggregator memory of every
	// switch of the topology.
	Aggregators *int `yaml:"aggregators"`
	// RackAggregators, when set, replaces the aggregator memory of every
	// switch with hosts (the racks' ToRs) after Aggregators: 0 makes jobs
	// across racks aggregate at a spine alone, their rack's workers
	// sharing its uplinks.
	RackAggregators *int `yaml:"rack_aggregators"`
	// FabricRate, when set, replaces the rate of every link between two
	// switches: the uplinks of a leaf-spine, hence its oversubscription
	// (hosts per leaf × host rate ÷ (spines × fabric rate)).
	FabricRate units.Rate `yaml:"fabric_rate"`
	// Protocol and host parameters (Net).
	Payload       units.Bytes    `yaml:"payload"`
	Frame         units.Bytes    `yaml:"frame"`
	Turnaround    units.Duration `yaml:"turnaround"`
	Control       units.Duration `yaml:"control"`
	Jitter        float64        `yaml:"jitter"`
	ComputeScale  float64        `yaml:"compute_scale"`
	ATPHold       string         `yaml:"atp_hold"`
	ATPCollisions string         `yaml:"atp_collisions"`
	// Bins is the number of points of the mem_util series.
	Bins int `yaml:"bins"`
	// JobList is an inline trace: the jobs, in paper units.
	JobList []ListedJob `yaml:"job_list"`

	// Granularity is "flow" (the flow-level model; sim only) or "packet"
	// (agents, switches and controller exchanging packets on the run's
	// testbed, sim or netns).
	Granularity string `yaml:"granularity"`
	// Packet level. HostTurnaround is the host turnaround the windows are
	// sized for in the scaled run (real hosts wake late, docs/netns.md);
	// 0 means turnaround. Timeout is the retransmission timeout of INA
	// packets and control messages, RingTimeout the ring's, RingWindow the
	// ring's packets in flight (0: derived from the scaled network,
	// docs/scaling.md). Sample is the
	// mean period of shared-mode occupancy samples. Loss, if set, replaces
	// the injected loss of every link.
	HostTurnaround units.Duration  `yaml:"host_turnaround"`
	Timeout        units.Duration  `yaml:"timeout"`
	RingTimeout    units.Duration  `yaml:"ring_timeout"`
	RingWindow     int             `yaml:"ring_window"`
	Sample         units.Duration  `yaml:"sample"`
	Loss           *units.Fraction `yaml:"loss"`
	// HostLatency and HostLatencySigma are the median and shape of the
	// receive latency the simulated hosts get in packet-level runs on sim
	// (HostLatency; 0: none); real hosts on netns have their own.
	HostLatency      units.Duration `yaml:"host_latency"`
	HostLatencySigma float64        `yaml:"host_latency_sigma"`
	// FreeINAOverflow is the share of the chunks whose gradients FreeINA's
	// packet-level hosts draw across the whole int32 range, so that their
	// sums overflow the switch's 32-bit registers and the hosts
	// re-aggregate them on the PS path (docs/freeina.md §4; 0: none).
	FreeINAOverflow units.Fraction `yaml:"freeina_overflow"`
}

// ListedJob is one job of an inline trace (Params.JobList).
type ListedJob struct {
	ID         *int           `yaml:"id"`
	Arrival    units.Duration `yaml:"arrival"`
	Model      string         `yaml:"model"`
	Workers    int            `yaml:"workers"`
	Iterations int            `yaml:"iterations"`
}

// Granularities of the ina kind.
const (
	GranularityFlow   = "flow"
	GranularityPacket = "packet"
)

// DefaultParams are used for fields a spec leaves out.
var DefaultParams = Params{
	Jobs: 24, Mix: "mixed", Load: 1,
	Workers: map[string]float64{"2": 1, "4": 2, "8": 1},
	GPUTime: []units.Duration{units.Duration(2 * time.Minute), units.Duration(20 * time.Minute)},
	Payload: units.Bytes(fabric.DefaultNet.Payload), Frame: units.Bytes(fabric.DefaultNet.Frame),
	Turnaround: units.Duration(fabric.DefaultNet.Turnaround), Control: units.Duration(fabric.DefaultNet.Control),
	Jitter: fabric.DefaultNet.Jitter, ComputeScale: 1, Bins: 200,
	Granularity: GranularityFlow, Sample: units.Duration(50 * time.Millisecond), HostLatencySigma: 1.4,
}

type scenario struct {
	p    Params
	top  *topologies.Topology
	net  fabric.Net
	jobs []jobtrace.Job // a replayed trace (nil: generate per seed)
	gen  jobtrace.GenParams

	// Packet level: the scaled topology and run parameters.
	scaled      *packet.Scaled
	timeout     time.Duration
	ringTimeout time.Duration
	ringWindow  int
}

type experiment struct {
	spec      *experiments.Spec
	entries   map[string]experiments.Entry // scenarios by name
	scenarios map[string]*scenario
	policies  map[string]inasched.Params // by the spec's policy name
	systems   map[string]string          // the registered policy each runs
	order     []string                   // policy names in spec order
	scale     float64
}

// factory builds the scheduler factory of a spec policy for a scenario's
// network.
func (e *experiment) factory(policy string, sc *scenario) (inasched.Factory, error) {
	return e.policies[policy].Factory(sc)
}

// Compile implements experiments.Kind.
func (Kind) Compile(spec *experiments.Spec) (experiments.Experiment, error) {
	if spec.TopologyNode == nil {
		return nil, spec.Errorf("topology", "missing; give the cluster, e.g. {generate: star, hosts: 32, rate: 100Gbps, aggregators: 4096}")
	}
	// Every scenario and policy is checked, and every problem reported
	// (up to problems.Max; one in the workload section, shared by the
	// scenarios, once). A field that fails to decode keeps its default,
	// so the checks that follow look at the rest.
	var probs problems.List
	base := DefaultParams
	base.Trace = spec.Trace
	probs.Add(spec.DecodeWorkload(&base))
	e := &experiment{spec: spec, entries: map[string]experiments.Entry{}, scenarios: map[string]*scenario{}, policies: map[string]inasched.Params{}, systems: map[string]string{}, scale: spec.Scale}
	var packet []experiments.Entry
	for _, sc := range spec.Scenarios {
		p := base
		p.Workers, p.Models = base.Workers, base.Models
		probs.Add(spec.DecodeEntry(sc, &p))
		s, err := compileScenario(spec, sc, p)
		if err == nil {
			err = s.checkArrivals(spec, sc)
		}
		if err != nil {
			probs.Add(err)
			continue
		}
		e.scenarios[sc.Name] = s
		e.entries[sc.Name] = sc
		if s.p.Granularity == GranularityPacket {
			packet = append(packet, sc)
		} else if spec.Substrate != "sim" {
			probs.Add(spec.Errorf("substrate", "%s: scenario %q runs the ina experiment's flow-level model, which exists on sim only; set granularity: packet (in the workload or the scenario) to run it with packets on %s", spec.Substrate, sc.Name, spec.Substrate))
		}
	}
	needPS := false
	reg := Policies()
	for _, pe := range spec.Policies {
		system := pe.Name
		if v, ok := experiments.EntryScalar(pe, "system"); ok {
			system = v
		}
		pol, err := reg.Lookup(system)
		if err != nil {
			probs.Add(experiments.EntryError(spec, pe, "system", "%v", err))
			continue
		}
		params := pol.Params()
		probs.Add(spec.DecodeEntryWithout(pe, params, "system"))
		if err := params.Check(); err != nil {
			var pe2 *inasched.ParamError
			if errors.As(err, &pe2) {
				probs.Add(experiments.EntryError(spec, pe, pe2.Field, "%v", pe2.Err))
			} else {
				probs.Add(experiments.EntryError(spec, pe, "system", "%v", err))
			}
			continue
		}
		e.policies[pe.Name], e.systems[pe.Name] = params, system
		e.order = append(e.order, pe.Name)
		if system == "atp" || system == "freeina" {
			needPS = true // ATP's parameter servers; FreeINA's PS path
		}
	}
	if err := probs.Err(); err != nil {
		return nil, err
	}
	for _, sc := range packet {
		if err := e.scenarios[sc.Name].compilePacket(spec, sc, needPS, e.hasFreeINA()); err != nil {
			probs.Add(err)
		}
	}
	if err := probs.Err(); err != nil {
		return nil, err
	}
	return e, nil
}

// compilePacket prepares a packet-level scenario: the scaled topology with
// its service hosts, the windows and the timeout.
// roce: a policy runs FreeINA, whose RoCEv2 frames the buffers must hold.
func (s *scenario) compilePacket(spec *experiments.Spec, sc experiments.Entry, needPS, roce bool) error {
	bad := func(key, format string, args ...any) error {
		return experiments.EntryError(spec, sc, key, format, args...)
	}
	p := s.p
	switch {
	case s.net.Payload != 4*ina.DefaultK:
		return bad("payload", "%d; packet-level runs carry %d bytes (k = %d values) per INA packet", s.net.Payload, 4*ina.DefaultK, ina.DefaultK)
	case s.net.Frame != 42+ina.HeaderLen+4*ina.DefaultK:
		return bad("frame", "%d; an INA frame of the data plane is %d bytes", s.net.Frame, 42+ina.HeaderLen+4*ina.DefaultK)
	case p.HostTurnaround < 0 || p.Timeout < 0 || p.RingTimeout < 0 || p.Sample < 0:
		return bad("timeout", "host_turnaround, timeout, ring_timeout and sample must not be negative")
	case p.RingWindow < 0 || p.RingWindow > 1<<16:
		return bad("ring_window", "%d; want 1 to 65536 packets, or 0 to derive it", p.RingWindow)
	case p.HostLatency < 0 || time.Duration(p.HostLatency) > time.Second:
		return bad("host_latency", "%v; want 0 (none) to 1s", time.Duration(p.HostLatency))
	case !(p.HostLatencySigma >= 0 && p.HostLatencySigma <= 4):
		return bad("host_latency_sigma", "%v; want 0 to 4", p.HostLatencySigma)
	}
	loss := -1.0
	if p.Loss != nil {
		if *p.Loss < 0 || *p.Loss >= 1 {
			return bad("loss", "%v; want a probability below 1", *p.Loss)
		}
		loss = float64(*p.Loss)
	}
	perSwitch := 0
	if needPS {
		hosts := len(s.top.Hosts())
		perSwitch = hosts / 2
		if s.jobs != nil {
			perSwitch = packet.MaxDistributed(s.jobs, hosts)
		}
	}
	minFrame := 0
	if roce {
		minFrame = fabric.PSMTU + fabric.PSMiddle // FreeINA's PS path
	}
	scaled, err := packet.ScaleTopology(s.top, s.net, packet.ScaleParams{Factor: spec.Scale, HostTurnaround: time.Duration(p.HostTurnaround).Seconds(), Loss: loss, PSPerSwitch: perSwitch, MinFrame: minFrame})
	if err != nil {
		return spec.Errorf("scale", "%v", err)
	}
	s.scaled = scaled
	// The ring's window covers its ack loop. Each timeout covers the
	// longest round trip its windows allow (docs/scaling.md): a
	// shared-mode chunk's round trip through the parameter server with a
	// window queued at the parameter server's link; a ring's
	// acknowledgement waiting behind a window of data at its sender, at
	// the switch and at its own host.
	s.ringWindow = p.RingWindow
	if s.ringWindow == 0 {
		s.ringWindow = max(32, 2*scaled.WindowScaled+16)
	}
	rate := float64(minAccessRate(scaled.Top))
	frame := float64(s.net.Frame) * 8 / rate
	s.timeout = time.Duration(p.Timeout)
	if s.timeout == 0 {
		// In shared mode every worker of a job may have its whole window
		// of packets collide and queue at the parameter server's link.
		n := s.maxWorkers()
		rtt, w := fabric.PSRoundTrip(scaled.Top, scaled.Workers, scaled.Net, n)
		s.timeout = fabric.Secs(max(2e-3, 1.5*(rtt+float64((n+1)*w)*frame)))
	}
	s.ringTimeout = time.Duration(p.RingTimeout)
	if s.ringTimeout == 0 {
		s.ringTimeout = fabric.Secs(max(2e-3, 5*float64(s.ringWindow)*frame))
	}
	return nil
}

// maxWorkers is the most workers a job of the scenario can have.
func (s *scenario) maxWorkers() int {
	n := 1
	for _, j := range s.jobs {
		n = max(n, j.Workers)
	}
	for _, c := range s.gen.Workers {
		n = max(n, c.Value)
	}
	return n
}

// compileScenario checks a scenario and prepares its topology, network and
// jobs; it reports every problem it finds (problems.List), each naming the
// spec's line and field, or the trace's.
func compileScenario(spec *experiments.Spec, sc experiments.Entry, p Params) (*scenario, error) {
	var probs problems.List
	bad := func(key, format string, args ...any) {
		probs.Add(experiments.EntryError(spec, sc, key, format, args...))
	}
	// Without a topology (its problems reported) the scenario's own fields
	// are still checked, all but those that need the topology.
	top, err := experiments.LoadTopology(spec.File, spec.TopologyNode, "topology")
	if err != nil {
		probs.Add(err)
		top = nil
	}
	if p.Aggregators != nil {
		if *p.Aggregators < 0 || *p.Aggregators > topologies.MaxAggregators {
			bad("aggregators", "%d; want 0 to %d", *p.Aggregators, topologies.MaxAggregators)
		} else if top != nil {
			for _, sw := range top.Switches() {
				sw.Aggregators = *p.Aggregators
			}
		}
	}
	if p.RackAggregators != nil {
		if *p.RackAggregators < 0 || *p.RackAggregators > topologies.MaxAggregators {
			bad("rack_aggregators", "%d; want 0 to %d", *p.RackAggregators, topologies.MaxAggregators)
		} else if top != nil {
			for _, h := range top.Hosts() {
				h.Uplink().Node.Aggregators = *p.RackAggregators
			}
		}
	}
	if p.FabricRate < 0 {
		bad("fabric_rate", "%v; want a positive rate (e.g. 200Gbps)", p.FabricRate)
	}
	if p.FabricRate > 0 && top != nil {
		n := 0
		for _, l := range top.Links {
			if !l.A.Node.IsHost() && !l.B.Node.IsHost() {
				l.Rate = p.FabricRate
				n++
			}
		}
		if n == 0 {
			bad("fabric_rate", "topology %s has no link between two switches", top.Name)
		}
	}
	hosts := math.MaxInt // no topology: jobs are checked against the data plane alone
	if top != nil {
		hosts = len(top.Hosts())
		if hosts < 2 {
			probs.Add(spec.Errorf("topology", "%s has %d host(s); INA jobs need at least 2", top.Name, hosts))
		}
	}
	net := fabric.Net{Payload: int(p.Payload), Frame: int(p.Frame), Turnaround: time.Duration(p.Turnaround),
		Control: time.Duration(p.Control), Jitter: p.Jitter, ComputeScale: p.ComputeScale, ATPHold: p.ATPHold, ATPCollisions: p.ATPCollisions}
	// ATP as published on the flow model; as the data plane runs it at
	// packet level (docs/dynaina.md, "ATP as published").
	def := fabric.DefaultNet
	if p.Granularity == GranularityPacket {
		def = def.DataPlaneATP()
	}
	if net.ATPHold == "" {
		net.ATPHold = def.ATPHold
	}
	if net.ATPCollisions == "" {
		net.ATPCollisions = def.ATPCollisions
	}
	if err := net.Check(); err != nil {
		errs := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = j.Unwrap()
		}
		for _, err := range errs {
			var ne *fabric.NetError
			if errors.As(err, &ne) {
				bad(ne.Field, "%v", err)
			} else {
				probs.Add(err)
			}
		}
	}
	if !(p.Load > 0 && p.Load <= 100) {
		bad("load", "%v; want more than 0, at most 100", p.Load)
	}
	if p.TimeCompression != 0 && !(p.TimeCompression >= 1 && p.TimeCompression <= 1e9) {
		bad("time_compression", "%v; want a factor of 1 (as recorded) to 1e9", p.TimeCompression)
	}
	if p.TimeCompression != 0 && p.Trace == "" {
		bad("time_compression", "compresses a replayed trace; this scenario has none (give a trace, or leave time_compression out)")
	}
	if p.Bins < 1 || p.Bins > 10000 {
		bad("bins", "%d; want 1 to 10000", p.Bins)
	}
	if p.Granularity != GranularityFlow && p.Granularity != GranularityPacket {
		bad("granularity", "%q; want %s (the flow-level model, sim only) or %s (packets on the run's substrate)", p.Granularity, GranularityFlow, GranularityPacket)
	}
	if p.FreeINAOverflow != 0 && p.Granularity != GranularityPacket {
		bad("freeina_overflow", "%v: the flow-level model carries no gradient values; set granularity: packet", p.FreeINAOverflow)
	}
	s := &scenario{p: p, top: top, net: net}
	switch {
	case len(p.JobList) > 0:
		s.listJobs(spec, sc, hosts, bad)
	case p.Trace != "":
		if err := s.traceJobs(spec, sc, hosts); err != nil {
			probs.Add(err)
		}
	default:
		s.generator(spec, sc, hosts, bad)
	}
	if err := probs.Err(); err != nil {
		return nil, err
	}
	return s, nil
}

// listJobs reads an inline trace (job_list).
func (s *scenario) listJobs(spec *experiments.Spec, sc experiments.Entry, hosts int, bad func(key, format string, args ...any)) {
	p := s.p
	if p.Trace != "" {
		bad("job_list", "give either a trace or a job_list, not both")
	}
	_, inEntry := experiments.EntryScalar(sc, "load")
	_, inWorkload := experiments.EntryScalar(experiments.Entry{Node: spec.Workload}, "load")
	loadSet := inEntry || inWorkload
	for i, lj := range p.JobList {
		key := fmt.Sprintf("job_list[%d]", i)
		id := i
		if lj.ID != nil {
			id = *lj.ID
		}
		switch {
		case id < 0:
			bad(key, "id %d; want 0 or more", id)
			continue
		case lj.Arrival < 0:
			bad(key, "arrival %v; want 0 or later", time.Duration(lj.Arrival))
			continue
		case lj.Workers < 1 || lj.Workers > hosts || lj.Workers > ina.MaxWorkers:
			if s.top == nil {
				bad(key, "%d workers; want 1 to %d", lj.Workers, ina.MaxWorkers)
				continue
			}
			bad(key, "%d workers; want 1 to %d (hosts of %s, at most %d)", lj.Workers, min(hosts, ina.MaxWorkers), s.top.Name, ina.MaxWorkers)
			continue
		case lj.Iterations < 1 || lj.Iterations > jobtrace.MaxIterations:
			bad(key, "%d iterations; want 1 to %d", lj.Iterations, jobtrace.MaxIterations)
			continue
		case !loadSet && p.Load > 0 && float64(lj.Arrival)/p.Load > float64(MaxArrival):
			// Located at the job's arrival, not at a load the spec does not
			// set (checkArrivals blames a load that is set).
			bad(key+".arrival", "%v at load %v arrives %.3g s after the start, beyond the %.0f s (11 days) the model's clock keeps precise; make it earlier or raise the load", time.Duration(lj.Arrival), p.Load, float64(lj.Arrival)/p.Load/1e9, MaxArrival.Seconds())
			continue
		}
		prof, ok := models.Lookup(lj.Model)
		if !ok {
			bad(key, "%v", models.UnknownError(lj.Model))
			continue
		}
		if slices.ContainsFunc(s.jobs, func(o jobtrace.Job) bool { return o.ID == id }) {
			bad(key, "id %d is used twice", id)
			continue
		}
		s.jobs = append(s.jobs, jobtrace.Job{ID: id, Arrival: time.Duration(float64(lj.Arrival) / p.Load), Model: prof.Name, Workers: lj.Workers, Iterations: lj.Iterations})
	}
}

// traceJobs reads a replayed trace, compressed in time as the scenario
// says; every problem of the trace, and every job the topology cannot
// hold, is reported with the trace's line.
func (s *scenario) traceJobs(spec *experiments.Spec, sc experiments.Entry, hosts int) error {
	p := s.p
	data, err := spec.ReadFile(p.Trace)
	if err != nil {
		_, inEntry := experiments.EntryScalar(sc, "trace")
		_, inWorkload := experiments.EntryScalar(experiments.Entry{Node: spec.Workload}, "trace")
		if !inEntry && !inWorkload && spec.At.Has("trace") {
			return spec.Errorf("trace", "%v", err) // the spec's top-level trace
		}
		return experiments.EntryError(spec, sc, "trace", "%v", err)
	}
	js, _, err := jobtrace.ParseCompressed(p.Trace, data, max(1, p.TimeCompression))
	if err != nil {
		return err
	}
	var probs problems.List
	for _, j := range js {
		if j.Workers > ina.MaxWorkers {
			probs.Add(fmt.Errorf("%s:%d: workers: job %d has %d workers; the INA data plane aggregates at most %d", p.Trace, j.Line, j.ID, j.Workers, ina.MaxWorkers))
			continue
		}
		if j.Workers > hosts {
			probs.Add(fmt.Errorf("%s:%d: workers: job %d needs %d workers; topology %s has %d hosts", p.Trace, j.Line, j.ID, j.Workers, s.top.Name, hosts))
			continue
		}
		j.Arrival = time.Duration(float64(j.Arrival) / p.Load)
		s.jobs = append(s.jobs, j)
	}
	return probs.Err()
}

// generator prepares the parameters of generated traces.
func (s *scenario) generator(spec *experiments.Spec, sc experiments.Entry, hosts int, bad func(key, format string, args ...any)) {
	p := s.p
	g := jobtrace.GenParams{Jobs: p.Jobs}
	if len(p.Models) > 0 {
		names := slices.Sorted(mapKeys(p.Models))
		for _, m := range names {
			g.Models = append(g.Models, jobtrace.Choice[string]{Value: m, Weight: p.Models[m]})
		}
	} else {
		var err error
		if g.Models, err = jobtrace.Mix(p.Mix); err != nil {
			bad("mix", "%v", err)
			g.Models = []jobtrace.Choice[string]{{Value: "vgg16", Weight: 1}} // reported; let Check look at the rest
		}
	}
	keys := slices.Sorted(mapKeys(p.Workers))
	for _, k := range keys {
		n, err := strconv.Atoi(k)
		switch {
		case err != nil:
			bad("workers", "key %q: want a number of workers", k)
			continue
		case n > hosts:
			bad("workers", "%d workers; topology %s has %d hosts", n, s.top.Name, hosts)
			continue
		case n > ina.MaxWorkers:
			bad("workers", "%d workers; the INA data plane aggregates at most %d", n, ina.MaxWorkers)
			continue
		}
		g.Workers = append(g.Workers, jobtrace.Choice[int]{Value: n, Weight: p.Workers[k]})
	}
	if len(g.Workers) == 0 && len(keys) > 0 {
		g.Workers = []jobtrace.Choice[int]{{Value: 2, Weight: 1}} // every choice reported
	}
	if len(p.GPUTime) != 2 {
		bad("gpu_time", "want [min, max], e.g. [2m, 20m]")
		g.GPUTime = [2]time.Duration{time.Minute, time.Minute} // reported; let Check look at the rest
	} else {
		g.GPUTime = [2]time.Duration{time.Duration(p.GPUTime[0]), time.Duration(p.GPUTime[1])}
	}
	g.MeanInterarrival = time.Second
	if err := g.Check(); err != nil {
		var fe *jobtrace.FieldError
		if errors.As(err, &fe) {
			bad(fe.Field, "%v", err)
		} else {
			bad("jobs", "%v", err)
		}
	}
	s.gen = g
}

// MaxArrival bounds the arrival times of jobs after load compresses or
// stretches them: the flow model counts time in float64 seconds, which
// keep sub-nanosecond precision (a few bytes at 100 Gbps) over 11 days.
const MaxArrival = 1e6 * time.Second

// checkArrivals refuses a scenario whose jobs, for any of the spec's
// seeds, arrive later than MaxArrival (a tiny load stretches a trace).
func (s *scenario) checkArrivals(spec *experiments.Spec, sc experiments.Entry) error {
	for _, seed := range spec.Seeds {
		js, err := s.Jobs(seed)
		if err != nil {
			return experiments.EntryError(spec, sc, "load", "%v", err)
		}
		for _, j := range js {
			if j.Arrival < 0 || j.Arrival > MaxArrival {
				return experiments.EntryError(spec, sc, "load", "%v: job %d would arrive %.3g s or more after the start, beyond the %.0f s (11 days) the model's clock keeps precise; raise the load or shorten the trace", s.p.Load, j.ID, math.Abs(float64(j.Arrival)/1e9), MaxArrival.Seconds())
			}
		}
		if s.jobs != nil {
			break // a replayed trace is the same for every seed
		}
	}
	return nil
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Metric names (fixed in results.json; DESIGN.md §5).
const (
	MetricAvgJCT      = "avg_jct_s"
	MetricMakespan    = "makespan_s"
	MetricMemUtil     = "mem_util"
	MetricINAFraction = "ina_fraction"
	MetricFallback    = "fallback_bytes"
)

// Metrics implements experiments.Experiment.
func (e *experiment) Metrics() []analysis.MetricInfo {
	return append([]analysis.MetricInfo{
		{Name: MetricAvgJCT, Unit: "s", Better: analysis.Lower, Description: "mean job completion time (finish − arrival, queueing for hosts included)"},
		{Name: MetricMakespan, Unit: "s", Better: analysis.Lower, Description: "first arrival to last finish"},
		{Name: MetricMemUtil, Better: analysis.Higher, Description: "aggregator-seconds holding aggregation state of an all-reduce in progress ÷ (aggregators × makespan)"},
		{Name: MetricINAFraction, Better: analysis.Higher, Description: "share of the gradient bytes of distributed jobs aggregated in a switch"},
		{Name: MetricFallback, Unit: "B", Better: analysis.Lower, Description: "gradient bytes workers sent to parameter servers after aggregator collisions"},
	}, e.freeinaMetrics()...)
}

// SeriesInfo implements experiments.SeriesDescriber.
func (e *experiment) SeriesInfo() []analysis.SeriesInfo {
	return []analysis.SeriesInfo{
		{Name: "jct_cdf", Kind: "cdf", XLabel: "job completion time (s)", YLabel: "fraction of jobs"},
		{Name: "mem_util", Kind: "time", XLabel: "time (s)", YLabel: "fraction of aggregator memory in use"},
	}
}

// Jobs returns the jobs of one run of a scenario: the replayed trace, or a
// generated one scaled to the scenario's load.
func (s *scenario) Jobs(seed int64) ([]jobtrace.Job, error) {
	if s.jobs != nil {
		return s.jobs, nil
	}
	g := s.gen
	g.Seed = uint64(seed)
	js, err := jobtrace.Generate(g)
	if err != nil {
		return nil, err
	}
	// Scale the unit-rate arrivals so that the offered load — host-seconds
	// of work at each job's lower bound per second, over the hosts — is
	// Load.
	rate := float64(minAccessRate(s.top))
	var work float64
	for _, j := range js {
		prof, _ := models.Lookup(j.Model)
		per := prof.Compute.Seconds() * s.net.ComputeScale
		if j.Workers > 1 {
			per += float64(prof.GradientBytes) * 8 / rate
		}
		work += float64(j.Workers) * float64(j.Iterations) * per
	}
	gap := work / float64(len(js)) / (float64(len(s.top.Hosts())) * s.p.Load)
	for i := range js {
		js[i].Arrival = time.Duration(float64(js[i].Arrival) * gap)
	}
	return js, nil
}

func minAccessRate(top *topologies.Topology) units.Rate {
	r := units.Rate(math.MaxInt64)
	for _, h := range top.Hosts() {
		r = min(r, h.Ports[0].Link.Rate)
	}
	return r
}

// Run implements experiments.Experiment.
func (e *experiment) Run(ctx context.Context, r experiments.Run) (*analysis.Run, error) {
	sc := e.scenarios[r.Scenario]
	js, err := sc.Jobs(r.Seed)
	if err != nil {
		return nil, err
	}
	if sc.p.Granularity == GranularityPacket {
		return e.runPacket(ctx, r, sc, js)
	}
	var binder inasched.Binder
	if e.systems[r.Policy] == "freeina" {
		binder, err = flow.FreeSimBinder(sc.top, sc.net.RDMAPayload, js, nil)
	} else {
		var b *inasched.P4RT
		b, _, err = flow.SimBinder(sc.top)
		if b != nil {
			b.Hold, b.Place = sc.net.DataPlaneHold(), sc.net.DataPlanePlace() // ATP's bindings as the model runs them
		}
		binder = b
	}
	if err != nil {
		return nil, err
	}
	policy, err := e.factory(r.Policy, sc)
	if err != nil {
		return nil, err
	}
	o, err := flow.Simulate(ctx, flow.Setup{Top: sc.top, Net: sc.net, Jobs: js, Policy: policy, Binder: binder, Seed: uint64(r.Seed), Bins: sc.p.Bins, Progress: r.Progress})
	if err != nil {
		return nil, err
	}
	run := Report(o, sc.p.Load, aggregatorsParam(sc.top))
	e.reportFreeINA(run, o.Jobs)
	// The sensitivity settings, so that plots group runs that differ in
	// them apart from the memory and load sweeps.
	run.Params["compute_scale"] = sc.net.ComputeScale
	if sc.p.FabricRate > 0 || sc.p.RackAggregators != nil {
		// Fabric scenarios: plots keep the ToRs' memory apart.
		run.Params["oversubscription"] = oversubscription(sc.top)
		run.Params["rack_aggregators"] = float64(sc.top.Hosts()[0].Uplink().Node.Aggregators)
	}
	run.Params["atp_hold_return"] = 0
	if sc.net.ATPHold == fabric.HoldReturn {
		run.Params["atp_hold_return"] = 1
	}
	return run, nil
}

func aggregatorsParam(top *topologies.Topology) float64 {
	for _, sw := range top.Switches() {
		if sw.Aggregators > 0 {
			return float64(sw.Aggregators)
		}
	}
	return 0
}

// Report turns an outcome into a run's metrics, series, params and per-job
// table.
func Report(o *flow.Outcome, load, aggregators float64) *analysis.Run {
	jcts := make([]float64, len(o.Jobs))
	for i, j := range o.Jobs {
		jcts[i] = j.JCT()
	}
	sort.Float64s(jcts)
	cdf := make([]analysis.Point, len(jcts))
	for i, v := range jcts {
		cdf[i] = analysis.Point{X: v, Y: float64(i+1) / float64(len(jcts))}
	}
	return &analysis.Run{
		Metrics: analysis.Metrics{
			MetricAvgJCT:      o.AvgJCT(),
			MetricMakespan:    o.Makespan,
			MetricMemUtil:     o.MemUtil,
			MetricINAFraction: o.INAFraction,
			MetricFallback:    math.Round(o.FallbackBytes),
		},
		Series: map[string][]analysis.Point{"jct_cdf": cdf, "mem_util": o.MemSeries},
		Params: map[string]float64{"aggregators": aggregators, "load": load},
		Tables: []analysis.EntityTable{jobTable(o.Jobs)},
	}
}

// Summarize implements experiments.Summarizer: DynaINA's reduction of the
// average JCT and gain in memory utilisation over every other policy of
// the spec (the baselines and DynaINA's own ablations), per scenario and
// at best. The reduction is paired: one difference per seed, both
// policies having run the same trace, with its mean and 95% confidence
// interval; a difference is significant only when the interval excludes
// zero. When the spec runs FreeINA and ATP, a table of FreeINA against
// ATP follows, with the FreeINA paper's numbers (summarizeFreeINA).
func (e *experiment) Summarize(res *analysis.Results) []analysis.Table {
	return append(e.summarizeDynaINA(res), e.summarizeFreeINA(res)...)
}

// summarizeDynaINA is the DynaINA table of Summarize.
func (e *experiment) summarizeDynaINA(res *analysis.Results) []analysis.Table {
	d := ""
	for _, name := range res.Policies {
		if e.systems[name] == "dynaina" || e.systems[name] == "" && strings.HasPrefix(name, "dynaina") {
			d = name
			break
		}
	}
	var bases []string
	for _, name := range res.Policies {
		if name != d {
			bases = append(bases, name)
		}
	}
	if d == "" || len(bases) == 0 {
		return nil
	}
	t := analysis.Table{
		Title:  fmt.Sprintf("%s — %s against each other policy (paired over seeds)", res.Experiment, d),
		Header: []string{"scenario", "against", "training-time reduction", "95% CI", "significant", "mem_util gain", "ina_fraction (other → " + d + ")"},
	}
	best := map[string][2]float64{}
	for _, b := range bases {
		best[b] = [2]float64{math.Inf(-1), math.Inf(-1)}
	}
	for _, sc := range res.Scenarios {
		da := res.Aggregate(sc, d)
		for _, b := range bases {
			ba := res.Aggregate(sc, b)
			if len(ba) == 0 || len(da) == 0 {
				continue
			}
			p := res.PairedRelative(sc, MetricAvgJCT, d, b)
			ci, sig := "n/a (1 seed)", "n/a"
			if p.N() > 1 {
				ci = fmt.Sprintf("[%+.2f%%, %+.2f%%]", p.Lo, p.Hi)
				sig = "no"
				if p.Significant() {
					sig = "yes"
				}
			}
			gain := "n/a (holds no memory)"
			if u := ba[MetricMemUtil].Mean; u > 0 {
				g := 100 * (da[MetricMemUtil].Mean - u) / u
				gain = fmt.Sprintf("%+.2f%%", g)
				bb := best[b]
				bb[1] = max(bb[1], g)
				best[b] = bb
			}
			bb := best[b]
			bb[0] = max(bb[0], p.Mean)
			best[b] = bb
			t.Rows = append(t.Rows, []string{sc, b, fmt.Sprintf("%+.2f%%", p.Mean), ci, sig, gain,
				fmt.Sprintf("%.3f → %.3f", ba[MetricINAFraction].Mean, da[MetricINAFraction].Mean)})
		}
	}
	pct := func(v float64) string {
		if math.IsInf(v, -1) || math.IsNaN(v) {
			return "n/a"
		}
		return fmt.Sprintf("%+.2f%%", v)
	}
	for _, b := range bases {
		t.Rows = append(t.Rows, []string{"up to", b, pct(best[b][0]), "", "", pct(best[b][1]), ""})
	}
	t.Notes = append(t.Notes,
		"Training-time reduction: the mean over seeds of (other avg_jct_s − "+d+" avg_jct_s) ÷ other, seed by seed (paired: both ran the same trace); 95% CI by Student's t; significant when the interval excludes zero. The ± std of the tables above mostly measures how the seeds' traces differ, not the policies.",
		"Memory-utilization gain: ("+d+" mem_util − other) ÷ other, of the means. The DynaINA paper reports up to 65.16% and 85.02%; docs/dynaina.md explains the difference.")
	return []analysis.Table{t}
}

// runPacket runs one packet-level run on the run's testbed and reports it
// in paper units: times are kept by the scaling, byte counts are
// multiplied by the scale factor (docs/scaling.md).
func (e *experiment) runPacket(ctx context.Context, r experiments.Run, sc *scenario, js []jobtrace.Job) (*analysis.Run, error) {
	if e.systems[r.Policy] == "freeina" {
		return e.runFreePacket(ctx, r, sc, js)
	}
	newTB := r.NewTestbed
	if newTB == nil {
		newTB = experiments.SimTestbed
	}
	scaled := sc.scaled
	policy, err := e.factory(r.Policy, sc.scaledScenario())
	if err != nil {
		return nil, err
	}
	prog, err := ina.SwitchProgram()
	if err != nil {
		return nil, err
	}
	tb, err := newTB(ctx, sc.testbedConfig(&prog, r.Seed))
	if err != nil {
		return nil, err
	}
	defer tb.Close()
	o, err := packet.Run(ctx, packet.Setup{
		Testbed: sc.hostModel(tb, uint64(r.Seed)), Workers: scaled.Workers, Controller: scaled.Controller, PS: scaled.PS,
		Net: scaled.Net, Jobs: js, Lookup: packet.ScaleProfiles(models.Lookup, scaled.Factor),
		Policy: policy, Seed: uint64(r.Seed),
		Timeout: sc.timeout, RingTimeout: sc.ringTimeout, RingWindow: sc.ringWindow, Sample: time.Duration(sc.p.Sample),
		Bins: sc.p.Bins, Progress: r.Progress,
	})
	if err != nil {
		return nil, err
	}
	if err := tb.Close(); err != nil {
		return nil, fmt.Errorf("closing the %s testbed: %w", tb.Substrate(), err)
	}
	if o.Verified != o.Rounds {
		return nil, fmt.Errorf("%d of %d all-reduced tensors verified exact", o.Verified, o.Rounds)
	}
	return e.reportPacket(&o.Outcome, sc), nil
}

// reportPacket reports a packet-level run in paper units: byte counts
// multiplied by the scale factor, times as measured (docs/scaling.md).
func (e *experiment) reportPacket(o *flow.Outcome, sc *scenario) *analysis.Run {
	f := sc.scaled.Factor
	o.FallbackBytes *= f
	for i := range o.Jobs {
		o.Jobs[i].Gradient *= f
		o.Jobs[i].INA *= f
		o.Jobs[i].Fallback *= f
	}
	run := Report(o, sc.p.Load, aggregatorsParam(sc.top))
	e.reportFreeINA(run, o.Jobs)
	run.Params["compute_scale"] = sc.net.ComputeScale
	run.Params["atp_hold_return"] = 0
	run.Params["scale"] = f
	return run
}

// testbedConfig is the testbed of a packet-level run of the scenario: its
// scaled topology, with the switches running prog. On sim, a control-plane
// call of the controller (a P4Runtime write or read) takes the scenario's
// control latency (docs/dynaina.md, "Packet level"); on netns it takes
// what it takes.
func (s *scenario) testbedConfig(prog *dataplane.Program, seed int64) testbed.Config {
	return testbed.Config{Topology: s.scaled.Top, Program: prog, Seed: uint64(seed), ControlLatency: s.scaled.Net.Control}
}

// hostModel applies the scenario's host latency model to a sim testbed
// (real hosts bring their own).
func (s *scenario) hostModel(tb testbed.Testbed, seed uint64) testbed.Testbed {
	if tb.Substrate() != "sim" {
		return tb
	}
	return testbed.WithHostLatency(tb, testbed.HostLatency{Median: time.Duration(s.p.HostLatency), Sigma: s.p.HostLatencySigma}, seed)
}

// scaledScenario is the scenario as the scaled run sees it: policies that
// size memory from the network (switchml's default partition) size it on
// the scaled one.
func (s *scenario) scaledScenario() *scenario {
	c := *s
	c.top, c.net = s.scaled.Top, s.scaled.Net
	return &c
}

// oversubscription is the ratio of the first rack's host bandwidth to its
// uplinks' (1 when its switch has no uplink).
func oversubscription(top *topologies.Topology) float64 {
	for _, h := range top.Hosts() {
		tor := h.Uplink().Node
		var down, up float64
		for _, p := range tor.Ports {
			if p.Peer.Node.IsHost() {
				down += float64(p.Link.Rate)
			} else {
				up += float64(p.Link.Rate)
			}
		}
		if up == 0 {
			return 1
		}
		return down / up
	}
	return 1
}
