package p4rt

import (
	"bytes"
	"slices"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// Entry is a validated table entry as a Target stores it.
type Entry struct {
	// Fields is the match key in P4Info field order; empty for the
	// default entry.
	Fields   []FieldValue
	Priority int32
	// IsDefault marks the table's default entry.
	IsDefault bool
	// Actions are the entry's actions: one with weight 1 for a direct
	// table or a member; a group's members or a one-shot set's actions with
	// their weights (empty for an empty group).
	Actions []WeightedCall
	// State is the program's own, kept with the entry (for example the
	// data-plane object the entry installed).
	State any

	ti  *tableInfo
	msg *p4v1.TableEntry // canonical, as read back
	key string
	seq uint64
	ref actionRef
}

// WeightedCall is one action of an entry with its weight.
type WeightedCall struct {
	*Call
	Weight int32
}

type refKind int

const (
	refDirect refKind = iota
	refMember
	refGroup
	refOneShot
)

type actionRef struct {
	kind refKind
	id   uint32
}

// Table returns the name of the entry's table.
func (e *Entry) Table() string { return e.ti.name }

// Field returns the named match field (the zero FieldValue if the table
// has no such field).
func (e *Entry) Field(name string) FieldValue {
	for _, f := range e.Fields {
		if f.Name == name {
			return f
		}
	}
	return FieldValue{}
}

// Exact returns the value of the named exact (or optional) field.
func (e *Entry) Exact(name string) uint64 { return Uint(e.Field(name).Value) }

// Range returns the bounds of the named range field; an omitted field
// covers every value of its width.
func (e *Entry) Range(name string) (lo, hi uint64) {
	f := e.Field(name)
	if !f.Set {
		return 0, ^uint64(0) >> (64 - min(max(f.width, 1), 64))
	}
	return Uint(f.Value), Uint(f.Mask)
}

// LPM returns the value and prefix length of the named LPM field (0, 0
// when omitted).
func (e *Entry) LPM(name string) (uint64, int) {
	f := e.Field(name)
	return Uint(f.Value), int(f.PrefixLen)
}

// Ternary returns the value and mask of the named ternary field (0, 0 when
// omitted).
func (e *Entry) Ternary(name string) (v, mask uint64) {
	f := e.Field(name)
	return Uint(f.Value), Uint(f.Mask)
}

// Action returns the entry's single action: that of a direct table entry,
// a default entry or a member (nil for groups and one-shot sets).
func (e *Entry) Action() *Call {
	if len(e.Actions) == 1 && (e.ref.kind == refDirect || e.ref.kind == refMember) {
		return e.Actions[0].Call
	}
	return nil
}

// Message returns a copy of the entry as a Read returns it.
func (e *Entry) Message() *p4v1.TableEntry { return proto.Clone(e.msg).(*p4v1.TableEntry) }

func (ti *tableInfo) defaultEntry(c *Call) *Entry {
	e := &Entry{ti: ti, IsDefault: true, msg: &p4v1.TableEntry{TableId: ti.id, IsDefaultAction: true}}
	if c != nil {
		e.Actions = []WeightedCall{{c, 1}}
		e.msg.Action = &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: c.Message()}}
	}
	return e
}

