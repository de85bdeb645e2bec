package p4rt

import (
	"context"
	"fmt"
	"strings"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Names indexes a P4Info by name, so that controllers never hard-code ids:
// the ids p4c assigns to a program differ from those of its Go twin, and
// both are looked up the same way.
//
// Every lookup accepts an object's fully qualified name ("InaIngress.jobs")
// or its alias ("jobs") when the alias is unique. Values are plain unsigned
// integers checked against the bit width the P4Info declares and encoded in
// P4Runtime's canonical binary form (big-endian, no leading zero bytes).
type Names struct {
	info      *p4configv1.P4Info
	tables    map[string]*p4configv1.Table
	actions   map[string]*p4configv1.Action
	counters  map[string]*p4configv1.Counter
	registers map[string]*p4configv1.Register
}

// NewNames indexes info. It fails when two objects of one kind share a name.
func NewNames(info *p4configv1.P4Info) (*Names, error) {
	if info == nil {
		return nil, fmt.Errorf("p4info: nil")
	}
	n := &Names{
		info:      info,
		tables:    map[string]*p4configv1.Table{},
		actions:   map[string]*p4configv1.Action{},
		counters:  map[string]*p4configv1.Counter{},
		registers: map[string]*p4configv1.Register{},
	}
	for _, t := range info.GetTables() {
		if err := index(n.tables, "table", t.GetPreamble(), t); err != nil {
			return nil, err
		}
	}
	for _, a := range info.GetActions() {
		if err := index(n.actions, "action", a.GetPreamble(), a); err != nil {
			return nil, err
		}
	}
	for _, c := range info.GetCounters() {
		if err := index(n.counters, "counter", c.GetPreamble(), c); err != nil {
			return nil, err
		}
	}
	for _, r := range info.GetRegisters() {
		if err := index(n.registers, "register", r.GetPreamble(), r); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// ambiguous marks an alias shared by several objects of one kind.
func index[T any](m map[string]*T, kind string, p *p4configv1.Preamble, v *T) error {
	name := p.GetName()
	if name == "" {
		return fmt.Errorf("p4info: %s with id %#x has no name", kind, p.GetId())
	}
	if old, dup := m[name]; dup && old != nil {
		return fmt.Errorf("p4info: two %ss named %q", kind, name)
	}
	m[name] = v
	alias := p.GetAlias()
	if alias == "" {
		if i := strings.LastIndexByte(name, '.'); i >= 0 {
			alias = name[i+1:]
		}
	}
	if alias != "" && alias != name {
		if _, taken := m[alias]; taken {
			m[alias] = nil // ambiguous: only the full name works
		} else {
			m[alias] = v
		}
	}
	return nil
}

func lookup[T any](m map[string]*T, kind, name string) (*T, error) {
	v, ok := m[name]
	if !ok {
		return nil, fmt.Errorf("p4info has no %s named %q", kind, name)
	}
	if v == nil {
		return nil, fmt.Errorf("p4info: %s name %q is ambiguous; use the fully qualified name", kind, name)
	}
	return v, nil
}

// P4Info returns the indexed P4Info.
func (n *Names) P4Info() *p4configv1.P4Info { return n.info }

// Table returns the named table.
func (n *Names) Table(name string) (*p4configv1.Table, error) {
	return lookup(n.tables, "table", name)
}

// Action returns the named action.
func (n *Names) Action(name string) (*p4configv1.Action, error) {
	return lookup(n.actions, "action", name)
}

// Counter returns the named counter array.
func (n *Names) Counter(name string) (*p4configv1.Counter, error) {
	return lookup(n.counters, "counter", name)
}

// Register returns the named register array.
func (n *Names) Register(name string) (*p4configv1.Register, error) {
	return lookup(n.registers, "register", name)
}

// TableID returns the id of the named table.
func (n *Names) TableID(name string) (uint32, error) {
	t, err := n.Table(name)
	if err != nil {
		return 0, err
	}
	return t.GetPreamble().GetId(), nil
}

// ActionID returns the id of the named action.
func (n *Names) ActionID(name string) (uint32, error) {
	a, err := n.Action(name)
	if err != nil {
		return 0, err
	}
	return a.GetPreamble().GetId(), nil
}

// CounterID returns the id of the named counter array.
func (n *Names) CounterID(name string) (uint32, error) {
	c, err := n.Counter(name)
	if err != nil {
		return 0, err
	}
	return c.GetPreamble().GetId(), nil
}

// RegisterID returns the id of the named register array.
func (n *Names) RegisterID(name string) (uint32, error) {
	r, err := n.Register(name)
	if err != nil {
		return 0, err
	}
	return r.GetPreamble().GetId(), nil
}

// MatchField returns the named match field of a table.
func (n *Names) MatchField(table, field string) (*p4configv1.MatchField, error) {
	t, err := n.Table(table)
	if err != nil {
		return nil, err
	}
	for _, mf := range t.GetMatchFields() {
		if mf.GetName() == field {
			return mf, nil
		}
	}
	return nil, fmt.Errorf("table %q has no match field %q", table, field)
}

// MatchFieldID returns the id of the named match field of a table.
func (n *Names) MatchFieldID(table, field string) (uint32, error) {
	mf, err := n.MatchField(table, field)
	if err != nil {
		return 0, err
	}
	return mf.GetId(), nil
}

// Param returns the named parameter of an action.
func (n *Names) Param(action, param string) (*p4configv1.Action_Param, error) {
	a, err := n.Action(action)
	if err != nil {
		return nil, err
	}
	for _, p := range a.GetParams() {
		if p.GetName() == param {
			return p, nil
		}
	}
	return nil, fmt.Errorf("action %q has no parameter %q", action, param)
}

// ParamID returns the id of the named parameter of an action.
func (n *Names) ParamID(action, param string) (uint32, error) {
	p, err := n.Param(action, param)
	if err != nil {
		return 0, err
	}
	return p.GetId(), nil
}

// Match is one field of a table entry's key, built by Exact, LPM, Range or
// Ternary.
type Match struct {
	Field      string
	kind       p4configv1.MatchField_MatchType
	value, alt uint64 // exact/lpm/ternary value or range low; range high or ternary mask
	prefix     int32
}

// Exact matches field == v.
func Exact(field string, v uint64) Match {
	return Match{Field: field, kind: p4configv1.MatchField_EXACT, value: v}
}

// LPM matches the top prefixLen bits of field against v.
func LPM(field string, v uint64, prefixLen int32) Match {
	return Match{Field: field, kind: p4configv1.MatchField_LPM, value: v, prefix: prefixLen}
}

// Range matches lo <= field <= hi.
func Range(field string, lo, hi uint64) Match {
	return Match{Field: field, kind: p4configv1.MatchField_RANGE, value: lo, alt: hi}
}

// Ternary matches field & mask == v & mask.
func Ternary(field string, v, mask uint64) Match {
	return Match{Field: field, kind: p4configv1.MatchField_TERNARY, value: v, alt: mask}
}

// Arg is one action parameter value.
type Arg struct {
	Param string
	Value uint64
}

// P is shorthand for an Arg.
func P(param string, v uint64) Arg { return Arg{param, v} }

// TableEntry builds an entry of the named table that runs the named action
// with args. Every match field named must exist and have the declared match
// kind; every action parameter must be given exactly once; every value must
// fit its bit width. A field that matches everything (a range of every
// value, a ternary mask of 0, an LPM prefix of 0) is omitted, the
// canonical "don't care" of P4Runtime. Priority must be positive for tables with range,
// ternary or optional fields and zero otherwise, as P4Runtime requires.
func (n *Names) TableEntry(table string, matches []Match, action string, args []Arg, priority int32) (*p4v1.TableEntry, error) {
	t, err := n.Table(table)
	if err != nil {
		return nil, err
	}
	te := &p4v1.TableEntry{TableId: t.GetPreamble().GetId(), Priority: priority}
	needsPriority := false
	for _, mf := range t.GetMatchFields() {
		switch mf.GetMatchType() {
		case p4configv1.MatchField_RANGE, p4configv1.MatchField_TERNARY, p4configv1.MatchField_OPTIONAL:
			needsPriority = true
		}
	}
	if needsPriority && priority <= 0 {
		return nil, fmt.Errorf("table %q: entries need a positive priority", table)
	}
	if !needsPriority && priority != 0 {
		return nil, fmt.Errorf("table %q: priority %d given for a table without ternary or range fields", table, priority)
	}
	seen := map[string]bool{}
	for _, m := range matches {
		if seen[m.Field] {
			return nil, fmt.Errorf("table %q: match field %q given twice", table, m.Field)
		}
		seen[m.Field] = true
		mf, err := n.MatchField(table, m.Field)
		if err != nil {
			return nil, err
		}
		if mf.GetMatchType() != m.kind {
			return nil, fmt.Errorf("table %q: field %q is %v, not %v", table, m.Field, mf.GetMatchType(), m.kind)
		}
		w := int(mf.GetBitwidth())
		fm := &p4v1.FieldMatch{FieldId: mf.GetId()}
		switch m.kind {
		case p4configv1.MatchField_EXACT:
			v, err := encode(m.value, w, table, m.Field)
			if err != nil {
				return nil, err
			}
			fm.FieldMatchType = &p4v1.FieldMatch_Exact_{Exact: &p4v1.FieldMatch_Exact{Value: v}}
		case p4configv1.MatchField_LPM:
			if m.prefix < 0 || int(m.prefix) > w {
				return nil, fmt.Errorf("table %q: field %q: prefix length %d outside 0..%d", table, m.Field, m.prefix, w)
			}
			if m.prefix == 0 {
				continue // don't care: P4Runtime omits the field (§9.1.1)
			}
			v, err := encode(m.value, w, table, m.Field)
			if err != nil {
				return nil, err
			}
			if w <= 64 {
				v = EncodeUint(m.value &^ (1<<uint(w-int(m.prefix)) - 1)) // bits past the prefix are 0
			}
			fm.FieldMatchType = &p4v1.FieldMatch_Lpm{Lpm: &p4v1.FieldMatch_LPM{Value: v, PrefixLen: m.prefix}}
		case p4configv1.MatchField_RANGE:
			if m.value > m.alt {
				return nil, fmt.Errorf("table %q: field %q: range low %d above high %d", table, m.Field, m.value, m.alt)
			}
			lo, err := encode(m.value, w, table, m.Field)
			if err != nil {
				return nil, err
			}
			hi, err := encode(m.alt, w, table, m.Field)
			if err != nil {
				return nil, err
			}
			if m.value == 0 && w <= 64 && m.alt == ^uint64(0)>>(64-w) {
				continue // every value: P4Runtime omits the field (§9.1.1)
			}
			fm.FieldMatchType = &p4v1.FieldMatch_Range_{Range: &p4v1.FieldMatch_Range{Low: lo, High: hi}}
		case p4configv1.MatchField_TERNARY:
			v, err := encode(m.value&m.alt, w, table, m.Field)
			if err != nil {
				return nil, err
			}
			mask, err := encode(m.alt, w, table, m.Field)
			if err != nil {
				return nil, err
			}
			if m.alt == 0 {
				continue // don't care: P4Runtime omits the field (§9.1.1)
			}
			fm.FieldMatchType = &p4v1.FieldMatch_Ternary_{Ternary: &p4v1.FieldMatch_Ternary{Value: v, Mask: mask}}
		default:
			return nil, fmt.Errorf("table %q: field %q: match kind %v not supported", table, m.Field, m.kind)
		}
		te.Match = append(te.Match, fm)
	}
	for _, mf := range t.GetMatchFields() {
		if !seen[mf.GetName()] && mf.GetMatchType() == p4configv1.MatchField_EXACT {
			return nil, fmt.Errorf("table %q: exact match field %q missing", table, mf.GetName())
		}
	}
	act, err := n.Action(action)
	if err != nil {
		return nil, err
	}
	allowed := false
	for _, ref := range t.GetActionRefs() {
		if ref.GetId() == act.GetPreamble().GetId() && ref.GetScope() != p4configv1.ActionRef_DEFAULT_ONLY {
			allowed = true
		}
	}
	if !allowed {
		return nil, fmt.Errorf("table %q cannot run action %q", table, action)
	}
	a := &p4v1.Action{ActionId: act.GetPreamble().GetId()}
	given := map[string]bool{}
	for _, arg := range args {
		if given[arg.Param] {
			return nil, fmt.Errorf("action %q: parameter %q given twice", action, arg.Param)
		}
		given[arg.Param] = true
		p, err := n.Param(action, arg.Param)
		if err != nil {
			return nil, err
		}
		v, err := encode(arg.Value, int(p.GetBitwidth()), action, arg.Param)
		if err != nil {
			return nil, err
		}
		a.Params = append(a.Params, &p4v1.Action_Param{ParamId: p.GetId(), Value: v})
	}
	for _, p := range act.GetParams() {
		if !given[p.GetName()] {
			return nil, fmt.Errorf("action %q: parameter %q missing", action, p.GetName())
		}
	}
	te.Action = &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: a}}
	return te, nil
}

// TableQuery returns a wildcard read of every entry of the named table.
func (n *Names) TableQuery(table string) (*p4v1.Entity, error) {
	id, err := n.TableID(table)
	if err != nil {
		return nil, err
	}
	return &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{TableId: id}}}, nil
}

