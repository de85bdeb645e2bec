package fwd

import (
	_ "embed"
	"fmt"
	"net/netip"
	"slices"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
)

// The pipeline as P4Runtime sees it (fwd.p4, fwd.p4info.txtpb).
//
//	table ingress.ipv4_route   exact hdr.ipv4.dst_addr → ECMP selector ingress.ecmp
//	action ingress.forward(port), ingress.drop (default)
//	counter ingress.forwarded[1], ingress.drops[4] (by drop reason)
//
// A route is written as a table entry whose action is an action-profile
// member (one port), a group (several ports, weighted: ECMP) or a one-shot
// action set; the topology's routes read back as one-shot action sets.
const (
	TableRoute     uint32 = 0x02000001
	ActionForward  uint32 = 0x01000001
	ActionDrop     uint32 = 0x01000002
	ProfileECMP    uint32 = 0x11000001
	CounterForward uint32 = 0x12000001
	CounterDrops   uint32 = 0x12000002

	matchDst     = 1 // match field id of hdr.ipv4.dst_addr
	paramPort    = 1 // parameter id of forward's port
	maxGroupSize = 64
	maxMembers   = 4096
)

//go:embed fwd.p4info.txtpb
var p4infoText []byte

// P4Info returns the pipeline's P4Info (a fresh copy each call).
func P4Info() *p4configv1.P4Info {
	info := &p4configv1.P4Info{}
	if err := prototext.Unmarshal(p4infoText, info); err != nil {
		panic("fwd: embedded P4Info does not parse: " + err.Error()) // caught by the tests
	}
	return info
}

// rtState is the P4Runtime view of the route table: how each route was
// written, and the ECMP action profile's members and groups.
type rtState struct {
	refs    map[[4]byte]ref
	members map[uint32]int // member id → port
	groups  map[uint32]*group
}

type refKind int

const (
	refOneShot refKind = iota // ports as stored in the route
	refMember
	refGroup
)

type ref struct {
	kind refKind
	id   uint32
}

type group struct {
	members []groupMember
	maxSize int32
}

type groupMember struct {
	id     uint32
	weight int32
}

func (p *Pipeline) state() *rtState {
	if p.rt == nil {
		p.rt = &rtState{refs: map[[4]byte]ref{}, members: map[uint32]int{}, groups: map[uint32]*group{}}
	}
	return p.rt
}

// P4Info implements p4rt.Device.
func (p *Pipeline) P4Info() *p4configv1.P4Info { return P4Info() }

func errorf(c codes.Code, format string, args ...any) error {
	return status.Errorf(c, format, args...)
}

// Write implements p4rt.Device.
func (p *Pipeline) Write(updates []*p4v1.Update) error {
	for i, u := range updates {
		if err := p.write(u); err != nil {
			s, _ := status.FromError(err)
			return status.Errorf(s.Code(), "update %d: %s", i, s.Message())
		}
	}
	return nil
}

func (p *Pipeline) write(u *p4v1.Update) error {
	if u == nil || u.GetEntity() == nil {
		return errorf(codes.InvalidArgument, "update without an entity")
	}
	switch u.GetType() {
	case p4v1.Update_INSERT, p4v1.Update_MODIFY, p4v1.Update_DELETE:
	default:
		return errorf(codes.InvalidArgument, "update type %v: want INSERT, MODIFY or DELETE", u.GetType())
	}
	switch e := u.GetEntity().GetEntity().(type) {
	case *p4v1.Entity_TableEntry:
		return p.writeRoute(u.GetType(), e.TableEntry)
	case *p4v1.Entity_ActionProfileMember:
		return p.writeMember(u.GetType(), e.ActionProfileMember)
	case *p4v1.Entity_ActionProfileGroup:
		return p.writeGroup(u.GetType(), e.ActionProfileGroup)
	case *p4v1.Entity_CounterEntry:
		if u.GetType() != p4v1.Update_MODIFY {
			return errorf(codes.InvalidArgument, "counter entries can only be modified")
		}
		return p.writeCounter(e.CounterEntry)
	case nil:
		return errorf(codes.InvalidArgument, "empty entity")
	default:
		return errorf(codes.Unimplemented, "fwd has no %T entities", e)
	}
}

