package fwd

import (
	_ "embed"
	"fmt"
	"net/netip"
	"slices"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/p4rt"
)

// The pipeline as P4Runtime sees it (fwd.p4, fwd.p4info.txtpb).
//
//	table ingress.ipv4_route   exact hdr.ipv4.dst_addr → ECMP selector ingress.ecmp
//	      actions ingress.forward(port), ingress.send_to_cpu; default const NoAction
//	table ingress.route_miss   keyless; default ingress.drop, or ingress.send_to_cpu
//	counter ingress.forwarded[1], ingress.drops[4] (by drop reason)
//	packet_in {ingress_port: 16}, packet_out {egress_port: 16}
//
// A route is written as a table entry whose action is an action-profile
// member (one port), a group (several ports, weighted: ECMP) or a one-shot
// action set; the topology's routes read back as one-shot action sets.
// This file only declares the bindings; p4rt.Target does the P4Runtime.
const (
	TableRoute     uint32 = 0x02dbbd3d
	TableMiss      uint32 = 0x029e52c8
	ActionForward  uint32 = 0x01948b22
	ActionDrop     uint32 = 0x01fbd6b5
	ActionToCPU    uint32 = 0x01687862
	ProfileECMP    uint32 = 0x11de160d
	CounterForward uint32 = 0x12377b3c
	CounterDrops   uint32 = 0x12096ace

	matchDst  = 1 // match field id of hdr.ipv4.dst_addr
	paramPort = 1 // parameter id of forward's port
)

// Names of fwd.p4's objects, as in its P4Info.
const (
	TableRouteName  = "ingress.ipv4_route"
	FieldDst        = "hdr.ipv4.dst_addr"
	TableMissName   = "ingress.route_miss"
	ActionFwdName   = "ingress.forward"
	ParamPort       = "port"
	ActionDropName  = "ingress.drop"
	ActionToCPUName = "ingress.send_to_cpu"
	CounterFwdName  = "ingress.forwarded"
	CounterDropName = "ingress.drops"
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

// device is the pipeline's P4Runtime face: the Target its objects are
// declared in, fwd.p4's own or that of a program wrapping fwd.
type device struct {
	t    *p4rt.Target
	self bool // t is fwd.p4's own Target
	p    *Pipeline
}

// target returns fwd.p4's own Target, made on first use: the topology's
// routes become its entries then.
func (p *Pipeline) target() *p4rt.Target {
	if p.rt == nil || !p.rt.self {
		t, err := p4rt.NewTarget(P4Info())
		if err == nil {
			err = p.Declare(t)
		}
		if err != nil {
			panic("fwd: " + err.Error()) // the embedded P4Info is fwd's: caught by the tests
		}
		p.rt.self = true
	}
	return p.rt.t
}

// P4Info implements p4rt.Device.
func (p *Pipeline) P4Info() *p4configv1.P4Info { return p.target().P4Info() }

// Write implements p4rt.Device.
func (p *Pipeline) Write(updates []*p4v1.Update) error { return p.target().Write(updates) }

// Read implements p4rt.Device.
func (p *Pipeline) Read(q *p4v1.Entity, yield func(*p4v1.Entity) error) error {
	return p.target().Read(q, yield)
}

// Declare binds fwd.p4's objects in t, whose P4Info must declare them
// with fwd.p4info.txtpb's names (farmem.p4 does): the route and miss
// tables, the forward action's port check, the counters. The pipeline's
// routes become entries of t's ingress.ipv4_route, and later SetRoute
// calls keep them in step. A pipeline is declared in one Target.
func (p *Pipeline) Declare(t *p4rt.Target) error {
	d := &device{t: t, p: p}
	for _, err := range []error{
		t.Action(ActionFwdName, func(c *p4rt.Call) error {
			if port := c.Uint(ParamPort); port < 1 || port >= uint64(len(p.portMAC)) {
				return status.Errorf(codes.InvalidArgument, "port %d: this switch has ports 1–%d", port, len(p.portMAC)-1)
			}
			return nil
		}),
		t.Table(TableRouteName, d.applyRoute),
		t.Table(TableMissName, d.applyMiss),
		t.Counter(CounterFwdName, p4rt.CounterCells{
			Get: func(int) (uint64, uint64) { return p.Counters.Forwarded, 0 },
			Set: func(_ int, pk, _ uint64) { p.Counters.Forwarded = pk },
		}),
		t.Counter(CounterDropName, p4rt.PacketCounter(p.Counters.Drops[:])),
	} {
		if err != nil {
			return fmt.Errorf("fwd: %w", err)
		}
	}
	p.rt = d
	keys := make([][4]byte, 0, len(p.routes))
	for k := range p.routes {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [4]byte) int { return slices.Compare(a[:], b[:]) })
	for _, k := range keys {
		if err := d.sync(k, p.routes[k]); err != nil {
			return fmt.Errorf("fwd: route to %v: %w", netip.AddrFrom4(k), err)
		}
	}
	return nil
}

