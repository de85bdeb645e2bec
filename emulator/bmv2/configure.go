package bmv2

import (
	"context"
	"fmt"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/topologies"
)

// Configure installs on a freshly loaded bmv2 switch the entries the
// program's Go twin starts with on switch sw: those of prog.Entries when
// the program provides them (written by name against c's P4Info);
// otherwise it builds the Go data plane (prog with the topology's routes), reads
// its action-profile members and groups and its table entries, renames
// every id from the Go twin's P4Info to the running pipeline's (c.P4Info(),
// p4c's ids) by name, and writes them. The same controllers then program
// both switches alike.
func Configure(ctx context.Context, c p4rt.Client, topo *topologies.Topology, sw *topologies.Node, prog *dataplane.Program) error {
	if prog.Entries != nil {
		updates, err := prog.Entries(topo, sw, c)
		if err != nil {
			return fmt.Errorf("bmv2: initial entries of %s: %w", prog.Name, err)
		}
		return write(ctx, c, prog.Name, updates)
	}
	dp, err := prog.New(sw, topo.Routes()[sw.Name])
	if err != nil {
		return fmt.Errorf("bmv2: Go twin of %s: %w", prog.Name, err)
	}
	ents, err := InitialEntities(dp)
	if err != nil {
		return err
	}
	m, err := newIDMap(dp.P4Info(), c.P4Info())
	if err != nil {
		return err
	}
	var updates []*p4v1.Update
	for _, e := range ents {
		t, err := m.entity(e)
		if err != nil {
			return fmt.Errorf("bmv2: %s: %w", prog.Name, err)
		}
		updates = append(updates, p4rt.Insert(t))
	}
	return write(ctx, c, prog.Name, updates)
}

func write(ctx context.Context, c p4rt.Client, program string, updates []*p4v1.Update) error {
	if len(updates) == 0 {
		return nil
	}
	if err := c.Write(ctx, updates...); err != nil {
		return fmt.Errorf("bmv2: install the %d initial entries of %s: %w", len(updates), program, err)
	}
	return nil
}

// InitialEntities reads the entries a data plane holds: action-profile
// members, then groups, then the table entries that are not default
// actions — in the order they can be inserted.
func InitialEntities(d p4rt.Device) ([]*p4v1.Entity, error) {
	var out []*p4v1.Entity
	collect := func(q *p4v1.Entity) error {
		return d.Read(q, func(e *p4v1.Entity) error {
			if te := e.GetTableEntry(); te != nil && te.GetIsDefaultAction() {
				return nil
			}
			out = append(out, proto.Clone(e).(*p4v1.Entity))
			return nil
		})
	}
	info := d.P4Info()
	for _, ap := range info.GetActionProfiles() {
		id := ap.GetPreamble().GetId()
		if err := collect(&p4v1.Entity{Entity: &p4v1.Entity_ActionProfileMember{ActionProfileMember: &p4v1.ActionProfileMember{ActionProfileId: id}}}); err != nil {
			return nil, fmt.Errorf("bmv2: read members of %s: %w", ap.GetPreamble().GetName(), err)
		}
	}
	for _, ap := range info.GetActionProfiles() {
		id := ap.GetPreamble().GetId()
		if err := collect(&p4v1.Entity{Entity: &p4v1.Entity_ActionProfileGroup{ActionProfileGroup: &p4v1.ActionProfileGroup{ActionProfileId: id}}}); err != nil {
			return nil, fmt.Errorf("bmv2: read groups of %s: %w", ap.GetPreamble().GetName(), err)
		}
	}
	for _, t := range info.GetTables() {
		if t.GetIsConstTable() {
			continue
		}
		if err := collect(p4rt.Table(&p4v1.TableEntry{TableId: t.GetPreamble().GetId()})); err != nil {
			return nil, fmt.Errorf("bmv2: read table %s: %w", t.GetPreamble().GetName(), err)
		}
	}
	return out, nil
}

// idMap renames P4Runtime ids from one P4Info to another by name.
type idMap struct {
	tables, actions, profiles map[uint32]uint32
	fields, params            map[[2]uint32]uint32 // (from table or action, from id) → to id
	tableName, actionName     map[uint32]string
}