// routeKey decodes the table entry's match: one exact IPv4 address.
func routeKey(t *p4v1.TableEntry) ([4]byte, error) {
	var key [4]byte
	if t.GetTableId() != TableRoute {
		return key, errorf(codes.NotFound, "no table with id %#x (fwd has ingress.ipv4_route, %#x)", t.GetTableId(), TableRoute)
	}
	if t.GetIsDefaultAction() {
		return key, errorf(codes.PermissionDenied, "the default action of ingress.ipv4_route is const (drop)")
	}
	if t.GetPriority() != 0 {
		return key, errorf(codes.InvalidArgument, "priority %d on an exact-match table", t.GetPriority())
	}
	m := t.GetMatch()
	if len(m) != 1 || m[0].GetFieldId() != matchDst || m[0].GetExact() == nil {
		return key, errorf(codes.InvalidArgument, "ingress.ipv4_route matches exactly one field: exact hdr.ipv4.dst_addr (id %d)", matchDst)
	}
	v, err := uintBytes(m[0].GetExact().GetValue(), 32)
	if err != nil {
		return key, errorf(codes.InvalidArgument, "hdr.ipv4.dst_addr: %v", err)
	}
	return [4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}, nil
}

// uintBytes decodes a P4Runtime bytestring of at most bits bits.
func uintBytes(b []byte, bits int) (uint64, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("empty value")
	}
	for len(b) > 1 && b[0] == 0 {
		b = b[1:]
	}
	if len(b) > 8 {
		return 0, fmt.Errorf("value of %d bytes does not fit %d bits", len(b), bits)
	}
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	if bits < 64 && v>>bits != 0 {
		return 0, fmt.Errorf("value %d does not fit %d bits", v, bits)
	}
	return v, nil
}

// canonical encodes v as a P4Runtime canonical bytestring (no leading zero
// bytes, at least one byte).
func canonical(v uint64) []byte {
	var b []byte
	for v > 0 {
		b = append([]byte{byte(v)}, b...)
		v >>= 8
	}
	if len(b) == 0 {
		b = []byte{0}
	}
	return b
}

// forwardPort checks that a is forward(port) with a port of this switch.
func (p *Pipeline) forwardPort(a *p4v1.Action) (int, error) {
	if a == nil {
		return 0, errorf(codes.InvalidArgument, "missing action")
	}
	if a.GetActionId() != ActionForward {
		return 0, errorf(codes.InvalidArgument, "action %#x: routes take ingress.forward (%#x)", a.GetActionId(), ActionForward)
	}
	ps := a.GetParams()
	if len(ps) != 1 || ps[0].GetParamId() != paramPort {
		return 0, errorf(codes.InvalidArgument, "ingress.forward takes one parameter, port (id %d)", paramPort)
	}
	v, err := uintBytes(ps[0].GetValue(), 9)
	if err != nil {
		return 0, errorf(codes.InvalidArgument, "port: %v", err)
	}
	if v < 1 || int(v) >= len(p.portMAC) {
		return 0, errorf(codes.InvalidArgument, "port %d: this switch has ports 1–%d", v, len(p.portMAC)-1)
	}
	return int(v), nil
}

func (p *Pipeline) writeRoute(typ p4v1.Update_Type, t *p4v1.TableEntry) error {
	key, err := routeKey(t)
	if err != nil {
		return err
	}
	st := p.state()
	_, exists := p.routes[key]
	if err := p4rt.CheckExistence(typ, exists, fmt.Sprintf("route to %v", netip.AddrFrom4(key))); err != nil {
		return err
	}
	if typ == p4v1.Update_DELETE {
		delete(p.routes, key)
		delete(st.refs, key)
		return nil
	}
	var r ref
	var ports []int
	switch a := t.GetAction().GetType().(type) {
	case *p4v1.TableAction_ActionProfileMemberId:
		port, ok := st.members[a.ActionProfileMemberId]
		if !ok {
			return errorf(codes.NotFound, "no ECMP member %d", a.ActionProfileMemberId)
		}
		r, ports = ref{refMember, a.ActionProfileMemberId}, []int{port}
	case *p4v1.TableAction_ActionProfileGroupId:
		g, ok := st.groups[a.ActionProfileGroupId]
		if !ok {
			return errorf(codes.NotFound, "no ECMP group %d", a.ActionProfileGroupId)
		}
		r, ports = ref{refGroup, a.ActionProfileGroupId}, st.groupPorts(g)
	case *p4v1.TableAction_ActionProfileActionSet:
		acts := a.ActionProfileActionSet.GetActionProfileActions()
		if len(acts) == 0 || len(acts) > maxGroupSize {
			return errorf(codes.InvalidArgument, "one-shot action set of %d actions: want 1–%d", len(acts), maxGroupSize)
		}
		for _, pa := range acts {
			port, err := p.forwardPort(pa.GetAction())
			if err != nil {
				return err
			}
			w := pa.GetWeight()
			if w < 0 || w > maxGroupSize {
				return errorf(codes.InvalidArgument, "weight %d: want 1–%d", w, maxGroupSize)
			}
			for range max(w, 1) {
				ports = append(ports, port)
			}
		}
		r = ref{kind: refOneShot}
	case *p4v1.TableAction_Action:
		return errorf(codes.InvalidArgument, "ingress.ipv4_route is implemented by the ECMP selector: give an action-profile member, group or one-shot action set, not a direct action")
	default:
		return errorf(codes.InvalidArgument, "table entry without an action")
	}
	if len(ports) == 0 {
		return errorf(codes.InvalidArgument, "route to %v has no ports (empty group)", netip.AddrFrom4(key))
	}
	p.routes[key] = ports
	st.refs[key] = r
	return nil
}

