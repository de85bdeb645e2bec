package p4rt

import (
	"fmt"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Target is a Device assembled from a P4Info and a program's bindings: the
// P4Runtime half of a Go pipeline. The program declares what the P4Info
// cannot say — how each table, counter, register, multicast group and
// digest reaches its data plane — and the Target does the rest, as
// P4Runtime 1.4.1 specifies it:
//
//   - validation of every entity against the P4Info (ids, match kinds and
//     widths, priorities, action scopes, parameters), with the spec's
//     error codes; the byte-string codec of §8.3 (padding accepted, the
//     canonical form read back, OUT_OF_RANGE for over-wide values);
//   - one entry store per table keyed by the canonical match and priority,
//     with INSERT/MODIFY/DELETE existence rules, default entries (§9.1.3),
//     metadata and controller_metadata kept and read back, table sizes;
//   - action profiles and selectors: members, groups (weights, max_size),
//     one-shot action sets (§9.2), resolved into the actions a table's
//     binding sees, and re-resolved when a member or group changes;
//   - indexed counters and registers (§9.3.2, §9.7), multicast groups
//     (§9.5.1), digest configuration (§9.8);
//   - batches: Write attempts every update (CONTINUE_ON_ERROR) and reports
//     each one's status in a *BatchError; Read filters as §9.1.6 and §13.2
//     say.
//
// A Target is not safe for concurrent use; it follows the Device
// concurrency rule of the pipeline that owns it. Its methods never panic
// on a malformed message.
type Target struct {
	info      *p4configv1.P4Info
	tables    map[uint32]*tableInfo
	tableList []*tableInfo
	actions   map[uint32]*actionInfo
	profiles  map[uint32]*profileInfo
	profList  []*profileInfo
	counters  map[uint32]*cellArray
	regs      map[uint32]*cellArray
	cellList  []*cellArray
	digests   map[uint32]*Digest
	names     *Names

	pre        func(*GroupChange) error
	groups     map[uint32]*mcGroup
	digestSink func(id uint32, cfg *p4v1.DigestEntry_Config, data *p4v1.P4Data)
}

// NewTarget indexes info. Every object is unbound until the program binds
// it: writes to an unbound table, counter or register are UNIMPLEMENTED.
func NewTarget(info *p4configv1.P4Info) (*Target, error) {
	names, err := NewNames(info)
	if err != nil {
		return nil, err
	}
	t := &Target{info: info, names: names,
		tables: map[uint32]*tableInfo{}, actions: map[uint32]*actionInfo{}, profiles: map[uint32]*profileInfo{},
		counters: map[uint32]*cellArray{}, regs: map[uint32]*cellArray{}, digests: map[uint32]*Digest{},
		groups: map[uint32]*mcGroup{}}
	for _, a := range info.GetActions() {
		ai := &actionInfo{a: a, params: a.GetParams(), index: map[uint32]int{}, byName: map[string]int{}}
		for i, p := range a.GetParams() {
			if _, dup := ai.index[p.GetId()]; dup {
				return nil, fmt.Errorf("p4info: action %s: two parameters with id %d", a.GetPreamble().GetName(), p.GetId())
			}
			ai.index[p.GetId()], ai.byName[p.GetName()] = i, i
		}
		t.actions[a.GetPreamble().GetId()] = ai
	}
	for _, ap := range info.GetActionProfiles() {
		pi := &profileInfo{p: ap, members: map[uint32]*member{}, groups: map[uint32]*group{}, actions: map[uint32]bool{}}
		t.profiles[ap.GetPreamble().GetId()] = pi
		t.profList = append(t.profList, pi)
	}
	for _, tb := range info.GetTables() {
		ti, err := t.indexTable(tb)
		if err != nil {
			return nil, err
		}
		t.tables[ti.id] = ti
		t.tableList = append(t.tableList, ti)
	}
	for _, c := range info.GetCounters() {
		ca := &cellArray{kind: "counter", id: c.GetPreamble().GetId(), name: c.GetPreamble().GetName(), size: c.GetSize()}
		t.counters[ca.id] = ca
		t.cellList = append(t.cellList, ca)
	}
	for _, r := range info.GetRegisters() {
		ca := &cellArray{kind: "register", id: r.GetPreamble().GetId(), name: r.GetPreamble().GetName(), size: int64(r.GetSize())}
		bs := r.GetTypeSpec().GetBitstring()
		switch {
		case bs.GetBit() != nil:
			ca.width = int(bs.GetBit().GetBitwidth())
		case bs.GetInt() != nil:
			ca.width, ca.signed = int(bs.GetInt().GetBitwidth()), true
		}
		t.regs[ca.id] = ca
		t.cellList = append(t.cellList, ca)
	}
	for _, d := range info.GetDigests() {
		t.digests[d.GetPreamble().GetId()] = &Digest{t: t, id: d.GetPreamble().GetId(), name: d.GetPreamble().GetName()}
	}
	return t, nil
}

func (t *Target) indexTable(tb *p4configv1.Table) (*tableInfo, error) {
	ti := &tableInfo{t: tb, id: tb.GetPreamble().GetId(), name: tb.GetPreamble().GetName(),
		fields: tb.GetMatchFields(), fieldIndex: map[uint32]int{}, actions: map[uint32]p4configv1.ActionRef_Scope{},
		entries: map[string]*Entry{}, directRes: len(tb.GetDirectResourceIds()) > 0}
	for i, f := range tb.GetMatchFields() {
		if _, dup := ti.fieldIndex[f.GetId()]; dup {
			return nil, fmt.Errorf("p4info: table %s: two match fields with id %d", ti.name, f.GetId())
		}
		ti.fieldIndex[f.GetId()] = i
		switch f.GetMatchType() {
		case p4configv1.MatchField_TERNARY, p4configv1.MatchField_RANGE, p4configv1.MatchField_OPTIONAL:
			ti.needsPriority = true
		}
	}
	for _, ref := range tb.GetActionRefs() {
		if t.actions[ref.GetId()] == nil {
			return nil, fmt.Errorf("p4info: table %s refers to action id %#x, which the P4Info does not declare", ti.name, ref.GetId())
		}
		ti.actions[ref.GetId()] = ref.GetScope()
	}
	if id := tb.GetImplementationId(); id != 0 {
		pi := t.profiles[id]
		if pi == nil {
			return nil, fmt.Errorf("p4info: table %s is implemented by %#x, which is not an action profile of the P4Info", ti.name, id)
		}
		ti.profile = pi
		pi.tables = append(pi.tables, ti)
		for aid, scope := range ti.actions {
			if scope != p4configv1.ActionRef_DEFAULT_ONLY {
				pi.actions[aid] = true
			}
		}
	}
	def := tb.GetConstDefaultActionId()
	ti.constDefault = def != 0
	if def == 0 {
		def = tb.GetInitialDefaultAction().GetActionId()
	}
	if def != 0 {
		ai := t.actions[def]
		if ai == nil {
			return nil, fmt.Errorf("p4info: table %s: default action id %#x is not declared", ti.name, def)
		}
		// The arguments are initial_default_action's (p4c fills it for
		// const defaults too); a parameter it omits reads as 0.
		c := &Call{info: ai, args: make([][]byte, len(ai.params))}
		if tb.GetInitialDefaultAction().GetActionId() == def {
			for _, arg := range tb.GetInitialDefaultAction().GetArguments() {
				i, ok := ai.index[arg.GetParamId()]
				if !ok {
					return nil, fmt.Errorf("p4info: table %s: default action argument %d is not a parameter of %s", ti.name, arg.GetParamId(), ai.a.GetPreamble().GetName())
				}
				v, err := CanonicalBits(arg.GetValue(), int(ai.params[i].GetBitwidth()))
				if err != nil {
					return nil, fmt.Errorf("p4info: table %s: default action argument %q: %v", ti.name, ai.params[i].GetName(), status.Convert(err).Message())
				}
				c.args[i] = v
			}
		}
		for i := range c.args {
			if c.args[i] == nil {
				c.args[i] = []byte{0}
			}
		}
		ti.initial = c
	}
	ti.def = ti.defaultEntry(ti.initial)
	return ti, nil
}

// P4Info implements Device. Callers must not modify it.
func (t *Target) P4Info() *p4configv1.P4Info { return t.info }

// Names returns the name index of the target's P4Info.
func (t *Target) Names() *Names { return t.names }

// Change is one change of a table entry, given to the table's binding:
// INSERT (Entry set), MODIFY (Entry and Old) or DELETE (Old). A change of
// the default entry is a MODIFY with Entry.IsDefault. When an action
// profile member or group changes, every entry that uses it is re-bound
// with a MODIFY whose Entry has the new resolved actions.
type Change struct {
	Type       p4v1.Update_Type
	Entry, Old *Entry
}

// Table binds a table to the data plane: apply is called for every change
// of its entries after they are validated, and before the store changes;
// an error rejects the update. On MODIFY, Entry.State starts as
// Old.State. apply must not fail for an entry whose actions the program's
// action checks accepted, except on the default entry.
func (t *Target) Table(name string, apply func(*Change) error) error {
	id, err := t.names.TableID(name)
	if err != nil {
		return err
	}
	t.tables[id].apply = apply
	return nil
}

// Action registers the program's check of an action's arguments (beyond
// their bit widths, which the Target checks): an egress port that exists,
// a pool inside memory. It runs for every table entry, member, one-shot
// action and default action that uses the action. Errors without a gRPC
// code are INVALID_ARGUMENT.
func (t *Target) Action(name string, check func(*Call) error) error {
	id, err := t.names.ActionID(name)
	if err != nil {
		return err
	}
	t.actions[id].check = func(c *Call) error {
		err := check(c)
		if _, ok := status.FromError(err); !ok && err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		return err
	}
	return nil
}

// StoreOnly is a table binding for a table whose entries the Go twin keeps
// for reads only (the data plane learns the same thing elsewhere, such as
// the switch's address from the topology). It refuses default actions
// other than the initial one.
func StoreOnly(c *Change) error { return KeepDefault(c) }

// KeepDefault accepts every change but a change of the default entry to
// another action than the P4Info's initial one, which is UNIMPLEMENTED:
// for tables whose Go twin runs its default action in code.
func KeepDefault(c *Change) error {
	if e := c.Entry; e != nil && e.IsDefault && !e.Action().equal(e.ti.initial) {
		return errf(codes.Unimplemented, "table %s: the Go twin runs its initial default action (%s) only", e.ti.name, callName(e.ti.initial))
	}
	return nil
}

func callName(c *Call) string {
	if c == nil {
		return "none"
	}
	return c.Name()
}

// Unbound lists the tables, counters and registers of the P4Info that the
// program has not bound: a program's tests check it is empty.
func (t *Target) Unbound() []string {
	var out []string
	for _, ti := range t.tableList {
		if ti.apply == nil {
			out = append(out, "table "+ti.name)
		}
	}
	for _, ca := range t.cellList {
		if ca.get == nil {
			out = append(out, ca.kind+" "+ca.name)
		}
	}
	return out
}

// Write implements Device: every update is attempted, in order
// (CONTINUE_ON_ERROR); when some fail, the error is a *BatchError with
// each update's status.
func (t *Target) Write(updates []*p4v1.Update) error {
	var errs []error
	for i, u := range updates {
		if err := t.write(u); err != nil {
			if errs == nil {
				errs = make([]error, len(updates))
			}
			errs[i] = err
		}
	}
	if errs == nil {
		return nil
	}
	return &BatchError{Kind: "update", Errs: errs}
}

func (t *Target) write(u *p4v1.Update) error {
	typ := u.GetType()
	switch typ {
	case p4v1.Update_INSERT, p4v1.Update_MODIFY, p4v1.Update_DELETE:
	default:
		return errf(codes.InvalidArgument, "update type %v: want INSERT, MODIFY or DELETE", typ)
	}
	switch e := u.GetEntity().GetEntity().(type) {
	case *p4v1.Entity_TableEntry:
		return t.writeTable(typ, e.TableEntry)
	case *p4v1.Entity_ActionProfileMember:
		return t.writeMember(typ, e.ActionProfileMember)
	case *p4v1.Entity_ActionProfileGroup:
		return t.writeGroup(typ, e.ActionProfileGroup)
	case *p4v1.Entity_CounterEntry:
		return t.writeCells(typ, t.counters, "counter", e.CounterEntry.GetCounterId(), e.CounterEntry.GetIndex(), func(ca *cellArray) (func(int), error) {
			d := e.CounterEntry.GetData()
			if d == nil {
				return nil, nil // §9.3.2: the value is not modified
			}
			return func(i int) { ca.setCounter(i, d) }, nil
		})
	case *p4v1.Entity_RegisterEntry:
		return t.writeRegister(typ, e.RegisterEntry)
	case *p4v1.Entity_PacketReplicationEngineEntry:
		return t.writePRE(typ, e.PacketReplicationEngineEntry)
	case *p4v1.Entity_DigestEntry:
		return t.writeDigest(typ, e.DigestEntry)
	case nil:
		return errf(codes.InvalidArgument, "update without an entity")
	default:
		return errf(codes.Unimplemented, "%s entities are not supported", entityKind(u.GetEntity()))
	}
}

// Read implements Device: it yields every entity the query selects, as
// §9–§13 define the wildcards. A query for an entity kind the program has
// none of yields nothing.
func (t *Target) Read(q *p4v1.Entity, yield func(*p4v1.Entity) error) error {
	switch e := q.GetEntity().(type) {
	case *p4v1.Entity_TableEntry:
		return t.readTable(e.TableEntry, yield)
	case *p4v1.Entity_ActionProfileMember:
		return t.readMembers(e.ActionProfileMember, yield)
	case *p4v1.Entity_ActionProfileGroup:
		return t.readGroups(e.ActionProfileGroup, yield)
	case *p4v1.Entity_CounterEntry:
		return t.readCells(t.counters, "counter", e.CounterEntry.GetCounterId(), e.CounterEntry.GetIndex(), func(ca *cellArray, i int) *p4v1.Entity {
			return &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{
				CounterId: ca.id, Index: &p4v1.Index{Index: int64(i)}, Data: ca.counter(i)}}}
		}, yield)
	case *p4v1.Entity_RegisterEntry:
		return t.readCells(t.regs, "register", e.RegisterEntry.GetRegisterId(), e.RegisterEntry.GetIndex(), func(ca *cellArray, i int) *p4v1.Entity {
			return Register(&p4v1.RegisterEntry{RegisterId: ca.id, Index: &p4v1.Index{Index: int64(i)}, Data: ca.register(i)})
		}, yield)
	case *p4v1.Entity_PacketReplicationEngineEntry:
		return t.readPRE(e.PacketReplicationEngineEntry, yield)
	case *p4v1.Entity_DigestEntry:
		return t.readDigests(e.DigestEntry, yield)
	case *p4v1.Entity_ExternEntry, *p4v1.Entity_MeterEntry, *p4v1.Entity_DirectCounterEntry,
		*p4v1.Entity_DirectMeterEntry, *p4v1.Entity_ValueSetEntry:
		return t.readNone(q)
	case nil:
		return errf(codes.InvalidArgument, "read query without an entity (P4Runtime reads need the entity kind set)")
	default:
		return errf(codes.Unimplemented, "%s entities are not supported", entityKind(q))
	}
}