// RegisterEntry builds a write of value into the named register at index; a
// negative index writes every index (P4Runtime's wildcard register write).
func (n *Names) RegisterEntry(register string, index int64, value uint64) (*p4v1.RegisterEntry, error) {
	r, err := n.Register(register)
	if err != nil {
		return nil, err
	}
	if index >= int64(r.GetSize()) {
		return nil, fmt.Errorf("register %q: index %d outside 0..%d", register, index, r.GetSize()-1)
	}
	v, err := encode(value, RegisterWidth(r), register, "value")
	if err != nil {
		return nil, err
	}
	re := &p4v1.RegisterEntry{RegisterId: r.GetPreamble().GetId(), Data: &p4v1.P4Data{Data: &p4v1.P4Data_Bitstring{Bitstring: v}}}
	if index >= 0 {
		re.Index = &p4v1.Index{Index: index}
	}
	return re, nil
}

// RegisterQuery returns a read of the named register at index, or of every
// index when index is negative.
func (n *Names) RegisterQuery(register string, index int64) (*p4v1.Entity, error) {
	r, err := n.Register(register)
	if err != nil {
		return nil, err
	}
	if index >= int64(r.GetSize()) {
		return nil, fmt.Errorf("register %q: index %d outside 0..%d", register, index, r.GetSize()-1)
	}
	re := &p4v1.RegisterEntry{RegisterId: r.GetPreamble().GetId()}
	if index >= 0 {
		re.Index = &p4v1.Index{Index: index}
	}
	return &p4v1.Entity{Entity: &p4v1.Entity_RegisterEntry{RegisterEntry: re}}, nil
}