// groupPorts expands a group into the weighted port list ECMP hashes over.
func (st *rtState) groupPorts(g *group) []int {
	var ports []int
	for _, m := range g.members {
		for range max(m.weight, 1) {
			ports = append(ports, st.members[m.id])
		}
	}
	return ports
}

// refresh recomputes the routes that use member or group id after it changed.
func (p *Pipeline) refresh(kind refKind, id uint32) {
	st := p.state()
	for key, r := range st.refs {
		switch {
		case r.kind == kind && r.id == id && kind == refMember:
			p.routes[key] = []int{st.members[id]}
		case r.kind == refGroup && (kind == refGroup && r.id == id ||
			kind == refMember && slices.ContainsFunc(st.groups[r.id].members, func(m groupMember) bool { return m.id == id })):
			p.routes[key] = st.groupPorts(st.groups[r.id])
		}
	}
}

func (p *Pipeline) writeMember(typ p4v1.Update_Type, m *p4v1.ActionProfileMember) error {
	if m.GetActionProfileId() != ProfileECMP {
		return errorf(codes.NotFound, "no action profile %#x (fwd has ingress.ecmp, %#x)", m.GetActionProfileId(), ProfileECMP)
	}
	id := m.GetMemberId()
	if id == 0 {
		return errorf(codes.InvalidArgument, "member id 0")
	}
	st := p.state()
	_, exists := st.members[id]
	if err := p4rt.CheckExistence(typ, exists, fmt.Sprintf("ECMP member %d", id)); err != nil {
		return err
	}
	if typ == p4v1.Update_INSERT && len(st.members) >= maxMembers {
		return errorf(codes.ResourceExhausted, "ingress.ecmp holds %d members", maxMembers)
	}
	if typ == p4v1.Update_DELETE {
		for gid, g := range st.groups {
			if slices.ContainsFunc(g.members, func(x groupMember) bool { return x.id == id }) {
				return errorf(codes.FailedPrecondition, "ECMP member %d is in group %d", id, gid)
			}
		}
		for key, r := range st.refs {
			if r.kind == refMember && r.id == id {
				return errorf(codes.FailedPrecondition, "ECMP member %d is used by the route to %v", id, netip.AddrFrom4(key))
			}
		}
		delete(st.members, id)
		return nil
	}
	port, err := p.forwardPort(m.GetAction())
	if err != nil {
		return err
	}
	st.members[id] = port
	if typ == p4v1.Update_MODIFY {
		p.refresh(refMember, id)
	}
	return nil
}