// readNone answers a query for an entity kind no tracebed program has:
// a wildcard gives nothing, a specific id is not found.
func (t *Target) readNone(q *p4v1.Entity) error {
	var id uint32
	switch e := q.GetEntity().(type) {
	case *p4v1.Entity_ExternEntry:
		id = e.ExternEntry.GetExternTypeId()
	case *p4v1.Entity_MeterEntry:
		id = e.MeterEntry.GetMeterId()
	case *p4v1.Entity_DirectCounterEntry:
		id = e.DirectCounterEntry.GetTableEntry().GetTableId()
	case *p4v1.Entity_DirectMeterEntry:
		id = e.DirectMeterEntry.GetTableEntry().GetTableId()
	case *p4v1.Entity_ValueSetEntry:
		id = e.ValueSetEntry.GetValueSetId()
	}
	if id != 0 {
		return errf(codes.NotFound, "no %s with id %#x", entityKind(q), id)
	}
	return nil
}

func entityKind(e *p4v1.Entity) string {
	switch e.GetEntity().(type) {
	case *p4v1.Entity_ExternEntry:
		return "extern"
	case *p4v1.Entity_TableEntry:
		return "table"
	case *p4v1.Entity_ActionProfileMember:
		return "action profile member"
	case *p4v1.Entity_ActionProfileGroup:
		return "action profile group"
	case *p4v1.Entity_MeterEntry:
		return "meter"
	case *p4v1.Entity_DirectMeterEntry:
		return "direct meter"
	case *p4v1.Entity_CounterEntry:
		return "counter"
	case *p4v1.Entity_DirectCounterEntry:
		return "direct counter"
	case *p4v1.Entity_PacketReplicationEngineEntry:
		return "packet replication engine"
	case *p4v1.Entity_ValueSetEntry:
		return "value set"
	case *p4v1.Entity_RegisterEntry:
		return "register"
	case *p4v1.Entity_DigestEntry:
		return "digest"
	}
	return "unknown"
}

var _ Device = (*Target)(nil)
