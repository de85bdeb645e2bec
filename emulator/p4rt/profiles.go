package p4rt

import (
	"slices"
	"strconv"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
)

// Action profiles and selectors (P4Runtime 1.4.1 §9.2): members bind an
// id to an action, groups bind an id to weighted members; table entries
// of the profile's tables refer to either. The table bindings see the
// resolved actions, and see them again whenever a member or group they
// use changes.

type profileInfo struct {
	p       *p4configv1.ActionProfile
	tables  []*tableInfo
	members map[uint32]*member
	groups  map[uint32]*group
	actions map[uint32]bool // actions a member may run
}

type member struct {
	id   uint32
	call *Call
}

type group struct {
	id      uint32
	members []groupMember
	maxSize int32
}

type groupMember struct {
	id     uint32
	weight int32
}

func (pi *profileInfo) name() string { return pi.p.GetPreamble().GetName() }

// resolve returns a group's actions with their weights.
func (pi *profileInfo) resolve(g *group) []WeightedCall {
	out := make([]WeightedCall, 0, len(g.members))
	for _, m := range g.members {
		out = append(out, WeightedCall{pi.members[m.id].call, m.weight})
	}
	return out
}

// users returns the entries of the profile's tables that refer to member
// or group id, in table then insertion order.
func (pi *profileInfo) users(kind refKind, id uint32) []*Entry {
	var out []*Entry
	for _, ti := range pi.tables {
		var es []*Entry
		for _, e := range ti.entries {
			if e.ref.kind == kind && e.ref.id == id {
				es = append(es, e)
			}
		}
		slices.SortFunc(es, func(a, b *Entry) int { return int(int64(a.seq) - int64(b.seq)) })
		out = append(out, es...)
	}
	return out
}

// rebind re-resolves the entries that use a changed member or group and
// gives each to its table's binding; if one fails, the entries already
// re-bound are restored and the error returned.
func (pi *profileInfo) rebind(entries []*Entry) error {
	var done []*Entry
	for _, old := range entries {
		e := *old
		switch old.ref.kind {
		case refMember:
			e.Actions = []WeightedCall{{pi.members[old.ref.id].call, 1}}
		case refGroup:
			e.Actions = pi.resolve(pi.groups[old.ref.id])
		}
		if err := old.ti.apply(&Change{Type: p4v1.Update_MODIFY, Entry: &e, Old: old}); err != nil {
			for i := len(done) - 1; i >= 0; i-- {
				n := done[i]
				prev := entries[i]
				_ = n.ti.apply(&Change{Type: p4v1.Update_MODIFY, Entry: prev, Old: n}) // restores what was accepted before
				n.ti.entries[n.key] = prev
			}
			return err
		}
		old.ti.entries[old.key] = &e
		done = append(done, &e)
	}
	return nil
}

func (t *Target) profile(id uint32) (*profileInfo, error) {
	pi := t.profiles[id]
	if pi == nil {
		return nil, errf(codes.NotFound, "no action profile with id %#x", id)
	}
	for _, ti := range pi.tables {
		if ti.apply == nil {
			return nil, errf(codes.Unimplemented, "action profile %s: table %s is not implemented by this program", pi.name(), ti.name)
		}
	}
	return pi, nil
}

// writeMember applies an update of an action profile member (§9.2.1).
func (t *Target) writeMember(typ p4v1.Update_Type, m *p4v1.ActionProfileMember) error {
	pi, err := t.profile(m.GetActionProfileId())
	if err != nil {
		return err
	}
	id := m.GetMemberId()
	if id == 0 {
		return errf(codes.InvalidArgument, "action profile %s: member id 0 is not valid", pi.name())
	}
	old := pi.members[id]
	if err := CheckExistence(typ, old != nil, "member "+itoa(id)+" of action profile "+pi.name()); err != nil {
		return err
	}
	if typ == p4v1.Update_DELETE {
		for gid, g := range pi.groups {
			if slices.ContainsFunc(g.members, func(x groupMember) bool { return x.id == id }) {
				return errf(codes.FailedPrecondition, "action profile %s: member %d is in group %d", pi.name(), id, gid)
			}
		}
		if us := pi.users(refMember, id); len(us) > 0 {
			return errf(codes.FailedPrecondition, "action profile %s: member %d is used by an entry of table %s", pi.name(), id, us[0].ti.name)
		}
		delete(pi.members, id)
		return nil
	}
	a := m.GetAction()
	if a == nil {
		return errf(codes.InvalidArgument, "action profile %s: member %d needs an action", pi.name(), id)
	}
	if !pi.actions[a.GetActionId()] {
		return errf(codes.InvalidArgument, "action profile %s: action id %#x is not an action of its tables", pi.name(), a.GetActionId())
	}
	c, err := decodeCall(t.actions[a.GetActionId()], a)
	if err != nil {
		return err
	}
	if typ == p4v1.Update_INSERT {
		if size := pi.p.GetSize(); size > 0 && int64(len(pi.members)) >= size {
			return errf(codes.ResourceExhausted, "action profile %s holds %d members", pi.name(), size)
		}
		pi.members[id] = &member{id: id, call: c}
		return nil
	}
	pi.members[id] = &member{id: id, call: c}
	var users []*Entry
	users = append(users, pi.users(refMember, id)...)
	for _, g := range pi.groups {
		if slices.ContainsFunc(g.members, func(x groupMember) bool { return x.id == id }) {
			users = append(users, pi.users(refGroup, g.id)...)
		}
	}
	if err := pi.rebind(users); err != nil {
		pi.members[id] = old
		return err
	}
	return nil
}

