// Package rdma holds the workloads of tracebed's RDMA hosts (the soft-RoCE
// of package emulator/roce): the roce-demo experiment, which moves a large
// buffer from one host to another over a reliable connection through a
// switch whose links lose, duplicate and reorder frames, and checks that
// it arrives exactly once, in order, into the right memory. It runs on sim
// and, unchanged, on netns (real UDP sockets on port 4791 in the hosts'
// namespaces, the Go switch injecting the impairments). docs/roce.md
// describes the transport and the experiment.
package rdma

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/roce/wire"
	"github.com/tracebed/tracebed/emulator/testbed"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

// Params are the workload parameters; scenarios override any of them.
type Params struct {
	Bytes   units.Bytes `yaml:"bytes"`   // the buffer moved from h1 to h2
	Message units.Bytes `yaml:"message"` // bytes per work request
	// Outstanding is how many work requests are in flight at once: each
	// completion posts the next.
	Outstanding int            `yaml:"outstanding"`
	MTU         int            `yaml:"mtu"`    // path MTU: 256 to 4096 bytes
	Window      int            `yaml:"window"` // the requester's window (roce.Config.Window), packets
	Timeout     units.Duration `yaml:"timeout"`
	// Rate, Delay and Buffer are those of both links of the star (h1–tor,
	// tor–h2); Loss, Duplicate and Reorder apply to every frame on them,
	// in each direction.
	Rate      units.Rate     `yaml:"rate"`
	Delay     units.Duration `yaml:"delay"`
	Buffer    units.Bytes    `yaml:"buffer"`
	Loss      units.Fraction `yaml:"loss"`
	Duplicate units.Fraction `yaml:"duplicate"`
	Reorder   units.Fraction `yaml:"reorder"`
}

// DefaultParams are used for fields the spec leaves out.
var DefaultParams = Params{
	Bytes: 16 << 20, Message: 1 << 20, Outstanding: 4, MTU: 4096, Window: 128,
	Timeout: units.Duration(time.Millisecond), Rate: 100 * units.Gbps,
	Delay: units.Duration(time.Microsecond), Buffer: 1 << 20,
}

// Verbs a policy may name: how the buffer moves.
const (
	VerbWrite    = "write"     // RDMA WRITE by h1 into h2's region
	VerbWriteImm = "write_imm" // RDMA WRITE with immediate: h2 gets a completion per message, numbered by its immediate
	VerbSend     = "send"      // SEND into receive buffers h2 posted, in order
	VerbRead     = "read"      // RDMA READ by h2 from h1's region
)

var verbs = []string{VerbWrite, VerbWriteImm, VerbSend, VerbRead}

// Policy is how the buffer moves.
type Policy struct {
	Verb string `yaml:"verb"` // default: the policy's name
}

// Kind is the roce-demo experiment kind.
type Kind struct{}

// Name implements experiments.Kind.
func (Kind) Name() string { return "roce-demo" }

type experiment struct {
	scenarios map[string]Params
	policies  map[string]Policy
}

// Compile implements experiments.Kind.
func (Kind) Compile(spec *experiments.Spec) (experiments.Experiment, error) {
	if spec.TopologyNode != nil {
		return nil, spec.Errorf("topology", "roce-demo builds its own star of two hosts from workload.rate, delay, buffer and the impairments; remove this field")
	}
	if spec.Scale != 1 {
		return nil, spec.Errorf("scale", "roce-demo has no scaled form; remove this field (give netns a smaller rate instead)")
	}
	base := DefaultParams
	if err := spec.DecodeWorkload(&base); err != nil {
		return nil, err
	}
	e := &experiment{scenarios: map[string]Params{}, policies: map[string]Policy{}}
	for _, sc := range spec.Scenarios {
		p := base
		if err := spec.DecodeEntry(sc, &p); err != nil {
			return nil, err
		}
		if err := p.check(spec, sc); err != nil {
			return nil, err
		}
		e.scenarios[sc.Name] = p
	}
	for _, pe := range spec.Policies {
		pol := Policy{Verb: pe.Name}
		if err := spec.DecodeEntry(pe, &pol); err != nil {
			return nil, err
		}
		ok := false
		for _, v := range verbs {
			ok = ok || v == pol.Verb
		}
		if !ok {
			return nil, experiments.EntryError(spec, pe, "verb", "%q; want one of %v (or a policy named after one)", pol.Verb, verbs)
		}
		e.policies[pe.Name] = pol
	}
	return e, nil
}

