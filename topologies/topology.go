// Package topologies holds tracebed's network topologies: the YAML format
// (containerlab-like), its loader and validator, generators for star,
// leaf-spine and fat-tree networks of any size, shortest-path ECMP routes, and
// the ready files embedded in the binary.
//
// A topology file looks like this (see docs/topology.md for every field):
//
//	name: star
//	topology:
//	  defaults:
//	    link: {rate: 100Gbps, delay: 1us, buffer: 1MiB}
//	    switch: {aggregators: 16384, queues: 8}
//	  nodes:
//	    tor: {kind: switch}
//	    h1: {kind: host}
//	    h2: {kind: host}
//	  links:
//	    - endpoints: [h1:eth0, tor:eth1]
//	    - endpoints: [h2:eth0, tor:eth2]
package topologies

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/tracebed/tracebed/internal/ether"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/internal/yamlx"
)

// Kind is what a node is.
type Kind string

// Node kinds.
const (
	Host   Kind = "host"
	Switch Kind = "switch"
)

// Topology is a validated network: every name is unique, every link joins two
// existing nodes, every host has one link and every host can reach every other.
type Topology struct {
	Name  string
	File  string // where it was loaded from, for messages
	Nodes []*Node
	Links []*Link

	byName map[string]*Node
	byIP   map[netip.Addr]*Node
}

// Node is a host or a switch.
type Node struct {
	Name   string
	Kind   Kind
	Index  int // position in Topology.Nodes
	IP     netip.Addr
	MAC    ether.MAC
	Labels map[string]string

	// Switch resources (zero on hosts).
	Aggregators int           // INA aggregator slots in switch memory
	Queues      int           // strict-priority egress queues per port (1 on hosts)
	Latency     time.Duration // pipeline latency of a switch

	Ports []*Port // Ports[i].Num == i+1, in the order the node's links appear
	Pos   yamlx.Pos
}

// IsHost reports whether n is a host.
func (n *Node) IsHost() bool { return n.Kind == Host }

// Port is one end of a link.
type Port struct {
	Num   int    // 1-based port number on its node
	Iface string // interface name, e.g. "eth1"
	Node  *Node
	Link  *Link
	Peer  *Port
	MAC   ether.MAC
}

func (p *Port) String() string { return fmt.Sprintf("%s:%s", p.Node.Name, p.Iface) }

// Link is a full-duplex link; each direction has its own queue.
type Link struct {
	Index     int
	A, B      *Port
	Rate      units.Rate
	Delay     time.Duration // one-way propagation delay
	Buffer    units.Bytes   // drop-tail limit of each egress queue at a switch
	Loss      float64       // probability a frame is lost, per direction
	Duplicate float64       // probability a frame is delivered twice
	Reorder   float64       // probability a frame is held back so later ones pass it
	Pos       yamlx.Pos
}

// Node returns the node with the given name, or nil.
func (t *Topology) Node(name string) *Node { return t.byName[name] }

// NodeByIP returns the node with the given address, or nil.
func (t *Topology) NodeByIP(ip netip.Addr) *Node { return t.byIP[ip] }

// Hosts returns the hosts in file order.
func (t *Topology) Hosts() []*Node { return t.ofKind(Host) }

// Switches returns the switches in file order.
func (t *Topology) Switches() []*Node { return t.ofKind(Switch) }

func (t *Topology) ofKind(k Kind) []*Node {
	var out []*Node
	for _, n := range t.Nodes {
		if n.Kind == k {
			out = append(out, n)
		}
	}
	return out
}

// Uplink returns the switch port a host is attached to.
func (n *Node) Uplink() *Port {
	if len(n.Ports) == 0 {
		return nil
	}
	return n.Ports[0].Peer
}

// HostMAC returns the MAC tracebed gives the node with index i.
func HostMAC(i int) ether.MAC { return ether.MAC{0x02, 0, 0, 0, byte(i >> 8), byte(i)} }

// PortMAC returns the MAC of port num of the node with index i.
func PortMAC(i, num int) ether.MAC {
	return ether.MAC{0x02, 0x01, byte(i >> 8), byte(i), byte(num >> 8), byte(num)}
}

// hostIP returns the default address of the k-th host: 10.0.0.1, 10.0.0.2, …
// 10.0.0.250, 10.0.1.1, …
func hostIP(k int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(k / 250 >> 8), byte(k / 250), byte(k%250 + 1)})
}

// switchIP returns the default address of the k-th switch: 10.255.0.1, …
func switchIP(k int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 255, byte(k / 250), byte(k%250 + 1)})
}

// QueueCapacity is the most bytes the switches' egress queues can hold
// together: every queue of every switch port full to its link's buffer.
func (t *Topology) QueueCapacity() int64 {
	var b int64
	for _, l := range t.Links {
		for _, n := range []*Node{l.A.Node, l.B.Node} {
			if !n.IsHost() {
				b += int64(n.Queues) * int64(l.Buffer)
			}
		}
	}
	return b
}

// Summary describes the topology in one line.
func (t *Topology) Summary() string {
	rates := map[units.Rate]bool{}
	for _, l := range t.Links {
		rates[l.Rate] = true
	}
	var rs []units.Rate
	for r := range rates {
		rs = append(rs, r)
	}
	slices.Sort(rs)
	return fmt.Sprintf("%s: %d hosts, %d switches, %d links, rates %v", t.Name, len(t.Hosts()), len(t.Switches()), len(t.Links), rs)
}
