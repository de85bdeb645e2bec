package p4rt

import (
	"errors"
	"fmt"
	"strings"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
)

// InfoBuilder appends objects to a P4Info, the way a Go twin states the
// P4Info of its P4 program: the same names, kinds, widths and sizes as
// p4c would generate, with ids of the twin's own numbering (controllers
// look ids up by name). Ids are prefix<<24 | n, with n counting per kind
// from the builder's first number.
type InfoBuilder struct {
	Info *p4configv1.P4Info
	next map[p4configv1.P4Ids_Prefix]uint32
}

// NewInfoBuilder returns a builder that appends to info, numbering each
// kind's new ids from first (so that they do not meet the ids info
// already has).
func NewInfoBuilder(info *p4configv1.P4Info, first uint32) *InfoBuilder {
	b := &InfoBuilder{Info: info, next: map[p4configv1.P4Ids_Prefix]uint32{}}
	for _, k := range []p4configv1.P4Ids_Prefix{p4configv1.P4Ids_ACTION, p4configv1.P4Ids_TABLE,
		p4configv1.P4Ids_REGISTER, p4configv1.P4Ids_COUNTER} {
		b.next[k] = first
	}
	return b
}

func (b *InfoBuilder) id(k p4configv1.P4Ids_Prefix) uint32 {
	n := b.next[k]
	b.next[k]++
	return uint32(k)<<24 | n
}

// Preamble returns the preamble of object name with id: its alias is the
// last dotted component of the name, as p4c makes it.
func Preamble(id uint32, name string) *p4configv1.Preamble {
	alias := name
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		alias = name[i+1:]
	}
	return &p4configv1.Preamble{Id: id, Name: name, Alias: alias}
}

// ParamSpec is an action parameter.
type ParamSpec struct {
	Name  string
	Width int32
}

// FieldSpec is a match field of a table.
type FieldSpec struct {
	Name  string
	Width int32
	Kind  p4configv1.MatchField_MatchType
}

// Action appends an action and returns its id.
func (b *InfoBuilder) Action(name string, params ...ParamSpec) uint32 {
	a := &p4configv1.Action{Preamble: Preamble(b.id(p4configv1.P4Ids_ACTION), name)}
	for i, p := range params {
		a.Params = append(a.Params, &p4configv1.Action_Param{Id: uint32(i + 1), Name: p.Name, Bitwidth: p.Width})
	}
	b.Info.Actions = append(b.Info.Actions, a)
	return a.Preamble.Id
}

// Table appends a table of size entries with the given match fields and
// actions; def, one of them, is its initial default action and may only
// be the default (@defaultonly).
func (b *InfoBuilder) Table(name string, size int64, fields []FieldSpec, def uint32, actions ...uint32) uint32 {
	t := &p4configv1.Table{Preamble: Preamble(b.id(p4configv1.P4Ids_TABLE), name), Size: size}
	for i, f := range fields {
		t.MatchFields = append(t.MatchFields, &p4configv1.MatchField{
			Id: uint32(i + 1), Name: f.Name, Bitwidth: f.Width,
			Match: &p4configv1.MatchField_MatchType_{MatchType: f.Kind},
		})
	}
	for _, a := range actions {
		ref := &p4configv1.ActionRef{Id: a}
		if a == def {
			ref.Scope = p4configv1.ActionRef_DEFAULT_ONLY
		}
		t.ActionRefs = append(t.ActionRefs, ref)
	}
	t.InitialDefaultAction = &p4configv1.TableActionCall{ActionId: def}
	b.Info.Tables = append(b.Info.Tables, t)
	return t.Preamble.Id
}

// Register appends a register array of size bit<width> cells.
func (b *InfoBuilder) Register(name string, width, size int32) uint32 {
	r := &p4configv1.Register{
		Preamble: Preamble(b.id(p4configv1.P4Ids_REGISTER), name),
		TypeSpec: &p4configv1.P4DataTypeSpec{TypeSpec: &p4configv1.P4DataTypeSpec_Bitstring{
			Bitstring: &p4configv1.P4BitstringLikeTypeSpec{TypeSpec: &p4configv1.P4BitstringLikeTypeSpec_Bit{
				Bit: &p4configv1.P4BitTypeSpec{Bitwidth: width},
			}},
		}},
		Size: size,
	}
	b.Info.Registers = append(b.Info.Registers, r)
	return r.Preamble.Id
}

// Counter appends an indexed counter array of size cells.
func (b *InfoBuilder) Counter(name string, unit p4configv1.CounterSpec_Unit, size int64) uint32 {
	c := &p4configv1.Counter{
		Preamble: Preamble(b.id(p4configv1.P4Ids_COUNTER), name),
		Spec:     &p4configv1.CounterSpec{Unit: unit},
		Size:     size,
	}
	b.Info.Counters = append(b.Info.Counters, c)
	return c.Preamble.Id
}

