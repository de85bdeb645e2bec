// Package testplane is the data plane of the engine's own tests. The engine
// (emulator/...) knows none of p4/'s data planes and its tests import none:
// they run this one, on the simulation, in the Go switch, in the testbeds and
// in the switch processes of test binaries.
//
// It forwards IPv4 frames by destination over the switch's shortest-path
// routes (the first of equal-cost ports: no ECMP), decrements the TTL,
// rewrites the Ethernet addresses for the next hop and queues by the DSCP
// class selector (queue = DSCP >> 3); everything else is dropped and counted
// by reason. Its P4Runtime view (P4Info) is small:
//
//	table ingress.route   exact dst (32 bits) → ingress.forward(port) or ingress.to_cpu;
//	                      the topology's routes are its first entries
//	table ingress.miss    keyless; default ingress.drop, or ingress.to_cpu
//	counter ingress.drops[3] by reason: 0 malformed, 1 no_route, 2 ttl
//	packet_in {ingress_port: 16}, packet_out {egress_port: 16}
package testplane

import (
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/topologies"
)

// Name is the program's name: its P4Info's pkg_info.name.
const Name = "testplane"

// Names of the P4Info's objects.
const (
	TableRoute  = "ingress.route"
	FieldDst    = "dst"
	TableMiss   = "ingress.miss"
	ActionFwd   = "ingress.forward"
	ParamPort   = "port"
	ActionDrop  = "ingress.drop"
	ActionToCPU = "ingress.to_cpu"
	CounterDrop = "ingress.drops"
)

// Drop reasons, the indexes of Plane.Drops and of ingress.drops.
const (
	DropMalformed = iota // not an IPv4 frame (or a short packet-out)
	DropNoRoute
	DropTTL
	numDrops
)

const p4infoText = `
pkg_info { name: "testplane" arch: "v1model" }
tables {
  preamble { id: 0x02000001 name: "ingress.route" alias: "route" }
  match_fields { id: 1 name: "dst" bitwidth: 32 match_type: EXACT }
  action_refs { id: 0x01000001 }
  action_refs { id: 0x01000003 }
  action_refs { id: 0x01000002 annotations: "@defaultonly" scope: DEFAULT_ONLY }
  initial_default_action { action_id: 0x01000002 }
  size: 1024
}
tables {
  preamble { id: 0x02000002 name: "ingress.miss" alias: "miss" }
  action_refs { id: 0x01000002 }
  action_refs { id: 0x01000003 }
  initial_default_action { action_id: 0x01000002 }
  size: 1
}
actions {
  preamble { id: 0x01000001 name: "ingress.forward" alias: "forward" }
  params { id: 1 name: "port" bitwidth: 9 }
}
actions { preamble { id: 0x01000002 name: "ingress.drop" alias: "drop" } }
actions { preamble { id: 0x01000003 name: "ingress.to_cpu" alias: "to_cpu" } }
counters {
  preamble { id: 0x12000001 name: "ingress.drops" alias: "drops" }
  spec { unit: PACKETS }
  size: 3
}
controller_packet_metadata {
  preamble { id: 0x04000001 name: "packet_in" alias: "packet_in" annotations: "@controller_header(\"packet_in\")" }
  metadata { id: 1 name: "ingress_port" bitwidth: 16 }
}
controller_packet_metadata {
  preamble { id: 0x04000002 name: "packet_out" alias: "packet_out" annotations: "@controller_header(\"packet_out\")" }
  metadata { id: 1 name: "egress_port" bitwidth: 16 }
}
`

// P4Info returns the program's P4Info (a fresh copy each call).
func P4Info() *p4configv1.P4Info {
	info := &p4configv1.P4Info{}
	if err := prototext.Unmarshal([]byte(p4infoText), info); err != nil {
		panic("testplane: P4Info does not parse: " + err.Error()) // caught by every test that uses it
	}
	return info
}

// Plane is the data plane of one switch. It is a dataplane.Dataplane.
type Plane struct {
	*p4rt.Target
	routes           map[uint32]int // egress port by destination (IPv4, big-endian), a key the map hashes fast
	portMAC, peerMAC []frame.MAC    // by port number
	toCPU            bool           // ingress.miss's default action is to_cpu

	// Forwarded and Drops count frames by outcome (a packet-out counts
	// as forwarded, as p4/fwd counts it).
	Forwarded uint64
	Drops     [numDrops]uint64
	// Prio, when set, picks a frame's egress queue instead of its DSCP
	// class selector.
	Prio func(f []byte) int
}

var _ dataplane.Dataplane = (*Plane)(nil)

