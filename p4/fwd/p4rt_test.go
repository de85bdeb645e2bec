package fwd

import (
	"net/netip"
	"slices"
	"testing"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/topologies"
)

func leaf(t testing.TB) *Pipeline {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "leafspine", Spines: 2, Leaves: 2, HostsPerLeaf: 2})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("ls")
	if err != nil {
		t.Fatal(err)
	}
	return New(top.Node("leaf1"), top.Routes()["leaf1"])
}

func TestP4InfoParses(t *testing.T) {
	info := P4Info()
	if info.GetPkgInfo().GetName() != "fwd" {
		t.Fatalf("pkg name %q", info.GetPkgInfo().GetName())
	}
	ids := map[uint32]bool{}
	for _, tb := range info.GetTables() {
		ids[tb.GetPreamble().GetId()] = true
	}
	for _, a := range info.GetActions() {
		ids[a.GetPreamble().GetId()] = true
	}
	for _, a := range info.GetActionProfiles() {
		ids[a.GetPreamble().GetId()] = true
	}
	for _, c := range info.GetCounters() {
		ids[c.GetPreamble().GetId()] = true
	}
	for _, id := range []uint32{TableRoute, ActionForward, ActionDrop, ProfileECMP, CounterForward, CounterDrops} {
		if !ids[id] {
			t.Errorf("id %#x not in the P4Info", id)
		}
	}
}

func addr(s string) []byte { a := netip.MustParseAddr(s).As4(); return a[:] }

func route(dst string, action *p4v1.TableAction) *p4v1.Entity {
	return &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{
		TableId: TableRoute,
		Match:   []*p4v1.FieldMatch{{FieldId: 1, FieldMatchType: &p4v1.FieldMatch_Exact_{Exact: &p4v1.FieldMatch_Exact{Value: addr(dst)}}}},
		Action:  action,
	}}}
}

func member(id uint32, port byte) *p4v1.Entity {
	return &p4v1.Entity{Entity: &p4v1.Entity_ActionProfileMember{ActionProfileMember: &p4v1.ActionProfileMember{
		ActionProfileId: ProfileECMP, MemberId: id,
		Action: &p4v1.Action{ActionId: ActionForward, Params: []*p4v1.Action_Param{{ParamId: 1, Value: []byte{port}}}}}}}
}

func grp(id uint32, members ...uint32) *p4v1.Entity {
	g := &p4v1.ActionProfileGroup{ActionProfileId: ProfileECMP, GroupId: id}
	for _, m := range members {
		g.Members = append(g.Members, &p4v1.ActionProfileGroup_Member{MemberId: m, Weight: 1})
	}
	return &p4v1.Entity{Entity: &p4v1.Entity_ActionProfileGroup{ActionProfileGroup: g}}
}

func upd(t p4v1.Update_Type, e *p4v1.Entity) *p4v1.Update { return &p4v1.Update{Type: t, Entity: e} }

