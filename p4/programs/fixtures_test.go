package programs_test

import (
	"fmt"
	"net/netip"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/p4/farmem"
	"github.com/tracebed/tracebed/p4/freeina"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/topologies"
)

// fixture is what the conformance rows need to know of a program beyond
// its P4Info: entries it accepts (its bindings check more than the P4Info
// says, such as ports that exist), and how its packet I/O is driven. Every
// id is looked up by name, so the same fixture serves the Go twin and the
// program compiled by p4c.
type fixture struct {
	// entry returns the i-th of at least 16 distinct entries the program
	// accepts.
	entry func(n *p4rt.Names, i int) (*p4v1.TableEntry, error)
	// memberAction returns an action a member of the program's action
	// selector may run (nil when it has no selector).
	memberAction func(n *p4rt.Names) (*p4v1.Action, error)
	// punt, when the program has packet I/O: the default entry that makes
	// a table miss a packet-in, and a route whose action is a packet-in.
	punt *punt
}

type punt struct {
	missToCPU func(n *p4rt.Names) (*p4v1.TableEntry, error)
	route     func(n *p4rt.Names, dst netip.Addr) (*p4v1.TableEntry, error)
}

var fixtures = map[string]*fixture{
	"fwd": {
		entry:        fwdRoute,
		memberAction: forwardTo(1),
		punt:         fwdPunt,
	},
	"farmem": {
		entry: func(n *p4rt.Names, i int) (*p4v1.TableEntry, error) {
			return n.TableEntry(farmem.TableClassify,
				[]p4rt.Match{p4rt.Exact(farmem.FieldType, uint64(1+i/8%4)), p4rt.Exact(farmem.FieldUrgency, uint64(i%8))},
				farmem.ActionSetPriority, []p4rt.Arg{p4rt.P(farmem.ParamPrio, uint64(i%8))}, 0)
		},
		memberAction: forwardTo(1),
		punt:         fwdPunt,
	},
	"freeina": {
		entry: func(n *p4rt.Names, i int) (*p4v1.TableEntry, error) {
			return n.TableEntry(freeina.TableConns, []p4rt.Match{p4rt.Exact(freeina.FieldSrc, uint64(0x0a000001)),
				p4rt.Exact(freeina.FieldDst, uint64(0x0a000002)), p4rt.Exact(freeina.FieldQPN, uint64(0x100+i))},
				freeina.ActionConn, []p4rt.Arg{p4rt.P(freeina.ParamJob, uint64(i%4)), p4rt.P(freeina.ParamWorker, uint64(i%8)), p4rt.P(freeina.ParamPSN, uint64(i))}, 0)
		},
		memberAction: forwardTo(1),
		punt:         fwdPunt,
	},
	"ina": {
		entry: func(n *p4rt.Names, i int) (*p4v1.TableEntry, error) {
			return n.TableEntry(ina.TableLocal, []p4rt.Match{p4rt.Exact(ina.FieldDst, uint64(0x0ac80000+i))}, ina.ActionSetLocal, nil, 0)
		},
	},
}

// fwdRoute is a route to 10.200.0.i out of port 1, as a one-shot set.
func fwdRoute(n *p4rt.Names, i int) (*p4v1.TableEntry, error) {
	a, err := forwardTo(1)(n)
	if err != nil {
		return nil, err
	}
	return routeEntry(n, netip.AddrFrom4([4]byte{10, 200, 0, byte(i)}), a)
}

func routeEntry(n *p4rt.Names, dst netip.Addr, actions ...*p4v1.Action) (*p4v1.TableEntry, error) {
	tid, err := n.TableID(fwd.TableRouteName)
	if err != nil {
		return nil, err
	}
	fid, err := n.MatchFieldID(fwd.TableRouteName, fwd.FieldDst)
	if err != nil {
		return nil, err
	}
	d := dst.As4()
	set := &p4v1.ActionProfileActionSet{}
	for _, a := range actions {
		set.ActionProfileActions = append(set.ActionProfileActions, &p4v1.ActionProfileAction{Action: a, Weight: 1})
	}
	return &p4v1.TableEntry{TableId: tid,
		Match:  []*p4v1.FieldMatch{{FieldId: fid, FieldMatchType: &p4v1.FieldMatch_Exact_{Exact: &p4v1.FieldMatch_Exact{Value: p4rt.EncodeUint(uint64(frameAddr(d)))}}}},
		Action: &p4v1.TableAction{Type: &p4v1.TableAction_ActionProfileActionSet{ActionProfileActionSet: set}}}, nil
}

func frameAddr(a [4]byte) uint32 {
	return uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
}

// forwardTo is fwd.p4's forward(port).
func forwardTo(port uint64) func(n *p4rt.Names) (*p4v1.Action, error) {
	return func(n *p4rt.Names) (*p4v1.Action, error) {
		id, err := n.ActionID(fwd.ActionFwdName)
		if err != nil {
			return nil, err
		}
		pid, err := n.ParamID(fwd.ActionFwdName, fwd.ParamPort)
		if err != nil {
			return nil, err
		}
		return &p4v1.Action{ActionId: id, Params: []*p4v1.Action_Param{{ParamId: pid, Value: p4rt.EncodeUint(port)}}}, nil
	}
}