// SameObjects checks that got (a P4Info from p4c, say) has every table,
// action, register and counter of want (a Go twin's) by name, with the
// same match kinds, parameter and field widths, sizes and counter units:
// what controllers that look ids up by name rely on. Ids may differ.
func SameObjects(want, got *p4configv1.P4Info) error {
	them, err := NewNames(got)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range want.GetActions() {
		name := a.GetPreamble().GetName()
		b, err := them.Action(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, p := range a.GetParams() {
			q, err := them.Param(name, p.GetName())
			if err != nil || q.GetBitwidth() != p.GetBitwidth() {
				errs = append(errs, fmt.Errorf("action %s param %s: %v (width %d, want %d)", name, p.GetName(), err, q.GetBitwidth(), p.GetBitwidth()))
			}
		}
		if len(b.GetParams()) != len(a.GetParams()) {
			errs = append(errs, fmt.Errorf("action %s has %d params, want %d", name, len(b.GetParams()), len(a.GetParams())))
		}
	}
	for _, tb := range want.GetTables() {
		name := tb.GetPreamble().GetName()
		if _, err := them.Table(name); err != nil {
			errs = append(errs, err)
			continue
		}
		for _, mf := range tb.GetMatchFields() {
			m, err := them.MatchField(name, mf.GetName())
			if err != nil || m.GetBitwidth() != mf.GetBitwidth() || m.GetMatchType() != mf.GetMatchType() {
				errs = append(errs, fmt.Errorf("table %s field %s: %v (%v/%d, want %v/%d)", name, mf.GetName(), err, m.GetMatchType(), m.GetBitwidth(), mf.GetMatchType(), mf.GetBitwidth()))
			}
		}
	}
	for _, r := range want.GetRegisters() {
		q, err := them.Register(r.GetPreamble().GetName())
		if err != nil || q.GetSize() != r.GetSize() || RegisterWidth(q) != RegisterWidth(r) {
			errs = append(errs, fmt.Errorf("register %s: %v (size %d width %d, want %d, %d)", r.GetPreamble().GetName(), err, q.GetSize(), RegisterWidth(q), r.GetSize(), RegisterWidth(r)))
		}
	}
	for _, c := range want.GetCounters() {
		q, err := them.Counter(c.GetPreamble().GetName())
		if err != nil || q.GetSize() != c.GetSize() || q.GetSpec().GetUnit() != c.GetSpec().GetUnit() {
			errs = append(errs, fmt.Errorf("counter %s: %v", c.GetPreamble().GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// SameIDs checks that every object of want (a Go twin's P4Info) has, in
// got (p4c's), the same id under the same name: tables and their match
// fields, actions and their parameters, action profiles, counters,
// registers, digests and controller packet metadata. With SameObjects it
// says that a controller may use either P4Info with either switch.
func SameIDs(want, got *p4configv1.P4Info) error {
	ids := map[string]uint32{}
	walk := func(info *p4configv1.P4Info, visit func(key string, id uint32)) {
		for _, t := range info.GetTables() {
			visit("table "+t.GetPreamble().GetName(), t.GetPreamble().GetId())
			for _, f := range t.GetMatchFields() {
				visit("table "+t.GetPreamble().GetName()+" field "+f.GetName(), f.GetId())
			}
		}
		for _, a := range info.GetActions() {
			visit("action "+a.GetPreamble().GetName(), a.GetPreamble().GetId())
			for _, p := range a.GetParams() {
				visit("action "+a.GetPreamble().GetName()+" param "+p.GetName(), p.GetId())
			}
		}
		for _, p := range info.GetActionProfiles() {
			visit("action profile "+p.GetPreamble().GetName(), p.GetPreamble().GetId())
		}
		for _, c := range info.GetCounters() {
			visit("counter "+c.GetPreamble().GetName(), c.GetPreamble().GetId())
		}
		for _, r := range info.GetRegisters() {
			visit("register "+r.GetPreamble().GetName(), r.GetPreamble().GetId())
		}
		for _, d := range info.GetDigests() {
			visit("digest "+d.GetPreamble().GetName(), d.GetPreamble().GetId())
		}
		for _, m := range info.GetControllerPacketMetadata() {
			visit("controller header "+m.GetPreamble().GetName(), m.GetPreamble().GetId())
			for _, f := range m.GetMetadata() {
				visit("controller header "+m.GetPreamble().GetName()+" field "+f.GetName(), f.GetId())
			}
		}
	}
	walk(got, func(key string, id uint32) { ids[key] = id })
	var errs []error
	walk(want, func(key string, id uint32) {
		switch g, ok := ids[key]; {
		case !ok:
			errs = append(errs, fmt.Errorf("%s: missing", key))
		case g != id:
			errs = append(errs, fmt.Errorf("%s: id %#x, want %#x", key, g, id))
		}
	})
	return errors.Join(errs...)
}