func newIDMap(from, to *p4configv1.P4Info) (*idMap, error) {
	m := &idMap{tables: map[uint32]uint32{}, actions: map[uint32]uint32{}, profiles: map[uint32]uint32{},
		fields: map[[2]uint32]uint32{}, params: map[[2]uint32]uint32{}, tableName: map[uint32]string{}, actionName: map[uint32]string{}}
	toTables := map[string]*p4configv1.Table{}
	for _, t := range to.GetTables() {
		toTables[t.GetPreamble().GetName()] = t
	}
	for _, t := range from.GetTables() {
		name := t.GetPreamble().GetName()
		m.tableName[t.GetPreamble().GetId()] = name
		tt := toTables[name]
		if tt == nil {
			continue // an error only if an entry uses it
		}
		m.tables[t.GetPreamble().GetId()] = tt.GetPreamble().GetId()
		byName := map[string]uint32{}
		for _, f := range tt.GetMatchFields() {
			byName[f.GetName()] = f.GetId()
		}
		for _, f := range t.GetMatchFields() {
			if id, ok := byName[f.GetName()]; ok {
				m.fields[[2]uint32{t.GetPreamble().GetId(), f.GetId()}] = id
			}
		}
	}
	toActions := map[string]*p4configv1.Action{}
	for _, a := range to.GetActions() {
		toActions[a.GetPreamble().GetName()] = a
	}
	for _, a := range from.GetActions() {
		name := a.GetPreamble().GetName()
		m.actionName[a.GetPreamble().GetId()] = name
		ta := toActions[name]
		if ta == nil {
			continue
		}
		m.actions[a.GetPreamble().GetId()] = ta.GetPreamble().GetId()
		byName := map[string]uint32{}
		for _, p := range ta.GetParams() {
			byName[p.GetName()] = p.GetId()
		}
		for _, p := range a.GetParams() {
			if id, ok := byName[p.GetName()]; ok {
				m.params[[2]uint32{a.GetPreamble().GetId(), p.GetId()}] = id
			}
		}
	}
	toProfiles := map[string]uint32{}
	for _, p := range to.GetActionProfiles() {
		toProfiles[p.GetPreamble().GetName()] = p.GetPreamble().GetId()
	}
	for _, p := range from.GetActionProfiles() {
		if id, ok := toProfiles[p.GetPreamble().GetName()]; ok {
			m.profiles[p.GetPreamble().GetId()] = id
		}
	}
	return m, nil
}

// entity returns a copy of e with its ids renamed.
func (m *idMap) entity(e *p4v1.Entity) (*p4v1.Entity, error) {
	e = proto.Clone(e).(*p4v1.Entity)
	switch x := e.GetEntity().(type) {
	case *p4v1.Entity_TableEntry:
		return e, m.tableEntry(x.TableEntry)
	case *p4v1.Entity_ActionProfileMember:
		mem := x.ActionProfileMember
		id, ok := m.profiles[mem.GetActionProfileId()]
		if !ok {
			return nil, fmt.Errorf("action profile %#x has no counterpart in the compiled program", mem.GetActionProfileId())
		}
		mem.ActionProfileId = id
		return e, m.action(mem.GetAction())
	case *p4v1.Entity_ActionProfileGroup:
		g := x.ActionProfileGroup
		id, ok := m.profiles[g.GetActionProfileId()]
		if !ok {
			return nil, fmt.Errorf("action profile %#x has no counterpart in the compiled program", g.GetActionProfileId())
		}
		g.ActionProfileId = id
		return e, nil
	}
	return nil, fmt.Errorf("cannot carry %T to bmv2", e.GetEntity())
}

func (m *idMap) tableEntry(t *p4v1.TableEntry) error {
	from := t.GetTableId()
	id, ok := m.tables[from]
	if !ok {
		return fmt.Errorf("table %s has no counterpart in the compiled program", m.tableName[from])
	}
	t.TableId = id
	for _, f := range t.GetMatch() {
		fid, ok := m.fields[[2]uint32{from, f.GetFieldId()}]
		if !ok {
			return fmt.Errorf("table %s: match field %d has no counterpart in the compiled program", m.tableName[from], f.GetFieldId())
		}
		f.FieldId = fid
	}
	switch a := t.GetAction().GetType().(type) {
	case *p4v1.TableAction_Action:
		return m.action(a.Action)
	case *p4v1.TableAction_ActionProfileActionSet:
		for _, pa := range a.ActionProfileActionSet.GetActionProfileActions() {
			if err := m.action(pa.GetAction()); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *idMap) action(a *p4v1.Action) error {
	if a == nil {
		return nil
	}
	from := a.GetActionId()
	id, ok := m.actions[from]
	if !ok {
		return fmt.Errorf("action %s has no counterpart in the compiled program", m.actionName[from])
	}
	a.ActionId = id
	for _, p := range a.GetParams() {
		pid, ok := m.params[[2]uint32{from, p.GetParamId()}]
		if !ok {
			return fmt.Errorf("action %s: parameter %d has no counterpart in the compiled program", m.actionName[from], p.GetParamId())
		}
		p.ParamId = pid
	}
	return nil
}
