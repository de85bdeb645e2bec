package farmem

import (
	_ "embed"
	"fmt"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/tracebed/tracebed/emulator/p4rt"
)

// ProgramName is the program's name: its P4Info's pkg_info.name, and its
// name in the registry of data planes (p4/programs) that switches and
// testbeds load.
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
	idClassify     uint32 = 0x02000010
	idSetPriority  uint32 = 0x01000010
	idNoAction     uint32 = 21257015 // p4c's id of core.p4's NoAction
	idCounterClass uint32 = 0x12000010
	idCounterStats uint32 = 0x12000011
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

// P4Info implements p4rt.Device.
func (p *Pipeline) P4Info() *p4configv1.P4Info { return P4Info() }

// baseDevice returns the forwarding pipeline as a P4Runtime device, if it is
// one: the forwarding objects of farmem.p4 are fwd.p4's and go to it.
func (p *Pipeline) baseDevice() p4rt.Device {
	if d, ok := any(p.base).(p4rt.Device); ok {
		return d
	}
	return nil
}

// Write implements p4rt.Device: entries of ingress.farmem_classify (and its
// default action) and resets of the farmem counters; forwarding objects go
// to the base pipeline when it is a P4Runtime device.
func (p *Pipeline) Write(updates []*p4v1.Update) error {
	for i, u := range updates {
		if err := p.write(u); err != nil {
			st := status.Convert(err)
			return status.Errorf(st.Code(), "update %d: %s", i, st.Message())
		}
	}
	return nil
}

func (p *Pipeline) write(u *p4v1.Update) error {
	if u == nil || u.Entity == nil {
		return status.Error(codes.InvalidArgument, "update without an entity")
	}
	switch e := u.Entity.Entity.(type) {
	case *p4v1.Entity_TableEntry:
		if e.TableEntry.GetTableId() == idClassify {
			return p.writeClassify(u.Type, e.TableEntry)
		}
	case *p4v1.Entity_CounterEntry:
		switch e.CounterEntry.GetCounterId() {
		case idCounterClass, idCounterStats:
			return p.writeCounter(u.Type, e.CounterEntry)
		}
	}
	if d := p.baseDevice(); d != nil {
		return d.Write([]*p4v1.Update{u})
	}
	return status.Errorf(codes.Unimplemented, "farmem: %s is not implemented by the Go twin (its routes come from the topology)", describe(u.Entity))
}

func describe(e *p4v1.Entity) string {
	switch x := e.Entity.(type) {
	case *p4v1.Entity_TableEntry:
		return fmt.Sprintf("table %#x", x.TableEntry.GetTableId())
	case *p4v1.Entity_CounterEntry:
		return fmt.Sprintf("counter %#x", x.CounterEntry.GetCounterId())
	case nil:
		return "an empty entity"
	}
	return fmt.Sprintf("entity %T", e.Entity)
}

// classKey decodes the match of a classify entry.
func classKey(te *p4v1.TableEntry) (int, error) {
	if te.Priority != 0 {
		return 0, status.Errorf(codes.InvalidArgument, "%s has only exact keys: priority must be 0, got %d", TableClassify, te.Priority)
	}
	var typ, urg uint64
	var seen [3]bool
	for _, m := range te.Match {
		ex := m.GetExact()
		if ex == nil {
			return 0, status.Errorf(codes.InvalidArgument, "%s: field %d must be an exact match", TableClassify, m.GetFieldId())
		}
		switch id := m.GetFieldId(); id {
		case 1, 2:
			if seen[id] {
				return 0, status.Errorf(codes.InvalidArgument, "%s: field %d given twice", TableClassify, id)
			}
			seen[id] = true
			width := 4
			if id == 2 {
				width = 3
			}
			v, err := decodeUint(ex.Value, width)
			if err != nil {
				return 0, status.Errorf(codes.InvalidArgument, "%s: field %d: %v", TableClassify, id, err)
			}
			if id == 1 {
				typ = v
			} else {
				urg = v
			}
		default:
			return 0, status.Errorf(codes.InvalidArgument, "%s has no match field %d (1 type, 2 urgency)", TableClassify, id)
		}
	}
	if !seen[1] || !seen[2] {
		return 0, status.Errorf(codes.InvalidArgument, "%s: an entry needs both exact fields (type and urgency)", TableClassify)
	}
	if typ >= NumTypes {
		// A 4-bit type the header never carries: accepted by bmv2, but it
		// could never match; refuse it so a controller's typo shows.
		return 0, status.Errorf(codes.InvalidArgument, "%s: message type %d does not exist (1 read, 2 data, 3 write, 4 ack)", TableClassify, typ)
	}
	return Class(Type(typ), uint8(urg)), nil
}

