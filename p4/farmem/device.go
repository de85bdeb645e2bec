package farmem

import (
	_ "embed"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/tracebed/tracebed/emulator/p4rt"
)

// ProgramName is the program's name: its P4Info's pkg_info.name, and its
// name in the registry of data planes (p4/programs) that switches load.
const ProgramName = "farmem"

// Names of the far-memory objects of farmem.p4, as in its P4Info.
// Controllers look their ids up by these names (p4rt.Names).
const (
	TableClassify     = "ingress.farmem_classify"
	FieldType         = "type"    // exact, 4 bits: the message type
	FieldUrgency      = "urgency" // exact, 3 bits
	ActionSetPriority = "ingress.set_priority"
	ParamPrio         = "prio" // 3 bits
	ActionNoAction    = "NoAction"
	// CounterClass counts valid far-memory messages, packets and bytes, at
	// index Class(type, urgency).
	CounterClass = "ingress.farmem_class"
	// CounterStats counts far-memory port traffic by outcome (StatClassified,
	// StatDefault, StatMalformed).
	CounterStats = "ingress.farmem_stats"
)

// The ids of farmem.p4info.txtpb for the objects this package implements.
const (
	idClassify     uint32 = 0x02ac7ba4
	idSetPriority  uint32 = 0x0163d539
	idNoAction     uint32 = 21257015 // p4c's id of core.p4's NoAction
	idCounterClass uint32 = 0x123effba
	idCounterStats uint32 = 0x12242184
)

//go:embed farmem.p4info.txtpb
var p4infoText []byte

// P4Info returns farmem.p4's P4Info (a fresh copy each call).
func P4Info() *p4configv1.P4Info {
	info := &p4configv1.P4Info{}
	if err := prototext.Unmarshal(p4infoText, info); err != nil {
		panic("farmem: embedded P4Info does not parse: " + err.Error()) // caught by the tests
	}
	return info
}

// target returns the pipeline's P4Runtime Target, made on first use:
// farmem.p4's P4Info with fwd.p4's objects bound by the forwarding
// pipeline and the far-memory ones here.
func (p *Pipeline) target() *p4rt.Target {
	if p.rt != nil {
		return p.rt
	}
	t, err := p4rt.NewTarget(P4Info())
	if err == nil {
		err = p.base.Declare(t)
	}
	for _, e := range []error{
		t.Table(TableClassify, p.applyClassify),
		t.Counter(CounterClass, p4rt.CounterCells{
			Get: func(i int) (uint64, uint64) { return p.Counters.ClassPackets[i], p.Counters.ClassBytes[i] },
			Set: func(i int, pk, by uint64) { p.Counters.ClassPackets[i], p.Counters.ClassBytes[i] = pk, by },
		}),
		t.Counter(CounterStats, p4rt.PacketCounter(p.Counters.Stats[:])),
	} {
		if err == nil {
			err = e
		}
	}
	if err != nil {
		panic("farmem: " + err.Error()) // the embedded P4Info: caught by the tests
	}
	p.rt = t
	return t
}

// P4Info implements p4rt.Device.
func (p *Pipeline) P4Info() *p4configv1.P4Info { return p.target().P4Info() }

// Write implements p4rt.Device.
func (p *Pipeline) Write(updates []*p4v1.Update) error { return p.target().Write(updates) }

// Read implements p4rt.Device.
func (p *Pipeline) Read(q *p4v1.Entity, yield func(*p4v1.Entity) error) error {
	return p.target().Read(q, yield)
}

// applyClassify installs an entry (or the default) of
// ingress.farmem_classify.
func (p *Pipeline) applyClassify(c *p4rt.Change) error {
	if c.Type == p4v1.Update_DELETE {
		k := classOf(c.Old)
		p.classify[k], p.entries[k] = action{}, false
		return nil
	}
	a := action{}
	if call := c.Entry.Action(); call != nil && call.Name() == ActionSetPriority {
		a = action{set: true, prio: uint8(call.Uint(ParamPrio))}
	}
	if c.Entry.IsDefault {
		p.def = a
		return nil
	}
	if t := c.Entry.Exact(FieldType); t >= NumTypes {
		// A 4-bit type the header never carries: accepted by bmv2, but it
		// could never match; refuse it so a controller's typo shows.
		return status.Errorf(codes.InvalidArgument, "%s: message type %d does not exist (1 read, 2 data, 3 write, 4 ack)", TableClassify, t)
	}
	k := classOf(c.Entry)
	p.classify[k], p.entries[k] = a, true
	return nil
}

func classOf(e *p4rt.Entry) int { return Class(Type(e.Exact(FieldType)), uint8(e.Exact(FieldUrgency))) }

var _ p4rt.Device = (*Pipeline)(nil)