func (p Params) check(spec *experiments.Spec, e experiments.Entry) error {
	bad := func(key, format string, args ...any) error {
		return experiments.EntryError(spec, e, key, format, args...)
	}
	switch {
	case p.Bytes < 1 || p.Bytes > 1<<32:
		return bad("bytes", "%v; want 1B to 4GiB", p.Bytes)
	case p.Message < 1 || p.Message > p.Bytes || p.Message > 1<<30:
		return bad("message", "%v; want 1B to the buffer's size (and at most 1GiB)", p.Message)
	case p.Bytes/p.Message > 1<<20:
		return bad("message", "%v makes %d work requests; want at most 2^20 (a larger message)", p.Message, p.Bytes/p.Message)
	case p.Outstanding < 1 || p.Outstanding > 4096:
		return bad("outstanding", "%d; want 1 to 4096", p.Outstanding)
	case !wire.ValidMTU(p.MTU):
		return bad("mtu", "%d; want one of %v", p.MTU, wire.MTUs)
	case p.Window < 1 || p.Window >= 1<<22:
		return bad("window", "%d; want 1 to %d packets", p.Window, 1<<22-1)
	case p.Timeout <= 0 || time.Duration(p.Timeout) > wire.AckTimeout(31):
		return bad("timeout", "%v; want a positive duration up to %v", p.Timeout, wire.AckTimeout(31))
	case p.Rate <= 0:
		return bad("rate", "want a positive rate, e.g. 100Gbps")
	case p.Delay < 0:
		return bad("delay", "%v is negative", p.Delay)
	case p.Buffer < units.Bytes(frame.HeaderLen+wire.Len(wire.WriteFirst, p.MTU)):
		return bad("buffer", "%v cannot hold one %d-byte packet", p.Buffer, frame.HeaderLen+wire.Len(wire.WriteFirst, p.MTU))
	case p.Loss >= 0.5:
		return bad("loss", "%v; below 50%% please, or no connection is ever made", p.Loss)
	}
	return nil
}

// timeoutCode returns the smallest IBTA local ACK timeout code whose
// timeout is at least d.
func timeoutCode(d time.Duration) uint8 {
	for t := uint8(1); t < 31; t++ {
		if wire.AckTimeout(t) >= d {
			return t
		}
	}
	return 31
}

// Topology returns the star the experiment runs on: h1 — tor — h2.
func Topology(p Params) (*topologies.Topology, error) {
	f, err := topologies.Generate(topologies.Params{Generate: "star", Name: "roce-demo", Hosts: 2,
		Rate: p.Rate, Delay: p.Delay, Buffer: p.Buffer, Queues: 1})
	if err != nil {
		return nil, err
	}
	top, err := f.Build("roce-demo")
	if err != nil {
		return nil, err
	}
	for _, l := range top.Links {
		l.Loss, l.Duplicate, l.Reorder = float64(p.Loss), float64(p.Duplicate), float64(p.Reorder)
	}
	return top, nil
}