// classAction decodes the action of a classify entry.
func classAction(ta *p4v1.TableAction) (action, error) {
	a := ta.GetAction()
	if a == nil {
		return action{}, status.Errorf(codes.InvalidArgument, "%s takes a direct action (set_priority or NoAction)", TableClassify)
	}
	switch a.ActionId {
	case idNoAction:
		if len(a.Params) != 0 {
			return action{}, status.Error(codes.InvalidArgument, "NoAction takes no parameters")
		}
		return action{}, nil
	case idSetPriority:
		if len(a.Params) != 1 || a.Params[0].GetParamId() != 1 {
			return action{}, status.Errorf(codes.InvalidArgument, "%s takes one parameter, %s (id 1)", ActionSetPriority, ParamPrio)
		}
		v, err := decodeUint(a.Params[0].Value, 3)
		if err != nil {
			return action{}, status.Errorf(codes.InvalidArgument, "%s.%s: %v", ActionSetPriority, ParamPrio, err)
		}
		return action{set: true, prio: uint8(v)}, nil
	}
	return action{}, status.Errorf(codes.InvalidArgument, "action %#x is not an action of %s", a.ActionId, TableClassify)
}

func (p *Pipeline) writeClassify(t p4v1.Update_Type, te *p4v1.TableEntry) error {
	if te.IsDefaultAction {
		if t != p4v1.Update_MODIFY {
			return status.Errorf(codes.InvalidArgument, "the default entry of %s can only be modified", TableClassify)
		}
		if len(te.Match) != 0 {
			return status.Error(codes.InvalidArgument, "a default entry has no match fields")
		}
		if te.Action == nil {
			p.def = action{} // reset to the initial default, NoAction
			return nil
		}
		a, err := classAction(te.Action)
		if err != nil {
			return err
		}
		p.def = a
		return nil
	}
	c, err := classKey(te)
	if err != nil {
		return err
	}
	switch t {
	case p4v1.Update_INSERT, p4v1.Update_MODIFY, p4v1.Update_DELETE:
	default:
		return status.Errorf(codes.InvalidArgument, "unknown update type %v", t)
	}
	if err := p4rt.CheckExistence(t, p.entries[c], fmt.Sprintf("%s entry for type %d urgency %d", TableClassify, c>>3, c&7)); err != nil {
		return err
	}
	if t == p4v1.Update_DELETE {
		p.classify[c], p.entries[c] = action{}, false
		return nil
	}
	a, err := classAction(te.Action)
	if err != nil {
		return err
	}
	p.classify[c], p.entries[c] = a, true
	return nil
}

func (p *Pipeline) writeCounter(t p4v1.Update_Type, ce *p4v1.CounterEntry) error {
	if t != p4v1.Update_MODIFY {
		return status.Error(codes.InvalidArgument, "counters can only be modified")
	}
	pk, by := ce.GetData().GetPacketCount(), ce.GetData().GetByteCount()
	set := func(i int) {
		if ce.CounterId == idCounterClass {
			p.Counters.ClassPackets[i], p.Counters.ClassBytes[i] = uint64(pk), uint64(by)
		} else {
			p.Counters.Stats[i] = uint64(pk)
		}
	}
	size := counterSize(ce.CounterId)
	if ce.Index == nil {
		for i := range size {
			set(i)
		}
		return nil
	}
	i := ce.Index.Index
	if i < 0 || i >= int64(size) {
		return status.Errorf(codes.InvalidArgument, "counter index %d out of range [0, %d)", i, size)
	}
	set(int(i))
	return nil
}

func counterSize(id uint32) int {
	if id == idCounterClass {
		return NumClasses
	}
	return NumStats
}

