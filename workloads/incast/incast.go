// Package incast is tracebed's demonstration experiment: N senders send to
// one receiver through one switch at line rate, and the switch's egress
// buffer towards the receiver decides how much is lost. It exercises the
// whole path — spec, topology generator, simulated links and queues, host
// agents over Env, runner, results and tables — and its outcome has a
// closed form (see Expected), which the tests check.
package incast

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"time"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/sim"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/topologies"
)

// Port is the UDP port of the senders and the receiver.
const Port = 5001

// Params are the workload parameters; scenarios override any of them.
type Params struct {
	Senders int            `yaml:"senders"` // hosts sending at once
	Packets int            `yaml:"packets"` // frames per sender
	Size    units.Bytes    `yaml:"size"`    // frame size, headers included
	Rate    units.Rate     `yaml:"rate"`    // rate of every link
	Delay   units.Duration `yaml:"delay"`   // propagation delay of every link
}

// Policy is a switch buffer configuration under comparison.
type Policy struct {
	Buffer units.Bytes `yaml:"buffer"` // drop-tail limit of each egress queue
}

// DefaultParams are used for fields the spec leaves out.
var DefaultParams = Params{Senders: 8, Packets: 1000, Size: 1500, Rate: 10 * units.Gbps, Delay: units.Duration(time.Microsecond)}

// minSize leaves room for the headers and the sequence number and timestamp.
const minSize = frame.HeaderLen + 16

// Kind is the incast experiment kind.
type Kind struct{}

// Name implements experiments.Kind.
func (Kind) Name() string { return "incast" }

type experiment struct {
	spec      *experiments.Spec
	scenarios map[string]Params
	entries   map[string]experiments.Entry
	policies  map[string]Policy
}

// Compile implements experiments.Kind.
func (Kind) Compile(spec *experiments.Spec) (experiments.Experiment, error) {
	if spec.Substrate != "sim" {
		return nil, spec.Errorf("substrate", "the incast demonstration runs on sim only")
	}
	if spec.TopologyNode != nil {
		return nil, spec.Errorf("topology", "incast builds its own star from workload.rate and workload.delay; remove this field")
	}
	if spec.Scale != 1 {
		return nil, spec.Errorf("scale", "%g: the incast demonstration runs at the workload's own rate; remove this field", spec.Scale)
	}
	base := DefaultParams
	if err := spec.DecodeWorkload(&base); err != nil {
		return nil, err
	}
	e := &experiment{spec: spec, scenarios: map[string]Params{}, entries: map[string]experiments.Entry{}, policies: map[string]Policy{}}
	for _, sc := range spec.Scenarios {
		p := base
		if err := spec.DecodeEntry(sc, &p); err != nil {
			return nil, err
		}
		if err := p.check(spec, sc); err != nil {
			return nil, err
		}
		e.scenarios[sc.Name] = p
		e.entries[sc.Name] = sc
	}
	for _, pe := range spec.Policies {
		var pol Policy
		if err := spec.DecodeEntry(pe, &pol); err != nil {
			return nil, err
		}
		if pol.Buffer <= 0 {
			return nil, experiments.EntryError(spec, pe, "buffer", "missing or zero; give the egress buffer, e.g. {name: %s, buffer: 64KiB}", pe.Name)
		}
		e.policies[pe.Name] = pol
	}
	return e, nil
}

func (p Params) check(spec *experiments.Spec, e experiments.Entry) error {
	switch {
	case p.Senders < 1 || p.Senders > 4096:
		return experiments.EntryError(spec, e, "senders", "%d; want 1 to 4096", p.Senders)
	case p.Packets < 1:
		return experiments.EntryError(spec, e, "packets", "%d; want at least 1", p.Packets)
	case p.Size < minSize || p.Size > 9000:
		return experiments.EntryError(spec, e, "size", "%v; want %d to 9000 bytes", p.Size, minSize)
	case p.Rate <= 0:
		return experiments.EntryError(spec, e, "rate", "want a positive rate")
	}
	// The clock counts picoseconds in an int64: the last frame is sent
	// after packets gaps and the receiver's link carries every frame.
	gap := math.Ceil(float64(units.TransmitTime(p.Size, p.Rate))/1e3) * 1e3
	if end := float64(p.Packets)*gap + float64(p.Senders)*float64(p.Packets)*gap + 4*float64(sim.FromDuration(time.Duration(p.Delay))); end > maxClock {
		return experiments.EntryError(spec, e, "packets", "%d frames of %v at %v last about %.3g s, beyond the simulation clock's %.3g s; send fewer frames or use a faster rate", p.Packets, p.Size, p.Rate, end/float64(sim.Second), maxClock/float64(sim.Second))
	}
	return nil
}

// maxClock is the longest run the simulation clock holds, in picoseconds,
// with room to spare.
const maxClock = float64(sim.Forever) / 2

// Metrics implements experiments.Experiment.
func (e *experiment) Metrics() []analysis.MetricInfo {
	return []analysis.MetricInfo{
		{Name: "delivered", Unit: "frames", Better: analysis.Higher, Description: "frames that reached the receiver"},
		{Name: "drops", Unit: "frames", Better: analysis.Lower, Description: "frames dropped by the switch's full egress queue"},
		{Name: "completion_us", Unit: "us", Better: analysis.Lower, Description: "arrival time of the last frame"},
		{Name: "goodput_gbps", Unit: "Gbps", Better: analysis.Higher, Description: "delivered bits over completion time"},
		{Name: "max_queue_kib", Unit: "KiB", Better: analysis.Either, Description: "largest egress backlog towards the receiver"},
		{Name: "latency_p50_us", Unit: "us", Better: analysis.Lower, Description: "median one-way frame latency"},
		{Name: "latency_p99_us", Unit: "us", Better: analysis.Lower, Description: "99th percentile one-way frame latency"},
	}
}