// Metrics implements experiments.Experiment.
func (e *experiment) Metrics() []analysis.MetricInfo {
	return []analysis.MetricInfo{
		{Name: "goodput_gbps", Unit: "Gbps", Better: analysis.Higher, Description: "buffer bits over the time from the first work request to the last byte's completion at h2"},
		{Name: "completion_us", Unit: "us", Better: analysis.Lower, Description: "time from the first work request to the last completion at h2"},
		{Name: "packets", Unit: "packets", Better: analysis.Lower, Description: "RoCEv2 packets both devices sent (data, ACKs, NAKs)"},
		{Name: "overhead_pct", Unit: "%", Better: analysis.Lower, Description: "data packets sent beyond the fewest the buffer needs (go-back-N retransmissions, READs executed again)"},
		{Name: "timeouts", Unit: "events", Better: analysis.Lower, Description: "local ACK timeouts at the requester"},
		{Name: "seq_naks", Unit: "packets", Better: analysis.Lower, Description: "NAK sequence errors the responder sent"},
		{Name: "duplicates", Unit: "packets", Better: analysis.Either, Description: "duplicate requests the responder recognised (re-ACKed, or READs answered again), none executed twice"},
		{Name: "dropped", Unit: "packets", Better: analysis.Either, Description: "packets the devices dropped without effect (out of sequence, stale responses, …)"},
		{Name: "delivered_messages", Unit: "messages", Better: analysis.Either, Description: "messages h2 received (each checked: exactly once, in order, its bytes in place)"},
		{Name: "integrity_errors", Unit: "errors", Better: analysis.Lower, Description: "bytes out of place, messages lost, duplicated or out of order: always 0, else the run fails"},
	}
}

// Run implements experiments.Experiment.
func (e *experiment) Run(ctx context.Context, r experiments.Run) (*analysis.Run, error) {
	p, pol := e.scenarios[r.Scenario], e.policies[r.Policy]
	newTB := r.NewTestbed
	if newTB == nil {
		newTB = experiments.SimTestbed
	}
	o, err := Move(ctx, newTB, p, pol.Verb, uint64(r.Seed), r.Progress)
	if err != nil {
		return nil, err
	}
	if o.IntegrityErrors > 0 {
		return nil, fmt.Errorf("%d integrity errors: %s", o.IntegrityErrors, o.FirstError)
	}
	secs := o.Completion.Seconds()
	goodput := 0.0
	if secs > 0 {
		goodput = float64(p.Bytes) * 8 / secs / 1e9
	}
	return &analysis.Run{Metrics: analysis.Metrics{
		"goodput_gbps":       goodput,
		"completion_us":      float64(o.Completion) / float64(time.Microsecond),
		"packets":            float64(o.Packets),
		"overhead_pct":       100 * (float64(o.DataPackets) - float64(o.MinDataPackets)) / math.Max(1, float64(o.MinDataPackets)),
		"timeouts":           float64(o.Timeouts),
		"seq_naks":           float64(o.SeqNAKs),
		"duplicates":         float64(o.Duplicates),
		"dropped":            float64(o.Dropped),
		"delivered_messages": float64(o.Messages),
		"integrity_errors":   float64(o.IntegrityErrors),
	}}, nil
}

// Cost implements experiments.Coster (how shards are balanced): a run's
// work grows with the bytes it moves and with what go-back-N sends again,
// about a window per lost or reordered frame on either link.
func (e *experiment) Cost(r experiments.Run) float64 {
	p := e.scenarios[r.Scenario]
	return float64(p.Bytes) * (1 + 2*float64(p.Loss+p.Reorder)*float64(p.Window))
}

// checkMTU refuses a testbed whose links cannot carry a full-size RoCEv2
// packet in one frame.
func checkMTU(tb testbed.Testbed, mtu int) error {
	m, ok := tb.(interface{ MTU() int })
	if !ok {
		return nil
	}
	if ip := frame.IPv4Len + frame.UDPLen + wire.Len(wire.WriteFirst, mtu); ip > m.MTU() {
		return fmt.Errorf("a RoCEv2 packet with %d bytes of payload is a %d-byte IP packet, above the links' MTU of %d bytes: use a smaller mtu", mtu, ip, m.MTU())
	}
	return nil
}