// CounterQuery returns a read of the named counter at index, or of every
// index when index is negative.
func (n *Names) CounterQuery(counter string, index int64) (*p4v1.Entity, error) {
	c, err := n.Counter(counter)
	if err != nil {
		return nil, err
	}
	if index >= c.GetSize() {
		return nil, fmt.Errorf("counter %q: index %d outside 0..%d", counter, index, c.GetSize()-1)
	}
	ce := &p4v1.CounterEntry{CounterId: c.GetPreamble().GetId()}
	if index >= 0 {
		ce.Index = &p4v1.Index{Index: index}
	}
	return &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: ce}}, nil
}

// RegisterWidth returns the bit width of a register's cells (0 when the
// type is not a bit<W> or int<W>).
func RegisterWidth(r *p4configv1.Register) int {
	bs := r.GetTypeSpec().GetBitstring()
	switch {
	case bs.GetBit() != nil:
		return int(bs.GetBit().GetBitwidth())
	case bs.GetInt() != nil:
		return int(bs.GetInt().GetBitwidth())
	}
	return 0
}

// Replica is one copy of a multicast group: an egress port and an instance
// number (egress_rid in v1model) that tells copies on one port apart.
type Replica struct {
	Port     uint32
	Instance uint32
}

// MulticastGroup builds the entity of a multicast group.
func MulticastGroup(group uint32, replicas []Replica) *p4v1.Entity {
	g := &p4v1.MulticastGroupEntry{MulticastGroupId: group}
	for _, r := range replicas {
		g.Replicas = append(g.Replicas, &p4v1.Replica{
			PortKind: &p4v1.Replica_Port{Port: EncodeUint(uint64(r.Port))},
			Instance: r.Instance,
		})
	}
	return &p4v1.Entity{Entity: &p4v1.Entity_PacketReplicationEngineEntry{
		PacketReplicationEngineEntry: &p4v1.PacketReplicationEngineEntry{
			Type: &p4v1.PacketReplicationEngineEntry_MulticastGroupEntry{MulticastGroupEntry: g},
		},
	}}
}