func (p *Pipeline) writeGroup(typ p4v1.Update_Type, g *p4v1.ActionProfileGroup) error {
	if g.GetActionProfileId() != ProfileECMP {
		return errorf(codes.NotFound, "no action profile %#x (fwd has ingress.ecmp, %#x)", g.GetActionProfileId(), ProfileECMP)
	}
	id := g.GetGroupId()
	if id == 0 {
		return errorf(codes.InvalidArgument, "group id 0")
	}
	st := p.state()
	old, exists := st.groups[id]
	if err := p4rt.CheckExistence(typ, exists, fmt.Sprintf("ECMP group %d", id)); err != nil {
		return err
	}
	if typ == p4v1.Update_DELETE {
		for key, r := range st.refs {
			if r.kind == refGroup && r.id == id {
				return errorf(codes.FailedPrecondition, "ECMP group %d is used by the route to %v", id, netip.AddrFrom4(key))
			}
		}
		delete(st.groups, id)
		return nil
	}
	maxSize := g.GetMaxSize()
	if typ == p4v1.Update_MODIFY && maxSize == 0 {
		maxSize = old.maxSize
	}
	if maxSize < 0 || maxSize > maxGroupSize {
		return errorf(codes.InvalidArgument, "max_size %d: want 0–%d", maxSize, maxGroupSize)
	}
	limit := int(maxSize)
	if limit == 0 {
		limit = maxGroupSize
	}
	ng := &group{maxSize: maxSize}
	total := 0
	for _, m := range g.GetMembers() {
		if _, ok := st.members[m.GetMemberId()]; !ok {
			return errorf(codes.NotFound, "ECMP group %d: no member %d", id, m.GetMemberId())
		}
		if slices.ContainsFunc(ng.members, func(x groupMember) bool { return x.id == m.GetMemberId() }) {
			return errorf(codes.InvalidArgument, "ECMP group %d: member %d twice", id, m.GetMemberId())
		}
		w := m.GetWeight()
		if w < 0 {
			return errorf(codes.InvalidArgument, "ECMP group %d: weight %d", id, w)
		}
		total += int(max(w, 1))
		ng.members = append(ng.members, groupMember{m.GetMemberId(), w})
	}
	if total > limit {
		return errorf(codes.ResourceExhausted, "ECMP group %d: total weight %d over its size %d", id, total, limit)
	}
	if typ == p4v1.Update_MODIFY && len(ng.members) == 0 {
		for _, r := range st.refs {
			if r.kind == refGroup && r.id == id {
				return errorf(codes.FailedPrecondition, "ECMP group %d is in use and cannot become empty", id)
			}
		}
	}
	st.groups[id] = ng
	if typ == p4v1.Update_MODIFY {
		p.refresh(refGroup, id)
	}
	return nil
}

func (p *Pipeline) writeCounter(c *p4v1.CounterEntry) error {
	cell, err := p.counterCell(c.GetCounterId(), c.GetIndex())
	if err != nil {
		return err
	}
	*cell = uint64(c.GetData().GetPacketCount())
	return nil
}

func (p *Pipeline) counterCell(id uint32, index *p4v1.Index) (*uint64, error) {
	if index == nil {
		return nil, errorf(codes.InvalidArgument, "counter write without an index")
	}
	i := index.GetIndex()
	switch id {
	case CounterForward:
		if i != 0 {
			return nil, errorf(codes.OutOfRange, "ingress.forwarded has index 0 only, not %d", i)
		}
		return &p.Counters.Forwarded, nil
	case CounterDrops:
		if i < 0 || i >= numDrops {
			return nil, errorf(codes.OutOfRange, "ingress.drops has indices 0–%d, not %d", numDrops-1, i)
		}
		return &p.Counters.Drops[i], nil
	}
	return nil, errorf(codes.NotFound, "no counter with id %#x", id)
}

// Read implements p4rt.Device.
func (p *Pipeline) Read(q *p4v1.Entity, yield func(*p4v1.Entity) error) error {
	switch e := q.GetEntity().(type) {
	case *p4v1.Entity_TableEntry:
		return p.readRoutes(e.TableEntry, yield)
	case *p4v1.Entity_ActionProfileMember:
		return p.readMembers(e.ActionProfileMember, yield)
	case *p4v1.Entity_ActionProfileGroup:
		return p.readGroups(e.ActionProfileGroup, yield)
	case *p4v1.Entity_CounterEntry:
		return p.readCounters(e.CounterEntry, yield)
	case nil:
		return errorf(codes.InvalidArgument, "empty read query")
	default:
		return errorf(codes.Unimplemented, "fwd has no %T entities", e)
	}
}

func (p *Pipeline) readRoutes(q *p4v1.TableEntry, yield func(*p4v1.Entity) error) error {
	if id := q.GetTableId(); id != 0 && id != TableRoute {
		return errorf(codes.NotFound, "no table with id %#x", id)
	}
	var keys [][4]byte
	if len(q.GetMatch()) > 0 {
		q2 := &p4v1.TableEntry{TableId: TableRoute, Match: q.GetMatch()}
		key, err := routeKey(q2)
		if err != nil {
			return err
		}
		if _, ok := p.routes[key]; ok {
			keys = append(keys, key)
		}
	} else {
		for key := range p.routes {
			keys = append(keys, key)
		}
		slices.SortFunc(keys, func(a, b [4]byte) int { return slices.Compare(a[:], b[:]) })
	}
	for _, key := range keys {
		if err := yield(&p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: p.routeEntry(key)}}); err != nil {
			return err
		}
	}
	return nil
}