var fwdPunt = &punt{
	missToCPU: func(n *p4rt.Names) (*p4v1.TableEntry, error) {
		tid, err := n.TableID(fwd.TableMissName)
		if err != nil {
			return nil, err
		}
		aid, err := n.ActionID(fwd.ActionToCPUName)
		if err != nil {
			return nil, err
		}
		return &p4v1.TableEntry{TableId: tid, IsDefaultAction: true,
			Action: &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{ActionId: aid}}}}, nil
	},
	route: func(n *p4rt.Names, dst netip.Addr) (*p4v1.TableEntry, error) {
		aid, err := n.ActionID(fwd.ActionToCPUName)
		if err != nil {
			return nil, err
		}
		return routeEntry(n, dst, &p4v1.Action{ActionId: aid})
	},
}

// udpFrame is a UDP frame from host from of the topology to dst.
func udpFrame(top *topologies.Topology, from string, dst netip.Addr) []byte {
	a := top.Node(from)
	return frame.AppendUDP(nil, frame.UDP{
		SrcMAC: a.MAC, DstMAC: a.Uplink().MAC,
		Src: netip.AddrPortFrom(a.IP, 1000), Dst: netip.AddrPortFrom(dst, 2000),
	}, []byte("conformance"))
}

// genericMatch is a key of table tb that every program accepts for its
// P4Info alone: exact fields set to v (cut to their width), the others
// omitted, and priority 1 where one is needed.
func genericMatch(tb *p4configv1.Table, v uint64) ([]*p4v1.FieldMatch, int32) {
	var ms []*p4v1.FieldMatch
	var prio int32
	for _, mf := range tb.GetMatchFields() {
		switch mf.GetMatchType() {
		case p4configv1.MatchField_EXACT:
			w := mf.GetBitwidth()
			x := v
			if w < 64 {
				x &= 1<<uint(w) - 1
			}
			ms = append(ms, &p4v1.FieldMatch{FieldId: mf.GetId(), FieldMatchType: &p4v1.FieldMatch_Exact_{Exact: &p4v1.FieldMatch_Exact{Value: p4rt.EncodeUint(x)}}})
		case p4configv1.MatchField_TERNARY, p4configv1.MatchField_RANGE, p4configv1.MatchField_OPTIONAL:
			prio = 1
		}
	}
	return ms, prio
}

// zeroAction is action a with every parameter 0.
func zeroAction(a *p4configv1.Action) *p4v1.Action {
	out := &p4v1.Action{ActionId: a.GetPreamble().GetId()}
	for _, p := range a.GetParams() {
		out.Params = append(out.Params, &p4v1.Action_Param{ParamId: p.GetId(), Value: []byte{0}})
	}
	return out
}

func actionByID(info *p4configv1.P4Info, id uint32) *p4configv1.Action {
	for _, a := range info.GetActions() {
		if a.GetPreamble().GetId() == id {
			return a
		}
	}
	return nil
}

// selector returns an action selector of the program and a table it
// implements.
func selector(info *p4configv1.P4Info) (*p4configv1.ActionProfile, *p4configv1.Table) {
	for _, ap := range info.GetActionProfiles() {
		if !ap.GetWithSelector() || len(ap.GetTableIds()) == 0 {
			continue
		}
		for _, tb := range info.GetTables() {
			if tb.GetPreamble().GetId() == ap.GetTableIds()[0] {
				return ap, tb
			}
		}
	}
	return nil, nil
}

func pad(b []byte) []byte { return append([]byte{0, 0}, b...) }

func memberEntity(profile, id uint32, a *p4v1.Action) *p4v1.Entity {
	return &p4v1.Entity{Entity: &p4v1.Entity_ActionProfileMember{ActionProfileMember: &p4v1.ActionProfileMember{
		ActionProfileId: profile, MemberId: id, Action: a}}}
}

func groupEntity(profile, id uint32, maxSize int32, members ...*p4v1.ActionProfileGroup_Member) *p4v1.Entity {
	return &p4v1.Entity{Entity: &p4v1.Entity_ActionProfileGroup{ActionProfileGroup: &p4v1.ActionProfileGroup{
		ActionProfileId: profile, GroupId: id, MaxSize: maxSize, Members: members}}}
}

func counterEntity(id uint32, index *p4v1.Index, data *p4v1.CounterData) *p4v1.Entity {
	return &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{CounterId: id, Index: index, Data: data}}}
}

func groupOf(id uint32, metadata []byte, reps ...*p4v1.Replica) *p4v1.Entity {
	return &p4v1.Entity{Entity: &p4v1.Entity_PacketReplicationEngineEntry{PacketReplicationEngineEntry: &p4v1.PacketReplicationEngineEntry{
		Type: &p4v1.PacketReplicationEngineEntry_MulticastGroupEntry{MulticastGroupEntry: &p4v1.MulticastGroupEntry{
			MulticastGroupId: id, Replicas: reps, Metadata: metadata}}}}}
}

func describe(e *p4v1.Entity) string { return fmt.Sprintf("%v", e) }