// Outcome is what one incast run measured.
type Outcome struct {
	Delivered, Drops int
	Completion       sim.Time
	MaxQueue         int64
	// Latencies are the one-way latencies of the delivered frames: every
	// one up to analysis.MaxExactDurations frames, a histogram beyond,
	// so memory does not grow with the frames sent.
	Latencies *analysis.Durations
	Events    uint64
}

// Run implements experiments.Experiment.
func (e *experiment) Run(ctx context.Context, r experiments.Run) (*analysis.Run, error) {
	p, pol := e.scenarios[r.Scenario], e.policies[r.Policy]
	o, err := Simulate(ctx, p, pol, uint64(r.Seed), r.Progress)
	if err != nil {
		return nil, err
	}
	q := func(f float64) float64 { return float64(o.Latencies.Quantile(f)) / 1e3 }
	goodput := 0.0
	if o.Completion > 0 {
		goodput = float64(o.Delivered) * float64(p.Size) * 8 / o.Completion.Seconds() / 1e9
	}
	return &analysis.Run{Metrics: analysis.Metrics{
		"delivered":      float64(o.Delivered),
		"drops":          float64(o.Drops),
		"completion_us":  float64(o.Completion) / float64(sim.Microsecond),
		"goodput_gbps":   goodput,
		"max_queue_kib":  float64(o.MaxQueue) / 1024,
		"latency_p50_us": q(0.5),
		"latency_p99_us": q(0.99),
	}}, nil
}

// Topology returns the star the experiment runs on: hosts h1..hN send,
// h(N+1) receives.
func Topology(p Params, pol Policy) (*topologies.Topology, error) {
	f, err := topologies.Generate(topologies.Params{
		Generate: "star", Name: "incast", Hosts: p.Senders + 1,
		Rate: p.Rate, Delay: p.Delay, Buffer: pol.Buffer, Queues: 1,
	})
	if err != nil {
		return nil, err
	}
	return f.Build("incast")
}

// Simulate runs one incast on the sim substrate.
func Simulate(ctx context.Context, p Params, pol Policy, seed uint64, progress func(float64)) (*Outcome, error) {
	top, err := Topology(p, pol)
	if err != nil {
		return nil, err
	}
	s := sim.New()
	net, err := sim.NewNetwork(s, top, sim.Options{Seed: seed, Pipeline: fwd.SimPipeline})
	if err != nil {
		return nil, err
	}
	hosts := top.Hosts()
	rx := &receiver{}
	if _, err := net.Attach(hosts[p.Senders].Name, Port, rx); err != nil {
		return nil, err
	}
	dst := netip.AddrPortFrom(hosts[p.Senders].IP, Port)
	gap := time.Duration(math.Ceil(float64(units.TransmitTime(p.Size, p.Rate)) / 1e3))
	for _, h := range hosts[:p.Senders] {
		if _, err := net.Attach(h.Name, Port, &sender{to: dst, n: p.Packets, size: int(p.Size), gap: gap}); err != nil {
			return nil, err
		}
	}
	total := p.Senders * p.Packets
	step := sim.FromDuration(gap) * 1000
	defer s.InterruptOn(ctx)()
	for s.Pending() > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s.RunUntil(s.Now() + step)
		if progress != nil {
			progress(float64(s.Now()) / float64(sim.FromDuration(gap)*sim.Time(p.Packets)+step))
		}
	}
	swPort := top.Node("tor").Ports[p.Senders].Num // towards the receiver
	st, err := net.Stats("tor", swPort)
	if err != nil {
		return nil, err
	}
	o := &Outcome{Delivered: rx.lat.Len(), Drops: int(st.Drops), Completion: rx.last, MaxQueue: st.MaxQueueBytes, Latencies: &rx.lat, Events: s.Fired()}
	if o.Delivered+o.Drops != total {
		return nil, fmt.Errorf("incast lost track of frames: %d delivered + %d dropped != %d sent", o.Delivered, o.Drops, total)
	}
	return o, nil
}

// sender sends n frames of size bytes to one receiver, one every gap.
type sender struct {
	env  emulator.Env
	to   emulator.Addr
	n    int
	size int
	gap  time.Duration
	sent int
	buf  []byte
	next func() // s.send, bound once: a method value allocates
}

func (s *sender) Start(env emulator.Env) {
	s.env = env
	s.buf = make([]byte, s.size-frame.HeaderLen)
	s.next = s.send
	s.send()
}

func (s *sender) send() {
	binary.BigEndian.PutUint64(s.buf[0:], uint64(s.sent))
	binary.BigEndian.PutUint64(s.buf[8:], uint64(s.env.Now()))
	s.env.Send(s.to, s.buf)
	s.sent++
	if s.sent < s.n {
		s.env.After(s.gap, s.next)
	}
}

func (s *sender) Recv(emulator.Addr, []byte) {}

// receiver records the one-way latency of every frame.
type receiver struct {
	env  emulator.Env
	lat  analysis.Durations
	last sim.Time
}

func (r *receiver) Start(env emulator.Env) { r.env = env }

func (r *receiver) Recv(_ emulator.Addr, b []byte) {
	if len(b) < 16 {
		return
	}
	now := r.env.Now()
	r.lat.Add(now - time.Duration(binary.BigEndian.Uint64(b[8:])))
	r.last = sim.FromDuration(now)
}