// Read implements p4rt.Device.
func (p *Pipeline) Read(q *p4v1.Entity, yield func(*p4v1.Entity) error) error {
	if q == nil {
		return status.Error(codes.InvalidArgument, "empty read query")
	}
	switch e := q.Entity.(type) {
	case *p4v1.Entity_TableEntry:
		id := e.TableEntry.GetTableId()
		if id == idClassify || id == 0 {
			if err := p.readClassify(e.TableEntry, yield); err != nil {
				return err
			}
			if id == idClassify {
				return nil
			}
		}
	case *p4v1.Entity_CounterEntry:
		id := e.CounterEntry.GetCounterId()
		for _, c := range []uint32{idCounterClass, idCounterStats} {
			if id == c || id == 0 {
				if err := p.readCounter(c, e.CounterEntry.Index, yield); err != nil {
					return err
				}
			}
		}
		if id == idCounterClass || id == idCounterStats {
			return nil
		}
	}
	if d := p.baseDevice(); d != nil {
		return d.Read(q, yield)
	}
	switch e := q.Entity.(type) {
	case *p4v1.Entity_TableEntry:
		if e.TableEntry.GetTableId() == 0 {
			return nil
		}
	case *p4v1.Entity_CounterEntry:
		if e.CounterEntry.GetCounterId() == 0 {
			return nil
		}
	}
	return status.Errorf(codes.Unimplemented, "farmem: reading %s is not implemented by the Go twin", describe(q))
}

func (p *Pipeline) readClassify(q *p4v1.TableEntry, yield func(*p4v1.Entity) error) error {
	if q.IsDefaultAction {
		return yield(p4rt.Table(&p4v1.TableEntry{TableId: idClassify, IsDefaultAction: true, Action: actionOf(p.def)}))
	}
	want := -1
	if len(q.Match) > 0 {
		c, err := classKey(q)
		if err != nil {
			return err
		}
		want = c
	}
	for c := range NumClasses {
		if !p.entries[c] || (want >= 0 && c != want) {
			continue
		}
		te := &p4v1.TableEntry{
			TableId: idClassify,
			Match: []*p4v1.FieldMatch{
				{FieldId: 1, FieldMatchType: &p4v1.FieldMatch_Exact_{Exact: &p4v1.FieldMatch_Exact{Value: p4rt.EncodeUint(uint64(c >> 3))}}},
				{FieldId: 2, FieldMatchType: &p4v1.FieldMatch_Exact_{Exact: &p4v1.FieldMatch_Exact{Value: p4rt.EncodeUint(uint64(c & 7))}}},
			},
			Action: actionOf(p.classify[c]),
		}
		if err := yield(p4rt.Table(te)); err != nil {
			return err
		}
	}
	return nil
}

func actionOf(a action) *p4v1.TableAction {
	act := &p4v1.Action{ActionId: idNoAction}
	if a.set {
		act = &p4v1.Action{ActionId: idSetPriority, Params: []*p4v1.Action_Param{{ParamId: 1, Value: p4rt.EncodeUint(uint64(a.prio))}}}
	}
	return &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: act}}
}

func (p *Pipeline) readCounter(id uint32, index *p4v1.Index, yield func(*p4v1.Entity) error) error {
	size := counterSize(id)
	lo, hi := 0, size
	if index != nil {
		if index.Index < 0 || index.Index >= int64(size) {
			return status.Errorf(codes.InvalidArgument, "counter index %d out of range [0, %d)", index.Index, size)
		}
		lo, hi = int(index.Index), int(index.Index)+1
	}
	for i := lo; i < hi; i++ {
		d := &p4v1.CounterData{}
		if id == idCounterClass {
			d.PacketCount, d.ByteCount = int64(p.Counters.ClassPackets[i]), int64(p.Counters.ClassBytes[i])
		} else {
			d.PacketCount = int64(p.Counters.Stats[i])
		}
		e := &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{
			CounterId: id, Index: &p4v1.Index{Index: int64(i)}, Data: d,
		}}}
		if err := yield(e); err != nil {
			return err
		}
	}
	return nil
}

// decodeUint decodes a P4Runtime bytestring of at most width bits.
func decodeUint(b []byte, width int) (uint64, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("empty value")
	}
	if len(b) > 8 {
		return 0, fmt.Errorf("%d-byte value for a %d-bit field", len(b), width)
	}
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	if width < 64 && v>>width != 0 {
		return 0, fmt.Errorf("value %d does not fit %d bits", v, width)
	}
	return v, nil
}

var _ p4rt.Device = (*Pipeline)(nil)
