// Package fwd is the plain IPv4 forwarding pipeline: the data plane every
// tracebed switch runs for traffic that no other pipeline claims, and the Go
// twin of the P4 tutorials' basic.p4 with ECMP.
//
// A frame is looked up by IPv4 destination; the route gives one or more
// egress ports (several for equal-cost paths, chosen by flow hash so a flow
// never reorders). The TTL is decremented, the Ethernet addresses are
// rewritten for the next hop, and the DSCP class selector picks the egress
// queue: queue = DSCP >> 3, so CS0..CS7 map to queues 0..7.
package fwd

import (
	"net/netip"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/topologies"
)

// Drop reasons counted by the pipeline.
const (
	DropMalformed = iota // not a well-formed IPv4 frame
	DropNoRoute          // no route to the destination
	DropTTL              // TTL expired
	DropLocal            // addressed to the switch, and no local handler
	numDrops
)

// DropNames names the drop reasons, indexed by the constants above.
var DropNames = [numDrops]string{"malformed", "no_route", "ttl", "local"}

// Counters are the pipeline's packet counters.
type Counters struct {
	Forwarded uint64
	Drops     [numDrops]uint64
}

// Pipeline is an IPv4 forwarding pipeline. It implements emulator.Pipeline.
// It is not safe for concurrent use; substrates call it from one goroutine.
type Pipeline struct {
	self    netip.Addr
	routes  map[[4]byte][]int
	portMAC []frame.MAC // indexed by port number
	peerMAC []frame.MAC // MAC of the node on the other end of each port
	// Local, when set, receives frames addressed to the switch itself.
	Local    func(now time.Duration, in int, f []byte, out emulator.Emitter)
	Counters Counters

	rt *rtState // P4Runtime view of the routes (p4rt.go), made on first use
}

// New returns the forwarding pipeline of switch sw with the given routes.
func New(sw *topologies.Node, routes topologies.RouteTable) *Pipeline {
	p := &Pipeline{
		self:    sw.IP,
		routes:  make(map[[4]byte][]int, len(routes)),
		portMAC: make([]frame.MAC, len(sw.Ports)+1),
		peerMAC: make([]frame.MAC, len(sw.Ports)+1),
	}
	for _, port := range sw.Ports {
		p.portMAC[port.Num] = port.MAC
		p.peerMAC[port.Num] = port.Peer.MAC
	}
	for dst, ports := range routes {
		p.SetRoute(dst, ports)
	}
	return p
}

// SetRoute installs or replaces the route to dst; no ports removes it.
func (p *Pipeline) SetRoute(dst netip.Addr, ports []int) {
	if p.rt != nil {
		delete(p.rt.refs, dst.As4()) // reads back as a one-shot action set
	}
	if len(ports) == 0 {
		delete(p.routes, dst.As4())
		return
	}
	p.routes[dst.As4()] = append([]int(nil), ports...)
}

// Route returns the egress ports towards dst.
func (p *Pipeline) Route(dst netip.Addr) []int { return p.routes[dst.As4()] }

// Self returns the switch's own address.
func (p *Pipeline) Self() netip.Addr { return p.self }

// Process implements emulator.Pipeline.
func (p *Pipeline) Process(now time.Duration, in int, f []byte, out emulator.Emitter) {
	if !frame.IsIPv4(f) {
		p.Counters.Drops[DropMalformed]++
		return
	}
	dst := frame.DstIPv4(f)
	if dst == p.self {
		if p.Local == nil {
			p.Counters.Drops[DropLocal]++
			return
		}
		p.Local(now, in, f, out)
		return
	}
	p.Forward(f, out)
}

// Forward sends a well-formed IPv4 frame towards its destination. Other
// pipelines call it for the traffic they do not consume.
func (p *Pipeline) Forward(f []byte, out emulator.Emitter) {
	ports := p.routes[frame.DstIPv4(f).As4()]
	if len(ports) == 0 {
		p.Counters.Drops[DropNoRoute]++
		return
	}
	port := ports[0]
	if len(ports) > 1 {
		port = ports[frame.FlowHash(f)%uint32(len(ports))]
	}
	if !frame.DecTTL(f) {
		p.Counters.Drops[DropTTL]++
		return
	}
	p.SendTo(port, int(frame.TOS(f)>>5), f, out)
}

// SendTo rewrites f's Ethernet addresses for the link behind port and emits it.
func (p *Pipeline) SendTo(port, prio int, f []byte, out emulator.Emitter) {
	if port > 0 && port < len(p.portMAC) {
		frame.SetMACs(f, p.portMAC[port], p.peerMAC[port])
	}
	p.Counters.Forwarded++
	out.Emit(port, prio, f)
}