// writeGroup applies an update of an action selector group (§9.2.2).
func (t *Target) writeGroup(typ p4v1.Update_Type, g *p4v1.ActionProfileGroup) error {
	pi, err := t.profile(g.GetActionProfileId())
	if err != nil {
		return err
	}
	if !pi.p.GetWithSelector() {
		return errf(codes.InvalidArgument, "action profile %s has no selector: it has no groups", pi.name())
	}
	id := g.GetGroupId()
	if id == 0 {
		return errf(codes.InvalidArgument, "action selector %s: group id 0 is not valid", pi.name())
	}
	old := pi.groups[id]
	if err := CheckExistence(typ, old != nil, "group "+itoa(id)+" of action selector "+pi.name()); err != nil {
		return err
	}
	if typ == p4v1.Update_DELETE {
		if us := pi.users(refGroup, id); len(us) > 0 {
			return errf(codes.FailedPrecondition, "action selector %s: group %d is used by an entry of table %s", pi.name(), id, us[0].ti.name)
		}
		delete(pi.groups, id)
		return nil
	}
	maxGroup := pi.p.GetMaxGroupSize()
	maxSize := g.GetMaxSize()
	switch {
	case typ == p4v1.Update_MODIFY && maxSize != old.maxSize:
		return errf(codes.InvalidArgument, "action selector %s: group %d has max_size %d; a MODIFY cannot change it to %d", pi.name(), id, old.maxSize, maxSize)
	case maxSize < 0:
		return errf(codes.InvalidArgument, "action selector %s: max_size %d", pi.name(), maxSize)
	case maxGroup > 0 && maxSize > maxGroup:
		return errf(codes.InvalidArgument, "action selector %s: max_size %d above max_group_size %d", pi.name(), maxSize, maxGroup)
	}
	limit := maxSize
	if limit == 0 {
		limit = maxGroup // 0: the largest the selector allows (§9.2.2.1)
	}
	ng := &group{id: id, maxSize: maxSize}
	var sum int64
	for _, gm := range g.GetMembers() {
		if pi.members[gm.GetMemberId()] == nil {
			return errf(codes.NotFound, "action selector %s: group %d: no member %d", pi.name(), id, gm.GetMemberId())
		}
		if slices.ContainsFunc(ng.members, func(x groupMember) bool { return x.id == gm.GetMemberId() }) {
			return errf(codes.InvalidArgument, "action selector %s: group %d: member %d given twice", pi.name(), id, gm.GetMemberId())
		}
		if gm.GetWeight() <= 0 {
			return errf(codes.InvalidArgument, "action selector %s: group %d: member %d has weight %d; weights are positive", pi.name(), id, gm.GetMemberId(), gm.GetWeight())
		}
		if gm.GetWatchKind() != nil {
			return errf(codes.Unimplemented, "action selector %s: watch ports are not supported", pi.name())
		}
		if pi.p.GetSumOfMembers() != nil {
			sum++
		} else {
			sum += int64(gm.GetWeight())
		}
		ng.members = append(ng.members, groupMember{gm.GetMemberId(), gm.GetWeight()})
	}
	if limit > 0 && sum > int64(limit) {
		return errf(codes.ResourceExhausted, "action selector %s: group %d: size %d above its max_size %d", pi.name(), id, sum, limit)
	}
	pi.groups[id] = ng
	if typ == p4v1.Update_MODIFY {
		if err := pi.rebind(pi.users(refGroup, id)); err != nil {
			pi.groups[id] = old
			return err
		}
	}
	return nil
}

func (t *Target) readMembers(q *p4v1.ActionProfileMember, yield func(*p4v1.Entity) error) error {
	profiles, err := t.queryProfiles(q.GetActionProfileId())
	if err != nil {
		return err
	}
	for _, pi := range profiles {
		ids := sortedIDs(pi.members)
		for _, id := range ids {
			if q.GetMemberId() != 0 && q.GetMemberId() != id {
				continue
			}
			m := &p4v1.ActionProfileMember{ActionProfileId: pi.p.GetPreamble().GetId(), MemberId: id, Action: pi.members[id].call.Message()}
			if err := yield(&p4v1.Entity{Entity: &p4v1.Entity_ActionProfileMember{ActionProfileMember: m}}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *Target) readGroups(q *p4v1.ActionProfileGroup, yield func(*p4v1.Entity) error) error {
	profiles, err := t.queryProfiles(q.GetActionProfileId())
	if err != nil {
		return err
	}
	for _, pi := range profiles {
		for _, id := range sortedIDs(pi.groups) {
			if q.GetGroupId() != 0 && q.GetGroupId() != id {
				continue
			}
			g := pi.groups[id]
			e := &p4v1.ActionProfileGroup{ActionProfileId: pi.p.GetPreamble().GetId(), GroupId: id, MaxSize: g.maxSize}
			for _, m := range g.members {
				e.Members = append(e.Members, &p4v1.ActionProfileGroup_Member{MemberId: m.id, Weight: m.weight})
			}
			if err := yield(&p4v1.Entity{Entity: &p4v1.Entity_ActionProfileGroup{ActionProfileGroup: e}}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *Target) queryProfiles(id uint32) ([]*profileInfo, error) {
	if id == 0 {
		return t.profList, nil
	}
	pi := t.profiles[id]
	if pi == nil {
		return nil, errf(codes.NotFound, "no action profile with id %#x", id)
	}
	return []*profileInfo{pi}, nil
}

func sortedIDs[V any](m map[uint32]V) []uint32 {
	ids := make([]uint32, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