// ReplicaPort returns a replica's egress port from either of P4Runtime's
// encodings (the deprecated uint32 field or the bytes field of v1.4): a
// replica without a port is INVALID_ARGUMENT, a port wider than 32 bits
// OUT_OF_RANGE.
func ReplicaPort(r *p4v1.Replica) (uint32, error) {
	switch k := r.GetPortKind().(type) {
	case *p4v1.Replica_EgressPort:
		return k.EgressPort, nil
	case *p4v1.Replica_Port:
		v, err := DecodeUint(k.Port, 32)
		if err != nil {
			return 0, prefix(err, "replica port")
		}
		return uint32(v), nil
	}
	return 0, status.Error(codes.InvalidArgument, "replica has no port")
}

// Table wraps a table entry as an entity.
func Table(te *p4v1.TableEntry) *p4v1.Entity {
	return &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: te}}
}

// Register wraps a register entry as an entity.
func Register(re *p4v1.RegisterEntry) *p4v1.Entity {
	return &p4v1.Entity{Entity: &p4v1.Entity_RegisterEntry{RegisterEntry: re}}
}

// Insert, Modify and Delete wrap an entity in an update.
func Insert(e *p4v1.Entity) *p4v1.Update { return &p4v1.Update{Type: p4v1.Update_INSERT, Entity: e} }

// Modify wraps an entity in a MODIFY update.
func Modify(e *p4v1.Entity) *p4v1.Update { return &p4v1.Update{Type: p4v1.Update_MODIFY, Entity: e} }

// Delete wraps an entity in a DELETE update.
func Delete(e *p4v1.Entity) *p4v1.Update { return &p4v1.Update{Type: p4v1.Update_DELETE, Entity: e} }

func encode(v uint64, width int, owner, field string) ([]byte, error) {
	if err := fitUint(v, width); err != nil {
		return nil, fmt.Errorf("%s: %s: %v", owner, field, err)
	}
	return EncodeUint(v), nil
}

// CounterPackets reads every cell of counter (one wildcard read) and
// returns the packet count of each, by index.
func CounterPackets(ctx context.Context, c Client, n *Names, counter string) (map[int64]uint64, error) {
	q, err := n.CounterQuery(counter, -1)
	if err != nil {
		return nil, err
	}
	ents, err := c.Read(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", counter, err)
	}
	cells := make(map[int64]uint64, len(ents))
	for _, e := range ents {
		ce := e.GetCounterEntry()
		cells[ce.GetIndex().GetIndex()] += uint64(ce.GetData().GetPacketCount())
	}
	return cells, nil
}