// New returns the data plane of switch sw forwarding over routes.
func New(sw *topologies.Node, routes topologies.RouteTable) (*Plane, error) {
	t, err := p4rt.NewTarget(P4Info())
	if err != nil {
		return nil, err
	}
	p := &Plane{Target: t, routes: map[uint32]int{},
		portMAC: make([]frame.MAC, len(sw.Ports)+1), peerMAC: make([]frame.MAC, len(sw.Ports)+1)}
	for _, port := range sw.Ports {
		p.portMAC[port.Num], p.peerMAC[port.Num] = port.MAC, port.Peer.MAC
	}
	for _, err := range []error{
		t.Action(ActionFwd, func(c *p4rt.Call) error {
			if port := c.Uint(ParamPort); port < 1 || port >= uint64(len(p.portMAC)) {
				return fmt.Errorf("port %d: this switch has ports 1–%d", port, len(p.portMAC)-1)
			}
			return nil
		}),
		t.Table(TableRoute, p.applyRoute),
		t.Table(TableMiss, func(c *p4rt.Change) error {
			p.toCPU = c.Entry.Action() != nil && c.Entry.Action().Name() == ActionToCPU
			return nil
		}),
		t.Counter(CounterDrop, p4rt.PacketCounter(p.Drops[:])),
	} {
		if err != nil {
			return nil, fmt.Errorf("testplane: %w", err)
		}
	}
	var updates []*p4v1.Update
	for _, dst := range slices.SortedFunc(maps.Keys(routes), netip.Addr.Compare) {
		a := dst.As4()
		updates = append(updates, p4rt.Insert(p4rt.Table(&p4v1.TableEntry{TableId: idRoute,
			Match: []*p4v1.FieldMatch{{FieldId: 1, FieldMatchType: &p4v1.FieldMatch_Exact_{Exact: &p4v1.FieldMatch_Exact{Value: p4rt.EncodeUint(p4rt.Uint(a[:]))}}}},
			Action: &p4v1.TableAction{Type: &p4v1.TableAction_Action{Action: &p4v1.Action{ActionId: idForward,
				Params: []*p4v1.Action_Param{{ParamId: 1, Value: p4rt.EncodeUint(uint64(routes[dst][0]))}}}}}})))
	}
	if err := t.Write(updates); err != nil {
		return nil, fmt.Errorf("testplane: routes of %s: %w", sw.Name, err)
	}
	return p, nil
}

// Ids of the P4Info's route table and forward action.
const (
	idRoute   = 0x02000001
	idForward = 0x01000001
)

// applyRoute makes an entry of ingress.route the route to its destination.
func (p *Plane) applyRoute(c *p4rt.Change) error {
	if c.Entry != nil && c.Entry.IsDefault {
		return p4rt.KeepDefault(c)
	}
	e := c.Entry
	if c.Type == p4v1.Update_DELETE {
		e = c.Old
	}
	dst := uint32(e.Exact(FieldDst))
	switch {
	case c.Type == p4v1.Update_DELETE:
		delete(p.routes, dst)
	case e.Action().Name() == ActionFwd:
		p.routes[dst] = int(e.Action().Uint(ParamPort))
	default:
		p.routes[dst] = emulator.CPUPort
	}
	return nil
}

// Process implements emulator.Pipeline.
func (p *Plane) Process(_ time.Duration, in int, f []byte, out emulator.Emitter) {
	if in == emulator.CPUPort { // a packet-out: the egress port, then the frame
		if len(f) < 2 {
			p.Drops[DropMalformed]++
			return
		}
		p.Forwarded++ // as p4/fwd counts a packet-out
		out.Emit(int(f[0])<<8|int(f[1]), 0, f[2:])
		return
	}
	if !frame.IsIPv4(f) {
		p.miss(in, f, DropMalformed, out)
		return
	}
	dst := frame.DstIPv4(f).As4()
	port, ok := p.routes[binary.BigEndian.Uint32(dst[:])]
	if !ok {
		p.miss(in, f, DropNoRoute, out)
		return
	}
	if port == emulator.CPUPort {
		p.punt(in, f, out)
		return
	}
	if !frame.DecTTL(f) {
		p.Drops[DropTTL]++
		return
	}
	prio := int(frame.TOS(f) >> 5)
	if p.Prio != nil {
		prio = p.Prio(f)
	}
	frame.SetMACs(f, p.portMAC[port], p.peerMAC[port])
	p.Forwarded++
	out.Emit(port, prio, f)
}

// miss drops f, counted under reason, or sends it to the controller.
func (p *Plane) miss(in int, f []byte, reason int, out emulator.Emitter) {
	if p.toCPU {
		p.punt(in, f, out)
		return
	}
	p.Drops[reason]++
}

// punt sends a copy of f to the controller behind the packet_in header.
func (p *Plane) punt(in int, f []byte, out emulator.Emitter) {
	b := make([]byte, 2+len(f))
	b[0], b[1] = byte(in>>8), byte(in)
	copy(b[2:], f)
	out.Emit(emulator.CPUPort, 0, b)
}

// SimPipeline builds the plane for the simulation (sim.Options.Pipeline).
func SimPipeline(sw *topologies.Node, routes topologies.RouteTable) (emulator.Pipeline, error) {
	return New(sw, routes)
}

// Program returns the plane as the substrates load it. It has no P4
// source: bmv2 cannot run it.
func Program() dataplane.Program {
	return dataplane.Program{Name: Name, P4Info: P4Info(),
		New: func(sw *topologies.Node, routes topologies.RouteTable) (dataplane.Dataplane, error) {
			return New(sw, routes)
		}}
}

// Registry returns a registry with the plane alone, for switch processes
// of test binaries (switchcmd.Main).
func Registry() (*dataplane.Registry, error) { return dataplane.NewRegistry(Program()) }