// applyRoute installs a route: its ports are the resolved actions, each
// repeated by its weight (send_to_cpu is the CPU port).
func (d *device) applyRoute(c *p4rt.Change) error {
	if c.Type == p4v1.Update_DELETE {
		delete(d.p.routes, dstOf(c.Old))
		return nil
	}
	var ports []int
	for _, a := range c.Entry.Actions {
		port := emulator.CPUPort
		if a.Name() == ActionFwdName {
			port = int(a.Uint(ParamPort))
		}
		for range a.Weight {
			ports = append(ports, port)
		}
	}
	if len(ports) == 0 {
		return status.Errorf(codes.FailedPrecondition, "route to %v: its group is empty (fwd.p4 has no action for empty groups)", netip.AddrFrom4(dstOf(c.Entry)))
	}
	d.p.routes[dstOf(c.Entry)] = ports
	return nil
}

func dstOf(e *p4rt.Entry) [4]byte {
	v := e.Exact(FieldDst)
	return [4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
}

// applyMiss sets what a frame without a route meets.
func (d *device) applyMiss(c *p4rt.Change) error {
	d.p.missToCPU = c.Entry.Action() != nil && c.Entry.Action().Name() == ActionToCPUName
	return nil
}

// sync makes the route entry of dst a one-shot set of ports (none: no
// entry), as SetRoute and the topology's routes write them. The ids are
// fwd.p4's, which a wrapping program's P4Info shares.
func (d *device) sync(dst [4]byte, ports []int) error {
	te := &p4v1.TableEntry{TableId: TableRoute, Match: []*p4v1.FieldMatch{{FieldId: matchDst,
		FieldMatchType: &p4v1.FieldMatch_Exact_{Exact: &p4v1.FieldMatch_Exact{Value: dst[:]}}}}}
	exists := false
	if err := d.t.Read(p4rt.Table(te), func(*p4v1.Entity) error { exists = true; return nil }); err != nil {
		return err
	}
	typ := p4v1.Update_INSERT
	switch {
	case len(ports) == 0 && !exists:
		return nil
	case len(ports) == 0:
		typ = p4v1.Update_DELETE
	case exists:
		typ = p4v1.Update_MODIFY
	}
	if typ != p4v1.Update_DELETE {
		set := &p4v1.ActionProfileActionSet{}
		for _, port := range ports {
			set.ActionProfileActions = append(set.ActionProfileActions, &p4v1.ActionProfileAction{Action: forwardAction(port), Weight: 1})
		}
		te.Action = &p4v1.TableAction{Type: &p4v1.TableAction_ActionProfileActionSet{ActionProfileActionSet: set}}
	}
	return d.t.Write([]*p4v1.Update{{Type: typ, Entity: p4rt.Table(te)}})
}

// forwardAction is forward(port), or send_to_cpu for the CPU port.
func forwardAction(port int) *p4v1.Action {
	if port == emulator.CPUPort {
		return &p4v1.Action{ActionId: ActionToCPU}
	}
	return &p4v1.Action{ActionId: ActionForward, Params: []*p4v1.Action_Param{{ParamId: paramPort, Value: p4rt.EncodeUint(uint64(port))}}}
}