func TestDeviceRoutes(t *testing.T) {
	p := leaf(t)
	var d p4rt.Device = p
	// The topology's routes read back as one-shot action sets: leaf1 has
	// 2 hosts on ports 1-2, spines on ports 3-4.
	var entries []*p4v1.Entity
	if err := d.Read(&p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{}}}, func(e *p4v1.Entity) error {
		entries = append(entries, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(p.routes) || len(entries) == 0 {
		t.Fatalf("read %d routes, pipeline has %d", len(entries), len(p.routes))
	}
	remote := netip.MustParseAddr("10.0.0.3") // under leaf2: ECMP over both spines
	if got := p.Route(remote); !slices.Equal(got, []int{3, 4}) {
		t.Fatalf("topology route to %v: %v", remote, got)
	}
	steps := []struct {
		name string
		u    *p4v1.Update
		code codes.Code
	}{
		{"member 1", upd(p4v1.Update_INSERT, member(1, 3)), codes.OK},
		{"member 2", upd(p4v1.Update_INSERT, member(2, 4)), codes.OK},
		{"member again", upd(p4v1.Update_INSERT, member(2, 4)), codes.AlreadyExists},
		{"member bad port", upd(p4v1.Update_INSERT, member(9, 99)), codes.InvalidArgument},
		{"group", upd(p4v1.Update_INSERT, grp(10, 1, 2)), codes.OK},
		{"group unknown member", upd(p4v1.Update_INSERT, grp(11, 1, 7)), codes.NotFound},
		{"insert existing route", upd(p4v1.Update_INSERT, route("10.0.0.3", groupAction(10))), codes.AlreadyExists},
		{"modify route to member", upd(p4v1.Update_MODIFY, route("10.0.0.3", memberAction(1))), codes.OK},
		{"new route to group", upd(p4v1.Update_INSERT, route("10.9.9.9", groupAction(10))), codes.OK},
		{"direct action refused", upd(p4v1.Update_INSERT, route("10.9.9.8", &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: forwardAction(1)}})), codes.InvalidArgument},
		{"delete member in use", upd(p4v1.Update_DELETE, member(1, 3)), codes.FailedPrecondition},
		{"delete group in use", upd(p4v1.Update_DELETE, grp(10)), codes.FailedPrecondition},
		{"delete missing route", upd(p4v1.Update_DELETE, route("10.9.9.7", nil)), codes.NotFound},
		{"wrong table", upd(p4v1.Update_INSERT, &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{TableId: 42}}}), codes.NotFound},
		{"register unsupported", upd(p4v1.Update_MODIFY, &p4v1.Entity{Entity: &p4v1.Entity_RegisterEntry{RegisterEntry: &p4v1.RegisterEntry{}}}), codes.Unimplemented},
		{"no entity", &p4v1.Update{Type: p4v1.Update_INSERT}, codes.InvalidArgument},
		{"unspecified type", &p4v1.Update{Entity: member(5, 1)}, codes.InvalidArgument},
	}
	for _, s := range steps {
		err := d.Write([]*p4v1.Update{s.u})
		if got := status.Code(err); got != s.code {
			t.Errorf("%s: code %v (%v), want %v", s.name, got, err, s.code)
		}
	}
	if got := p.Route(remote); !slices.Equal(got, []int{3}) {
		t.Errorf("route to member 1: ports %v", got)
	}
	if got := p.Route(netip.MustParseAddr("10.9.9.9")); !slices.Equal(got, []int{3, 4}) {
		t.Errorf("route to group 10: ports %v", got)
	}
	// Modifying a member moves every route that uses it.
	if err := d.Write([]*p4v1.Update{upd(p4v1.Update_MODIFY, member(1, 2))}); err != nil {
		t.Fatal(err)
	}
	if got := p.Route(remote); !slices.Equal(got, []int{2}) {
		t.Errorf("after modifying member 1: ports %v", got)
	}
	if got := p.Route(netip.MustParseAddr("10.9.9.9")); !slices.Equal(got, []int{2, 4}) {
		t.Errorf("group after modifying member 1: ports %v", got)
	}
	// Reading a route back gives the reference it was written with.
	var got []*p4v1.Entity
	d.Read(route("10.0.0.3", nil), func(e *p4v1.Entity) error { got = append(got, e); return nil })
	if len(got) != 1 || got[0].GetTableEntry().GetAction().GetActionProfileMemberId() != 1 {
		t.Errorf("read back %v", got)
	}
	// Delete the route, then the member and group can go.
	for _, u := range []*p4v1.Update{
		upd(p4v1.Update_DELETE, route("10.0.0.3", nil)),
		upd(p4v1.Update_DELETE, route("10.9.9.9", nil)),
		upd(p4v1.Update_DELETE, grp(10)),
		upd(p4v1.Update_DELETE, member(1, 0)),
	} {
		if err := d.Write([]*p4v1.Update{u}); err != nil {
			t.Errorf("%v: %v", u, err)
		}
	}
	if p.Route(remote) != nil {
		t.Error("route still there after delete")
	}
}

func memberAction(id uint32) *p4v1.TableAction {
	return &p4v1.TableAction{Type: &p4v1.TableAction_ActionProfileMemberId{ActionProfileMemberId: id}}
}

func groupAction(id uint32) *p4v1.TableAction {
	return &p4v1.TableAction{Type: &p4v1.TableAction_ActionProfileGroupId{ActionProfileGroupId: id}}
}

func TestDeviceCounters(t *testing.T) {
	p := leaf(t)
	p.Counters.Forwarded = 7
	p.Counters.Drops[DropNoRoute] = 3
	var got []*p4v1.CounterEntry
	if err := p.Read(&p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{}}}, func(e *p4v1.Entity) error {
		got = append(got, e.GetCounterEntry())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1+NumDrops || got[0].GetData().GetPacketCount() != 7 || got[1+DropNoRoute].GetData().GetPacketCount() != 3 {
		t.Errorf("counters %v", got)
	}
	reset := &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{CounterId: CounterDrops, Index: &p4v1.Index{Index: DropNoRoute}, Data: &p4v1.CounterData{}}}}
	if err := p.Write([]*p4v1.Update{upd(p4v1.Update_MODIFY, reset)}); err != nil {
		t.Fatal(err)
	}
	if p.Counters.Drops[DropNoRoute] != 0 {
		t.Error("counter not reset")
	}
	bad := &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{CounterId: CounterDrops, Index: &p4v1.Index{Index: 99}}}}
	if err := p.Write([]*p4v1.Update{upd(p4v1.Update_MODIFY, bad)}); status.Code(err) != codes.OutOfRange {
		t.Errorf("out-of-range index: %v", err)
	}
}

// FuzzDeviceWrite feeds arbitrary WriteRequests to the device: it must
// answer with an error or apply them, never panic, and its forwarding
// state must stay consistent with what it reads back.
func FuzzDeviceWrite(f *testing.F) {
	seed, _ := proto.Marshal(&p4v1.WriteRequest{Updates: []*p4v1.Update{
		upd(p4v1.Update_INSERT, member(1, 3)), upd(p4v1.Update_INSERT, grp(2, 1)),
		upd(p4v1.Update_INSERT, route("10.1.2.3", groupAction(2))),
	}})
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req p4v1.WriteRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		p := leaf(t)
		p.Write(req.GetUpdates())
		n := 0
		if err := p.Read(&p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{}}}, func(e *p4v1.Entity) error {
			n++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if n != len(p.routes) {
			t.Fatalf("read %d routes, have %d", n, len(p.routes))
		}
		for key, ports := range p.routes {
			if len(ports) == 0 {
				t.Fatalf("route %v with no ports", key)
			}
			for _, port := range ports {
				if port < 1 || port >= len(p.portMAC) {
					t.Fatalf("route %v to port %d", key, port)
				}
			}
		}
	})
}