// writeTable applies one update of a table entry (§9.1).
func (t *Target) writeTable(typ p4v1.Update_Type, te *p4v1.TableEntry) error {
	ti := t.tables[te.GetTableId()]
	if ti == nil {
		return errf(codes.NotFound, "no table with id %#x", te.GetTableId())
	}
	if te.GetIsConst() {
		return errf(codes.InvalidArgument, "table %s: is_const must be false in a write", ti.name)
	}
	if typ == p4v1.Update_DELETE {
		// Only the key counts in a DELETE (§9.1): the checks below are
		// skipped.
	} else if te.GetTimeSinceLastHit() != nil {
		return errf(codes.InvalidArgument, "table %s: time_since_last_hit must be unset in a write", ti.name)
	} else if te.GetIdleTimeoutNs() != 0 {
		if te.GetIsDefaultAction() || ti.t.GetIdleTimeoutBehavior() == p4configv1.Table_NO_TIMEOUT {
			return errf(codes.InvalidArgument, "table %s: idle_timeout_ns %d on a table (or default entry) without idle timeout", ti.name, te.GetIdleTimeoutNs())
		}
		return errf(codes.Unimplemented, "table %s: idle-timeout notifications are not supported", ti.name)
	} else if !ti.directRes && (te.GetCounterData() != nil || te.GetMeterConfig() != nil || te.GetMeterCounterData() != nil) {
		return errf(codes.InvalidArgument, "table %s has no direct counter or meter", ti.name)
	}
	if ti.apply == nil {
		return errf(codes.Unimplemented, "table %s is not implemented by this program", ti.name)
	}
	if te.GetIsDefaultAction() {
		return t.writeDefault(typ, ti, te)
	}
	if ti.t.GetIsConstTable() {
		return errf(codes.PermissionDenied, "table %s is const", ti.name)
	}
	if len(ti.fields) == 0 && typ == p4v1.Update_INSERT {
		return errf(codes.InvalidArgument, "table %s has no match key: only its default entry can be written", ti.name)
	}
	fields, key, err := decodeMatch(ti, te.GetMatch(), te.GetPriority())
	if err != nil {
		return err
	}
	old := ti.entries[key]
	if err := CheckExistence(typ, old != nil, "such entry in table "+ti.name); err != nil {
		return err
	}
	if typ == p4v1.Update_DELETE {
		if err := ti.apply(&Change{Type: typ, Old: old}); err != nil {
			return err
		}
		delete(ti.entries, key)
		return nil
	}
	if typ == p4v1.Update_MODIFY && te.GetAction() == nil {
		return nil // §9.1.2: the action is kept; nothing else to change
	}
	if typ == p4v1.Update_INSERT && ti.t.GetSize() > 0 && int64(len(ti.entries)) >= ti.t.GetSize() {
		return errf(codes.ResourceExhausted, "table %s is full (%d entries)", ti.name, ti.t.GetSize())
	}
	calls, ref, action, err := t.tableAction(ti, te.GetAction())
	if err != nil {
		return err
	}
	e := &Entry{Fields: fields, Priority: te.GetPriority(), Actions: calls, ti: ti, key: key, ref: ref}
	e.msg = &p4v1.TableEntry{TableId: ti.id, Match: matchMessage(ti, fields), Action: action, Priority: te.GetPriority(),
		ControllerMetadata: te.GetControllerMetadata(), Metadata: bytes.Clone(te.GetMetadata())}
	c := &Change{Type: typ, Entry: e, Old: old}
	if old != nil {
		e.State, e.seq = old.State, old.seq
	}
	if err := ti.apply(c); err != nil {
		return err
	}
	if old == nil {
		ti.seq++
		e.seq = ti.seq
	}
	ti.entries[key] = e
	return nil
}

// writeDefault applies an update of a table's default entry (§9.1.3).
func (t *Target) writeDefault(typ p4v1.Update_Type, ti *tableInfo, te *p4v1.TableEntry) error {
	if typ != p4v1.Update_MODIFY {
		return errf(codes.InvalidArgument, "table %s: the default entry can only be modified, not %v", ti.name, typ)
	}
	if len(te.GetMatch()) > 0 || te.GetPriority() != 0 {
		return errf(codes.InvalidArgument, "table %s: the default entry has no match key and priority 0", ti.name)
	}
	if ti.constDefault {
		return errf(codes.PermissionDenied, "table %s: the default action is const", ti.name)
	}
	c := ti.initial
	if te.GetAction() != nil {
		a := te.GetAction().GetAction()
		if a == nil {
			return errf(codes.InvalidArgument, "table %s: a default entry takes a direct action", ti.name)
		}
		var err error
		if c, err = t.scopedCall(ti, a, true); err != nil {
			return err
		}
	}
	e := ti.defaultEntry(c)
	e.msg.ControllerMetadata, e.msg.Metadata = te.GetControllerMetadata(), bytes.Clone(te.GetMetadata())
	if te.GetAction() == nil {
		e.msg.ControllerMetadata, e.msg.Metadata = 0, nil // reset to the P4 program's default
	}
	e.State = ti.def.State
	if err := ti.apply(&Change{Type: p4v1.Update_MODIFY, Entry: e, Old: ti.def}); err != nil {
		return err
	}
	ti.def = e
	return nil
}