func (p *Pipeline) routeEntry(key [4]byte) *p4v1.TableEntry {
	t := &p4v1.TableEntry{
		TableId: TableRoute,
		Match: []*p4v1.FieldMatch{{FieldId: matchDst, FieldMatchType: &p4v1.FieldMatch_Exact_{
			Exact: &p4v1.FieldMatch_Exact{Value: canonical(uint64(key[0])<<24 | uint64(key[1])<<16 | uint64(key[2])<<8 | uint64(key[3]))}}}},
	}
	r, ok := p.rt.refsOf(key)
	switch {
	case ok && r.kind == refMember:
		t.Action = &p4v1.TableAction{Type: &p4v1.TableAction_ActionProfileMemberId{ActionProfileMemberId: r.id}}
	case ok && r.kind == refGroup:
		t.Action = &p4v1.TableAction{Type: &p4v1.TableAction_ActionProfileGroupId{ActionProfileGroupId: r.id}}
	default:
		set := &p4v1.ActionProfileActionSet{}
		ports := p.routes[key]
		for i := 0; i < len(ports); {
			j := i
			for j < len(ports) && ports[j] == ports[i] {
				j++
			}
			set.ActionProfileActions = append(set.ActionProfileActions, &p4v1.ActionProfileAction{
				Action: forwardAction(ports[i]), Weight: int32(j - i)})
			i = j
		}
		t.Action = &p4v1.TableAction{Type: &p4v1.TableAction_ActionProfileActionSet{ActionProfileActionSet: set}}
	}
	return t
}

func (st *rtState) refsOf(key [4]byte) (ref, bool) {
	if st == nil {
		return ref{}, false
	}
	r, ok := st.refs[key]
	return r, ok && r.kind != refOneShot
}

func forwardAction(port int) *p4v1.Action {
	return &p4v1.Action{ActionId: ActionForward, Params: []*p4v1.Action_Param{{ParamId: paramPort, Value: canonical(uint64(port))}}}
}

func (p *Pipeline) readMembers(q *p4v1.ActionProfileMember, yield func(*p4v1.Entity) error) error {
	if id := q.GetActionProfileId(); id != 0 && id != ProfileECMP {
		return errorf(codes.NotFound, "no action profile %#x", id)
	}
	st := p.state()
	ids := sortedKeys(st.members)
	for _, id := range ids {
		if q.GetMemberId() != 0 && q.GetMemberId() != id {
			continue
		}
		m := &p4v1.ActionProfileMember{ActionProfileId: ProfileECMP, MemberId: id, Action: forwardAction(st.members[id])}
		if err := yield(&p4v1.Entity{Entity: &p4v1.Entity_ActionProfileMember{ActionProfileMember: m}}); err != nil {
			return err
		}
	}
	return nil
}

func (p *Pipeline) readGroups(q *p4v1.ActionProfileGroup, yield func(*p4v1.Entity) error) error {
	if id := q.GetActionProfileId(); id != 0 && id != ProfileECMP {
		return errorf(codes.NotFound, "no action profile %#x", id)
	}
	st := p.state()
	for _, id := range sortedKeys(st.groups) {
		if q.GetGroupId() != 0 && q.GetGroupId() != id {
			continue
		}
		g := st.groups[id]
		e := &p4v1.ActionProfileGroup{ActionProfileId: ProfileECMP, GroupId: id, MaxSize: g.maxSize}
		for _, m := range g.members {
			e.Members = append(e.Members, &p4v1.ActionProfileGroup_Member{MemberId: m.id, Weight: max(m.weight, 1)})
		}
		if err := yield(&p4v1.Entity{Entity: &p4v1.Entity_ActionProfileGroup{ActionProfileGroup: e}}); err != nil {
			return err
		}
	}
	return nil
}

func sortedKeys[V any](m map[uint32]V) []uint32 {
	keys := make([]uint32, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (p *Pipeline) readCounters(q *p4v1.CounterEntry, yield func(*p4v1.Entity) error) error {
	type cells struct {
		id   uint32
		vals []uint64
	}
	all := []cells{{CounterForward, []uint64{p.Counters.Forwarded}}, {CounterDrops, p.Counters.Drops[:]}}
	found := false
	for _, c := range all {
		if q.GetCounterId() != 0 && q.GetCounterId() != c.id {
			continue
		}
		found = true
		for i, v := range c.vals {
			if q.GetIndex() != nil && q.GetIndex().GetIndex() != int64(i) {
				continue
			}
			e := &p4v1.CounterEntry{CounterId: c.id, Index: &p4v1.Index{Index: int64(i)}, Data: &p4v1.CounterData{PacketCount: int64(v)}}
			if err := yield(&p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: e}}); err != nil {
				return err
			}
		}
	}
	if !found {
		return errorf(codes.NotFound, "no counter with id %#x", q.GetCounterId())
	}
	return nil
}
