package p4rt

import (
	"slices"
	"strings"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
)

// P4cHash is the hash p4c derives a P4Runtime id from: Jenkins'
// one-at-a-time hash of the object's fully qualified name
// (p4c/control-plane/p4RuntimeSymbolTable.cpp, jenkinsOneAtATimeHash).
func P4cHash(name string) uint32 {
	var h uint32
	for i := 0; i < len(name); i++ {
		h += uint32(name[i])
		h += h << 10
		h ^= h >> 6
	}
	h += h << 3
	h ^= h >> 11
	h += h << 15
	return h
}

// AssignP4cIDs renumbers every object of info as p4c-bm2-ss numbers the
// objects of a program that has no @id annotations, and rewrites every
// reference to them (action references, default actions, action
// profiles' tables, direct resources): an object's id is its kind's
// 8-bit prefix over the low 24 bits of P4cHash of its name, and
// colliding names, taken in byte order, probe upwards to the next free
// id (p4RuntimeSymbolTable.cpp, computeIdsForSymbols). Controller packet
// metadata keep their ids: p4c hashes the name of the header type
// (packet_in_t), which a P4Info does not carry. A Go twin that
// states its P4Info in code calls it last, so that the ids it serves are
// those of the P4Info p4c emits for its P4 program: a controller can
// then load p4c's P4Info on the Go switch and the Go twin's on bmv2.
func AssignP4cIDs(info *p4configv1.P4Info) {
	renamed := map[uint32]uint32{} // old id → new id, all kinds
	assigned := map[uint32]bool{}
	kind := func(prefix p4configv1.P4Ids_Prefix, pres []*p4configv1.Preamble) {
		slices.SortFunc(pres, func(a, b *p4configv1.Preamble) int { return strings.Compare(a.GetName(), b.GetName()) })
		for _, p := range pres {
			h := P4cHash(p.GetName())
			id := uint32(prefix)<<24 | h&0xffffff
			for v := h; assigned[id]; {
				v++
				id = uint32(prefix)<<24 | v&0xffffff
			}
			assigned[id] = true
			renamed[p.GetId()] = id
			p.Id = id
		}
	}
	kinds := []struct {
		prefix p4configv1.P4Ids_Prefix
		pres   []*p4configv1.Preamble
	}{
		{p4configv1.P4Ids_TABLE, preambles(info.GetTables())},
		{p4configv1.P4Ids_ACTION, preambles(info.GetActions())},
		{p4configv1.P4Ids_ACTION_PROFILE, preambles(info.GetActionProfiles())},
		{p4configv1.P4Ids_COUNTER, preambles(info.GetCounters())},
		{p4configv1.P4Ids_DIRECT_COUNTER, preambles(info.GetDirectCounters())},
		{p4configv1.P4Ids_METER, preambles(info.GetMeters())},
		{p4configv1.P4Ids_DIRECT_METER, preambles(info.GetDirectMeters())},
		{p4configv1.P4Ids_VALUE_SET, preambles(info.GetValueSets())},
		{p4configv1.P4Ids_REGISTER, preambles(info.GetRegisters())},
		{p4configv1.P4Ids_DIGEST, preambles(info.GetDigests())},
	}
	for _, k := range kinds {
		kind(k.prefix, k.pres)
	}

	ref := func(id *uint32) {
		if n, ok := renamed[*id]; ok {
			*id = n
		}
	}
	for _, t := range info.GetTables() {
		for _, r := range t.GetActionRefs() {
			ref(&r.Id)
		}
		ref(&t.ConstDefaultActionId)
		if d := t.GetInitialDefaultAction(); d != nil {
			ref(&d.ActionId)
		}
		ref(&t.ImplementationId)
		for i := range t.DirectResourceIds {
			ref(&t.DirectResourceIds[i])
		}
	}
	for _, p := range info.GetActionProfiles() {
		for i := range p.TableIds {
			ref(&p.TableIds[i])
		}
	}
	for _, c := range info.GetDirectCounters() {
		ref(&c.DirectTableId)
	}
	for _, m := range info.GetDirectMeters() {
		ref(&m.DirectTableId)
	}
}

// preambles returns the preambles of P4Info objects of one kind.
func preambles[T interface{ GetPreamble() *p4configv1.Preamble }](objs []T) []*p4configv1.Preamble {
	out := make([]*p4configv1.Preamble, len(objs))
	for i, o := range objs {
		out[i] = o.GetPreamble()
	}
	return out
}