// scopedCall validates a direct action of table ti: one of its actions, in
// scope for an entry (DEFAULT_ONLY actions are PERMISSION_DENIED) or for
// the default entry (TABLE_ONLY ones are).
func (t *Target) scopedCall(ti *tableInfo, a *p4v1.Action, asDefault bool) (*Call, error) {
	scope, ok := ti.actions[a.GetActionId()]
	if !ok {
		return nil, errf(codes.InvalidArgument, "table %s has no action with id %#x", ti.name, a.GetActionId())
	}
	ai := t.actions[a.GetActionId()]
	switch {
	case !asDefault && scope == p4configv1.ActionRef_DEFAULT_ONLY:
		return nil, errf(codes.PermissionDenied, "table %s: action %s is @defaultonly", ti.name, ai.a.GetPreamble().GetName())
	case asDefault && scope == p4configv1.ActionRef_TABLE_ONLY:
		return nil, errf(codes.PermissionDenied, "table %s: action %s is @tableonly", ti.name, ai.a.GetPreamble().GetName())
	}
	return decodeCall(ai, a)
}

// tableAction validates an entry's action for the kind of table (§9.1.2)
// and resolves it; it returns the canonical action to read back.
func (t *Target) tableAction(ti *tableInfo, ta *p4v1.TableAction) ([]WeightedCall, actionRef, *p4v1.TableAction, error) {
	var ref actionRef
	if ta == nil || ta.GetType() == nil {
		return nil, ref, nil, errf(codes.InvalidArgument, "table %s: an entry needs an action", ti.name)
	}
	pi := ti.profile
	switch a := ta.GetType().(type) {
	case *p4v1.TableAction_Action:
		if pi != nil {
			return nil, ref, nil, errf(codes.InvalidArgument, "table %s is implemented by action profile %s: give a member, group or one-shot set, not a direct action", ti.name, pi.name())
		}
		c, err := t.scopedCall(ti, a.Action, false)
		if err != nil {
			return nil, ref, nil, err
		}
		return []WeightedCall{{c, 1}}, ref, &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: c.Message()}}, nil
	case *p4v1.TableAction_ActionProfileMemberId:
		if pi == nil {
			return nil, ref, nil, errf(codes.InvalidArgument, "table %s is a direct table: give an action, not a member", ti.name)
		}
		m := pi.members[a.ActionProfileMemberId]
		if m == nil {
			return nil, ref, nil, errf(codes.NotFound, "action profile %s has no member %d", pi.name(), a.ActionProfileMemberId)
		}
		return []WeightedCall{{m.call, 1}}, actionRef{refMember, m.id}, proto.Clone(ta).(*p4v1.TableAction), nil
	case *p4v1.TableAction_ActionProfileGroupId:
		if pi == nil || !pi.p.GetWithSelector() {
			return nil, ref, nil, errf(codes.InvalidArgument, "table %s has no action selector: groups cannot be used", ti.name)
		}
		g := pi.groups[a.ActionProfileGroupId]
		if g == nil {
			return nil, ref, nil, errf(codes.NotFound, "action selector %s has no group %d", pi.name(), a.ActionProfileGroupId)
		}
		return pi.resolve(g), actionRef{refGroup, g.id}, proto.Clone(ta).(*p4v1.TableAction), nil
	case *p4v1.TableAction_ActionProfileActionSet:
		if pi == nil || !pi.p.GetWithSelector() {
			return nil, ref, nil, errf(codes.InvalidArgument, "table %s has no action selector: one-shot action sets cannot be used", ti.name)
		}
		calls, set, err := t.oneShot(ti, a.ActionProfileActionSet)
		if err != nil {
			return nil, ref, nil, err
		}
		return calls, actionRef{kind: refOneShot}, &p4v1.TableAction{Type: &p4v1.TableAction_ActionProfileActionSet{ActionProfileActionSet: set}}, nil
	}
	return nil, ref, nil, errf(codes.InvalidArgument, "table %s: unknown kind of table action", ti.name)
}

// oneShot validates a one-shot action set (§9.2.3).
func (t *Target) oneShot(ti *tableInfo, set *p4v1.ActionProfileActionSet) ([]WeightedCall, *p4v1.ActionProfileActionSet, error) {
	pi := ti.profile
	acts := set.GetActionProfileActions()
	if len(acts) == 0 {
		return nil, nil, errf(codes.InvalidArgument, "table %s: empty one-shot action set", ti.name)
	}
	maxSize := int64(pi.p.GetMaxGroupSize())
	members := pi.p.GetSumOfMembers() != nil
	if members && maxSize > 0 && int64(len(acts)) > maxSize {
		return nil, nil, errf(codes.InvalidArgument, "table %s: %d actions in a one-shot set; %s allows %d", ti.name, len(acts), pi.name(), maxSize)
	}
	var calls []WeightedCall
	out := &p4v1.ActionProfileActionSet{}
	var sum int64
	for i, pa := range acts {
		w := pa.GetWeight()
		if w <= 0 {
			return nil, nil, errf(codes.InvalidArgument, "table %s: one-shot action %d has weight %d; weights are positive", ti.name, i, w)
		}
		if mw := pi.p.GetSumOfMembers().GetMaxMemberWeight(); members && mw > 0 && w > mw {
			return nil, nil, errf(codes.InvalidArgument, "table %s: one-shot action %d has weight %d above %d", ti.name, i, w, mw)
		}
		if pa.GetWatchKind() != nil {
			return nil, nil, errf(codes.Unimplemented, "table %s: watch ports are not supported", ti.name)
		}
		sum += int64(w)
		if pa.GetAction() == nil {
			return nil, nil, errf(codes.InvalidArgument, "table %s: one-shot action %d has no action", ti.name, i)
		}
		c, err := t.scopedCall(ti, pa.GetAction(), false)
		if err != nil {
			return nil, nil, err
		}
		calls = append(calls, WeightedCall{c, w})
		out.ActionProfileActions = append(out.ActionProfileActions, &p4v1.ActionProfileAction{Action: c.Message(), Weight: w})
	}
	if !members && maxSize > 0 && sum > maxSize {
		return nil, nil, errf(codes.InvalidArgument, "table %s: one-shot weights sum to %d; %s allows %d", ti.name, sum, pi.name(), maxSize)
	}
	return calls, out, nil
}

// readTable answers a table-entry query with the filters of §9.1.6.
func (t *Target) readTable(q *p4v1.TableEntry, yield func(*p4v1.Entity) error) error {
	tables := t.tableList
	if q.GetTableId() != 0 {
		ti := t.tables[q.GetTableId()]
		if ti == nil {
			return errf(codes.NotFound, "no table with id %#x", q.GetTableId())
		}
		tables = []*tableInfo{ti}
	} else if len(q.GetMatch()) > 0 {
		return errf(codes.InvalidArgument, "a read of every table cannot filter by match")
	}
	for _, ti := range tables {
		if q.GetIsDefaultAction() {
			if len(q.GetMatch()) > 0 {
				return errf(codes.InvalidArgument, "table %s: the default entry has no match key", ti.name)
			}
			if ti.def.msg.Action == nil && ti.apply == nil {
				continue
			}
			if err := yield(Table(ti.def.Message())); err != nil {
				return err
			}
			continue
		}
		var entries []*Entry
		if len(q.GetMatch()) > 0 {
			_, key, err := decodeMatch(ti, q.GetMatch(), q.GetPriority())
			if err != nil {
				return err
			}
			if e := ti.entries[key]; e != nil {
				entries = append(entries, e)
			}
		} else {
			for _, e := range ti.entries {
				entries = append(entries, e)
			}
			slices.SortFunc(entries, func(a, b *Entry) int { return int(int64(a.seq) - int64(b.seq)) })
		}
		for _, e := range entries {
			if !matchesFilter(e, q) {
				continue
			}
			if err := yield(Table(e.Message())); err != nil {
				return err
			}
		}
	}
	return nil
}

// matchesFilter applies a read's non-key filters (§9.1.6): the action of
// a direct entry, the priority, controller_metadata and metadata, each
// ignored at its default value.
func matchesFilter(e *Entry, q *p4v1.TableEntry) bool {
	if id := q.GetAction().GetAction().GetActionId(); id != 0 && e.msg.GetAction().GetAction().GetActionId() != id {
		return false
	}
	if q.GetPriority() != 0 && e.Priority != q.GetPriority() {
		return false
	}
	if q.GetControllerMetadata() != 0 && e.msg.GetControllerMetadata() != q.GetControllerMetadata() {
		return false
	}
	if len(q.GetMetadata()) > 0 && !bytes.Equal(e.msg.GetMetadata(), q.GetMetadata()) {
		return false
	}
	return true
}

// Entries returns the entries of the named table in insertion order, for
// the program's own use (not copies: callers must not modify them).
func (t *Target) Entries(table string) []*Entry {
	id, err := t.names.TableID(table)
	if err != nil {
		return nil
	}
	ti := t.tables[id]
	out := make([]*Entry, 0, len(ti.entries))
	for _, e := range ti.entries {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *Entry) int { return int(int64(a.seq) - int64(b.seq)) })
	return out
}

// Default returns the named table's default entry.
func (t *Target) Default(table string) *Entry {
	id, err := t.names.TableID(table)
	if err != nil {
		return nil
	}
	return t.tables[id].def
}
